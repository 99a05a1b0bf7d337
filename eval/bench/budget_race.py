"""Benchmark: does a day's budget hold under concurrency, and does the ledger lose any row? (issues 36 and 37)

Run: ``python -m mmtok.eval.bench.budget_race [--calls 200] [--budget 1.00] [--output-tokens 10000]
[--max-tokens N]`` (writes ``eval/results/budget_race.json`` and ``.txt``).

A stand-in provider on 127.0.0.1 (:mod:`mmtok.eval.bench.proxy_upstream`) bills every answer ``--output-tokens``
output tokens, as a provider bills a long answer to a body that sets no output limit. Real ``mmtok proxy``
processes stand in front of it with ``--budget-usd-per-day``; ``--calls`` concurrent gpt-4o Chat Completions calls go
through the official ``openai`` SDK, whole and streamed, with no output limit (or ``--max-tokens``):

- ``sqlite``: one proxy on an SQLite ledger;
- ``postgresql``: two proxies on one PostgreSQL database (a server this script starts: Debian's ``postgresql``,
  :mod:`mmtok.eval.bench.postgres`), the calls split between them;
- ``absurd usage``: 51 concurrent calls, one of whose answers reports 10^23 prompt tokens: rows recorded.

Each run reports the day's spend against the budget, the overspend, and what bills exceeded their bounds (a
bound is the call's prediction: the overspend may be at most that, and is zero with honest bounds), the calls
answered and refused, and the rows recorded against the calls made.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.eval.bench import machine, write_json

BILLED_OUTPUT = 10_000
RACE_KEY = "sk-proj-budget-race-0000000000race"  # the ledger names it ...race-<hash>


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


async def race(
    proxies: str | list[str],
    stream: bool,
    calls: int = 200,
    output_tokens: int = BILLED_OUTPUT,
    headers: dict[int, dict[str, str]] | None = None,
    **body: Any,
) -> dict[int, int]:
    """``calls`` concurrent gpt-4o calls through the official SDK, spread over ``proxies``, each answer billed
    ``output_tokens`` (``headers``: more headers for the n-th call); how many got each status."""
    import httpx
    import openai

    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=calls), timeout=120)
    billed = {"x-upstream-output-tokens": str(output_tokens)}
    settings = {"api_key": RACE_KEY, "max_retries": 0, "http_client": http, "default_headers": billed}
    urls = [proxies] if isinstance(proxies, str) else proxies
    clients = [openai.AsyncOpenAI(base_url=url + "/v1", **settings) for url in urls]

    async def one(n: int) -> int:
        client = clients[n % len(clients)]
        messages = [{"role": "user", "content": f"write a long essay, number {n}"}]
        extra = (headers or {}).get(n)
        try:
            answer = await client.chat.completions.create(
                model="gpt-4o", messages=messages, stream=stream, extra_headers=extra, **body
            )
            if stream:
                async for _ in answer:
                    pass
        except openai.APIStatusError as e:
            return e.status_code
        return 200

    statuses = await asyncio.gather(*(one(n) for n in range(calls)))
    await http.aclose()
    return {status: statuses.count(status) for status in set(statuses)}


def overspend(path: object) -> tuple[Decimal, Decimal, list[Any]]:
    """(the day's spend, what bills exceeded their bounds, the rows) of a ledger after a race."""
    from mmtok.budgets.ledger import open_ledger

    book = open_ledger(path, read_only=True)
    rows = list(book.records())
    spent = book.spend_on(today())
    book.close()
    excess = sum(
        (max(Decimal(0), r.spend - (r.predicted_cost or 0)) for r in rows if r.outcome != "refused"), Decimal(0)
    )
    return spent, excess, rows


class Proxy:
    """``mmtok proxy`` in a child process on a free port of 127.0.0.1."""

    def __init__(self, upstream: str, ledger: str, *flags: str) -> None:
        command = [sys.executable, "-m", "mmtok.cli.main", "proxy", "--port", "0", "--ledger", ledger,
                   "--openai-upstream", upstream + "/v1", *flags]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"the proxy did not start: {line}{self.process.stderr.read()}")
        self.url = line.split("listening on ")[1].split(";")[0]

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(60)


