"""Benchmark: what ``mmtok proxy`` adds to a call, against a direct call and against the floor of its stack, side by
side in one run.

Run: ``python -m mmtok.eval.bench.proxy`` (about 3 minutes; ``--quick`` for a short check), on a quiet machine.
Writes eval/results/bench_proxy.json and .txt.

Processes on this machine, all on 127.0.0.1: a loopback upstream (Uvicorn, one fixed Chat Completions answer with
usage); the floor, a bare Starlette + httpx pass-through on the same server stack (:mod:`.proxy_floor`: what any
Python proxy of this kind costs before doing anything); ``mmtok proxy`` in front of the same upstream, pricing each
body and recording each call: on SQLite; on SQLite with a daily budget (a reservation per call); on PostgreSQL with
a daily budget (Debian's server started here, :mod:`.postgres`; its reservations are a transaction each). The
client is a minimal HTTP/1.1 keep-alive client on raw asyncio streams, so its own cost is small beside what is
measured.

- Latency: one call at a time, every side interleaved in blocks; p50 and p99 of each; the added latency is a
  proxied side's minus the direct one's (targets: p50 <= 2 ms and p99 <= 10 ms on SQLite, p50 <= 3 ms on
  PostgreSQL).
- Throughput: ``--concurrency`` connections for ``--seconds`` per side, in ``--rounds`` rounds that take the sides in
  turn (a load that comes and goes on a shared machine hits the floor and the proxy alike); the proxy (SQLite) over
  the floor is the median of the rounds' ratios (target >= 0.80), and with 2 workers. Client, servers and upstream
  share the machine's cores.
- First call: a fresh proxy's first call against the median of its next ones, each on a new connection, over
  several fresh proxies (target: within 2x).
- The ledgers are checked to hold one row per proxied call; with ``--shrink``, seconds per image.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mmtok.eval.bench import compile_package, machine, write_json

CALL_MARK = b"000000"  # replaced by each call's number (same length, so the declared length holds)
BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello in one word (call 000000)."}],
     "max_tokens": 5}
).encode()  # fmt: skip
ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 14, "completion_tokens": 2, "total_tokens": 16},
}).encode()  # fmt: skip
TARGETS = {
    "proxy_over_floor_throughput": 0.80,
    "added_p50_ms_sqlite": 2.0,
    "added_p99_ms_sqlite": 10.0,
    "added_p50_ms_postgresql": 3.0,
    "first_over_later": 2.0,
}


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
    """One keep-alive HTTP/1.1 connection sending POSTs again and again. With ``vary`` (the default for the text
    body) each call's body differs (a call number in the prompt, a fixed width), so that nothing on the way can
    answer from a cache; every side gets the same sequence."""

    def __init__(self, host: str, port: int, path: str, body: bytes = BODY, vary: bool | None = None) -> None:
        self.address = (host, port)
        self.head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer sk-bench\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        self.body = body
        self.vary = body == BODY if vary is None else vary
        self.calls = 0

    @property
    def request(self) -> bytes:
        self.calls += 1
        if not self.vary:
            return self.head + self.body
        return self.head + self.body.replace(CALL_MARK, f"{self.calls % 10**6:06d}".encode())

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


async def latencies(connections: dict[str, Connection], requests: int, block: int = 50) -> dict[str, list[float]]:
    """Seconds per call, one at a time, each side in turn in blocks of ``block`` (machine noise hits all alike)."""
    times: dict[str, list[float]] = {name: [] for name in connections}
    for connection in connections.values():
        await connection.open()
        for _ in range(50):  # warm-up: connections, caches, the proxy's first quotes
            await connection.call()
    for _ in range(max(1, requests // block)):
        for name, connection in connections.items():
            for _ in range(block):
                started = time.perf_counter()
                status = await connection.call()
                times[name].append(time.perf_counter() - started)
                assert status == 200, (name, status)
    for connection in connections.values():
        connection.close()
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


async def fresh_calls(host: str, port: int, count: int) -> list[float]:
    """Seconds per call, each on a new connection (the first is a fresh proxy's first call)."""
    times = []
    for _ in range(count):
        connection = Connection(host, port, "/v1/chat/completions")
        started = time.perf_counter()
        await connection.open()
        assert await connection.call() == 200
        times.append(time.perf_counter() - started)
        connection.close()
    return times


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
    from mmtok.budgets.calibrate.measure import photo
    from mmtok.budgets.ledger import open_ledger
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per side for the latency")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=2.0, help="per side and round, for the throughput")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds, the sides in turn in each")
    parser.add_argument("--fresh", type=int, default=3, help="fresh proxies for the first call")
    parser.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
    parser.add_argument("--no-shrink", action="store_true", help="leave the --shrink timings out")
    parser.add_argument("--quick", action="store_true", help="a short check: 300 calls, 2 s, no shrink")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("eval/results/bench_proxy.json"))
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream()
        return {}
    if args.quick:
        args.requests, args.seconds, args.no_shrink, args.fresh, args.rounds = 300, 2.0, True, 1, 1
    compile_package()
    with tempfile.TemporaryDirectory(prefix="mmtok-bench-proxy-") as scratch:
        return measure_all(args, Path(scratch))


