"""Sending a call upstream and passing the answer back: whole bodies and SSE streams chunk by chunk, usage read
as the bytes pass, the call's record committed before the answer ends.

Failures upstream are answered as the provider's own: a status the upstream sent (4xx, 5xx) passes through with
its body and headers untouched; an upstream that cannot be reached is a 502, one that does not answer in time a
504, each in the provider's error shape, so the SDK's retry logic acts as it would against the provider. A stream
cut short upstream is cut short to the client (the SDK sees the connection end, as it would).
"""

from __future__ import annotations

import functools
import json
import re
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from starlette.responses import Response, StreamingResponse

from mmtok.budgets.ledger import Record
from mmtok.budgets.ledger.usage import StreamUsage, Usage, usage_from_bytes
from mmtok.budgets.proxy.providers import Route, error_response, returned_headers

WHOLE_BODY_BYTES = 8 * 2**20  # a non-streamed answer up to this size (decoded) is read whole and sent with its length
PIECE_BYTES = 2**20  # compressed answers are inflated at most this much at a time
ACCEPTED_ENCODINGS = "gzip, deflate"  # what the proxy decodes itself (never br or zstd, whatever is installed)


@dataclass
class Upstream:
    """What came back from the upstream: a response to pass on, or why there is none."""

    response: httpx.Response | None
    status: int = 0
    outcome: str = "ok"
    message: str = ""


async def send(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], content: bytes, record: Record
) -> Upstream:
    """POST ``content`` to ``url`` with the caller's headers; the response is opened as a stream."""
    sent = time.perf_counter()
    headers = {**headers, "accept-encoding": ACCEPTED_ENCODINGS}
    request = client.build_request("POST", parsed_url(url) if "?" not in url else url, headers=headers, content=content)
    try:
        response = await client.send(request, stream=True)
    except httpx.TimeoutException as e:
        return Upstream(None, 504, "upstream_timeout", f"the upstream did not answer in time ({type(e).__name__})")
    except (httpx.ConnectError, httpx.UnsupportedProtocol) as e:
        return Upstream(None, 502, "upstream_unreachable", f"cannot reach the upstream ({type(e).__name__}: {e})")
    except httpx.HTTPError as e:  # reset, protocol error
        return Upstream(None, 502, "upstream_error", f"the upstream connection failed ({type(e).__name__}: {e})")
    record.upstream_ms = (time.perf_counter() - sent) * 1000
    return Upstream(response, response.status_code)


@functools.lru_cache(maxsize=512)
def parsed_url(url: str) -> httpx.URL:
    """An upstream URL parsed once (httpx parses a string on every request: ~15 us). Only URLs without a query string
    are kept here: a Gemini key may ride in one."""
    return httpx.URL(url)


def failure(route: Route, upstream: Upstream) -> Response:
    return error_response(route.provider, upstream.status, upstream.message, upstream.outcome)


def is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


Finish = Callable[[Record, Usage | None], Awaitable[None]]


class UnreadableAnswer(Exception):
    """An upstream answer the proxy cannot decode (an encoding it did not ask for, or corrupt compressed bytes)."""


GZIP_WBITS = zlib.MAX_WBITS | 16


