"""API request bodies made by the official SDKs, read and priced part by part against each rule's own count."""

from __future__ import annotations

import base64
import json

import pytest

import mmtok
from mmtok.budgets.pricing import image_tokens, price_request
from mmtok.errors import RequestError
from mmtok.request import parse_body
from tests.sdk_bodies import (
    anthropic_count_tokens,
    anthropic_messages,
    b64,
    data_url,
    gemini_generate,
    gemini_interactions,
    image_bytes,
    openai_chat,
    openai_responses,
)

AT = "2026-12-01"


@pytest.fixture(scope="module")
def photo_1024(samples) -> bytes:
    return image_bytes(samples / "chelsea.jpg", (1024, 1024))


def _line(quote, item):
    (line,) = [ln for ln in quote.lines if ln.item == item]
    return line


def test_chat_body_with_one_high_detail_image_costs_765_plus_its_text(photo_1024):
    body = openai_chat(
        model="gpt-4o",
        max_tokens=300,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": data_url(photo_1024, "image/jpeg"), "detail": "high"}},
                ],
            }
        ],
    )
    assert len(body) > 100_000  # the base64 image: counted as text, it was 150,000+ tokens
    quote = price_request(body, at=AT)
    image = _line(quote, "messages[0].content[1]")
    assert (image.modality, image.tokens, image.label) == ("image", 765, "exact")
    assert image.working.endswith("85 + 170 x 4 = 765")
    text = _line(quote, "messages[0]")
    assert (text.tokens, text.label) == (6, "exact")  # "What is in this image?" in o200k_base
    framing = _line(quote, "<message framing>")
    assert (framing.tokens, framing.label) == (1 + 3 + 3, "estimate")  # "user", 3 per message, 3 for the reply
    assert "OpenAI's cookbook" in framing.working
    output = _line(quote, "output")
    assert (output.tokens, output.label) == (300, "upper bound")
    assert quote.input_tokens == 765 + 6 + 7 and quote.complete and quote.model == "gpt-4o"
    assert quote.total_cost < 0.01  # about $0.005, where the text-rate reading said $0.39


def test_chat_body_detail_low_and_auto_follow_the_part_not_the_request(photo_1024):
    url = data_url(photo_1024, "image/jpeg")
    body = openai_chat(
        model="gpt-4o",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    )
    quote = price_request(body, at=AT)
    assert _line(quote, "messages[0].content[0]").tokens == 85
    auto = _line(quote, "messages[0].content[1]")
    assert auto.tokens == 765 and auto.label == "upper bound"  # detail=auto on tile models: an upper bound


def test_responses_body_with_instructions_image_and_budget(photo_1024):
    body = openai_responses(
        model="gpt-4.1",
        instructions="Answer in one word.",
        max_output_tokens=50,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Which animal?"},
                    {"type": "input_image", "image_url": data_url(photo_1024, "image/jpeg"), "detail": "high"},
                ],
            }
        ],
    )
    request = parse_body(body)
    assert request.api == "openai-responses" and request.max_output_tokens == 50
    quote = price_request(request, at=AT)
    assert _line(quote, "input[0].content[1]").tokens == 765  # gpt-4.1 has gpt-4o's tile rule
    assert _line(quote, "instructions").tokens > 0
    assert "<message framing>" not in [ln.item for ln in quote.lines]  # not published for Responses
    assert quote.output_tokens == 50


