"""The user cache folder: converted assets, price-data snapshots, judge replies, planner measurements.

``platformdirs.user_cache_dir("mmtok")`` (``~/.cache/mmtok`` on Linux), or ``MMTOK_CACHE_DIR`` when set. Never
inside the installed package, which may be read-only. A cache only saves time: when its folder cannot be created
or written (a read-only home, a full disk, a path through a file), the process caches in a private temporary
folder instead, removed when it ends, and says so once as a warning.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import warnings
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``<cache root>/<parts...>``, created if missing (in this process's stand-in when the root cannot be written)."""
    root = os.environ.get("MMTOK_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("mmtok", appauthor=False)
    folder = Path(root, *parts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
        return folder
    except OSError as e:
        folder = _stand_in(root, e.strerror or str(e)).joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder


@functools.cache
def _stand_in(root: str, reason: str) -> Path:
    """A private temporary cache folder for this process, in place of ``root``, which cannot be written."""
    folder = Path(tempfile.mkdtemp(prefix="mmtok-cache-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    warnings.warn(
        f"the cache folder {root} cannot be written ({reason}); this run caches in {folder}, removed at its end "
        "(set MMTOK_CACHE_DIR to a folder you can write to keep the cache)",
        stacklevel=3,
    )
    return folder
