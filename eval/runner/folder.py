"""The run folder: one run at a time (``RunLock``), checked against the suite, its fingerprint stored, and the
items still to do."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, EvalError, MmtokError
from mmtok.eval.runner.results import FINGERPRINT, LOCK, RESULTS, SUITE, _rows, open_in_run, read_results
from mmtok.eval.suite import (
    Suite,
    config_hash,
    describe_changes,
    expected_rows,
    fingerprint,
    item_hash,
    items,
    row_hash,
)
from mmtok.files import read_json, write_atomic


class RunLock:
    """An exclusive ``flock`` on ``.lock`` in the run folder, held by the run's parent process for the whole run
    (workers do not inherit it): a second run on the same folder is refused rather than writing every id twice.
    The kernel drops the lock when the holder ends, however it ends, so a stale lock never needs cleaning up; the
    file stays (it names the last holder's pid). A ``.lock`` that is a link or not a regular file is refused."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no lock (mmtok runs on Linux and macOS)
            return self
        fd = open_in_run(self.out_dir / LOCK, os.O_RDWR | os.O_CREAT)  # a link there is refused, never written
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"{self.out_dir}: another `mmtok eval run` (process {holder}) is writing to this run folder; "
                "wait for it to end, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


def _prepare(
    suite: Suite, out_dir: Path, *, resume: bool, rerun_changed: bool, retry_errors: bool
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """Check the run folder against the suite, repair a torn last line, store the suite's fingerprint; the items
    still to do. Called with the folder's lock held."""
    suite_items = items(suite)
    new = fingerprint(suite, suite_items)
    results = out_dir / RESULTS
    has_results = results.is_file() and results.stat().st_size > 0
    if has_results and not resume:
        raise ConfigError(
            f"{out_dir} already holds {len(read_results(out_dir))} results: pass --resume to continue, "
            "or choose another --out"
        )
    old = _stored_fingerprint(out_dir) if has_results else None
    rows = {row["id"]: row for row in _rows(results, repair=True)}  # the last row of each id
    if old is not None:
        changes = describe_changes(old, new)
        if changes and not rerun_changed:
            raise ConfigError(
                f"{out_dir}: the suite changed since these results were computed: {'; '.join(changes)}. "
                "Pass --rerun-changed to re-run the items it affects, or choose another --out"
            )
        if any("hash" not in row for row in rows.values()):
            rows = _stamp_legacy_rows(out_dir, old)
    expected = expected_rows(new)
    todo = []
    for item in suite_items:
        row = rows.get(item["id"], {})
        if row.get("hash") != expected[item["id"]] or (retry_errors and row.get("error")):
            todo.append((item, expected[item["id"]]))
    write_atomic(out_dir / SUITE, json.dumps(new["suite"], indent=2, default=str) + "\n")
    write_atomic(out_dir / FINGERPRINT, json.dumps(new, indent=1, default=str) + "\n")
    return new, todo


def _stored_fingerprint(out_dir: Path) -> dict[str, Any]:
    """The fingerprint of the suite the folder's results belong to. A folder written before fingerprints existed
    has only suite.json: its items are taken to be the current ones (their content was not recorded)."""
    if (out_dir / FINGERPRINT).is_file():
        fp = read_json(out_dir / FINGERPRINT, "run fingerprint", EvalError)
        if (
            not isinstance(fp, dict)
            or not isinstance(fp.get("suite"), dict)
            or not isinstance(fp.get("config"), str)
            or not isinstance(fp.get("items"), dict)
            or not all(isinstance(h, str) for h in fp["items"].values())
        ):
            raise EvalError(f"{out_dir / FINGERPRINT}: not a run fingerprint (remove it to rebuild it from {SUITE})")
        return fp
    if not (out_dir / SUITE).is_file():
        raise ConfigError(f"{out_dir}: holds {RESULTS} but no {SUITE}: cannot tell which suite its results belong to")
    stored = read_json(out_dir / SUITE, "run suite", EvalError)
    if not isinstance(stored, dict):
        raise EvalError(f"{out_dir / SUITE}: not a suite")
    old = Suite.from_dict(stored)
    return {"suite": stored, "config": config_hash(old), "items": {i["id"]: item_hash(i) for i in _items_or_none(old)}}


def _items_or_none(suite: Suite) -> list[dict[str, Any]]:
    try:
        return items(suite)
    except MmtokError:
        return []


def _stamp_legacy_rows(out_dir: Path, old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rows written before rows carried their hash get the hash of the suite they were computed with (rewritten
    once, atomically, under the run's lock)."""
    rows = _rows(out_dir / RESULTS)
    for row in rows:
        if "hash" not in row and row["id"] in old["items"]:
            row["hash"] = row_hash(old["config"], old["items"][row["id"]])
    write_atomic(out_dir / RESULTS, "".join(json.dumps(row, default=str) + "\n" for row in rows))
    return read_results(out_dir)