def test_anthropic_body_counts_image_document_text_and_tool_prompt(samples):
    photo = (samples / "chelsea.jpg").read_bytes()
    body = anthropic_messages(
        model="claude-opus-4-7",
        max_tokens=1024,
        system="You are a careful reader.",
        tools=[{"name": "lookup", "description": "Look a word up.", "input_schema": {"type": "object"}}],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(photo)}},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "A note."}},
                    {"type": "text", "text": "Describe the cat."},
                ],
            }
        ],
    )
    quote = price_request(body, at=AT)
    image = _line(quote, "messages[0].content[0]")
    assert image.tokens == mmtok.image_tokens(451, 300, "claude-opus-4-7") and image.label == "exact"
    tool = _line(quote, "<tool prompt>")
    assert (tool.tokens, tool.label) == (675, "documented") and "tool use overview, Pricing" in tool.working
    assert _line(quote, "tools").tokens > 0 and _line(quote, "system").tokens > 0
    texts = {p.where: p.text for p in parse_body(body).parts if p.kind == "text"}
    assert texts["messages[0]"] == "A note.\nDescribe the cat."  # a text document joins its message's text


def test_anthropic_count_tokens_body_has_no_output_budget(samples):
    photo = (samples / "rocket_rotated.jpg").read_bytes()
    body = anthropic_count_tokens(
        model="claude-sonnet-4-6",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(photo)}},
                ],
            }
        ],
    )
    quote = price_request(body, at=AT)
    assert quote.output_tokens == 0
    assert _line(quote, "messages[0].content[0]").tokens == image_tokens(640, 427, "claude-sonnet-4-6")


def test_gemini_generate_body_reads_part_and_request_media_resolution(samples, photo_1024):
    from google.genai import types

    low = types.MediaResolution.MEDIA_RESOLUTION_LOW
    speech = (samples / "speech.wav").read_bytes()
    path, body = gemini_generate(
        "gemini-3-flash-preview",
        [
            types.Content(
                role="user",
                parts=[
                    types.Part(text="Describe both."),
                    types.Part.from_bytes(
                        data=photo_1024,
                        mime_type="image/jpeg",
                        media_resolution=types.PartMediaResolutionLevel.MEDIA_RESOLUTION_HIGH,
                    ),
                    types.Part.from_bytes(data=photo_1024, mime_type="image/jpeg"),
                    types.Part.from_bytes(data=speech, mime_type="audio/wav"),
                ],
            )
        ],
        types.GenerateContentConfig(media_resolution=low, max_output_tokens=200),
    )
    assert "gemini-3-flash-preview:generateContent" in path
    request = parse_body(body)
    assert request.api == "gemini-generate" and request.model is None and request.media_resolution == "low"
    with pytest.raises(mmtok.PriceError, match="names no model"):
        price_request(request, at=AT)
    quote = price_request(request, "gemini-3-flash-preview", at=AT)
    assert _line(quote, "contents[0].parts[1]").tokens == 1120  # its own level: high
    assert _line(quote, "contents[0].parts[2]").tokens == 280  # the request's: low
    audio = _line(quote, "contents[0].parts[3]")
    seconds = mmtok.load(samples / "speech.wav").duration_s
    assert audio.modality == "audio" and audio.tokens == pytest.approx(25 * seconds, abs=1)  # Gemini 3: 25/s


def test_gemini_interactions_body_from_the_sdk(photo_1024):
    body = gemini_interactions(
        model="gemini-3-flash-preview",
        input=[
            {"type": "text", "text": "Describe"},
            {"type": "image", "data": b64(photo_1024), "mime_type": "image/jpeg", "resolution": "low"},
        ],
        generation_config={"max_output_tokens": 100},
    )
    request = parse_body(body)
    assert request.api == "gemini-interactions" and request.model == "gemini-3-flash-preview"
    quote = price_request(request, at=AT)
    assert _line(quote, "input[0].content[1]").tokens == 280
    # Gemini 3 thinks by default, and Google's thinking page does not count thoughts within max_output_tokens: the
    # reply is bounded by the model's output limit, and the working says why
    output = _line(quote, "output")
    assert quote.output_tokens == 65_536 and "max_output_tokens: 100 + thinking on by default" in output.working
    thinking_off = {**json.loads(body), "generation_config": {"max_output_tokens": 100, "thinking_config": {
        "thinking_budget": 0}}}  # fmt: skip
    assert price_request(thinking_off, at=AT).output_tokens == 100


