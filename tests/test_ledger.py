"""The ledger: SQLite through the standard library and a real PostgreSQL server, one interface, rows written whole
and once; the group-commit writer; `mmtok ledger` as a report (table, --json, --csv, --html)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from mmtok.budgets.ledger import Record, open_ledger
from mmtok.budgets.ledger_sql import PostgresLedger, SqliteLedger
from mmtok.budgets.proxy.recorder import Recorder
from mmtok.cli.main import app
from mmtok.errors import ConfigError
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures


def record(n: int = 0, **fields) -> Record:
    defaults = dict(
        time=f"2026-12-0{1 + n % 2}T10:00:{n % 60:02d}.000000+00:00",
        provider="openai",
        api="openai-chat",
        model="gpt-4o",
        path="/v1/chat/completions",
        status=200,
        outcome="ok",
        latency_ms=12.5,
        parts=[{"kind": "text", "chars": 13}, {"kind": "image", "w": 1024, "h": 768, "detail": "high"}],
        settings={"messages": 1},
        predicted={"text": 4, "image": 765, "overhead": 6},
        predicted_input=775,
        predicted_cost=Decimal("0.0019375"),
        predicted_label="exact",
        billed={"input_tokens": 870, "input_by_modality": {}},
        billed_input=870,
        billed_output=10,
        billed_cost=Decimal("0.002275"),
        body_sha256="ab" * 32,
    )
    return Record(**{**defaults, **fields})


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    """Each ledger kind: the standard-library SQLite file, and a database on a real PostgreSQL server."""
    if request.param == "sqlite":
        book = open_ledger(tmp_path / "calls.sqlite")
        assert isinstance(book, SqliteLedger)
    else:
        book = open_ledger(request.getfixturevalue("postgres_url"))
        assert isinstance(book, PostgresLedger)
    yield book
    book.close()


def test_a_record_round_trips_whole(ledger):
    written = record(1, shrink={"tokens_before": 1000, "tokens_after": 400}, saved_cost=Decimal("0.0015"))
    ledger.write([written])
    (read,) = list(ledger.records())
    assert read == written
    assert read.predicted_cost == Decimal("0.0019375") and isinstance(read.billed_cost, Decimal)


def test_a_batch_written_twice_leaves_one_row_per_call(ledger):
    batch = [record(n) for n in range(20)]
    ledger.write(batch)
    ledger.write(batch)
    assert sorted(r.id for r in ledger.records()) == sorted(r.id for r in batch)


def test_spend_per_day_sums_billed_cost_exactly(ledger):
    ledger.write([record(0), record(2), record(1), record(3, outcome="refused", billed_cost=None)])
    assert ledger.spend_on("2026-12-01") == Decimal("0.002275") * 2
    assert ledger.spend_on("2026-12-02") == Decimal("0.002275")  # a refusal costs nothing
    assert ledger.spend_on("2026-11-30") == 0


def test_records_since_a_time(ledger):
    ledger.write([record(n) for n in range(4)])
    assert len(list(ledger.records(since="2026-12-02"))) == 2


def test_a_file_that_is_not_a_ledger_is_one_clear_error(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_bytes(b"these are not the droids" * 100)
    with pytest.raises(ConfigError, match=r"notes\.sqlite: not an mmtok ledger"):
        open_ledger(bad)
    with pytest.raises(ConfigError, match="is a folder"):
        open_ledger(tmp_path)
    with pytest.raises(ConfigError, match="its folder does not exist"):
        open_ledger(tmp_path / "missing" / "calls.sqlite")


def test_a_ledger_from_a_newer_mmtok_is_refused(tmp_path):
    path = tmp_path / "calls.sqlite"
    open_ledger(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(ConfigError, match="schema 99 is newer"):
        open_ledger(path)


def test_a_database_url_hides_its_password():
    with pytest.raises(ConfigError) as caught:
        open_ledger("postgresql://mmtok:hunter2@127.0.0.1:1/ledger")
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_the_writer_commits_concurrent_records_once_each_in_few_transactions(tmp_path):
    book = open_ledger(tmp_path / "calls.sqlite")
    transactions = []
    write = book.write

    def counted(records):
        transactions.append(len(records))
        return write(records)

    book.write = counted
    recorder = Recorder(book)
    made = [record(n) for n in range(200)]
    threads = [threading.Thread(target=lambda r=r: recorder.submit(r).result(10)) for r in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.close()
    assert sum(transactions) == 200 and len(transactions) < 200
    assert sorted(r.id for r in open_ledger(tmp_path / "calls.sqlite").records()) == sorted(r.id for r in made)


@pytest.fixture
def filled(tmp_path):
    path = tmp_path / "calls.sqlite"
    book = open_ledger(path)
    gemini = dict(provider="gemini", api="gemini-generate", model="gemini-2.5-pro",
                  billed={"input_tokens": 270, "input_by_modality": {"image": 258, "text": 12}}, billed_input=270,
                  predicted={"text": 12, "image": 1032}, predicted_input=1044)  # fmt: skip
    book.write(
        [record(n) for n in range(6)]
        + [record(10 + n, **gemini) for n in range(3)]
        + [record(20, outcome="refused", billed_cost=None, billed=None, billed_input=None)]
    )
    book.close()
    return path


def test_the_ledger_command_reports_spend_and_prediction_errors(filled):
    result = CliRunner().invoke(app, ["ledger", str(filled)])
    assert result.exit_code == 0, result.output
    assert "10 calls" in result.output and "1 refused" in result.output
    assert "gemini-2.5-pro" in result.output and "2026-12-01" in result.output


def test_the_ledger_as_json_compares_each_modality_the_provider_itemises(filled):
    result = CliRunner().invoke(app, ["ledger", str(filled), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    rows = {(a["model"], a["modality"]): a for a in summary["accuracy"]}
    assert rows[("gemini-2.5-pro", "image")]["mean_error"] == 258 - 1032
    assert rows[("gpt-4o", "input")]["mean_error"] == 870 - 775 and ("gpt-4o", "image") not in rows
    assert rows[("gemini-2.5-pro", "image")]["worst"][0]["images"] == "1024x768"
    assert Decimal(summary["spend_usd"]) == Decimal("0.002275") * 9


def test_the_ledger_as_csv_is_one_row_per_call(filled):
    result = CliRunner().invoke(app, ["ledger", str(filled), "--csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert len(rows) == 10 and rows[0]["images"] == "1024x768" and rows[0]["billed_input"] == "870"


def test_the_html_report_has_its_figures_and_data(filled, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["ledger", str(filled), "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert "spend.png" in page and "accuracy.png" in page and "Worst cases" in page
    assert (out / "spend.png").stat().st_size > 1000 and (out / "calls.csv").exists()
    assert json.loads((out / "summary.json").read_text())["calls"] == 10


def test_the_ledger_command_names_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short name: the usage box would fold a long path and the words with it
    result = CliRunner().invoke(app, ["ledger", "none.sqlite"])
    assert result.exit_code == 2 and "no such ledger file" in result.output


def test_a_ledger_opened_to_read_changes_nothing_in_it(filled):
    """As the example ledger in eval/results is kept: out of WAL mode, so reading it makes no -wal/-shm files."""
    with sqlite3.connect(filled) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    before = sorted(p.name for p in filled.parent.iterdir())
    stamp = filled.stat().st_mtime_ns
    book = open_ledger(filled, read_only=True)
    assert len(list(book.records())) == 10 and book.spend_on("2026-12-01") > 0
    book.close()
    assert sorted(p.name for p in filled.parent.iterdir()) == before and filled.stat().st_mtime_ns == stamp


def test_ledger_since_a_word_that_is_no_date_is_a_usage_error(tmp_path):
    book = tmp_path / "calls.sqlite"
    SqliteLedger(book).close()
    for bad in ("yesterday", "2026-13-45"):
        result = CliRunner().invoke(app, ["ledger", str(book), "--since", bad])
        assert result.exit_code == 2 and "must be a date like 2026-12-01" in result.stderr
    assert CliRunner().invoke(app, ["ledger", str(book), "--since", "2026-12-01", "--json"]).exit_code == 0
