"""Group commit: records from many concurrent calls written by one thread, a batch per transaction.

A call hands its record over (``submit``) and goes on; a batch waits ``linger_s`` for more records after its first,
and whatever is queued while one batch commits goes into the next, so 200 concurrent calls cost a few transactions,
not 200, and no call waits for the disk. A caller that must
know its record is on disk waits for it (``await recorder.write(record)``: the proxy's ``--sync-ledger``).
``pending`` counts records not yet committed; ``close`` writes all of them before it returns (the proxy's SIGTERM
drain), so only a SIGKILL can lose the last few milliseconds of records, never a committed one.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from concurrent.futures import Future
from decimal import Decimal

from mmtok.budgets.ledger import Ledger, Record

MAX_BATCH = 512  # records per transaction


class Recorder:
    """Writes records to ``ledger`` from a thread of its own."""

    def __init__(self, ledger: Ledger, linger_s: float = 0.0) -> None:
        self.ledger = ledger
        self.linger_s = linger_s  # how long a batch waits for more records after its first
        self._queue: queue.SimpleQueue[tuple[Record, Future[None]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="mmtok-ledger", daemon=True)
        self._closed = False
        self.failures = 0  # batches that could not be written (each said on stderr)
        self._pending = 0
        self._pending_spend: dict[str, Decimal] = {}  # UTC day -> spend of the records not yet committed
        self._count_lock = threading.Lock()
        self._thread.start()

    def submit(self, record: Record) -> Future[None]:
        """Queue ``record``; the future is done once it is committed (or holds the error that stopped it)."""
        done: Future[None] = Future()
        if self._closed:
            done.set_exception(RuntimeError("the ledger is closed"))
            return done
        with self._count_lock:
            self._pending += 1
            self._pending_spend[record.day] = self._pending_spend.get(record.day, Decimal(0)) + record.spend
        self._queue.put((record, done))
        return done

    @property
    def pending(self) -> int:
        """Records queued or being written, not yet committed."""
        return self._pending

    def pending_spend(self, day: str) -> Decimal:
        """What the calls of ``day`` whose records are not yet committed cost (the ledger cannot say it yet)."""
        with self._count_lock:
            return self._pending_spend.get(day, Decimal(0))

    async def write(self, record: Record) -> None:
        """Queue ``record`` and wait until it is committed."""
        await asyncio.wrap_future(self.submit(record))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.linger_s:
                time.sleep(self.linger_s)
            batch = [item]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[tuple[Record, Future[None]]]) -> None:
        try:
            self.ledger.write([record for record, _ in batch])
        except Exception as e:  # the database is gone or full: the calls themselves have already been answered
            self.failures += 1
            sys.stderr.write(f"error: ledger {self.ledger.where}: {len(batch)} record(s) not written: {e}\n")
            for _, done in batch:
                done.set_exception(e)
        else:
            for _, done in batch:
                done.set_result(None)
        with self._count_lock:
            self._pending -= len(batch)
            for record, _ in batch:
                left = self._pending_spend.get(record.day, Decimal(0)) - record.spend
                if left:
                    self._pending_spend[record.day] = left
                else:
                    self._pending_spend.pop(record.day, None)

    def close(self) -> None:
        """Write everything queued, then stop the thread and close the ledger."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self.ledger.close()
