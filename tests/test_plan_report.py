"""The planning report reads as figures: its plots letter the recommended settings and draw the bars, each setting
is listed once, the two-objective report has no parallel-coordinates plot, the front's CSV and JSON are linked, and
every figure's smallest text is 9 pt. (How it renders in a browser: tests/test_docs_browser.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtok.budgets.planner import Plan, load_spec
from mmtok.budgets.planner.report import recommendations, shown_front, write_report
from tests.page_checks import min_font_px

EXAMPLES = Path(__file__).resolve().parents[1] / "budgets" / "examples"


def entry(keep: float, cost: float, accuracy: float) -> dict:
    setting = {"image_size": 128, "keep_ratio": keep, "model": "mmtok-semantic"}
    return {"setting": setting, "objectives": {"cost": cost, "accuracy": accuracy, "tokens": 256 * keep}}


@pytest.fixture
def qa_plan() -> Plan:
    """digits-qa (cost against accuracy, a bar at 70%) with a front of four settings, two of which read the same
    (keep 0.502 and 0.504 are both "0.50")."""
    spec = load_spec(EXAMPLES / "digits-qa.toml")
    front = [entry(0.2, 1e-5, 0.55), entry(0.502, 2e-5, 0.74), entry(0.504, 2e-5, 0.74), entry(0.9, 4e-5, 0.79)]
    evaluated = [*front, entry(0.6, 3e-5, 0.70), entry(0.3, 3.5e-5, 0.6)]
    history = [{"generation": g, "hypervolume": 0.1 * g} for g in (1, 2, 3)]
    return Plan(spec, front, evaluated, history, knee=front[1], cheapest_meeting_bars=front[1], evaluations=6,
                population=4, generations=3, reference_point=[5e-5, -0.5])  # fmt: skip


def test_settings_that_read_the_same_are_listed_once(qa_plan, tmp_path):
    assert len(shown_front(qa_plan)) == 3
    files = write_report(qa_plan, tmp_path)
    text = files["md"].read_text()
    assert "3 non-dominated feasible settings, each listed once" in text
    assert text.count("| mmtok-semantic | 0.50 |") == 2  # once among the recommended, once in the front
    assert files["csv"].read_text().count("\n") == 4  # the header and three settings
    assert [label.split(":")[0] for label, _ in recommendations(qa_plan)] == ["A", "B", "C"]


def test_the_front_files_are_linked_beside_the_figures(qa_plan, tmp_path):
    page = write_report(qa_plan, tmp_path)["html"].read_text()
    assert "<a href='front.csv'>front.csv</a>" in page and "<a href='front.json'>front.json</a>" in page
    assert "<img src='front-cost-accuracy.png'" in page and "<th>model</th>" in page


def test_two_objectives_get_their_scatter_and_no_parallel_coordinates(qa_plan, tmp_path):
    write_report(qa_plan, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["front-cost-accuracy.png", "hypervolume.png"]


def test_the_scatter_letters_the_recommended_settings_and_draws_the_bar(qa_plan, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figures write_report draws
    write_report(qa_plan, tmp_path)
    scatter = drawn[0].axes[0]
    assert scatter.get_title() == "QA accuracy against cost"
    assert sorted(t.get_text() for t in scatter.texts) == ["A", "B", "C"]
    legend = [t.get_text() for t in scatter.get_legend().get_texts()]
    assert "bar: QA accuracy ≥ 70.0%" in legend and "recommended (A, B, ...: the table)" in legend
    bar = [line for line in scatter.get_lines() if line.get_label().startswith("bar:")]
    assert bar and bar[0].get_ydata()[0] == pytest.approx(0.7)


def test_three_objectives_get_a_labelled_parallel_plot(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    spec = load_spec(EXAMPLES / "voice-and-photos.toml")

    def point(size: int, rate: float, cost: float, fd: float, wer: float) -> dict:
        setting = {"image_size": size, "keep_ratio": 1.0, "audio_tokens_per_second": rate, "codebook_levels": 8,
                   "model": "mmtok-semantic"}  # fmt: skip
        return {"setting": setting, "objectives": {"cost": cost, "fd": fd, "wer": wer, "tokens": 500.0}}

    front = [point(32, 12.5, 1e-4, 290, 0.8), point(48, 25, 2e-4, 270, 0.5), point(64, 50, 3e-4, 250, 0.3)]
    result = Plan(spec, front, front, [], knee=front[1], cheapest_meeting_bars=front[1], population=3, generations=1)
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    write_report(result, tmp_path)
    assert (tmp_path / "front-parallel.png").is_file()
    parallel = drawn[-1].axes[0]
    words = {t.get_text() for t in parallel.texts}
    assert {"A", "B", "C", "best $0.000100", "worst 80.0%"} <= words
    assert [t.get_text() for t in parallel.get_xticklabels()] == ["cost (USD / request)", "FD (lower is better)", "WER"]


def test_every_figure_keeps_its_text_at_9_points_or_more(qa_plan, tmp_path):
    write_report(qa_plan, tmp_path)
    for figure in tmp_path.glob("*.png"):
        assert min_font_px(figure.read_bytes()) >= 13.7, figure.name  # 9 pt at 110 dpi
