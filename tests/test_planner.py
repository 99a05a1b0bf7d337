"""The budget planner: spec validation, a real NSGA-II search on measured cost and fidelity, the report, the
disk cache, infeasible budgets and unmet bars."""

from __future__ import annotations

import itertools
import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mmtok.budgets.planner import (
    MAX_BREAKPOINTS,
    MAX_IMAGE_SIZE_PX,
    PROVIDER_DETAIL,
    CalibrationEvaluator,
    applicable_setting,
    calibration_sets,
    grid,
    hypervolume,
    image_sizes,
    knob_applies,
    load_spec,
    pareto_rows,
    plan,
    reference_point,
    setting_key,
    user_photos,
    user_speech,
)
from mmtok.budgets.planner.report import objective_text, recommendations, write_report
from mmtok.cli.main import app
from mmtok.errors import ConfigError, PriceError
from mmtok.samples import samples_dir

SMALL = """
name = "small"
[request]
images = 2
audio_seconds = 0
text_tokens = 100
output_tokens = 50
budget_tokens = {budget}
[variables]
image_size = [32, 64, 128]
model = ["mmtok-semantic", "gemini-2.5-flash", "gpt-4o"]
[objectives]
minimize = ["cost", "fd"]
[bars]
fd = {bar}
[calibration]
photos = 8
fd_extractor = "clip-tiny"
[search]
population = 6
generations = 3
"""


def spec_file(tmp_path, body: str):
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setattr("mmtok.budgets.planner.evaluation.default_cache_dir", lambda: folder)
    return folder


def test_a_real_search_gives_a_front_a_knee_and_a_report(tmp_path, cache):
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))
    evaluator = CalibrationEvaluator(spec, cache)
    result = plan(spec, evaluator=evaluator)
    assert result.front and len(result.history) == 3
    assert all(h["hypervolume"] >= 0 for h in result.history)
    costs = [e["objectives"]["cost"] for e in result.front]
    assert costs == sorted(costs)
    fds = [e["objectives"]["fd"] for e in result.front]
    assert fds == sorted(fds, reverse=True)  # along a two-objective front, cheaper means worse fidelity
    assert result.cheapest_meeting_bars is not None and result.knee is not None
    files = write_report(result, tmp_path / "report")
    text = files["md"].read_text()
    assert "Recommended configurations" in text and "FD, not FID" in text and "front-cost-fd.png" in text
    assert files["csv"].read_text().count("\n") == len(result.front) + 1
    assert recommendations(result)[0][0].startswith("A: cheapest")
    again = CalibrationEvaluator(spec, cache)
    plan(spec, evaluator=again)
    assert again.measurements == 0  # every measurement came from the disk cache


def test_an_infeasible_budget_reports_the_cheapest_setting_and_the_shortfall(tmp_path, cache):
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=50, bar=100.0)))
    result = plan(spec, evaluator=CalibrationEvaluator(spec, cache), generations=1)
    assert not result.front
    assert "no setting fits the budget of 50 tokens; the smallest needs" in result.shortfall
    assert "over" in result.shortfall


def test_an_unmet_bar_says_how_far_the_best_is(tmp_path, cache):
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=0.0)))
    result = plan(spec, evaluator=CalibrationEvaluator(spec, cache), generations=1)
    assert result.cheapest_meeting_bars is None and "best fd =" in result.shortfall


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (("image_size = [32, 64, 128]", "pixels = [32]"), ConfigError, r"unknown variable\(s\) pixels"),
        (('"gpt-4o"]', '"gpt-4o-turbo-max"]'), PriceError, "unknown model 'gpt-4o-turbo-max'"),
        (("fd = 100.0", "wer = 0.1"), ConfigError, "a bar on 'wer', which is not an objective"),
        (
            ('minimize = ["cost", "fd"]', 'minimize = ["cost"]\nmaximize = ["fd"]'),
            ConfigError,
            "fd can only be minimised",
        ),
        (
            ('minimize = ["cost", "fd"]', 'minimize = ["cost", "fd"]\nmaximize = ["accuracy"]'),
            ConfigError,
            "provider answers cannot be measured",
        ),
        (("[search]", "[searching]"), ConfigError, r"unknown key\(s\) searching"),
        (('"gpt-4o"]', '"gpt-4o-audio-preview"]'), ConfigError, "sends images, but model gpt-4o-audio-preview"),
        (
            ("images = 2", 'images = "two"'),
            ConfigError,
            r"\[request\] images must be an integer from 0 to 1,000, got 'two'",
        ),
        (("population = 6", "population = 0"), ConfigError, r"\[search\] population must be an integer from 4 to"),
        (("[32, 64, 128]", "[30, 64]"), ConfigError, r"\[variables\] image_size: an image size is a multiple of 8"),
        (('minimize = ["cost", "fd"]', 'minimize = "cost"'), ConfigError, r"\[objectives\] minimize must be a list"),
        (("fd = 100.0", 'fd = "low"'), ConfigError, r"\[bars\] fd must be a finite number, got 'low'"),
        (("photos = 8", "photos = 8\nphoto = 3"), ConfigError, r"unknown key\(s\) in \[calibration\]: photo"),
        (('"clip-tiny"', '"nosuch"'), ConfigError, r"\[calibration\] fd_extractor 'nosuch' is unknown"),
        (("[variables]", "[variables]\ncodebook_levels = [8]"), ConfigError, r"codebook_levels is set, but the req"),
        (("[variables]", "[variables]\nkeep_ratio = {low = 0.5, high = 2}"), ConfigError, r"a keep ratio is in"),
        (
            ('model = ["mmtok-semantic", ', "keep_ratio = [0.5]\nmodel = ["),
            ConfigError,
            r"keep_ratio applies only to mmtok-semantic",
        ),
        (
            ("[32, 64, 128]", '"breakpoint"'),
            ConfigError,
            r'\[variables\] image_size: an image size is a multiple of 8 px from 8 to 1024, or "breakpoints"',
        ),
        (("[32, 64, 128]", '["breakpoints", 30]'), ConfigError, r"\[variables\] image_size: an image size is a"),
        (("[32, 64, 128]", '"breakpoints"'), ConfigError, r"\[variables\] image_size = \"breakpoints\" gives mmtok"),
        (
            ('[32, 64, 128]\nmodel = ["mmtok-semantic", ', '["breakpoints", 64]\nmodel = ['),
            ConfigError,
            r"\[variables\] image_size: beside \"breakpoints\" the sizes listed \(64\) are mmtok-semantic's",
        ),
        (
            (
                '[32, 64, 128]\nmodel = ["mmtok-semantic", "gemini-2.5-flash", "gpt-4o"]',
                '"breakpoints"\nmodel = "mmtok-semantic"',
            ),
            ConfigError,
            r"\[variables\] image_size \"breakpoints\" are the sizes at which a provider model's token count changes",
        ),
        (("[variables]", '[variables]\ntrim_silence = "yes"'), ConfigError, r"\[variables\] trim_silence: .*true or"),
        (("[variables]", "[variables]\ntrim_silence = [0, 1]"), ConfigError, r"\[variables\] trim_silence: .*got 0"),
        (("[variables]", "[variables]\ntrim_silence = [true]"), ConfigError, r"trim_silence is set, but the req"),
        (("photos = 8", "photos = 8\nmin_silence_s = 0"), ConfigError, r"\[calibration\] min_silence_s must be >="),
    ],
)
def test_bad_specs_name_what_is_wrong(tmp_path, change, error, match):
    body = SMALL.format(budget=10000, bar=100.0).replace(*change)
    with pytest.raises(error, match=match):
        load_spec(spec_file(tmp_path, body))


