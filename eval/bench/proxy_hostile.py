"""Benchmark: the proxy's peak memory when the upstream is hostile, each case against a normal call.

Run: ``python -m mmtok.eval.bench.proxy_hostile`` (about a minute; writes eval/results/bench_proxy_hostile.json, .txt).

A hostile upstream on 127.0.0.1 (this process, a thread) answers a Chat Completions call in one of these ways:

- ``endless-event``: an SSE stream of short ``data:`` lines with no blank line, so the event never ends
  (it stops by itself after :data:`ENDLESS_BYTES`);
- ``endless-line``: an SSE stream of one ``data:`` line that never ends (the same bound);
- ``gzip-bomb``: a 1 MB gzip body (``Content-Length`` about 1 MB) that expands to 1 GiB of zeros.

For each case a fresh ``mmtok proxy`` process sits in front of it: one normal call first (its peak resident memory,
VmHWM, is the baseline), then the hostile call; the proxy's VmHWM after it is the case's peak. The call must end
with a ledger row that says why (outcome ``upstream_error``) and nothing on the proxy's stderr that looks like a
traceback. Before mmtok 0.2 the first case grew the proxy to 4.1 GB and the last to 2.2 GB (issue 37).
"""

from __future__ import annotations

import argparse
import json
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

MiB = 2**20
ENDLESS_BYTES = 256 * MiB  # a hostile stream stops by itself after this much (the proxy should end it long before)
BOMB_DECODED_BYTES = 1024 * MiB
CASES = ("endless-event", "endless-line", "gzip-bomb")
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
ANSWER = {
    "id": "chatcmpl-hostile", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10},
}  # fmt: skip


def gzip_bomb(decoded_bytes: int = BOMB_DECODED_BYTES) -> bytes:
    """A valid gzip member of ``decoded_bytes`` zeros, about a thousand times smaller, built in well under a second:
    after a full flush, deflate encodes each further MiB of zeros as the same bytes, so one MiB is compressed and
    its block repeated; the CRC-32 and length trailer are computed over the whole."""
    zeros = bytes(MiB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeat = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush(zlib.Z_FINISH)
    count = decoded_bytes // MiB
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + first + repeat * (count - 1) + end + struct.pack("<II", crc, (count * MiB) & 0xFFFFFFFF)


async def _endless(piece: bytes, head: bytes = b"") -> AsyncIterator[bytes]:
    yield head
    sent = len(head)
    while sent < ENDLESS_BYTES:
        yield piece
        sent += len(piece)


def hostile_app() -> Starlette:
    """The hostile upstream: the case is the ``x-hostile`` header (passed through by the proxy); none: a normal
    Chat Completions answer."""
    bomb = gzip_bomb()

    async def handle(request: Request) -> Response:
        await request.body()
        case = request.headers.get("x-hostile", "")
        if case == "endless-event":
            return StreamingResponse(_endless(b"data: x\n" * 8192), media_type="text/event-stream")
        if case == "endless-line":
            return StreamingResponse(_endless(b"x" * 65536, b"data: "), media_type="text/event-stream")
        if case == "gzip-bomb":
            headers = {"content-encoding": "gzip", "content-type": "application/json"}
            return Response(bomb, headers=headers)
        return Response(json.dumps(ANSWER), media_type="application/json")

    return Starlette(routes=[Route("/{path:path}", handle, methods=["POST"])])


def peak_mib(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM, Linux), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc (not Linux?)")


def hostile_call(proxy_url: str, case: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """One call through the proxy to the hostile upstream, read to its end; what the client saw."""
    body = {**BODY, "stream": case != "gzip-bomb"}
    received, ended = 0, "complete"
    headers = {"authorization": "Bearer sk-hostile", "x-hostile": case}
    try:
        with httpx.stream("POST", f"{proxy_url}/v1/chat/completions", json=body, headers=headers,
                          timeout=timeout_s) as answer:  # fmt: skip
            status = answer.status_code
            for chunk in answer.iter_raw():
                received += len(chunk)
    except httpx.HTTPError as e:
        ended, status = type(e).__name__, -1 if not received else 200
    return {"status": status, "client_bytes": received, "ended": ended}


def measure(case: str, upstream_url: str, folder: Path) -> dict[str, Any]:
    """A fresh proxy in front of the hostile upstream: a normal call, then ``case``; peaks, the ledger row, stderr."""
    from mmtok.budgets.ledger import open_ledger
    from mmtok.eval.bench.proxy import start_proxy, stop

    ledger = folder / f"{case}.sqlite"
    errors = folder / f"{case}.stderr"
    proxy, host, port = start_proxy(upstream_url.rsplit(":", 1)[1], ledger, "--sync-ledger", stderr=errors)
    url = f"http://{host}:{port}"
    try:
        assert httpx.post(url + "/v1/chat/completions", json=BODY, timeout=60).status_code == 200
        baseline = peak_mib(proxy.pid)
        seen = hostile_call(url, case)
        peak = peak_mib(proxy.pid)
        alive = httpx.get(url + "/mmtok/health", timeout=10).status_code == 200
    finally:
        stop(proxy)
    stderr = errors.read_text()
    rows = list(open_ledger(ledger, read_only=True).records())
    last = rows[-1] if rows else None
    return {
        "case": case,
        "baseline_peak_mib": round(baseline, 1),
        "peak_mib": round(peak, 1),
        "client": seen,
        "still_answering": alive,
        "rows": len(rows),
        "outcome": last.outcome if last else None,
        "message": last.message if last else None,
        "traceback_on_stderr": "Traceback" in stderr,
        "stderr": stderr[-2000:],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import tempfile

    from mmtok.eval.bench import machine, write_json
    from mmtok.eval.bench.proxy_upstream import serve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--out", type=Path, default=Path("eval/results/bench_proxy_hostile.json"))
    args = parser.parse_args(argv)
    with serve(hostile_app()) as upstream, tempfile.TemporaryDirectory(prefix="mmtok-hostile-") as scratch:
        results = [measure(case, upstream, Path(scratch)) for case in args.cases]
    result = {"machine": machine(), "cases": results}
    lines = [f"bench_proxy_hostile: peak resident memory of mmtok proxy (VmHWM) per hostile upstream; {machine()}", "",
             "case            baseline MiB   peak MiB   client got   row outcome      traceback"]  # fmt: skip
    for r in results:
        lines.append(f"{r['case']:<15} {r['baseline_peak_mib']:12.0f} {r['peak_mib']:10.0f} "
                     f"{r['client']['client_bytes'] / MiB:9.1f} MB   {r['outcome'] or '-':<16} "
                     f"{'yes' if r['traceback_on_stderr'] else 'no'}")  # fmt: skip
    lines += [""] + [f"{r['case']}: {r['message']}" for r in results]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        write_json(args.out, result)
        args.out.with_suffix(".txt").write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
