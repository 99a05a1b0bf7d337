"""Running the proxy: Uvicorn on a socket bound here (so port 0 works and the real port is known), on 127.0.0.1
unless told otherwise, with its access log off (a Gemini key may ride in a query string) and a graceful shutdown:
on SIGTERM or Ctrl-C it stops accepting, lets calls in flight finish (streams included) for up to ``drain_s``
seconds, then writes every queued ledger record before it exits."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable

import uvicorn

from mmtok.budgets.ledger import Ledger
from mmtok.budgets.proxy.app import create_app
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.errors import ConfigError


class _Server(uvicorn.Server):
    """Uvicorn's server, ending with status 0 after a drained stop (Uvicorn raises the signal again once it has
    shut down, so the process would end as killed by it)."""

    def handle_exit(self, sig: int, frame: object) -> None:
        super().handle_exit(sig, frame)  # type: ignore[arg-type]
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv4 or IPv6), or a ConfigError that says why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and accepted sockets
    # inherit it; without it a response written in two parts waits out the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(
    config: ProxyConfig,
    ledger: Ledger,
    host: str = "127.0.0.1",
    port: int = 8787,
    drain_s: float = 30.0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGTERM / SIGINT. ``on_ready`` gets the base URL once the socket listens."""
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    app = create_app(config, ledger=ledger)
    server = _Server(
        uvicorn.Config(
            app,
            access_log=False,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=drain_s,
            timeout_keep_alive=30,
            server_header=False,
            proxy_headers=False,  # mmtok's proxy is the first hop: no X-Forwarded-* to trust
        )
    )

    def ready() -> None:
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}")

    # Uvicorn's choice of event loop: uvloop where it is installed, asyncio's otherwise.
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(_serve(server, sock, ready))


async def _serve(server: uvicorn.Server, sock: socket.socket, ready: Callable[[], object]) -> None:
    """Uvicorn's ``serve``, saying it is ready once it is (its signal handlers in place, the app started)."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        ready()
        sys.stdout.flush()
    await task
