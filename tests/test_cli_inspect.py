"""`mmtok inspect` and `mmtok demo` through Typer's CliRunner: tables, JSON lines, errors and exit codes; inputs
that are not regular files or cannot be read, across inspect, price and tokenize; and tokenize's output names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import PIL.Image
import pytest
from typer.testing import CliRunner

import mmtok
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
    for name in ("astronaut.png", "clip.mp4", "speech.wav", "note.txt", "gemini-3.1-pro-preview"):
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


# --------------------------------------------------------------------------- inputs that are not regular files
@pytest.mark.timeout(20)
def test_a_fifo_given_to_inspect_price_or_tokenize_is_one_line_not_a_hang(samples, tmp_path):
    fifo = tmp_path / "photo.jpg"
    os.mkfifo(fifo)
    message = f"error: {fifo}: is a FIFO (named pipe), not a regular file; only regular files are read"
    inspected = runner.invoke(app, ["inspect", str(fifo), str(samples / "chelsea.jpg")])
    assert inspected.exit_code == 1 and _errors(inspected) == [message]
    assert "451x300" in inspected.stdout
    tokenized = runner.invoke(app, ["tokenize", str(fifo), "--out", str(tmp_path / "t"), "--device", "cpu"])
    assert tokenized.exit_code == 1 and _errors(tokenized) == [message]
    priced = runner.invoke(app, ["price", "--json", "-m", "gpt-4o", str(fifo)])
    assert priced.exit_code == 1 and len(_errors(priced)) == 1
    assert "is a FIFO (named pipe), not a regular file" in _errors(priced)[0]


@pytest.mark.timeout(20)
def test_a_fifo_given_as_price_sheet_is_one_line_not_a_hang(samples, tmp_path):
    fifo = tmp_path / "sheet.toml"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["price", str(samples / "chelsea.jpg"), "--prices", str(fifo), "-m", "gpt-4o"])
    assert result.exit_code == 2
    assert _errors(result) == [f"error: {fifo}: price sheet is not a regular file"]


def test_an_unreadable_subfolder_is_one_line_and_exit_1(samples, tmp_path, monkeypatch):
    for name in ("a", "locked"):
        (tmp_path / name).mkdir()
        shutil.copy(samples / "chelsea.jpg", tmp_path / name / "photo.jpg")
    locked = tmp_path / "locked"
    locked.chmod(0o000)
    if os.access(locked, os.R_OK):  # root reads it anyway: make its listing fail as it does for everyone else
        real_scandir = os.scandir

        def scandir(path="."):
            if Path(path) == locked:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        result = runner.invoke(app, ["inspect", "--json", str(tmp_path)])
    finally:
        locked.chmod(0o755)
    assert result.exit_code == 1
    assert _errors(result) == [f"error: {locked}: cannot read folder: Permission denied"]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows == [rows[0], {"path": str(locked), "error": "cannot read folder: Permission denied"}]
    assert rows[0]["path"] == str(tmp_path / "a" / "photo.jpg") and rows[0]["width"] == 451


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ tokenize: output names
def _tokenize(*args: str) -> list[dict]:
    result = runner.invoke(app, ["tokenize", "--json", "--image-size", "32", "--device", "cpu", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _photo(samples, path: Path, source: str = "chelsea.jpg", fmt: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with PIL.Image.open(samples / source) as im:
        im.convert("RGB").save(path, format=fmt)
    return path


def test_inputs_with_the_same_stem_in_different_folders_keep_their_folders(samples, tmp_path):
    """The reproduction: a/photo.jpg and b/photo.webp both used to be written to tokens/photo.safetensors."""
    first = _photo(samples, tmp_path / "a" / "photo.jpg")
    second = _photo(samples, tmp_path / "b" / "photo.webp", "astronaut.png", "WEBP")
    out = tmp_path / "tokens"
    rows = _tokenize(str(first), str(second), "--out", str(out))
    assert [r["file"] for r in rows] == [str(out / "a" / "photo.safetensors"), str(out / "b" / "photo.safetensors")]
    loaded = [next(iter(mmtok.load_sequences(r["file"]).values())).ids.tolist() for r in rows]
    assert loaded == [r["ids"] for r in rows] and loaded[0] != loaded[1]  # each file holds its own image's tokens


def test_inputs_with_the_same_stem_in_one_folder_keep_their_full_names(samples, tmp_path):
    jpeg = _photo(samples, tmp_path / "photo.jpg")
    png = _photo(samples, tmp_path / "photo.png", "astronaut.png")
    other = _photo(samples, tmp_path / "other.jpg", "rocket_rotated.jpg")
    out = tmp_path / "tokens"
    rows = _tokenize(str(jpeg), str(png), str(other), str(jpeg), "--out", str(out))  # photo.jpg given twice
    assert [r["file"] for r in rows] == [
        str(out / "photo.jpg.safetensors"),
        str(out / "photo.png.safetensors"),
        str(out / "other.safetensors"),  # no clash: the short name, as before
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "other.safetensors",
        "photo.jpg.safetensors",
        "photo.png.safetensors",
    ]


def test_a_single_file_keeps_its_short_name(samples, tmp_path):
    rows = _tokenize(str(samples / "chelsea.jpg"), "--out", str(tmp_path / "tokens"))
    assert [r["file"] for r in rows] == [str(tmp_path / "tokens" / "chelsea.safetensors")]


def test_audio_in_sub_folders_with_the_same_stem_keeps_its_sub_folders(samples, tmp_path):
    folder = tmp_path / "voices"
    for sub in ("x", "y"):
        (folder / sub).mkdir(parents=True)
        shutil.copy(samples / "speech.wav", folder / sub / "take.wav")
    _photo(samples, folder / "x" / "take.jpg")  # an image beside it goes into the folder's shards
    out = tmp_path / "tokens"
    rows = _tokenize(str(folder), "--out", str(out))
    files = sorted({r["file"] for r in rows})
    assert files == sorted(
        [str(out / "voices" / "shard-r0-00000.safetensors")]
        + [str(out / "voices" / sub / "take.safetensors") for sub in ("x", "y")]
    )
