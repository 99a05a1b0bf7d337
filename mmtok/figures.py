"""Figures as mmtok writes them (reports, docs): PNGs that record the size of their smallest text, so a page that
shows one can be checked for legibility at the size it is shown (tests/test_docs_browser.py: the smallest text
times the shown width over the natural width must be at least 9 CSS pixels).

matplotlib is imported when a figure is saved, never by ``import mmtok``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

MIN_FONT_KEY = "min_font_px"  # the PNG text chunk that holds the smallest text's height in the image's pixels
DPI = 110  # every report figure: 110 dots per inch, so a 10-point label is 15 px tall at natural size


def smallest_text_px(fig: Any, dpi: float) -> float:
    """The font size of the smallest visible, non-empty text in ``fig``, in pixels of an image saved at ``dpi``."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes, default=0.0) * dpi / 72


def save_png(fig: Any, path: str | os.PathLike[str], dpi: float = DPI) -> Path:
    """``fig`` as a PNG at ``path`` with its smallest text's size in pixels in the ``min_font_px`` text chunk."""
    metadata = {MIN_FONT_KEY: f"{smallest_text_px(fig, dpi):.1f}"}
    fig.savefig(path, format="png", dpi=dpi, metadata=metadata)
    return Path(path)
