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
import base64
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


def start(command: list[str], stderr: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """A process whose first line on stdout is returned (a port, a URL); its stderr to the file ``stderr``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    errors = stderr.open("w") if stderr is not None else None
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
    if errors is not None:
        errors.close()  # the child holds its own copy
    return process, process.stdout.readline().strip()


# ------------------------------------------------------------------------------------------------------ client
class Connection:
    """One keep-alive HTTP/1.1 connection sending the same POST again and again."""

    def __init__(self, host: str, port: int, path: str, body: bytes = BODY) -> None:
        self.address = (host, port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer sk-bench\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
        self.request = head.encode() + body

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


SHRINK_SIZES = ((1600, 1200), (2000, 1500), (1280, 960), (3000, 2000), (1024, 1024))
SHRINK_BAR = "ssim>=0.85"


def image_body(jpeg: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
    ]
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}).encode()


async def one_call(host: str, port: int, body: bytes) -> float:
    connection = Connection(host, port, "/v1/chat/completions", body)
    await connection.open()
    started = time.perf_counter()
    assert await connection.call() == 200
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def start_proxy(
    upstream_port: str, ledger: Path, *extra: str, stderr: Path | None = None
) -> tuple[subprocess.Popen[str], str, int]:
    """``mmtok proxy`` in front of the loopback upstream, on a free port: (process, host, port)."""
    proxy, line = start([sys.executable, "-m", "mmtok.cli.main", "proxy", "--port", "0", "--ledger", str(ledger),
                         "--openai-upstream", f"http://127.0.0.1:{upstream_port}/v1", *extra], stderr)  # fmt: skip
    host, port = url_parts(line.split("listening on ")[1].split(";")[0])
    return proxy, host, port


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(60)


def shrink_times(upstream_port: str, folder: Path) -> dict[str, Any]:
    """Seconds per image: a call through a proxy with --shrink, against mmtok.shrink in this process and
    ``mmtok shrink`` as a command (end to end, start-up included), on the same photo, each in turn."""
    from mmtok.budgets.ledger import open_ledger
    from mmtok.budgets.proxy.measure import photo
    from mmtok.budgets.shrink import shrink

    ledger = folder / "shrink.sqlite"
    proxy, host, port = start_proxy(upstream_port, ledger, "--shrink", "--keep", SHRINK_BAR)
    times: dict[str, list[float]] = {"proxied": [], "library": [], "command": []}
    try:
        warm = folder / "warm.jpg"
        warm.write_bytes(photo(800, 600))
        asyncio.run(one_call(host, port, image_body(warm.read_bytes())))  # models and caches loaded, both sides
        shrink(warm, "gpt-4o", keep=[SHRINK_BAR], out=folder / "warm")
        for n, (width, height) in enumerate(SHRINK_SIZES):
            path = folder / f"photo-{n}.jpg"
            path.write_bytes(photo(width, height))
            times["proxied"].append(asyncio.run(one_call(host, port, image_body(path.read_bytes()))))
            started = time.perf_counter()
            shrink(path, "gpt-4o", keep=[SHRINK_BAR], out=folder / f"library-{n}")
            times["library"].append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mmtok.cli.main", "shrink", str(path), "-m", "gpt-4o", "--keep",
                            SHRINK_BAR, "--out", str(folder / f"command-{n}"), "--json"],
                           check=True, capture_output=True)  # fmt: skip
            times["command"].append(time.perf_counter() - started)
    finally:
        stop(proxy)
    shrunk = sum(r.shrink is not None for r in open_ledger(ledger).records())
    medians = {name: statistics.median(t) for name, t in times.items()}
    sizes = [f"{w}x{h}" for w, h in SHRINK_SIZES]
    return {"sizes": sizes, "seconds": times, "median_s": medians, "shrunk_calls": shrunk, "bar": SHRINK_BAR}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rows(ledger: Path) -> int:
    from mmtok.budgets.ledger import open_ledger

    return sum(1 for _ in open_ledger(ledger).records())


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
    with tempfile.TemporaryDirectory(prefix="mmtok-bench-proxy-") as scratch:
        return measure_all(args, Path(scratch))


def measure_all(args: Any, folder: Path) -> dict[str, Any]:
    """Every measurement, with the processes, ledgers and photos in ``folder``."""
    upstream, port = start([sys.executable, "-m", "mmtok.eval.bench.proxy", "--serve-upstream"])
    path = "/v1/chat/completions"
    calls: dict[str, int] = {}
    try:
        proxy, host, proxy_port = start_proxy(port, folder / "one.sqlite")
        try:
            times = asyncio.run(latencies(Connection("127.0.0.1", int(port), path), Connection(host, proxy_port, path),
                                          args.requests))  # fmt: skip
            rates, cpu = {}, {}
            for name, (where, to) in {"direct": ("127.0.0.1", int(port)), "proxied": (host, proxy_port)}.items():
                before = {"proxy": cpu_seconds(proxy.pid), "upstream": cpu_seconds(upstream.pid)}
                rates[name] = asyncio.run(throughput(where, to, path, args.concurrency, args.seconds))
                cpu[name] = {k: (cpu_seconds(p.pid) - before[k]) * 1000 / max(rates[name][0], 1)
                             for k, p in (("proxy", proxy), ("upstream", upstream))}  # fmt: skip
        finally:
            stop(proxy)
        calls["one.sqlite"] = 50 + len(times["proxied"]) + rates["proxied"][0]
        proxy, host, proxy_port = start_proxy(port, folder / "two.sqlite", "--workers", "2")
        try:
            asyncio.run(throughput(host, proxy_port, path, args.concurrency, 1.0))  # warm-up of both workers
            rates["proxied, 2 workers"] = asyncio.run(
                throughput(host, proxy_port, path, args.concurrency, args.seconds)
            )
        finally:
            stop(proxy)
        shrinking = shrink_times(port, folder)
    finally:
        stop(upstream)
    recorded = {"one.sqlite": rows(folder / "one.sqlite")}
    return report(args, times, rates, cpu, shrinking, recorded, calls)


def report(
    args: Any,
    times: dict[str, list[float]],
    rates: dict[str, tuple[int, float]],
    cpu: dict[str, dict[str, float]],
    shrinking: dict[str, Any],
    recorded: dict[str, int],
    calls: dict[str, int],
) -> dict[str, Any]:
    stats = {name: {"p50_ms": statistics.median(t) * 1000, "p99_ms": percentile(t, 0.99) * 1000, "calls": len(t)}
             for name, t in times.items()}  # fmt: skip
    per_s = {name: done / elapsed for name, (done, elapsed) in rates.items()}
    result = {
        "machine": machine(),
        "load_average": os.getloadavg(),
        "body_bytes": len(BODY),
        "latency": stats,
        "added_p50_ms": stats["proxied"]["p50_ms"] - stats["direct"]["p50_ms"],
        "added_p99_ms": stats["proxied"]["p99_ms"] - stats["direct"]["p99_ms"],
        "requests_per_s": per_s,
        "proxied_over_direct_throughput": per_s["proxied"] / per_s["direct"],
        "cpu_ms_per_call": cpu,
        "concurrency": args.concurrency,
        "ledger_rows": recorded,
        "proxied_calls": calls,
        "shrink": shrinking,
        "targets": TARGETS,
    }
    text = "\n".join(_lines(args, result))
    print(text)
    if args.out is not None:
        write_json(args.out, result)
        args.out.with_suffix(".txt").write_text(text + "\n")
    return result


def _lines(args: Any, result: dict[str, Any]) -> list[str]:
    stats, per_s, cpu, shrinking = (
        result["latency"],
        result["requests_per_s"],
        result["cpu_ms_per_call"],
        result["shrink"],
    )
    lines = [
        f"bench_proxy: {args.requests} calls per side one at a time, then {args.concurrency} connections for "
        f"{args.seconds:g} s per side; a {len(BODY)}-byte Chat Completions body. {result['machine']}; load average "
        f"{result['load_average'][0]:.1f} at the end (the machine is shared)",
        "",
        "latency    p50 ms   p99 ms",
    ]
    lines += [f"{name:<9} {s['p50_ms']:7.2f}  {s['p99_ms']:7.2f}" for name, s in stats.items()]
    lines += [f"added by the proxy: p50 {result['added_p50_ms']:.2f} ms (target <= 3), "
              f"p99 {result['added_p99_ms']:.2f} ms", "", "throughput            requests/s"]  # fmt: skip
    lines += [f"{name:<20} {rate:12,.0f}" for name, rate in per_s.items()]
    lines += [
        f"proxied (1 worker) = {result['proxied_over_direct_throughput']:.3f}x direct; target >= 500 requests/s",
        f"CPU per proxied call: proxy {cpu['proxied']['proxy']:.2f} ms, upstream {cpu['proxied']['upstream']:.2f} ms"
        f" (per direct call: upstream {cpu['direct']['upstream']:.2f} ms)",
        f"ledger: {result['ledger_rows']['one.sqlite']:,} rows for {result['proxied_calls']['one.sqlite']:,} "
        "proxied calls (1 worker)",
        "",
        f"with --shrink --keep {SHRINK_BAR} (gpt-4o, detail high): {shrinking['shrunk_calls']} of "
        f"{len(SHRINK_SIZES) + 1} calls shrunk",
        "image       proxied call s   mmtok.shrink s   mmtok shrink (command) s",
    ]
    seconds = shrinking["seconds"]
    for n, size in enumerate(shrinking["sizes"]):
        lines.append(f"{size:<11} {seconds['proxied'][n]:14.2f}   {seconds['library'][n]:14.2f}   "
                     f"{seconds['command'][n]:24.2f}")  # fmt: skip
    median = shrinking["median_s"]
    lines.append(f"median per image: proxied {median['proxied']:.2f} s, mmtok.shrink {median['library']:.2f} s "
                 f"({median['proxied'] / median['library']:.2f}x), mmtok shrink command {median['command']:.2f} s "
                 f"({median['proxied'] / median['command']:.2f}x, start-up included)")  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
