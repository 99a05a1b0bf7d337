"""The examples in the README and the docs run: every ```python block is executed on its own, every `$ mmtok ...`
line of a ```console block is invoked. An example shown on several pages runs once."""

from __future__ import annotations

import json
import shlex
import tomllib

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app
from tests.docs_pages import PAGES, ROOT, code_blocks, mmtok_commands, page_name, unique, unknown_flags

BLOCKS = [(page_name(path), lang, code) for path in PAGES for lang, code in code_blocks(path)]
PYTHON = unique([(page, code) for page, lang, code in BLOCKS if lang == "python"])
COMMANDS = unique(
    [
        (page, line[2:])
        for page, lang, code in BLOCKS
        if lang == "console"
        for line in code.splitlines()
        if line.startswith("$ ")
    ]
)


def test_readme_has_examples():
    readme = [lang for page, lang, _ in BLOCKS if page == "README.md"]
    assert "python" in readme and "console" in readme


def test_console_blocks_hold_only_mmtok_commands():
    """Every line of a console block is a `$ mmtok` command the tests run: nothing shown as a command goes
    unchecked (output, other programs and shell pipelines go in ```sh blocks, which are illustrations)."""
    for page, lang, code in BLOCKS:
        if lang == "console":
            for line in code.splitlines():
                assert line.startswith("$ mmtok "), f"{page}: console line not run by the tests: {line!r}"


@pytest.mark.parametrize(("page", "code"), PYTHON, ids=[f"{page}-{i}" for i, (page, _) in enumerate(PYTHON)])
def test_python_blocks_run_each_on_its_own(page, code, monkeypatch):
    """Each Python example is run alone, in a fresh namespace, as a user pastes it."""
    monkeypatch.chdir(ROOT)
    exec(compile(code, page, "exec"), {})


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{page}-{command[:60]}" for page, command in COMMANDS])
def test_console_commands_run(page, command, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)
    assert argv[0] == "mmtok"
    result = CliRunner().invoke(app, argv[1:])
    assert result.exit_code == 0, f"{page}: {command}\n{result.output}"


SHELL = [(page, line) for page, lang, code in BLOCKS if lang in ("sh", "bash") for line in code.splitlines()]


@pytest.mark.parametrize(("page", "line"), SHELL, ids=[f"{page}-{line[:50]}" for page, line in SHELL])
def test_shell_examples_name_real_commands_and_flags(page, line):
    """Shell blocks are illustrations (a pipe into jq, a client's own command, make), not run; but every mmtok
    command in them exists with the flags it shows, and every make target is in the Makefile."""
    for words in mmtok_commands(line):
        path, unknown = unknown_flags(app, words)
        assert path and not unknown, f"{page}: {line!r}: mmtok {path or words[0]} has no {unknown}"
    if line.startswith("make "):
        target = line.split()[1]
        assert f"\n{target}:" in (ROOT / "Makefile").read_text(), f"{page}: no make target {target}"


DATA = [(page, lang, code) for page, lang, code in BLOCKS if lang in ("json", "toml")]


@pytest.mark.parametrize(
    ("page", "lang", "code"), DATA, ids=[f"{page}-{lang}-{i}" for i, (page, lang, _) in enumerate(DATA)]
)
def test_data_examples_parse(page, lang, code):
    (json.loads if lang == "json" else tomllib.loads)(code)