def test_contradictory_bars(tmp_path):
    body = SMALL.format(budget=10000, bar=100.0).replace(
        'model = ["mmtok-semantic", "gemini-2.5-flash", "gpt-4o"]', 'model = ["mmtok-semantic"]'
    )
    body = body.replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "fd"]\nmaximize = ["accuracy"]')
    body = body.replace("fd = 100.0", "fd = 100.0\naccuracy = 1.5")
    with pytest.raises(ConfigError, match=r"accuracy bar must be in \[0, 1\]"):
        load_spec(spec_file(tmp_path, body))


def test_an_objective_whose_backend_is_missing_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    body = SMALL.format(budget=10000, bar=100.0).replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "wer"]')
    body = body.replace("fd = 100.0", "wer = 0.5").replace("audio_seconds = 0", "audio_seconds = 20")
    body = body.replace(', "gpt-4o"]', "]")  # gpt-4o takes no audio
    with pytest.raises(ConfigError, match=r"needs the eval extra"):
        load_spec(spec_file(tmp_path, body))


def test_plan_command_on_a_pipe_prints_only_the_summary_table(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out"), "--generations", "2"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and (tmp_path / "out" / "report.html").is_file()
    out = result.stdout
    assert "recommended settings" in out and "A: cheapest" in out and "report:" in out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "model" in line)
    assert lines[at - 1].split() == ["image"] and lines[at].split() == ["model", "px", "cost", "fd", "tokens"]
    assert "$0.000104" in out and "81.2" in out  # rounded: 3 significant figures
    assert "{" not in out and "0.00010" + "4000" not in out  # no raw dicts, no long floats


def test_the_summary_fits_80_columns_and_never_cuts_a_number(tmp_path, cache, monkeypatch):
    import io

    from rich.console import Console

    import mmtok.cli.plan as plan_command

    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    monkeypatch.setattr(CalibrationEvaluator, "wer", fake_wer)
    spec = load_spec(Path(__file__).resolve().parents[1] / "budgets" / "examples" / "voice-and-photos.toml")
    result = plan(spec, population=8, generations=2)
    screen = io.StringIO()
    monkeypatch.setattr(plan_command, "console", lambda: Console(file=screen, width=80))
    plan_command.print_summary(result)
    text = screen.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    for _, entry in recommendations(result):
        for name in ("cost", "fd", "wer", "tokens"):
            assert objective_text(name, entry["objectives"][name]) in text, name
    assert "tok/s" in text and "keep" not in text  # keep_ratio is fixed at 1: no column


def test_plan_command_shows_progress_with_an_eta_on_a_terminal(tmp_path, cache, monkeypatch):
    import io

    from rich.console import Console

    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    terminal = io.StringIO()
    monkeypatch.setattr("mmtok.cli.plan._progress_shown", lambda: True)
    monkeypatch.setattr("mmtok.cli.plan.err_console", lambda: Console(file=terminal, force_terminal=True, width=120))
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out"), "--generations", "3"])
    assert result.exit_code == 0, result.output
    shown = terminal.getvalue()
    assert "generation 3:" in shown and "/18" in shown and "ETA" in shown  # 6 x 3 evaluations at most
    assert "settings, hypervolume" in shown
    assert "generation" not in result.stdout  # progress never goes to stdout


