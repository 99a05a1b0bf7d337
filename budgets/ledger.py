"""The ledger: one row per call through ``mmtok proxy``, predicted against billed, behind one small interface.

The default store is an SQLite file (standard library ``sqlite3``, WAL journal, ``synchronous=NORMAL``: a commit
survives the process being killed; several proxies may share the file on one machine). A SQLAlchemy URL
(``sqlite:///calls.db``, ``postgresql+psycopg://...``; the ``sql`` extra) stores the same table in any database
SQLAlchemy reaches, so proxies on several machines can share one ledger.

Rows are written whole, in one transaction per batch, and keyed by a random id drawn when the call arrives
(``INSERT ... ON CONFLICT DO NOTHING``): a batch written twice leaves one row per call. A row holds the call's shape
(each part's kind, geometry, settings and content hash), the prediction, what the provider billed, latency, status
and shrink savings; never a credential, and the body only when the proxy runs with ``--store-bodies``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from mmtok.errors import ConfigError

SCHEMA_VERSION = 1
NANO = Decimal(10**9)  # spend is also kept as an integer count of nano-dollars, so SUM in SQL stays exact
JSON_FIELDS = ("parts", "settings", "predicted", "billed", "shrink")


@dataclass
class Record:
    """One call through the proxy. Token and money fields are ``None`` where unknown, never a silent zero."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"))
    provider: str = ""  # openai | anthropic | gemini
    api: str = ""  # openai-chat, anthropic-messages, gemini-generate, ... (mmtok.budgets.usage.APIS)
    model: str | None = None
    path: str = ""  # the path asked for, without its query string (which may hold a key)
    stream: bool = False
    status: int = 0  # the HTTP status the client got
    outcome: str = ""  # ok | refused | bad_request | upstream_error | upstream_timeout | upstream_unreachable | cut
    message: str = ""  # why a call was refused or failed, in words
    latency_ms: float | None = None  # arrival to the last byte sent
    upstream_ms: float | None = None  # sending upstream to its response headers
    parts: list[dict[str, Any]] = field(default_factory=list)  # kind, w, h, detail, seconds, pages, bytes, sha256
    settings: dict[str, Any] = field(default_factory=dict)  # detail, media_resolution, max tokens, service tier
    predicted: dict[str, int] = field(default_factory=dict)  # modality -> tokens (mmtok's quote)
    predicted_input: int | None = None
    predicted_cost: Decimal | None = None
    predicted_label: str | None = None  # exact | documented | upper bound | estimate
    billed: dict[str, Any] | None = None  # mmtok.budgets.usage.Usage.to_dict()
    billed_input: int | None = None
    billed_output: int | None = None
    billed_cost: Decimal | None = None  # the billed tokens at the model's rates
    shrink: dict[str, Any] | None = None  # tokens and cost before and after, what was done
    saved_cost: Decimal | None = None
    body_sha256: str = ""
    body: bytes | None = None  # only with --store-bodies
    instance: str = ""  # the proxy process that wrote the row

    @property
    def day(self) -> str:
        return self.time[:10]

    @property
    def spend(self) -> Decimal:
        """What the call cost: the billed tokens priced, else the prediction for a call that reached the provider."""
        if self.billed_cost is not None:
            return self.billed_cost
        reached = self.outcome in ("ok", "cut")
        return (self.predicted_cost or Decimal(0)) if reached else Decimal(0)

    def to_dict(self, with_body: bool = False) -> dict[str, Any]:
        out = asdict(self)
        for key in ("predicted_cost", "billed_cost", "saved_cost"):
            out[key] = None if out[key] is None else str(out[key])
        out["body"] = self.body.decode("utf-8", "replace") if with_body and self.body is not None else None
        if not with_body:
            del out["body"]
        return out


