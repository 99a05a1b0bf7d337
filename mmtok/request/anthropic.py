"""Anthropic Messages bodies (POST /v1/messages, and /v1/messages/count_tokens, whose body has no max_tokens).

Shapes as the official ``anthropic`` SDK sends them (platform.claude.com/docs/en/api/messages, read 2026-12-02):
``system`` (a string or text blocks), ``messages[].content`` a string or blocks ``text`` / ``image {source}`` /
``document {source}`` / ``tool_use`` / ``tool_result`` (its content a string or text, image and document blocks) /
``thinking``; a ``source`` is ``base64 {media_type, data}``, ``url {url}``, ``file {file_id}``, or for documents
``text {data}`` and ``content {content: blocks}``.
"""

from __future__ import annotations

from typing import Any

from mmtok.request import settings
from mmtok.request.collect import Parts, items, request, str_setting
from mmtok.request.refs import MediaRef, ref_from_base64, ref_from_url, text_of
from mmtok.request.types import Invalid, Pointer, Request


def read_messages(body: dict[str, Any], source: str) -> Request:
    output, invalid = settings.anthropic_messages(body)
    parts = Parts()
    system = body.get("system")
    if isinstance(system, str):
        parts.text("system", "system", system)
    for j, block in items(system):
        _block(parts, block, f"system[{j}]", "system", ("system", j))
    for i, message, role in parts.messages(body.get("messages")):
        parts.content(message, i, role, _block)
    parts.cache_mark(body.get("cache_control"))  # automatic caching: the mark on the last cacheable block
    invalid = (*invalid, *_cache_problems(parts.cache_marks, body))
    return request(
        parts,
        "anthropic-messages",
        body,
        source,
        model=str_setting(body, "model"),
        messages=len(items(body.get("messages"))),
        output=output,
        invalid=invalid,
        service_tier=str_setting(body, "service_tier"),
        tool_choice=_tool_choice(body.get("tool_choice")),
    )


def _block(parts: Parts, block: Any, where: str, role: str, pointer: Pointer) -> None:
    kind = parts.object_type(block, where, role, "a content block")
    if kind is None:
        return
    _read_block(parts, block, kind, where, role, pointer)
    parts.cache_mark(block.get("cache_control"))  # the prefix up to and with this block is cached


def _read_block(parts: Parts, block: dict[str, Any], kind: str, where: str, role: str, pointer: Pointer) -> None:
    message = where.rsplit(".content", 1)[0] if ".content" in where else where.split("[")[0]
    if kind == "text":
        parts.text(message, role, block.get("text"))
    elif kind == "image":
        parts.media("image", where, role, _source(block.get("source")), pointer)
    elif kind == "document":
        _document(parts, block, where, role, pointer)
    elif kind == "tool_use" or kind == "server_tool_use":
        parts.text(message, role, f"{block.get('name', '')}{text_of(block.get('input'))}")
    elif kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            parts.text(message, role, content)
        for k, inner in items(content):
            _block(parts, inner, f"{where}.content[{k}]", role, (*pointer, "content", k))
    elif kind == "thinking":
        parts.text(message, role, block.get("thinking"))
    elif kind == "redacted_thinking":
        parts.uncountable("text", where, role, "redacted thinking: its size is not in the body")
    elif kind == "search_result":
        for k, inner in items(block.get("content")):
            _block(parts, inner, f"{where}.content[{k}]", role, (*pointer, "content", k))
    else:
        parts.uncountable("text", where, role, f"a {kind!r} block: mmtok does not know how it is counted")


def _source(source: Any) -> MediaRef | None:
    if not isinstance(source, dict):
        return None
    kind = source.get("type")
    if kind == "base64":
        return ref_from_base64(source.get("data"), source.get("media_type"))
    if kind == "url":
        return ref_from_url(source.get("url"))
    if kind == "file" and isinstance(source.get("file_id"), str):
        return MediaRef("file_id", file_id=source["file_id"])
    return None


def _document(parts: Parts, block: dict[str, Any], where: str, role: str, pointer: Pointer) -> None:
    """A document block: a PDF (base64, URL or file), plain text, or content blocks (text and images)."""
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    message = where.rsplit(".content", 1)[0] if ".content" in where else where
    if source.get("type") == "text":
        parts.text(message, role, source.get("data"))
    elif source.get("type") == "content":
        content = source.get("content")
        if isinstance(content, str):
            parts.text(message, role, content)
        for k, inner in items(content):
            _block(parts, inner, f"{where}.source.content[{k}]", role, (*pointer, "source", "content", k))
    else:
        parts.media("document", where, role, _source(source), pointer)
    parts.text(message, role, block.get("title"))
    parts.text(message, role, block.get("context"))


def _tool_choice(choice: Any) -> str | None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    return kind if isinstance(kind, str) else None


MAX_CACHE_BREAKPOINTS = 4  # "Maximum 4 explicit cache breakpoints per request" (prompt-caching page, read 2026-12-05)


def _cache_problems(marks: list[tuple[int, str]], body: dict[str, Any]) -> tuple[Invalid, ...]:
    """What Anthropic refuses in a body's cache marks: more than 4 breakpoints (tools' included, the top-level
    automatic one not), or a 1-hour mark after a 5-minute one ("1-hour entries must appear before 5-minute
    entries")."""
    tools = [t for _, t in items(body.get("tools")) if isinstance(t, dict) and isinstance(t.get("cache_control"), dict)]
    explicit = len(marks) - isinstance(body.get("cache_control"), dict) + len(tools)
    problems = []
    if explicit > MAX_CACHE_BREAKPOINTS:
        problems.append(Invalid("cache_control", f"at most {MAX_CACHE_BREAKPOINTS} cache breakpoints, got {explicit}"))
    ttls = [ttl for _, ttl in sorted(marks)]
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        problems.append(Invalid("cache_control", "a 1-hour cache mark after a 5-minute one"))
    return tuple(problems)