BUDGET = ("--budget-usd-per-day", "1000000")  # never reached: each call still reserves its bound first


@contextlib.contextmanager
def servers(args: Any, upstream_port: str, folder: Path) -> Iterator[dict[str, tuple[Any, str, int]]]:
    """The sides, running: name -> (process, host, port); the floor and the proxies on SQLite (and PostgreSQL).
    ``recorded`` is filled on the way out with each ledger's rows, once its proxy has stopped (and written all)."""
    stack = contextlib.ExitStack()
    with stack:
        found: dict[str, tuple[Any, str, int]] = {}
        floor, port = start([sys.executable, "-m", "mmtok.eval.bench.proxy_floor", f"http://127.0.0.1:{upstream_port}"])
        stack.callback(stop, floor)
        found["floor"] = (floor, "127.0.0.1", int(port))
        sides = {"sqlite": (folder / "sqlite.sqlite", ()), "sqlite, budget": (folder / "budget.sqlite", BUDGET)}
        if not args.no_postgres:
            from mmtok.eval.bench.postgres import PostgresServer

            database = PostgresServer()
            stack.callback(database.stop)
            sides["postgresql, budget"] = (database.database(), BUDGET)
        recorded: dict[str, int] = {}
        stack.callback(lambda: recorded.update({name: rows(ledger) for name, (ledger, _) in sides.items()}))
        for name, (ledger, extra) in sides.items():
            proxy, host, port = start_proxy(upstream_port, ledger, *extra)
            stack.callback(stop, proxy)
            found[name] = (proxy, host, port)
        found["recorded"] = recorded  # type: ignore[assignment]  # rows per ledger, counted once the proxies stop
        yield found


def measure_all(args: Any, folder: Path) -> dict[str, Any]:
    """Every measurement, with the processes, ledgers and photos in ``folder``."""
    upstream, port = start([sys.executable, "-m", "mmtok.eval.bench.proxy", "--serve-upstream"])
    path = "/v1/chat/completions"
    result: dict[str, Any] = {}
    try:
        with servers(args, port, folder) as running:
            recorded = running.pop("recorded")
            sides = {"direct": ("127.0.0.1", int(port))} | {name: (h, p) for name, (_, h, p) in running.items()}
            connections = {name: Connection(host, to, path) for name, (host, to) in sides.items()}
            result["times"] = asyncio.run(latencies(connections, args.requests))
            pids = {name: running.get(name, (upstream,))[0].pid for name in sides}
            rates, cpu, result["rounds"] = throughput_rounds(args, sides, pids, path)
            proxied = {name: 50 + len(result["times"][name]) + rates[name][0] for name in running if name != "floor"}
        result["recorded"] = {name: (recorded[name], proxied[name]) for name in proxied}
        rates["sqlite, 2 workers"] = workers_rate(args, port, folder)
        result["rates"], result["cpu"] = rates, cpu
        result["first_call"] = first_calls(args, port, folder)
        result["shrink"] = None if args.no_shrink else shrink_times(port, folder)
        result["steps"] = step_costs(folder)
    finally:
        stop(upstream)
    return report(args, result)


def throughput_rounds(
    args: Any, sides: dict[str, tuple[str, int]], pids: dict[str, int], path: str
) -> tuple[dict[str, tuple[int, float]], dict[str, float], list[dict[str, float]]]:
    """Each side's throughput in ``args.rounds`` rounds, the sides taken in turn within a round, so that the floor
    and the proxy are measured seconds apart under the same load: per side the calls and seconds of all rounds and
    the CPU per call; per round each side's requests/s (the ratio to the floor is the median of the rounds')."""
    totals = {name: [0, 0.0] for name in sides}
    cpu_s = dict.fromkeys(sides, 0.0)
    rounds = []
    for _ in range(args.rounds):
        this = {}
        for name, (host, to) in sides.items():
            before = cpu_seconds(pids[name])
            done, elapsed = asyncio.run(throughput(host, to, path, args.concurrency, args.seconds))
            cpu_s[name] += cpu_seconds(pids[name]) - before
            totals[name][0] += done
            totals[name][1] += elapsed
            this[name] = done / elapsed
        rounds.append(this)
    rates = {name: (done, elapsed) for name, (done, elapsed) in totals.items()}
    cpu = {name: cpu_s[name] * 1000 / max(totals[name][0], 1) for name in sides}
    return rates, cpu, rounds


