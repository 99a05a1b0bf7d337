"""`mmtok shrink` through the CLI runner: outputs, JSON lines, exit codes and refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import PIL.Image
import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()
FAST = ["--keep", "ssim>=0.9"]  # no OCR


def _photo(path, width=1200, height=800, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    base = np.stack([np.sin(6 * x + seed), np.cos(5 * y), np.sin(4 * (x + y))], axis=-1) * 80 + 128
    PIL.Image.fromarray(np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture
def folder(tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    _photo(src / "a.png")
    _photo(src / "sub" / "a.png", seed=1)  # the same name in a subfolder: its own output
    (src / "notes.txt").write_text("not media\n")
    return src


def _rows(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_json_one_object_per_input_and_model(folder, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["shrink", str(folder), "-m", "gpt-4o", "-m", "claude-opus-4-7", "--out", str(out), "--json", *FAST]
    )
    rows = [r for r in _rows(result) if "status" in r]
    assert len(rows) == 4  # 2 images x 2 models
    assert {(r["input"].split("/in/")[1], r["model"]) for r in rows} == {
        (f, m) for f in ("a.png", "sub/a.png") for m in ("gpt-4o", "claude-opus-4-7")
    }
    outputs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert outputs == ["a.claude-opus-4-7.png", "a.gpt-4o.png", "sub/a.claude-opus-4-7.png", "sub/a.gpt-4o.png"]
    assert not list(out.rglob(".*"))  # written through temporary files and renames: none left behind
    for r in rows:
        assert r["tokens_after"] < r["tokens_before"] and float(r["cost_after"]) < float(r["cost_before"])
        assert r["status"] == "shrunk" and r["measures"]["ssim"] >= 0.9
    skipped = [r for r in _rows(result) if "skipped" in r]
    assert len(skipped) == 1 and "text is not shrunk" in skipped[0]["skipped"]
    assert result.exit_code == 1  # the text file got no output: one input failed
    assert "Traceback" not in result.output


def test_table_for_people_and_exit_0(tmp_path):
    source = _photo(tmp_path / "p.png")
    result = runner.invoke(app, ["shrink", str(source), "-m", "claude-opus-4-7", "--out", str(tmp_path / "o"), *FAST])
    assert result.exit_code == 0, result.output
    assert "claude-opus-4-7" in result.stdout and "->" in result.stdout and "bars: ssim>=0.9" in result.stdout


@pytest.mark.parametrize(
    ("keep", "says"),
    [
        ("ocr>0.98", "write ocr>=0.98"),
        ("bleu>=0.5", "unknown metric 'bleu'"),
        ("ssim>=2", "between 0 and 1"),
        ("ssim", "quoted in the shell"),  # what an unquoted ssim>=0.95 leaves after the shell's redirection
    ],
)
def test_bad_keep_is_a_usage_error(keep, says, tmp_path):
    source = _photo(tmp_path / "p.png", 200, 100)
    result = runner.invoke(app, ["shrink", str(source), "-m", "gpt-4o", "--out", str(tmp_path / "o"), "--keep", keep])
    assert result.exit_code == 2 and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_out_inside_an_input_folder_is_refused(folder):
    before = sorted(folder.rglob("*"))
    for out in (folder, folder / "sub" / "shrunk"):
        result = runner.invoke(app, ["shrink", str(folder), "-m", "gpt-4o", "--out", str(out), *FAST])
        assert result.exit_code == 2 and "inside the input folder" in result.stderr
    assert sorted(folder.rglob("*")) == before  # nothing written, nothing overwritten


def test_out_that_is_a_file_is_refused(tmp_path):
    source = _photo(tmp_path / "p.png", 200, 100)
    result = runner.invoke(app, ["shrink", str(source), "-m", "gpt-4o", "--out", str(source)])
    assert result.exit_code == 2 and "is a file" in result.stderr


def test_unknown_model_is_one_line_and_the_others_go_on(tmp_path):
    source = _photo(tmp_path / "p.png", 600, 400)
    out = tmp_path / "o"
    result = runner.invoke(app, ["shrink", str(source), "-m", "gpt-4o", "-m", "gpt-4oo", "--out", str(out), *FAST])
    assert result.exit_code == 1
    assert "gpt-4oo" in result.stderr and "closest" in result.stderr
    assert (out / "p.gpt-4o.png").exists()
    only_bad = runner.invoke(app, ["shrink", str(source), "-m", "nope-1", "--out", str(out)])
    assert only_bad.exit_code == 2


def test_corrupt_file_fails_alone(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _photo(src / "good.png", 600, 400)
    (src / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 30)
    result = runner.invoke(
        app, ["shrink", str(src), "-m", "claude-opus-4-7", "--out", str(tmp_path / "o"), "--json", *FAST]
    )
    assert result.exit_code == 1
    errors = [r for r in _rows(result) if "error" in r]
    assert len(errors) == 1 and "bad.jpg" in errors[0]["error"]
    assert [r["status"] for r in _rows(result) if "status" in r] == ["shrunk"]


def test_no_rendition_meets_the_bars_keeps_the_original_and_exits_0(tmp_path):
    source = _photo(tmp_path / "p.png", 900, 600)
    out = tmp_path / "o"
    result = runner.invoke(
        app, ["shrink", str(source), "-m", "claude-sonnet-4-5", "--out", str(out), "--json", "--keep", "ssim>=0.9999"]
    )
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["status"] == "kept" and "no cheaper rendition meets ssim>=0.9999" in row["action"]
    assert (out / "p.png").read_bytes() == source.read_bytes() and row["output"] == str(out / "p.png")


def test_model_without_the_modality_is_skipped_with_a_line(tmp_path):
    wav = tmp_path / "s.wav"
    shutil.copy(__import__("mmtok").sample_path("speech.wav"), wav)
    result = runner.invoke(app, ["shrink", str(wav), "-m", "claude-opus-4-7", "--out", str(tmp_path / "o")])
    assert "skipped:" in result.stderr and "claude-opus-4-7 does not take audio" in result.stderr
    assert result.exit_code == 1  # no model took it: nothing was made for this input


def test_lossless_keeps_tokens(tmp_path):
    source = _photo(tmp_path / "big.png", 3000, 2000)
    result = runner.invoke(
        app, ["shrink", str(source), "-m", "gpt-4o", "--out", str(tmp_path / "o"), "--lossless", "--json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["status"] == "lossless" and row["tokens_after"] == row["tokens_before"]
    assert row["bytes_after"] < row["bytes_before"] and "1152x768" in row["action"]


def test_an_image_under_ssims_window_is_kept_or_sent_as_it_is_never_an_error(tmp_path):
    """An 8 px image (SSIM needs 11 px a side) was an error; a rendition with other pixels cannot be measured and
    fails the bar (the original is kept), the same pixels at a cheaper detail are 1.0 at any size."""
    tiny, fine = _photo(tmp_path / "tiny.png", 8, 8), _photo(tmp_path / "fine.png", 200, 100)
    out = tmp_path / "o"
    result = runner.invoke(
        app, ["shrink", str(tiny), str(fine), "-m", "gpt-4o", "-m", "claude-opus-4-7", "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = {(r["input"].rsplit("/", 1)[1], r["model"]): r for r in _rows(result)}
    assert rows[("tiny.png", "claude-opus-4-7")]["status"] == "kept"
    openai = rows[("tiny.png", "gpt-4o")]
    assert openai["status"] == "shrunk" and openai["detail"] == "low" and openai["measures"]["ssim"] == 1.0
    assert "error" not in result.output and any(out.glob("fine.*"))


def test_a_format_the_provider_does_not_take_is_converted_for_it_alone(tmp_path):
    webp = tmp_path / "p.webp"
    PIL.Image.open(_photo(tmp_path / "p.png", 900, 600)).save(webp, quality=90)
    out = tmp_path / "o"
    args = [
        "shrink",
        str(webp),
        "-m",
        "grok-4.20",
        "-m",
        "claude-sonnet-4-5",
        "--out",
        str(out),
        "--keep",
        "ssim>=0.9999",
    ]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "1 of 2 converted to a file format the provider takes" in table.stderr
    rows = {r["model"]: r for r in _rows(runner.invoke(app, [*args, "--json"]))}
    assert rows["grok-4.20"]["status"] == "converted" and rows["grok-4.20"]["output"].endswith("p.grok-4.20.png")
    assert rows["claude-sonnet-4-5"]["status"] == "kept"  # Anthropic takes WebP: the original, unchanged
    assert (out / "p.webp").read_bytes() == webp.read_bytes()


def _animated_gif(path, width=640, height=400):
    frames = [PIL.Image.open(_photo(path.with_suffix(f".{i}.png"), width, height, seed=i)) for i in range(3)]
    frames = [f.convert("P") for f in frames]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100)
    for i in range(3):
        path.with_suffix(f".{i}.png").unlink()
    return path


def test_the_table_fits_80_columns_with_a_long_path_several_models_and_a_warning(tmp_path):
    folder = tmp_path / "screenshots-from-the-quarterly-review" / "week-forty-two" / "dashboards"
    folder.mkdir(parents=True)
    _photo(folder / "dashboard-overview-q3-final.png", 1200, 800)
    _animated_gif(folder / "spinner.gif")
    models = ["gpt-4o", "claude-opus-4-7", "gemini-3-flash-preview"]
    paths = [str(folder / "dashboard-overview-q3-final.png"), str(folder / "spinner.gif")]  # named by their path
    args = ["shrink", *paths, *[a for m in models for a in ("-m", m)], "--out", str(tmp_path / "o"), *FAST]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.stderr.count("only the first frame is kept") == 1  # said once for the input, not per model
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    table = lines[: next(i for i, line in enumerate(lines) if "total" in line) + 1]
    assert sum("dashboard-overview-q3-final.png" in line for line in table) == 1  # one row, the name whole
    for model in models:  # each model a sub-row under each input, its name whole
        assert sum(line.split("│")[0].strip() == model for line in table) == 2
    assert any(line.startswith("total: ") and "USD" in line and "saved" in line for line in lines)
    folded = [line for line in lines if line.startswith("  gpt-4o: ")]  # what was done, under the table
    assert len(folded) == 2 and ("USD" in table[0] or all("USD" in line for line in folded))  # a column, or said


def test_shrink_names_its_own_pixel_limit(tmp_path):
    source = _photo(tmp_path / "p.png", 600, 400)
    out = tmp_path / "o"
    refused = runner.invoke(app, ["shrink", str(source), "-m", "gpt-4o", "--out", str(out), "--max-pixels", "1000"])
    assert refused.exit_code == 1 and "above the limit of 1,000" in refused.stderr
    assert "--max-pixels" in refused.stderr and "Traceback" not in refused.output
    allowed = runner.invoke(app, ["shrink", str(source), "-m", "gpt-4o", "--out", str(out), "--max-pixels", "240000"])
    assert allowed.exit_code == 0, allowed.output


def test_json_says_which_model_a_shared_output_was_written_for(tmp_path):
    source = _photo(tmp_path / "p.png", 1600, 1200)
    out = tmp_path / "o"
    args = ["shrink", str(source), "-m", "claude-sonnet-4-5", "-m", "claude-haiku-4-5", "--out", str(out), "--json"]
    sonnet, haiku = _rows(runner.invoke(app, [*args, *FAST]))
    assert sonnet["same_file_as"] is None and haiku["same_file_as"] == "claude-sonnet-4-5"
    assert sonnet["output"] == haiku["output"] and [p.name for p in out.iterdir()] == ["p.claude-sonnet-4-5.png"]
    table = runner.invoke(app, ["shrink", str(source), "-m", "claude-sonnet-4-5", "-m", "claude-haiku-4-5",
                                "--out", str(tmp_path / "o2"), *FAST], env={"COLUMNS": "80"})  # fmt: skip
    assert "the same file as claude-sonnet-4-5's, p.claude-sonnet-4-5.png" in " ".join(table.stdout.split())


def test_a_request_body_is_shrunk_part_by_part_and_written_back_in_its_own_shape(tmp_path, samples):
    from mmtok.request import parse_body
    from tests.sdk_bodies import data_url, image_bytes, openai_chat

    photo = image_bytes(samples / "astronaut.png", (2048, 2048), "PNG")
    image = {"type": "image_url", "image_url": {"url": data_url(photo, "image/png"), "detail": "high"}}
    body = openai_chat(
        model="gpt-4o", messages=[{"role": "user", "content": [{"type": "text", "text": "Who?"}, image]}]
    )
    path = tmp_path / "chat.json"
    path.write_bytes(body)
    out = tmp_path / "o"
    result = runner.invoke(app, ["shrink", str(path), "-m", "gpt-4o", "--out", str(out), "--json", *FAST])
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["kind"] == "request" and row["status"] == "shrunk" and row["tokens_after"] < row["tokens_before"]
    (part,) = row["parts"]
    assert part["where"] == "messages[0].content[1]" and part["measures"]["ssim"] >= 0.9
    new = parse_body((out / "chat.gpt-4o.json").read_bytes())
    assert new.api == "openai-chat" and [p.kind for p in new.parts] == ["text", "image"]
    assert new.parts[1].detail == part["detail"]


def test_a_body_shrunk_for_another_providers_model_warns_and_saves_on_its_input(tmp_path):
    out = tmp_path / "o"
    body = "mmtok/samples/requests/openai-chat.json"
    result = runner.invoke(app, ["shrink", body, "-m", "claude-opus-4-7", "--out", str(out), "--json", *FAST])
    assert result.exit_code == 0, result.output
    assert "an openai body (model gpt-4o) shrunk for claude-opus-4-7, an anthropic model" in result.stderr
    (row,) = _rows(result)
    before, after = row["tokens_before"], row["tokens_after"]
    assert after < before and row["saving"] == pytest.approx(1 - float(row["cost_after"]) / float(row["cost_before"]))


def test_a_url_is_read_as_price_reads_it_and_shrunk_under_its_own_name(tmp_path):
    from tests.loopback import serving

    _photo(tmp_path / "shot.png")
    with serving(tmp_path) as (base, seen):
        out = tmp_path / "o"
        result = runner.invoke(app, ["shrink", f"{base}/shot.png", "-m", "gpt-4o", "--out", str(out), "--json", *FAST])
        missing = runner.invoke(app, ["shrink", f"{base}/none.png", f"{base}/shot.png", "-m", "gpt-4o",
                                      "--out", str(tmp_path / "o2"), *FAST])  # fmt: skip
        redirected = runner.invoke(app, ["shrink", f"{base}/away/127.0.0.2:1/x.png", "-m", "gpt-4o",
                                         "--out", str(tmp_path / "o3"), *FAST])  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = _rows(result)
    assert row["input"] == f"{base}/shot.png" and row["status"] == "shrunk"
    assert [p.name for p in out.iterdir()] == ["shot.gpt-4o.png"]
    assert all("cookie" not in request for request in seen)
    assert missing.exit_code == 1 and "none.png: HTTP 404" in missing.stderr  # the batch goes on
    assert "shot.png" in missing.stdout
    assert redirected.exit_code == 1 and "loopback, private or link-local address" in redirected.stderr


def test_a_body_without_model_is_shrunk_for_its_own_and_a_file_for_the_settings_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no settings file: gpt-4o
    for name in ("MMTOK_CONFIG", "MMTOK_MODEL"):
        monkeypatch.delenv(name, raising=False)
    body = "mmtok/samples/requests/anthropic-messages.json"
    photo = _photo(tmp_path / "p.png")
    out = tmp_path / "o"
    result = runner.invoke(app, ["shrink", body, str(photo), "--out", str(out), "--json", *FAST])
    assert result.exit_code == 0, result.output
    rows = _rows(result)
    assert [(r["kind"], r["model"]) for r in rows] == [("request", "claude-opus-4-7"), ("image", "gpt-4o")]
    assert (out / "anthropic-messages.claude-opus-4-7.json").is_file()
    monkeypatch.setenv("MMTOK_MODEL", "claude-haiku-4-5")
    again = runner.invoke(app, ["shrink", str(photo), "--out", str(tmp_path / "o2"), "--json", *FAST])
    assert [r["model"] for r in _rows(again)] == ["claude-haiku-4-5"]


def test_a_gemini_3_row_says_its_measures_are_at_an_estimated_view(tmp_path):
    """Google publishes no internal image size for Gemini 3: the view measured at is mmtok's estimate, said in the
    row (not only in the JSON's notes); a model whose size is published says nothing of the kind."""
    photo = _photo(tmp_path / "p.png", 900, 600)
    args = ["shrink", str(photo), "-m", "gemini-3-flash-preview", "-m", "gpt-4o", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, *FAST], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: " ".join(line.split()) for line in result.stdout.splitlines() if line.startswith("  ")}
    assert "at an estimated view" in rows["gemini-3-flash-preview"]
    assert "at an estimated view" not in rows["gpt-4o"]
