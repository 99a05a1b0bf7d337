"""Shared CLI plumbing: consoles, one-line errors, progress bars, JSON lines.

rich is imported on first use, so that `--json` runs over large folders do not pay for it at start-up.
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from mmtok.errors import MmtokError

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def console() -> Console:
    """stdout console; tables are wide, so a pipe or file gets 200 columns rather than rich's default 80."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


@functools.cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def print_error(error: MmtokError | str) -> None:
    """One line on stderr naming the input and what is wrong (JSON lines held back are written first)."""
    _lines.flush()
    sys.stderr.write(f"error: {error}\n")


_json = json.JSONEncoder(default=str)  # built once: json.dumps(..., default=) builds an encoder per call


class _JsonLines:
    """JSON lines to stdout in batches (at most 64 KiB or 0.2 s held back), so a large run is not one write per
    line (stdout is unbuffered under PYTHONUNBUFFERED) while a reader still sees results as they come."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.size = 0
        self.since = time.monotonic()

    def write(self, obj: dict[str, Any]) -> None:
        line = _json.encode(obj) + "\n"
        self.pending.append(line)
        self.size += len(line)
        if self.size > 65536 or time.monotonic() - self.since > 0.2:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            sys.stdout.write("".join(self.pending))
            sys.stdout.flush()
        self.pending.clear()
        self.size = 0
        self.since = time.monotonic()


_lines = _JsonLines()
atexit.register(_lines.flush)


def print_json_line(obj: dict[str, Any]) -> None:
    _lines.write(obj)


def flushes_json_lines(command: F) -> F:
    """Decorate a command that prints JSON lines: what is held back is written when it ends, however it ends."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        finally:
            _lines.flush()

    return wrapper  # type: ignore[return-value]


def progress(items: Iterable[T], description: str, total: int | None = None, min_items: int = 50) -> Iterator[T]:
    """Wrap ``items`` in a transient progress bar on stderr when it is a terminal and the job is not tiny."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if not sys.stderr.isatty() or (total is not None and total < min_items):
        yield from items
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


def fmt_num(value: Any, digits: int = 2) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