def test_plan_json_is_one_object_with_the_plan(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    argv = ["plan", str(path), "--out", str(tmp_path / "out"), "--json", "--population", "4", "--generations", "2"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and result.stderr == ""

    def no_nan(name):
        raise AssertionError(f"{name} is not JSON")

    data = json.loads(result.stdout, parse_constant=no_nan)
    for key in ("front", "knee", "cheapest_meeting_bars", "shortfall", "history", "reference_point", "report"):
        assert key in data, key
    assert data["population"] == 4 and data["generations"] == 2 and len(data["history"]) == 2
    assert data["cheapest_meeting_bars"]["meets_bars"] and data["report"]["md"].endswith("report.md")
    assert all(set(e["setting"]) <= {"model", "image_size", "keep_ratio"} for e in data["front"])


def test_an_unmeasured_judge_shows_a_dash_never_nan():
    from mmtok.budgets.planner.report import objective_text

    assert objective_text("judge", None) == "—" and objective_text("judge", float("nan")) == "—"
    assert objective_text("judge", 3.14159) == "3.14" and objective_text("cost", 0.00026649) == "$0.000266"
    assert objective_text("wer", 0.5771) == "57.7%" and objective_text("fd", 287.689) == "288"
    assert objective_text("fd", 0.28912) == "0.289" and objective_text("fd", 1234.5) == "1,234"


def fake_fd(self, model: str, size: int) -> float:
    """A stand-in for the FD measurement (seconds of model work): smaller images and mmtok are worse."""
    return 1000.0 / size + (50.0 if model == "mmtok-semantic" else 0.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("images = 2", 'images = "two"'), "[request] images must be an integer from 0 to 1,000, got 'two'"),
        (("budget_tokens = 10000", "budget_tokens = -5"), "[request] budget_tokens must be an integer from 1 to"),
        (("[search]", "[searching]"), "unknown key(s) searching"),
        (('"gpt-4o"]', '"gpt-4o-turbo-max"]'), "unknown model 'gpt-4o-turbo-max'"),
        (("name =", "name = = "), "invalid TOML"),
    ],
)
def test_a_bad_spec_exits_2_with_one_line_naming_the_key(tmp_path, cache, change, message):
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0).replace(*change))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_an_empty_spec_is_refused_not_planned_with_every_default(tmp_path):
    (tmp_path / "empty.toml").write_text("")
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "empty.toml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no [variables]: a spec names the knobs to search" in result.stderr


def test_bad_options_exit_2_without_a_traceback(tmp_path, cache):
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    (tmp_path / "a-file").write_text("x")
    for argv, message in [
        (["--out", str(tmp_path / "a-file")], "not a folder"),
        (["--out", str(tmp_path / "o"), "--population", "2"], "--population"),
        (["--out", str(tmp_path / "o"), "--generations", "0"], "--generations"),
        (["--out", str(tmp_path / "o"), "--seed"], "No such option"),
    ]:
        result = CliRunner().invoke(app, ["plan", str(path), *argv])
        assert result.exit_code == 2, (argv, result.output)
        assert message in result.stderr and "Traceback" not in result.output, argv
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "cannot read spec" in result.stderr


def test_a_failed_measurement_is_one_line_and_exit_1_and_the_rest_is_planned(tmp_path, cache, monkeypatch):
    def fd(self, model, size):
        if size == 64:
            raise RuntimeError("CUDA out of\nmemory")
        return fake_fd(self, model, size)

    monkeypatch.setattr(CalibrationEvaluator, "fd", fd)
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "could not be measured" in lines[0] and "RuntimeError: CUDA out of memory" in lines[0]
    assert "Traceback" not in result.output and (tmp_path / "out" / "report.md").is_file()
    front = json.loads((tmp_path / "out" / "front.json").read_text())
    assert front["front"] and all(e["setting"]["image_size"] != 64 for e in front["front"])
    assert front["failed"] and all(f["setting"]["image_size"] == 64 for f in front["failed"])


def test_every_generation_hypervolume_uses_one_reference_point_fixed_after_the_first(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))
    spec.variables["image_size"] = [8, 16, 32, 48, 64, 96, 128, 256]
    result = plan(spec, population=4, generations=4)
    first = [e["objectives"] for e in result.evaluated[: result.history[0]["evaluations"]]]
    assert result.reference_point == pytest.approx(list(reference_point(spec, first)))
    ref = np.array(result.reference_point)
    for h in result.history:  # each generation's front (of everything evaluated so far), against that point
        so_far = pareto_rows(spec, result.evaluated[: h["evaluations"]])
        assert h["hypervolume"] == pytest.approx(hypervolume(spec, [e["objectives"] for e in so_far], ref))
    hvs = [h["hypervolume"] for h in result.history]
    assert hvs == sorted(hvs)  # a fixed point: the front only improves
    assert hypervolume(spec, [{"cost": 1e9, "fd": 1e9, "tokens": 0}], ref) == 0  # beyond it: nothing
    text = write_report(result, tmp_path / "r")["md"].read_text()
    assert "one reference point for the whole run" in text and "fixed after the first generation" in text


QA = """
name = "qa"
[request]
images = 1
audio_seconds = 0
[variables]
image_size = [32, 64]
keep_ratio = [0.5, 1.0]
[objectives]
minimize = ["cost"]
maximize = ["accuracy"]
[calibration]
qa = 6
"""


