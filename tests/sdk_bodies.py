"""Request bodies as the official SDKs send them: each call goes through an httpx MockTransport that keeps the body
and answers with a minimal response of the provider's own shape. No network."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path
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


# ------------------------------------------------------------------------------------------------------ media
def image_bytes(source: Path, size: tuple[int, int] | None = None, fmt: str = "JPEG") -> bytes:
    """A real photo, resized to ``size`` when given, encoded by Pillow."""
    import PIL.Image

    with PIL.Image.open(source) as im:
        im = im.convert("RGB")
        if size is not None:
            im = im.resize(size)
        out = io.BytesIO()
        im.save(out, fmt)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{b64(data)}"


def as_json(body: bytes) -> dict[str, Any]:
    return json.loads(body)
