"""Benchmark: what ``mmtok proxy`` adds to a call, against a direct call to the same upstream, side by side.

Run: ``python -m mmtok.eval.bench.proxy [--requests 2000] [--concurrency 32] [--seconds 5]``.

Three processes on this machine: a loopback upstream (Uvicorn, one fixed Chat Completions answer with usage), the
real ``mmtok proxy`` in front of it (pricing each body, recording each call in an SQLite ledger), and this client.
The client is a minimal HTTP/1.1 keep-alive client on raw asyncio streams, so its own cost is small beside what is
measured. Latency: one call at a time, the direct and the proxied calls interleaved in blocks, median (p50) and
p99 of each and their difference (the added latency; target p50 <= 3 ms). Throughput: ``--concurrency``
connections for ``--seconds``, proxied and direct (target >= 500 requests/s for small bodies on 2 cores; client,
proxy and upstream share the cores). The ledger is checked to hold one row per proxied call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mmtok.eval.bench import compile_package, machine, write_json

BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello in one word."}], "max_tokens": 5}
).encode()
ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 14, "completion_tokens": 2, "total_tokens": 16},
}).encode()  # fmt: skip
TARGETS = {"added_p50_ms": 3.0, "proxied_requests_per_s": 500}


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The loopback upstream: reads the body, answers ANSWER."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def serve_upstream() -> None:
    import uvicorn

    from mmtok.budgets.proxy.server import bind

    sock = bind("127.0.0.1", 0)
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(upstream_app, log_level="error", access_log=False, lifespan="off")).run([sock])


def start(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    return process, process.stdout.readline().strip()


# ------------------------------------------------------------------------------------------------------ client
class Connection:
    """One keep-alive HTTP/1.1 connection sending the same POST again and again."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.address = (host, port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer sk-bench\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n")  # fmt: skip
        self.request = head.encode() + BODY

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(*self.address)

    async def call(self) -> int:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


def url_parts(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def latencies(direct: Connection, proxied: Connection, requests: int, block: int = 50) -> dict[str, list[float]]:
    """Seconds per call, one at a time, direct and proxied interleaved in blocks."""
    times: dict[str, list[float]] = {"direct": [], "proxied": []}
    for connection in (direct, proxied):
        await connection.open()
        for _ in range(50):  # warm-up: connections, caches, the proxy's first quotes
            await connection.call()
    for _ in range(requests // block):
        for name, connection in (("direct", direct), ("proxied", proxied)):
            for _ in range(block):
                started = time.perf_counter()
                status = await connection.call()
                times[name].append(time.perf_counter() - started)
                assert status == 200, status
    direct.close()
    proxied.close()
    return times


async def throughput(host: str, port: int, path: str, concurrency: int, seconds: float) -> tuple[int, float]:
    """Calls completed by ``concurrency`` connections in ``seconds``."""
    connections = [Connection(host, port, path) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in connections))
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(connection: Connection) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            assert await connection.call() == 200
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in connections))
    elapsed = time.perf_counter() - started
    for c in connections:
        c.close()
    return done, elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per side for the latency")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="per side, for the throughput")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("eval/results/bench_proxy.json"))
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream()
        return {}
    compile_package()
    folder = Path(tempfile.mkdtemp(prefix="mmtok-bench-proxy-"))
    ledger = folder / "calls.sqlite"
    upstream, port = start([sys.executable, "-m", "mmtok.eval.bench.proxy", "--serve-upstream"])
    proxy, line = start([sys.executable, "-m", "mmtok.cli.main", "proxy", "--port", "0", "--ledger", str(ledger),
                         "--openai-upstream", f"http://127.0.0.1:{port}/v1"])  # fmt: skip
    try:
        proxy_host, proxy_port = url_parts(line.split("listening on ")[1].split(";")[0])
        direct = Connection("127.0.0.1", int(port), "/v1/chat/completions")
        proxied = Connection(proxy_host, proxy_port, "/v1/chat/completions")
        times = asyncio.run(latencies(direct, proxied, args.requests))
        rates, cpu = {}, {}
        for name, (host, where) in {"direct": ("127.0.0.1", int(port)), "proxied": (proxy_host, proxy_port)}.items():
            before = {"proxy": cpu_seconds(proxy.pid), "upstream": cpu_seconds(upstream.pid)}
            done, elapsed = asyncio.run(throughput(host, where, "/v1/chat/completions", args.concurrency, args.seconds))
            rates[name] = (done, elapsed)
            cpu[name] = {k: (cpu_seconds(p.pid) - before[k]) * 1000 / max(done, 1)
                         for k, p in (("proxy", proxy), ("upstream", upstream))}  # fmt: skip
    finally:
        proxy.terminate()
        proxy.wait(60)
        upstream.terminate()
        upstream.wait(10)
    return report(args, times, rates, cpu, ledger)


def report(
    args: Any, times: dict[str, list[float]], rates: dict[str, tuple[int, float]], cpu: dict, ledger: Path
) -> dict:
    from mmtok.budgets.ledger import open_ledger

    stats = {name: {"p50_ms": statistics.median(t) * 1000, "p99_ms": percentile(t, 0.99) * 1000, "calls": len(t)}
             for name, t in times.items()}  # fmt: skip
    per_s = {name: done / elapsed for name, (done, elapsed) in rates.items()}
    recorded = sum(1 for _ in open_ledger(ledger).records())
    proxied_calls = 50 + len(times["proxied"]) + rates["proxied"][0]  # warm-up, latency, throughput
    result = {
        "machine": machine(),
        "body_bytes": len(BODY),
        "latency": stats,
        "added_p50_ms": stats["proxied"]["p50_ms"] - stats["direct"]["p50_ms"],
        "added_p99_ms": stats["proxied"]["p99_ms"] - stats["direct"]["p99_ms"],
        "requests_per_s": per_s,
        "proxied_over_direct_throughput": per_s["proxied"] / per_s["direct"],
        "cpu_ms_per_call": cpu,
        "concurrency": args.concurrency,
        "ledger_rows": recorded,
        "proxied_calls": proxied_calls,
        "targets": TARGETS,
    }
    lines = [
        f"bench_proxy: {args.requests} calls per side one at a time, then {args.concurrency} connections for "
        f"{args.seconds:g} s per side; a {len(BODY)}-byte Chat Completions body. {result['machine']}",
        "",
        "path       p50 ms   p99 ms   requests/s",
    ]
    lines += [f"{name:<9} {s['p50_ms']:7.2f}  {s['p99_ms']:7.2f}   {per_s[name]:10,.0f}" for name, s in stats.items()]
    lines += [
        "",
        f"added by the proxy: p50 {result['added_p50_ms']:.2f} ms (target <= 3), p99 {result['added_p99_ms']:.2f} ms",
        f"proxied throughput {per_s['proxied']:,.0f} requests/s (target >= 500) = "
        f"{result['proxied_over_direct_throughput']:.2f}x the direct calls' {per_s['direct']:,.0f}",
        f"CPU per call under load: proxy {cpu['proxied']['proxy']:.2f} ms, upstream "
        f"{cpu['proxied']['upstream']:.2f} ms (direct calls: upstream {cpu['direct']['upstream']:.2f} ms)",
        f"ledger: {recorded:,} rows for {result['proxied_calls']:,} proxied calls",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.with_suffix(".txt").parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".txt").write_text(text + "\n")
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
