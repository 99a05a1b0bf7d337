"""Request bodies as the official SDKs send them: each call goes through an httpx MockTransport that keeps the body
and answers with a minimal response of the provider's own shape. No network. The SDKs are the ``dev`` extra's
(``openai``, ``anthropic``, ``google-genai``); the tests and ``python -m mmtok.eval.tools.sdk_bodies`` (which writes
the sample bodies under ``mmtok/samples/requests/``) use this module."""

from __future__ import annotations

import sys
from typing import Any

import httpx
import httpx2

OPENAI_CHAT_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
OPENAI_RESPONSE_REPLY = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": "gpt-4o",
    "status": "completed",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 1,
        "output_tokens": 1,
        "total_tokens": 2,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    },
}
ANTHROPIC_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-7",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
GEMINI_REPLY = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
}
INTERACTION_REPLY = {"id": "int_1", "object": "interaction", "status": "completed", "steps": [], "usage": {}}


class Capture:
    """An httpx transport that records each request and answers with ``reply``."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.requests: list[httpx.Request] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        response = sys.modules[type(request).__module__.split(".")[0]].Response
        if request.url.path.endswith("count_tokens"):
            return response(200, json={"input_tokens": 1})
        return response(200, json=self.reply)

    def client(self, http: Any = httpx) -> Any:
        """A client of ``http`` (httpx, or httpx2, which the anthropic SDK uses) sending through this capture."""
        return http.Client(transport=http.MockTransport(self))

    @property
    def body(self) -> bytes:
        return self.requests[-1].content

    @property
    def path(self) -> str:
        return self.requests[-1].url.path


def openai_chat(**kwargs: Any) -> bytes:
    import openai

    capture = Capture(OPENAI_CHAT_REPLY)
    openai.OpenAI(api_key="sk-test", http_client=capture.client()).chat.completions.create(**kwargs)
    return capture.body


def openai_responses(**kwargs: Any) -> bytes:
    import openai

    capture = Capture(OPENAI_RESPONSE_REPLY)
    openai.OpenAI(api_key="sk-test", http_client=capture.client()).responses.create(**kwargs)
    return capture.body


def anthropic_messages(**kwargs: Any) -> bytes:
    import anthropic

    capture = Capture(ANTHROPIC_REPLY)
    anthropic.Anthropic(api_key="sk-ant-test", http_client=capture.client(httpx2)).messages.create(**kwargs)
    return capture.body


def anthropic_count_tokens(**kwargs: Any) -> bytes:
    import anthropic

    capture = Capture(ANTHROPIC_REPLY)
    anthropic.Anthropic(api_key="sk-ant-test", http_client=capture.client(httpx2)).messages.count_tokens(**kwargs)
    return capture.body


def gemini_generate(model: str, contents: Any, config: Any = None) -> tuple[str, bytes]:
    """The URL path (which names the model) and the body."""
    from google import genai
    from google.genai import types

    capture = Capture(GEMINI_REPLY)
    options = types.HttpOptions(httpx_client=capture.client())
    genai.Client(api_key="g-test", http_options=options).models.generate_content(
        model=model, contents=contents, config=config
    )
    return capture.path, capture.body


def gemini_interactions(**kwargs: Any) -> bytes:
    from google import genai
    from google.genai import types

    capture = Capture(INTERACTION_REPLY)
    options = types.HttpOptions(httpx_client=capture.client())
    genai.Client(api_key="g-test", http_options=options).interactions.create(**kwargs)
    return capture.body


# --------------------------------------------------------------------------------------------- the sample bodies
def sample_bodies() -> dict[str, bytes]:
    """The request bodies shipped in ``mmtok/samples/requests/``, each made by its provider's SDK from the sample
    media: a Chat Completions body (a photo at detail high), a Responses body (instructions, a photo at detail low),
    an Anthropic Messages body (system prompt, a photo, a tool) and a Gemini generateContent body (a photo and a
    recording inline; the model is in the URL, so it is priced with ``-m``)."""
    import base64

    from mmtok.samples import sample_path

    photo = sample_path("chelsea.jpg").read_bytes()
    rocket = sample_path("rocket_rotated.jpg").read_bytes()
    speech = sample_path("speech.wav").read_bytes()

    def url(data: bytes) -> str:
        return "data:image/jpeg;base64," + base64.b64encode(data).decode()

    question = "What is in this photo? Answer in one sentence."
    chat = openai_chat(model="gpt-4o", max_tokens=300, messages=[{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": url(photo), "detail": "high"}}]}])  # fmt: skip
    responses = openai_responses(model="gpt-5.2", instructions="Answer in one word.", max_output_tokens=50, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Which vehicle is this?"},
                                     {"type": "input_image", "image_url": url(rocket), "detail": "low"}]}])  # fmt: skip
    messages = anthropic_messages(
        model="claude-opus-4-7",
        max_tokens=300,
        system="You describe photos for a catalogue.",
        tools=[{"name": "save_caption", "description": "Save a caption for the photo.",
                "input_schema": {"type": "object", "properties": {"caption": {"type": "string"}}}}],
        messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                         "data": base64.b64encode(photo).decode()}},
            {"type": "text", "text": question}]}],
    )  # fmt: skip
    _, gemini = _gemini_sample(photo, speech)
    return {"openai-chat.json": chat, "openai-responses.json": responses, "anthropic-messages.json": messages,
            "gemini-generate.json": gemini}  # fmt: skip


def _gemini_sample(photo: bytes, speech: bytes) -> tuple[str, bytes]:
    from google.genai import types

    parts = [types.Part(text="Describe the photo, then transcribe the recording."),
             types.Part.from_bytes(data=photo, mime_type="image/jpeg"),
             types.Part.from_bytes(data=speech, mime_type="audio/wav")]  # fmt: skip
    config = types.GenerateContentConfig(max_output_tokens=300)
    return gemini_generate("gemini-3-flash-preview", [types.Content(role="user", parts=parts)], config)


def main() -> None:
    """Write the sample bodies (pretty-printed JSON, as a user keeps them) into ``mmtok/samples/requests/``."""
    import json
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "mmtok" / "samples" / "requests"
    folder.mkdir(exist_ok=True)
    for name, body in sample_bodies().items():
        (folder / name).write_text(json.dumps(json.loads(body), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {folder / name}")


if __name__ == "__main__":
    main()
