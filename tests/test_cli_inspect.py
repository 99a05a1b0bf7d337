"""`mmtok inspect` and `mmtok demo` through Typer's CliRunner: tables, JSON lines, CSV, token files, errors and exit
codes; inputs that are not regular files or cannot be read, across inspect, price and tokenize; tokenize's output
names; tables at 80 columns (inspect, price, models); progress bars on a terminal; tokenize --truncate on audio."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from decimal import Decimal
from pathlib import Path

import PIL.Image
import pytest
import torch
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.tokens import TokenSequence, save_sequences

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


def test_demo_json_is_one_object_per_step_inspect_price_tokenize_ask(tmp_path):
    result = runner.invoke(
        app, ["demo", "--json", "--out", str(tmp_path / "demo"), "--steps", "inspect,price,tokenize,ask"]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["step"] for r in records] == ["inspect", "price", "tokenize", "ask"]
    inspected, priced, tokenized, asked = records
    assert {Path(m["path"]).name for m in inspected["media"]} >= {"astronaut.png", "clip.mp4", "speech.wav", "note.txt"}
    assert priced["models"][-1] == "gemini-3.1-pro-preview" and priced["quotes"]
    assert {"sample": "speech.wav", "model": "gpt-5.2", "accepted": False} in priced["quotes"]
    (m4a,) = [q for q in priced["quotes"] if q["sample"] == "speech.m4a" and q["accepted"]]
    assert any(w.startswith("Google's Gemini API takes audio as") for w in m4a["warnings"])  # the quote's warnings
    assert (tmp_path / "demo" / "tokens" / "chelsea.safetensors").is_file()
    assert {r["stream"] for r in tokenized["sequences"]} == {"image", "audio", "video"}
    assert len(asked["photos"]) == 8 and 0 <= asked["correct_truncated"] <= 8 and 0 < asked["kept_ratio"] < 1


def test_demo_tables_at_80_columns_name_every_sample_and_model(tmp_path):
    result = runner.invoke(
        app, ["demo", "--out", str(tmp_path / "demo"), "--steps", "inspect,price"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    for name in ("astronaut.png", "clip.mp4", "speech.wav", "note.txt", "gemini-3.1-pro-preview"):
        assert name in result.stdout
    from mmtok.samples import MANIFEST, list_samples

    for name in set(list_samples()) - {MANIFEST}:  # whole in both tables (rocket_rotated.jpg had folded to "...j/pg")
        assert sum(line.startswith(f" {name} ") for line in result.stdout.splitlines()) == 2, name
    assert MANIFEST not in result.stdout  # data about the samples, not a sample to price
    assert "1. inspect" in result.stdout and "2. price" in result.stdout
    assert "! speech.m4a on gemini-3.1-pro-preview:" in result.stdout  # the quote's warning is said, not hidden
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_demo_rejects_unknown_steps(tmp_path):
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--steps", "inspect,juggle"])
    assert result.exit_code == 2 and "juggle" in result.output


def test_demo_runs_every_step_and_writes_the_plan_report(tmp_path, monkeypatch):
    """Every step of `mmtok demo` in one run, its plan step on the demo's own spec with the search and calibration
    cut to their smallest (the full search is the planner's tests' and the demo's own first run's to measure)."""
    import dataclasses

    from mmtok.budgets import planner

    load_spec = planner.load_spec

    def small(path):
        spec = load_spec(path)
        assert spec.name == "demo"
        return dataclasses.replace(spec, population=4, generations=1, calibration_photos=2, calibration_speech=1)

    monkeypatch.setattr(planner, "load_spec", small)
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "demo" / "plan" / "report.md").is_file() and "report:" in result.stdout
    assert all(f"{step}" in result.stdout.lower() for step in ("inspect", "price", "tokenize", "plan"))


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


# ------------------------------------------------------------------------------- machine-readable, token files
def test_inspect_csv_has_one_row_per_input_and_every_field(samples):
    result = runner.invoke(app, ["inspect", "--csv", str(samples / "clip.mp4"), str(samples / "chelsea.jpg")])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["kind"], r["width"], r["frames"], r["audio_codec"]) for r in rows] == [
        ("video", "320", "72", "aac"),
        ("image", "451", "", ""),
    ]


def test_inspect_describes_each_sequence_of_a_token_file(tmp_path):
    image = TokenSequence("image", ids=torch.zeros(256, dtype=torch.long), grid=(16, 16), tokenizer="vq-clip-tiny")
    audio = TokenSequence(
        "audio",
        ids=torch.zeros(48, 8, dtype=torch.long),
        embeddings=torch.zeros(48, 256),
        tokenizer="av-tiny",
        meta={"tokens_per_second": 16.0},
    )
    single = image.save(tmp_path / "photo.safetensors")
    shard = save_sequences(tmp_path / "clip.safetensors", {"video": audio.select(torch.arange(48)), "audio": audio})
    result = runner.invoke(app, ["inspect", "--json", str(single), str(shard)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["key"], r["modality"], r["tokens"], r["grid"], r["tokenizer"]) for r in rows] == [
        (None, "image", 256, [16, 16], "vq-clip-tiny"),
        ("video", "audio", 48, None, "av-tiny"),
        ("audio", "audio", 48, None, "av-tiny"),
    ]
    assert rows[2]["codebook_levels"] == 8 and rows[2]["tokens_per_second"] == 16.0 and rows[0]["kind"] == "tokens"
    table = runner.invoke(app, ["inspect", str(single), str(shard)], env={"COLUMNS": "80"})
    assert "16x16" in table.stdout and "16/s" in table.stdout and "vq-clip-tiny" in table.stdout
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08" + b"\x00" * 7 + b"{}      ")
    refused = runner.invoke(app, ["inspect", "--json", str(bad), "--kind", "tokens"])
    assert refused.exit_code == 1 and len(_errors(refused)) == 1
    assert json.loads(refused.stdout)["path"] == str(bad)


def test_inspect_at_80_columns_keeps_the_path_and_every_digit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    noise = (torch.rand(1411, 1411, 3) * 255).to(torch.uint8).numpy()
    PIL.Image.fromarray(noise).save(tmp_path / "portrait.jpg", quality=85)
    shutil.copy(mmtok.sample_path("clip.mp4"), tmp_path / "clip.mp4")
    size = (tmp_path / "portrait.jpg").stat().st_size
    assert size > 1_000_000
    result = runner.invoke(app, ["inspect", "portrait.jpg", "clip.mp4"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "portrait.jpg" in result.stdout and "1411x1411" in result.stdout and f"{size:,}" in result.stdout
    assert "…" not in result.stdout
    assert lines[-1].startswith("left out at 80 columns:") or all("left out" not in line for line in lines)


def test_price_at_80_columns_keeps_costs_whole_and_puts_the_working_under_the_table(samples, monkeypatch):
    monkeypatch.chdir(samples)
    args = ["price", "chelsea.jpg", "speech.wav", "-m", "gpt-4o", "-m", "gemini-3-flash-preview", "--at", "2026-12-01"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout
    quotes = [json.loads(line) for line in runner.invoke(app, [*args, "--json"]).stdout.splitlines()]
    costs = [Decimal(str(q["total_cost"])) for q in quotes if "error" not in q]
    assert len(costs) == 3 and all(f"{c:.6f}" in result.stdout for c in costs)
    working = [line for line in lines if line.startswith("chelsea.jpg · gpt-4o:")]
    assert working and working[0].startswith("chelsea.jpg · gpt-4o: 451x300 -> 1x1 tiles")  # not one word a line
    wide = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert "working" in wide.stdout.splitlines()[1]  # room enough: the working is a column (headers: 2 lines)


def test_models_csv_and_a_table_that_fits_80_columns():
    result = runner.invoke(app, ["models", "--csv", "--provider", "anthropic"])
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert result.exit_code == 0 and rows and all(r["provider"] == "anthropic" for r in rows)
    assert rows[0].keys() >= {"model", "takes", "image_rule", "input_per_mtok", "context_window", "retired"}
    table = runner.invoke(app, ["models", "--provider", "anthropic"], env={"COLUMNS": "80"})
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert all(any(f" {r['model']} " in line for line in lines) for r in rows)  # every name whole on its line
    wide = runner.invoke(app, ["models", "--provider", "anthropic"], env={"COLUMNS": "120"})
    windows = {f"{int(r['context_window']):,}" for r in rows if r["context_window"]}
    assert all(w in wide.stdout for w in windows)  # 1,000,000 whole, never 1,000,00


# ----------------------------------------------------------------------------------------------- progress bars
@pytest.fixture
def terminal(monkeypatch):
    """stderr as a terminal: bars are drawn (from the first item) into a buffer the test reads."""
    from rich.console import Console

    from mmtok.cli import common

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, highlight=False)
    monkeypatch.setattr(common, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(common, "err_console", lambda: console)
    monkeypatch.setattr(common, "MIN_PROGRESS_ITEMS", 1)
    return buffer


def test_tokenize_shows_a_progress_bar_on_a_terminal(samples, tmp_path, terminal):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("chelsea.jpg", "coffee.webp", "astronaut.png"):
        shutil.copy(samples / name, folder / name)
    args = ["tokenize", str(folder), "--out", str(tmp_path / "t"), "--workers", "0", "--device", "cpu"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "tokenizing" in terminal.getvalue() and "3/3" in terminal.getvalue()


def test_price_errors_print_above_a_bar_with_a_total(samples, tmp_path, terminal):
    empty = tmp_path / "a.png"
    empty.write_bytes(b"")
    result = runner.invoke(app, ["price", str(empty), str(samples / "chelsea.jpg"), "-m", "gpt-4o", "--json"])
    assert result.exit_code == 1
    drawn = terminal.getvalue()
    assert f"error: {empty}: empty file (0 bytes)" in drawn and "2/2" in drawn and "/?" not in drawn


# -------------------------------------------------------------------------------------- tokenize --truncate
def test_tokenize_truncates_audio_with_a_method_that_applies_and_refuses_mi_in_one_line(samples, tmp_path):
    args = ["tokenize", str(samples / "speech.wav"), "--json", "--device", "cpu"]
    full = runner.invoke(app, [*args, "--out", str(tmp_path / "full")])
    cut = runner.invoke(app, [*args, "--out", str(tmp_path / "cut"), "--truncate", "divprune", "--keep-ratio", "0.5"])
    assert full.exit_code == cut.exit_code == 0, cut.output
    tokens = json.loads(full.stdout)["tokens"]
    assert json.loads(cut.stdout)["tokens"] == math.ceil(tokens / 2)
    mi = runner.invoke(app, [*args, "--out", str(tmp_path / "mi"), "--truncate", "mi", "--context", "hello"])
    assert mi.exit_code == 1 and len(_errors(mi)) == 1 and "use divprune" in mi.stderr
    no_context = runner.invoke(app, [*args, "--out", str(tmp_path / "mi"), "--truncate", "mi"])
    assert no_context.exit_code == 2 and "--context" in no_context.output


def test_inspect_shows_a_pdfs_pages_and_what_it_ignores(tmp_path, samples):
    from tests.test_document_bad import PAGE, assemble

    names = b"/Names << /JavaScript << /Names [(x) 4 0 R] >> >>"
    catalog = b"<< /Type /Catalog /Pages 2 0 R /OpenAction 4 0 R %s >>" % names
    script = b"<< /S /JavaScript /JS (app.alert(1);) >>"
    active = tmp_path / "active.pdf"
    active.write_bytes(assemble([catalog, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", PAGE, script]))
    table = runner.invoke(app, ["inspect", "tests/data/report.pdf", str(active)], env={"COLUMNS": "100"})
    assert table.exit_code == 0, table.output
    report = next(line for line in table.stdout.splitlines() if "report.pdf" in line)
    assert "document" in report and "612x792" in report and " 2 " in report  # two pages
    assert "active.pdf: holds 1 JavaScript action(s): ignored, never run" in table.stderr
    csv_out = runner.invoke(app, ["inspect", "--csv", "tests/data/report.pdf"]).stdout
    header, row = csv_out.splitlines()[:2]
    fields = dict(zip(header.split(","), row.split(","), strict=True))
    assert (fields["pages"], fields["text_pages"], fields["rotated_pages"]) == ("2", "2", "0")
    wrong = runner.invoke(app, ["inspect", "--kind", "document", str(samples / "chelsea.jpg"), "tests/data/report.pdf"])
    assert wrong.exit_code == 1 and "expected a document, but the content is image (jpeg)" in wrong.stderr


def test_inspect_says_which_api_a_request_body_is_for():
    result = runner.invoke(app, ["inspect", "--json", "mmtok/samples/requests/openai-chat.json"])
    row = json.loads(result.stdout)
    assert (row["kind"], row["format"], row["model"]) == ("text", "openai-chat body", "gpt-4o")
