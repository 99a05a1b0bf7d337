"""Resumable, sharded evaluation runs: ``mmtok eval run SUITE --out runs/NAME [--resume] [--workers N]``.

A run folder holds ``results.jsonl`` (one row per evaluated item), ``suite.json`` (the suite's settings),
``fingerprint.json`` (those settings and each item's content hash), ``summary.json`` and ``.lock``.

- Exactly once: each finished item is appended as one line written by a single ``os.write`` on an ``O_APPEND``
  descriptor; a crash (even SIGKILL) loses at most the item in flight. A torn last line (no newline) is cut off
  when the run is resumed and its item done again; a malformed line before it is an error naming the line. Every
  row carries the hash of what it was computed from (item content + pipeline and metrics settings); the summary
  takes the last row of each of the suite's items whose hash is current, so nothing is counted twice or mixed.
- ``--resume`` skips items with a current row (failed ones too, unless ``--retry-errors``). A suite that changed
  is refused, naming what changed, unless ``--rerun-changed``: then only the affected items run again.
- One run per folder: the parent holds an ``flock`` on ``.lock`` for the whole run; workers die with it.
- Items to do are split over workers (``todo[rank::world]``): local processes (``--workers N``) or ``torchrun``
  ranks (rank 0 locks, checks and repairs the folder and tells every rank what to do).
- Anything that goes wrong in an item is recorded as its error and the run goes on; the summary counts ok,
  failed and missing items against the suite.

The package's parts: ``results`` (the results file), ``items`` (one item evaluated), ``workers``, ``folder`` (the lock,
the fingerprint, what is still to do), ``batch`` (``run``) and ``summary``.
"""

from mmtok.eval.runner.batch import check_pipeline, run
from mmtok.eval.runner.folder import RunLock
from mmtok.eval.runner.items import Context, evaluate_item, item_error
from mmtok.eval.runner.results import FINGERPRINT, LOCK, RESULTS, SUITE, ResultWriter, read_results
from mmtok.eval.runner.summary import SUITE_METRICS, current_rows, summarize
from mmtok.eval.runner.workers import Shard, die_with_parent, run_shard

__all__ = [
    "FINGERPRINT",
    "LOCK",
    "RESULTS",
    "SUITE",
    "SUITE_METRICS",
    "Context",
    "ResultWriter",
    "RunLock",
    "Shard",
    "check_pipeline",
    "current_rows",
    "die_with_parent",
    "evaluate_item",
    "item_error",
    "read_results",
    "run",
    "run_shard",
    "summarize",
]
