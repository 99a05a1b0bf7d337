"""Reading mmtok's TOML files (configs, specs, suites, price sheets) with one-line errors that name the file."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, MmtokError


def read_toml(path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError) -> dict[str, Any]:
    """``path`` parsed as TOML; unreadable, non-UTF-8 or malformed files raise ``error`` naming ``what`` it is."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: {what} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: invalid TOML: {e}") from None
