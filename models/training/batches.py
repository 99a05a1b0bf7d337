"""The order a trainer's data comes in, made resumable at any batch."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mmtok.errors import ConfigError


class ShuffledBatches:
    """Endless batches of a map-style dataset in the order ``DataLoader(shuffle=True, drop_last=True,
    generator=torch.Generator().manual_seed(seed))`` gives epoch after epoch, or with ``world_size > 1`` in
    ``DistributedSampler(shuffle=True, seed=seed)``'s order for this rank (``set_epoch`` each epoch), that can start
    at any batch: ``taken`` (a tensor the loop checkpoints) counts the batches handed out, and a resumed run's
    first batch is the one an uninterrupted run would have drawn next."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        seed: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
    ) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.collate_fn, self.num_workers = collate_fn, num_workers
        self.taken = torch.zeros((), dtype=torch.int64)
        self._batches: Iterator[Any] | None = None
        size = len(dataset)
        per_rank = math.ceil(size / world_size) if world_size > 1 else size
        if per_rank < batch_size:
            where = f" on each of {world_size} processes" if world_size > 1 else ""
            raise ConfigError(f"{size} training samples are too few for one batch of {batch_size}{where}")

    def _index_batches(self, start: int) -> Iterator[list[int]]:
        size, b = len(self.dataset), self.batch_size
        if self.world_size > 1:  # DistributedSampler: a permutation per epoch, padded, then every world-th index
            total = math.ceil(size / self.world_size) * self.world_size
            per_epoch = (total // self.world_size) // b
            epoch, offset = divmod(start, per_epoch)
            while True:
                order = torch.randperm(size, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
                order = (order * math.ceil(total / size))[:total][self.rank : total : self.world_size]
                for i in range(offset, per_epoch):
                    yield order[i * b : (i + 1) * b]
                epoch, offset = epoch + 1, 0
        # DataLoader(shuffle=True, generator=g), re-iterated each epoch, draws from g: a base seed for its workers,
        # the epoch's permutation, and one more permutation when the sampler runs out (RandomSampler's tail)
        generator = torch.Generator().manual_seed(self.seed)
        epoch, offset = divmod(start, size // b)
        for _ in range(epoch):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            torch.randperm(size, generator=generator)
            torch.randperm(size, generator=generator)
        while True:
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            order = torch.randperm(size, generator=generator).tolist()
            for i in range(offset, size // b):
                yield order[i * b : (i + 1) * b]
            torch.randperm(size, generator=generator)
            offset = 0

    def __iter__(self) -> ShuffledBatches:
        return self

    def __next__(self) -> Any:
        if self._batches is None:  # started on first use, after a resume has restored ``taken``
            from torch.utils.data import DataLoader

            loader = DataLoader(
                self.dataset,
                batch_sampler=self._index_batches(int(self.taken)),
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                generator=torch.Generator(),  # the workers' base seed; never torch's global generator
            )
            self._batches = iter(loader)
        batch = next(self._batches)
        self.taken += 1
        return batch
