"""How the docs and the reports look to a reader, before and after a change: screenshots of Pricing, Shrink, Results,
the ledger's HTML report and a planning report in headless Chromium at 1,280 px, and their measures (page length,
widest table against its column, code blocks past their box, lists folded into paragraphs) in a small JSON.

    python -m tests.docs_look --label after          # writes eval/results/docs_look/after-*.png and looks.json

The site is built offline into a temporary folder, the ledger report is written from the example ledger in
eval/results/, and the planning report is the shipped voice-and-photos example.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from tests.browser import Browser, Page
from tests.docs_pages import ROOT
from tests.docs_site import build_site, serve, write_ledger_report
from tests.page_checks import MEASURE_JS, wide_code, wide_tables, widest_table

PAGES = {
    "pricing": "site/pricing/",
    "shrink": "site/shrink/",
    "results": "site/results/",
    "ledger-report": "ledger/index.html",
    "plan-report": "site/budgets/examples/reports/voice-and-photos/report.html",
}
# Sections shot on their own, by their heading: the ones the issue named (What shrink saves: 9 columns x 29 rows;
# the VQ tables and figure).
SECTIONS = {"results": ("What shrink saves", "Image tokenizers on held-out photos")}
HEADING_TOP_JS = """(text) => { const h = [...document.querySelectorAll('h2, h3')].find((e) => e.innerText.trim()
  .replace(/¶$/, '').trim() === text); return h ? Math.round(h.getBoundingClientRect().top + scrollY) : null; }"""
SHOT_HEIGHT_PX = 1600  # the first screens of a page; the whole length is in the JSON
TABLE_MARGIN_PX = 120  # above the widest table in its own shot: the heading or sentence that leads into it


def shot(page: Page, path: Path, top: int) -> Path:
    """A PNG of ``SHOT_HEIGHT_PX`` CSS pixels of the page from ``top`` (the whole width)."""
    size = page.send("Page.getLayoutMetrics")["cssContentSize"]
    top = max(0, min(top, size["height"] - 1))
    clip = {"x": 0, "y": top, "width": size["width"], "height": min(SHOT_HEIGHT_PX, size["height"] - top), "scale": 1}
    data = page.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
    with Image.open(io.BytesIO(base64.b64decode(data))) as image:  # 256 colours: a page shot at 40% of its bytes
        image.convert("RGB").quantize(256, Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def summary(measure: dict[str, Any]) -> dict[str, Any]:
    widest = widest_table(measure)
    return {
        "height_px": measure["height"],
        "column_px": measure["column"],
        "words": measure["words"],
        "headings": measure["headings"],
        "longest_paragraph_words": measure["longest_paragraph"],
        "tables": len(measure["tables"]),
        "tables_wider_than_column": len(wide_tables(measure)),
        "widest_table_px": widest["width"] if widest else None,
        "widest_table": widest["head"] if widest else None,
        "code_blocks_past_their_box": len(wide_code(measure)),
        "lists_folded_into_paragraphs": len(measure["folded_lists"]),
    }


def look(label: str, out: Path, work: Path, pages: list[str]) -> dict[str, Any]:
    roots = {"site": build_site(work / "site"), "ledger": write_ledger_report(work / "ledger")}
    results = {}
    with serve(roots) as base, Browser() as browser:
        for name, path in PAGES.items():
            if name not in pages:
                continue
            page = browser.open(base + path)
            measure = page.evaluate(MEASURE_JS)
            results[name] = summary(measure)
            shot(page, out / f"{label}-{name}.png", 0)
            widest = widest_table(measure)
            if widest and widest["top"] > SHOT_HEIGHT_PX - widest["height"]:  # not in the first screens: its own shot
                shot(page, out / f"{label}-{name}-widest-table.png", widest["top"] - TABLE_MARGIN_PX)
            for heading in SECTIONS.get(name, ()):
                top = page.evaluate(f"({HEADING_TOP_JS})({json.dumps(heading)})")
                if top is not None:
                    slug = heading.lower().replace(" ", "-")
                    shot(page, out / f"{label}-{name}-{slug}.png", top - TABLE_MARGIN_PX // 2)
            page.close()
    return results


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="before or after: the prefix of the screenshots")
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "docs_look")
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES), help="default: all five")
    parser.add_argument("--shots-only", action="store_true", help="take the screenshots, leave looks.json as it is")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mmtok-docs-look-") as work:
        measured = look(args.label, args.out, Path(work), args.pages)
    if args.shots_only:
        return
    path = args.out / "looks.json"
    looks = json.loads(path.read_text()) if path.is_file() else {}
    looks[args.label] = measured
    path.write_text(json.dumps(looks, indent=2) + "\n")
    for name, figures in measured.items():
        print(f"{args.label} {name}: {figures}")


if __name__ == "__main__":
    main()
