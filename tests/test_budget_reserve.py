"""The reservation's own guarantees, on SQLite and PostgreSQL (PostgreSQL: one call of a server-side function on a
connection kept for it): expired holds still count until a heartbeat writes them as lost calls, a reservation
retried after a lost answer holds once, and a kept connection that breaks is opened again."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from mmtok.budgets.ledger import Record, open_ledger
from mmtok.budgets.ledger.sql import Refused
from mmtok.eval.bench.budget_race import today
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    target = tmp_path / "calls.sqlite" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    book = open_ledger(target)
    yield book
    book.close()


def call(n: int, **fields) -> Record:
    given = {"provider": "openai", "api": "openai-chat", "model": "gpt-4o", "instance": "test", **fields}
    return Record(id=f"call{n:04d}", **given)


def test_an_expired_hold_counts_until_a_heartbeat_writes_it_as_a_lost_call(ledger):
    limits = {"all": Decimal("1.00")}
    ledger.reserve(call(1, instance="gone", predicted_cost=Decimal("0.60")), Decimal("0.60"), limits, 0.1)
    time.sleep(0.3)  # its proxy stopped: the hold has expired, and no heartbeat has run
    with pytest.raises(Refused) as refused:
        ledger.reserve(call(2), Decimal("0.50"), limits, 60)
    assert refused.value.counted == Decimal("0.60")
    ledger.refresh("alive", 60)  # written as lost at its bound: the same 0.60, now as spend
    assert ledger.held_on(today()) == 0 and ledger.spend_on(today()) == Decimal("0.60")
    with pytest.raises(Refused):
        ledger.reserve(call(2), Decimal("0.50"), limits, 60)
    ledger.reserve(call(3), Decimal("0.40"), limits, 60)


def test_a_reservation_made_twice_for_one_call_holds_once(ledger):
    limits = {"all": Decimal("1.00"), "tag:team=search": Decimal("0.50")}
    record = call(1, tags={"team": "search"})
    ledger.reserve(record, Decimal("0.30"), limits, 60)
    ledger.reserve(record, Decimal("0.30"), limits, 60)
    assert ledger.held_on(today()) == Decimal("0.30") and ledger.held_on(today(), "tag:team=search") == Decimal("0.30")
    ledger.write([call(1, tags={"team": "search"}, outcome="ok", billed_cost=Decimal("0.10"))])
    assert ledger.held_on(today(), "tag:team=search") == 0
    assert ledger.spend_on(today(), "tag:team=search") == Decimal("0.10")


def test_the_kept_connection_is_opened_again_after_it_breaks(postgres_url):  # noqa: F811
    book = open_ledger(postgres_url)
    try:
        limits = {"all": Decimal("1.00")}
        book.reserve(call(1), Decimal("0.10"), limits, 60)
        kept = book._kept._conn
        killer = open_ledger(postgres_url)
        with killer.engine.begin() as conn:
            conn.execute(killer._sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": kept.info.backend_pid})
        killer.close()
        book.reserve(call(2), Decimal("0.10"), limits, 60)  # the dead connection is seen, replaced, and tried again
        assert book._kept._conn is not kept and book.held_on(today()) == Decimal("0.20")
    finally:
        book.close()
