"""The ledger's two stores, one SQL: an SQLite file through the standard library, and PostgreSQL through SQLAlchemy
with psycopg (``pip install 'mmtok[sql]'``), which several proxies on several machines share.

Tables (schema 2):

- ``calls``: one row per call (:class:`mmtok.budgets.ledger.Record`), with ``spend_nusd``, the spend in nano-dollars.
- ``spend``: per UTC day and scope (``all``, ``key:<fingerprint>``, ``tag:<name>=<value>``), the calls and their
  spend, kept in the same transaction as the rows they sum, so a budget reads one row, not a day of calls.
- ``holds``: the reservations of calls in flight, a row per call and budget scope: the call's upper bound, the
  proxy instance that holds it and when the hold expires (the database's clock). A call's hold is deleted in the
  transaction that writes its row, so a call is always counted once, as a hold or as spend.
- ``meta``: the schema version and the salt of key fingerprints.

Budgets are exact across instances because a reservation is a transaction that reads the scope's spend and holds
in one statement and adds its hold, and these transactions run one at a time: on PostgreSQL under a transaction-
level advisory lock, on SQLite as ``BEGIN IMMEDIATE`` (SQLite's single writer). On PostgreSQL the transaction is one
call of a server-side function (``mmtok_reserve_v1``, made with the schema) on a connection the proxy keeps for it:
one round trip per reservation. A proxy refreshes its holds every few seconds; a hold whose proxy stopped
refreshing (SIGKILL, a machine lost) expires, and the next refresh on any instance writes its call as ``lost``,
counted at its bound: the provider may well have billed it. Until then the expired hold counts in every
reservation at the same amount, so the budgets never depend on when that happens.

Creating and migrating the schema takes the same kind of lock (on PostgreSQL another advisory lock), so proxies
starting together on an empty database all come up (``CREATE TABLE IF NOT EXISTS`` alone is not safe under
concurrency on PostgreSQL).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets.ledger.records import (
    COLUMNS,
    INT64_MAX,
    NANO,
    SCHEMA_VERSION,
    BadRow,
    Record,
    read_row,
    row_values,
    to_nusd,
)
from mmtok.errors import ConfigError

Run = Callable[..., list[tuple[Any, ...]]]  # run(sql, params) -> rows, inside one transaction
SCHEMA_LOCK = 0x6D6D746F6B01  # PostgreSQL advisory lock keys ("mmtok" 1 and 2)
BUDGET_LOCK = 0x6D6D746F6B02
V1_COLUMNS = set(COLUMNS) - {"key_fingerprint", "tags", "flags"}
ADDED_IN_2 = {"key_fingerprint": "TEXT", "tags": "TEXT", "flags": "TEXT"}
ROW_COLUMNS = (*COLUMNS, "day", "spend_nusd")


def _ddl(integer: str, real: str, blob: str) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS calls (
            id TEXT PRIMARY KEY, time TEXT NOT NULL, day TEXT NOT NULL, provider TEXT, api TEXT, model TEXT,
            path TEXT, stream {integer}, status {integer}, outcome TEXT, message TEXT, latency_ms {real},
            upstream_ms {real}, parts TEXT, settings TEXT, predicted TEXT, predicted_input {integer},
            predicted_cost TEXT, predicted_label TEXT, billed TEXT, billed_input {integer}, billed_output {integer},
            billed_cost TEXT, shrink TEXT, saved_cost TEXT, body_sha256 TEXT, body {blob}, instance TEXT,
            spend_nusd {integer} NOT NULL DEFAULT 0, key_fingerprint TEXT, tags TEXT, flags TEXT)""",
        "CREATE INDEX IF NOT EXISTS calls_day ON calls (day)",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
        f"""CREATE TABLE IF NOT EXISTS spend (day TEXT NOT NULL, scope TEXT NOT NULL, nusd {integer} NOT NULL,
            calls {integer} NOT NULL, PRIMARY KEY (day, scope))""",
        f"""CREATE TABLE IF NOT EXISTS holds (call_id TEXT NOT NULL, scope TEXT NOT NULL, day TEXT NOT NULL,
            nusd {integer} NOT NULL, instance TEXT NOT NULL, expires {real} NOT NULL, record TEXT,
            PRIMARY KEY (call_id, scope))""",
        "CREATE INDEX IF NOT EXISTS holds_scope ON holds (day, scope)",
        "CREATE INDEX IF NOT EXISTS holds_instance ON holds (instance)",
    ]