def test_qa_is_measured_at_the_settings_image_size(tmp_path, cache, monkeypatch):
    import mmtok.models.digits_qa as digits_qa

    drawn = []
    real = digits_qa.task_tokens

    def task_tokens(tok, split, count, size, seed):
        data = real(tok, split, count, size, seed)
        drawn.append((size, tuple(data["ids"].shape)))
        return data

    monkeypatch.setattr(digits_qa, "task_tokens", task_tokens)
    evaluator = CalibrationEvaluator(load_spec(spec_file(tmp_path, QA)), cache)
    for size in (32, 64):
        assert 0 <= evaluator.qa(1.0, size)["accuracy"] <= 1
        assert drawn[-1] == (size, (6, (size // 8) ** 2))  # canvases drawn at the size, (size / 8)^2 tokens each
    assert len(list(cache.glob("qa-*.json"))) == 2  # one measurement per size


def test_cache_keys_follow_the_weights_and_the_asr_protocol(tmp_path, cache, monkeypatch):
    import types

    import mmtok.models.checkpoint as checkpoint

    monkeypatch.setattr(CalibrationEvaluator, "_measure_fd", lambda self, self_hosted, size: 1.0)
    monkeypatch.setattr(CalibrationEvaluator, "_measure_wer", lambda self, self_hosted, rate, levels, trim: 0.5)
    trained = {"vq": "vq-1", "av": "av-1"}
    monkeypatch.setattr(checkpoint, "weights_fingerprint", lambda model: trained[model.name])
    protocol = {"name": "faster-whisper tiny.en (greedy, temperature 0)"}
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))

    def measured() -> int:
        """New measurements of fd (mmtok, provider) and wer (mmtok, provider) by a fresh evaluator."""
        evaluator = CalibrationEvaluator(spec, cache)
        evaluator._models = {
            "vq": types.SimpleNamespace(name="vq"),
            "av": types.SimpleNamespace(name="av"),
            "asr": types.SimpleNamespace(name=protocol["name"]),
        }
        evaluator.fd("mmtok-semantic", 32), evaluator.fd("gpt-4o", 32)
        evaluator.wer("mmtok-semantic", 16.0, 8), evaluator.wer("gpt-4o", 16.0, 8)
        return evaluator.measurements

    assert measured() == 4 and measured() == 0
    trained["vq"] = "vq-2"  # retrained image tokenizer: only the mmtok FD is measured again
    assert measured() == 1
    trained["av"] = "av-2"  # retrained audio tokenizer: only the mmtok WER
    assert measured() == 1
    protocol["name"] = "faster-whisper tiny.en (beam 5, temperature 0)"  # another decoder: both WERs
    assert measured() == 2


MY_PRICES = """
provider = "self-hosted"
currency = "USD"

[models."mmtok-semantic"]
input_per_mtok = "5.00"
output_per_mtok = "5.00"
image_relative = "1.8"
audio_relative = "0.3"
video_relative = "1.8"
source = "my serving bill"
as_of = 2026-12-01
"""


def test_prices_the_plan_with_the_users_sheets(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    sheet = tmp_path / "my.toml"
    sheet.write_text(MY_PRICES)
    shipped, mine = plan(load_spec(path), generations=2), plan(load_spec(path, [sheet]), generations=2)

    def knobs(e):
        return setting_key(applicable_setting(mine.spec, e["setting"]))

    shipped_cost = {knobs(e): e["objectives"]["cost"] for e in shipped.evaluated}
    my_cost = {knobs(e): e["objectives"]["cost"] for e in mine.evaluated}
    both = set(shipped_cost) & set(my_cost)
    assert any('"mmtok-semantic"' in key for key in both) and any('"gpt-4o"' in key for key in both)
    for key in both:  # mmtok-semantic at 10x the shipped 0.50 per 1M tokens; the providers as shipped
        factor = 10 if '"mmtok-semantic"' in key else 1
        assert my_cost[key] == pytest.approx(factor * shipped_cost[key])
    out = tmp_path / "out"
    argv = ["plan", str(path), "--out", str(out), "--generations", "2", "--prices", str(sheet)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    front = json.loads((out / "front.json").read_text())["front"]
    assert all(e["objectives"]["cost"] == pytest.approx(my_cost[knobs(e)]) for e in front)
    assert f"and yours ({sheet}" in (out / "report.md").read_text()
    sheet.write_text(MY_PRICES.replace('"5.00"', "5.0", 1))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(out), "--prices", str(sheet)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and str(sheet) in result.stderr


def photo_folder(folder, samples, names=("astronaut.png", "chelsea.jpg", "coffee.webp")):
    import shutil

    folder.mkdir()
    for name in names:
        shutil.copy(samples / name, folder / name)
    (folder / "notes.txt").write_text("not a photo")
    shutil.copy(samples / "speech.wav", folder / "speech.wav")  # other media are skipped
    return folder


def test_photos_folder_is_the_fd_calibration_set(tmp_path, cache, samples):
    photo_folder(tmp_path / "photos", samples)
    body = SMALL.format(budget=10000, bar=100.0).replace("photos = 8", 'photos = 8\nphotos_folder = "photos"')
    spec = load_spec(spec_file(tmp_path, body))
    assert spec.photos_folder == tmp_path / "photos"  # relative to the spec file
    assert [p.name for p in user_photos(spec)] == ["astronaut.png", "chelsea.jpg", "coffee.webp"]
    evaluator = CalibrationEvaluator(spec, cache)
    assert tuple(evaluator._reference_photos().shape) == (3, 3, 256, 256)
    fd_small, fd_large = evaluator.fd("gpt-4o", 32), evaluator.fd("gpt-4o", 128)
    assert fd_small > fd_large >= 0
    assert "3 of your photos" in calibration_sets(spec)["photos"]
    (tmp_path / "photos" / "coffee.webp").unlink()  # another set of photos: measured again
    again = CalibrationEvaluator(load_spec(spec.path), cache)
    again.fd("gpt-4o", 32)
    assert again.measurements == 1


def test_speech_manifest_is_the_wer_calibration_set(tmp_path, cache, samples):
    import types

    lines = [
        {"path": str(samples / "speech.wav"), "text": "The quick brown fox jumps over the lazy dog."},
        {"path": "../numbers.wav", "text": "Please send the report by nine thirty on Monday morning."},
    ]
    (tmp_path / "speech").mkdir()
    (tmp_path / "numbers.wav").write_bytes((samples / "speech_numbers.wav").read_bytes())
    (tmp_path / "speech" / "mine.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    body = SMALL.format(budget=10000, bar=100.0).replace("audio_seconds = 0", "audio_seconds = 5")
    body = body.replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "wer"]').replace("fd = 100.0", "wer = 0.5")
    body = body.replace(', "gpt-4o"]', "]").replace("photos = 8", 'speech_manifest = "speech/mine.jsonl"')
    spec = load_spec(spec_file(tmp_path, body))
    assert [(p.name, t[:10]) for p, t in user_speech(spec)] == [
        ("speech.wav", "The quick "),
        ("numbers.wav", "Please sen"),
    ]
    evaluator = CalibrationEvaluator(spec, cache)
    heard = types.SimpleNamespace(
        name="fake asr", transcribe=lambda audio: "the quick brown fox jumps over the lazy dog"
    )
    evaluator._models["asr"] = heard
    assert evaluator.wer("gemini-2.5-flash", 16.0, 8) == pytest.approx(10 / 19)  # right on 1, wrong on the other


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("photos_folder", '"nowhere"', "[calibration] photos_folder {tmp}/nowhere: no such folder"),
        ("photos_folder", '"empty"', "[calibration] photos_folder {tmp}/empty: no images in it"),
        ("photos_folder", "3", "[calibration] photos_folder must be a path"),
        ("speech_manifest", '"none.jsonl"', "[calibration] speech_manifest {tmp}/none.jsonl: no such file"),
        ("speech_manifest", '"blank.jsonl"', "[calibration] speech_manifest {tmp}/blank.jsonl: no recordings"),
        ("speech_manifest", '"bad.jsonl"', "[calibration] speech_manifest {tmp}/bad.jsonl:2: each line must be"),
        ("speech_manifest", '"gone.jsonl"', "[calibration] speech_manifest {tmp}/gone.jsonl:1: {tmp}/x.wav"),
    ],
)
def test_a_calibration_folder_or_manifest_that_is_missing_or_empty_is_a_config_error(
    tmp_path, samples, key, value, message
):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no photos here")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    (tmp_path / "bad.jsonl").write_text(
        json.dumps({"path": str(samples / "speech.wav"), "text": "a"}) + '\n["a.wav"]\n'
    )
    (tmp_path / "gone.jsonl").write_text('{"path": "x.wav", "text": "gone"}\n')
    body = SMALL.format(budget=10000, bar=100.0).replace("photos = 8", f"photos = 8\n{key} = {value}")
    with pytest.raises(ConfigError) as caught:
        load_spec(spec_file(tmp_path, body))
    assert message.format(tmp=tmp_path) in str(caught.value)


