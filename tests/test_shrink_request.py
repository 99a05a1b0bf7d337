"""Shrinking a request body made by an SDK: the new body keeps its shape, is priced again from what was written, and
goes back through the same SDK's own request types."""

from __future__ import annotations

import base64
import io
import json

import PIL.Image
import pytest

from mmtok.budgets.pricing import price_request
from mmtok.budgets.shrink.request import shrink_request
from mmtok.request import parse_body
from tests.sdk_bodies import (
    ANTHROPIC_REPLY,
    OPENAI_CHAT_REPLY,
    Capture,
    anthropic_messages,
    b64,
    data_url,
    gemini_generate,
    image_bytes,
    openai_chat,
)

BARS = ["ssim>=0.90"]


@pytest.fixture(scope="module")
def photo(samples) -> bytes:
    return image_bytes(samples / "astronaut.png", (2048, 2048), "PNG")


def _decoded(url_or_b64: str) -> PIL.Image.Image:
    data = url_or_b64.split(",", 1)[1] if url_or_b64.startswith("data:") else url_or_b64
    return PIL.Image.open(io.BytesIO(base64.b64decode(data)))


def test_a_chat_body_is_rewritten_in_its_own_shape_and_the_sdk_takes_it(photo, tmp_path):
    import openai

    body = openai_chat(
        model="gpt-4o",
        temperature=0.2,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "Who is this?"},
            {"type": "image_url", "image_url": {"url": data_url(photo, "image/png"), "detail": "high"}}]}],
    )  # fmt: skip
    result = shrink_request(body, keep=BARS, out=tmp_path)
    ((where, part),) = result.parts
    assert where == "messages[0].content[1]" and part.status == "shrunk"
    new = result.body
    assert new["temperature"] == 0.2 and new["messages"][0]["content"][0] == {"type": "text", "text": "Who is this?"}
    image = new["messages"][0]["content"][1]["image_url"]
    assert image["detail"] == part.detail and _decoded(image["url"]).size == (part.media.width, part.media.height)
    assert result.after.tokens("image") < result.before.tokens("image")
    assert result.after.total_cost == price_request(new).total_cost  # priced again from what was written
    capture = Capture(OPENAI_CHAT_REPLY)
    openai.OpenAI(api_key="sk-test", http_client=capture.client()).chat.completions.create(**new)
    assert json.loads(capture.body) == new  # the SDK sends the new body as it is


def test_an_anthropic_body_keeps_cache_control_and_goes_back_through_the_sdk(photo):
    import anthropic
    import httpx2

    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(photo)},
             "cache_control": {"type": "ephemeral"}}  # fmt: skip
    body = anthropic_messages(model="claude-opus-4-7", max_tokens=100, messages=[{"role": "user", "content": [
        block, {"type": "text", "text": "Describe."}]}])  # fmt: skip
    result = shrink_request(body, keep=BARS)
    new_block = result.body["messages"][0]["content"][0]
    assert new_block["cache_control"] == {"type": "ephemeral"} and new_block["source"]["type"] == "base64"
    assert result.after.tokens("image") < result.before.tokens("image")
    capture = Capture(ANTHROPIC_REPLY)
    anthropic.Anthropic(api_key="sk-ant", http_client=capture.client(httpx2)).messages.create(**result.body)
    assert json.loads(capture.body) == result.body


def test_a_gemini_body_keeps_its_spelling_and_parses_as_sdk_types(photo):
    from google.genai import types

    _, body = gemini_generate("gemini-2.5-flash", [types.Content(role="user", parts=[
        types.Part(text="Describe."), types.Part.from_bytes(data=photo, mime_type="image/png")])])  # fmt: skip
    result = shrink_request(body, "gemini-2.5-flash", keep=BARS)
    new = result.body
    part = new["contents"][0]["parts"][1]
    assert set(part) >= {"inlineData"} and set(part["inlineData"]) == {"mime_type", "data"}  # as the SDK wrote it
    assert types.Content.model_validate(new["contents"][0]).parts[1].inline_data.mime_type.startswith("image/")
    assert parse_body(new).api == "gemini-generate"
    assert result.after.total_cost <= result.before.total_cost


def test_a_part_that_cannot_be_read_is_left_as_it_is_and_said(photo):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(photo, "image/png")}},
        {"type": "image_url", "image_url": {"url": "https://files.example.invalid/x.png"}}]}]}  # fmt: skip
    from mmtok.media.remote import UrlPolicy
    from mmtok.request import Policy

    result = shrink_request(body, keep=BARS, policy=Policy(urls=UrlPolicy(read=False)))
    assert len(result.parts) == 1 and result.left[0].startswith("messages[0].content[1]: ")
    assert result.body["messages"][0]["content"][1] == body["messages"][0]["content"][1]
    assert not result.after.complete  # the URL part is still not counted: said, not zero


def test_a_responses_file_part_holding_an_image_becomes_a_clean_input_image(photo):
    import openai

    from tests.sdk_bodies import OPENAI_RESPONSE_REPLY, openai_responses

    body = openai_responses(model="gpt-4.1", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Describe."},
        {"type": "input_file", "filename": "photo.png", "file_data": data_url(photo, "image/png")}]}])  # fmt: skip
    result = shrink_request(body, keep=BARS)
    part = result.body["input"][0]["content"][1]
    assert part["type"] == "input_image" and set(part) <= {"type", "image_url", "detail"}
    capture = Capture(OPENAI_RESPONSE_REPLY)
    openai.OpenAI(api_key="sk-test", http_client=capture.client()).responses.create(**result.body)
    assert json.loads(capture.body) == result.body


def test_an_interactions_body_goes_back_through_the_sdk(photo):
    from tests.sdk_bodies import INTERACTION_REPLY, gemini_interactions

    image = {"type": "image", "data": b64(photo), "mime_type": "image/png"}
    body = gemini_interactions(model="gemini-3-flash-preview", input=[{"type": "text", "text": "Describe"}, image])
    result = shrink_request(body, keep=BARS)
    step = result.body["input"][0]
    assert step["type"] == "user_input" and step["content"][1]["type"] == "image"
    assert result.after.total_cost <= result.before.total_cost
    from google import genai
    from google.genai import types

    capture = Capture(INTERACTION_REPLY)
    client = genai.Client(api_key="g", http_options=types.HttpOptions(httpx_client=capture.client()))
    client.interactions.create(**result.body)
    assert json.loads(capture.body)["input"] == result.body["input"]


def test_an_audio_part_is_written_back_as_audio(samples):
    from mmtok.request.write import Media, write_body

    wav = (samples / "speech.wav").read_bytes()
    audio = {"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}}
    body = {"model": "gpt-4o-audio-preview", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Transcribe."}, audio]}]}  # fmt: skip
    request = parse_body(body)
    new = write_body(request, {1: [Media(wav[:44] + wav[44:1000], "audio/wav")]})
    assert new["messages"][0]["content"][1] == {"type": "input_audio", "input_audio": {
        "data": b64(wav[:1000]), "format": "wav"}}  # fmt: skip
    assert new["messages"][0]["content"][0] == body["messages"][0]["content"][0]


def test_a_body_shrunk_for_another_providers_model_says_so(photo):
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(photo, "image/png"), "detail": "high"}}]}])  # fmt: skip
    result = shrink_request(body, "claude-opus-4-7", keep=BARS)
    (warning,) = result.warnings
    assert "an openai body (model gpt-4o) shrunk for claude-opus-4-7, an anthropic model" in warning
    assert result.body["model"] == "gpt-4o"
    assert shrink_request(body, keep=BARS).warnings == []
