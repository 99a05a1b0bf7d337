"""What an API request is made of, whatever the provider's shape: a model, settings, and parts in order.

A :class:`Request` keeps the body it was read from, and each :class:`Part` the path to its object in that body
(``pointer``), so that a shrunk request is written back in the same shape with only its media changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmtok.errors import RequestError

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
    cache: str = ""  # written to the provider's prompt cache by a cache_control mark: its lifetime ("5m", "1h")


@dataclass(frozen=True, slots=True)
class Invalid:
    """A value in a body that the provider refuses (HTTP 400): the field as the provider names it, and why."""

    param: str  # "max_tokens", "n", "generationConfig.maxOutputTokens"
    reason: str  # "must be an integer, got a string ('100')"

    def __str__(self) -> str:
        return f"{self.param}: {self.reason}"


class InvalidBody(RequestError):
    """A body the provider would refuse with HTTP 400 (a value of the wrong type or out of range): one line naming
    the body, each field and why. ``problems`` keeps them apart, so the proxy can answer in the provider's shape."""

    def __init__(self, source: str, problems: tuple[Invalid, ...] | list[Invalid], provider: str = "the provider"):
        self.problems = tuple(problems)
        self.param = self.problems[0].param if self.problems else ""
        said = "; ".join(str(p) for p in self.problems)
        super().__init__(f"{source}: {said} ({provider} refuses this body with HTTP 400)")


@dataclass(frozen=True, slots=True)
class OutputAsk:
    """What a body asks of the reply: the output limit and the field that set it, how many replies (``n``,
    ``candidateCount``), in which modalities, and how the model may think first. Read by one parser for every
    caller (price, shrink, the proxy, MCP); pricing turns it into the output's upper bound."""

    limit: int | None = None  # per reply; None: the body sets none (the model's maximum applies)
    limit_field: str = ""  # the field that set it, as the body names it ("max_completion_tokens")
    candidates: int = 1  # replies generated: OpenAI n, Gemini candidateCount
    candidates_field: str = ""
    modalities: tuple[str, ...] = ()  # text | audio | image, as asked (): the model's default (text)
    thinking: str = ""  # "": not set; off | budget | dynamic | adaptive | level
    thinking_budget: int | None = None  # tokens, where the body gives a number
    server_tools: bool = False  # Anthropic server tools: one request may call the model more than once
    notes: tuple[str, ...] = ()  # what the reader noticed about these settings


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
    output: OutputAsk = field(default_factory=OutputAsk)  # the reply asked for: limit, count, modalities, thinking
    invalid: tuple[Invalid, ...] = ()  # values the provider refuses: pricing and the proxy refuse the body
    service_tier: str | None = None  # as the body asks it
    media_resolution: str | None = None  # the request-wide Gemini level, as mmtok names it
    tools: int = 0  # tool definitions given (their text is a part of its own, "tools")
    tool_choice: str | None = None  # auto | any | tool | none, where the body says
    source: str = "<body>"  # the file, URL path or "<body>" it came from
    size_bytes: int | None = None  # the body's length as sent (JSON text), where the reader had it
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