def test_a_provider_file_id_makes_the_quote_incomplete_not_zero():
    body = openai_responses(
        model="gpt-4o",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Summarise."},
                    {"type": "input_file", "file_id": "file-abc123"},
                ],
            }
        ],
    )
    quote = price_request(body, at=AT)
    assert not quote.complete
    assert quote.missing == ("input[0].content[1]: a file uploaded to the provider (file-abc123): its content is "
                             "not in the body",)  # fmt: skip


def test_another_providers_model_gets_its_own_default_detail(photo_1024):
    body = openai_chat(
        model="gpt-4o",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url(photo_1024, "image/jpeg"), "detail": "low"}}
                ],
            }
        ],
    )
    quote = price_request(body, "gemini-3-flash-preview", at=AT)
    assert _line(quote, "messages[0].content[0]").tokens == 1120  # Gemini 3's default, not OpenAI's "low"


def test_service_tier_flex_in_the_body_prices_flex(photo_1024):
    message = [{"role": "user", "content": "Hello"}]
    standard = price_request(openai_chat(model="gpt-5.2", messages=message), at=AT)
    flex = price_request(openai_chat(model="gpt-5.2", messages=message, service_tier="flex"), at=AT)
    assert flex.option == "flex" and flex.total_cost < standard.total_cost


# ----------------------------------------------------------------------------------------------- bad bodies
def test_malformed_json_is_one_line_naming_the_input():
    with pytest.raises(RequestError, match=r"^body.json: not valid JSON \(Expecting"):
        parse_body(b'{"model": "gpt-4o", "messages": [', source="body.json")


def test_a_json_file_that_is_no_request_says_so():
    with pytest.raises(RequestError, match=r"not a request body of a known API .* its keys: name, version"):
        parse_body(json.dumps({"name": "mmtok", "version": 1}), source="package.json")


def test_data_url_whose_bytes_are_not_an_image_is_left_out_with_its_reason():
    fake = base64.b64encode(b'{"not": "an image"}' * 40).decode()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{fake}"}}]}]}  # fmt: skip
    quote = price_request(body, at=AT)
    assert quote.missing == (
        "messages[0].content[0]: declared image/png, but its bytes are not an image (they start like JSON)",
    )


def test_a_100_mb_base64_part_is_refused_in_one_line_without_decoding_it():
    part = "A" * (100 * 1024 * 1024 // 3 * 4)
    body = {"model": "claude-opus-4-7", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": part}}]}]}  # fmt: skip
    quote = price_request(body, at=AT)
    assert len(quote.missing) == 1 and "over the 67,108,864-byte cap for one part" in quote.missing[0]
    alone = dict(body, messages=[{"role": "user", "content": body["messages"][0]["content"][1:]}])
    with pytest.raises(mmtok.PriceError, match="over the 67,108,864-byte cap"):  # nothing to price: an error
        price_request(alone, at=AT)


def test_a_declared_type_that_differs_from_the_bytes_is_said(samples):
    photo = (samples / "chelsea.jpg").read_bytes()
    body = {"model": "claude-opus-4-7", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(photo)}}]}]}  # fmt: skip
    quote = price_request(body, at=AT)
    assert quote.complete
    assert any("declared image/png, but the bytes are JPEG" in w for w in quote.warnings)


def test_a_cut_short_inline_jpeg_is_refused(samples):
    photo = (samples / "chelsea.jpg").read_bytes()[:-2000]
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(photo, "image/jpeg")}}]}]}  # fmt: skip
    (missing,) = price_request(body, at=AT).missing
    assert "cut short" in missing and "end-of-image marker" in missing


