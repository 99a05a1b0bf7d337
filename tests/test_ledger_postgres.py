"""One ledger for many proxies (issue 37), on a real PostgreSQL server the tests start themselves
(:mod:`tests.postgres`) and, for the one-machine case, one SQLite file: proxies started together on an empty
database all come up; several proxies (one with ``--workers 2``) record every call once and hold one day's budget
between them under 200 concurrent calls; SIGKILL of one loses nothing committed and its reservations expire into
``lost`` calls, counted at their bound, on the proxy that lives on."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import openai
import pytest
from typer.testing import CliRunner

from mmtok.budgets.ledger import open_ledger
from mmtok.cli.main import app
from mmtok.eval.bench.budget_race import BILLED_OUTPUT, overspend, race, today
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.test_budget_race import BODIES, BUDGET, CALLS
from tests.test_proxy_reliability import ProxyProcess
from tests.upstream import Upstream, make_app, serve


@pytest.fixture(scope="module")
def upstream():
    stand_in = Upstream()
    with serve(make_app(stand_in)) as url:
        yield url, stand_in


def start_together(upstream: str, ledger: str, count: int, *extra: str) -> list[ProxyProcess]:
    with ThreadPoolExecutor(count) as pool:
        started = [pool.submit(ProxyProcess, upstream, ledger, *extra) for _ in range(count)]
    return [s.result() for s in started]  # a proxy that did not come up raises here, with its error


def test_proxies_starting_together_on_an_empty_database_all_come_up(upstream, postgres_url):  # noqa: F811
    """The issue's case: two proxies started together on an empty database, one died (3 of 3 tries) when both
    created the schema at once."""
    proxies = start_together(upstream[0], postgres_url, 4)
    try:
        book = open_ledger(postgres_url, read_only=True)
        assert list(book.records()) == [] and book.spend_on(today()) == 0
        book.close()
    finally:
        assert [p.stop() for p in proxies] == [0, 0, 0, 0]


# The race two ways (each way's other half is in tests/test_budget_race.py): PostgreSQL streamed, one SQLite file
# whole.
@pytest.mark.parametrize("kind, stream", [("postgresql", True), ("sqlite", False)], ids=["postgresql", "sqlite"])
def test_two_proxies_one_with_two_workers_record_every_call_once_within_one_budget(
    upstream, tmp_path, request, kind, stream
):
    shared_ledger = request.getfixturevalue("postgres_url") if kind == "postgresql" else str(tmp_path / "c.sqlite")
    url, stand_in = upstream
    budget = ("--budget-usd-per-day", str(BUDGET))
    first = ProxyProcess(url, shared_ledger, *budget, "--workers", "2")
    second = ProxyProcess(url, shared_ledger, *budget)
    sent_before = len(stand_in.requests)
    try:
        statuses = asyncio.run(race([first.url, second.url], stream, **next(iter(BODIES.values()))))
    finally:
        assert first.stop() == 0 and second.stop() == 0
    spent, excess, rows = overspend(shared_ledger)
    assert len(rows) == CALLS == len({r.id for r in rows}) and statuses[200] + statuses[429] == CALLS
    assert len({r.instance for r in rows}) == 3  # two workers and the second proxy, each its own instance
    ok = [r for r in rows if r.outcome == "ok"]
    assert len(ok) == statuses[200] == len(stand_in.requests) - sent_before >= 4
    assert all(r.billed_output == BILLED_OUTPUT for r in ok)
    assert spent <= BUDGET + excess and excess == 0
    report = CliRunner().invoke(app, ["ledger", shared_ledger, "--by", "key", "--json"])
    (key,) = json.loads(report.stdout)["by"]["key"]
    assert key["calls"] == CALLS and Decimal(key["spend"]) == spent and key["group"].startswith("...race-")


def test_sigkill_of_one_proxy_loses_nothing_committed_and_its_reservations_expire(upstream, postgres_url):  # noqa: F811
    url, _ = upstream
    flags = ("--budget-usd-per-day", "5", "--reservation-ttl", "2")
    doomed, survivor = ProxyProcess(url, postgres_url, *flags), ProxyProcess(url, postgres_url, *flags)
    messages = [{"role": "user", "content": "a short question"}]
    client = openai.OpenAI(base_url=doomed.url + "/v1", api_key="sk-doomed-0000000000000000", max_retries=0)
    for _ in range(10):
        client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=100)
    drip = {"x-upstream-behaviour": "drip", "x-upstream-delay": "0.5", "x-upstream-chunks": "60"}

    def stream() -> None:
        try:
            for _ in client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=1000, stream=True,
                                                    extra_headers=drip):  # fmt: skip
                pass
        except (openai.APIError, OSError, Exception):  # the proxy is killed under it
            pass

    streams = [threading.Thread(target=stream) for _ in range(5)]
    for thread in streams:
        thread.start()
    book = open_ledger(postgres_url, read_only=True)
    deadline = time.monotonic() + 30
    while book.held_on(today()) < 5 * Decimal("0.01") and time.monotonic() < deadline:
        time.sleep(0.05)
    held = book.held_on(today())
    committed = len(list(book.records()))
    doomed.process.kill()
    doomed.process.wait(10)
    for thread in streams:
        thread.join(30)
    assert committed == 10 and held > 0
    deadline = time.monotonic() + 30
    while book.held_on(today()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the survivor's heartbeat expires the dead proxy's holds
    rows = list(book.records())
    lost = [r for r in rows if r.outcome == "lost"]
    try:
        assert len(rows) == 15 and len(lost) == 5 and book.held_on(today()) == 0
        assert sum(r.spend for r in lost) == held and all("stopped while this call" in r.message for r in lost)
        assert book.spend_on(today()) == sum(r.spend for r in rows)
    finally:
        book.close()
        assert survivor.stop() == 0
