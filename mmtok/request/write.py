"""A body written back in its own shape with some media parts replaced: each by new bytes (as inline base64, the
provider's own way), or by several (the pieces of a sliced page), with the part's detail or media resolution set.
Everything else in the body — other parts, settings, keys mmtok does not know — is left as it was."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmtok.errors import RequestError
from mmtok.request.gemini import field
from mmtok.request.types import Part, Pointer, Request

GEMINI_LEVELS = {"low": "MEDIA_RESOLUTION_LOW", "medium": "MEDIA_RESOLUTION_MEDIUM", "high": "MEDIA_RESOLUTION_HIGH",
                 "ultra_high": "MEDIA_RESOLUTION_ULTRA_HIGH"}  # fmt: skip
OPENAI_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3"}


@dataclass(frozen=True)
class Media:
    """New bytes for a part: what they are (``image/png``) and the detail to send them with (None: leave it)."""

    data: bytes
    mime: str
    detail: str | None = None


def write_body(request: Request, replaced: Mapping[int, Sequence[Media]]) -> dict[str, Any]:
    """``request.body`` with part ``i`` (an index into ``request.parts``) replaced by ``replaced[i]``, one object
    per new medium, in order. Raises :class:`RequestError` for a part the writer cannot place."""
    body = _copied_along(request.body, [request.parts[i].pointer for i in replaced])
    # from the last part to the first, so that splicing several objects in keeps earlier pointers right
    for index in sorted(replaced, key=lambda i: request.parts[i].pointer, reverse=True):
        part = request.parts[index]
        if not part.pointer:
            raise RequestError(f"{request.source}: {part.where} cannot be rewritten (no place in the body)")
        container = _resolve(body, part.pointer[:-1])
        old = container[part.pointer[-1]]
        new = [_encode(request.api, part, old, media) for media in replaced[index]]
        position = part.pointer[-1]
        if not isinstance(position, int):
            raise RequestError(f"{request.source}: {part.where} is not in a list of parts")
        container[position : position + 1] = new
    return body


def _copied_along(body: dict[str, Any], pointers: list[Pointer]) -> dict[str, Any]:
    """``body`` with every object and list on the way to each pointer copied (shallow): the rest is shared with the
    old body, which stays as it was (and a deeply nested field mmtok never touches is never walked)."""
    new = dict(body)
    copied = {id(new)}
    for pointer in pointers:
        node: Any = new
        for key in pointer[:-1]:
            child = node[key]
            if id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[key] = child
                copied.add(id(child))
            node = child
    return new


def _resolve(body: Any, path: Sequence[str | int]) -> Any:
    node = body
    for key in path:
        node = node[key]
    return node


def _encode(api: str, part: Part, old: dict[str, Any], media: Media) -> dict[str, Any]:
    """The part object for ``media``, built for what it now holds: only the keys of that kind of part, and of the
    old object only those that still apply (Anthropic's ``cache_control``, Gemini's video metadata)."""
    data = base64.b64encode(media.data).decode("ascii")
    kind = media.mime.split("/")[0]
    if api in ("openai-chat", "openai-responses"):
        return _openai_part(api, media, data, kind, old)
    if api == "anthropic-messages":
        if kind != "image":
            raise RequestError(f"{part.where}: Anthropic takes images, not {media.mime}, in a content block")
        kept = {k: v for k, v in old.items() if k == "cache_control"}
        return {"type": "image", "source": {"type": "base64", "media_type": media.mime, "data": data}, **kept}
    if api == "gemini-generate":
        return _gemini_part(dict(old), media, data)
    if api == "gemini-interactions":
        new = {"type": kind if kind in ("image", "audio", "video") else "document", "data": data,
               "mime_type": media.mime}  # fmt: skip
        if kind == "video" and "processing" in old:
            new["processing"] = old["processing"]
        if media.detail:
            new["resolution"] = media.detail
        return new
    raise RequestError(f"cannot write a {api} body")


def _openai_part(api: str, media: Media, data: str, kind: str, old: dict[str, Any]) -> dict[str, Any]:
    url = f"data:{media.mime};base64,{data}"
    if kind == "audio":
        if api == "openai-responses":
            raise RequestError("the Responses API takes no audio input")
        return {"type": "input_audio", "input_audio": {"data": data, "format": _audio_format(media)}}
    if kind != "image":
        raise RequestError(f"OpenAI takes images and audio inline, not {media.mime}")
    if api == "openai-chat":
        image = {"url": url, **({"detail": media.detail} if media.detail else {})}
        return {"type": "image_url", "image_url": image}
    detail = media.detail or (old.get("detail") if old.get("type") == "input_image" else None)
    return {"type": "input_image", "image_url": url, **({"detail": detail} if detail else {})}


def _gemini_part(new: dict[str, Any], media: Media, data: str) -> dict[str, Any]:
    """An inline part in the spelling the body used (``inline_data`` / ``inlineData``)."""
    camel = "inlineData" in new or "fileData" in new or "mediaResolution" in new
    old_data = field(new, "inline_data") or field(new, "file_data")
    inline_key, mime_key = ("inlineData", "mimeType") if camel else ("inline_data", "mime_type")
    if isinstance(old_data, dict) and "mime_type" in old_data:  # the google-genai SDK: inlineData {mime_type}
        mime_key = "mime_type"
    for key in ("inline_data", "inlineData", "file_data", "fileData"):
        new.pop(key, None)
    new[inline_key] = {mime_key: media.mime, "data": data}
    if media.detail in GEMINI_LEVELS:
        new.pop("media_resolution", None)
        new.pop("mediaResolution", None)
        new["mediaResolution" if camel else "media_resolution"] = {"level": GEMINI_LEVELS[media.detail]}
    return new


def _audio_format(media: Media) -> str:
    fmt = OPENAI_AUDIO.get(media.mime)
    if fmt is None:
        raise RequestError(f"Chat Completions takes audio as WAV or MP3, not {media.mime}")
    return fmt
