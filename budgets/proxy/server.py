"""Running the proxy: Uvicorn on a socket bound here (so port 0 works and the real port is known), on 127.0.0.1
unless told otherwise, with its access log off (a Gemini key may ride in a query string) and a graceful shutdown:
on SIGTERM or Ctrl-C it stops accepting, lets calls in flight finish (streams included) for up to ``drain_s``
seconds, then writes every queued ledger record before it exits.

``workers`` > 1 forks that many processes after binding, each serving the one listening socket with its own
event loop, upstream pools and ledger connection (SQLite in WAL mode takes writers from several processes; each
record's id starts with its process's random prefix). The parent passes SIGTERM / SIGINT on and waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

from mmtok.budgets.ledger import Ledger, open_ledger
from mmtok.budgets.proxy.app import create_app
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.metrics import multiprocess_folder, worker_ended
from mmtok.budgets.proxy.protocol import Limits, protocol_class
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


def raise_file_limit(max_connections: int) -> None:
    """Raise this process's soft limit on open files towards what ``max_connections`` calls need (a client and an
    upstream connection each, and some to spare), as far as the hard limit allows; where the hard limit is too low,
    stderr says which ``--max-connections`` fits."""
    import resource

    wanted = 2 * max_connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        sys.stderr.write(
            f"warning: open files are limited to {target:,}; --max-connections {max_connections:,} needs {wanted:,} "
            f"(lower it to {max(1, (target - 256) // 2):,}, or raise the limit: ulimit -n)\n"
        )


def serve(
    config: ProxyConfig,
    ledger: Ledger,
    host: str = "127.0.0.1",
    port: int = 8787,
    drain_s: float = 30.0,
    on_ready: Callable[[str], None] | None = None,
    workers: int = 1,
) -> None:
    """Serve until SIGTERM / SIGINT. ``on_ready`` gets the base URL once the proxy takes calls."""
    raise_file_limit(config.max_connections)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}"

    def ready() -> None:
        if on_ready is not None:
            on_ready(url)
        sys.stdout.flush()

    if workers <= 1:
        _run(config, ledger, sock, drain_s, ready)
        return
    ledger.close()  # a database connection must not cross a fork: each worker opens its own
    with multiprocess_folder():  # one metrics folder for the workers: any of them serves /mmtok/metrics for all
        _supervise(config, sock, drain_s, workers, ready)


def _run(config: ProxyConfig, ledger: Ledger, sock: socket.socket, drain_s: float, ready: Callable[[], Any]) -> None:
    limits = Limits(read_timeout_s=config.read_timeout_s, max_connections=config.max_connections)
    server = _Server(
        uvicorn.Config(
            create_app(config, ledger=ledger),
            http=protocol_class(limits),  # httptools with a header deadline, header caps and a connection cap
            ws="none",
            access_log=False,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=drain_s,
            timeout_keep_alive=30,
            server_header=False,
            proxy_headers=False,  # mmtok's proxy is the first hop: no X-Forwarded-* to trust
        )
    )
    # Uvicorn's choice of event loop: uvloop where it is installed, asyncio's otherwise.
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(_serve(server, sock, ready))


async def _serve(server: uvicorn.Server, sock: socket.socket, ready: Callable[[], Any]) -> None:
    """Uvicorn's ``serve``, saying it is ready once it is (its signal handlers in place, the app started)."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        ready()
    await task


def _supervise(
    config: ProxyConfig, sock: socket.socket, drain_s: float, workers: int, ready: Callable[[], Any]
) -> None:
    """Fork ``workers`` processes serving ``sock``; ready once each says so; SIGTERM / SIGINT passed on to them."""
    told, tell = os.pipe()
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker
            os.close(told)
            status = 0
            try:
                _run(config, open_ledger(config.ledger), sock, drain_s, lambda: os.write(tell, b"."))
            except BaseException:  # a worker that fails says so on stderr, as Python would
                import traceback

                traceback.print_exc()
                status = 1
            os._exit(status)
        children.append(pid)
    os.close(tell)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: [_signal(pid, number) for pid in children])
    started = 0
    while started < workers:
        got = os.read(told, workers - started)
        if not got:
            break  # a worker ended before it was ready: its error is on stderr
        started += len(got)
    if started == workers:
        ready()
    failed = 0
    for pid in children:
        failed += _wait(pid)
        worker_ended(pid)
    sock.close()
    if failed:
        raise SystemExit(1)


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # a worker that has ended already
        os.kill(pid, number)


def _wait(pid: int) -> int:
    """1 where the worker did not end cleanly."""
    try:
        _, status = os.waitpid(pid, 0)  # retried by Python when a signal interrupts it (PEP 475)
    except ChildProcessError:
        return 0
    return int(os.waitstatus_to_exitcode(status) != 0)
