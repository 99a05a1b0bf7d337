"""Tokenize many files: batched, decoded in DataLoader workers, written in shards as they complete, resumable,
and split across processes (``torchrun``: each rank takes every WORLD_SIZE-th file).

    report = tokenize_folder(["photos/"], tokenizer, out="tokens/")

Output: ``<out>/shard-r<rank>-<n>.safetensors`` files, each holding up to ``shard_size`` sequences keyed by the
file's path. ``resume=True`` reads the keys of the shards already written and skips those files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from mmtok.errors import MediaError, MmtokError
from mmtok.media import iter_files


@dataclass
class TokenizeReport:
    done: int = 0
    skipped: int = 0  # already in shards (resume)
    failed: list[str] = field(default_factory=list)  # one line per bad input
    seconds: float = 0.0
    shards: list[str] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


class _Preprocessed(Dataset):
    def __init__(self, paths: list[Path], preprocess: Callable[[Path], tuple[torch.Tensor, dict]]) -> None:
        self.paths = paths
        self.preprocess = preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[str, torch.Tensor | None, Any]:
        try:
            x, meta = self.preprocess(self.paths[i])
            return str(self.paths[i]), x, meta
        except MmtokError as e:
            return str(self.paths[i]), None, str(e)
        except (MemoryError, RuntimeError, ValueError, OSError) as e:  # a decode too big for this machine, ...
            return str(self.paths[i]), None, f"{self.paths[i]}: cannot decode: {type(e).__name__}: {e}"


def _collate(items: list) -> list:
    return items


def done_keys(out: Path) -> set[str]:
    """Keys of every sequence already written in ``out``'s shards (headers only)."""
    import json

    from safetensors import safe_open

    keys: set[str] = set()
    for shard in sorted(out.glob("shard-*.safetensors")):
        try:
            with safe_open(str(shard), framework="pt") as f:
                keys |= set(json.loads(f.metadata()["mmtok"])["sequences"])
        except Exception:  # a shard cut short by a crash: its files are tokenized again
            continue
    return keys


def tokenize_folder(
    paths: Iterable[str | os.PathLike[str]],
    tokenizer: Any,
    out: str | os.PathLike[str],
    *,
    batch_size: int = 32,
    workers: int = 2,
    shard_size: int = 1024,
    resume: bool = False,
    image_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    on_error: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    postprocess: Callable[[Any], Any] | None = None,
) -> TokenizeReport:
    """Tokenize every image under ``paths`` into shards in ``out``; bad files are reported, never fatal.
    ``postprocess`` (e.g. truncation) is applied to each sequence before it is written."""
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = TokenizeReport()

    def failed(message: str) -> None:
        report.failed.append(message)
        if on_error:
            on_error(message)

    files = _files_to_do(paths, out, rank, world_size, resume, report, failed)
    loader = DataLoader(
        _Preprocessed(files, lambda path: tokenizer.preprocess(path, image_size)),
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=_collate,
        persistent_workers=False,
    )
    shards = _ShardWriter(out, rank, shard_size, report)
    started = time.perf_counter()
    for batch in loader:
        good = [(p, x, m) for p, x, m in batch if x is not None]
        for _, x, message in batch:
            if x is None:
                failed(message)
        if good:
            ids = tokenizer.encode_batch(torch.stack([x for _, x, _ in good])).cpu()
            for (p, _, meta), grid_ids in zip(good, ids, strict=True):
                seq = tokenizer.sequence(grid_ids, meta)
                shards.add(p, postprocess(seq) if postprocess else seq)
            report.done += len(good)
        if progress:
            progress(len(batch))
    shards.flush()
    report.seconds = time.perf_counter() - started
    return report


def _files_to_do(
    paths: Iterable[str | os.PathLike[str]],
    out: Path,
    rank: int,
    world_size: int,
    resume: bool,
    report: TokenizeReport,
    failed: Callable[[str], None],
) -> list[Path]:
    """This rank's share of the files under ``paths``, less those already in ``out``'s shards when resuming."""
    files: list[Path] = []
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            failed(str(item))
        else:
            files.append(item)
    files = files[rank::world_size]
    if resume:
        finished = done_keys(out)
        report.skipped = sum(1 for p in files if str(p) in finished)
        files = [p for p in files if str(p) not in finished]
    return files


class _ShardWriter:
    """Sequences collected into shards of ``shard_size``, numbered after the ones this rank already wrote."""

    def __init__(self, out: Path, rank: int, shard_size: int, report: TokenizeReport) -> None:
        self.out, self.rank, self.shard_size, self.report = out, rank, shard_size, report
        self.count = len(list(out.glob(f"shard-r{rank}-*.safetensors")))
        self.pending: dict[str, Any] = {}

    def add(self, key: str, seq: Any) -> None:
        self.pending[key] = seq
        if len(self.pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        from mmtok.tokens import save_sequences

        if self.pending:
            path = self.out / f"shard-r{self.rank}-{self.count:05d}.safetensors"
            save_sequences(path, self.pending)
            self.report.shards.append(str(path))
            self.count += 1
            self.pending.clear()