def test_the_my_inputs_example_points_at_the_shipped_samples():
    spec = load_spec(Path(__file__).resolve().parents[1] / "budgets" / "examples" / "my-inputs.toml")
    photos, speech = user_photos(spec), user_speech(spec)
    assert [p.name for p in photos] == ["astronaut.png", "chelsea.jpg", "coffee.webp", "rocket_rotated.jpg"]
    assert [p.name for p, _ in speech] == ["speech.wav", "speech_numbers.wav", "speech.mp3", "speech.m4a"]
    assert all(p.parent == samples_dir() for p in photos) and speech[1][1].startswith("Please send the report")


def fake_wer(self, model: str, rate: float, levels: int, trim: bool = False) -> float:
    """A stand-in for the WER measurement: providers hear the original; mmtok loses words at low rates."""
    return 0.02 if model != "mmtok-semantic" else 2.0 / rate + 0.1 / levels


def test_report_states_the_population_and_generations_actually_used(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))  # population 6 x 3 in the spec
    result = plan(spec, population=4, generations=1)
    assert (result.population, result.generations) == (4, 1)
    text = write_report(result, tmp_path / "r")["md"].read_text()
    assert "population 4 × 1 generation," in text and "population 6" not in text
    assert json.loads((tmp_path / "r" / "front.json").read_text())["population"] == 4


def test_no_audio_knobs_or_commands_for_a_request_without_audio(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))  # audio_seconds = 0
    files = write_report(plan(spec, generations=2), tmp_path / "r")
    text = files["md"].read_text()
    for word in ("audio", "AUDIO", "tokens-per-second", "levels", r"\bwer\b", "speech", "keep"):
        assert not re.search(word, text), word
    assert "| model | image px |" in text and "--image-size" in text
    header = files["csv"].read_text().splitlines()[0]
    assert header == "model,image_size,cost,fd,tokens,meets_bars"
    front = json.loads(files["json"].read_text())["front"]
    assert all(set(e["setting"]) in ({"model", "image_size"}, {"model", "image_size", "keep_ratio"}) for e in front)
    assert {"model", "image_size", "keep_ratio"} in [set(e["setting"]) for e in front]  # keep_ratio: mmtok only


def test_no_image_knobs_for_a_request_without_images_and_no_mmtok_knobs_for_providers(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "wer", fake_wer)
    body = SMALL.format(budget=10000, bar=100.0).replace("images = 2", "images = 0")
    body = body.replace("audio_seconds = 0", "audio_seconds = 20").replace("image_size = [32, 64, 128]\n", "")
    body = body.replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "wer"]').replace("fd = 100.0", "wer = 0.5")
    body = body.replace(', "gpt-4o"]', "]").replace("[variables]", "[variables]\naudio_tokens_per_second = [12.5, 50]")
    spec = load_spec(spec_file(tmp_path, body))
    files = write_report(plan(spec, generations=3), tmp_path / "r")
    text = files["md"].read_text()
    for word in ("image px", "IMAGES", "--image-size", "resize", "keep", r"\bfd\b", "photo"):
        assert not re.search(word, text), word
    assert "| model | audio tok/s |" in text and "Same in every setting: levels 8 (mmtok-semantic)." in text
    assert "| gemini-2.5-flash | — |" in text  # the audio knobs are mmtok's: a provider hears the original
    assert "mmtok price AUDIO -m gemini-2.5-flash --detail high" in text


