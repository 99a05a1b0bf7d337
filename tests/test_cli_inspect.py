"""`mmtok inspect` and `mmtok demo` through Typer's CliRunner: tables, JSON lines, errors and exit codes."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()


def test_inspect_json_gives_one_object_per_file(samples):
    result = runner.invoke(app, ["inspect", "--json", str(samples / "clip.mp4"), str(samples / "speech.wav")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["kind"] for r in rows] == ["video", "audio"]
    assert rows[0]["width"] == 320 and rows[0]["fps"] == 24.0 and rows[0]["audio_codec"] == "aac"
    assert rows[1]["sample_rate_hz"] == 16000 and rows[1]["channels"] == 1


def test_inspect_table_lists_a_folder_recursively(samples, tmp_path):
    (tmp_path / "nested").mkdir()
    shutil.copy(samples / "rocket_rotated.jpg", tmp_path / "nested" / "rocket.jpg")
    shutil.copy(samples / "speech.mp3", tmp_path / "speech.mp3")
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "640x427" in result.stdout  # orientation applied
    assert "mp3" in result.stdout and "16,000" in result.stdout


def test_bad_inputs_get_one_line_each_and_the_rest_is_processed(samples, tmp_path):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    result = runner.invoke(
        app, ["inspect", "--json", str(empty), str(samples / "chelsea.jpg"), str(tmp_path / "missing.wav")]
    )
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0] == {"path": str(empty), "error": "empty file (0 bytes)"}
    assert rows[1]["kind"] == "image"
    assert rows[2]["error"] == "no such file or folder"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and "empty.png: empty file" in errors[0]


def test_expected_kind_turns_other_kinds_into_errors(samples):
    result = runner.invoke(app, ["inspect", "--kind", "audio", str(samples / "chelsea.jpg")])
    assert result.exit_code == 1
    assert "expected audio, but the content is image" in result.stderr


def test_usage_errors_exit_2():
    assert runner.invoke(app, ["inspect"]).exit_code == 2
    assert runner.invoke(app, ["inspect", "--no-such-flag", "x"]).exit_code == 2


def test_demo_inspects_prices_tokenizes_and_asks_the_backbone(tmp_path):
    steps = "inspect,price,tokenize,backbone"
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo"), "--steps", steps])
    assert result.exit_code == 0, result.output
    for name in ("astronaut.png", "clip.mp4", "speech.wav", "note.txt", "gemini-2.5-flash"):
        assert name in result.stdout
    assert (tmp_path / "demo" / "tokens" / "chelsea.safetensors").is_file()
    assert "correct:" in result.stdout and "with all tokens" in result.stdout


def test_demo_rejects_unknown_steps(tmp_path):
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--steps", "inspect,juggle"])
    assert result.exit_code == 2 and "juggle" in result.output


@pytest.mark.slow
def test_demo_runs_every_step_and_writes_the_plan_report(tmp_path):
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "demo" / "plan" / "report.md").is_file() and "report:" in result.stdout
