"""``mmtok tokenize``'s progress bar on a terminal (issue 33): it ends at its total, and the summary lines get
lines of their own (over 500 files the bar stayed at 480/500 with the summary printed on the bar's line)."""

from __future__ import annotations

import io
import re

import numpy as np
import PIL.Image
from rich.console import Console
from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()


def frames(text: str) -> list[str]:
    """What a terminal showed, frame by frame: escape codes dropped, split at carriage returns and newlines."""
    return [f for f in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)) if f.strip()]


def test_the_bar_reaches_its_total_and_the_summary_prints_after_it(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(60):
        PIL.Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / f"p{i:02d}.png")
    terminal = io.StringIO()
    console = Console(file=terminal, force_terminal=True, width=120)
    monkeypatch.setattr("mmtok.cli.common.stderr_is_terminal", lambda: True)
    monkeypatch.setattr("mmtok.cli.tokenize.stderr_is_terminal", lambda: True)
    monkeypatch.setattr("mmtok.cli.tokenize._stdout_is_terminal", lambda: True)
    monkeypatch.setattr("mmtok.cli.common.err_console", lambda: console)
    said: list[tuple[str, list[str]]] = []  # each summary line, with what the terminal had shown when it came
    monkeypatch.setattr("mmtok.cli.tokenize.say", lambda line: said.append((line, frames(terminal.getvalue()))))
    for resume in ([], ["--resume"]):  # the second run finds every image done: the bar still ends at 60/60
        terminal.truncate(0)
        terminal.seek(0)
        said.clear()
        result = runner.invoke(app, ["tokenize", str(folder), "-o", str(tmp_path / "tokens"), *resume])
        assert result.exit_code == 0, result.output
        [(line, before)] = said
        assert line.startswith(f"{folder}: ") and any("60/60" in f for f in before), before  # the bar was done
    assert "60 already done" in line