_INSERT = (
    f"INSERT INTO calls ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join(':' + c for c in ROW_COLUMNS)}) "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
_COUNT = (  # the sum saturates at the largest 64-bit integer (a spend out of range uses the day up; never an error)
    "INSERT INTO spend (day, scope, nusd, calls) VALUES (:day, :scope, :nusd, :calls) ON CONFLICT (day, scope) "
    f"DO UPDATE SET nusd = CASE WHEN spend.nusd > {INT64_MAX} - excluded.nusd THEN {INT64_MAX} "
    "ELSE spend.nusd + excluded.nusd END, calls = spend.calls + excluded.calls"
)


# PostgreSQL: a reservation as one statement, a round trip in autocommit. In READ COMMITTED each statement of a
# PL/pgSQL function reads a fresh snapshot, so the sums after the advisory lock see every reservation and record
# committed before it was granted. A hold already made for the call (its first try answered, the answer lost) is
# kept as it is. Returns the first scope over its limit and what it counts, or no row with the holds written.
ROWS_PER_STATEMENT = 200  # rows of 34 values in one INSERT: within SQLite's 32,766 variables, PostgreSQL's 65,535


class Refused(Exception):
    """A reservation that would take a budget's scope over its limit."""

    def __init__(self, scope: str, counted: Decimal, limit: Decimal) -> None:
        super().__init__(f"{scope}: {counted} of {limit}")
        self.scope, self.counted, self.limit = scope, counted, limit


class Store:
    """The SQL both stores run; a store says how to open a transaction and how to read rows."""

    where: str
    salt: str = ""
    now_sql: str  # the database's clock, in seconds since the epoch
    read_only: bool = False

    def __init__(self) -> None:
        self.skipped: list[BadRow] = []

    # -------------------------------------------------------------------------------------- what a store gives
    def _transaction(self, lock: int) -> contextlib.AbstractContextManager[Run]:
        raise NotImplementedError

    def _read(self, sql: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def _tables(self, run: Run) -> set[str]:
        raise NotImplementedError

    def _columns(self, run: Run, table: str) -> set[str]:
        raise NotImplementedError

    def _ddl(self) -> list[str]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------- schema
    def _prepare(self) -> None:
        """Check the schema, and (writing) create or migrate it, one instance at a time."""
        with self._transaction(SCHEMA_LOCK) as run:
            version = self._check(run)
            if self.read_only:
                return
            if version != SCHEMA_VERSION:
                for statement in self._ddl():
                    run(statement)
                found = self._columns(run, "calls")
                for name, kind in ADDED_IN_2.items():
                    if name not in found:
                        run(f"ALTER TABLE calls ADD COLUMN {name} {kind}")
                if version == 1:  # the days so far into the spend table (v1 rows have no key or tags)
                    run(
                        "INSERT INTO spend (day, scope, nusd, calls) SELECT day, 'all', SUM(spend_nusd), COUNT(*) "
                        "FROM calls GROUP BY day ON CONFLICT (day, scope) DO NOTHING"
                    )
                run("DELETE FROM meta WHERE key = 'schema'")
                run("INSERT INTO meta (key, value) VALUES ('schema', :v)", {"v": str(SCHEMA_VERSION)})
                run(
                    "INSERT INTO meta (key, value) VALUES ('salt', :v) ON CONFLICT (key) DO NOTHING",
                    {"v": secrets.token_hex(16)},
                )
            self._routines(run)
            self.salt = run("SELECT value FROM meta WHERE key = 'salt'")[0][0]

    def _routines(self, run: Run) -> None:
        """What the store keeps in the database beside its tables (PostgreSQL: the reservation's function)."""

    def _check(self, run: Run) -> int | None:
        """The schema version of the database (None: empty), or a ConfigError for one mmtok cannot use."""
        tables = self._tables(run)
        if "calls" not in tables and "meta" not in tables:
            if self.read_only:
                raise ConfigError(f"{self.where}: not an mmtok ledger (it has no calls table)")
            return None
        if "calls" not in tables or "meta" not in tables:
            raise ConfigError(f"{self.where}: not an mmtok ledger (a table named calls or meta of another schema)")
        missing = sorted(V1_COLUMNS - self._columns(run, "calls"))
        if missing:
            raise ConfigError(f"{self.where}: not an mmtok ledger (its calls table has no {', '.join(missing)})")
        found = run("SELECT value FROM meta WHERE key = 'schema'")
        if not found or not str(found[0][0]).isdigit():
            raise ConfigError(f"{self.where}: not an mmtok ledger (no schema version in its meta table)")
        version = int(found[0][0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.where}: ledger schema {version} is newer than this mmtok's ({SCHEMA_VERSION}): upgrade mmtok"
            )
        return version

    # ------------------------------------------------------------------------------------------------ writing
    def write(self, records: Sequence[Record]) -> list[tuple[Record, str]]:
        """Write ``records`` in one transaction; if it fails, each in a transaction of its own, so one record that
        cannot be written keeps no other out. Returns the records not written, each with why."""
        if not records:
            return []
        try:
            with self._transaction(0) as run:
                self._insert(run, records)
            return []
        except Exception as e:  # any failure of the batch: fall back to one record at a time
            if len(records) == 1:
                return [(records[0], _why(e))]
        failed = []
        for record in records:
            try:
                with self._transaction(0) as run:
                    self._insert(run, [record])
            except Exception as e:  # said to the caller, record by record
                failed.append((record, _why(e)))
        return failed

    def _insert(self, run: Run, records: Sequence[Record]) -> None:
        """Rows for ``records`` (those not already written), their spend counted, their holds released."""
        self._release(run, [record.id for record in records])  # first: a hold's row lock is never taken after a
        values = [row_values(record) for record in records]  # spend row's (no deadlock with a refresh that expires)
        written = self._rows(run, values)
        counts: dict[tuple[str, str], list[int]] = {}
        for record, row in zip(records, values, strict=True):
            if record.id in written:
                written.discard(record.id)  # a record given twice counts once, as its one row
                for scope in record.scopes:
                    count = counts.setdefault((record.day, scope), [0, 0])
                    count[0] += row["spend_nusd"]
                    count[1] += 1
        for (day, scope), (nusd, calls) in sorted(counts.items()):  # one order: no deadlock between writers
            run(_COUNT, {"day": day, "scope": scope, "nusd": _saturated(nusd), "calls": calls})

    def _release(self, run: Run, ids: list[str]) -> None:
        """The holds of these calls deleted."""
        for call_id in ids:
            run("DELETE FROM holds WHERE call_id = :id", {"id": call_id})

    def _rows(self, run: Run, values: list[dict[str, Any]]) -> set[str]:
        """The rows written (those whose id is new); the ids written."""
        return {found for row in values for (found,) in run(_INSERT, row)}

    # ------------------------------------------------------------------------------------------------ reading
    def records(self, since: str | None = None) -> Iterator[Record]:
        """Every well-formed row in time order; a malformed one is skipped and kept in ``self.skipped``."""
        self.skipped = []
        query = "SELECT * FROM calls ORDER BY time, id"
        if since:
            query = "SELECT * FROM calls WHERE time >= :since ORDER BY time, id"
        for row in self._read(query, {"since": since}):
            found = read_row(row)
            if isinstance(found, BadRow):
                self.skipped.append(found)
            else:
                yield found

    def spend_on(self, day: str, scope: str = "all") -> Decimal:
        """What the calls of ``day`` (UTC) in ``scope`` cost, as written (holds of calls in flight apart)."""
        found = list(self._read("SELECT nusd FROM spend WHERE day = :day AND scope = :scope", _p(day, scope)))
        return Decimal(found[0]["nusd"] if found else 0) / NANO

    def held_on(self, day: str, scope: str = "all") -> Decimal:
        """What calls in flight hold against ``scope``'s budget on ``day``."""
        sql = "SELECT COALESCE(SUM(nusd), 0) AS nusd FROM holds WHERE day = :day AND scope = :scope"
        (row,) = list(self._read(sql, _p(day, scope)))  # read whole: the reader's connection is given back
        return Decimal(row["nusd"]) / NANO

    # ------------------------------------------------------------------------------------------------ budgets
    def reserve(self, record: Record, amount: Decimal, limits: dict[str, Decimal], ttl_s: float) -> None:
        """Hold ``amount`` for ``record``'s call in each of its scopes that ``limits`` names, or raise
        :class:`Refused` for the first scope it would take over its limit (nothing is held then). One transaction,
        one at a time across every instance on the ledger. Holds that expired still count here, at their bound,
        until a heartbeat (:meth:`refresh`) writes them as lost calls at the same amount, so a reservation need not
        expire them itself."""
        scoped = [s for s in record.scopes if s in limits]
        held = json.dumps({k: v for k, v in row_values(record).items() if k != "body"}, default=str)
        found = self._hold(record, to_nusd(amount), scoped, [limits[s] * NANO for s in scoped], ttl_s, held)
        if found is not None:
            scope, counted = found
            raise Refused(scope, Decimal(counted) / NANO, limits[scope])

    def _hold(
        self, record: Record, nusd: int, scoped: list[str], limits_nusd: list[Decimal], ttl_s: float, held: str
    ) -> tuple[str, int] | None:
        """The reservation's transaction: (the first scope it would take over its limit, what that scope counts),
        or None with the holds written."""
        with self._transaction(BUDGET_LOCK) as run:
            if run("SELECT 1 FROM holds WHERE call_id = :id", {"id": record.id}):
                return None  # held already (a reservation tried again): as it stands
            counted = self._counted(run, record.day, scoped)
            for scope, limit in zip(scoped, limits_nusd, strict=True):
                if counted[scope] + nusd > limit:
                    return scope, counted[scope]
            for scope in ["all", *(s for s in scoped if s != "all")]:
                run(
                    "INSERT INTO holds (call_id, scope, day, nusd, instance, expires, record) VALUES "
                    f"(:id, :scope, :day, :nusd, :instance, {self.now_sql} + :ttl, :record)",
                    {"id": record.id, "scope": scope, "day": record.day, "nusd": nusd, "instance": record.instance,
                     "ttl": ttl_s, "record": held if scope == "all" else None},
                )  # fmt: skip
        return None

    def _counted(self, run: Run, day: str, scopes: list[str]) -> dict[str, int]:
        """Spend plus holds per scope, read in one statement (one snapshot: a call settling meanwhile is counted
        once, as its hold or as its spend, never neither)."""
        if not scopes:
            return {}
        parts, params = [], {"day": day}
        for n, scope in enumerate(scopes):
            params[f"s{n}"] = scope
            parts.append(
                f"SELECT :s{n} AS scope, (SELECT COALESCE(SUM(nusd), 0) FROM spend WHERE day = :day AND "
                f"scope = :s{n}) + (SELECT COALESCE(SUM(nusd), 0) FROM holds WHERE day = :day AND scope = :s{n})"
            )
        return {str(scope): int(total) for scope, total in run(" UNION ALL ".join(parts), params)}

    def refresh(self, instance: str, ttl_s: float) -> None:
        """Keep ``instance``'s holds alive for ``ttl_s`` more seconds, and expire the holds of stopped instances."""
        with self._transaction(BUDGET_LOCK) as run:
            run(f"UPDATE holds SET expires = {self.now_sql} + :ttl WHERE instance = :i", {"ttl": ttl_s, "i": instance})
            self._expire(run)

    def _expire(self, run: Run) -> None:
        """The calls whose holds expired (their proxy stopped) written as ``lost``, counted at their bound (all in
        one ``_insert``: every hold is released before any spend row is touched)."""
        expired = run(f"SELECT call_id, record, nusd FROM holds WHERE scope = 'all' AND expires < {self.now_sql}")
        lost = [_lost(call_id, text, nusd) for call_id, text, nusd in expired]
        if lost:
            self._insert(run, lost)


def _lost(call_id: str, text: str | None, nusd: int) -> Record:
    """The record a hold kept of its call, as a ``lost`` call counted at the hold's amount."""
    found = read_row(json.loads(text)) if text else BadRow(call_id, "record", "missing")
    if isinstance(found, BadRow):  # a hold whose record cannot be read still counts, as a bare call
        found = Record(id=call_id)
    found.outcome, found.status = "lost", 0
    found.predicted_cost, found.billed_cost = Decimal(nusd) / NANO, None
    found.message = (
        f"proxy instance {found.instance or '?'} stopped while this call was in flight; no bill was read, so it "
        "counts at the bound it reserved"
    )
    return found


def _p(day: str, scope: str) -> dict[str, str]:
    return {"day": day, "scope": scope}


def _saturated(nusd: int) -> int:
    return max(-INT64_MAX, min(INT64_MAX, nusd))


def _why(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:300]}"


# --------------------------------------------------------------------------------------------------- SQLite
class SqliteLedger(Store):
    """The default ledger: one SQLite file in WAL mode, through the standard library. Each write is a ``BEGIN
    IMMEDIATE`` transaction (SQLite's one writer at a time, across processes), so budgets hold for several proxies
    on one machine as they do on PostgreSQL."""

    now_sql = "(julianday('now') - 2440587.5) * 86400.0"

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self.where = str(self.path)
        self.read_only = read_only
        if self.path.is_symlink() and not self.path.exists():
            raise ConfigError(
                f"{self.path}: a symbolic link to a missing file; SQLite would create the file it points to: "
                "name the ledger file itself"
            )
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder; the ledger is a file (e.g. calls.sqlite)")
        if not self.path.parent.is_dir():
            raise ConfigError(f"{self.path}: its folder does not exist")
        self._lock = threading.Lock()
        self._conn = self._connect()
        try:
            self._prepare()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise ConfigError(f"{self.path}: not an mmtok ledger ({e})") from None
        except ConfigError:
            self._conn.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        """A connection in WAL mode, or a read-only one (which writes nothing, not even the journal mode)."""
        try:
            if self.read_only:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False, isolation_level=None)
            else:
                conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as e:
            raise ConfigError(f"{self.path}: not an mmtok ledger ({e})") from None
        return conn

    @contextlib.contextmanager
    def _transaction(self, lock: int) -> Iterator[Run]:
        def run(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
            return self._conn.execute(sql, params or {}).fetchall()

        with self._lock:
            self._conn.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
            try:
                yield run
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        reader = self._connect()  # its own connection: a report reads while the proxy writes
        reader.row_factory = sqlite3.Row
        try:
            for row in reader.execute(sql, params):
                yield dict(row)
        finally:
            reader.close()

    def _tables(self, run: Run) -> set[str]:
        return {name for (name,) in run("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _columns(self, run: Run, table: str) -> set[str]:
        return {row[1] for row in run(f"PRAGMA table_info({table})")}

    def _ddl(self) -> list[str]:
        return _ddl("INTEGER", "REAL", "BLOB")

    # A batch in a few statements, not a few per record: each statement gives up the interpreter lock while SQLite
    # steps, and the writer's thread then waits for the event loop's thread to give it back (up to 5 ms a time).
    def _release(self, run: Run, ids: list[str]) -> None:
        for start in range(0, len(ids), ROWS_PER_STATEMENT):
            chunk = ids[start : start + ROWS_PER_STATEMENT]
            run(f"DELETE FROM holds WHERE call_id IN ({', '.join('?' * len(chunk))})", chunk)

    def _rows(self, run: Run, values: list[dict[str, Any]]) -> set[str]:
        written: set[str] = set()
        row = f"({', '.join('?' * len(ROW_COLUMNS))})"
        for start in range(0, len(values), ROWS_PER_STATEMENT):
            chunk = values[start : start + ROWS_PER_STATEMENT]
            sql = (f"INSERT INTO calls ({', '.join(ROW_COLUMNS)}) VALUES {', '.join([row] * len(chunk))} "
                   "ON CONFLICT (id) DO NOTHING RETURNING id")  # fmt: skip
            written.update(found for (found,) in run(sql, [v[c] for v in chunk for c in ROW_COLUMNS]))
        return written

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def open_store(target: str, read_only: bool = False) -> Store:
    """The store ``target`` names: ``postgresql://...``, ``sqlite:///path``, or a path."""
    if target.startswith("sqlite:///"):
        return SqliteLedger(target[len("sqlite:///") :], read_only)
    if "://" in target:
        from mmtok.budgets.ledger.postgres import PostgresLedger

        return PostgresLedger(target, read_only)
    return SqliteLedger(target, read_only)
