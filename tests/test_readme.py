"""The README's examples run: every ```python block is executed in order, every `$ mmtok ...` line is invoked."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def test_readme_has_examples():
    assert any(lang == "python" for lang, _ in BLOCKS)
    assert any(lang == "console" for lang, _ in BLOCKS)


@pytest.mark.parametrize("code", [code for lang, code in BLOCKS if lang == "python"])
def test_python_blocks_run_each_on_its_own(code, monkeypatch):
    """Each Python example is run alone, in a fresh namespace, as a user pastes it."""
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})


@pytest.mark.parametrize(
    "command",
    [line[2:] for lang, code in BLOCKS if lang == "console" for line in code.splitlines() if line.startswith("$ ")],
)
def test_console_commands_run(command, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)
    assert argv[0] == "mmtok"
    result = CliRunner().invoke(app, argv[1:])
    assert result.exit_code == 0, result.output
