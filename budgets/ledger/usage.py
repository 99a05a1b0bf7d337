"""What a provider billed for a call, read from its response: whole JSON bodies and SSE streams as they pass.

Each provider reports usage in its own fields (read from the official SDKs' response types, openai 3.57,
anthropic 2.15, google-genai 3.6, on 2026-12-02):

- OpenAI Chat Completions: ``usage.prompt_tokens`` (cached included), ``completion_tokens`` (reasoning included),
  ``prompt_tokens_details.cached_tokens`` / ``cache_write_tokens`` (models that bill cache writes) /
  ``audio_tokens``; streamed, a last chunk with ``usage`` when the request sets ``stream_options.include_usage``.
- OpenAI Responses: ``usage.input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``; streamed, in
  the ``response.completed`` (or ``.incomplete`` / ``.failed``) event's ``response``. ``POST /responses/input_tokens``
  answers ``{"object": "response.input_tokens", "input_tokens": N}``.
- Anthropic Messages: ``usage.input_tokens`` excludes the cache: billed input is it plus
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; streamed, ``message_start`` carries the input
  and ``message_delta`` the cumulative output (and, on newer API versions, cumulative input). count_tokens answers
  ``{"input_tokens": N}``.
- Gemini: ``usageMetadata.promptTokenCount`` (cached content included), ``candidatesTokenCount`` plus
  ``thoughtsTokenCount`` (both billed as output), ``cachedContentTokenCount``, and per modality in
  ``promptTokensDetails``; streamed (``alt=sse``), every chunk may carry it and the last one is final. countTokens
  answers ``totalTokens`` and ``promptTokensDetails``.

Output by modality: OpenAI's ``completion_tokens_details.audio_tokens`` (audio output, priced at the audio output
rate), Gemini's ``candidatesTokensDetails``. Anthropic's ``usage.cache_creation`` splits cache writes by lifetime:
a 1-hour write costs 2x the base input price, a 5-minute one 1.25x (platform.claude.com/en/docs/build-with-claude/
prompt-caching, "Pricing", read 2026-12-05). The readers are tested against the examples on each provider's API
reference pages (tests/test_proxy_usage.py names them).

Counts here are what the provider said it billed: exact by definition, or absent (``None``), never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

APIS = (
    "openai-chat",
    "openai-responses",
    "openai-input-tokens",
    "anthropic-messages",
    "anthropic-count-tokens",
    "gemini-generate",
    "gemini-count-tokens",
)
MAX_SSE_LINE_BYTES = 16 * 2**20  # a longer SSE line is not an event mmtok reads usage from: reading stops
MAX_SSE_EVENT_BYTES = 32 * 2**20  # nor a longer event (an image in base64 is a few MB): reading stops
FEED_SLICE_BYTES = 2**20  # a chunk is read a slice at a time (bounds the lines split from it at once)
MAX_JSON_STREAM_BYTES = 64 * 2**20  # a Gemini stream without alt=sse is one JSON array, parsed at its end
GEMINI_MODALITIES = {"TEXT": "text", "IMAGE": "image", "AUDIO": "audio", "VIDEO": "video", "DOCUMENT": "document"}


@dataclass(frozen=True)
class Usage:
    """Tokens a provider billed for one call. ``input_tokens`` includes cached and cache-write tokens;
    ``output_tokens`` includes reasoning. ``input_by_modality`` holds what the provider itemised (Gemini's
    ``promptTokensDetails``, OpenAI's ``audio_tokens``), nothing inferred."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0  # read from a prompt cache (billed at the cache-read rate)
    cache_write_tokens: int = 0  # written to a prompt cache (Anthropic)
    reasoning_tokens: int = 0  # part of output_tokens
    input_by_modality: Mapping[str, int] = field(default_factory=dict)
    output_by_modality: Mapping[str, int] = field(default_factory=dict)  # audio, image: parts of output_tokens
    cache_write_1h_tokens: int = 0  # the part of cache_write_tokens written for an hour (Anthropic)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "input_by_modality": dict(self.input_by_modality),
            "output_by_modality": dict(self.output_by_modality),
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _openai_chat(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    audio = _int(_get(usage, "prompt_tokens_details", "audio_tokens"))
    image = _int(_get(usage, "prompt_tokens_details", "image_tokens"))
    modalities = {k: v for k, v in (("audio", audio), ("image", image)) if v}
    audio_out = _int(_get(usage, "completion_tokens_details", "audio_tokens"))
    return Usage(
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        _int(_get(usage, "prompt_tokens_details", "cached_tokens")) or 0,
        _int(_get(usage, "prompt_tokens_details", "cache_write_tokens")) or 0,
        _int(_get(usage, "completion_tokens_details", "reasoning_tokens")) or 0,
        modalities,
        {"audio": audio_out} if audio_out else {},
    )


def _openai_responses(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    image = _int(_get(usage, "input_tokens_details", "image_tokens"))
    return Usage(
        _int(usage.get("input_tokens")),
        _int(usage.get("output_tokens")),
        _int(_get(usage, "input_tokens_details", "cached_tokens")) or 0,
        _int(_get(usage, "input_tokens_details", "cache_write_tokens")) or 0,
        _int(_get(usage, "output_tokens_details", "reasoning_tokens")) or 0,
        {"image": image} if image else {},
    )


def _anthropic(usage: Any, previous: Usage | None = None) -> Usage | None:
    """Anthropic usage; ``previous`` (a stream's ``message_start``) supplies what a ``message_delta`` leaves out."""
    if not isinstance(usage, dict):
        return previous
    before = previous or Usage()
    fresh = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    read = before.cached_tokens if read is None else read
    written = before.cache_write_tokens if written is None else written
    if fresh is not None:
        total = fresh + read + written
    elif before.input_tokens is not None:  # the start's fresh input, with the cache counts the delta updated
        total = before.input_tokens - before.cached_tokens - before.cache_write_tokens + read + written
    else:
        total = None
    output = _int(usage.get("output_tokens"))
    hour = _int(_get(usage, "cache_creation", "ephemeral_1h_input_tokens"))
    hour = before.cache_write_1h_tokens if hour is None else min(hour, written)
    output = before.output_tokens if output is None else output
    return Usage(total, output, read, written, cache_write_1h_tokens=hour)


def _gemini_modalities(details: Any) -> dict[str, int]:
    """A Gemini ``*TokensDetails`` list (``[{"modality": "IMAGE", "tokenCount": 258}]``) as modality -> tokens."""
    modalities: dict[str, int] = {}
    for detail in details if isinstance(details, list) else ():
        name = GEMINI_MODALITIES.get(_get(detail, "modality") or "")
        count = _int(_get(detail, "tokenCount"))
        if name and count:
            modalities[name] = modalities.get(name, 0) + count
    return modalities


def _gemini(metadata: Any) -> Usage | None:
    if not isinstance(metadata, dict):
        return None
    modalities = _gemini_modalities(metadata.get("promptTokensDetails"))
    produced = {k: v for k, v in _gemini_modalities(metadata.get("candidatesTokensDetails")).items() if k != "text"}
    prompt = _int(metadata.get("promptTokenCount"))
    if prompt is None:
        prompt = _int(metadata.get("totalTokens"))  # countTokens
    tools = _int(metadata.get("toolUsePromptTokenCount")) or 0
    candidates = _int(metadata.get("candidatesTokenCount"))
    thoughts = _int(metadata.get("thoughtsTokenCount")) or 0
    output = None if candidates is None and not thoughts else (candidates or 0) + thoughts
    return Usage(
        None if prompt is None else prompt + tools,
        output,
        _int(metadata.get("cachedContentTokenCount")) or 0,
        0,
        thoughts,
        modalities,
        produced,
    )


def usage_from_body(api: str, body: Any) -> Usage | None:
    """The usage in a whole (not streamed) response body of ``api``; None where the body reports none."""
    if not isinstance(body, dict):
        if api == "gemini-generate" and isinstance(body, list):  # streamGenerateContent without alt=sse
            found = [_gemini(_get(chunk, "usageMetadata")) for chunk in body]
            return next((u for u in reversed(found) if u is not None), None)
        return None
    if api == "openai-chat":
        return _openai_chat(body.get("usage"))
    if api == "openai-responses":
        return _openai_responses(body.get("usage"))
    if api == "anthropic-messages":
        return _anthropic(body.get("usage"))
    if api in ("openai-input-tokens", "anthropic-count-tokens"):
        count = _int(body.get("input_tokens"))
        return None if count is None else Usage(count, 0)
    if api == "gemini-generate":
        return _gemini(body.get("usageMetadata"))
    if api == "gemini-count-tokens":
        return _gemini(body)
    raise ValueError(f"unknown API {api!r}; known: {', '.join(APIS)}")


def usage_from_bytes(api: str, content: bytes) -> Usage | None:
    """``usage_from_body`` of a response's bytes; None where they are not JSON."""
    try:
        return usage_from_body(api, json.loads(content))
    except (ValueError, RecursionError):
        return None


RESPONSES_FINAL = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')


class StreamUsage:
    """Usage read from a streamed response as its bytes pass, chunk by chunk, without holding the stream.

    ``feed`` each chunk as it is forwarded; ``usage`` is what the stream reported so far (the final figures once it
    has ended). SSE events are split on line ends (``\\n``, ``\\r\\n``) and only events that can carry usage are
    parsed as JSON. A stream that is not SSE (Gemini without ``alt=sse``: one JSON array) is kept up to
    :data:`MAX_JSON_STREAM_BYTES` and read at its end.

    What the reader holds is capped: a line at :data:`MAX_SSE_LINE_BYTES`, an event (its lines up to the blank line
    that ends it) at :data:`MAX_SSE_EVENT_BYTES`, a JSON stream at :data:`MAX_JSON_STREAM_BYTES`. Past a cap it
    stops reading and says why in ``overflow``: the usage of such an answer cannot be read (the proxy ends the call)."""

    def __init__(self, api: str, sse: bool = True) -> None:
        self.api = api
        self.sse = sse
        self.usage: Usage | None = None
        self.overflow = ""  # the cap the stream passed, in words ("" while within them)
        self._partial = b""  # the unfinished last line
        self._data = bytearray()  # the current event's data lines, joined by newlines
        self._data_lines = 0
        self._event_bytes = 0  # the current event's size so far, every line counted
        self._gave_up = False  # a line, event or JSON stream over its cap: usage is not read any further
        self._json = bytearray()

    def feed(self, chunk: bytes) -> None:
        # In slices: a decompressed chunk may be tens of MB of short lines, split into as many objects at once.
        for start in range(0, len(chunk), FEED_SLICE_BYTES):
            if self._gave_up:
                return
            self._feed(chunk[start : start + FEED_SLICE_BYTES])

    def _feed(self, chunk: bytes) -> None:
        if not self.sse:
            if len(self._json) + len(chunk) > MAX_JSON_STREAM_BYTES:
                self._stop(f"the streamed answer passed {MAX_JSON_STREAM_BYTES:,} bytes")
            else:
                self._json += chunk
            return
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line[:-1] if line.endswith(b"\r") else line)
            if self._gave_up:
                return
        if len(self._partial) > MAX_SSE_LINE_BYTES:
            self._stop(f"an SSE line passed {MAX_SSE_LINE_BYTES:,} bytes")

    def _stop(self, reason: str) -> None:
        self._gave_up, self.overflow = True, reason
        self._partial, self._data, self._json = b"", bytearray(), bytearray()

    def close(self) -> Usage | None:
        """The stream has ended: read what is left (a last event without its blank line, a JSON array)."""
        if self._gave_up:
            return self.usage
        if not self.sse:
            found = usage_from_bytes(self.api, bytes(self._json))
            self.usage = found or self.usage
            self._json = bytearray()
            return self.usage
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        self._line(b"")
        return self.usage

    def _line(self, line: bytes) -> None:
        if not line:  # a blank line ends the event
            if self._data_lines:
                self._event(bytes(self._data))
            self._data, self._data_lines, self._event_bytes = bytearray(), 0, 0
            return
        self._event_bytes += len(line) + 1
        if self._event_bytes > MAX_SSE_EVENT_BYTES:
            self._stop(f"an SSE event passed {MAX_SSE_EVENT_BYTES:,} bytes without the blank line that ends it")
        elif line.startswith(b"data:"):
            if self._data_lines:
                self._data += b"\n"
            self._data += line[6:] if line.startswith(b"data: ") else line[5:]
            self._data_lines += 1

    def _event(self, data: bytes) -> None:
        api = self.api
        if api == "openai-chat":
            if b'"usage"' in data:
                self._parsed(data, lambda event: _openai_chat(event.get("usage")))
        elif api == "openai-responses":
            if any(kind in data for kind in RESPONSES_FINAL):
                self._parsed(data, lambda event: _openai_responses(_get(event, "response", "usage")))
        elif api == "anthropic-messages":
            if b'"message_start"' in data:
                self._parsed(data, lambda event: _anthropic(_get(event, "message", "usage"), self.usage))
            elif b'"message_delta"' in data:
                self._parsed(data, lambda event: _anthropic(event.get("usage"), self.usage))
        elif api == "gemini-generate" and b'"usageMetadata"' in data:
            self._parsed(data, lambda event: _gemini(event.get("usageMetadata")))

    def _parsed(self, data: bytes, read: Any) -> None:
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            return
        if isinstance(event, dict):
            found = read(event)
            self.usage = found or self.usage


def billed_cost(model: str, usage: Usage, prices: tuple[Any, ...] = (), option: str = "standard") -> Any:
    """What ``usage`` costs on ``model`` at today's rates (genai-prices, the catalog, or a sheet), as a Decimal:
    cache reads and writes at their rates (a 1-hour Anthropic write at 2x input), itemised audio, image and video input
    at the modality's rate where the model has one (at the input rate otherwise, as providers bill images and video),
    audio output at the audio output rate, other output at the output rate.
    A ``PriceError`` where the model or a needed rate is unknown, never a silent zero."""
    from decimal import Decimal

    from mmtok.budgets.pricing import rate_card, resolve
    from mmtok.budgets.pricing.money import MILLION
    from mmtok.errors import PriceError

    if usage.input_tokens is None and usage.output_tokens is None:
        raise PriceError(f"{model}: the response reported no usage")
    card = rate_card(resolve(model, prices), option=option)
    input_tokens = usage.input_tokens or 0
    rates = dict(card.tier_for(input_tokens).rates)
    if "input" in rates:
        rates["cache_write_1h"] = rates["input"] * 2  # Anthropic's 1-hour writes (module docstring)
    fresh = input_tokens - usage.cached_tokens - usage.cache_write_tokens
    hour = usage.cache_write_1h_tokens
    parts = [("cache_read", usage.cached_tokens), ("cache_write", usage.cache_write_tokens - hour)]
    parts.append(("cache_write_1h", hour))
    for modality in ("audio", "image", "video"):
        tokens = min(usage.input_by_modality.get(modality, 0), fresh)
        if tokens and f"input_{modality}" in rates:
            parts.append((f"input_{modality}", tokens))
            fresh -= tokens
    output = usage.output_tokens or 0
    for modality, tokens in usage.output_by_modality.items():
        tokens = min(tokens, output)
        if tokens:  # audio output at its own rate; an image output rate mmtok does not know is said, not guessed
            parts.append((f"output_{modality}", tokens))
            output -= tokens
    parts += [("input", fresh), ("output", output)]
    total = Decimal(0)
    for rate_name, tokens in parts:
        if not tokens:
            continue
        rate = rates.get(rate_name)
        if rate is None:
            raise PriceError(f"{card.source}: {card.model_ref} has no {rate_name.replace('_', ' ')} rate")
        total += tokens * rate / MILLION
    return total + card.request_fee