COLUMNS = tuple(f.name for f in fields(Record))
DECIMALS = ("predicted_cost", "billed_cost", "saved_cost")
_CREATE = """
CREATE TABLE IF NOT EXISTS calls (
    id TEXT PRIMARY KEY, time TEXT NOT NULL, day TEXT NOT NULL, provider TEXT, api TEXT, model TEXT, path TEXT,
    stream INTEGER, status INTEGER, outcome TEXT, message TEXT, latency_ms REAL, upstream_ms REAL,
    parts TEXT, settings TEXT, predicted TEXT, predicted_input INTEGER, predicted_cost TEXT, predicted_label TEXT,
    billed TEXT, billed_input INTEGER, billed_output INTEGER, billed_cost TEXT, shrink TEXT, saved_cost TEXT,
    body_sha256 TEXT, body BLOB, instance TEXT, spend_nusd INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS calls_day ON calls (day);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


def _row_values(record: Record) -> dict[str, Any]:
    """A record as column values: JSON text for nested fields, decimal strings for money."""
    values = {name: getattr(record, name) for name in COLUMNS}
    for name in JSON_FIELDS:
        value = values[name]
        values[name] = None if value is None else json.dumps(value, separators=(",", ":"), default=str)
    for name in DECIMALS:
        values[name] = None if values[name] is None else str(values[name])
    values["stream"] = int(record.stream)
    values["day"] = record.day
    values["spend_nusd"] = int((record.spend * NANO).to_integral_value())
    return values


def _record(row: dict[str, Any]) -> Record:
    values = {name: row.get(name) for name in COLUMNS}
    for name in JSON_FIELDS:
        text = values[name]
        values[name] = None if text is None else json.loads(text)
    for name in DECIMALS:
        values[name] = None if values[name] is None else Decimal(values[name])
    values["stream"] = bool(values["stream"])
    values["parts"] = values["parts"] or []
    values["settings"] = values["settings"] or {}
    values["predicted"] = values["predicted"] or {}
    if isinstance(values["body"], str):
        values["body"] = values["body"].encode()
    return Record(**values)


class Ledger(Protocol):
    """Where records go. ``write`` is one transaction and idempotent by record id."""

    where: str  # for people: a path, or a URL with its password hidden

    def write(self, records: Sequence[Record]) -> None: ...

    def records(self, since: str | None = None) -> Iterator[Record]: ...

    def spend_on(self, day: str) -> Decimal: ...

    def close(self) -> None: ...


class SqliteLedger:
    """The default ledger: one SQLite file in WAL mode, through the standard library."""

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False) -> None:
        self.path = Path(path).expanduser()
        self.where = str(self.path)
        self.read_only = read_only
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder; the ledger is a file (e.g. calls.sqlite)")
        if not self.path.parent.is_dir():
            raise ConfigError(f"{self.path}: its folder does not exist")
        self._lock = threading.Lock()
        self._conn = self._connect()
        try:
            with self._lock, self._conn:
                if not read_only:
                    self._conn.executescript(_CREATE)
                _check_version(self._conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone(), self)
                if not read_only:
                    self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise ConfigError(f"{self.path}: not an mmtok ledger ({e})") from None

    def _connect(self) -> sqlite3.Connection:
        """A connection in WAL mode, or a read-only one (which writes nothing, not even the journal mode)."""
        try:
            if self.read_only:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
            else:
                conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level="DEFERRED")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as e:
            raise ConfigError(f"{self.path}: not an mmtok ledger ({e})") from None
        conn.row_factory = sqlite3.Row
        return conn

    def write(self, records: Sequence[Record]) -> None:
        if not records:
            return
        names = (*COLUMNS, "day", "spend_nusd")
        sql = f"INSERT OR IGNORE INTO calls ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        rows = [tuple(values[n] for n in names) for values in map(_row_values, records)]
        with self._lock, self._conn:
            self._conn.executemany(sql, rows)

    def records(self, since: str | None = None) -> Iterator[Record]:
        reader = self._connect()  # its own connection: a report reads while the proxy writes
        try:
            query, args = "SELECT * FROM calls ORDER BY time, id", ()
            if since:
                query, args = "SELECT * FROM calls WHERE time >= ? ORDER BY time, id", (since,)
            for row in reader.execute(query, args):
                yield _record(dict(row))
        finally:
            reader.close()

    def spend_on(self, day: str) -> Decimal:
        with self._lock:
            total = self._conn.execute("SELECT SUM(spend_nusd) FROM calls WHERE day = ?", (day,)).fetchone()[0]
        return Decimal(total or 0) / NANO

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _check_version(row: Any, ledger: Any) -> None:
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise ConfigError(
            f"{ledger.where}: ledger schema {row[0]} is newer than this mmtok's ({SCHEMA_VERSION}): upgrade mmtok"
        )


class SqlAlchemyLedger:
    """The same table in any database SQLAlchemy reaches (``mmtok[sql]``): several proxies may share it."""

    def __init__(self, url: str) -> None:
        try:
            import sqlalchemy as sa
        except ImportError:
            raise ConfigError("a ledger URL needs SQLAlchemy: pip install 'mmtok[sql]'") from None
        try:
            parsed = sa.engine.make_url(url)
        except sa.exc.ArgumentError:
            raise ConfigError(f"{url!r}: not a database URL (e.g. sqlite:///calls.db)") from None
        self.where = parsed.render_as_string(hide_password=True)
        self._sa = sa
        try:
            self.engine = sa.create_engine(parsed, future=True)
        except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as e:
            raise ConfigError(f"{self.where}: cannot use this database ({e})") from None
        if parsed.get_backend_name() == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self.table, self.meta_table = _tables(sa)
        try:
            self.table.metadata.create_all(self.engine)
            with self.engine.begin() as conn:
                found = conn.execute(sa.select(self.meta_table.c.value).where(self.meta_table.c.key == "schema"))
                row = found.first()
                _check_version(row, self)
                if row is None:
                    conn.execute(self.meta_table.insert().values(key="schema", value=str(SCHEMA_VERSION)))
        except sa.exc.SQLAlchemyError as e:
            raise ConfigError(f"{self.where}: cannot open the ledger ({type(e).__name__}: {e.args[0]})") from None

    def _insert(self) -> Any:
        dialect = self.engine.dialect.name
        if dialect in ("sqlite", "postgresql"):
            module = __import__(f"sqlalchemy.dialects.{dialect}", fromlist=["insert"])
            return module.insert(self.table).on_conflict_do_nothing(index_elements=["id"])
        return self.table.insert()  # other databases: ids are random, a batch is written once

    def write(self, records: Sequence[Record]) -> None:
        if not records:
            return
        with self.engine.begin() as conn:
            conn.execute(self._insert(), [_row_values(r) for r in records])

    def records(self, since: str | None = None) -> Iterator[Record]:
        query = self._sa.select(self.table).order_by(self.table.c.time, self.table.c.id)
        if since:
            query = query.where(self.table.c.time >= since)
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                yield _record(dict(row._mapping))

    def spend_on(self, day: str) -> Decimal:
        sa = self._sa
        with self.engine.connect() as conn:
            total = conn.execute(sa.select(sa.func.sum(self.table.c.spend_nusd)).where(self.table.c.day == day))
            return Decimal(total.scalar() or 0) / NANO

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(conn: Any, _record: Any) -> None:
    cursor = conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _tables(sa: Any) -> tuple[Any, Any]:
    metadata = sa.MetaData()
    text, integer, real = sa.Text, sa.BigInteger, sa.Float
    kinds = {"stream": integer, "status": integer, "latency_ms": real, "upstream_ms": real, "body": sa.LargeBinary}
    kinds |= dict.fromkeys(("predicted_input", "billed_input", "billed_output"), integer)
    columns = [sa.Column("id", sa.String(32), primary_key=True), sa.Column("time", sa.String(40), nullable=False)]
    columns.append(sa.Column("day", sa.String(10), nullable=False, index=True))
    columns += [sa.Column(name, kinds.get(name, text)) for name in COLUMNS if name not in ("id", "time")]
    columns.append(sa.Column("spend_nusd", integer, nullable=False, default=0))
    calls = sa.Table("calls", metadata, *columns)
    meta = sa.Table("meta", metadata, sa.Column("key", sa.String(40), primary_key=True), sa.Column("value", text))
    return calls, meta


def open_ledger(target: str | os.PathLike[str], read_only: bool = False) -> Ledger:
    """A ledger at ``target``: a file path (SQLite, standard library) or a SQLAlchemy database URL. ``read_only``:
    an SQLite file is opened for reading only (reports, calibration) and nothing is written to it (SQLite still keeps
    its -shm and -wal files beside a file in WAL mode)."""
    text = os.fspath(target)
    if "://" in text:
        return SqlAlchemyLedger(text)
    return SqliteLedger(text, read_only)