def _is_zlib_wrapped(head: bytes) -> bool:
    """Whether deflate bytes carry the zlib header RFC 9110 asks for (servers also send raw deflate)."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and ((head[0] << 8) | head[1]) % 31 == 0


async def decoded(response: httpx.Response) -> AsyncIterator[bytes]:
    """The answer's bytes, decoded a bounded piece at a time: httpx would inflate each network read whole (64 KiB of
    gzip can be 64 MiB of zeros), so the proxy reads the raw bytes and inflates at most :data:`PIECE_BYTES` at once.
    Only the encodings httpx asks for (gzip, deflate) are decoded; another is an :class:`UnreadableAnswer`."""
    if response.is_stream_consumed:  # read already (a mock transport's answer): httpx has decoded it
        yield response.content
        return
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        async for chunk in response.aiter_raw():
            yield chunk
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise UnreadableAnswer(
            f"the upstream answered in content-encoding {encoding!r}, which the proxy did not ask for"
        )
    inflate = zlib.decompressobj(GZIP_WBITS) if encoding != "deflate" else None
    try:
        async for raw in response.aiter_raw():
            if inflate is None:
                inflate = zlib.decompressobj(zlib.MAX_WBITS if _is_zlib_wrapped(raw) else -zlib.MAX_WBITS)
            data = raw
            while data:
                piece = inflate.decompress(data, PIECE_BYTES)
                data = inflate.unconsumed_tail
                if piece:
                    yield piece
        rest = inflate.flush() if inflate is not None else b""
    except zlib.error as e:
        raise UnreadableAnswer(f"the upstream's {encoding} bytes are corrupt ({e})") from None
    if inflate is not None and not inflate.eof:
        raise UnreadableAnswer(f"the upstream's {encoding} bytes end before their compressed stream does")
    if rest:
        yield rest


async def whole(
    route: Route, response: httpx.Response, record: Record, finish: Finish, extra: dict[str, str]
) -> Response:
    """A non-streamed answer: read whole, its usage read, the record committed, then the answer sent. The cap on
    what is read whole is on the decoded bytes (a small gzip answer may expand a thousandfold): an answer that
    decodes past :data:`WHOLE_BODY_BYTES` is passed on as a stream instead, with the bytes read so far first."""
    chunks = decoded(response)
    read: list[bytes] = []
    size = 0
    try:
        async for chunk in chunks:
            read.append(chunk)
            size += len(chunk)
            if size > WHOLE_BODY_BYTES:
                return streamed(route, response, record, finish, extra, sse=False, first=read, rest=chunks)
    except (httpx.HTTPError, UnreadableAnswer) as e:
        await response.aclose()
        record.outcome = "upstream_error"
        record.message = (
            str(e) if isinstance(e, UnreadableAnswer) else f"the upstream answer was cut short ({type(e).__name__})"
        )
        record.status = 502
        await finish(record, None)
        return error_response(route.provider, 502, record.message, record.outcome)
    content = b"".join(read)
    usage = usage_from_bytes(route.api, content) if response.is_success else None
    record.status = response.status_code
    record.outcome = "ok" if response.is_success else "upstream_error"
    if not response.is_success:
        record.message = f"upstream answered {response.status_code}"
    await finish(record, usage)
    headers = returned_headers(response.headers) + list(extra.items())
    return _response(content, response.status_code, headers)


def _response(content: bytes, status: int, headers: list[tuple[str, str]]) -> Response:
    answer = Response(content, status)
    answer.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers] + [
        (b"content-length", str(len(content)).encode())
    ]
    return answer


class StreamCut(Exception):
    """Raised to end a streamed answer abruptly (the client sees the connection close, as when an upstream cuts a
    stream). The call's record says why; the server's log filter keeps it out of the error log."""


def streamed(
    route: Route,
    response: httpx.Response,
    record: Record,
    finish: Finish,
    extra: dict[str, str],
    sse: bool,
    first: list[bytes] | None = None,
    rest: AsyncIterator[bytes] | None = None,
    strip_usage: bool = False,
) -> StreamingResponse:
    """A streamed answer, passed on chunk by chunk as it arrives; the record is committed when it ends. ``first``
    and ``rest``: chunks already read and the iterator to go on with (an answer first meant to be read whole).
    ``strip_usage``: the proxy asked for this Chat Completions stream's usage itself, and takes it out again."""
    record.status = response.status_code
    record.stream = True

    async def upstream_chunks() -> AsyncIterator[bytes]:
        for chunk in first or ():
            yield chunk
        async for chunk in rest if rest is not None else decoded(response):
            yield chunk

    reader = StreamUsage(route.api, sse=sse)
    chunks = _passed_on(upstream_chunks(), reader, AskedUsage() if strip_usage else None, record)
    headers = returned_headers(response.headers) + list(extra.items())
    answer = StreamingResponse(_recorded(chunks, response, record, reader, finish), response.status_code)
    answer.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return answer


async def _passed_on(
    chunks: AsyncIterator[bytes], reader: StreamUsage, remover: AskedUsage | None, record: Record
) -> AsyncIterator[bytes]:
    """The chunks for the client, their usage read on the way; an answer the reader cannot go on with is cut."""
    try:
        async for chunk in chunks:
            reader.feed(chunk)
            if reader.overflow:
                record.outcome = "upstream_error"
                record.message = f"the upstream answer was ended by the proxy: {reader.overflow}"
                raise StreamCut(record.message)
            passed = remover.feed(chunk) if remover else chunk
            if passed:
                yield passed
        if remover:
            yield remover.close()
    except httpx.HTTPError as e:
        record.outcome = "cut"
        record.message = f"the upstream stream ended early ({type(e).__name__})"
        raise StreamCut(record.message) from None
    except UnreadableAnswer as e:
        record.outcome, record.message = "upstream_error", str(e)
        raise StreamCut(record.message) from None


