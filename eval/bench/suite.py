"""Benchmark: how long ``make test`` runs pytest, against the 10-minute budget CI gives the suite.

Run: ``python -m mmtok.eval.bench.suite [--before LOG]`` from the checkout, after ``make test`` has installed both venvs
once (writes ``eval/results/bench_suite.json`` and ``.txt``).

It runs ``make test`` (lint, the core tests in ``.venv-core``, the rest in ``.venv`` on two workers) and reads each
pytest session's own summary line (tests passed, failed, skipped, seconds); the figure is the sum of the sessions'
seconds. ``--before`` reads the same summary from an earlier run's log (the suite before this round: one session,
one process) to put beside it. The machine's load average at the start and end is kept: on a machine other work
shares, the seconds are an upper bound of what a quiet one takes, and the CPU seconds of every process ``make test``
waited for, divided by the cores, a lower bound.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

from mmtok.eval.bench import machine, write_json

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "eval" / "results"
BUDGET_S = 600.0  # CI: the default suite under 10 minutes of pytest
SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s", re.MULTILINE)


def sessions(output: str) -> list[dict[str, Any]]:
    """Each pytest session's counts and seconds, from its closing summary line."""
    found = []
    for match in SUMMARY.finditer(output):
        counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", match.group("counts"))}
        found.append({"counts": counts, "seconds": float(match.group("seconds"))})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an earlier run's pytest log, for the figure before")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_suite.json")
    parser.add_argument("--txt", type=Path, default=RESULTS / "bench_suite.txt")
    args = parser.parse_args()
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(["make", "test"], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    after = sessions(done.stdout + done.stderr)
    before = sessions(args.before.read_text()) if args.before else []
    before_s = round(sum(s["seconds"] for s in before), 1) if before else None
    payload = {
        "bench": "suite",
        "machine": machine(),
        "command": "make test",
        "exit_code": done.returncode,
        "make_wall_s": round(wall, 1),
        "make_cpu_s": round(cpu, 1),  # user + system of every process make test waited for: load-independent
        "cpu_per_core_s": round(cpu / (os.cpu_count() or 1), 1),  # what a quiet machine's cores could do it in
        "load_average_start": [round(x, 2) for x in load_before],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "sessions": after,
        "failed_tests": re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout + done.stderr, re.MULTILINE),
        "pytest_s": round(sum(s["seconds"] for s in after), 1),
        "before": {"log": str(args.before) if args.before else None, "sessions": before, "pytest_s": before_s},
        "budget_s": BUDGET_S,
    }
    write_json(args.json, payload)
    text = report(payload)
    args.txt.write_text(text)
    print(text, end="")


def report(p: dict[str, Any]) -> str:
    def counts(s: dict[str, Any]) -> str:
        return ", ".join(f"{n} {w}" for w, n in s["counts"].items())

    lines = [
        f"bench_suite: {p['command']} (exit {p['exit_code']}), {p['machine']}; load average "
        f"{p['load_average_start'][0]} at the start, {p['load_average_end'][0]} at the end",
        "",
    ]
    names = ["core tests (.venv-core)", "the rest (.venv, 2 workers)"]
    for i, s in enumerate(p["sessions"]):
        lines.append(f"  {names[i] if i < len(names) else f'session {i + 1}':<32} {s['seconds']:8.1f} s  {counts(s)}")
    lines.append(f"  {'pytest in all':<32} {p['pytest_s']:8.1f} s  (budget {p['budget_s']:.0f} s)")
    cpu = f"({p['make_cpu_s']:.0f} CPU s: what a quiet machine's cores could do it in, at best)"
    lines.append(f"  {'CPU of make test / cores':<32} {p['cpu_per_core_s']:8.1f} s  {cpu}")
    lines += [f"  failed: {name}" for name in p["failed_tests"]]
    if p["before"]["pytest_s"] is not None:
        for s in p["before"]["sessions"]:
            lines.append(f"  {'before (one process)':<32} {s['seconds']:8.1f} s  {counts(s)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
