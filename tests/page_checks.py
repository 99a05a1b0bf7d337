"""What a reader sees on a page, measured in the browser (tests/browser.py): its length, the widest table against
the column it sits in, code blocks that run past their box, list items that Markdown folded into a paragraph, the
longest paragraph, and each figure's size as shown against its natural size. Used by tests/test_docs_browser.py and
by tests/docs_look.py (the before/after figures in eval/results/docs_look/)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

# One pass over the page; returns plain data. The column is the content box of the article (docs pages) or of the
# body (reports); a table is too wide when its box is wider than that column.
MEASURE_JS = r"""
(() => {
  const column = document.querySelector('article') || document.body;
  const style = getComputedStyle(column);
  const columnWidth = column.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const words = (text) => (text.match(/\S+/g) || []).length;
  const lines = (el) => {  // how many lines the element's text takes
    const range = document.createRange();
    range.selectNodeContents(el);
    return new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top))).size;
  };
  const label = (el) => (el.innerText || '').trim().replace(/\s+/g, ' ').slice(0, 80);
  const tables = [...column.querySelectorAll('table')].map((t) => ({
    width: Math.round(Math.max(t.getBoundingClientRect().width, t.scrollWidth)),
    top: Math.round(t.getBoundingClientRect().top + scrollY),
    height: Math.round(t.getBoundingClientRect().height), columns: t.rows[0] ? t.rows[0].cells.length : 0,
    rows: t.rows.length, head: label(t.rows[0] || t),
    wrapped_first_cells: [...t.rows].slice(1).filter((r) => r.cells[0] && !/\s/.test(r.cells[0].innerText.trim()) &&
      lines(r.cells[0]) > 1).map((r) => label(r.cells[0])),
  }));
  const code = [...column.querySelectorAll('pre')].map((pre) => {
    const inner = pre.querySelector('code') || pre;
    // Material scrolls inside pre > code (a block); a plain page scrolls the pre itself: either hides the line's end.
    const overflow = Math.max(pre.scrollWidth - pre.clientWidth, inner.scrollWidth - inner.clientWidth);
    return {overflow, width: Math.round(pre.getBoundingClientRect().width),
            first: (inner.innerText.split('\n')[0] || '').slice(0, 80)};
  });
  const paragraphs = [...column.querySelectorAll('p')];
  const folded = paragraphs.filter((p) => /\n\s*([-*+]|\d+[.)])\s+\S/.test(p.textContent)).map(label);
  const images = [...column.querySelectorAll('img')].map((img) => ({
    src: img.currentSrc || img.src, natural: img.naturalWidth, shown: Math.round(img.getBoundingClientRect().width),
  }));
  // Words between headings, and what comes before the first section heading (h2): its words, a code block, a table.
  const sections = [];
  let words_here = 0, seen_h2 = false, heading = document.title;
  const intro = {words: 0, code: false, table: false, words_before_code: null};
  for (const el of column.children) {
    if (/^H[1-4]$/.test(el.tagName)) {
      if (el.tagName !== 'H1') { sections.push({heading, words: words_here}); words_here = 0; }
      heading = label(el);
      if (el.tagName === 'H2') seen_h2 = true;
      continue;
    }
    const n = words(el.innerText || '');
    words_here += n;
    if (!seen_h2) {
      const code = el.matches('pre, div.highlight') || !!el.querySelector('pre');
      if (code && !intro.code) intro.words_before_code = intro.words;
      intro.words += n;
      intro.code = intro.code || code;
      intro.table = intro.table || el.matches('table') || !!el.querySelector('table');
    }
  }
  sections.push({heading, words: words_here});
  return {
    title: document.title, sections, intro,
    first_table_top: tables.length ? tables[0].top : null,
    height: document.documentElement.scrollHeight, column: Math.round(columnWidth),
    words: words(column.innerText), headings: column.querySelectorAll('h2, h3, h4').length,
    longest_paragraph: Math.max(0, ...paragraphs.map((p) => words(p.innerText))),
    long_paragraphs: paragraphs.filter((p) => words(p.innerText) > 100).map((p) => [words(p.innerText), label(p)]),
    tables, code, folded_lists: folded, images,
  };
})()
"""


def wide_tables(measure: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in measure["tables"] if t["width"] > measure["column"] + 1]


def wide_code(measure: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in measure["code"] if c["overflow"] > 1 or c["width"] > measure["column"] + 1]


def widest_table(measure: dict[str, Any]) -> dict[str, Any] | None:
    return max(measure["tables"], key=lambda t: t["width"], default=None)


def min_font_px(png: bytes) -> float | None:
    """The smallest text of a figure in its own pixels, as mmtok.figures.save_png records it in the PNG (text
    chunk ``min_font_px``); None for a PNG that does not say."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        value = image.info.get("min_font_px")
    return float(value) if value is not None else None


def small_figure_text(measure: dict[str, Any], read: Any, least_px: float = 9.0) -> list[str]:
    """Figures whose smallest text is under ``least_px`` CSS pixels as shown (the size shown over the natural size,
    times the figure's own smallest text), or that do not say how small their text is. ``read(url)`` gives the
    image's bytes."""
    problems = []
    for image in measure["images"]:
        if not image["src"].endswith(".png") or not image["natural"]:
            continue
        smallest = min_font_px(read(image["src"]))
        name = Path(image["src"]).name
        if smallest is None:
            problems.append(f"{name}: no min_font_px in the PNG (save it with mmtok.figures.save_png)")
            continue
        shown = smallest * image["shown"] / image["natural"]
        if shown < least_px:
            problems.append(f"{name}: text {shown:.1f} px as shown ({image['shown']} of {image['natural']} px wide)")
    return problems