def run_race(upstream: str, ledger: str, instances: int, stream: bool, args: argparse.Namespace) -> dict[str, Any]:
    flags = ("--budget-usd-per-day", str(args.budget))
    proxies = [Proxy(upstream, ledger, *flags) for _ in range(instances)]
    body = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
    started = time.perf_counter()
    try:
        statuses = asyncio.run(race([p.url for p in proxies], stream, args.calls, args.output_tokens, **body))
    finally:
        for proxy in proxies:
            proxy.stop()
    seconds = time.perf_counter() - started
    spent, excess, rows = overspend(ledger)
    over = max(Decimal(0), spent - args.budget)
    return {
        "instances": instances,
        "stream": stream,
        "calls": args.calls,
        "answered": statuses.get(200, 0),
        "refused": statuses.get(429, 0),
        "other_statuses": {str(k): v for k, v in statuses.items() if k not in (200, 429)},
        "rows_recorded": len(rows),
        "rows_unique": len({r.id for r in rows}),
        "budget_usd": str(args.budget),
        "spend_usd": str(spent),
        "overspend_usd": str(over),
        "bills_over_bounds_usd": str(excess),
        "within_guarantee": over <= excess,
        "bound_per_call_usd": str(max((r.predicted_cost or 0 for r in rows), default=0)),
        "seconds": round(seconds, 2),
    }


def run_absurd(upstream: str, ledger: str) -> dict[str, Any]:
    """51 concurrent calls, the first answer reporting 10^23 prompt tokens: every row kept?"""
    proxy = Proxy(upstream, ledger)
    absurd = {0: {"x-upstream-input-tokens": str(10**23)}}
    try:
        statuses = asyncio.run(race(proxy.url, False, 51, 20, headers=absurd, max_tokens=50))
    finally:
        proxy.stop()
    _, _, rows = overspend(ledger)
    return {
        "calls": 51,
        "answered": statuses.get(200, 0),
        "rows_recorded": len(rows),
        "rows_flagged": sum(bool(r.flags) for r in rows),
        "flags": sorted({f for r in rows for f in r.flags}),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--budget", type=Decimal, default=Decimal("1.00"), help="USD per day")
    parser.add_argument("--output-tokens", type=int, default=BILLED_OUTPUT, help="billed per answer")
    parser.add_argument("--max-tokens", type=int, default=None, help="the bodies' output limit (default: none)")
    parser.add_argument("--out", type=Path, default=Path("eval/results/budget_race.json"))
    args = parser.parse_args(argv)
    from mmtok.eval.bench.postgres import PostgresServer
    from mmtok.eval.bench.proxy_upstream import Upstream, make_app, serve

    runs = []
    with tempfile.TemporaryDirectory() as folder, serve(make_app(Upstream())) as upstream:
        server = PostgresServer()
        try:
            for stream in (False, True):
                ledger = str(Path(folder) / f"sqlite-{stream}.sqlite")
                runs.append({"ledger": "sqlite", **run_race(upstream, ledger, 1, stream, args)})
                runs.append({"ledger": "postgresql", **run_race(upstream, server.database(), 2, stream, args)})
            absurd = run_absurd(upstream, str(Path(folder) / "absurd.sqlite"))
        finally:
            server.stop()
    result = {
        "protocol": (
            f"{args.calls} concurrent gpt-4o Chat Completions calls through the openai SDK; the stand-in provider "
            f"on 127.0.0.1 bills each answer {args.output_tokens} output tokens; bodies "
            + ("with no output limit" if args.max_tokens is None else f"with max_tokens={args.max_tokens}")
            + f"; --budget-usd-per-day {args.budget}; sqlite: one proxy; postgresql: two proxies on one database "
            "(Debian's PostgreSQL on 127.0.0.1), calls alternating between them; absurd usage: 51 concurrent calls, "
            "one answer reporting 10^23 prompt tokens"
        ),
        "machine": machine(),
        "date": today(),
        "races": runs,
        "absurd_usage": absurd,
    }
    write_json(args.out, result)
    text = _text(result)
    args.out.with_suffix(".txt").write_text(text, encoding="utf-8")
    print(text)
    return result


def _text(result: dict[str, Any]) -> str:
    lines = [result["protocol"], ""]
    lines.append(f"{'ledger':<11} {'stream':<6} {'answered':>8} {'refused':>7} {'rows':>5} {'spend $':>10} "
                 f"{'budget $':>8} {'over $':>8} {'bills>bounds $':>14}")  # fmt: skip
    for r in result["races"]:
        lines.append(
            f"{r['ledger']:<11} {'yes' if r['stream'] else 'no':<6} {r['answered']:>8} {r['refused']:>7} "
            f"{r['rows_recorded']:>5} {Decimal(r['spend_usd']):>10.4f} {r['budget_usd']:>8} "
            f"{Decimal(r['overspend_usd']):>8.4f} {Decimal(r['bills_over_bounds_usd']):>14.4f}"
        )
    absurd = result["absurd_usage"]
    lines.append(f"\nabsurd usage: {absurd['rows_recorded']} rows recorded of {absurd['calls']} calls, "
                 f"{absurd['rows_flagged']} flagged")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