async def _recorded(
    chunks: AsyncIterator[bytes], response: httpx.Response, record: Record, reader: StreamUsage, finish: Finish
) -> AsyncIterator[bytes]:
    """``chunks``, and once they end (or the client leaves) the upstream closed and the record committed."""
    finished = False
    try:
        async for chunk in chunks:
            yield chunk
        finished = True
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()
        if not finished and not record.outcome:
            record.outcome, record.message = "cut", "the client left before the stream ended"
        if finished:
            record.outcome = "ok" if response.is_success else "upstream_error"
        with anyio.CancelScope(shield=True):  # a client that left cancels the task: the record is still written
            await finish(record, reader.close())


async def answer(
    route: Route,
    response: httpx.Response,
    record: Record,
    finish: Finish,
    extra: dict[str, str],
    strip_usage: bool = False,
) -> Response:
    """Pass the upstream's answer on: whole where it is a small JSON body, streamed otherwise."""
    length = response.headers.get("content-length", "")
    sse = is_stream(response)
    if not sse and not route.streams and length.isdigit() and int(length) <= WHOLE_BODY_BYTES:
        return await whole(route, response, record, finish, extra)
    return streamed(route, response, record, finish, extra, sse=sse, strip_usage=strip_usage and sse)


# ------------------------------------------------------------------------------------ usage the proxy asks for
# A streamed Chat Completions call reports its usage only when the body sets stream_options.include_usage
# (https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options, read 2026-12-05: "an
# additional chunk will be streamed before the data: [DONE] message ... the choices field will always be an empty
# array. All other chunks will also include a usage field, but with a null value"). Without it the call could not be
# billed, so the proxy asks for it and takes out again what the client did not ask for.
USAGE_OPTION = b'"stream_options":{"include_usage":true}'
NULL_USAGE = (re.compile(rb',\s*"usage"\s*:\s*null'), re.compile(rb'"usage"\s*:\s*null\s*,\s*'))
EVENT_ENDS = (b"\n\n", b"\r\n\r\n")


def ask_for_usage(route: Route, payload: dict[str, Any], content: bytes) -> tuple[bytes, bool]:
    """The body to send, and whether the proxy asked for the stream's usage itself (to take it out again): a Chat
    Completions stream whose body does not set ``stream_options.include_usage``."""
    if route.api != "openai-chat" or payload.get("stream") is not True:
        return content, False
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return content, False
    if "stream_options" not in payload:  # the common case: the key added before the body's last brace
        end = content.rindex(b"}")
        comma = b"," if content[:end].rstrip()[-1:] != b"{" else b""
        return content[:end] + comma + USAGE_OPTION + content[end:], True
    body = json.loads(content)
    body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode(), True


class AskedUsage:
    """A Chat Completions stream with the usage the proxy asked for taken out: the stream re-framed into events,
    the usage-only chunk (empty ``choices``, a ``usage`` object) dropped, and the ``"usage": null`` that
    include_usage adds to every other chunk removed, so the client gets the bytes it would have got without it."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # where the search for the next event's end resumes

    def feed(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        out = bytearray()
        start = 0
        while True:
            end = self._event_end(start)
            if end < 0:
                break
            out += self._event(bytes(self._buffer[start:end]))
            start = end
        del self._buffer[:start]
        self._scanned = max(0, len(self._buffer) - 3)
        return bytes(out)

    def _event_end(self, start: int) -> int:
        """Where the event starting at ``start`` ends (after its blank line), or -1 while it has not."""
        found = [at + len(end) for end in EVENT_ENDS if (at := self._buffer.find(end, max(start, self._scanned))) >= 0]
        return min(found) if found else -1

    def close(self) -> bytes:
        rest = self._event(bytes(self._buffer)) if self._buffer else b""
        self._buffer = bytearray()
        return rest

    @staticmethod
    def _event(event: bytes) -> bytes:
        if b'"usage"' not in event:
            return event
        without = NULL_USAGE[1].sub(b"", NULL_USAGE[0].sub(b"", event))
        if without != event:
            return without
        data = b"\n".join(line[5:] for line in event.splitlines() if line.startswith(b"data:"))
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            return event
        if isinstance(chunk, dict) and chunk.get("choices") == [] and isinstance(chunk.get("usage"), dict):
            return b""  # the usage-only chunk: read by the proxy, not asked for by the client
        return event