def test_a_local_path_in_a_body_is_not_read_unless_allowed(samples, tmp_path):
    from mmtok.request import Policy

    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "chelsea.jpg"}}]}]}  # fmt: skip
    (missing,) = price_request(body, at=AT).missing
    assert "a local path in a request body: not read" in missing
    allowed = price_request(body, at=AT, policy=Policy(paths_under=samples))
    assert allowed.complete and allowed.tokens("image") == image_tokens(451, 300, "gpt-4o")
    outside = dict(body, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "../../README.md"}}]}])  # fmt: skip
    (missing,) = price_request(outside, at=AT, policy=Policy(paths_under=samples)).missing
    assert "a body may name files only within its own folder" in missing


COOKBOOK_MESSAGES = [  # OpenAI's cookbook, "How to count tokens with tiktoken" (read 2026-12-02), its example
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
     "into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch "
     "base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to "
     "do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
     "deliverable."},
]  # fmt: skip


@pytest.mark.parametrize(("model", "tokens"), [("gpt-4o", 124), ("gpt-4o-mini", 124), ("gpt-4", 129)])
def test_chat_messages_cost_what_the_cookbook_and_the_api_counted(model, tokens):
    """The cookbook prints the API's own prompt_tokens for its example beside its count: 124 on gpt-4o and
    gpt-4o-mini, 129 on gpt-4 (roles and names encoded, 3 per message, 1 per name, 3 to prime the reply)."""
    body = openai_chat(model=model, messages=COOKBOOK_MESSAGES)
    assert price_request(body, at=AT).input_tokens == tokens


def test_a_body_of_millions_of_empty_objects_is_refused_before_it_is_parsed():
    body = b'{"model": "gpt-4o", "messages": [' + b"{}," * 1_100_000 + b"{}]}"
    with pytest.raises(RequestError, match="over 1,000,000 objects and arrays: not read"):
        parse_body(body, source="many.json")


def test_gemini_video_metadata_sets_the_frames_counted(samples):
    from google.genai import types

    clip = (samples / "clip.mp4").read_bytes()  # 3 s of video with a sound track
    whole = types.Part.from_bytes(data=clip, mime_type="video/mp4")
    part = types.Part(inline_data=types.Blob(data=clip, mime_type="video/mp4"),
                      video_metadata=types.VideoMetadata(fps=4.0, start_offset="1s"))  # fmt: skip
    _, body = gemini_generate("gemini-3-flash-preview", [types.Content(role="user", parts=[whole, part])])
    quote = price_request(body, "gemini-3-flash-preview", at=AT)
    default, clipped = [ln for ln in quote.lines if ln.modality == "video"]
    assert default.tokens == 3 * 70  # 3 frames at the default 1 fps
    assert clipped.tokens == 8 * 70 and "clip 1-end s at 4 fps" in clipped.working  # 2 s at 4 fps
    sound = [ln.tokens for ln in quote.lines if ln.modality == "audio"]
    assert sound[1] < sound[0]  # the clip's sound is 2 s of the 3


def test_a_calibrated_family_adds_what_bills_carry_beyond_the_rules(tmp_path):
    sheet = tmp_path / "calibrated.toml"
    sheet.write_text(
        'provider = "openai"\n[[family]]\nname = "calibrated-gpt-4o"\nmatch = ["gpt-4o"]\ntext = "o200k_base"\n'
        'image = { formula = "openai-tile", base_tokens = 85, tile_tokens = 170 }\n'
        'overhead = { per_request = 7, per_message = 4 }\nsource = "mmtok calibrate ledger.db"\nread = 2026-12-02\n'
    )
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}, {"role": "user", "content": "Yo"}])
    lines = {ln.item: ln for ln in price_request(body, prices=[sheet], at=AT).lines}
    assert lines["<message framing>"].tokens == 2 * (1 + 3) + 3  # the published framing stays
    extra = lines["<calibrated overhead>"]
    assert extra.tokens == 7 + 4 * 2 and "calibrated: family calibrated-gpt-4o" in extra.working
    sheet.write_text(sheet.read_text().replace("per_message = 4", "per_message = -1"))
    with pytest.raises(mmtok.PriceError, match="overhead per_message must be a whole number of tokens"):
        price_request(body, prices=[sheet], at=AT)
