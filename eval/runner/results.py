"""A run folder's files, and its results file: rows read back (a torn last line cut off under the lock), rows
appended whole by one ``os.write`` each."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from mmtok.errors import EvalError

RESULTS = "results.jsonl"
SUITE = "suite.json"  # the suite's settings (to_dict), as shown in reports
FINGERPRINT = "fingerprint.json"  # the suite's settings and each item's content hash
LOCK = ".lock"  # flock'ed by the run's parent for the whole run


def read_results(out: Path) -> dict[str, dict[str, Any]]:
    """The last result row of each item id (a re-run item appends a newer row). A last line without its newline
    (a write cut by a crash, or one in progress) does not count; a malformed line before it is an error."""
    rows: dict[str, dict[str, Any]] = {}
    for row in _rows(Path(out) / RESULTS):
        rows[row["id"]] = row
    return rows


def _rows(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete row of a results file. ``repair`` (only under the run's lock: no one is writing) cuts a torn
    last line off the file, so that the next row does not get glued onto it; its item is then done again."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(info.st_mode):
        raise EvalError(f"{path}: not a regular file")
    with open(path, "r+b" if repair else "rb") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            if repair:
                f.truncate(end)
            data = data[:end]
    rows = []
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not _well_typed(row):
            raise EvalError(
                f"{path}:{n}: not a result row (a JSON object with a string 'id', whole-number tokens and finite "
                "numbers for metrics); remove or fix that line, then resume (its item is done again)"
            )
        rows.append(row)
    return rows


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _well_typed(row: dict[str, Any]) -> bool:
    """The fields the summary and the report compute with are of the kind a run writes."""
    tokens, metrics, seconds = row.get("tokens"), row.get("metrics", {}), row.get("seconds")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        return False
    if seconds is not None and not _finite(seconds):
        return False
    if not isinstance(metrics, dict):
        return False
    return all(v is None or _finite(v) for v in metrics.values())


class ResultWriter:
    """Appends rows to results.jsonl, each as one ``os.write`` of a whole line on an ``O_APPEND`` descriptor."""

    def __init__(self, out: Path) -> None:
        self.fd = os.open(out / RESULTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row, default=str) + "\n").encode()
        written = os.write(self.fd, line)
        if written != len(line):  # a full disk: the torn line is cut off on resume
            raise EvalError(f"results.jsonl: only {written} of {len(line)} bytes of a row were written (disk full?)")

    def close(self) -> None:
        os.close(self.fd)


def _features_path(out: Path, item_id: str) -> Path:
    return out / "features" / f"{hashlib.sha1(item_id.encode()).hexdigest()[:16]}.safetensors"
