"""The ledger's HTML report reads as figures: charts chosen by what the ledger holds, the parity line and legends
named, errors in percent under plain column names, and worst cases with their error. (How it renders in a browser
is checked by tests/test_docs_browser.py.)"""

from __future__ import annotations

import re

from typer.testing import CliRunner

from mmtok.budgets.ledger import open_ledger
from mmtok.cli.main import app
from tests.page_checks import min_font_px
from tests.test_ledger import record

GEMINI = dict(provider="gemini", api="gemini-generate", model="gemini-2.5-pro",
              billed={"input_tokens": 270, "input_by_modality": {"image": 258, "text": 12}}, billed_input=270,
              predicted={"text": 12, "image": 1032}, predicted_input=1044)  # fmt: skip


def report(tmp_path, records) -> str:
    book = open_ledger(tmp_path / "calls.sqlite")
    book.write(records)
    book.close()
    result = CliRunner().invoke(app, ["ledger", str(tmp_path / "calls.sqlite"), "--html", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    return (tmp_path / "report" / "index.html").read_text()


def headings(page: str, section: str) -> list[str]:
    """The column headings of the first table after the heading ``section``."""
    after = page[page.index(f"<h2>{section}</h2>") :]
    return re.findall(r"<th>(.*?)</th>", re.search(r"<table>(.*?)</table>", after).group(1))


def test_a_ledger_of_one_day_shows_spend_per_model_not_per_day(tmp_path):
    page = report(tmp_path, [record(0), record(2), record(10 + 2, **GEMINI)])  # all on 2026-12-01
    assert "Spend by model on 2026-12-01" in page and "Spend per day" not in page
    assert headings(page, "Spend")[0] == "model"  # no day column for one day


def test_a_ledger_of_several_days_shows_spend_per_day_by_model(tmp_path):
    page = report(tmp_path, [record(n) for n in range(4)])  # 2026-12-01 and 2026-12-02
    assert "Spend per day" in page
    assert headings(page, "Spend")[0] == "day (UTC)"


def test_errors_are_percent_of_the_bill_under_plain_column_names(tmp_path):
    page = report(tmp_path, [record(n, **GEMINI) for n in range(3)])
    assert headings(page, "Predicted against billed") == [
        "model", "tokens", "calls", "exact", "predicted", "billed", "mean error (tokens)", "median error",
        "largest error"]  # fmt: skip
    assert "relative_error" not in page
    assert "-300.0%" in page  # image tokens: (258 - 1032) / 258, as `mmtok ledger` prints it


def test_worst_cases_show_each_calls_error(tmp_path):
    page = report(tmp_path, [record(n, **GEMINI) for n in range(3)])
    assert headings(page, "Worst cases") == [
        "model", "tokens", "time (UTC)", "images (px)", "predicted", "billed", "error (tokens)", "error",
        "call id"]  # fmt: skip
    assert "<td class=n>-774</td><td class=n>-300.0%</td>" in page


def test_the_figures_keep_their_text_legible_and_the_page_links_the_data(tmp_path):
    report(tmp_path, [record(n) for n in range(4)] + [record(10 + n, **GEMINI) for n in range(3)])
    folder = tmp_path / "report"
    assert {p.name for p in folder.glob("*.png")} == {"spend.png", "accuracy.png", "errors.png"}
    for figure in folder.glob("*.png"):
        assert min_font_px(figure.read_bytes()) >= 13.7, figure.name  # 9 pt at 110 dpi
    page = (folder / "index.html").read_text()
    assert "above the dashed line the bill was higher" in page
    assert "<a href='calls.csv'>" in page and "<a href='summary.json'>" in page
