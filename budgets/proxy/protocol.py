"""The proxy's HTTP/1.1 connections, with the limits a server facing a team (or an attacker) needs: Uvicorn's
httptools protocol plus

- a header deadline: from a connection's opening, or a request's first byte, to the end of its headers
  (``read_timeout_s``); a client that dawdles (slowloris) gets ``408`` and the connection is closed (one that sent
  nothing is just closed). Uvicorn has no such timer for httptools: its keep-alive timer stops at the first byte;
- a cap on the request line and headers: ``414`` for a request line over ``max_header_bytes``, ``431 Request Header
  Fields Too Large`` for headers over it in all or more than ``max_headers`` of them (RFC 6585); nothing is
  forwarded;
- a cap on open connections per process (``max_connections``): one more is answered ``503`` and closed at once,
  so a flood of idle connections cannot use up the process's file descriptors (each call holds two: the client's
  and the upstream's). Uvicorn's own ``limit_concurrency`` answers ``503`` only after reading a request, and counts
  idle connections too, so it is not used.

Read against Uvicorn's settings and server-behaviour pages (https://www.uvicorn.org/settings/,
https://www.uvicorn.org/server-behavior/, 2026-12-05) and its httptools protocol as installed (0.55): only
``timeout_keep_alive`` (armed after a response, stopped by a request's first byte) and h11's
``h11_max_incomplete_event_size`` bound a client there; httptools, the fast parser the proxy runs on, has no header
limit of its own.

Errors are JSON in OpenAI's error shape (the provider's shape where the path names one), as the app's own.
The body's read timeout is the app's: it reads the body (:func:`mmtok.budgets.proxy.app.read_body`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mmtok.budgets.proxy.providers import error_body, provider_of

REASONS = {408: "Request Timeout", 414: "URI Too Long", 431: "Request Header Fields Too Large", 400: "Bad Request"}
REASONS[503] = "Service Unavailable"


@dataclass(frozen=True)
class Limits:
    read_timeout_s: float = 15.0  # to send the request line and headers (and, in the app, the longest pause in a body)
    max_header_bytes: int = 32 * 1024  # request line, and all header lines together
    max_headers: int = 100
    max_connections: int = 4096  # open at once, per process


class Refused(Exception):
    """A request refused while its head is parsed: the status and what to say."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class GuardedProtocol(HttpToolsProtocol):
    """Uvicorn's httptools protocol with a header deadline, header caps and a connection cap (:class:`Limits`)."""

    limits: ClassVar[Limits] = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_head = True  # between requests, or inside a request's head (not in its body)
        self._head_started = False  # a byte of the current request's head has arrived
        self._head_bytes = 0
        self._head_count = 0
        self._refusal: Refused | None = None

    # ---------------------------------------------------------------------------------------- the connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._reply(503, f"too many open connections (the proxy takes {self.limits.max_connections:,})")
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol upgrades here: the request was already handed on as plain HTTP
        except httptools.HttpParserError as e:
            refusal = self._refusal or Refused(400, f"invalid HTTP request ({e})")
            self._reply(refusal.status, str(refusal))

    # ------------------------------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        """A request's first byte: its head must be whole within the deadline (from the connection's opening, for
        the first request)."""
        self._head_bytes = self._head_count = 0
        self._head_started = True
        if self._header_timer is None:
            self._arm()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse(414, f"the request line is over {self.limits.max_header_bytes:,} bytes")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        self._head_count += 1
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse(431, f"the request headers are over {self.limits.max_header_bytes:,} bytes")
        if self._head_count > self.limits.max_headers:
            self._refuse(431, f"the request has over {self.limits.max_headers} headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_started = True, False  # what comes next is the next request's head

    # ---------------------------------------------------------------------------------------------- helpers
    def _refuse(self, status: int, message: str) -> None:
        self._refusal = Refused(status, message)
        raise self._refusal  # the parser stops; data_received answers

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.limits.read_timeout_s, self._head_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _head_too_slow(self) -> None:
        self._header_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_started:
            self._reply(408, f"the request's headers did not arrive within {self.limits.read_timeout_s:g} s")
        else:
            self.transport.close()  # opened and silent: nothing to answer

    def _reply(self, status: int, message: str) -> None:
        """Answer ``status`` with an error body and close the connection (the request is not handed on)."""
        self._disarm()
        if self.transport.is_closing():
            return
        path = (getattr(self, "url", None) or b"").split(b"?", 1)[0].decode("latin-1")
        provider = provider_of(path) if path.startswith("/") else None
        body = json.dumps(error_body(provider, status, f"mmtok proxy: {message}", "request_refused")).encode()
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-mmtok-error: request_refused\r\n\r\n"
        )
        self.transport.write(head.encode("latin-1") + body)
        self.transport.close()


def protocol_class(limits: Limits) -> type[GuardedProtocol]:
    """The protocol class Uvicorn is given (``Config(http=...)``), bound to ``limits``."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})
