"""The ledger in PostgreSQL (:mod:`mmtok.budgets.ledger.sql` has the store's design and SQLite): SQLAlchemy's pool
with psycopg (``pip install 'mmtok[sql]'``), the reservation as one call of a server-side function, and a psycopg
connection kept for it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

from mmtok.budgets.ledger.records import Record
from mmtok.budgets.ledger.sql import BUDGET_LOCK, ROW_COLUMNS, ROWS_PER_STATEMENT, Run, Store, _ddl, _why
from mmtok.errors import ConfigError

RESERVE_FUNCTION = "mmtok_reserve_v1"
_RESERVE_SQL = f"""CREATE OR REPLACE FUNCTION {RESERVE_FUNCTION}(p_id text, p_day text, p_instance text,
    p_ttl double precision, p_nusd bigint, p_record text, p_scopes text[], p_limits numeric[])
RETURNS TABLE (over_scope text, counted numeric) LANGUAGE plpgsql AS $$
DECLARE
    total numeric;
BEGIN
    PERFORM pg_advisory_xact_lock({BUDGET_LOCK});
    IF EXISTS (SELECT 1 FROM holds h WHERE h.call_id = p_id) THEN
        RETURN;
    END IF;
    FOR i IN 1 .. COALESCE(array_length(p_scopes, 1), 0) LOOP
        SELECT (SELECT COALESCE(SUM(s.nusd), 0) FROM spend s WHERE s.day = p_day AND s.scope = p_scopes[i])
             + (SELECT COALESCE(SUM(h.nusd), 0) FROM holds h WHERE h.day = p_day AND h.scope = p_scopes[i])
          INTO total;
        IF total + p_nusd > p_limits[i] THEN
            over_scope := p_scopes[i];
            counted := total;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
    INSERT INTO holds (call_id, scope, day, nusd, instance, expires, record)
    SELECT p_id, scope, p_day, p_nusd, p_instance, EXTRACT(EPOCH FROM clock_timestamp()) + p_ttl,
           CASE WHEN scope = 'all' THEN p_record END
    FROM (SELECT DISTINCT unnest(array_prepend('all', p_scopes)) AS scope) AS wanted;
