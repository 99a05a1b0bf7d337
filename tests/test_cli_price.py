"""`mmtok price`, `mmtok models` and `mmtok prices` through the CLI runner."""

from __future__ import annotations

import csv
import io
import json
import shutil

from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()


def test_price_json_per_input_and_model(samples):
    result = runner.invoke(
        app,
        [
            "price",
            "--json",
            "-m",
            "gpt-4o",
            "-m",
            "claude-sonnet-4-5",
            "--detail",
            "high",
            str(samples / "chelsea.jpg"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["model"], r["tokens"]["image"]) for r in rows] == [("gpt-4o", 255), ("claude-sonnet-4-5", 181)]
    assert rows[0]["lines"][0]["working"].endswith("= 255")
    assert rows[0]["source"] and rows[0]["as_of"] == "2026-07-24"


def test_price_table_with_text_and_totals(samples):
    result = runner.invoke(
        app,
        [
            "price",
            "-m",
            "gpt-4o",
            "--text",
            "How much is this?",
            str(samples / "chelsea.jpg"),
            str(samples / "coffee.webp"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "total" in result.stdout and "o200k_base" in result.stdout and "as of 2026-07-24" in result.stdout


def test_price_csv_and_output_tokens(samples):
    result = runner.invoke(app, ["price", "--csv", "--output-tokens", "500", str(samples / "chelsea.jpg")])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows[0]["image_tokens"] == "255" and rows[0]["output_tokens"] == "500"


def test_folder_with_a_corrupt_file_prices_the_rest_and_exits_1(samples, tmp_path):
    shutil.copy(samples / "chelsea.jpg", tmp_path / "a.jpg")
    (tmp_path / "b.png").write_bytes(b"")
    result = runner.invoke(app, ["price", "--json", "-m", "gpt-4o", "-m", "gemini-2.5-flash", str(tmp_path)])
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["model"] for r in rows[:2]] == ["gpt-4o", "gemini-2.5-flash"]
    assert rows[2]["error"] == f"{tmp_path / 'b.png'}: empty file (0 bytes)"  # once, not once per model
    assert len(rows) == 3
    assert result.stderr.count("error:") == 1


def test_unknown_model_is_a_usage_error_with_suggestions(samples):
    result = runner.invoke(app, ["price", "-m", "claude-sonet-4-5", str(samples / "chelsea.jpg")])
    assert result.exit_code == 2
    assert "closest: claude-sonnet-4-5" in result.stderr


def test_nothing_to_price_is_a_usage_error():
    assert runner.invoke(app, ["price"]).exit_code == 2


def test_models_and_price_sheets_are_listed():
    result = runner.invoke(app, ["models", "--json", "--provider", "google"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {"gemini-2.5-flash", "gemini-3-pro-preview"} <= {r["model"] for r in rows}
    assert all(r["as_of"] and r["source"] for r in rows)
    listing = runner.invoke(app, ["prices", "list"])
    assert listing.exit_code == 0 and "openai.toml" in listing.stdout and "selfhosted.toml" in listing.stdout


def test_import_litellm_command(tmp_path):
    src = tmp_path / "p.json"
    src.write_text(json.dumps({"gpt-4o": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06}}))
    out = tmp_path / "sheet.toml"
    result = runner.invoke(app, ["prices", "import-litellm", str(src), "--out", str(out), "--as-of", "2026-10-01"])
    assert result.exit_code == 0, result.output
    quote = runner.invoke(app, ["price", "--json", "--prices", str(out), "--text", "hi"])
    assert json.loads(quote.stdout)["as_of"] == "2026-10-01"
