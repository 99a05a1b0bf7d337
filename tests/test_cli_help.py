"""Every command's and group's ``--help`` at 80 columns: every option name, every choice value and every word of the
help shown whole (never cut with an ellipsis, never folded), and 2-3 examples at the end, each whole on its line,
using only flags its command has."""

from __future__ import annotations

import re
import shlex

import click
import pytest
import typer
from typer.testing import CliRunner

from mmtok.cli.examples import EXAMPLES
from mmtok.cli.main import app

ROOT_COMMAND = typer.main.get_command(app)


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            found += _commands(command.get_command(click.Context(command), name), (*path, name))
    return found


COMMANDS = _commands(ROOT_COMMAND)
IDS = [" ".join(path) or "mmtok" for path, _ in COMMANDS]


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def _words(text: str) -> set[str]:
    """The words of rendered help: panel borders and the punctuation around words removed."""
    return {word.strip(".,;:()") for word in re.split(r"[\s│╭╮╰╯─]+", text) if word}


def _shown_whole(word: str, output: str) -> bool:
    return word.strip(".,;:()") in _words(output)


def test_every_command_and_group_is_checked():
    names = {path[0] for path, _ in COMMANDS if path}
    assert {"price", "tokenize", "shrink", "plan", "prices", "eval", "train"} <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_at_80_columns_shows_every_name_choice_and_word_whole(path, command):
    output = _help(path)
    assert "…" not in output, f"something was cut:\n{output}"
    assert all(len(line) <= 80 for line in output.splitlines())
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if isinstance(param, click.Option):
                assert _shown_whole(name, output), f"{name} is not shown whole:\n{output}"
        if isinstance(param.type, click.Choice):
            for choice in param.type.choices:
                assert _shown_whole(str(choice), output), f"choice {choice} is not shown whole:\n{output}"
        for word in (getattr(param, "help", None) or "").split():
            if "[" not in word and "]" not in word:  # Rich markup is not shown as written
                assert _shown_whole(word, output), f"{word!r} of {param.name}'s help is not shown whole:\n{output}"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_ends_with_two_or_three_examples_each_whole_on_its_line(path, command):
    examples = EXAMPLES.get(" ".join(path))
    assert examples, f"no examples for {' '.join(path) or 'mmtok'} in mmtok/cli/examples.py"
    assert 1 <= len(examples) <= 3 and (len(examples) >= 2 or path == ("version",))
    output = _help(path)
    tail = output[output.rindex("Examples") :]
    for what, line in examples:
        assert len(line) <= 72, line
        assert any(row.strip(" │") == line for row in tail.splitlines()), f"{line!r} not whole:\n{output}"
        assert f"{what}:" in tail


@pytest.mark.parametrize(("key", "examples"), sorted(EXAMPLES.items()))
def test_examples_use_only_flags_their_command_has(key, examples):
    for _, line in examples:
        words = shlex.split(line)
        assert words[0] == "mmtok", line
        command, rest = ROOT_COMMAND, words[1:]
        while isinstance(command, click.Group) and rest and rest[0] in command.list_commands(click.Context(command)):
            command, rest = command.get_command(click.Context(command), rest[0]), rest[1:]
        flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
        used = {word.split("=")[0] for word in rest if word.startswith("-") and not re.fullmatch(r"-[\d.]+", word)}
        assert used <= flags, f"{line}: {sorted(used - flags)} not options of {command.name}"
