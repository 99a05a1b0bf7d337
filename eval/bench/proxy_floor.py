"""The floor of the proxy's stack, for ``mmtok.eval.bench.proxy``: a bare pass-through on the same parts (Uvicorn
with httptools and uvloop, Starlette, httpx clients taken in turn as the proxy takes its eight: httpcore walks every
connection of a pool on each request, so one large pool is slower), with none of mmtok's work: the body is read and
sent upstream as it came, the answer read whole and given back. What mmtok proxy adds over this is the cost of
pricing, limits and the ledger.

Run by the benchmark as ``python -m mmtok.eval.bench.proxy_floor UPSTREAM_URL``: it prints its port and serves.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

POOLS = 8  # as mmtok.budgets.proxy.app.POOLS
HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade"}


def floor_app(upstream: str) -> Starlette:
    """Every POST passed to ``upstream`` + its path; the answer's status, type and body passed back."""
    clients: list[httpx.AsyncClient] = []
    turn = itertools.count()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(POOLS):
                clients.append(await stack.enter_async_context(httpx.AsyncClient(limits=limits, trust_env=False)))
            yield

    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k not in HOP_BY_HOP}
        client = clients[next(turn) % POOLS]
        answer = await client.post(upstream + request.url.path, content=await request.body(), headers=headers)
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    return Starlette(routes=[Route("/{path:path}", forward, methods=["POST"])], lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    from mmtok.budgets.proxy.server import bind

    upstream = (argv or sys.argv[1:])[0].rstrip("/")
    sock = bind("127.0.0.1", 0)
    print(sock.getsockname()[1], flush=True)
    config: dict[str, Any] = {"log_level": "error", "access_log": False, "lifespan": "on", "http": "httptools"}
    server = uvicorn.Server(uvicorn.Config(floor_app(upstream), server_header=False, **config))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
