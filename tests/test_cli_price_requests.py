"""`mmtok price` on what users hold: API request bodies made by the SDKs, folders with text beside the media, URLs,
stdin, model names as people type them, and budget gates for CI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app
from tests.loopback import serving
from tests.sdk_bodies import anthropic_messages, b64, data_url, image_bytes, openai_chat

runner = CliRunner()
AT = ["--at", "2026-12-01"]


def _rows(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _errors(result):
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def chat_body(samples, tmp_path_factory):
    photo = image_bytes(samples / "chelsea.jpg", (1024, 1024))
    body = openai_chat(
        model="gpt-4o",
        max_tokens=300,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": data_url(photo, "image/jpeg"), "detail": "high"}}]}],
    )  # fmt: skip
    path = tmp_path_factory.mktemp("bodies") / "request.json"
    path.write_bytes(body)
    return path


def test_the_issue_reproduction_prices_the_image_not_the_base64(chat_body):
    result = runner.invoke(app, ["price", str(chat_body), "--json", *AT])
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["tokens"]["image"] == 765 and row["input_tokens"] == 765 + 6 + 7  # was 156,636 tokens, $0.39
    assert row["model"] == "gpt-4o" and float(row["total_cost"]) < 0.01 and row["complete"]
    framing = [ln for ln in row["lines"] if ln["item"] == "<message framing>"]
    assert framing and framing[0]["label"] == "estimate"


def test_a_body_is_compared_with_the_models_asked(chat_body):
    result = runner.invoke(app, ["price", str(chat_body), "-m", "claude-opus-4-7,gemini-3-flash-preview", "--json"])
    assert result.exit_code == 0, result.output
    rows = _rows(result)
    assert [r["model"] for r in rows] == ["gpt-4o", "claude-opus-4-7", "gemini-3-flash-preview"]
    assert [r["tokens"]["image"] for r in rows] == [765, 1369, 1120]


def test_the_table_shows_a_body_and_its_parts(chat_body):
    result = runner.invoke(app, ["price", str(chat_body), *AT], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "request.json" in result.stdout and "765" in result.stdout


def test_a_folder_prices_media_and_bodies_and_lists_the_text_files_it_skips(tmp_path, samples, chat_body):
    folder = tmp_path / "assets"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    (folder / "request.json").write_bytes(chat_body.read_bytes())
    (folder / "notes.md").write_text("# Notes\nSome words.\n")
    (folder / "build.py").write_text("print('hello')\n")
    result = runner.invoke(app, ["price", str(folder), "--json", "-m", "gpt-4o", *AT])
    assert result.exit_code == 0, result.output
    assert sorted(r["item"].rsplit("/", 1)[-1] for r in _rows(result)) == ["cat.jpg", "request.json"]
    assert "skipped 2 text file(s) found in folders" in result.stderr and "--text-files" in result.stderr
    with_text = runner.invoke(app, ["price", str(folder), "--json", "--text-files", *AT])
    assert len(_rows(with_text)) == 4


def test_json_that_is_no_request_is_said_so_once_and_priced_as_a_prompt(tmp_path):
    path = tmp_path / "package.json"
    path.write_text(json.dumps({"name": "app", "version": "1.0"}))
    result = runner.invoke(app, ["price", str(path), "--json", *AT])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("not a request body of a known API") == 1
    assert _rows(result)[0]["tokens"]["text"] > 0


def test_bad_bodies_are_one_line_each_and_the_batch_goes_on(tmp_path, chat_body):
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": "gpt-4o", "messages": [')
    lying = tmp_path / "lying.json"
    fake = b64(b"GIF89a not really")
    lying.write_text(json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{fake}"}}]}]}))  # fmt: skip
    result = runner.invoke(app, ["price", str(broken), str(lying), str(chat_body), "--json", *AT])
    assert result.exit_code == 1
    errors = _errors(result)
    assert errors[0].startswith(f"error: {broken}: not valid JSON (")
    assert any("messages[0].content[1]" in e and "left out of the total" in e for e in errors)
    assert len(errors) == 2 and "Traceback" not in result.output
    assert [r["tokens"].get("image") for r in _rows(result) if "error" not in r][-1] == 765


def test_a_body_on_stdin(chat_body):
    result = runner.invoke(app, ["price", "-", "--json", *AT], input=chat_body.read_bytes())
    assert result.exit_code == 0, result.output
    assert _rows(result)[0]["tokens"]["image"] == 765


def test_model_names_as_people_type_them(samples):
    photo = str(samples / "chelsea.jpg")
    result = runner.invoke(app, ["price", photo, "-m", "sonnet", "-m", "4o,gemini-pro", "--json", *AT])
    errors = _errors(result)
    assert len(errors) == 3 and result.exit_code == 2
    assert errors[0].startswith("error: unknown model 'sonnet'; closest: claude-sonnet-5-5, claude-sonnet-5,")
    assert errors[1].startswith("error: unknown model '4o'; closest: gpt-4o,")
    assert "closest: gemini-3.1-pro-preview" in errors[2]


def test_one_line_per_unknown_model_not_per_file(tmp_path, samples):
    for n in range(6):
        (tmp_path / f"{n}.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    result = runner.invoke(app, ["price", str(tmp_path), "-m", "gemini-pro", "-m", "gpt-4o", "--json", *AT])
    assert result.exit_code == 1
    assert len(_errors(result)) == 1 and len([r for r in _rows(result) if "error" not in r]) == 6


def test_budget_gates_fail_the_build_per_request(chat_body, samples):
    args = ["price", str(chat_body), str(samples / "chelsea.jpg"), "--json", *AT]
    assert runner.invoke(app, [*args, "--max-cost", "0.01"]).exit_code == 0
    over = runner.invoke(app, [*args, "--max-cost", "0.001", "--max-tokens", "500"])
    assert over.exit_code == 1
    errors = _errors(over)
    assert len(errors) == 1 and "request.json on gpt-4o: $0.00" in errors[0]
    assert "is over --max-cost $0.001" in errors[0] and "is over --max-tokens 500" in errors[0]
    bad = runner.invoke(app, [*args, "--max-cost", "cheap"])
    assert bad.exit_code == 2 and "--max-cost must be an amount in USD" in bad.stderr


def test_a_url_on_the_command_line_is_read_by_ranges(tmp_path, samples):
    (tmp_path / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    with serving(tmp_path) as (base, seen):
        result = runner.invoke(app, ["price", f"{base}/cat.jpg", "--json", *AT])
        offline = runner.invoke(app, ["price", f"{base}/cat.jpg", "--offline", "--json", *AT])
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["item"] == f"{base}/cat.jpg" and row["tokens"]["image"] == 255
    assert offline.exit_code == 1 and "not read (URLs are off: --offline)" in offline.stderr
    assert len(seen) == 1  # a 30 KB photo: its first read holds all of it


def test_a_body_url_to_a_private_address_needs_allow_private(tmp_path, samples):
    (tmp_path / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    with serving(tmp_path) as (base, seen):
        body = tmp_path / "body.json"
        content = [{"type": "text", "text": "Describe."},
                   {"type": "image", "source": {"type": "url", "url": f"{base}/cat.jpg"}}]  # fmt: skip
        messages = [{"role": "user", "content": content}]
        body.write_bytes(anthropic_messages(model="claude-opus-4-7", max_tokens=10, messages=messages))
        refused = runner.invoke(app, ["price", str(body), "--json", *AT])
        assert seen == []
        allowed = runner.invoke(app, ["price", str(body), "--allow-private", "--json", *AT])
    assert refused.exit_code == 1 and "loopback, private or link-local address" in refused.stderr
    assert allowed.exit_code == 0 and _rows(allowed)[0]["tokens"]["image"] > 0


def test_a_tall_page_warns_that_its_text_is_lost(tmp_path):
    import PIL.Image

    page = tmp_path / "page.png"
    PIL.Image.new("RGB", (1280, 8000), "white").save(page)
    result = runner.invoke(app, ["price", str(page), "-m", "gpt-4o", *AT])
    assert result.exit_code == 0
    assert "gpt-4o sees this 1280x8000 image at 328x2048, 0.26x: 16-px text becomes ~4.1 px" in result.stderr
    assert "mmtok shrink --slice -m gpt-4o" in result.stderr


def test_pages_price_what_would_be_sent_of_a_pdf():
    pdf = "tests/data/report.pdf"  # made by LibreOffice: two pages with a text layer
    whole = _rows(runner.invoke(app, ["price", pdf, "-m", "claude-opus-4-7", "--json", *AT]))[0]
    first = runner.invoke(app, ["price", pdf, "-m", "claude-opus-4-7", "--pages", "1", "--json", *AT])
    assert first.exit_code == 0 and "pages 1 of 2" in first.stderr
    assert 0 < _rows(first)[0]["input_tokens"] < whole["input_tokens"]
    past = runner.invoke(app, ["price", pdf, "--pages", "9", *AT])
    assert past.exit_code == 1 and _errors(past) == [f"error: {pdf}: pages '9': page 9 is past the last page (2)"]
    bad = runner.invoke(app, ["price", pdf, "--pages", "x", *AT])
    assert bad.exit_code == 2 and "--pages: pages 'x'" in bad.stderr


def test_a_body_with_a_byte_order_mark_is_still_a_body(chat_body, tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf\n  " + chat_body.read_bytes())
    rows = _rows(runner.invoke(app, ["price", str(path), "--json", *AT]))
    assert rows[0]["tokens"]["image"] == 765


def test_json_that_is_no_body_in_a_folder_is_skipped_not_an_error(tmp_path, chat_body):
    (tmp_path / "events.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    (tmp_path / "tsconfig.json").write_text('{\n  // comments\n  "strict": true\n}\n')
    (tmp_path / "request.json").write_bytes(chat_body.read_bytes())
    result = runner.invoke(app, ["price", str(tmp_path), "--json", *AT])
    assert result.exit_code == 0, result.output
    assert [r["item"].rsplit("/", 1)[-1] for r in _rows(result)] == ["request.json"]
    assert "skipped 2 text file(s)" in result.stderr


def test_a_body_reads_files_beside_it_but_never_above_it(tmp_path, samples):
    (tmp_path / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    (tmp_path / "body.json").write_text(json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "cat.jpg"}},
        {"type": "image_url", "image_url": {"url": "../secret.png"}}]}]}))  # fmt: skip
    result = runner.invoke(app, ["price", str(tmp_path / "body.json"), "--json", *AT])
    assert result.exit_code == 1
    assert _rows(result)[0]["tokens"]["image"] == 255
    assert "a body may name files only within its own folder" in result.stderr


def test_a_url_is_shown_without_credentials_or_its_query(tmp_path, samples):
    (tmp_path / "cat.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    with serving(tmp_path) as (base, _):
        signed = f"{base}/cat.jpg?X-Amz-Signature=SECRET"
        result = runner.invoke(app, ["price", signed, "--json", *AT])
        with_user = runner.invoke(app, ["price", base.replace("http://", "http://alice:hunter2@") + "/cat.jpg"])
    assert result.exit_code == 0 and "SECRET" not in result.output and _rows(result)[0]["item"].endswith("cat.jpg?…")
    assert with_user.exit_code == 1 and "hunter2" not in with_user.output
    assert "mmtok sends no credentials" in with_user.stderr


def test_tool_definitions_are_an_estimate(chat_body):
    body = json.loads(chat_body.read_bytes()) | {"tools": [{"type": "function", "function": {"name": "f",
                                                 "parameters": {"type": "object"}}}]}  # fmt: skip
    (row,) = _rows(runner.invoke(app, ["price", "-", "--json", *AT], input=json.dumps(body)))
    (tools,) = [ln for ln in row["lines"] if ln["item"] == "tools"]
    assert tools["label"] == "estimate" and "renders them its own way" in tools["working"]


def test_a_body_served_at_a_url_is_priced_as_a_body(tmp_path, chat_body):
    (tmp_path / "request.json").write_bytes(chat_body.read_bytes())
    with serving(tmp_path) as (base, _):
        result = runner.invoke(app, ["price", f"{base}/request.json", "--json", *AT])
    (row,) = _rows(result)
    assert row["tokens"]["image"] == 765 and row["item"] == f"{base}/request.json"


def test_one_model_named_twice_is_priced_once_and_open_ranges_of_pages_are_cheap(samples):
    result = runner.invoke(app, ["price", str(samples / "chelsea.jpg"), "-m", "openai/gpt-4o,GPT-4O", "--json", *AT])
    assert len(_rows(result)) == 1
    pdf = runner.invoke(app, ["price", "tests/data/report.pdf", "--pages", "2-", "-m", "gpt-4o", "--json", *AT])
    assert pdf.exit_code == 0 and "pages 2 of 2" in pdf.stderr
