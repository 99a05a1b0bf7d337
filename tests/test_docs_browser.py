"""The docs site and the reports, as a reader sees them in a real browser (headless Chromium at 1,280 x 900 px,
tests/browser.py): every page of the site, the ledger's HTML report and the shipped planning reports. Nothing is
folded into a paragraph that was meant as a list, no table or code block is wider than its column, no figure's text
is under 9 px as shown, nothing logs an error, and the docs pages are written to be scanned (a how-to and a command
before the first section, a heading at least every ~400 words, no paragraph over ~100 words).

A screenshot of each page is kept in ``test-output/docs-PAGE.png`` (``MMTOK_TEST_OUTPUT`` moves it)."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Browser, artifact
from tests.docs_site import build_site, serve, write_ledger_report
from tests.page_checks import MEASURE_JS, small_figure_text, wide_code, wide_tables

REPORTS = {
    "ledger-report": "ledger/index.html",
    "plan-voice-and-photos": "site/budgets/examples/reports/voice-and-photos/report.html",
    "plan-my-inputs": "site/budgets/examples/reports/my-inputs/report.html",
}
# A page's first screen: a how-to in a few lines and its first command, before the first section. Results opens with
# its summary table instead, and the changelog is a list of dated entries.
NO_FIRST_COMMAND = {"results", "changelog"}
SECTION_WORDS = 450  # "a heading at least every ~400 words"
PARAGRAPH_WORDS = 110  # "no paragraph over ~100 words"
INTRO_WORDS = 160  # "a few lines of how-to" before the first command


@pytest.fixture(scope="module")
def looked(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every page opened once: its measures (tests/page_checks.py), console errors and the figures' text sizes."""
    work = tmp_path_factory.mktemp("docs-browser")
    site = build_site(work / "site")
    roots = {"site": site, "ledger": write_ledger_report(work / "ledger")}
    pages = {"home": "site/index.html"} | {p.parent.name: f"site/{p.parent.name}/" for p in site.glob("*/index.html")}
    seen = {}
    with serve(roots) as base, Browser() as browser:
        for name, path in {**pages, **REPORTS}.items():
            page = browser.open(base + path)
            measure = page.evaluate(MEASURE_JS)
            measure["errors"] = page.errors()
            measure["small_text"] = small_figure_text(measure, lambda url: urllib.request.urlopen(url).read())
            measure["docs_page"] = name in pages
            page.screenshot(artifact(f"docs-{name}.png"))
            page.close()
            seen[name] = measure
    return seen


def no_failures(looked: dict[str, dict[str, Any]], check: Any) -> None:
    """``check(measure)`` is empty on every page; else fail with one line per page and what it found."""
    found = {name: check(measure) for name, measure in looked.items()}
    lines = [f"{name}: {problem}" for name, problem in found.items() if problem]
    assert not lines, "\n".join(lines)


def test_every_page_of_the_site_and_the_reports_was_opened(looked):
    assert {"home", "pricing", "shrink", "results", "proxy", "changelog", *REPORTS} <= set(looked)
    assert all(m["height"] > 300 for m in looked.values())


def test_no_page_logs_an_error(looked):
    no_failures(looked, lambda m: m["errors"])


def test_no_list_is_folded_into_a_paragraph(looked):
    no_failures(looked, lambda m: m["folded_lists"])


def test_tables_fit_their_column_at_1280_px(looked):
    no_failures(looked, lambda m: [(t["width"], m["column"], t["head"]) for t in wide_tables(m)])


def test_first_columns_keep_their_names_on_one_line(looked):
    no_failures(looked, lambda m: [c for t in m["tables"] for c in t["wrapped_first_cells"]])


def test_code_blocks_fit_or_wrap_in_their_column(looked):
    no_failures(looked, lambda m: [c["first"] for c in wide_code(m)])


def test_figure_text_is_at_least_9_px_as_shown(looked):
    no_failures(looked, lambda m: m["small_text"])


def test_docs_pages_open_with_a_how_to_and_a_command(looked):
    def problem(m: dict[str, Any]) -> str:
        intro = m["intro"]
        if not m["docs_page"] or m["title"].split(" - ")[0].lower() in NO_FIRST_COMMAND:
            return ""
        if not intro["code"]:
            return "no command before the first section"
        before = intro["words_before_code"]
        return f"{before} words before the first command" if before > INTRO_WORDS else ""

    no_failures(looked, problem)


def test_results_open_with_a_summary_table_on_the_first_screen(looked):
    results = looked["results"]
    assert results["first_table_top"] < 900 and results["tables"][0]["rows"] >= 20
    assert results["tables"][0]["head"].startswith("measure result target")


def test_docs_pages_have_a_heading_every_400_words_and_short_paragraphs(looked):
    def problem(m: dict[str, Any]) -> list[str]:
        if not m["docs_page"]:
            return []
        long = [f"{s['words']} words under '{s['heading']}'" for s in m["sections"] if s["words"] > SECTION_WORDS]
        return long + [f"paragraph of {n} words: {text}" for n, text in m["long_paragraphs"] if n > PARAGRAPH_WORDS]

    no_failures(looked, problem)


def test_screenshots_are_kept(looked):
    shots = [artifact(f"docs-{name}.png") for name in looked]
    assert all(Path(s).stat().st_size > 10_000 for s in shots)


BAD_PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"><style>
body{margin:0}article{width:400px;padding:0 10px}td{white-space:nowrap}pre{overflow:auto}</style></head><body><article>
<p>Defaults: one, two.
- <code>--lossless</code>: the same tokens
- <code>--slice</code>: pieces</p>
<table><tr><th>model</th><th>a long heading</th><th>another long heading</th></tr>
<tr><td>gemini-3-flash-preview</td><td>a cell that will not wrap at all here</td><td>1</td></tr></table>
<pre><code>mmtok price a-very-long-line-of-arguments --that --runs --past --the --edge --of --its -m gpt-4o</code></pre>
<img src="small.png">
</article></body></html>"""


def test_the_checks_catch_a_folded_list_a_wide_table_wide_code_and_small_figure_text(tmp_path):
    """The checks above are only as good as what they detect: a page with one of each problem fails each of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mmtok.figures import save_png

    (tmp_path / "page.html").write_text(BAD_PAGE)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("tiny", fontsize=5)
    ax.tick_params(labelsize=5)
    save_png(fig, tmp_path / "small.png")  # 5 pt at 110 dpi: 7.6 px at natural size
    plt.close(fig)
    with serve({"bad": tmp_path}) as base, Browser() as browser:
        page = browser.open(base + "bad/page.html")
        measure = page.evaluate(MEASURE_JS)
        small = small_figure_text(measure, lambda url: urllib.request.urlopen(url).read())
    assert measure["folded_lists"] and "Defaults" in measure["folded_lists"][0]
    assert wide_tables(measure) and wide_code(measure)
    assert small and "small.png: text" in small[0]
