"""A batch's results: each output line's bill paired with its request by custom_id, fitted by calibrate exactly as a
ledger's calls (the same protections), and stored as ledger rows that the report counts.

The results are made as a provider makes them: each request of the input, sent to the stand-in provider on
127.0.0.1 (which bills images by rules that differ from mmtok's documented ones: gpt-4o tiles at 100 + 190, Claude
capped at 1,200 tokens, Gemini 2.5 Pro at a flat 258), its answer written in the provider's batch output format
(OpenAI ``{"id", "custom_id", "response": {"status_code", "body"}}``, Anthropic ``{"custom_id", "result"}``, Gemini
``{"key", "response"}``), in another order than the requests'."""

from __future__ import annotations

import json
import random
import tomllib

import httpx
import pytest
from typer.testing import CliRunner

from mmtok.budgets.calibrate import calibrate
from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.ledger.batch_results import Pairing, batch_records
from mmtok.cli.main import app
from tests.batch_sdk import write_jsonl
from tests.sdk_bodies import anthropic_messages, as_json, b64, gemini_generate, openai_chat
from tests.upstream import Upstream, data_url, make_app, photo, serve

SIZES = [(512, 512), (800, 600), (1024, 1024), (1600, 900), (640, 1280), (2000, 1000), (300, 200), (1300, 700)]
PROMPT = "Caption this photo."


