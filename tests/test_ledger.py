"""The ledger: SQLite through the standard library and a real PostgreSQL server, one interface, rows written whole
and once; the group-commit writer; `mmtok ledger` as a report (table, --json, --csv, --html)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
import threading
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from mmtok.budgets.ledger import Record, open_ledger
from mmtok.budgets.ledger.postgres import PostgresLedger
from mmtok.budgets.ledger.sql import SqliteLedger
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


# ------------------------------------------------------------------------------------ a ledger that loses nothing
def test_an_absurd_usage_figure_is_kept_flagged_and_drops_no_other_row(ledger):
    """Issue 36 item 5: one answer reporting 10^23 prompt tokens lost the whole batch (51 calls, 51 rows lost)."""
    absurd = record(
        0,
        billed={"input_tokens": 10**23, "output_tokens": 5},
        billed_input=10**23,
        billed_cost=Decimal(10**23) * Decimal("2.5") / 10**6,
        settings={"max_output_tokens": int("9" * 4000)},
    )
    recorder = Recorder(ledger)
    made = [absurd] + [record(n) for n in range(1, 51)]
    threads = [threading.Thread(target=recorder.submit, args=(r,)) for r in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder._queue.put(None)  # drain without closing the fixture's ledger
    recorder._thread.join()
    rows = {r.id: r for r in ledger.records()}
    assert len(rows) == 51 and not ledger.skipped
    kept = rows[absurd.id]
    assert kept.billed["input_tokens"] == 10**23 and kept.settings["max_output_tokens"] == int("9" * 4000)
    assert kept.billed_input is None and kept.billed_cost == absurd.billed_cost
    assert any(f.startswith("billed_input: 100000000000000000000000 is out of") for f in kept.flags)
    assert any("settings.max_output_tokens: an integer of 4,000 digits" in f for f in kept.flags)
    assert ledger.spend_on(absurd.day) > 10**9  # the budget sees it (saturated, more than any budget)


def test_a_batch_that_fails_is_written_one_row_at_a_time_keeping_the_good_ones(ledger, monkeypatch):
    poison = record(7)
    insert = type(ledger)._insert

    def failing(self, run, records):
        if any(r.id == poison.id for r in records):
            raise RuntimeError("the database refused this row")
        return insert(self, run, records)

    monkeypatch.setattr(type(ledger), "_insert", failing)
    batch = [record(n) for n in range(6)] + [poison]
    failed = ledger.write(batch)
    assert [(r.id, why) for r, why in failed] == [(poison.id, "RuntimeError: the database refused this row")]
    assert sorted(r.id for r in ledger.records()) == sorted(r.id for r in batch[:6])


def test_the_writer_keeps_a_refused_record_and_writes_it_once_the_database_takes_it(tmp_path, monkeypatch, capsys):
    book = open_ledger(tmp_path / "calls.sqlite")
    write, down = book.write, [True]

    def flaky(records):
        return [(r, "OperationalError: disk I/O error") for r in records] if down[0] else write(records)

    book.write = flaky
    recorder = Recorder(book)
    first = record(1)
    with pytest.raises(RuntimeError, match="disk I/O error"):
        recorder.submit(first).result(10)
    assert "1 record(s) not written yet" in capsys.readouterr().err and recorder.unwritten == [first]
    down[0] = False
    second = record(2)
    recorder.submit(second).result(10)
    recorder.close()
    assert sorted(r.id for r in open_ledger(tmp_path / "calls.sqlite").records()) == sorted([first.id, second.id])


def test_nan_and_infinite_amounts_are_refused_on_write(ledger):
    nan = record(1, billed_cost=Decimal("NaN"), saved_cost=Decimal("Infinity"), latency_ms=float("inf"),
                 predicted={"image": float("nan")})  # fmt: skip
    assert ledger.write([nan]) == []
    (read,) = ledger.records()
    assert read.billed_cost is None and read.saved_cost is None and read.latency_ms is None
    assert read.predicted == {"image": None}
    assert {f.split(":")[0] for f in read.flags} == {"billed_cost", "saved_cost", "latency_ms", "predicted.image"}
    assert ledger.spend_on(read.day) == read.predicted_cost  # a NaN bill is no bill: the call counts at its bound


def _insert_raw(path, **columns):
    """A row written by hand (another program, a hand edit), not by mmtok."""
    row = {"id": columns.pop("id"), "time": "2026-12-01T10:00:00+00:00", "day": "2026-12-01", **columns}
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO calls ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


BAD_ROWS = {
    "bad-cost": ("billed_cost", {"billed_cost": "twelve dollars"}, "'twelve dollars' is not a decimal amount"),
    "nan-cost": ("predicted_cost", {"predicted_cost": "NaN"}, "NaN is not a finite amount"),
    "inf-cost": ("billed_cost", {"billed_cost": "-Infinity"}, "-Infinity is not a finite amount"),
    "bad-json": ("parts", {"parts": '[{"kind": "image", '}, "bad JSON"),
    "nan-json": ("billed", {"billed": '{"input_tokens": NaN}'}, "bad JSON (NaN is not a finite number)"),
    "wrong-shape": ("settings", {"settings": "[1, 2]"}, "expected a JSON dict, found list"),
    "wrong-type": ("status", {"status": "two hundred"}, "expected an integer, found str"),
    "bad-time": ("time", {"time": "yesterday"}, "'yesterday' is not an ISO time"),
}


@pytest.fixture
def damaged(filled):
    for row_id, (_, columns, _) in BAD_ROWS.items():
        _insert_raw(filled, id=row_id, **columns)
    return filled


def test_reading_skips_and_names_each_malformed_row_and_reports_the_rest(damaged):
    """Issue 36 item 6: one bad row made `ledger` end with `unexpected ...Error (a bug in mmtok)`."""
    result = CliRunner().invoke(app, ["ledger", str(damaged), "--json"])
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert summary["calls"] == 10 and Decimal(summary["spend_usd"]) == Decimal("0.002275") * 9
    named = {(s["id"], s["column"]) for s in summary["skipped"]}
    assert named == {(row_id, column) for row_id, (column, _, _) in BAD_ROWS.items()}
    for row_id, (column, _, problem) in BAD_ROWS.items():
        assert f"row {row_id}: column {column}: {problem}" in result.stderr
    assert "a bug in mmtok" not in result.output


@pytest.mark.parametrize("form", [[], ["--csv"], ["--by", "model"]])
def test_every_form_of_the_report_names_malformed_rows(damaged, form):
    result = CliRunner().invoke(app, ["ledger", str(damaged), *form])
    assert result.exit_code == 1 and result.stderr.count("; skipped") == len(BAD_ROWS)
    assert "gpt-4o" in result.stdout


def test_calibrate_names_malformed_rows_and_fits_the_rest(damaged, tmp_path):
    result = CliRunner().invoke(app, ["calibrate", str(damaged), "--out", str(tmp_path / "sheet.toml")])
    assert result.exit_code == 1 and "row bad-json: column parts: bad JSON" in result.stderr
    assert "a bug in mmtok" not in result.output


def test_a_malformed_row_in_postgresql_is_named_too(postgres_url):  # noqa: F811 - the fixture
    import psycopg

    book = open_ledger(postgres_url)
    good, bad = record(1), record(2)
    book.write([good, bad])
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE calls SET billed_cost = 'Infinity', parts = '{oops' WHERE id = %s", (bad.id,))
    found = list(book.records())
    assert [r.id for r in found] == [good.id]
    assert [(b.id, b.column) for b in book.skipped] == [(bad.id, "parts")]
    book.close()


def test_a_table_of_another_schema_is_one_clear_line(tmp_path):
    foreign = tmp_path / "app.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE calls (id INTEGER PRIMARY KEY, phone TEXT, minutes REAL)")
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    with pytest.raises(ConfigError, match=r"not an mmtok ledger \(its calls table has no api, billed,"):
        open_ledger(foreign)
    result = CliRunner().invoke(app, ["ledger", str(foreign)])
    assert result.exit_code == 1 and "not an mmtok ledger" in result.stderr and "bug" not in result.stderr


def test_a_ledger_path_that_is_a_link_to_a_missing_file_is_refused_and_nothing_is_created(tmp_path):
    target = tmp_path / "elsewhere" / "target.sqlite"
    target.parent.mkdir()
    link = tmp_path / "calls.sqlite"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link to a missing file"):
        open_ledger(link)
    assert not target.exists()
    result = CliRunner().invoke(app, ["proxy", "--ledger", str(link), "--port", "0"])
    assert result.exit_code == 1 and "symbolic link to a missing file" in result.stderr and not target.exists()


def test_a_schema_1_ledger_is_migrated_with_its_days_spend(tmp_path):
    path = tmp_path / "old.sqlite"
    from mmtok.budgets.ledger.sql import V1_COLUMNS

    v1_columns = ["id TEXT PRIMARY KEY", "day", "spend_nusd", *sorted(V1_COLUMNS - {"id"})]
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE calls ({', '.join(v1_columns)})")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema', '1')")
        for n in range(3):
            conn.execute(
                "INSERT INTO calls (id, time, day, outcome, billed_cost, spend_nusd, stream, status) "
                "VALUES (?, ?, '2026-12-01', 'ok', '0.5', 500000000, 0, 200)",
                (f"old{n}", f"2026-12-01T10:00:0{n}+00:00"),
            )
    book = open_ledger(path)
    assert book.spend_on("2026-12-01") == Decimal("1.5") and len(list(book.records())) == 3
    assert book.write([record(0, key_fingerprint="...abcd-0123456789ab", tags={"team": "search"})]) == []
    assert book.spend_on("2026-12-01", "tag:team=search") == Decimal("0.002275")
    book.close()


# ------------------------------------------------------------------------------------ attribution in the report
@pytest.fixture
def attributed(tmp_path):
    path = tmp_path / "calls.sqlite"
    book = open_ledger(path)
    book.write(
        [record(n, key_fingerprint="...x7Qa-3f9a1c2b7e4d", tags={"team": "search", "app": "bot"}) for n in range(3)]
        + [record(10 + n, key_fingerprint="...K2zz-0a1b2c3d4e5f", tags={"team": "ads"}) for n in range(2)]
        + [record(20, model="claude-sonnet-4-5", billed_cost=Decimal("1.5"))]
    )
    book.close()
    return path


def test_ledger_by_key_tag_model_and_day_as_table_json_and_csv(attributed):
    runner = CliRunner()
    by_key = json.loads(runner.invoke(app, ["ledger", str(attributed), "--by", "key", "--json"]).stdout)["by"]["key"]
    assert [(g["group"], g["calls"]) for g in by_key] == [
        ("(no key)", 1), ("...x7Qa-3f9a1c2b7e4d", 3), ("...K2zz-0a1b2c3d4e5f", 2)]  # fmt: skip
    assert Decimal(by_key[1]["spend"]) == Decimal("0.002275") * 3
    team = runner.invoke(app, ["ledger", str(attributed), "--by", "tag:team", "--csv"])
    rows = list(csv.DictReader(io.StringIO(team.stdout)))
    assert {r["group"]: r["calls"] for r in rows} == {"search": "3", "ads": "2", "(untagged)": "1"}
    days = runner.invoke(app, ["ledger", str(attributed), "--by", "day"], env={"COLUMNS": "80"})
    assert days.exit_code == 0 and "2026-12-01" in days.stdout and "2026-12-02" in days.stdout
    model = runner.invoke(app, ["ledger", str(attributed), "--by", "model"], env={"COLUMNS": "80"})
    assert "claude-sonnet-4-5" in model.stdout and "gpt-4o" in model.stdout
    bad = runner.invoke(app, ["ledger", str(attributed), "--by", "colour"])
    assert bad.exit_code == 2 and "key, model, day or tag:NAME" in bad.stderr


def test_the_html_report_has_spend_by_key_and_by_each_tag(attributed, tmp_path):
    out = tmp_path / "report"
    assert CliRunner().invoke(app, ["ledger", str(attributed), "--html", str(out)]).exit_code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["by"]) == {"key", "tag:app", "tag:team"}
    assert "Spend by tag team" in (out / "index.html").read_text()


WHOLE_AT_80 = {
    "": ("claude-sonnet-4-5", "gpt-4o", "2026-12-01", "2026-12-02"),
    "key": ("...x7Qa-3f9a1c2b7e4d", "...K2zz-0a1b2c3d4e5f", "(no key)"),
    "tag:team": ("search", "ads", "(untagged)"),
    "model": ("claude-sonnet-4-5", "gpt-4o"),
}


@pytest.mark.parametrize("by", list(WHOLE_AT_80))
def test_every_ledger_table_reads_whole_at_80_columns(attributed, by):
    form = ["--by", by] if by else []
    result = CliRunner().invoke(app, ["ledger", str(attributed), *form], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert all(len(line) <= 80 for line in result.stdout.splitlines()[1:]), result.stdout
    for word in WHOLE_AT_80[by]:
        assert word in result.stdout, (word, result.stdout)


# ------------------------------------------------------------------------------------------- a CSV safe to open
def test_csv_cells_cannot_hide_text_break_lines_or_run_formulas(tmp_path):
    path = tmp_path / "calls.sqlite"
    book = open_ledger(path)
    book.write([record(1, model="=HYPERLINK(\"http://x\")", message="a\x1b[2Jb\u202egnp.exe\nforged,row",
                       tags={"team": "+search", "app": "@bot"}, key_fingerprint="-abc")])  # fmt: skip
    book.close()
    for args in (["--csv"], ["--by", "tag:team", "--csv"], ["--by", "model", "--csv"]):
        result = CliRunner().invoke(app, ["ledger", str(path), *args])
        assert result.exit_code == 0
        assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        assert len(rows) == 1
        for cell in rows[0].values():
            assert not cell.startswith(("=", "+", "-", "@")), cell
    row = next(csv.DictReader(io.StringIO(CliRunner().invoke(app, ["ledger", str(path), "--csv"]).stdout)))
    assert row["message"] == "a\\x1b[2Jb\\u202egnp.exe\\nforged,row" and row["model"] == '\'=HYPERLINK("http://x")'
    assert row["tags"] == "team=+search;app=@bot" and row["key_fingerprint"] == "'-abc"
    assert row["billed_cost"] == "0.002275"


def test_ledger_csv_into_a_reader_that_leaves_early_ends_quietly(filled):
    command = f"{sys.executable} -m mmtok.cli.main ledger {filled} --csv | head -1"
    for _ in range(3):
        done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True, text=True, timeout=60)
        assert done.stdout.startswith("id,time,provider") and done.stderr == "", done.stderr
        assert done.returncode == 0