def workers_rate(args: Any, port: str, folder: Path) -> tuple[int, float]:
    proxy, host, proxy_port = start_proxy(port, folder / "two.sqlite", "--workers", "2")
    try:
        asyncio.run(throughput(host, proxy_port, "/v1/chat/completions", args.concurrency, 1.0))  # both warm
        return asyncio.run(throughput(host, proxy_port, "/v1/chat/completions", args.concurrency, args.seconds))
    finally:
        stop(proxy)


def first_calls(args: Any, port: str, folder: Path) -> dict[str, Any]:
    """Fresh proxies: each one's first call against the median of its next 20, every call on a new connection."""
    ratios, firsts, laters = [], [], []
    for n in range(args.fresh):
        proxy, host, proxy_port = start_proxy(port, folder / f"fresh-{n}.sqlite")
        try:
            times = asyncio.run(fresh_calls(host, proxy_port, 21))
        finally:
            stop(proxy)
        later = statistics.median(times[1:])
        firsts.append(times[0] * 1000)
        laters.append(later * 1000)
        ratios.append(times[0] / later)
    return {"first_ms": firsts, "later_median_ms": laters, "ratio": statistics.median(ratios)}


def step_costs(folder: Path, repeats: int = 2000) -> dict[str, float]:
    """Microseconds per call of each step of mmtok's own work on the bench's body, timed alone in this process
    (CPU, no contention): where the proxy's time over the floor goes."""
    import hashlib

    from mmtok.budgets.ledger import Record, open_ledger, row_values
    from mmtok.budgets.ledger.usage import billed_cost, usage_from_bytes
    from mmtok.budgets.proxy import attribution
    from mmtok.budgets.proxy.config import ProxyConfig
    from mmtok.budgets.proxy.metrics import Metrics
    from mmtok.budgets.proxy.providers import route
    from mmtok.budgets.proxy.quoting import predict

    config, where, payload = (
        ProxyConfig(ledger=str(folder / "steps.sqlite")),
        route("/v1/chat/completions"),
        json.loads(BODY),
    )
    usage = usage_from_bytes("openai-chat", ANSWER)
    record = Record(provider="openai", api="openai-chat", model="gpt-4o-mini", outcome="ok")
    predict(payload, where, config).fill(record)
    record.billed, record.billed_input, record.billed_output = usage.to_dict(), 14, 2
    record.billed_cost = billed_cost("gpt-4o-mini", usage)
    metrics, ledger = Metrics(), open_ledger(config.ledger)
    batch = [Record(**{**record.__dict__, "id": f"{n:032x}"}) for n in range(repeats)]
    steps = {
        "read the body (JSON)": lambda: json.loads(BODY),
        "price it (mmtok.budgets.proxy.quoting.predict)": lambda: predict(payload, where, config),
        "attribution (key fingerprint, tags)": lambda: attribution.fingerprint("sk-bench-0123456789", "salt"),
        "body hash": lambda: hashlib.sha256(BODY).hexdigest(),
        "a new record": lambda: Record(provider="openai", api="openai-chat"),
        "read the usage": lambda: usage_from_bytes("openai-chat", ANSWER),
        "price the bill": lambda: billed_cost("gpt-4o-mini", usage),
        "metrics": lambda: metrics.call(record, 0.001),
        "the record as a row": lambda: row_values(record),
    }
    costs = {}
    for name, step in steps.items():
        for _ in range(50):
            step()
        started = time.process_time()
        for _ in range(repeats):
            step()
        costs[name] = (time.process_time() - started) / repeats * 1e6
    started = time.process_time()
    for n in range(0, repeats, 32):
        ledger.write(batch[n : n + 32])
    costs["written to SQLite (batches of 32)"] = (time.process_time() - started) / repeats * 1e6
    ledger.close()
    return costs


def rows(ledger: Path | str) -> int:
    from mmtok.budgets.ledger import open_ledger

    store = open_ledger(ledger, read_only=True)
    try:
        return sum(1 for _ in store.records())
    finally:
        store.close()


