"""Shared CLI plumbing: consoles, one-line errors, progress bars, JSON lines.

rich is imported on first use, so that `--json` runs over large folders do not pay for it at start-up.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from mmtok.errors import MmtokError

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


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
    """One line on stderr naming the input and what is wrong."""
    sys.stderr.write(f"error: {error}\n")


def print_json_line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")


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
