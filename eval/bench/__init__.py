"""Benchmark helpers: interleaved repeated timing with medians, and a plain table printer."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def time_interleaved(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per case; the cases run round-robin in each repeat so machine noise hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def print_table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  " + "  ".join(padded))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine() -> str:
    import os

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def compile_package() -> None:
    """Byte-compile mmtok's sources where their bytecode is missing or stale, as ``make`` leaves an install (pip
    compiles a wheel's at install time): a benchmark that starts the CLI then times the product, not the compiling of
    sources edited since (which Python skips writing where PYTHONDONTWRITEBYTECODE is set)."""
    import compileall
    import importlib.util

    import mmtok

    names = ("mmtok", "mmtok.models", "mmtok.budgets", "mmtok.cli", "mmtok.eval")
    folders = {Path(importlib.util.find_spec(n).origin).parent for n in names} | {Path(mmtok.__file__).parent}
    for folder in sorted(folders):
        compileall.compile_dir(folder, quiet=1)


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n")


def write_results(txt: Path | None, text: str, json_path: Path | None, payload: Callable[[], Any]) -> None:
    """Write a bench's printed report to ``txt`` and its data (``payload()``, made only when asked for) to
    ``json_path``, each where given, making their folders; values JSON cannot write (paths) are written as text."""
    if txt:
        txt.parent.mkdir(parents=True, exist_ok=True)
        txt.write_text(text + "\n")
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(payload(), indent=1, default=str) + "\n")
