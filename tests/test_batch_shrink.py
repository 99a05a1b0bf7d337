"""mmtok shrink on a batch file: a new batch file of the same format, requests in the same order with the same ids,
media at their cheapest rendition; a run killed half way goes on where it stopped and writes no request twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtok.budgets.pricing.batch import price_batch
from mmtok.budgets.shrink.batch import shrink_batch
from mmtok.cli.main import app
from mmtok.samples import sample_path
from tests.batch_sdk import anthropic_batch_body, gemini_batch_file, openai_bodies, write_jsonl
from tests.sdk_bodies import data_url, image_bytes, openai_chat

ROCKET = sample_path("rocket_rotated.jpg")
BARS = ["ssim>=0.9"]  # one bar: the tests pin the batch, not the measures


def photo_requests(count: int) -> list[dict]:
    """OpenAI Batch input lines, each a Chat Completions body the openai SDK sent with a photo of its own size."""
    rows = []
    for i in range(count):
        photo = image_bytes(ROCKET, (900 + 37 * i, 700 + 23 * i))
        image = {"type": "image_url", "image_url": {"url": data_url(photo, "image/jpeg"), "detail": "high"}}
        content = [{"type": "text", "text": f"Caption photo {i}."}, image]
        body = json.loads(openai_chat(model="gpt-4o", max_tokens=50, messages=[{"role": "user", "content": content}]))
        rows.append({"custom_id": f"photo-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return rows


def ids(path: Path) -> list[str]:
    return [json.loads(line)["custom_id"] for line in path.read_text().splitlines()]


def test_an_openai_batch_shrinks_to_the_same_format_ids_and_order(tmp_path):
    source = write_jsonl(tmp_path / "batch.jsonl", photo_requests(3))
    done = shrink_batch(source, "gpt-4o", out=tmp_path / "out", keep=BARS)
    assert done.complete and done.requests == 3 and done.shrunk >= 1 and not done.problems
    assert ids(Path(done.output)) == ["photo-0", "photo-1", "photo-2"]
    for before, after in zip(source.read_text().splitlines(), Path(done.output).read_text().splitlines(), strict=True):
        old, new = json.loads(before), json.loads(after)
        assert {k: v for k, v in old.items() if k != "body"} == {k: v for k, v in new.items() if k != "body"}
    input_cost = {p: sum(line.input_cost for line in price_batch(p).lines) for p in (source, done.output)}
    assert input_cost[done.output] == done.cost_after < done.cost_before == input_cost[source]
    assert 0 < done.saved < 1


def test_an_anthropic_batch_document_keeps_its_shape_and_copies_what_it_cannot_shrink(tmp_path):
    source = tmp_path / "claude.json"
    source.write_bytes(anthropic_batch_body())
    done = shrink_batch(source, out=tmp_path / "out", keep=BARS)
    written = json.loads(Path(done.output).read_text())
    assert list(written) == ["requests"] and [r["custom_id"] for r in written["requests"]] == [
        "photo-1", "pdf-1", "text-1"]  # fmt: skip
    assert written["requests"][2] == json.loads(source.read_text())["requests"][2]  # no media: as it stood
    assert done.requests == 3 and done.cost_after <= done.cost_before


def test_a_gemini_batch_needs_the_model_and_says_so_per_request(tmp_path):
    source = gemini_batch_file(tmp_path / "gemini.jsonl")
    done = shrink_batch(source, out=tmp_path / "out", keep=BARS)
    assert done.copied == 3 and all("give one with -m" in p for p in done.problems)
    assert Path(done.output).read_bytes() == source.read_bytes()


def test_a_bad_line_is_copied_named_and_the_rest_shrunk(tmp_path):
    rows = [json.dumps(r) for r in photo_requests(2)]
    source = tmp_path / "mixed.jsonl"
    source.write_text(f"{rows[0]}\n{{broken\n{rows[1]}\n")
    done = shrink_batch(source, "gpt-4o", out=tmp_path / "out", keep=BARS)
    assert Path(done.output).read_text().splitlines()[1] == "{broken"
    assert done.problems == ["line 2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"]


def test_a_finished_run_is_not_done_again_and_other_settings_are_refused(tmp_path):
    source = write_jsonl(tmp_path / "b.jsonl", photo_requests(1))
    first = shrink_batch(source, "gpt-4o", out=tmp_path / "out", keep=BARS)
    again = shrink_batch(source, "gpt-4o", out=tmp_path / "out", keep=BARS)
    assert again.to_dict() == first.to_dict()
    with pytest.raises(Exception, match="asked otherwise"):
        shrink_batch(source, "gpt-4.1-mini", out=tmp_path / "out", keep=BARS)


def test_a_killed_run_goes_on_where_it_stopped_and_writes_no_request_twice(tmp_path):
    """A real process, killed with SIGKILL once it has written some requests, then run again to the end."""
    rows = photo_requests(10)
    source = write_jsonl(tmp_path / "big.jsonl", rows)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "mmtok.cli.main", "shrink", str(source), "-m", "gpt-4o", "--out", str(out),
               "--keep", BARS[0]]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial, deadline = out / ".big.jsonl.partial", time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if partial.exists() and partial.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = partial.read_bytes().count(b"\n")
    assert 2 <= written < len(rows) and not (out / "big.jsonl").exists()
    with partial.open("ab") as f:
        f.write(b'{"custom_id": "torn')  # a request half written when the process died
    result = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["requests"] == 10 and summary["resumed_from"] >= 2 and summary["complete"]
    assert ids(out / "big.jsonl") == [r["custom_id"] for r in rows]  # each once, in order
    assert not partial.exists()


def test_cli_shrinks_a_batch_with_a_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # short relative paths: the summary names them whole, at any temp folder's depth
    write_jsonl(tmp_path / "pair.jsonl", photo_requests(2))
    result = CliRunner().invoke(app, ["shrink", "pair.jsonl", "-m", "gpt-4o", "--out", "o", "--keep", BARS[0]],
                                env={"COLUMNS": "80"})  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "2 request(s)" in text and "at batch rates" in text and "saved" in text
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert ids(tmp_path / "o" / "pair.jsonl") == ["photo-0", "photo-1"]


def test_cli_refuses_two_models_for_one_batch(tmp_path):
    source = write_jsonl(tmp_path / "one.jsonl", [{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                                                  "body": openai_bodies()[0][2]}])  # fmt: skip
    result = CliRunner().invoke(app, ["shrink", str(source), "-m", "gpt-4o", "-m", "gpt-4.1", "--out",
                                      str(tmp_path / "o")])  # fmt: skip
    assert result.exit_code == 1 and "one model (-m once)" in result.stderr
