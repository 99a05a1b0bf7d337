"""Group commit: records from many concurrent calls written by one thread, a batch per transaction.

A call hands its record over (``submit``) and goes on; a batch waits ``linger_s`` for more records after its first,
and whatever is queued while one batch commits goes into the next, so 200 concurrent calls cost a few transactions,
not 200, and no call waits for the disk. A caller that must
know its record is on disk waits for it (``await recorder.write(record)``: the proxy's ``--sync-ledger``).
``pending`` counts records not yet committed; ``close`` writes all of them before it returns (the proxy's SIGTERM
drain), so only a SIGKILL can lose the last few milliseconds of records, never a committed one.

One record never keeps another out: the ledger writes a batch whole or, when that fails, record by record
(:meth:`mmtok.budgets.ledger.sql.Store.write`). A record the database still refuses (it is down, its disk full) is
said on stderr and kept to be tried again with the next batch and at close (up to :data:`MAX_UNWRITTEN`); meanwhile
its reservation stays in the ledger, so the budgets still count the call at its bound.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from concurrent.futures import Future

from mmtok.budgets.ledger import Ledger, Record

MAX_BATCH = 512  # records per transaction
MAX_UNWRITTEN = 100_000  # records kept in memory to be tried again while the database refuses them


class Recorder:
    """Writes records to ``ledger`` from a thread of its own."""

    def __init__(self, ledger: Ledger, linger_s: float = 0.0) -> None:
        self.ledger = ledger
        self.linger_s = linger_s  # how long a batch waits for more records after its first
        self._queue: queue.SimpleQueue[tuple[Record, Future[None]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="mmtok-ledger", daemon=True)
        self._closed = False
        self.failures = 0  # records that could not be written when first tried (each said on stderr)
        self.unwritten: list[Record] = []  # records the database refused, tried again with the next batch
        self._pending = 0
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
        self._queue.put((record, done))
        return done

    @property
    def pending(self) -> int:
        """Records queued or being written, not yet committed."""
        return self._pending

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
        retried, self.unwritten = self.unwritten, []
        records = [record for record, _ in batch]
        try:
            failed = self.ledger.write(retried + records)
        except Exception as e:  # a ledger that raises instead of naming records: every record is unwritten
            failed = [(record, f"{type(e).__name__}: {e}") for record in retried + records]
        refused = {record.id: why for record, why in failed}
        for record, done in batch:
            if record.id in refused:
                self.failures += 1
                done.set_exception(RuntimeError(refused[record.id]))
            else:
                done.set_result(None)
        if failed:
            self._keep(failed)
        with self._count_lock:
            self._pending -= len(batch)

    def _keep(self, failed: list[tuple[Record, str]]) -> None:
        """Say which records were not written and why; keep them for the next batch (the oldest go past the cap)."""
        ids = ", ".join(r.id for r, _ in failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        sys.stderr.write(f"error: ledger {self.ledger.where}: {len(failed)} record(s) not written yet ({ids}): "
                         f"{failed[0][1]}; tried again with the next batch\n")  # fmt: skip
        self.unwritten = (self.unwritten + [record for record, _ in failed])[-MAX_UNWRITTEN:]

    def close(self) -> None:
        """Write everything queued, then stop the thread and close the ledger."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        if self.unwritten:  # one last try; what the database still refuses is said and lost with the process
            failed = self.ledger.write(self.unwritten)
            if failed:
                sys.stderr.write(f"error: ledger {self.ledger.where}: {len(failed)} record(s) lost: {failed[0][1]}\n")
        self.ledger.close()