def test_plot_tick_labels_do_not_overlap_or_leave_the_figure(tmp_path, cache, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))  # costs $0.0001 to $0.002
    result = plan(spec, generations=2)
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figures write_report draws
    write_report(result, tmp_path / "r")
    assert len(drawn) == 2  # the pair of objectives and the hypervolume: no parallel coordinates for two
    for fig in drawn:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
                shown = [t.label1 for t in axis.get_major_ticks() if low <= t.get_loc() <= high and t.label1.get_text()]
                boxes = [label.get_window_extent(renderer) for label in shown]
                for a, b in itertools.combinations(boxes, 2):
                    assert not a.overlaps(b), [label.get_text() for label in shown]
                assert all(fig.bbox.contains(b.x0, b.y0) and fig.bbox.contains(b.x1, b.y1) for b in boxes)
    cost_ticks = [t.label1.get_text() for t in drawn[0].axes[0].xaxis.get_major_ticks()]
    assert drawn[0].axes[0].get_xlabel() == "cost (USD / request)" and all(t.startswith("$") for t in cost_ticks if t)


def test_among_equal_costs_the_cheapest_at_the_bars_is_the_better_setting(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    body = SMALL.format(budget=10000, bar=100.0).replace(
        '"mmtok-semantic", "gemini-2.5-flash", "gpt-4o"', '"gemini-2.5-flash"'
    )
    spec = load_spec(spec_file(tmp_path, body))  # Gemini bills every image up to 384 px the same 258 tokens
    result = plan(spec, generations=2)
    assert len({e["objectives"]["cost"] for e in result.evaluated}) == 1
    assert result.cheapest_meeting_bars["setting"]["image_size"] == 128 == result.front[0]["setting"]["image_size"]


def test_recommendations_hold_the_best_setting_on_each_quality_objective(tmp_path):
    from mmtok.budgets.planner import Plan

    body = SMALL.format(budget=10000, bar=100.0).replace("audio_seconds = 0", "audio_seconds = 5")
    body = body.replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "fd", "wer"]').replace(', "gpt-4o"]', "]")
    spec = load_spec(spec_file(tmp_path, body))

    def entry(size, model, cost, fd, wer):
        setting = {"model": model, "image_size": size, "keep_ratio": 1.0}
        return {"setting": setting, "objectives": {"cost": cost, "fd": fd, "wer": wer, "tokens": 100.0}}

    front = [entry(32, "mmtok-semantic", 1, 10, 0.9), entry(64, "gemini-2.5-flash", 2, 1, 0.8)]
    front.append(entry(128, "mmtok-semantic", 3, 5, 0.1))
    rows = recommendations(Plan(spec, front, front, [], None, None))
    assert [(label, e["setting"]["image_size"]) for label, e in rows] == [
        ("A: cheapest", 32),
        ("B: best fd", 64),
        ("C: best wer", 128),
    ]  # lettered in order: no knee and no bars met leave no gap (it read A, D, E)


def test_a_setting_that_is_several_recommendations_is_one_row_saying_so(tmp_path):
    from mmtok.budgets.planner import Plan

    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))
    cheap = {"setting": {"model": "gpt-4o", "image_size": 32}, "objectives": {"cost": 1, "fd": 5, "tokens": 1.0}}
    good = {"setting": {"model": "gpt-4o", "image_size": 64}, "objectives": {"cost": 2, "fd": 1, "tokens": 1.0}}
    rows = recommendations(Plan(spec, [cheap, good], [cheap, good], [], None, cheap))
    assert [label for label, _ in rows] == ["A: cheapest, meets the bars", "B: best fd"]


BREAKPOINT_MODELS = ["mmtok-semantic", "gemini-2.5-flash", "gpt-4o", "claude-sonnet-4-5"]


def breakpoints_spec(tmp_path):
    body = SMALL.format(budget=10000, bar=100.0).replace(
        "image_size = [32, 64, 128]", 'image_size = ["breakpoints", 32, 64]'
    )
    body = body.replace('["mmtok-semantic", "gemini-2.5-flash", "gpt-4o"]', json.dumps(BREAKPOINT_MODELS))
    return load_spec(spec_file(tmp_path, body))


def test_breakpoint_sizes_are_each_models_own_where_its_price_changes(tmp_path, cache):
    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.shrink.candidates import candidates

    spec = breakpoints_spec(tmp_path)
    sizes = {model: image_sizes(spec, model) for model in BREAKPOINT_MODELS}
    assert sizes["mmtok-semantic"] == [32, 64]  # its count changes at every multiple of 8: the sizes listed
    providers = BREAKPOINT_MODELS[1:]
    assert len({tuple(sizes[m]) for m in providers}) == len(providers)  # each provider model its own
    assert sizes["gpt-4o"] == [512, 768]  # one 512-px tile; 768 px: the view of anything larger (2x2 tiles)
    assert sizes["gemini-2.5-flash"] == [1024]  # 258 tokens at every size, as billed (issue 36): one price
    assert len(sizes["claude-sonnet-4-5"]) == MAX_BREAKPOINTS  # 28-px cells: 20 counts up to 1024 px, spread to 8
    evaluator = CalibrationEvaluator(spec, cache)

    def cost(model, px):
        setting = {"model": model, "image_size": px, "keep_ratio": 1.0, "trim_silence": False}
        return evaluator.tokens_and_cost(setting)[1]

    for model in providers:
        ladder = sizes[model]
        assert ladder == sorted(set(ladder)) and 1 <= len(ladder) <= MAX_BREAKPOINTS
        side = MAX_IMAGE_SIZE_PX
        assert set(ladder[:-1]) <= {r.width for r in candidates(resolve(model), side, side, PROVIDER_DETAIL)}
        costs = [cost(model, px) for px in ladder]
        assert costs == sorted(set(costs)), model  # every size a price of its own, rising with the size
        for px in ladder[:-1]:  # the largest size at its price: one pixel more costs more
            assert cost(model, px) < cost(model, px + 1), (model, px)
        assert cost(model, ladder[-1]) == cost(model, side)  # the top: what the full 1024 px cost
    assert evaluator.measurements == 0  # pricing only


