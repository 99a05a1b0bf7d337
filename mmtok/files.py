"""Reading mmtok's data files (configs, specs, suites, price sheets, manifests) and writing them atomically.

Every reader refuses what is not a regular file (a FIFO would block, a device would never end) and anything
larger than its limit before reading a byte, and turns every decoding failure into one line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, MmtokError

MAX_DATA_FILE_BYTES = 64 * 1024 * 1024  # configs, specs, suites and sheets are small; LiteLLM's map is ~1.5 MB


def read_text(
    path: str | os.PathLike[str],
    what: str,
    error: type[MmtokError] = ConfigError,
    max_bytes: int = MAX_DATA_FILE_BYTES,
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; anything else raises ``error`` naming ``what``."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {what} is not a regular file")
    if info.st_size > max_bytes:
        raise error(f"{path}: {what} is {info.st_size:,} bytes, over the {max_bytes:,}-byte limit")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None
    if len(data) > max_bytes:
        raise error(f"{path}: {what} grew past the {max_bytes:,}-byte limit while being read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: {what} is not UTF-8 text") from None


def read_toml(path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError) -> dict[str, Any]:
    """``path`` parsed as TOML; unreadable, non-UTF-8 or malformed files raise ``error`` naming ``what`` it is."""
    text = read_text(path, what, error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise error(f"{path}: invalid TOML: nested too deeply") from None


def parse_json(text: str | bytes, where: str, error: type[MmtokError] = ConfigError) -> Any:
    """JSON text parsed, with malformed or absurdly nested input raised as ``error`` naming ``where``."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{where}: not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deeply") from None


def read_json(
    path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError, max_bytes: int = MAX_DATA_FILE_BYTES
) -> Any:
    return parse_json(read_text(path, what, error, max_bytes), str(path), error)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename: readers see the old
    file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide a shared sheet or report from its readers
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path
