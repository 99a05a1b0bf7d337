"""A batch file priced on several processes, in file order, in bounded memory.

This process reads the file (raw lines, or a JSON document's requests) and hands chunks of them to a pool of
worker processes, each with its own :class:`~mmtok.budgets.pricing.batch.LineQuoter`; at most
:data:`IN_FLIGHT_PER_WORKER` chunks per worker are out at once, so memory holds a few chunks whatever the file's size.
Results come back in file order; a repeated custom_id is found here, where every line passes
(:class:`mmtok.request.batch.FirstUse`). Workers are forked where the platform can (they start with the price data
this process already loaded), else spawned.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from mmtok.request.batch import BadLine, BatchFile, FirstUse, read_item

CHUNK_REQUESTS = 200  # requests per chunk handed to a worker
CHUNK_BYTES = 8 * 2**20  # or fewer, where they are large
IN_FLIGHT_PER_WORKER = 2

_WORKER: dict[str, Any] = {}  # the quoter and the file's format, in each worker process


def _start(config: dict[str, Any], format: str, provider: str, asked: Sequence[str]) -> None:
    from mmtok.budgets.pricing.batch import LineQuoter

    _WORKER.update(quoter=LineQuoter(**config), format=format, provider=provider, asked=list(asked))


def _price_chunk(chunk: list[tuple[int, Any]]) -> list[tuple[str | None, int, list[Any]]]:
    """Each request of a chunk read and priced: (its custom_id, None for a bad line; its size; its results)."""
    from mmtok.budgets.pricing.batch import line_results

    done = []
    for number, raw in chunk:
        line = read_item(raw, number, _WORKER["format"])
        results = line_results(line, _WORKER["asked"], _WORKER["quoter"], _WORKER["provider"])
        done.append((None if isinstance(line, BadLine) else line.custom_id, line.size_bytes, results))
    return done


def _chunks(batch: BatchFile, start: int) -> Iterator[list[tuple[int, Any]] | BadLine]:
    chunk: list[tuple[int, Any]] = []
    size = 0
    for item in batch.raw(start):
        if isinstance(item, BadLine):
            if chunk:
                yield chunk
                chunk, size = [], 0
            yield item
            continue
        chunk.append(item)
        size += len(item[1]) if isinstance(item[1], bytes) else 0
        if len(chunk) >= CHUNK_REQUESTS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def pooled(
    batch: BatchFile, asked: Sequence[str], config: dict[str, Any], workers: int, start: int = 0
) -> Iterator[Any]:
    """The results of :func:`mmtok.budgets.pricing.batch.iter_batch`, priced on ``workers`` processes."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    ids = FirstUse(batch.limits.provider)
    with context.Pool(workers, _start, (config, batch.format, batch.provider, list(asked))) as pool:
        pending: deque[Any] = deque()
        for chunk in _chunks(batch, start):
            pending.append(chunk if isinstance(chunk, BadLine) else pool.apply_async(_price_chunk, (chunk,)))
            while len(pending) > workers * IN_FLIGHT_PER_WORKER:
                yield from _ready(pending.popleft(), ids)
        while pending:
            yield from _ready(pending.popleft(), ids)


def _ready(job: Any, ids: FirstUse) -> Iterator[Any]:
    if isinstance(job, BadLine):
        yield job
        return
    for custom_id, size, results in job.get():
        repeated = None if custom_id is None else ids.repeated(custom_id, results[0].number, size)
        yield from [repeated] if repeated is not None else results
