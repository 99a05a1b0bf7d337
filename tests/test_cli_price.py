"""`mmtok price`, `mmtok models` and `mmtok prices` through the CLI runner."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()
AT = ["--at", "2026-12-01"]


def _rows(result):
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_price_json_per_input_and_model(samples):
    args = ["price", "--json", "-m", "gpt-4o", "-m", "claude-opus-4-7", "--detail", "high", *AT]
    result = runner.invoke(app, [*args, str(samples / "chelsea.jpg")])
    assert result.exit_code == 0, result.output
    rows = _rows(result)
    assert [(r["model"], r["tokens"]["image"]) for r in rows] == [("gpt-4o", 255), ("claude-opus-4-7", 187)]
    assert rows[0]["lines"][0]["working"].endswith("= 255")
    assert rows[0]["money_source"] == "genai-prices" and rows[0]["as_of"] == "2026-12-01"
    assert rows[1]["label"] == "exact" and rows[1]["complete"]


def test_the_issue_command_prices_current_models(samples):
    files = [str(samples / n) for n in ("chelsea.jpg", "speech.mp3", "clip.mp4")]
    models = ["-m", "gpt-5.2", "-m", "claude-opus-4-7", "-m", "gemini-3.1-pro-preview"]
    result = runner.invoke(app, ["price", *files, "--text", "Describe it.", *models, "--json", *AT])
    rows = [r for r in _rows(result) if "error" not in r]
    assert len(rows) == 9  # 3 requests x 3 models
    gemini = [r for r in rows if r["model"] == "gemini-3.1-pro-preview"]
    assert all(r["complete"] for r in gemini) and gemini[2]["tokens"]["video"] == 210
    assert result.exit_code == 1  # GPT-5.2 and Claude take no audio or video: those totals are incomplete
    assert "speech.mp3: gpt-5.2 does not take audio (left out of the total)" in result.stderr


def test_one_request_counts_output_once_with_a_breakdown_per_attachment(samples):
    args = ["price", "--one-request", "-a", str(samples / "chelsea.jpg"), "-a", str(samples / "speech.wav")]
    result = runner.invoke(
        app, [*args, "--text", "hi", "--output-tokens", "300", "-m", "gemini-3-flash-preview", "--json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert [ln["modality"] for ln in row["lines"]] == ["image", "audio", "text", "output"]
    assert row["output_tokens"] == 300


def test_price_table_with_text_and_totals(samples):
    args = ["price", "-m", "gpt-4o", "--text", "How much is this?", str(samples / "chelsea.jpg")]
    result = runner.invoke(app, [*args, str(samples / "coffee.webp"), *AT])
    assert result.exit_code == 0, result.output
    assert "total" in result.stdout and "o200k_base" in result.stdout
    assert "money from genai-prices openai:gpt-4o" in result.stdout and "prices of 2026-12-01" in result.stdout


def test_price_csv_and_output_tokens(samples):
    result = runner.invoke(
        app, ["price", "--csv", "--output-tokens", "500", "--detail", "high", str(samples / "chelsea.jpg")]
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows[0]["image_tokens"] == "255" and rows[0]["output_tokens"] == "500"


@pytest.mark.parametrize(
    ("flags", "check"),
    [
        (["--batch"], lambda r: r["option"] == "batch"),
        (["--tier", "flex"], lambda r: r["option"] == "flex"),
        (["--cached-input-tokens", "5000"], lambda r: r["tokens"]["cache_read"] == 5000),
        (["--at", "2026-11-15"], lambda r: r["as_of"] == "2026-11-15"),
    ],
)
def test_price_options(flags, check):
    result = runner.invoke(app, ["price", "--text", "hi", "-m", "gpt-5.2", "--json", *flags])
    assert result.exit_code == 0, result.output
    assert check(_rows(result)[0])


def test_folder_with_a_corrupt_file_prices_the_rest_and_exits_1(samples, tmp_path):
    shutil.copy(samples / "chelsea.jpg", tmp_path / "a.jpg")
    (tmp_path / "b.png").write_bytes(b"")
    result = runner.invoke(app, ["price", "--json", "-m", "gpt-4o", "-m", "gemini-3-flash-preview", str(tmp_path)])
    assert result.exit_code == 1
    rows = _rows(result)
    assert [r["model"] for r in rows[:2]] == ["gpt-4o", "gemini-3-flash-preview"]
    assert result.stderr.count("error:") == 1 and f"{tmp_path / 'b.png'}: empty file" in result.stderr


def test_one_unknown_model_among_several_is_one_line_and_the_others_are_priced(samples):
    result = runner.invoke(
        app, ["price", "-m", "claude-opsu-4-7", "-m", "gpt-4o", "--json", str(samples / "chelsea.jpg")]
    )
    assert result.exit_code == 1
    assert "closest: claude-opus-4-7" in result.stderr and result.stderr.count("error:") == 1
    assert [r["model"] for r in _rows(result) if "error" not in r] == ["gpt-4o"]


def test_only_unknown_models_is_a_usage_error():
    assert runner.invoke(app, ["price", "-m", "nosuch-model-x", "--text", "hi"]).exit_code == 2


@pytest.mark.parametrize(
    "args",
    [["price"], ["price", "--text", "x", "--detail", "bogus"], ["price", "--text", "x", "--at", "yesterday"]],
)
def test_usage_errors_exit_2(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_models_lists_what_each_model_takes_and_costs():
    result = runner.invoke(app, ["models", "--json", "--provider", "google", "--modality", "video"])
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in _rows(result)}
    gemini = rows["gemini-3.1-pro-preview"]
    assert gemini["takes"] == ["text", "image", "audio", "video"]
    assert gemini["rules"]["image"]["label"] == "upper bound" and gemini["prices"]["input"] == "2"
    assert gemini["context_window"] and gemini["rule_read"] == "2026-12-02"
    assert all("video" in r["takes"] for r in rows.values())


def test_models_shows_retirement_dates_and_refuses_an_unknown_provider():
    rows = {r["model"]: r for r in _rows(runner.invoke(app, ["models", "--json", "--provider", "openai"]))}
    assert rows["gpt-5.2-chat-latest"]["retired"] == "2026-08-10"
    assert runner.invoke(app, ["models", "--provider", "nosuch"]).exit_code == 2


def test_prices_status_and_list():
    status = runner.invoke(app, ["prices", "status", "--json"])
    assert status.exit_code == 0, status.output
    parts = _rows(status)[0]["parts"]
    assert parts[0]["source"] == "genai-prices" and parts[1]["version"].startswith("litellm 1.110.2")
    listing = runner.invoke(app, ["prices", "list"])
    assert listing.exit_code == 0 and "selfhosted.toml" in listing.stdout


def test_prices_update_takes_in_a_litellm_map_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "cache"))
    data = {"gpt-9": {"litellm_provider": "openai", "input_cost_per_token": 1e-06, "supports_vision": True}}
    src = tmp_path / "map.json"
    src.write_text(json.dumps(data))
    result = runner.invoke(app, ["prices", "update", "--from", str(src), "--litellm-version", "9.9"])
    assert result.exit_code == 0, result.output
    quote = runner.invoke(app, ["price", "--text", "hi", "-m", "gpt-9", "--json"])
    assert _rows(quote)[0]["money_source"] == "LiteLLM map 9.9"
    assert runner.invoke(app, ["prices", "update", "--reset"]).exit_code == 0
    assert runner.invoke(app, ["price", "--text", "hi", "-m", "gpt-9"]).exit_code == 2


def test_prices_update_refuses_a_file_that_is_neither(tmp_path):
    src = tmp_path / "x.json"
    src.write_text('{"a": 1}')
    result = runner.invoke(app, ["prices", "update", "--from", str(src)])
    assert result.exit_code == 1 and "neither genai-prices data" in result.stderr


def test_import_litellm_command(tmp_path):
    src = tmp_path / "p.json"
    src.write_text(json.dumps({"gpt-4o": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06}}))
    out = tmp_path / "sheet.toml"
    result = runner.invoke(app, ["prices", "import-litellm", str(src), "--out", str(out), "--as-of", "2026-10-01"])
    assert result.exit_code == 0, result.output
    quote = runner.invoke(app, ["price", "--json", "--prices", str(out), "--text", "hi"])
    assert _rows(quote)[0]["as_of"] == "2026-10-01"


def test_a_broken_sheet_or_price_map_is_one_line_and_its_exit_code(tmp_path):
    sheet, price_map = tmp_path / "bad.toml", tmp_path / "bad.json"
    sheet.write_text("not toml [")
    price_map.write_text("{not json")
    listing = runner.invoke(app, ["prices", "list", "--prices", str(sheet)])
    assert listing.exit_code == 2 and listing.stderr.startswith(f"error: {sheet}: invalid TOML")
    imported = runner.invoke(app, ["prices", "import-litellm", str(price_map), "--out", str(tmp_path / "s.toml")])
    assert imported.exit_code == 1 and imported.stderr.startswith(f"error: {price_map}: not valid JSON")
    assert len(listing.stderr.splitlines()) == len(imported.stderr.splitlines()) == 1


def test_an_unreadable_file_with_one_model_is_one_line_naming_the_file_once(tmp_path):
    bad = tmp_path / "empty.png"
    bad.write_bytes(b"")
    result = runner.invoke(app, ["price", "-m", "gpt-4o", str(bad)])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {bad}: empty file (0 bytes)"


def test_price_takes_token_files(tmp_path):
    import torch

    from mmtok.tokens import TokenSequence

    sequence = TokenSequence("audio", embeddings=torch.zeros(48, 256), tokenizer="av-tiny")  # av-tiny: 256-d
    path = sequence.save(tmp_path / "s.safetensors")
    result = runner.invoke(app, ["price", str(path), "-m", "mmtok-semantic", "--json"])
    assert result.exit_code == 0, result.output
    assert _rows(result)[0]["tokens"]["audio"] == 48
