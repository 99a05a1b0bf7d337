"""Request bodies as the official SDKs send them (``mmtok.eval.tools.sdk_bodies``), and the media helpers the tests
build them from."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

from mmtok.eval.tools.sdk_bodies import (  # noqa: F401 - re-exported for the tests
    ANTHROPIC_REPLY,
    GEMINI_REPLY,
    INTERACTION_REPLY,
    OPENAI_CHAT_REPLY,
    OPENAI_RESPONSE_REPLY,
    Capture,
    anthropic_count_tokens,
    anthropic_messages,
    gemini_generate,
    gemini_interactions,
    openai_chat,
    openai_responses,
)


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
