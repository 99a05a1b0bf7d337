"""Batch files: the requests people submit to the providers' batch APIs, read by their structure, line by line.

    >>> batch = open_batch("batch.jsonl")                                         # doctest: +SKIP
    >>> batch.format, [(line.number, line.custom_id, line.api) for line in batch.lines()]  # doctest: +SKIP

Formats (each provider's page read 2026-12-05):

- ``openai``: OpenAI's Batch input, JSON Lines of ``{"custom_id", "method": "POST", "url", "body"}``; ``url`` is the
  endpoint (``/v1/chat/completions`` and ``/v1/responses`` are bodies mmtok reads; ``/v1/embeddings``,
  ``/v1/completions``, ``/v1/moderations``, ``/v1/images/*`` and ``/v1/videos`` are read as lines but not priced)
  (platform.openai.com/docs/api-reference/batch/request-input).
- ``anthropic``: the body of Anthropic's ``POST /v1/messages/batches``, one JSON document
  ``{"requests": [{"custom_id", "params"}]}`` (what ``client.messages.batches.create`` sends), read request by
  request with ijson; or JSON Lines of ``{"custom_id", "params"}`` (``anthropic-jsonl``)
  (platform.claude.com/docs/en/build-with-claude/batch-processing).
- ``gemini``: Gemini's batch input file, JSON Lines of ``{"key", "request"}`` whose request is a
  GenerateContentRequest (ai.google.dev/gemini-api/docs/batch-api, "Input file").
- ``gemini-inline``: the body of ``models/MODEL:batchGenerateContent`` with inline requests
  (``{"batch": {"inputConfig": {"requests": {"requests": [{"request", "metadata": {"key"}}]}}}}``, what
  ``client.batches.create(src=[...])`` sends); the model is in the URL, so it is priced with ``-m``.

Each line's body is read by :func:`mmtok.request.parse_body` with its API known, as a body sent to that endpoint is.
A line that is not JSON, or lacks what its format requires, is a :class:`BadLine` naming its number; the lines after
it are read. The file is read a line (or, in a JSON document, a request) at a time: memory holds one line, never the
file. The providers' limits (:data:`LIMITS`) are checked by :func:`survey`, a first pass that reads no JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mmtok.errors import RequestError

MAX_LINE_BYTES = 64 * 2**20  # mmtok reads a line (or a request of a JSON document) up to this; no page sets one
CHUNK_BYTES = 1 << 20
DOCUMENT_HEAD_BYTES = 4096  # where a JSON document's first key is looked for


@dataclass(frozen=True)
class BatchLimits:
    """What a provider's batch API takes, with the page it is from. ``None``: the page sets no such limit."""

    provider: str
    max_requests: int | None
    max_file_bytes: int | None
    max_line_bytes: int | None
    source: str
    custom_id: str = ""  # a pattern each custom_id must match ("" for any string)
    custom_id_rule: str = ""  # the pattern in words


MIB = 2**20
LIMITS = {  # read 2026-12-05; "MB" on these pages is taken as MiB
    "openai": BatchLimits(
        "OpenAI",
        50_000,
        200 * MIB,
        None,
        "platform.openai.com/docs/api-reference/batch/create (input_file_id: up to 50,000 requests, up to 200 MB), "
        "read 2026-12-05",
    ),
    "anthropic": BatchLimits(
        "Anthropic",
        100_000,
        256 * MIB,
        None,
        "platform.claude.com/docs/en/build-with-claude/batch-processing (100,000 Message requests or 256 MB, "
        "whichever is reached first; custom_id ^[a-zA-Z0-9_-]{1,64}$), read 2026-12-05",
        r"[a-zA-Z0-9_-]{1,64}",
        "1 to 64 letters, digits, '-' or '_'",
    ),
    "gemini": BatchLimits(
        "Gemini",
        None,
        2 * 2**30,
        None,
        "ai.google.dev/gemini-api/docs/batch-api (input file of GenerateContentRequests) and the Files API (2 GB per "
        "file), read 2026-12-05",
    ),
    "gemini-inline": BatchLimits(
        "Gemini",
        None,
        20 * MIB,
        None,
        "ai.google.dev/gemini-api/docs/batch-api (inline requests: total request size under 20 MB), read 2026-12-05",
    ),
}
FORMAT_NAMES = {"openai": "OpenAI Batch input", "anthropic": "Anthropic Message Batches request",
                "anthropic-jsonl": "Anthropic batch requests (JSON Lines)", "gemini": "Gemini batch input file",
                "gemini-inline": "Gemini inline batch requests"}  # fmt: skip
FORMAT_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "anthropic-jsonl": "anthropic",
                    "gemini": "gemini", "gemini-inline": "gemini-inline"}  # fmt: skip
