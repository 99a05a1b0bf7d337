"""Batch files priced as their bodies are: every format read by its structure from files the official SDKs made,
each request quoted by the one body parser at batch rates, bad lines named, the provider limits said first."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.budgets.pricing import price_request
from mmtok.budgets.pricing.batch import price_batch
from mmtok.cli.main import app
from mmtok.request.batch import LIMITS, BadLine, open_batch
from tests.batch_sdk import (
    anthropic_batch_body,
    anthropic_requests,
    gemini_batch_file,
    gemini_inline_body,
    openai_batch,
    openai_bodies,
    write_jsonl,
)

GEMINI = "gemini-2.5-flash"
HI_BODY = {"model": "gpt-4o-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batches")
    (folder / "anthropic.json").write_bytes(anthropic_batch_body())
    (folder / "gemini-inline.json").write_bytes(gemini_inline_body(GEMINI))
    return {"openai": openai_batch(folder / "openai.jsonl"), "anthropic": folder / "anthropic.json",
            "gemini": gemini_batch_file(folder / "gemini.jsonl", GEMINI),
            "gemini-inline": folder / "gemini-inline.json"}  # fmt: skip


def test_each_format_is_told_by_its_structure(files):
    assert {name: open_batch(path).format for name, path in files.items()} == {
        "openai": "openai", "anthropic": "anthropic", "gemini": "gemini", "gemini-inline": "gemini-inline"}  # fmt: skip


def test_an_openai_batch_line_costs_what_its_body_costs_at_batch_rates(files):
    quote = price_batch(files["openai"])
    assert quote.ok and quote.requests == 4 and quote.format == "openai"
    bodies = {cid: body for cid, _, body in openai_bodies()}
    for line in quote.lines:
        batch_rates = line.option == "batch"
        alone = price_request(bodies[line.custom_id], batch=batch_rates)
        assert (line.cost, line.input_tokens, line.output_tokens) == (
            alone.total_cost, alone.input_tokens, alone.output_tokens), line.custom_id  # fmt: skip
        assert line.standard_cost == price_request(bodies[line.custom_id]).total_cost
    assert [line.option for line in quote.lines] == ["batch", "standard", "batch", "batch"]
    assert quote.warnings == ["gpt-4o-audio-preview: no batch rates are known (genai-prices, LiteLLM's map): priced "
                              "at standard rates"]  # genai-prices has none for it on this date  # fmt: skip
    kinds = {line.custom_id: set(line.tokens) for line in quote.lines}
    assert {"image"} <= kinds["photo-1"] and {"audio"} <= kinds["audio-1"] and {"image", "text"} <= kinds["pdf-1"]
    assert quote.discount == quote.standard_cost - quote.total_cost > 0
    assert {t.model for t in quote.totals.values()} == {"gpt-4o", "gpt-4o-audio-preview", "gpt-4.1-mini"}


def test_the_anthropic_batches_create_body_is_read_request_by_request(files):
    quote = price_batch(files["anthropic"])
    assert quote.ok and quote.provider == "anthropic" and quote.requests == 3
    params = {r["custom_id"]: r["params"] for r in anthropic_requests()}
    for line in quote.lines:
        assert line.cost == price_request(params[line.custom_id], batch=True).total_cost, line.custom_id
    assert quote.totals["claude-sonnet-4-5"].requests == 2 and quote.totals["claude-haiku-4-5"].requests == 1


def test_gemini_input_file_and_inline_requests_cost_the_same(files):
    by_file, inline = price_batch(files["gemini"], GEMINI), price_batch(files["gemini-inline"], GEMINI)
    assert by_file.ok and inline.ok and by_file.total_cost == inline.total_cost > 0
    assert [line.custom_id for line in by_file.lines] == ["photo-1", "audio-1", "pdf-1"]
    assert [line.custom_id for line in inline.lines] == ["#1", "#2", "#3"]  # inline requests without a key
    assert {"image", "audio"} <= {m for line in by_file.lines for m in line.tokens}


def test_a_gemini_batch_without_a_model_says_to_give_one(files):
    quote = price_batch(files["gemini"])
    assert not quote.totals and len(quote.errors) == 3 and "give one with -m" in quote.errors[0]


def test_bad_lines_are_named_by_number_and_the_rest_priced(tmp_path):
    good = {"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]}}  # fmt: skip
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "custom_id": "x", "url": "/v1/nowhere"}),
        json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}),
        "",
        json.dumps({**good, "custom_id": "y", "body": "text"}),
        json.dumps({**good, "custom_id": "last"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    quote = price_batch(path)
    assert [line.custom_id for line in quote.lines] == ["ok", "last"]
    assert [e.split(":")[0] for e in quote.errors] == ["line 2", "line 3 (x)", "line 4", "line 6 (y)"]
    assert "not valid JSON" in quote.errors[0] and "not an endpoint" in quote.errors[1]
    assert "no custom_id" in quote.errors[2] and "no body" in quote.errors[3]


def test_a_repeated_custom_id_is_an_error_naming_both_lines(files, tmp_path):
    rows = [json.loads(line) for line in files["openai"].read_text().splitlines()]
    path = write_jsonl(tmp_path / "twice.jsonl", [*rows, {**rows[0]}])
    quote = price_batch(path)
    assert len(quote.lines) == 4 and quote.errors == [
        "line 5 (photo-1): custom_id 'photo-1' is used on line 1 too: the OpenAI batch API refuses a file with a "
        "repeated id"]  # fmt: skip


def test_an_anthropic_custom_id_outside_the_documented_pattern_is_refused(tmp_path):
    requests = [{**anthropic_requests()[2], "custom_id": "has space"}]
    (tmp_path / "bad.json").write_bytes(anthropic_batch_body(requests))
    quote = price_batch(tmp_path / "bad.json")
    assert not quote.lines and "1 to 64 letters, digits" in quote.errors[0]


def test_a_file_over_the_request_count_limit_is_said_without_reading_json(tmp_path):
    limit = LIMITS["openai"].max_requests
    line = '{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(line % i for i in range(limit + 1)))
    survey = open_batch(path).survey()
    assert survey.requests == limit + 1 and len(survey.problems) == 1
    assert "50,001 requests: the OpenAI batch API takes at most 50,000" in survey.problems[0]


def test_a_gemini_inline_batch_over_20_mb_is_said_first_and_still_priced(tmp_path):
    import numpy as np
    from PIL import Image

    noise = np.random.default_rng(0).integers(0, 255, (1700, 1700, 3), dtype=np.uint8)
    noise_png = tmp_path / "noise.png"
    Image.fromarray(noise).save(noise_png)
    from google.genai import types

    body = json.loads(gemini_inline_body(GEMINI))
    request = body["batch"]["inputConfig"]["requests"]["requests"][0]
    part = types.Part.from_bytes(data=noise_png.read_bytes(), mime_type="image/png").model_dump(mode="json")
    request["request"]["contents"][0]["parts"][1] = {"inlineData": part["inline_data"]}
    body["batch"]["inputConfig"]["requests"]["requests"] += [request, request]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(body))
    assert path.stat().st_size > 20 * 2**20
    result = CliRunner().invoke(app, ["price", str(path), "-m", GEMINI])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0].startswith(f"error: {path}: {path.stat().st_size:,} bytes: the Gemini batch")
    assert "5 request(s), 0 not priced" in " ".join(result.stdout.split())


def test_cli_prints_a_line_per_request_on_json_and_the_file_quote_last(files):
    result = CliRunner().invoke(app, ["price", str(files["openai"]), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r.get("custom_id") for r in rows[:-1]] == ["photo-1", "audio-1", "pdf-1", "resp-1"]
    assert [r["option"] for r in rows[:-1]] == ["batch", "standard", "batch", "batch"]
    assert all(Decimal(r["cost"]) > 0 for r in rows[:-1])
    summary = rows[-1]["batch"]
    assert summary["requests"] == 4 and Decimal(summary["discount"]) > 0 and summary["errors"] == []


def test_cli_csv_has_a_row_per_request_named_by_line_and_id(files):
    result = CliRunner().invoke(app, ["price", str(files["anthropic"]), "--csv"])
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    assert rows[0].startswith("item,model,") and len(rows) == 4
    assert rows[1].startswith(f"{files['anthropic']} line 1 (photo-1),claude-sonnet-4-5,")


def test_cli_table_shows_the_batch_discount_at_80_columns(files):
    result = CliRunner().invoke(app, ["price", str(files["gemini"]), "-m", GEMINI], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert GEMINI in result.stdout and "50%" in result.stdout
    assert "Gemini batch input file, 3 request(s), 0 not priced" in " ".join(result.stdout.split())


def test_max_cost_gates_the_whole_file_and_per_line_each_request(files):
    quote = price_batch(files["openai"])
    dearest = max(line.cost for line in quote.lines)
    between = str((quote.totals["gpt-4o"].cost + dearest) / 2)
    whole = CliRunner().invoke(app, ["price", str(files["openai"]), "--max-cost", between])
    assert whole.exit_code == 1 and "on gpt-4o: $" in whole.stderr and "over --max-cost" in whole.stderr
    per_line = CliRunner().invoke(app, ["price", str(files["openai"]), "--max-cost", between, "--per-line"])
    assert per_line.exit_code == 0, per_line.output
    tight = CliRunner().invoke(app, ["price", str(files["openai"]), "--max-tokens", "300", "--per-line"])
    assert tight.exit_code == 1 and "line 3 (pdf-1) on gpt-4o:" in tight.stderr


def test_a_malformed_line_fails_the_run_after_the_rest_are_priced(tmp_path, files):
    path = tmp_path / "one-bad.jsonl"
    path.write_text(files["openai"].read_text() + "{oops\n")
    result = CliRunner().invoke(app, ["price", str(path), "--json"])
    assert result.exit_code == 1
    assert "line 5: not valid JSON" in result.stderr and "Traceback" not in result.output
    assert json.loads(result.stdout.splitlines()[-1])["batch"]["requests"] == 5


def test_mmtok_price_batch_is_the_python_api(files):
    quote = mmtok.price_batch(files["anthropic"])
    assert quote.total_cost == price_batch(files["anthropic"]).total_cost and quote.ok


def test_a_document_cut_short_names_where_reading_stopped(tmp_path, files):
    data = files["anthropic"].read_bytes()
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) * 2 // 3])
    lines = list(open_batch(path).lines())
    assert isinstance(lines[-1], BadLine) and "not valid JSON from here on" in lines[-1].problem


def test_worker_processes_give_the_same_quote_in_the_same_order(files, tmp_path, monkeypatch):
    from mmtok.budgets.pricing import batch_workers

    monkeypatch.setattr(batch_workers, "CHUNK_REQUESTS", 2)  # several chunks in flight
    rows = [json.loads(line) for line in files["openai"].read_text().splitlines()]
    path = tmp_path / "many.jsonl"
    lines = [json.dumps({**row, "custom_id": f"{row['custom_id']}-{i}"}) for i in range(3) for row in rows]
    lines[5] = "{broken"
    lines.append(json.dumps({**rows[0], "custom_id": "photo-1-0"}))  # a repeated id
    path.write_text("\n".join(lines) + "\n")
    alone, pooled = price_batch(path, workers=1), price_batch(path, workers=2)
    assert pooled.lines == alone.lines and pooled.errors == alone.errors and len(alone.lines) == 11
    assert pooled.totals == alone.totals and pooled.requests == alone.requests == 13
    assert [e.split(":")[0] for e in pooled.errors] == ["line 6", "line 13 (photo-1-0)"]


def test_options_for_single_requests_are_said_not_to_apply_to_a_batch():
    from mmtok.samples import batches_dir

    result = CliRunner().invoke(app, ["price", str(batches_dir() / "openai.jsonl"), "--output-tokens", "5", "--batch"],
                                env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--output-tokens, --batch/--tier not applied" in result.stderr


def test_a_line_for_an_endpoint_mmtok_does_not_price_is_named_and_the_rest_priced(tmp_path):
    """OpenAI's Batch API also takes embeddings, completions, moderations, images and videos: such a line is read and
    named as not priced (exit 1), never left out in silence or priced as a chat body."""
    chat = {"custom_id": "chat-1", "method": "POST", "url": "/v1/chat/completions", "body": HI_BODY}
    embed = {"custom_id": "embed-1", "method": "POST", "url": "/v1/embeddings",
             "body": {"model": "text-embedding-3-small", "input": "hello world"}}  # fmt: skip
    path = write_jsonl(tmp_path / "mixed-endpoints.jsonl", [embed, chat])
    quote = price_batch(path)
    assert quote.requests == 2 and [line.custom_id for line in quote.lines] == ["chat-1"] and not quote.ok
    assert quote.errors == ["line 1 (embed-1) on text-embedding-3-small: /v1/embeddings is a batch endpoint whose "
                            "bodies mmtok does not price (it reads /v1/chat/completions, /v1/responses)"]  # fmt: skip
    result = CliRunner().invoke(app, ["price", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "/v1/embeddings is a batch endpoint" in result.stderr
    assert "2 request(s), 1 not priced" in " ".join(result.stdout.split())


def test_a_line_over_the_read_limit_is_read_past_in_chunks_and_named():
    """A line longer than mmtok reads (64 MiB; a smaller limit here) is never held whole: it comes as the problem
    to name, and the lines after it are read."""
    import io

    from mmtok.request.batch import jsonl_lines

    data = b'{"custom_id": "a"}\n' + b"x" * 5000 + b'\n\n{"custom_id": "c"}\n'
    found = list(jsonl_lines(io.BytesIO(data), max_line=1000))
    assert found == [  # numbered as the file's lines are: the blank line 3 is passed over
        (1, b'{"custom_id": "a"}\n'),
        (2, "5,001 bytes: longer than the 1,000 bytes mmtok reads in a line"),
        (4, b'{"custom_id": "c"}\n'),
    ]


def test_pricing_a_json_document_batch_on_a_terminal_counts_its_requests_as_they_are_read(files, monkeypatch):
    """An Anthropic batches.create body is counted only by reading it: the bar counts the requests priced so far."""
    import io
    import re

    from rich.console import Console

    terminal = io.StringIO()
    monkeypatch.setattr("mmtok.cli.common.stderr_is_terminal", lambda: True)
    monkeypatch.setattr("mmtok.cli.common.err_console", lambda: Console(file=terminal, force_terminal=True, width=120))
    result = CliRunner().invoke(app, ["price", str(files["anthropic"])], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    assert "pricing anthropic.json" in shown and "3/?" in shown


def test_pricing_a_batch_on_a_terminal_shows_a_bar_that_ends_at_the_request_count(tmp_path, monkeypatch):
    import io
    import re

    from rich.console import Console

    chat = {"method": "POST", "url": "/v1/chat/completions", "body": HI_BODY}
    path = write_jsonl(tmp_path / "sixty.jsonl", [{"custom_id": f"r{n}", **chat} for n in range(60)])
    terminal = io.StringIO()
    monkeypatch.setattr("mmtok.cli.common.stderr_is_terminal", lambda: True)
    monkeypatch.setattr("mmtok.cli.common.err_console", lambda: Console(file=terminal, force_terminal=True, width=120))
    result = CliRunner().invoke(app, ["price", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    assert "pricing sixty.jsonl" in shown and "60/60" in shown
