"""Gemini request bodies: generateContent (and streamGenerateContent, the same body) and Interactions.

generateContent (ai.google.dev/api/generate-content, read 2026-12-02): ``contents[].parts[]`` hold ``text``,
``inline_data {mime_type, data}``, ``file_data {file_uri, mime_type}``, function calls and responses; Gemini 3 takes
``media_resolution`` per part and ``generation_config.media_resolution`` for the request; the model is in the URL, not
the body. REST takes snake_case and camelCase field names alike (the google-genai SDK sends camelCase), so both are
read, and a rewritten body keeps the spelling it had. Interactions (ai.google.dev/gemini-api/docs/interactions):
``model``, ``input`` as a string, content items (``{type: text|image|audio|video|document, data | uri, mime_type}``)
or turns ``{role, content}``, ``system_instruction``, ``generation_config``.
"""

from __future__ import annotations

from typing import Any

from mmtok.request import settings
from mmtok.request.collect import Parts, call_text, clip_of, items, request, str_setting
from mmtok.request.refs import MediaRef, kind_of_mime, ref_from_base64, ref_from_url, text_of
from mmtok.request.types import Pointer, Request

LEVELS = {"low": "low", "medium": "medium", "high": "high", "ultra_high": "ultra_high", "unspecified": None}
FILES_API = "generativelanguage.googleapis.com/"
STEP_ROLES = {"user_input": "user", "model_output": "model"}  # Interactions steps (the SDK wraps content lists so)


def field(obj: dict[str, Any], snake: str) -> Any:
    """``obj[snake]`` or its camelCase spelling."""
    if snake in obj:
        return obj[snake]
    head, *rest = snake.split("_")
    return obj.get(head + "".join(w.title() for w in rest))


def level(value: Any) -> str | None:
    """A media resolution as mmtok names it: ``MEDIA_RESOLUTION_HIGH`` / ``{"level": ...}`` / ``high`` -> high."""
    if isinstance(value, dict):
        value = value.get("level")
    if not isinstance(value, str):
        return None
    name = value.lower().removeprefix("media_resolution_")
    return LEVELS.get(name, name)


def read_generate(body: dict[str, Any], source: str) -> Request:
    parts = Parts()
    system = field(body, "system_instruction")
    if isinstance(system, str):
        parts.text("system_instruction", "system", system)
    elif isinstance(system, dict):
        for j, part in items(system.get("parts")):
            _part(parts, part, "system_instruction", f"system_instruction.parts[{j}]", "system", ())
    for i, content in items(body.get("contents")):
        if not isinstance(content, dict):
            parts.uncountable("text", f"contents[{i}]", "?", "a content that is not an object")
            continue
        role = str(content.get("role", "user"))
        for j, part in items(content.get("parts")):
            _part(parts, part, f"contents[{i}]", f"contents[{i}].parts[{j}]", role, ("contents", i, "parts", j))
    config = _generation_config(body)
    output, invalid = settings.gemini_config(config, "generationConfig." if "generationConfig" in body else
                                             "generation_config.")  # fmt: skip
    _cached_content(parts, body)
    return request(
        parts,
        "gemini-generate",
        body,
        source,
        model=_model_name(str_setting(body, "model")),
        messages=len(items(body.get("contents"))),
        output=output,
        invalid=invalid,
        service_tier=str_setting(body, "service_tier") or str_setting(body, "serviceTier"),
        media_resolution=level(field(config, "media_resolution")),
    )


def _cached_content(parts: Parts, body: dict[str, Any]) -> None:
    """A ``cachedContent`` the body reads: its tokens are in a cache on Google's side, billed at the cache rate (and
    its storage by the hour), and not in the body: a part mmtok cannot count, so the quote is incomplete."""
    name = field(body, "cached_content")
    if isinstance(name, str) and name:
        reason = f"the cached content {name} (its tokens are on Google's side, billed at the cache rate)"
        parts.uncountable("text", "cachedContent", "user", f"{reason}: not counted here")


def _generation_config(body: dict[str, Any]) -> dict[str, Any]:
    config = field(body, "generation_config")
    return config if isinstance(config, dict) else {}


def _model_name(name: str | None) -> str | None:
    return name.removeprefix("models/") if name else None


