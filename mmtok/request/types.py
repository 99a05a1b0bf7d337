"""What an API request is made of, whatever the provider's shape: a model, settings, and parts in order.

A :class:`Request` keeps the body it was read from, and each :class:`Part` the path to its object in that body
(``pointer``), so that a shrunk request is written back in the same shape with only its media changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The request shapes mmtok reads, by the endpoint they are sent to.
APIS = {
    "openai-chat": "OpenAI Chat Completions (POST /v1/chat/completions)",
    "openai-responses": "OpenAI Responses (POST /v1/responses)",
    "anthropic-messages": "Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens)",
    "gemini-generate": "Gemini generateContent (POST /v1beta/models/MODEL:generateContent, :streamGenerateContent)",
    "gemini-interactions": "Gemini Interactions (POST /v1beta/interactions)",
}
PART_KINDS = ("text", "image", "audio", "video", "document", "file")
Pointer = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class MediaRef:
    """Where a part's bytes are: inline base64 (``data``, never decoded whole to be counted), an http(s) ``url``,
    a local ``path``, or a provider-side ``file_id`` (which mmtok cannot read)."""

    scheme: str  # data | url | path | file_id
    mime: str | None = None  # as the body declares it
    data: str | None = None  # base64 text, as it stands in the body
    url: str | None = None
    path: str | None = None
    file_id: str | None = None
    filename: str | None = None

    @property
    def label(self) -> str:
        """For people: what the body points at, without its bytes."""
        if self.scheme == "data":
            return f"inline {self.mime or 'data'} ({len(self.data or ''):,} base64 chars)"
        if self.scheme == "url":
            from mmtok.media.remote import shown

            return shown(self.url or "")
        return {"path": self.path, "file_id": f"file {self.file_id}"}.get(self.scheme) or self.scheme


@dataclass(frozen=True, slots=True)
class VideoClip:
    """How much of a video is sent, and at what frame rate (Gemini's ``video_metadata`` / Interactions'
    ``processing``): ``fps`` None is the model's default; ``end_s`` None is the video's end."""

    fps: float | None = None
    start_s: float = 0.0
    end_s: float | None = None

    def seconds(self, duration_s: float) -> float:
        end = duration_s if self.end_s is None else min(self.end_s, duration_s)
        return max(0.0, end - min(self.start_s, duration_s))

    def describe(self) -> str:
        span = f"{self.start_s:g}-{'end' if self.end_s is None else f'{self.end_s:g}'} s"
        return f"clip {span}" + (f" at {self.fps:g} fps" if self.fps else "")


@dataclass(frozen=True, slots=True)
class Part:
    """One countable part of a request: text, or media by reference, with its own settings."""

    kind: str  # text | image | audio | video | document | file (a file whose kind only its bytes tell)
    where: str  # for people: "messages[1].content[0]"
    role: str = "user"
    text: str | None = None
    ref: MediaRef | None = None
    detail: str | None = None  # OpenAI detail, or a Gemini media_resolution level, as mmtok names them
    pointer: Pointer = ()  # the path to this part's object in the body (for the writer); () for none
    uncountable: str = ""  # why mmtok cannot count this part ("" when it can)
    clip: VideoClip | None = None  # a video part's clip and frame rate, where the body sets them


@dataclass(frozen=True)
class Request:
    """One API request body, read."""

    api: str  # a key of APIS
    model: str | None  # as the body names it (Gemini bodies name none: it is in the URL)
    parts: tuple[Part, ...]
    messages: int = 0  # messages (turns) in the body, for per-message overheads
    named_messages: int = 0  # OpenAI messages with a "name"
    framing: tuple[str, ...] = ()  # each message's role (and name), which OpenAI's framing encodes as tokens
    max_output_tokens: int | None = None  # the body's output budget (max_tokens, max_output_tokens, ...)
    service_tier: str | None = None  # as the body asks it
    media_resolution: str | None = None  # the request-wide Gemini level, as mmtok names it
    tools: int = 0  # tool definitions given (their text is a part of its own, "tools")
    tool_choice: str | None = None  # auto | any | tool | none, where the body says
    source: str = "<body>"  # the file, URL path or "<body>" it came from
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    notes: tuple[str, ...] = ()  # what the reader noticed (settings it does not price, ...)

    @property
    def media(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.kind != "text")

    def describe(self) -> str:
        kinds: dict[str, int] = {}
        for part in self.parts:
            kinds[part.kind] = kinds.get(part.kind, 0) + 1
        counted = ", ".join(f"{n} {k}" for k, n in kinds.items())
        return f"{APIS[self.api].split(' (')[0]} body, {self.model or 'no model named'}: {counted or 'no parts'}"
