"""Sending a call upstream and passing the answer back: whole bodies and SSE streams chunk by chunk, usage read
as the bytes pass, the call's record committed before the answer ends.

Failures upstream are answered as the provider's own: a status the upstream sent (4xx, 5xx) passes through with
its body and headers untouched; an upstream that cannot be reached is a 502, one that does not answer in time a
504, each in the provider's error shape, so the SDK's retry logic acts as it would against the provider. A stream
cut short upstream is cut short to the client (the SDK sees the connection end, as it would).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import httpx
from starlette.responses import Response, StreamingResponse

from mmtok.budgets.ledger import Record
from mmtok.budgets.proxy.providers import Route, error_response, returned_headers
from mmtok.budgets.usage import StreamUsage, Usage, usage_from_bytes

WHOLE_BODY_BYTES = 8 * 2**20  # a non-streamed answer up to this size is read whole and sent with its length


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
    request = client.build_request("POST", url, headers=headers, content=content)
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


def failure(route: Route, upstream: Upstream) -> Response:
    return error_response(route.provider, upstream.status, upstream.message, upstream.outcome)


def is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


Finish = Callable[[Record, Usage | None], Awaitable[None]]


async def whole(
    route: Route, response: httpx.Response, record: Record, finish: Finish, extra: dict[str, str]
) -> Response:
    """A non-streamed answer: read whole, its usage read, the record committed, then the answer sent."""
    try:
        content = await response.aread()
    except httpx.HTTPError as e:
        await response.aclose()
        record.outcome = "upstream_error"
        record.message = f"the upstream answer was cut short ({type(e).__name__})"
        record.status = 502
        await finish(record, None)
        return error_response(route.provider, 502, record.message, record.outcome)
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


def streamed(
    route: Route, response: httpx.Response, record: Record, finish: Finish, extra: dict[str, str], sse: bool
) -> StreamingResponse:
    """A streamed answer, passed on chunk by chunk as it arrives; the record is committed when it ends."""
    reader = StreamUsage(route.api, sse=sse)
    record.status = response.status_code
    record.stream = True

    async def chunks() -> AsyncIterator[bytes]:
        finished = False
        try:
            async for chunk in response.aiter_bytes():
                reader.feed(chunk)
                yield chunk
            finished = True
        except httpx.HTTPError as e:
            record.outcome = "cut"
            record.message = f"the upstream stream ended early ({type(e).__name__})"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
            if not finished and not record.outcome:
                record.outcome, record.message = "cut", "the client left before the stream ended"
            if finished:
                record.outcome = "ok" if response.is_success else "upstream_error"
            with anyio.CancelScope(shield=True):  # a client that left cancels the task: the record is still written
                await finish(record, reader.close())

    headers = returned_headers(response.headers) + list(extra.items())
    answer = StreamingResponse(chunks(), response.status_code)
    answer.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return answer


async def answer(
    route: Route, response: httpx.Response, record: Record, finish: Finish, extra: dict[str, str]
) -> Response:
    """Pass the upstream's answer on: whole where it is a small JSON body, streamed otherwise."""
    length = response.headers.get("content-length", "")
    if not is_stream(response) and not route.streams and length.isdigit() and int(length) <= WHOLE_BODY_BYTES:
        return await whole(route, response, record, finish, extra)
    return streamed(route, response, record, finish, extra, sse=is_stream(response))
