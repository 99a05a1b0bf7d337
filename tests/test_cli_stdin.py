"""``-`` as an input is what was piped into stdin, for every command that reads files (inspect, tokenize, shrink,
truncate, ...): named ``-`` in tables, messages and JSON; refused in one line when stdin is a terminal, too large or
read twice; and ``models`` names each media rule as ``price`` does."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli import common
from mmtok.cli.main import app
from mmtok.errors import MediaError

runner = CliRunner()


def test_inspect_reads_a_photo_piped_into_stdin_beside_a_file(samples):
    photo = (samples / "chelsea.jpg").read_bytes()
    result = runner.invoke(app, ["inspect", "--json", "-", str(samples / "speech.wav")], input=photo)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0] == {**rows[0], "path": "-", "kind": "image", "width": 451, "height": 300, "bytes": len(photo)}
    assert rows[1]["kind"] == "audio"
    table = runner.invoke(app, ["inspect", "-"], input=photo, env={"COLUMNS": "80"})
    assert table.exit_code == 0 and " - " in table.stdout.splitlines()[2] and "mmtok-stdin" not in table.stdout


def test_bad_media_on_stdin_is_one_line_naming_it(samples):
    cut = (samples / "chelsea.jpg").read_bytes()[:1000]
    result = runner.invoke(app, ["inspect", "-"], input=cut)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: -: truncated") and "mmtok-stdin" not in result.stderr


def test_stdin_given_twice_is_read_once_and_the_second_refused(samples):
    photo = (samples / "chelsea.jpg").read_bytes()
    result = runner.invoke(app, ["inspect", "--json", "-", "-"], input=photo)
    assert result.exit_code == 1
    assert [json.loads(line)["path"] for line in result.stdout.splitlines()] == ["-"]
    assert result.stderr.strip() == "error: -: given twice; stdin can be read once"


def test_tokenize_then_truncate_through_stdin(samples, tmp_path):
    photo = (samples / "chelsea.jpg").read_bytes()
    made = runner.invoke(app, ["tokenize", "-", "--out", str(tmp_path / "tokens")], input=photo)
    assert made.exit_code == 0, made.output
    written = tmp_path / "tokens" / "stdin.safetensors"
    [sequence] = mmtok.load_sequences(written).values()
    assert sequence.modality == "image" and len(sequence) == 64
    args = ["truncate", "-", "--method", "uniform", "--keep", "16", "--out", str(tmp_path / "short.safetensors")]
    short = runner.invoke(app, args, input=written.read_bytes())
    assert short.exit_code == 0, short.output
    [shorter] = mmtok.load_sequences(tmp_path / "short.safetensors").values()
    assert len(shorter) == 16


def test_the_file_holding_stdin_is_removed_after_the_command(samples, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    result = runner.invoke(app, ["inspect", "-"], input=(samples / "chelsea.jpg").read_bytes())
    assert result.exit_code == 0 and not list(tmp_path.glob("mmtok-stdin-*"))


class _Stdin(io.TextIOWrapper):
    def __init__(self, data: bytes, terminal: bool) -> None:
        super().__init__(io.BytesIO(data))
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def test_a_terminal_on_stdin_is_refused_with_the_reason_and_the_other_inputs_go_on(samples, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"", terminal=True))
    with pytest.raises(MediaError, match=r"^-: stdin is a terminal: pipe the input in"):
        common.read_stdin_input()
    arguments = {"paths": [Path("-"), samples / "chelsea.jpg"]}
    with common.stdin_inputs(arguments) as refused:
        assert arguments["paths"] == [samples / "chelsea.jpg"] and refused[0].startswith("-: stdin is a terminal")
    with pytest.raises(MediaError, match="stdin is a terminal"), common.stdin_inputs({"tokens": Path("-")}):
        pass  # nothing left to run


def test_read_stdin_input_returns_the_bytes_and_refuses_more_than_its_cap(monkeypatch):
    body = json.dumps({"model": "gpt-4o", "messages": []}).encode()
    monkeypatch.setattr(sys, "stdin", _Stdin(body, terminal=False))
    assert common.read_stdin_input() == body
    monkeypatch.setattr(sys, "stdin", _Stdin(b"x" * 11, terminal=False))
    with pytest.raises(MediaError, match=r"^-: more than 10 bytes on stdin: pass it as a file"):
        common.read_stdin_input(max_bytes=10)


@pytest.mark.parametrize(
    "model", ["claude-opus-4-7", "claude-sonnet-4-6", "gpt-5.2", "gpt-4o", "gemini-3-flash-preview"]
)
def test_models_names_the_image_rule_as_price_does(samples, model):
    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.pricing.listing import describe

    quote = mmtok.price([samples / "chelsea.jpg"], model=model)
    assert describe(resolve(model))["rules"]["image"]["rule"] == quote.family
