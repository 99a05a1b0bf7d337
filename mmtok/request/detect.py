"""Which API a body is for, by its structure (never by a file name), and the reader for it.

Keys that only one API has decide: ``contents`` is Gemini generateContent; ``input`` with OpenAI's item types
(``input_text``, ``input_image``, ...) or ``instructions`` is Responses, with Gemini's plain ``text``/``image``
types or ``system_instruction`` it is Interactions; ``messages`` with Anthropic's blocks (``image`` with a
``source``, ``document``, ``tool_use``...) or a top-level ``system`` is Anthropic, with OpenAI's parts
(``image_url``, ``input_audio``, ``file``) or ``system``/``developer``/``tool`` roles it is Chat Completions. Plain
text messages that fit both are read by the model name (``claude-*`` is Anthropic), else as Chat Completions, and the
request says so.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mmtok.errors import RequestError
from mmtok.request import anthropic, gemini, openai
from mmtok.request.sniff import MAX_BODY_BYTES, looks_like_body
from mmtok.request.types import APIS, Request

__all__ = ["MAX_BODY_BYTES", "detect_api", "looks_like_body", "not_a_body", "parse_body"]
MAX_BODY_CONTAINERS = 1_000_000  # objects and arrays: about 200 MB once parsed, where megabytes of ``{}`` would take GB
READERS = {
    "openai-chat": openai.read_chat,
    "openai-responses": openai.read_responses,
    "anthropic-messages": anthropic.read_messages,
    "gemini-generate": gemini.read_generate,
    "gemini-interactions": gemini.read_interactions,
}
OPENAI_CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
ANTHROPIC_BLOCKS = frozenset(
    {"image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking", "search_result"}
)
RESPONSES_TYPES = frozenset(
    {"input_text", "input_image", "input_file", "input_audio", "output_text", "function_call",
     "function_call_output", "reasoning", "message", "item_reference", "custom_tool_call"}
)  # fmt: skip
INTERACTIONS_TYPES = frozenset({"text", "image", "audio", "video", "document", "function_result", "thought"})


def parse_body(body: bytes | str | dict[str, Any], *, api: str | None = None, source: str = "<body>") -> Request:
    """Read an API request body (JSON text or an already-parsed object). ``api`` (a key of ``APIS``) skips the
    detection, as the proxy does from the path the body was sent to. Raises :class:`RequestError` for malformed
    JSON or a shape no known API has, naming ``source``."""
    size = None
    if not isinstance(body, dict):
        size = len(body.encode() if isinstance(body, str) else body)
        body = _json(body, source)
    if api is None:
        api = detect_api(body)
        if api is None:
            raise RequestError(f"{source}: {not_a_body(body)}")
    elif api not in READERS:
        raise RequestError(f"{source}: unknown API {api!r}; expected one of {', '.join(READERS)}")
    request = READERS[api](body, source)
    return dataclasses.replace(request, size_bytes=size) if size is not None else request


def _json(body: bytes | str, source: str) -> dict[str, Any]:
    if len(body) > MAX_BODY_BYTES:
        raise RequestError(f"{source}: {len(body):,} bytes: a request body is read up to {MAX_BODY_BYTES:,}")
    brackets = body.count(b"{" if isinstance(body, bytes) else "{") + body.count(
        b"[" if isinstance(body, bytes) else "["
    )
    if brackets > MAX_BODY_CONTAINERS:  # a cheap bound on what json.loads builds (a string's braces count too)
        raise RequestError(
            f"{source}: over {MAX_BODY_CONTAINERS:,} objects and arrays: not read (a request body holds far fewer)"
        )
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise RequestError(f"{source}: not valid JSON ({_json_reason(e)})") from None
    if not isinstance(value, dict):
        raise RequestError(f"{source}: a request body is a JSON object, not a JSON {type(value).__name__}")
    return value


def _json_reason(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return str(error)


def detect_api(body: dict[str, Any]) -> str | None:
    """The API a parsed body is for, or None."""
    if isinstance(body.get("contents"), list):
        return "gemini-generate"
    given = body.get("input")
    if isinstance(given, (str, list)) and "messages" not in body:
        return _input_api(body, given)
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        return None
    types, roles = _message_types(messages)
    if types & OPENAI_CHAT_PARTS or roles & {"system", "developer", "tool", "function"}:
        return "openai-chat"
    if types & ANTHROPIC_BLOCKS or "system" in body or _model_is(body, "claude"):
        return "anthropic-messages"
    return "openai-chat"


def _input_api(body: dict[str, Any], given: str | list[Any]) -> str | None:
    if "instructions" in body or any(k in body for k in ("max_output_tokens", "previous_response_id")):
        return "openai-responses"
    if any(k in body for k in ("system_instruction", "generation_config", "agent")):
        return "gemini-interactions"
    listed = given if isinstance(given, list) else []
    types = {t for item in listed if isinstance(item, dict) for t in _item_types(item)}
    if types & RESPONSES_TYPES - {"message"}:
        return "openai-responses"
    if types & INTERACTIONS_TYPES:
        return "gemini-interactions"
    if _model_is(body, "gemini"):
        return "gemini-interactions"
    return "openai-responses" if isinstance(body.get("model"), str) else None


def _item_types(item: dict[str, Any]) -> set[str]:
    found = {item["type"]} if isinstance(item.get("type"), str) else set()
    content = item.get("content")
    if isinstance(content, list):
        found |= {c["type"] for c in content if isinstance(c, dict) and isinstance(c.get("type"), str)}
    return found


def _message_types(messages: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    types: set[str] = set()
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            types |= {c.get("type") for c in content if isinstance(c, dict) and isinstance(c.get("type"), str)}
    return types, {m["role"] for m in messages if isinstance(m.get("role"), str)}


def _model_is(body: dict[str, Any], family: str) -> bool:
    model = body.get("model")
    return isinstance(model, str) and family in model.lower().split("/")[-1][: len(family) + 8]


def not_a_body(value: Any) -> str:
    """Why a JSON value is not a request body, in one line."""
    keys = ", ".join(list(value)[:6]) if isinstance(value, dict) else type(value).__name__
    known = "; ".join(name.split(" (")[0] for name in APIS.values())
    return f"JSON, but not a request body of a known API ({known}); its keys: {keys or 'none'}"