def openai_input(tmp_path):
    rows = []
    for i, (w, h) in enumerate(SIZES):
        content = [{"type": "text", "text": PROMPT},
                   {"type": "image_url", "image_url": {"url": data_url(w, h), "detail": "high"}}]  # fmt: skip
        body = as_json(openai_chat(model="gpt-4o", max_tokens=40, messages=[{"role": "user", "content": content}]))
        rows.append({"custom_id": f"img-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    for i in range(3):
        body = as_json(openai_chat(model="gpt-4o", max_tokens=40, messages=[{"role": "user", "content": f"Hi {i}"}]))
        rows.append({"custom_id": f"text-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return write_jsonl(tmp_path / "in.jsonl", rows)


def run_openai(upstream: str, batch_input, out, extra=()):
    """OpenAI's batch output: each request answered by the stand-in, in a shuffled order."""
    rows = []
    for line in batch_input.read_text().splitlines():
        request = json.loads(line)
        answer = httpx.post(upstream + request["url"], json=request["body"], timeout=60)
        rows.append({"id": f"batch_req_{request['custom_id']}", "custom_id": request["custom_id"],
                     "response": {"status_code": answer.status_code, "request_id": "req_1", "body": answer.json()},
                     "error": None})  # fmt: skip
    random.Random(0).shuffle(rows)
    return write_jsonl(out, [*rows, *extra])


@pytest.fixture(scope="module")
def upstream():
    with serve(make_app(Upstream())) as url:
        yield url


@pytest.fixture
def openai_pair(tmp_path, upstream):
    batch_input = openai_input(tmp_path)
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    failed = {"id": "batch_req_x", "custom_id": "text-2", "error": None,
              "response": {"status_code": 500, "request_id": "r", "body": error}}  # fmt: skip
    answered = run_openai(upstream, batch_input, tmp_path / "o.jsonl")
    rows = [json.loads(line) for line in answered.read_text().splitlines()]
    rows = [r for r in rows if r["custom_id"] != "text-2"] + [failed, {**rows[0], "custom_id": "nobody"}]
    return batch_input, write_jsonl(tmp_path / "out.jsonl", rows)


def test_openai_results_pair_by_custom_id_whatever_their_order(openai_pair):
    batch_input, output = openai_pair
    pairing = Pairing()
    rows = list(batch_records(output, batch_input, pairing=pairing))
    assert [r.model for r in rows] == ["gpt-4o"] * 11 and pairing.rows == 11 and pairing.unmatched == ["nobody"]
    billed = {r.parts[0].get("w"): r for r in rows if r.outcome == "ok" and r.parts[0]["kind"] == "text"}
    assert all(r.billed_input and r.predicted_input and r.predicted_cost and r.billed_cost for r in billed.values())
    failed = [r for r in rows if r.outcome != "ok"]
    assert len(failed) == 1 and failed[0].status == 500 and "server had an error" in failed[0].message
    assert all(r.settings.get("batch") and r.tags == {"batch": "in.jsonl"} for r in rows)


def test_calibrate_fits_batch_results_as_it_fits_a_ledger(openai_pair, tmp_path):
    batch_input, output = openai_pair
    fitted = calibrate(batch_records(output, batch_input)).models[0]
    assert fitted.model == "gpt-4o" and not fitted.kept
    assert dict((k, b) for k, _, b in fitted.changed) == {"base_tokens": 100, "tile_tokens": 190}
    sheet = tmp_path / "batch.toml"
    args = ["calibrate", str(output), "--batch-input", str(batch_input), "--out", str(sheet)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    family = tomllib.loads(sheet.read_text())["family"][0]
    assert family["image"]["base_tokens"] == 100 and "batch results of" in family["source"]
    assert "1 result(s) without a request" in result.stderr


def test_calibrate_from_four_claude_results_keeps_the_documented_rule(tmp_path, upstream):
    """The same protections as a ledger: four image calls and no text-only call are too few."""
    rows, results = [], []
    for i, (w, h) in enumerate(SIZES[:4]):
        source = {"type": "base64", "media_type": "image/jpeg", "data": b64(photo(w, h))}
        content = [{"type": "image", "source": source}, {"type": "text", "text": PROMPT}]
        messages = [{"role": "user", "content": content}]
        params = as_json(anthropic_messages(model="claude-sonnet-4-5", max_tokens=40, messages=messages))
        rows.append({"custom_id": f"c{i}", "params": params})
        message = httpx.post(upstream + "/v1/messages", json=params, timeout=60).json()
        results.append({"custom_id": f"c{i}", "result": {"type": "succeeded", "message": message}})
    (tmp_path / "claude.json").write_text(json.dumps({"requests": rows}))
    output = write_jsonl(tmp_path / "claude-results.jsonl", results[::-1])
    result = CliRunner().invoke(app, ["calibrate", str(output), "--batch-input", str(tmp_path / "claude.json"),
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)["models"][0]
    assert model["model"] == "claude-sonnet-4-5" and model["kept_documented"] and model["changed"] == []
    assert model["checks"]["calls_needed"] > 4 and model["send_sizes"]


def gemini_pair(tmp_path, upstream):
    from google.genai import types

    rows, results = [], []
    for i, (w, h) in enumerate(SIZES[:3]):
        parts = [types.Part(text=PROMPT), types.Part.from_bytes(data=photo(w, h), mime_type="image/jpeg")]
        _, body = gemini_generate("gemini-2.5-pro", [types.Content(role="user", parts=parts)])
        rows.append({"key": f"g{i}", "request": as_json(body)})
        answer = httpx.post(upstream + "/v1beta/models/gemini-2.5-pro:generateContent", json=as_json(body), timeout=60)
        results.append({"key": f"g{i}", "response": answer.json()})
    results.append({"key": "g9", "error": {"code": 3, "message": "bad"}})
    return write_jsonl(tmp_path / "g-in.jsonl", rows), write_jsonl(tmp_path / "g-out.jsonl", results)


def test_ledger_import_stores_batch_rows_once_and_the_report_counts_them(tmp_path, upstream):
    batch_input, output = gemini_pair(tmp_path, upstream)
    ledger = tmp_path / "calls.sqlite"
    args = ["ledger", "import", str(output), "--batch-input", str(batch_input), "--ledger", str(ledger)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "3 row(s)" in first.stdout and "1 result(s)" in first.stderr
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rows = list(open_ledger(ledger, read_only=True).records())
    assert len(rows) == 3 and {r.model for r in rows} == {"gemini-2.5-pro"}
    assert all(r.billed["input_by_modality"]["image"] == 258 and r.instance == "batch-import" for r in rows)
    report = CliRunner().invoke(app, ["ledger", str(ledger), "--json"])
    assert report.exit_code == 0, report.output
    summary = json.loads(report.stdout)
    assert summary["calls"] == 3 and float(summary["spend_usd"]) > 0
    days = {r.day for r in rows}  # the budgets count the imported spend as the proxy's own calls
    assert sum(open_ledger(ledger, read_only=True).spend_on(day) for day in days) == sum(r.billed_cost for r in rows)


def test_ledger_import_needs_its_three_arguments_and_a_report_takes_none_of_them(tmp_path):
    wide = {"COLUMNS": "200"}
    missing = CliRunner().invoke(app, ["ledger", "import", str(tmp_path / "o.jsonl")], env=wide)
    assert missing.exit_code == 2 and "needs OUTPUT, --batch-input and --ledger" in missing.output
    stray = CliRunner().invoke(app, ["ledger", str(tmp_path / "l.sqlite"), "--batch-input", "x.jsonl"], env=wide)
    assert stray.exit_code == 2 and "goes with" in stray.output


def test_unreadable_result_lines_are_named_and_the_rest_imported(tmp_path, upstream):
    batch_input, output = gemini_pair(tmp_path, upstream)
    output.write_text(output.read_text() + "{oops\n" + json.dumps({"what": 1}) + "\n")
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(app, ["ledger", "import", str(output), "--batch-input", str(batch_input), "--ledger",
                                      str(ledger)])  # fmt: skip
    assert result.exit_code == 1
    assert "g-out.jsonl line 5: not valid JSON" in result.stderr and "line 6: not a result" in result.stderr
    assert len(list(open_ledger(ledger, read_only=True).records())) == 3


def test_gemini_inline_job_responses_pair_by_order(tmp_path, upstream):
    from tests.batch_sdk import gemini_inline_body

    (tmp_path / "inline.json").write_bytes(gemini_inline_body("gemini-2.5-pro"))
    usage = {"promptTokenCount": 300, "candidatesTokenCount": 5, "totalTokenCount": 305}
    response = {"candidates": [], "usageMetadata": usage, "modelVersion": "gemini-2.5-pro"}
    job = {"name": "batches/1", "dest": {"inlinedResponses": [{"response": response} for _ in range(3)]}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    rows = list(batch_records(tmp_path / "job.json", tmp_path / "inline.json", model="gemini-2.5-pro"))
    assert [r.billed_input for r in rows] == [300, 300, 300] and all(r.outcome == "ok" for r in rows)
