"""Workers: each evaluates its share of the items to do and appends one row per item; a worker ends with the run
that started it."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmtok.eval.runner.items import Context, evaluate_item, item_error
from mmtok.eval.runner.results import ResultWriter
from mmtok.eval.suite import Suite

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Shard:
    """One worker's share of a run: ``todo[rank::world]`` of the items to do, evaluated on ``threads`` torch
    threads and appended to the results in the run folder ``out``. Picklable: a spawned worker receives it."""

    suite: Suite
    out: str  # the run folder
    todo: list[tuple[dict[str, Any], str]]  # each item to do, with the hash its row records (what it is computed from)
    rank: int
    world: int
    threads: int


def die_with_parent(parent_pid: int) -> None:
    """Make this worker process end when ``parent_pid`` (the run that holds the lock) does: on Linux the kernel
    sends SIGKILL when the parent goes (``PR_SET_PDEATHSIG``); then (and elsewhere) the parent is checked, which
    covers a parent that died before the call."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the check below and the one before each item still hold
    if os.getppid() != parent_pid:
        os._exit(1)


def _worker(shard: Shard, parent: int, failures: Any = None) -> None:
    """A local worker process: its share of the items; what stops it (a full disk) goes to the run as one line
    through ``failures`` (a pipe's sending end), and the process exits 1 without a traceback."""
    die_with_parent(parent)
    try:
        run_shard(shard, parent_pid=parent)
    except Exception as e:
        if failures is not None:
            failures.send(f"worker {shard.rank}: {_stopped_by(e)}")
        sys.exit(1)


def _stopped_by(error: Exception) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename}: {error.strerror}" if error.filename else error.strerror
    return item_error(error)


def run_shard(
    shard: Shard,
    parent_pid: int | None = None,
    ctx: Context | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Evaluate this worker's share (``todo[rank::world]``) of the items to do. A worker whose parent
    (``parent_pid``) is gone stops before its next item: the folder's lock is no longer held, so it must not write.
    ``ctx``: models already loaded in this process (by :func:`check_pipeline`). ``stop``, once set, ends the shard
    before its next item (Ctrl-C)."""
    torch.set_num_threads(max(1, shard.threads))
    out_dir = Path(shard.out)
    ctx = ctx or Context(shard.suite, out_dir)
    writer = ResultWriter(out_dir)
    try:
        for item, computed_from in shard.todo[shard.rank :: shard.world]:
            if (parent_pid is not None and os.getppid() != parent_pid) or (stop is not None and stop.is_set()):
                return
            started = time.perf_counter()
            try:
                row = evaluate_item(item, ctx)
                json.dumps(row, default=str)  # a row that cannot be written is this item's error too
                error = None
            except Exception as e:  # whatever goes wrong in one item is that item's error
                row, error = {}, item_error(e)
            writer.write(
                {
                    "id": item["id"],
                    **row,
                    "error": error,
                    "hash": computed_from,
                    "worker": shard.rank,
                    "seconds": round(time.perf_counter() - started, 3),
                }
            )
    finally:
        writer.close()
