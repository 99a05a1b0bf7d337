"""OpenAI request bodies: Chat Completions and Responses.

Shapes as the official ``openai`` SDK sends them (developers.openai.com/api/reference: chat/create, responses/create,
read 2026-12-02): chat ``messages[].content`` is a string or parts ``text`` / ``image_url {url, detail}`` /
``input_audio {data, format}`` / ``file {file_id | file_data, filename}`` (``refusal`` from the assistant);
Responses ``input`` is a string or items (messages whose content holds ``input_text`` / ``input_image {image_url |
file_id, detail}`` / ``input_file {file_id | file_data | file_url, filename}`` / ``input_audio``, function calls
and their outputs) with ``instructions`` apart.
"""

from __future__ import annotations

from typing import Any

from mmtok.request import settings
from mmtok.request.collect import Parts, call_text, items, mapping, request, str_setting
from mmtok.request.refs import MediaRef, kind_of_mime, ref_from_base64, ref_from_url, text_of
from mmtok.request.types import Pointer, Request

AUDIO_MIME = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "ogg": "audio/ogg", "pcm16": None}


def read_chat(body: dict[str, Any], source: str) -> Request:
    output, invalid = settings.openai_chat(body)
    parts = Parts()
    named = 0
    framing: list[str] = []
    for i, message, role in parts.messages(body.get("messages")):
        name = message.get("name")
        named += isinstance(name, str)
        framing += [role, name] if isinstance(name, str) else [role]
        where = f"messages[{i}]"
        parts.content(message, i, role, _chat_part)
        for _, call in items(message.get("tool_calls")):
            parts.text(where, role, call_text(mapping(call).get("function"), "name", "arguments"))
        parts.text(where, role, message.get("refusal"))
    return request(
        parts,
        "openai-chat",
        body,
        source,
        model=str_setting(body, "model"),
        messages=len(items(body.get("messages"))),
        named_messages=named,
        framing=tuple(framing),
        output=output,
        invalid=invalid,
        service_tier=str_setting(body, "service_tier"),
    )


def _chat_part(parts: Parts, part: Any, where: str, role: str, pointer: Pointer) -> None:
    kind = parts.object_type(part, where, role, "a content part")
    if kind is None:
        return
    if kind == "text":
        parts.text(where.rsplit(".content", 1)[0], role, part.get("text"))
    elif kind == "refusal":
        parts.text(where.rsplit(".content", 1)[0], role, part.get("refusal"))
    elif kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        parts.media("image", where, role, ref_from_url(image.get("url")), pointer, _detail(image.get("detail")))
    elif kind == "input_audio":
        audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
        mime = AUDIO_MIME.get(str(audio.get("format", "")).lower())
        parts.media("audio", where, role, ref_from_base64(audio.get("data"), mime), pointer)
    elif kind == "file":
        parts.media("document", where, role, *_file(part.get("file")), pointer)
    else:
        parts.uncountable("text", where, role, f"a {kind!r} content part: mmtok does not know how it is counted")


def _file(file: Any) -> tuple[MediaRef | None]:
    """A chat ``file`` / Responses ``input_file`` part's reference (a data URL, a URL or an uploaded file id)."""
    if not isinstance(file, dict):
        return (None,)
    name = file.get("filename") if isinstance(file.get("filename"), str) else None
    if isinstance(file.get("file_data"), str):
        ref = ref_from_url(file["file_data"])
        if ref is not None and ref.scheme != "data":  # bare base64: the SDKs send it as given
            ref = MediaRef("data", mime=None, data=file["file_data"])
    elif isinstance(file.get("file_url"), str):
        ref = ref_from_url(file["file_url"])
    elif isinstance(file.get("file_id"), str):
        ref = MediaRef("file_id", file_id=file["file_id"])
    else:
        ref = None
    if ref is not None and name:
        ref = MediaRef(ref.scheme, ref.mime, ref.data, ref.url, ref.path, ref.file_id, name)
    return (ref,)


def _detail(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value else None


# ----------------------------------------------------------------------------------------------------- Responses
def read_responses(body: dict[str, Any], source: str) -> Request:
    output, invalid = settings.openai_responses(body)
    parts = Parts()
    parts.text("instructions", "developer", body.get("instructions"))
    given = body.get("input")
    messages = parts.string_input(given)
    for i, item in items(given):
        messages += _responses_item(parts, item, i)
    return request(
        parts,
        "openai-responses",
        body,
        source,
        model=str_setting(body, "model"),
        messages=messages + bool(body.get("instructions")),
        output=output,
        invalid=invalid,
        service_tier=str_setting(body, "service_tier"),
    )


def _responses_item(parts: Parts, item: Any, i: int) -> int:
    """Collect one ``input`` item; 1 when it is a message (for per-message overheads)."""
    where = f"input[{i}]"
    kind = parts.object_type(item, where, "?", "an input item")
    if kind is None:
        return 0
    kind = kind or "message"
    role = str(item.get("role", "user"))
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            parts.text(where, role, content)
        for j, part in items(content):
            _responses_part(parts, part, f"{where}.content[{j}]", role, ("input", i, "content", j))
        return 1
    if kind in ("input_text", "input_image", "input_file", "input_audio"):  # a bare content part as an item
        _responses_part(parts, item, where, role, ("input", i))
        return 0
    if kind in ("function_call", "custom_tool_call"):
        parts.text(where, "assistant", call_text(item, "name", "arguments" if "arguments" in item else "input"))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        parts.text(where, "tool", text_of(item.get("output")))
    elif kind == "reasoning":
        summary = [mapping(s).get("text") if isinstance(s, dict) else s for _, s in items(item.get("summary"))]
        parts.text(where, "assistant", " ".join(text_of(s) for s in summary))
    else:
        parts.uncountable("text", where, role, f"a {kind!r} input item: mmtok does not know how it is counted")
    return 0


def _responses_part(parts: Parts, part: Any, where: str, role: str, pointer: Pointer) -> None:
    kind = parts.object_type(part, where, role, "a content part")
    if kind is None:
        return
    message = where.rsplit(".content", 1)[0]
    if kind in ("input_text", "output_text", "text"):
        parts.text(message, role, part.get("text"))
    elif kind == "refusal":
        parts.text(message, role, part.get("refusal"))
    elif kind == "input_image":
        ref = ref_from_url(part.get("image_url"))
        if ref is None and isinstance(part.get("file_id"), str):
            ref = MediaRef("file_id", file_id=part["file_id"])
        parts.media("image", where, role, ref, pointer, _detail(part.get("detail")))
    elif kind == "input_file":
        (ref,) = _file(part)
        kind_guess = kind_of_mime(ref.mime if ref else None, "document")
        parts.media(kind_guess if kind_guess != "text" else "document", where, role, ref, pointer)
    elif kind == "input_audio":
        audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else part
        mime = AUDIO_MIME.get(str(audio.get("format", "")).lower())
        parts.media("audio", where, role, ref_from_base64(audio.get("data"), mime), pointer)
    else:
        parts.uncountable("text", where, role, f"a {kind!r} content part: mmtok does not know how it is counted")