def test_a_search_over_breakpoints_tries_each_model_at_its_own_sizes_in_pixels(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    spec = breakpoints_spec(tmp_path)
    result = plan(spec, population=8, generations=2)
    assert result.evaluated and result.front
    for e in result.evaluated:
        assert e["setting"]["image_size"] in image_sizes(spec, e["setting"]["model"]), e["setting"]
    every = grid(spec)  # each model at each of its own sizes, once
    assert sorted((s["model"], s["image_size"]) for s in every) == sorted(
        (m, px) for m in BREAKPOINT_MODELS for px in image_sizes(spec, m)
    )
    files = write_report(result, tmp_path / "r")
    assert "| model | image px |" in files["md"].read_text()
    assert files["csv"].read_text().splitlines()[0].startswith("model,image_size,")
    front = json.loads(files["json"].read_text())["front"]
    assert all(e["setting"]["image_size"] in image_sizes(spec, e["setting"]["model"]) for e in front)


TRIM = """
name = "trim"
[request]
images = 0
audio_seconds = 20
text_tokens = 100
output_tokens = 50
[variables]
trim_silence = [false, true]
model = ["gemini-2.5-flash"]
[objectives]
minimize = ["cost", "wer"]
[bars]
wer = 0.9
[calibration]
speech_manifest = "speech/speech.jsonl"
[search]
population = 4
generations = 1
"""

SAMPLE_SPEECH = {
    "speech.wav": "The quick brown fox jumps over the lazy dog.",
    "speech_numbers.wav": "Please send the report by nine thirty on Monday morning.",
}


def speech_with_pauses(samples, folder):
    """The shipped sample sentences with 1.5 s of silence before and after each (a call's pauses): 4 silences that
    shrink's cut takes to 0.25 s each."""
    import soundfile as sf

    folder.mkdir()
    seconds = []
    for name in SAMPLE_SPEECH:
        wave, rate = sf.read(samples / name, dtype="float32", always_2d=True)
        pause = np.zeros((int(1.5 * rate), wave.shape[1]), np.float32)
        sf.write(folder / name, np.concatenate([pause, wave, pause]), rate)
        seconds.append(len(wave) / rate + 3.0)
    lines = [json.dumps({"path": name, "text": text}) for name, text in SAMPLE_SPEECH.items()]
    (folder / "speech.jsonl").write_text("\n".join(lines) + "\n")
    return seconds


def test_trimming_silence_bills_the_cut_seconds_and_measures_wer_on_the_cut_speech(tmp_path, cache, samples):
    import types
    from dataclasses import replace

    originals = speech_with_pauses(samples, tmp_path / "speech")
    spec = load_spec(spec_file(tmp_path, TRIM))
    heard = []

    def transcribe(audio):
        heard.append(audio.duration_s)
        return "the quick brown fox jumps over the lazy dog"

    asr = types.SimpleNamespace(name="fake asr", transcribe=transcribe)
    evaluator = CalibrationEvaluator(spec, cache)
    evaluator._models["asr"] = asr
    setting = {"model": "gemini-2.5-flash", "image_size": 64, "keep_ratio": 1.0, "audio_tokens_per_second": 16.0}
    setting["codebook_levels"] = 8
    as_is = evaluator.evaluate({**setting, "trim_silence": False})
    cut = evaluator.evaluate({**setting, "trim_silence": True})
    assert cut["cost"] < as_is["cost"] and cut["tokens"] < as_is["tokens"]
    assert as_is["wer"] == pytest.approx(10 / 19) and cut["wer"] == pytest.approx(10 / 19)  # right on 1 of 2
    trim = evaluator.silence_trim()
    assert trim["recordings"] == 2 and trim["seconds_before"] == pytest.approx(sum(originals), abs=0.01)
    assert trim["seconds_before"] - trim["seconds_after"] > 4.5  # four 1.5-s silences cut to 0.25 s
    assert "cut to 0.5 s" in trim["cut"]
    audio_tokens = [as_is["tokens"] - 100, cut["tokens"] - 100]  # 100 text tokens in each
    assert audio_tokens[1] / audio_tokens[0] == pytest.approx(trim["kept"], abs=0.01)  # 20 s x the fraction kept
    assert heard[:2] == pytest.approx(originals, abs=0.01)  # WER as sent, then on the cut speech
    assert all(t < o - 2.2 for t, o in zip(heard[2:], originals, strict=True)), heard
    mmtok_stack = {**setting, "model": "mmtok-semantic"}  # fewer seconds are fewer audio tokens there too
    tokens = [evaluator.tokens_and_cost({**mmtok_stack, "trim_silence": t})[0] for t in (False, True)]
    assert tokens[1] < tokens[0]

    again = CalibrationEvaluator(spec, cache)  # cached: the cut and both WERs
    again._models["asr"] = asr
    assert again.evaluate({**setting, "trim_silence": True}) == cut and again.measurements == 0
    longer = CalibrationEvaluator(replace(spec, min_silence_s=2.0), cache)  # other VAD settings: measured again
    assert longer.silence_trim()["kept"] == 1.0 and longer.measurements == 1  # no silence over 2 s to cut
    longer._models["asr"] = asr
    tie = plan(longer.spec, evaluator=longer)  # a cut that changes nothing: the audio as it is is recommended
    assert tie.front[0]["setting"]["trim_silence"] is False
    assert tie.cheapest_meeting_bars["setting"]["trim_silence"] is False

    result = plan(spec, evaluator=again)
    assert {e["setting"]["trim_silence"] for e in result.evaluated} == {False, True}
    files = write_report(result, tmp_path / "r")
    text = files["md"].read_text()
    assert "| model | trim silence |" in text and "trim silence: mmtok shrink's silence cut (Silero VAD" in text
    assert 'mmtok shrink AUDIO -m gemini-2.5-flash --keep "wer<=1" --out TRIMMED' in text
    data = json.loads(files["json"].read_text())
    assert data["silence_trim"]["kept"] == pytest.approx(trim["kept"])
    assert {e["setting"]["trim_silence"] for e in data["front"]} <= {False, True}


def test_trim_silence_applies_only_with_audio(tmp_path):
    spec = load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0)))  # audio_seconds = 0
    assert not knob_applies(spec, "trim_silence") and not knob_applies(spec, "trim_silence", "gpt-4o")
    with_audio = spec_file(
        tmp_path,
        SMALL.format(budget=10000, bar=100.0)
        .replace("audio_seconds = 0", "audio_seconds = 5")
        .replace(', "gpt-4o"]', "]"),
    )
    spec = load_spec(with_audio)
    assert knob_applies(spec, "trim_silence", "gemini-2.5-flash") and knob_applies(
        spec, "trim_silence", "mmtok-semantic"
    )


