"""Every figure in the result tables of the README and the docs comes from a results file: each table is preceded by
a marker ``<!-- figures: eval/results/x.json [more files] -->`` and every number in it (three significant digits or
more, or with a decimal point; protocol columns excepted) must be found in those files, at the page's precision (as a
value or a percentage, either sign: a page may write a minus as "−" or state a loss as a positive number)."""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pytest

from tests.docs_pages import PAGES, ROOT, page_name

MARKER = re.compile(r"<!-- figures: (.+?) -->\n((?:\|.*\n)+)")
NUMBER = re.compile(r"(?<![\w.\-])\d[\d,]*(?:\.\d+)?(?![A-Za-wyz_\-])")  # not inside a name like gemini-2.5


def _numbers_in(text: str) -> list[Decimal]:
    found = []
    for token in NUMBER.findall(text):
        try:
            found.append(Decimal(token.replace(",", "")))
        except InvalidOperation:
            continue
    return found


def _file_numbers(path: Path) -> list[Decimal]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        text = json.dumps(json.loads(text))  # numbers as JSON writes them (no thousands separators)
    numbers = []
    for token in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\d[\d,]*(?:\.\d+)?", text):
        try:
            numbers.append(Decimal(token.replace(",", "")))
        except InvalidOperation:
            continue
    return numbers


def _significant(token: str) -> bool:
    digits = token.replace(",", "").replace(".", "").lstrip("-").lstrip("0")
    return "." in token or len(digits) >= 3


def _matches(shown: str, candidates: list[Decimal]) -> bool:
    value = Decimal(shown.replace(",", ""))
    places = len(shown.split(".")[1]) if "." in shown else 0
    quantum = Decimal(1).scaleb(-places)
    for candidate in candidates:
        for scaled in (candidate, candidate * 100, -candidate, -candidate * 100):
            if abs(scaled - value) <= quantum / 2 + Decimal("1e-9"):
                return True
    return False


TABLES = [(page_name(path), files, table) for path in PAGES for files, table in MARKER.findall(path.read_text("utf-8"))]
TABLE_START = re.compile(r"(?:^|\n)((?:<!--[^\n]*-->\n)?)\|[^\n]*\n\|[-:| ]+\|\n")


def _results_sections() -> dict[str, str]:
    """The text whose every table must be marked: the README's results section, and the whole results page."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = readme.split("\n## What it measured\n", 1)[1].split("\n## ", 1)[0]
    return {"README.md": results, "docs/results.md": (ROOT / "docs" / "results.md").read_text(encoding="utf-8")}


@pytest.mark.parametrize("page", sorted(_results_sections()))
def test_result_tables_are_marked(page):
    tables = TABLE_START.findall(_results_sections()[page])
    assert tables and all(marker.startswith("<!-- figures:") for marker in tables), f"a table in {page} has no marker"


def test_the_docs_have_marked_tables():
    assert {page for page, _, _ in TABLES} >= {"docs/results.md"}


@pytest.mark.parametrize(("page", "files", "table"), TABLES, ids=[f"{t[0]}-{t[1][:50]}" for t in TABLES])
def test_every_figure_comes_from_its_results_file(page, files, table):
    paths = [ROOT / f for f in files.split()]
    for path in paths:
        assert path.is_file(), f"{page}: {path} is missing"
    candidates = [n for p in paths for n in _file_numbers(p)]
    header, _, *rows = table.strip().splitlines()
    described = {i for i, name in enumerate(header.strip("|").split("|")) if "protocol" in name.lower()}
    missing = []
    for row in rows:
        cells = row.strip("|").split("|")
        for i, cell in enumerate(cells[1:], 1):  # the first cell names the row; protocol cells describe it
            if i in described:
                continue
            for token in NUMBER.findall(cell):
                if _significant(token) and not _matches(token, candidates):
                    missing.append(f"{token} in {row.strip()[:80]}")
    assert not missing, f"{page}: figures not found in {files}: {missing[:10]}"
