"""The pages whose examples and figures the tests check: the README and every page of the docs site."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import typer

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


def mmtok_commands(line: str) -> list[list[str]]:
    """The ``mmtok ...`` invocations of a shell line (at its start, after a pipe, ``--``, ``&&`` or ``;``, or run by
    ``uvx`` / ``pipx run``, with ``--from`` / ``--spec`` naming the package), each as its words up to the next pipe
    or separator; comments dropped."""
    words = shlex.split(line, comments=True)
    found, current = [], None
    for i, word in enumerate(words):
        before = words[i - 2 : i]
        runner = (i and words[i - 1] in ("uvx", "run")) or (len(before) == 2 and before[0] in ("--from", "--spec"))
        if word in ("|", "&&", ";"):
            current = None
        elif word == "mmtok" and (i == 0 or words[i - 1] in ("|", "--", "&&", ";") or runner):
            current = []
            found.append(current)
        elif current is not None:
            current.append(word)
    return found


def unknown_flags(app: typer.Typer, words: list[str]) -> tuple[str, list[str]]:
    """The command ``mmtok WORDS`` names (its path) and the flags among WORDS it does not have."""
    command, rest, path = typer.main.get_command(app), list(words), []
    while isinstance(command, click.Group) and rest and rest[0] in command.list_commands(click.Context(command)):
        path.append(rest[0])
        command, rest = command.get_command(click.Context(command), rest[0]), rest[1:]
    flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
    used = {
        word.split("=")[0]
        for word in rest
        if word.startswith("-") and word != "-" and not re.fullmatch(r"-[\d.]+", word)
    }
    return " ".join(path), sorted(used - flags)
