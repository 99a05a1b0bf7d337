"""The pages whose examples and figures the tests check: the README and every page of the docs site."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", flags=re.S | re.M)


def page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of a page, in order."""
    return FENCE.findall(path.read_text(encoding="utf-8"))


def unique(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(page, item) pairs, each item kept at its first page only: an example shown in the README and on a docs page
    runs once. Order is kept, so a command that reads what an earlier one wrote still runs after it."""
    seen: set[str] = set()
    kept = []
    for page, item in items:
        if item not in seen:
            seen.add(item)
            kept.append((page, item))
    return kept