def report(args: Any, result: dict[str, Any]) -> dict[str, Any]:
    times, rates = result["times"], result["rates"]
    stats = {name: {"p50_ms": statistics.median(t) * 1000, "p99_ms": percentile(t, 0.99) * 1000, "calls": len(t)}
             for name, t in times.items()}  # fmt: skip
    direct = stats["direct"]
    added = {name: {"p50_ms": s["p50_ms"] - direct["p50_ms"], "p99_ms": s["p99_ms"] - direct["p99_ms"]}
             for name, s in stats.items() if name != "direct"}  # fmt: skip
    per_s = {name: done / elapsed for name, (done, elapsed) in rates.items()}
    out = {
        "machine": machine(),
        "load_average": os.getloadavg(),
        "body_bytes": len(BODY),
        "concurrency": args.concurrency,
        "latency": stats,
        "added_latency_ms": added,
        "requests_per_s": per_s,
        "throughput_rounds": result["rounds"],
        "proxy_over_floor_throughput": statistics.median(r["sqlite"] / r["floor"] for r in result["rounds"]),
        "cpu_ms_per_call": result["cpu"],
        "ledger_rows": {name: {"rows": got, "calls": sent} for name, (got, sent) in result["recorded"].items()},
        "first_call": result["first_call"],
        "step_us": result["steps"],
        "shrink": result["shrink"],
        "targets": TARGETS,
    }
    text = "\n".join(_lines(args, out))
    print(text)
    if args.out is not None:
        write_json(args.out, out)
        args.out.with_suffix(".txt").write_text(text + "\n")
    return out


def _lines(args: Any, result: dict[str, Any]) -> list[str]:
    stats, added, per_s = result["latency"], result["added_latency_ms"], result["requests_per_s"]
    lines = [
        f"bench_proxy: {args.requests} calls per side one at a time, then {args.concurrency} connections for "
        f"{args.seconds:g} s per side in each of {len(result['throughput_rounds'])} rounds (the sides in turn); a "
        f"{len(BODY)}-byte Chat Completions body. {result['machine']}; load average "
        f"{result['load_average'][0]:.1f} at the end (the machine is shared)",
        "",
        "latency               p50 ms   p99 ms   added p50   added p99   requests/s   CPU ms/call",
    ]
    for name, s in stats.items():
        extra = added.get(name, {"p50_ms": 0.0, "p99_ms": 0.0})
        cpu = result["cpu_ms_per_call"][name]
        lines.append(f"{name:<20} {s['p50_ms']:7.2f}  {s['p99_ms']:7.2f}   {extra['p50_ms']:9.2f}   "
                     f"{extra['p99_ms']:9.2f}   {per_s[name]:10,.0f}   {cpu:11.2f}")  # fmt: skip
    lines.append(f"{'sqlite, 2 workers':<20} {'':7}  {'':7}   {'':9}   {'':9}   {per_s['sqlite, 2 workers']:10,.0f}")
    first = result["first_call"]
    lines += [
        "",
        f"throughput: the proxy (SQLite) = {result['proxy_over_floor_throughput']:.3f}x the floor (target >= 0.80; "
        f"median of the rounds' ratios: {', '.join(f'{ratio:.3f}' for ratio in _round_ratios(result))})",
        f"added latency on SQLite: p50 {added['sqlite']['p50_ms']:.2f} ms (target <= 2), "
        f"p99 {added['sqlite']['p99_ms']:.2f} ms (target <= 10)",
    ]
    if "postgresql, budget" in added:
        lines.append(f"added latency on PostgreSQL with a budget: p50 {added['postgresql, budget']['p50_ms']:.2f} ms "
                     "(target <= 3; the test server runs with fsync=off)")  # fmt: skip
    lines.append(f"first call: {first['ratio']:.2f}x a later one (median over {len(first['first_ms'])} fresh proxies; "
                 f"first {', '.join(f'{t:.1f}' for t in first['first_ms'])} ms; target <= 2x)")  # fmt: skip
    lines += [f"ledger {name}: {r['rows']:,} rows for {r['calls']:,} proxied calls"
              for name, r in result["ledger_rows"].items()]  # fmt: skip
    lines += ["", "mmtok's own work per call, each step timed alone (CPU us; compare the CPU per call above)"]
    lines += [f"  {name:<52} {us:8.1f}" for name, us in result["step_us"].items()]
    lines.append(f"  {'all of them':<52} {sum(result['step_us'].values()):8.1f}")
    if result["shrink"] is not None:
        lines += _shrink_lines(result["shrink"])
    return lines


def _round_ratios(result: dict[str, Any]) -> list[float]:
    return [r["sqlite"] / r["floor"] for r in result["throughput_rounds"]]


def _shrink_lines(shrinking: dict[str, Any]) -> list[str]:
    lines = [
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
