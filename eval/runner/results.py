"""A run folder's files, and its results file: rows read back (a torn last line cut off under the lock), rows
appended whole by one ``os.write`` each."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, EvalError

RESULTS = "results.jsonl"
SUITE = "suite.json"  # the suite's settings (to_dict), as shown in reports
FINGERPRINT = "fingerprint.json"  # the suite's settings and each item's content hash
LOCK = ".lock"  # flock'ed by the run's parent for the whole run


MAX_ROW_BYTES = 16 << 20  # one line of results.jsonl (a row holds an item's metrics, transcripts, judge reply)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_in_run(path: Path, flags: int) -> int:
    """A file of the run folder, opened without following a symbolic link and without waiting on a FIFO: a folder
    someone else prepared cannot make mmtok read or change a file outside it. Anything but a regular file (a link,
    a FIFO, a device) is a ConfigError naming it; a missing file is FileNotFoundError (created with O_CREAT)."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(f"{path}: is a symbolic link; mmtok never writes a run's files through a link") from None
        if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise ConfigError(f"{path}: not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path}: not a regular file")
    return fd


def read_results(out: Path, ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The last result row of each item id (a re-run item appends a newer row), of ``ids`` only when given. A last
    line without its newline (a write cut by a crash, or one in progress) does not count; a malformed line before
    it is an error. Read a line at a time: memory holds the rows kept, not the file."""
    wanted = None if ids is None else set(ids)
    rows: dict[str, dict[str, Any]] = {}
    for row in iter_rows(Path(out) / RESULTS):
        if wanted is None or row["id"] in wanted:
            rows[row["id"]] = row
    return rows


def _rows(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    return list(iter_rows(path, repair))


def iter_rows(path: Path, repair: bool = False) -> Iterator[dict[str, Any]]:
    """Every complete row of a results file, in order. ``repair`` (only under the run's lock: no one is writing)
    cuts a torn last line off the file, so that the next row does not get glued onto it; its item is then done
    again. The file is opened without following a link (a link is refused before anything is cut)."""
    try:
        fd = open_in_run(path, os.O_RDWR if repair else os.O_RDONLY)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "rb") as f:
        end = 0  # just after the last complete line
        for n, line in enumerate(iter(lambda: f.readline(MAX_ROW_BYTES + 1), b""), 1):
            if not line.endswith(b"\n"):
                if len(line) > MAX_ROW_BYTES:
                    raise EvalError(f"{path}:{n}: a line over the {MAX_ROW_BYTES:,}-byte limit of a result row")
                if repair:
                    os.ftruncate(fd, end)
                return
            end += len(line)
            if line.strip():
                yield _row(line, path, n)


def _row(line: bytes, path: Path, n: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        row = None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not _well_typed(row):
        raise EvalError(
            f"{path}:{n}: not a result row (a JSON object with a string 'id', whole-number tokens and finite "
            "numbers for metrics); remove or fix that line, then resume (its item is done again)"
        )
    return row


class ResultTail:
    """How many of a run's items have their current row, read incrementally: each call reads only the lines
    appended since the last one (the progress bar asks every half second; re-reading the whole file each time
    cost 4.4 GB and 78 s on a 330 MB file)."""

    def __init__(self, path: Path, expected: dict[str, str]) -> None:
        self.path, self.expected = path, expected
        self.offset = 0
        self.current: dict[str, bool] = {}  # item id -> whether its last row carries the current hash

    def done(self) -> int:
        try:
            fd = open_in_run(self.path, os.O_RDONLY)
        except (FileNotFoundError, ConfigError):
            return sum(self.current.values())
        with os.fdopen(fd, "rb") as f:
            f.seek(self.offset)
            for line in iter(lambda: f.readline(MAX_ROW_BYTES + 1), b""):
                if not line.endswith(b"\n"):
                    break  # a row being written: read next time, whole
                self.offset += len(line)
                self._count(line)
        return sum(self.current.values())

    def _count(self, line: bytes) -> None:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            return
        if isinstance(row, dict) and row.get("id") in self.expected:
            self.current[row["id"]] = row.get("hash") == self.expected[row["id"]]


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
    """Appends rows to results.jsonl, each as one ``os.write`` of a whole line on an ``O_APPEND`` descriptor
    (opened without following a link: :func:`open_in_run`)."""

    def __init__(self, out: Path) -> None:
        self.path = out / RESULTS
        self.fd = open_in_run(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def write(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row, default=str) + "\n").encode()
        written = os.write(self.fd, line)
        if written != len(line):  # a full disk: the torn line is cut off on resume
            raise EvalError(f"{self.path}: only {written} of {len(line)} bytes of a row were written (disk full?)")

    def close(self) -> None:
        os.close(self.fd)


def _features_path(out: Path, item_id: str) -> Path:
    return out / "features" / f"{hashlib.sha1(item_id.encode()).hexdigest()[:16]}.safetensors"


def features_folder(out: Path) -> Path:
    """The run's ``features`` folder, created if missing; a link or a file there is refused (features are written
    only inside the run folder)."""
    folder = out / "features"
    try:
        folder.mkdir()
    except FileExistsError:
        if folder.is_symlink() or not folder.is_dir():
            raise ConfigError(
                f"{folder}: not a folder of this run (a link or a file); mmtok writes only inside it"
            ) from None
    return folder