OPENAI_ENDPOINTS = {"/v1/chat/completions": "openai-chat", "/v1/responses": "openai-responses"}
OPENAI_UNPRICED = ("/v1/embeddings", "/v1/completions", "/v1/moderations", "/v1/images/generations",
                   "/v1/images/edits", "/v1/videos")  # fmt: skip
DOCUMENT_ITEMS = {"anthropic": "requests.item", "gemini-inline": "batch.inputConfig.requests.requests.item"}
JSONL_KEYS = {"openai": ("custom_id", "body"), "anthropic-jsonl": ("custom_id", "params"), "gemini": ("key", "request")}


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch file: its number (the line, or the request's place in a JSON document), its id, the
    API its body is for and the body. ``unpriced``: why mmtok does not price it (an endpoint it does not read)."""

    number: int
    custom_id: str
    api: str
    body: dict[str, Any]
    size_bytes: int
    unpriced: str = ""

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model.removeprefix("models/") if isinstance(model, str) and model else None


@dataclass(frozen=True)
class BadLine:
    """A line that is not a request its format allows: named by number, with the problem, and read past."""

    number: int
    problem: str
    custom_id: str | None = None
    size_bytes: int = 0

    def __str__(self) -> str:
        named = f" ({self.custom_id})" if self.custom_id else ""
        return f"line {self.number}{named}: {self.problem}"


@dataclass
class Survey:
    """A first pass over a batch file, before any JSON is read: its size, requests and longest line, and the
    provider limits they break."""

    size_bytes: int
    requests: int | None  # None where counting needs the JSON read (a JSON document)
    longest_line: int
    problems: list[str] = field(default_factory=list)


class BatchFile:
    """A batch file whose format is known (:func:`open_batch`); :meth:`lines` reads it from the start each time."""

    def __init__(self, path: Path, format: str) -> None:
        self.path = path
        self.format = format
        self.provider = FORMAT_PROVIDERS[format]
        self.limits = LIMITS[self.provider]

    @property
    def is_document(self) -> bool:
        return self.format in DOCUMENT_ITEMS

    def lines(self, start: int = 0) -> Iterator[BatchLine | BadLine]:
        """Each request in order (those numbered ``start`` or less are passed over unread), a repeated custom_id
        a :class:`BadLine` naming the line that used it first."""
        ids = FirstUse(self.limits.provider)
        for item in self.raw(start):
            line = item if isinstance(item, BadLine) else read_item(item[1], item[0], self.format)
            yield ids.check(line)

    def raw(self, start: int = 0) -> Iterator[tuple[int, bytes | dict[str, Any]] | BadLine]:
        """Each request as it stands in the file, not yet read as a request: (number, a JSON line's bytes or a
        document's request), or a :class:`BadLine` for one too long to read."""
        with self.path.open("rb") as f:
            if self.is_document:
                yield from _document_items(f, self.format, self.path, start)
                return
            for number, raw in jsonl_lines(f):
                if number > start:
                    yield BadLine(number, raw) if isinstance(raw, str) else (number, raw)

    def survey(self) -> Survey:
        """Size, request count and longest line, against the provider's limits (:data:`LIMITS`)."""
        size = self.path.stat().st_size
        count, longest = (None, 0) if self.is_document else _count_lines(self.path)
        found = Survey(size, count, longest)
        limits = self.limits
        cite = f"({limits.source})"
        if limits.max_file_bytes is not None and size > limits.max_file_bytes:
            found.problems.append(f"{size:,} bytes: the {limits.provider} batch API takes a file of at most "
                                  f"{limits.max_file_bytes:,} bytes {cite}; split it")  # fmt: skip
        if limits.max_requests is not None and count is not None and count > limits.max_requests:
            found.problems.append(f"{count:,} requests: the {limits.provider} batch API takes at most "
                                  f"{limits.max_requests:,} per batch {cite}; split it")  # fmt: skip
        if longest > MAX_LINE_BYTES:
            found.problems.append(f"a line of {longest:,} bytes: mmtok reads a line up to {MAX_LINE_BYTES:,}")
        return found


# ---------------------------------------------------------------------------------------------------- formats
def open_batch(path: str | os.PathLike[str]) -> BatchFile:
    """The batch file at ``path``, its format told by its structure; a :class:`RequestError` if it is none."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.readline(MAX_LINE_BYTES)  # a JSON Lines file's first request whole
            found = batch_format(head)
            if found is None:  # or a JSON document spread over lines: its first key tells
                f.seek(0)
                found = _document_format(f.read(DOCUMENT_HEAD_BYTES).removeprefix(b"\xef\xbb\xbf").lstrip())
    except OSError as e:
        raise RequestError(f"{path}: cannot read: {e.strerror or e}") from None
    if found is None:
        raise RequestError(f"{path}: not a batch file of a known format ({', '.join(FORMAT_PROVIDERS)})")
    return BatchFile(path, found)


def batch_format(head: bytes) -> str | None:
    """The format of a file starting with ``head`` (JSON Lines: by its first line's keys, so ``head`` must hold that
    line whole; a JSON document: by its first key), or None."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text.startswith(b"{"):
        return None
    first = text.split(b"\n", 1)[0]
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        return _jsonl_format(value)
    return _document_format(text)


def _jsonl_format(first: dict[str, Any]) -> str | None:
    for name, keys in JSONL_KEYS.items():
        if all(k in first for k in keys):
            return name
    if isinstance(first.get("requests"), list):  # a one-line JSON document
        return "anthropic"
    return "gemini-inline" if isinstance(first.get("batch"), dict) else None


_DOCUMENT_KEY = re.compile(rb'^\{\s*"(requests|batch)"\s*:')


def _document_format(text: bytes) -> str | None:
    """A JSON document spread over lines: its first key says which (``requests``: Anthropic's; ``batch``: Gemini's
    inline requests)."""
    match = _DOCUMENT_KEY.match(text)
    if match is None:
        return None
    return "anthropic" if match.group(1) == b"requests" else "gemini-inline"


def looks_like_batch(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` is a batch file (its first line, or a document's first key, tells)."""
    try:
        open_batch(path)
    except RequestError:
        return False
    return True


# ------------------------------------------------------------------------------------------------- JSON Lines
def jsonl_lines(f: IO[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | str]]:
    """(line number, bytes) of each line that is not blank; a line longer than ``max_line`` is read past in chunks
    and comes as a string saying so (memory never holds more than ``max_line`` bytes of it)."""
    number = 0
    while raw := f.readline(max_line + 1):
        number += 1
        if len(raw) > max_line and not raw.endswith(b"\n"):
            size = len(raw)
            while (rest := f.readline(CHUNK_BYTES)) and size < 2**62:
                size += len(rest)
                if rest.endswith(b"\n"):
                    break
            yield number, f"{size:,} bytes: longer than the {max_line:,} bytes mmtok reads in a line"
            continue
        if raw.strip():
            yield number, raw


def _count_lines(path: Path) -> tuple[int, int]:
    """Lines that are not blank, and the longest, counted over the raw bytes (no JSON read)."""
    count, longest, current, blank = 0, 0, 0, True
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                piece = chunk[start:end]
                current += len(piece) + 1
                blank = blank and not piece.strip()
                count += not blank
                longest = max(longest, current)
                current, blank, start = 0, True, end + 1
            piece = chunk[start:]
            current += len(piece)
            blank = blank and not piece.strip()
    if current:
        count += not blank
        longest = max(longest, current)
    return count, longest


class FirstUse:
    """The line each custom_id was first used on: a later use is a :class:`BadLine` (the providers refuse a batch
    that repeats an id). Holds one entry per request, which the provider's request count bounds."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.first: dict[str, int] = {}

    def check(self, line: BatchLine | BadLine) -> BatchLine | BadLine:
        if isinstance(line, BadLine):
            return line
        return self.repeated(line.custom_id, line.number, line.size_bytes) or line

    def repeated(self, custom_id: str, number: int, size_bytes: int = 0) -> BadLine | None:
        """The :class:`BadLine` of a request whose id an earlier one used, else None (the id is noted)."""
        seen = self.first.setdefault(custom_id, number)
        if seen == number:
            return None
        return BadLine(number, f"custom_id {custom_id!r} is used on line {seen} too: the {self.provider} batch API "
                       "refuses a file with a repeated id", custom_id, size_bytes)  # fmt: skip


def read_item(raw: bytes | dict[str, Any], number: int, format: str) -> BatchLine | BadLine:
    """One request of ``format``: a JSON line's bytes, or a request a JSON document held."""
    if isinstance(raw, dict):
        return ENVELOPES[format](raw, number, _size_of(raw))
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return BadLine(number, f"not valid JSON ({_reason(e)})", size_bytes=len(raw))
    if not isinstance(value, dict):
        return BadLine(number, f"a JSON {type(value).__name__}, not a request object", size_bytes=len(raw))
    return ENVELOPES[format](value, number, len(raw))


def _reason(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    return "nested too deeply" if isinstance(error, RecursionError) else str(error)


def _id(value: Any, name: str, number: int, size: int) -> str | BadLine:
    if isinstance(value, str) and value:
        return value
    return BadLine(number, f"no {name} (each request needs a string {name})", size_bytes=size)


def _openai(value: dict[str, Any], number: int, size: int) -> BatchLine | BadLine:
    custom_id = _id(value.get("custom_id"), "custom_id", number, size)
    if isinstance(custom_id, BadLine):
        return custom_id
    url, body, method = value.get("url"), value.get("body"), value.get("method", "POST")
    if method != "POST":
        return BadLine(number, f"method {method!r}: batch requests are POST", custom_id, size)
    if not isinstance(body, dict):
        return BadLine(number, "no body object", custom_id, size)
    api = OPENAI_ENDPOINTS.get(url) if isinstance(url, str) else None
    if api is not None:
        return BatchLine(number, custom_id, api, body, size)
    if url in OPENAI_UNPRICED:
        reason = f"{url} is a batch endpoint whose bodies mmtok does not price (it reads {', '.join(OPENAI_ENDPOINTS)})"
        return BatchLine(number, custom_id, "", body, size, reason)
    return BadLine(number, f"url {url!r} is not an endpoint of OpenAI's Batch API", custom_id, size)


def _anthropic(value: dict[str, Any], number: int, size: int) -> BatchLine | BadLine:
    custom_id = _id(value.get("custom_id"), "custom_id", number, size)
    if isinstance(custom_id, BadLine):
        return custom_id
    limits = LIMITS["anthropic"]
    if not re.fullmatch(limits.custom_id, custom_id):
        return BadLine(number, f"custom_id {custom_id!r} is not {limits.custom_id_rule} ({limits.source})",
                       custom_id, size)  # fmt: skip
    params = value.get("params")
    if not isinstance(params, dict):
        return BadLine(number, "no params object (the Messages request)", custom_id, size)
    return BatchLine(number, custom_id, "anthropic-messages", params, size)


def _gemini(value: dict[str, Any], number: int, size: int) -> BatchLine | BadLine:
    key = _id(value.get("key"), "key", number, size)
    if isinstance(key, BadLine):
        return key
    request = value.get("request")
    if not isinstance(request, dict):
        return BadLine(number, "no request object (a GenerateContentRequest)", key, size)
    return BatchLine(number, key, "gemini-generate", request, size)


def _gemini_inline(value: dict[str, Any], number: int, size: int) -> BatchLine | BadLine:
    request = value.get("request")
    metadata = value.get("metadata")
    key = metadata.get("key") if isinstance(metadata, dict) else None
    custom_id = key if isinstance(key, str) and key else f"#{number}"
    if not isinstance(request, dict):
        return BadLine(number, "no request object (a GenerateContentRequest)", custom_id, size)
    return BatchLine(number, custom_id, "gemini-generate", request, size)


ENVELOPES = {"openai": _openai, "anthropic": _anthropic, "anthropic-jsonl": _anthropic, "gemini": _gemini,
             "gemini-inline": _gemini_inline}  # fmt: skip


# ---------------------------------------------------------------------------------------------- JSON documents
def _document_items(
    f: IO[bytes], format: str, path: Path, start: int
) -> Iterator[tuple[int, dict[str, Any]] | BadLine]:
    """The requests of a JSON document, one at a time (ijson, its C parser); a syntax error ends the reading with
    a :class:`BadLine` after the last request read, as nothing past it can be told apart."""
    import ijson

    number = 0
    try:
        for number, item in enumerate(ijson.items(f, DOCUMENT_ITEMS[format], use_float=True), 1):
            if number <= start:
                continue
            if not isinstance(item, dict):
                yield BadLine(number, f"a JSON {type(item).__name__}, not a request object")
                continue
            yield number, item
    except ijson.JSONError as e:
        yield BadLine(
            number + 1, f"{path.name} is not valid JSON from here on ({e}): the requests after it are not read"
        )


def _size_of(item: dict[str, Any]) -> int:
    """A request's size as JSON (a document's requests have no lines of their own)."""
    return len(json.dumps(item, separators=(",", ":")).encode())


def document_wrapper(path: Path, format: str) -> dict[str, Any]:
    """A JSON document batch without its requests (its other fields, such as Gemini's ``displayName``), to write a
    new document around new requests."""
    import ijson

    items_prefix = DOCUMENT_ITEMS[format].removesuffix(".item")
    builder = ijson.ObjectBuilder()
    with path.open("rb") as f:
        for prefix, event, value in ijson.parse(f, use_float=True):
            if prefix.startswith(items_prefix + ".item") or (prefix == items_prefix and event != "start_array"
                                                              and event != "end_array"):  # fmt: skip
                continue
            builder.event(event, value)
    return builder.value if isinstance(builder.value, dict) else {}


def set_requests(wrapper: dict[str, Any], format: str, requests: list[Any]) -> dict[str, Any]:
    """``wrapper`` with its requests array (at the format's place) set to ``requests``."""
    node: Any = wrapper
    keys = DOCUMENT_ITEMS[format].removesuffix(".item").split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = requests
    return wrapper
