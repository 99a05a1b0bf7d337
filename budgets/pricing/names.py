"""Model names as people type them: the models a word names (``sonnet``, ``4o``, ``gemini-pro``), newest first."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from mmtok.budgets.pricing.catalog import catalog, split_name
from mmtok.budgets.pricing.sheets import sheets

WORD = re.compile(r"[-_/.:\s]+")
SNAPSHOT = re.compile(r"^(\d{8}|\d{4})$")  # a dated snapshot's date (20260416), or a year/month-day piece


def suggest(asked: str, prices: tuple[Path, ...] = (), n: int = 4) -> list[str]:
    """The known models ``asked`` most likely means: those whose name holds every word of it (current, newest
    first), else the closest spellings."""
    bare = split_name(asked)[1].lower()
    words = [w for w in WORD.split(bare) if w]
    book = sheets(prices)
    known = sorted({*catalog().rows, *catalog().aliases, *book.rows, *book.aliases})
    family = [name for name in known if words and all(w in WORD.split(name) for w in words) and name != bare]
    if family:
        return sorted(family, key=_rank)[:n]
    import difflib  # only when a name is not known

    return difflib.get_close_matches(bare, known, n=n, cutoff=0.6)


def closest_names(name: str, prices: tuple[Path, ...] = ()) -> str:
    """``; closest: a, b`` for an error message, or nothing."""
    close = suggest(name, prices)
    return f"; closest: {', '.join(close)}" if close else ""


def _rank(name: str) -> tuple[bool, bool, tuple[int, ...], int, str]:
    """Current before retired, aliases and names before dated snapshots, newer versions first, shorter first."""
    entry = catalog().get(name)
    retired = bool(entry and entry.retired and entry.retired <= dt.date.today())
    pieces = WORD.split(name)
    snapshot = any(SNAPSHOT.match(p) for p in pieces[1:])
    version = [int(p) for p in pieces if p.isdigit() and len(p) <= 2][:4]
    return retired, snapshot, tuple(-v for v in version + [0] * (4 - len(version))), len(name), name
