"""The parts of a body as a reader finds them: each message's text as one part, each medium as its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from mmtok.request.refs import text_of
from mmtok.request.types import MediaRef, Part, Pointer, Request, VideoClip


class Parts:
    """Collects a body's parts in order. Text within one message is joined into one part (one line in a quote);
    media, and what cannot be counted, are parts of their own."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._text: list[str] = []
        self._text_where = ""
        self._text_role = ""
        self.cache_marks: list[tuple[int, str]] = []  # (parts before the mark, lifetime): prompt-cache breakpoints

    def text(self, where: str, role: str, text: Any) -> None:
        if not isinstance(text, str) or not text:
            return
        if self._text and (where != self._text_where or role != self._text_role):
            self.flush()
        if not self._text:
            self._text_where, self._text_role = where, role
        self._text.append(text)

    def media(
        self,
        kind: str,
        where: str,
        role: str,
        ref: MediaRef | None,
        pointer: Pointer,
        detail: str | None = None,
        clip: VideoClip | None = None,
    ) -> None:
        self.flush()
        if ref is None:
            self.uncountable(kind, where, role, f"a {kind} part with no data, URL or file id", pointer)
            return
        reason = ""
        if ref.scheme == "file_id":
            reason = f"a file uploaded to the provider ({ref.file_id}): its content is not in the body"
        elif ref.scheme == "data" and ref.data is None:
            reason = f"a data URL that is not base64 ({ref.url}...): providers take base64 data URLs"
        self.parts.append(
            Part(kind, where, role, ref=ref, detail=detail, pointer=pointer, uncountable=reason, clip=clip)
        )

    def messages(self, value: Any) -> Iterator[tuple[int, dict[str, Any], str]]:
        """(index, message, role) of each object in a body's ``messages``; one that is not an object is said."""
        for i, message in items(value):
            if not isinstance(message, dict):
                self.uncountable("text", f"messages[{i}]", "?", "a message that is not an object")
                continue
            yield i, message, str(message.get("role", "?"))

    def content(self, message: dict[str, Any], i: int, role: str, each: Callable[..., None]) -> None:
        """A message's ``content``: a string is its text; each part of a list goes to ``each(parts, part, where,
        role, pointer)``."""
        content = message.get("content")
        if isinstance(content, str):
            self.text(f"messages[{i}]", role, content)
        for j, part in items(content):
            each(self, part, f"messages[{i}].content[{j}]", role, ("messages", i, "content", j))

    def object_type(self, value: Any, where: str, role: str, what: str = "content part") -> str | None:
        """The ``type`` of a part's object ("" where it has none); None, with the part said uncountable, for a
        value that is not an object."""
        if not isinstance(value, dict):
            self.uncountable("text", where, role, f"{what} that is not an object")
            return None
        kind = value.get("type")
        return kind if isinstance(kind, str) else ""

    def uncountable(self, kind: str, where: str, role: str, reason: str, pointer: Pointer = ()) -> None:
        self.flush()
        self.parts.append(Part(kind, where, role, pointer=pointer, uncountable=reason))

    def string_input(self, given: Any) -> int:
        """An ``input`` given as one string (Responses, Interactions): one user message; 0 for anything else."""
        if not isinstance(given, str):
            return 0
        self.text("input", "user", given)
        return 1

    def cache_mark(self, control: Any) -> None:
        """A ``cache_control`` on the block just read (Anthropic): everything up to it is written to the prompt
        cache. The block's text ends its part here, so the mark falls between parts."""
        if not isinstance(control, dict):
            return
        self.flush()
        self.cache_marks.append((len(self.parts), "1h" if control.get("ttl") == "1h" else "5m"))

    def flush(self) -> None:
        if self._text:
            self.parts.append(Part("text", self._text_where, self._text_role, text="\n".join(self._text)))
            self._text = []

    def done(self) -> tuple[Part, ...]:
        """The parts in order, each written to the prompt cache marked with the lifetime of the first breakpoint
        after it (a prefix up to a 1-hour mark is written for an hour, the rest up to a later 5-minute mark for 5)."""
        self.flush()
        parts, start = list(self.parts), 0
        for end, ttl in sorted(self.cache_marks):
            parts[start:end] = [dataclasses.replace(p, cache=p.cache or ttl) for p in parts[start:end]]
            start = max(start, end)
        return tuple(parts)


def request(parts: Parts, api: str, body: dict[str, Any], source: str, **fields: Any) -> Request:
    """The request a reader found: its parts (the tool definitions last, as one text part), the body and its
    source, and ``fields`` (model, messages, output budget, service tier, ...). Where a prompt-cache mark is set,
    the tool definitions are in the cached prefix (Anthropic caches tools, then system, then messages)."""
    first_mark = min(parts.cache_marks, default=None)
    marked_tool = next((t["cache_control"] for t in _listed(body.get("tools")) if isinstance(t, dict)
                        and isinstance(t.get("cache_control"), dict)), None)  # fmt: skip
    if first_mark is None and marked_tool is not None:  # only the tools are cached
        first_mark = (0, "1h" if marked_tool.get("ttl") == "1h" else "5m")
    tools = tool_definitions(parts, body)
    found = parts.done()
    if tools and first_mark is not None and found[-1].where == "tools":
        found = (*found[:-1], dataclasses.replace(found[-1], cache=first_mark[1]))
    output = fields.get("output")
    if output is not None and output.limit is not None:
        fields.setdefault("max_output_tokens", output.limit)
    return Request(api, fields.pop("model", None), found, tools=tools, source=source, body=body, **fields)


def tool_definitions(parts: Parts, body: dict[str, Any]) -> int:
    """The body's tool definitions as one text part (names, descriptions and schemas are input tokens); how many."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        parts.text("tools", "system", text_of(tools))
        return len(tools)
    return 0


def str_setting(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) and value else None


def mapping(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one: a body's nested fields are read without trusting their type."""
    return value if isinstance(value, dict) else {}


def call_text(call: Any, name: str, arguments: str) -> str:
    """A tool call's name and arguments as the model reads them (``call`` an object or anything else)."""
    call = mapping(call)
    return f"{call.get(name) if isinstance(call.get(name), str) else ''}{text_of(call.get(arguments))}"


def clip_of(metadata: Any) -> VideoClip | None:
    """A video clip from Gemini's ``video_metadata`` (``fps``, ``start_offset`` / ``end_offset`` as "10s" or
    seconds) or an Interactions ``processing`` object; None where nothing is set."""
    metadata = mapping(metadata)
    fps = metadata.get("fps")
    start = _seconds(metadata.get("start_offset", metadata.get("startOffset")))
    end = _seconds(metadata.get("end_offset", metadata.get("endOffset")))
    fps = float(fps) if isinstance(fps, (int, float)) and not isinstance(fps, bool) and 0 < fps <= 24 else None
    if fps is None and start is None and end is None:
        return None
    return VideoClip(fps, start or 0.0, end)


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and value.endswith("s"):
        try:
            seconds = float(value[:-1])
        except ValueError:
            return None
        return seconds if seconds >= 0 else None
    return None


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def items(value: Any) -> list[tuple[int, Any]]:
    """(index, item) of a list; nothing for anything else."""
    return list(enumerate(value)) if isinstance(value, list) else []