def _part(parts: Parts, part: Any, message: str, where: str, role: str, pointer: Pointer) -> None:
    if not isinstance(part, dict):
        parts.uncountable("text", where, role, "a part that is not an object")
        return
    detail = level(field(part, "media_resolution"))
    clip = clip_of(field(part, "video_metadata"))
    if isinstance(part.get("text"), str):
        parts.text(message, role, part["text"])
    elif field(part, "inline_data") is not None:
        inline = field(part, "inline_data")
        inline = inline if isinstance(inline, dict) else {}
        mime = field(inline, "mime_type")
        ref = ref_from_base64(inline.get("data"), mime)
        parts.media(kind_of_mime(ref.mime if ref else None), where, role, ref, pointer, detail, clip)
    elif field(part, "file_data") is not None:
        data = field(part, "file_data")
        data = data if isinstance(data, dict) else {}
        ref = _file_ref(field(data, "file_uri"), field(data, "mime_type"))
        parts.media(kind_of_mime(ref.mime if ref else None), where, role, ref, pointer, detail, clip)
    elif field(part, "function_call") is not None:
        parts.text(message, role, call_text(field(part, "function_call"), "name", "args"))
    elif field(part, "function_response") is not None:
        parts.text(message, role, text_of(field(part, "function_response")))
    elif field(part, "executable_code") is not None or field(part, "code_execution_result") is not None:
        parts.text(message, role, text_of(field(part, "executable_code") or field(part, "code_execution_result")))
    else:
        keys = ", ".join(sorted(k for k in part if k not in ("thought", "thought_signature", "thoughtSignature")))
        reason = f"a part of {keys or 'no fields'}: mmtok does not know how it is counted"
        parts.uncountable("text", where, role, reason)


def _file_ref(uri: Any, mime: Any) -> MediaRef | None:
    """A ``file_data`` URI: a Files API file (its bytes are on Google's side), or a URL mmtok can read."""
    if not isinstance(uri, str) or not uri:
        return None
    mime = mime.lower() if isinstance(mime, str) else None
    if FILES_API in uri or uri.startswith("gs://") or "youtube.com/" in uri or "youtu.be/" in uri:
        return MediaRef("file_id", mime=mime, file_id=uri)
    return ref_from_url(uri, mime)


# -------------------------------------------------------------------------------------------------- Interactions
def read_interactions(body: dict[str, Any], source: str) -> Request:
    parts = Parts()
    system = field(body, "system_instruction")
    parts.text("system_instruction", "system", system if isinstance(system, str) else text_of(system) or None)
    given = body.get("input")
    turns = parts.string_input(given)
    for i, item in items(given):
        if isinstance(item, dict) and isinstance(item.get("content"), (list, str)):  # a step or a turn
            turns += 1
            step = item.get("type") if isinstance(item.get("type"), str) else ""
            role = str(item.get("role") or STEP_ROLES.get(step, step or "user"))
            content = item["content"]
            if isinstance(content, str):
                parts.text(f"input[{i}]", role, content)
            for j, inner in items(content):
                where = f"input[{i}].content[{j}]"
                _content(parts, inner, f"input[{i}]", where, role, ("input", i, "content", j))
        else:
            turns = max(turns, 1)
            _content(parts, item, "input", f"input[{i}]", "user", ("input", i))
    config = _generation_config(body)
    output, invalid = settings.gemini_config(config, "generation_config.")
    return request(
        parts,
        "gemini-interactions",
        body,
        source,
        model=_model_name(str_setting(body, "model")),
        messages=turns,
        output=output,
        invalid=invalid,
        service_tier=str_setting(body, "service_tier"),
        media_resolution=level(field(config, "media_resolution")),
    )


def _content(parts: Parts, item: Any, message: str, where: str, role: str, pointer: Pointer) -> None:
    kind = parts.object_type(item, where, role, "a content item")
    if kind is None:
        return
    if kind == "text":
        parts.text(message, role, item.get("text"))
    elif kind in ("image", "audio", "video", "document"):
        mime = field(item, "mime_type")
        ref = ref_from_base64(item["data"], mime) if isinstance(item.get("data"), str) else None
        ref = ref or _file_ref(item.get("uri"), mime)
        resolution = level(item.get("resolution") or field(item, "media_resolution"))
        parts.media(kind, where, role, ref, pointer, resolution, clip_of(item.get("processing")))
    elif kind in ("function_call", "function_result", "thought"):
        parts.text(message, role, text_of({k: v for k, v in item.items() if k not in ("type", "signature")}))
    else:
        parts.uncountable("text", where, role, f"a {kind!r} content item: mmtok does not know how it is counted")
