"""An httpx client whose reads all end by one deadline: every socket it opens is shut down when the deadline passes.

httpx's timeouts are per operation, so a server that sends one header byte every few seconds keeps a read alive for
hours without tripping any of them. Here httpcore opens its sockets through a network backend that keeps them, and
a timer shuts them down at the deadline: a read blocked on one returns at once, and the read fails as timed out.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import socket
import threading
from typing import Any

import httpcore
import httpx


class _Stream(httpcore.NetworkStream):
    """httpcore's own stream, whose socket (and its TLS successor) the backend can shut down."""

    def __init__(self, inner: httpcore.NetworkStream, backend: _Backend) -> None:
        self._inner = inner
        self._backend = backend
        backend.keep(inner)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, keeping every socket it opens so that they can all be shut down at once."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.expired = False

    def keep(self, stream: httpcore.NetworkStream) -> None:
        sock = stream.get_extra_info("socket")
        if sock is not None:
            with self._lock:
                self._sockets.append(sock)
                if self.expired:
                    _shut(sock)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:  # fmt: skip
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise httpcore.ConnectError("unix sockets are not used for URLs")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class _Transport(httpx.HTTPTransport):
    """httpx's own transport (its request and response mapping, its errors) over a pool that uses ``backend``."""

    def __init__(self, backend: _Backend) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=backend)


class DeadlineClient:
    """An httpx client with no environment (no proxies, no .netrc), no cookie jar kept, no redirects followed, whose
    sockets are all shut down ``seconds`` from now. Close it when done (``with``)."""

    def __init__(self, seconds: float) -> None:
        self._backend = _Backend()
        self.client = httpx.Client(transport=_Transport(self._backend), trust_env=False, follow_redirects=False)
        self.client.cookies.jar.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))  # keeps none
        self._timer = threading.Timer(max(seconds, 0.0), self._backend.expire)
        self._timer.daemon = True
        self._timer.start()

    @property
    def expired(self) -> bool:
        return self._backend.expired

    def close(self) -> None:
        self._timer.cancel()
        self.client.close()

    def __enter__(self) -> DeadlineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
