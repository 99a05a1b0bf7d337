"""The user cache folder: converted assets, price-data snapshots, judge replies, planner measurements.

``platformdirs.user_cache_dir("mmtok")`` (``~/.cache/mmtok`` on Linux), or ``MMTOK_CACHE_DIR`` when set. Never
inside the installed package, which may be read-only.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``<cache root>/<parts...>``, created if missing."""
    root = os.environ.get("MMTOK_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("mmtok", appauthor=False)
    folder = Path(root, *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
