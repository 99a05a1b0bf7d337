"""What a run shows and keeps of its progress: a progress bar with live metrics on rank 0 and ``train_log.jsonl``
in the output folder, cut back to the checkpoint when a run resumes."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def cut_log(path: Path, step: int) -> None:
    """Drop the records a stopped run logged after its last checkpoint (a resumed run logs those steps again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if _logged_at(line) <= step]
    partial = path.with_suffix(".partial")
    partial.write_text("".join(kept), encoding="utf-8")
    os.replace(partial, path)


def _logged_at(line: str) -> float:
    try:
        return float(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return math.inf  # a torn last line


class TrainLog:
    """Progress bar with live metrics on rank 0, plus ``train_log.jsonl`` in the output folder."""

    def __init__(
        self, out: Path, total_steps: int, start_step: int, enabled: bool, title: str, elapsed: float = 0.0
    ) -> None:
        self.enabled = enabled
        self.out = out
        self.started = time.perf_counter() - elapsed  # a resumed run's seconds go on from the checkpoint's
        self.bar = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        # a resumed run goes on with its log (cut back to its checkpoint); a run from step 0 starts a new one, so
        # the log of an earlier run in the same folder is never mixed into this one's
        self.log = (out / "train_log.jsonl").open("a" if start_step > 0 else "w", encoding="utf-8")
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn(title),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task(title, total=total_steps, completed=start_step, metrics="")

    def step(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        if not self.enabled:
            return
        if metrics:
            text = "  ".join(f"{k} {v:.4g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in metrics.items())
            self.bar.update(self.task, completed=step, metrics=text)
            record = {"step": step, "seconds": round(time.perf_counter() - self.started, 2), **metrics}
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        else:
            self.bar.update(self.task, completed=step)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
            self.log.close()