END $$"""


class PostgresLedger(Store):
    """The ledger in PostgreSQL (``postgresql://`` or ``postgresql+psycopg://`` URLs), through SQLAlchemy's pool and
    psycopg: one database for every proxy of a team."""

    now_sql = "EXTRACT(EPOCH FROM clock_timestamp())"

    def __init__(self, url: str, read_only: bool = False) -> None:
        super().__init__()
        self._kept: KeptConnection | None = None
        try:
            import sqlalchemy as sa
        except ImportError:
            raise ConfigError("a PostgreSQL ledger needs SQLAlchemy and psycopg: pip install 'mmtok[sql]'") from None
        self._sa = sa
        self.read_only = read_only
        try:
            parsed = sa.engine.make_url(url)
        except sa.exc.ArgumentError:
            raise ConfigError(f"{url!r}: not a database URL (e.g. postgresql://user@host/db)") from None
        self.where = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() != "postgresql":
            raise ConfigError(f"{self.where}: a ledger is an SQLite file or a postgresql:// URL")
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        if parsed.drivername == "postgresql+psycopg":  # the budget's hot path on a connection of its own
            self._kept = KeptConnection(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
        try:
            self.engine = sa.create_engine(parsed, pool_size=8, max_overflow=8, pool_pre_ping=True)
            self._prepare()
        except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as e:
            raise ConfigError(f"{self.where}: cannot use this database ({e})") from None
        except sa.exc.SQLAlchemyError as e:
            raise ConfigError(f"{self.where}: cannot open the ledger ({_why(e.orig or e)})") from None

    @contextlib.contextmanager
    def _transaction(self, lock: int) -> Iterator[Run]:
        text = self._sa.text

        with self.engine.begin() as conn:

            def run(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
                result = conn.execute(text(sql), params or {})
                return [tuple(row) for row in result] if result.returns_rows else []

            run.driver = conn.connection.driver_connection  # type: ignore[attr-defined]

            if lock:
                run("SELECT pg_advisory_xact_lock(:key)", {"key": lock})
            yield run

    def _read(self, sql: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=500).execute(self._sa.text(sql), params)
            for row in result:
                yield dict(row._mapping)

    def _tables(self, run: Run) -> set[str]:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        return {name for (name,) in run(sql)}

    def _columns(self, run: Run, table: str) -> set[str]:
        sql = (
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = :t"
        )
        return {name for (name,) in run(sql, {"t": table})}

    def _ddl(self) -> list[str]:
        return _ddl("BIGINT", "DOUBLE PRECISION", "BYTEA")

    # A batch in two statements and a pipeline: a round trip and SQLAlchemy's work per statement were ~0.25 ms of
    # CPU a record.
    def _release(self, run: Run, ids: list[str]) -> None:
        for start in range(0, len(ids), ROWS_PER_STATEMENT):
            run("DELETE FROM holds WHERE call_id = ANY(:ids)", {"ids": ids[start : start + ROWS_PER_STATEMENT]})

    def _rows(self, run: Run, values: list[dict[str, Any]]) -> set[str]:
        driver = getattr(run, "driver", None)  # psycopg's own connection, in the same transaction
        if driver is None or not hasattr(driver, "pipeline"):
            return super()._rows(run, values)
        written: set[str] = set()
        with driver.cursor() as cursor:  # one prepared statement, its rows sent in a pipeline
            cursor.executemany(_INSERT_PSYCOPG, [[row[c] for c in ROW_COLUMNS] for row in values], returning=True)
            while True:
                written.update(found for (found,) in cursor.fetchall())
                if not cursor.nextset():
                    break
        return written

    def _routines(self, run: Run) -> None:
        found = run(
            "SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = :name AND n.nspname = current_schema()",
            {"name": RESERVE_FUNCTION},
        )
        if not found:
            run(_RESERVE_SQL)

    def _hold(
        self, record: Record, nusd: int, scoped: list[str], limits_nusd: list[Decimal], ttl_s: float, held: str
    ) -> tuple[str, int] | None:
        """One call of the reservation's function (:data:`_RESERVE_SQL`): one round trip, on the kept connection
        where the driver is psycopg."""
        values = (record.id, record.day, record.instance, ttl_s, nusd, held, scoped, limits_nusd)
        if self._kept is not None:
            rows = self._kept.run(_RESERVE_CALL, values)
        else:
            names = ("id", "day", "instance", "ttl", "nusd", "record", "scopes", "limits")
            with self.engine.begin() as conn:
                sql = f"SELECT * FROM {RESERVE_FUNCTION}({', '.join(':' + n for n in names)})"
                rows = [tuple(row) for row in conn.execute(self._sa.text(sql), dict(zip(names, values, strict=True)))]
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()
        self.engine.dispose()


_INSERT_PSYCOPG = (
    f"INSERT INTO calls ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join(['%s'] * len(ROW_COLUMNS))}) "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
_RESERVE_CALL = (
    f"SELECT over_scope, counted FROM {RESERVE_FUNCTION}(%s, %s, %s, %s::float8, %s::bigint, %s, %s::text[], "
    "%s::numeric[])"
)


class KeptConnection:
    """A psycopg connection kept open for statements on the budget's hot path: in autocommit (a statement is its own
    transaction: one round trip), with no pool checkout or ping before each, its statements prepared by psycopg
    after their first uses. Opened on first use; a statement that finds it broken opens it again and runs once
    more (the reservation's function keeps a hold made by a first try whose answer was lost)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._lock = threading.Lock()
        self._conn: Any = None

    def run(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        import psycopg

        with self._lock:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._conninfo, autocommit=True)
                try:
                    return list(self._conn.execute(sql, params))
                except psycopg.OperationalError:
                    if attempt == 2 or not self._conn.broken:
                        raise
                    self._conn.close()
                    self._conn = None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