def test_trimming_the_shipped_sample_speech_as_it_is(cache):
    """The my-inputs example's four recordings (two sample sentences): their pauses are under shrink's 0.8 s, so
    the default cut keeps every second; cutting pauses over 0.3 s bills fewer."""
    from dataclasses import replace

    spec = load_spec(Path(__file__).resolve().parents[1] / "budgets" / "examples" / "my-inputs.toml")
    setting = {"model": "gemini-2.5-flash-lite", "image_size": 64, "keep_ratio": 1.0, "audio_tokens_per_second": 16.0}

    def cost(spec, trim):
        return CalibrationEvaluator(spec, cache).tokens_and_cost({**setting, "trim_silence": trim})[1]

    assert cost(spec, True) == cost(spec, False)
    short = replace(spec, min_silence_s=0.3)
    assert cost(short, True) < cost(short, False)
    trim = CalibrationEvaluator(short, cache).silence_trim()
    assert trim["recordings"] == 4 and 0.9 < trim["kept"] < 1.0


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("images = 400000000", r"images must be an integer from 0 to 1,000"),
        ("audio_seconds = inf", r"audio_seconds must be a finite number"),
        ("audio_seconds = 100000", r"audio_seconds must be at most 14,400"),
    ],
)
def test_a_spec_cannot_ask_for_a_request_of_unbounded_size(line, says, tmp_path):
    """images = 400,000,000 reached 9.5 GB building the request before anything was measured."""
    key = line.split(" = ")[0]
    spec = tmp_path / "s.toml"
    spec.write_text(f'[request]\n{line}\n[variables]\nimage_size = [32, 64]\nmodel = ["gpt-4o"]\n')
    with pytest.raises(ConfigError, match=says):
        load_spec(spec)
    assert key in says


def test_an_out_folder_that_cannot_be_written_is_refused_before_the_search(tmp_path, cache, monkeypatch):
    """`plan --out` that could not be written was found only after the whole search (issue 32)."""
    import errno
    import tempfile

    def searched(*args, **kwargs):
        raise AssertionError("the search ran")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(CalibrationEvaluator, "evaluate", searched)
    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    path = spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))
    result = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: --out {tmp_path / 'out'}: cannot write the report there: Read-only file system\n"


def test_report_files_are_written_atomically_and_never_through_a_link(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(CalibrationEvaluator, "fd", fake_fd)
    result = plan(load_spec(spec_file(tmp_path, SMALL.format(budget=10000, bar=100.0))), generations=1)
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.md"
    victim.write_text("not mmtok's\n")
    (out / "report.md").symlink_to(victim)
    files = write_report(result, out)
    assert victim.read_text() == "not mmtok's\n" and not (out / "report.md").is_symlink()
    assert files["md"].read_text().startswith("# Token budget plan") and not list(out.glob(".*partial"))


def test_a_cold_plan_says_what_is_loading_and_starts_its_eta_at_the_first_measured_setting():
    """A cold `plan` showed `ETA -:--:--` through two minutes of model loading (issue 33)."""
    import io

    from rich.console import Console

    import mmtok.cli.plan as plan_command

    terminal = io.StringIO()
    console = Console(file=terminal, force_terminal=True, width=140)
    original = plan_command.err_console
    plan_command.err_console = lambda: console
    try:
        with plan_command.search_progress(True) as callbacks:  # each callback draws the bar: no waiting for a redraw
            callbacks["on_load"]("the ASR whisper")
            loading = terminal.getvalue()
            for n in range(1, 6):
                callbacks["on_evaluation"]({"evaluation": n, "of": 18, "generation": 1, "settings": n, "failed": 0})
    finally:
        plan_command.err_console = original
    assert "generation 1: loading the ASR whisper" in loading and "ETA" not in loading
    shown = terminal.getvalue()
    import re

    frames = [f for f in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).split("\r") if f.strip()]
    assert not [f for f in frames if "-:--:--" in f], frames
    assert any("5/18" in f and "ETA 0:00:0" in f for f in frames), frames
