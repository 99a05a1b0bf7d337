"""Serving helpers for the proxy's tests: any ASGI app with Uvicorn on 127.0.0.1 in a background thread, the proxy
in front of the stand-in provider (:mod:`mmtok.eval.bench.proxy_upstream`, which bills images by rules that differ
from mmtok's documented ones), a server that resets connections, and photos of any size."""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from mmtok.budgets.calibrate.measure import photo
from mmtok.budgets.proxy.server import bind
from mmtok.eval.bench.proxy_upstream import (
    IMAGE_RULES,
    Bill,
    Upstream,
    anthropic_messages,
    gemini_generate,
    make_app,
    openai_chat,
    openai_responses,
    serve,
)

__all__ = [
    "IMAGE_RULES",
    "Bill",
    "Upstream",
    "anthropic_messages",
    "data_url",
    "gemini_generate",
    "make_app",
    "openai_chat",
    "openai_responses",
    "photo",
    "resetting_server",
    "running_proxy",
    "serve",
]


# ------------------------------------------------------------------------------------------------ serving
@contextlib.contextmanager
def resetting_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that reads a request and resets the connection (RST) without answering."""
    import socket
    import struct

    listener = bind("127.0.0.1", 0)
    listener.settimeout(0.2)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(65536)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@contextlib.contextmanager
def running_proxy(upstream_url: str, ledger: Any, **settings: Any) -> Iterator[str]:
    """``mmtok proxy``'s app in front of ``upstream_url`` (all three providers), recording into ``ledger``; each
    call answered once its record is committed (``sync_ledger``) unless the settings say otherwise."""
    from mmtok.budgets.proxy import ProxyConfig, create_app

    settings.setdefault("sync_ledger", True)
    upstreams = {"openai": upstream_url + "/v1", "anthropic": upstream_url, "gemini": upstream_url}
    config = ProxyConfig(ledger=str(ledger), upstreams=upstreams, **settings)
    with serve(create_app(config)) as url:
        yield url


def data_url(width: int, height: int) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(photo(width, height)).decode()
