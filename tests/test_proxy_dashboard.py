"""The live dashboard at /mmtok/, looked at in a real headless Chromium (tests/browser.py): it loads with no console
error and nothing from outside the proxy, its numbers are the ledger's (spend, calls, budgets, by model, key and
tag, predicted against billed), it updates without a reload, and what callers chose (tags, model names, messages)
is shown as text, never run as HTML. A screenshot is kept in test-output/proxy-dashboard.png."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import httpx
import openai
import pytest

from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.proxy.dashboard import SUMMARY_TTL_S, summary
from mmtok.budgets.proxy.limits import budget_rules
from tests.browser import Browser, artifact
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.test_proxy import anthropic_client, gemini_client, image_message, openai_client, rows
from tests.upstream import Upstream, make_app, running_proxy, serve

HOSTILE = '<img src=x onerror="document.title=1">'
BUDGETS = {"budget_usd_per_day": Decimal("1"), "budgets": ("tag:team=0.01",)}  # Gemini: bounded at ~$0.66


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


def make_calls(proxy: str) -> None:
    """A team's morning: two teams and three keys on three providers, a refusal over a team's budget, an upstream
    error."""
    search = openai_client(proxy, **{"x-mmtok-tags": "team=search,app=bot"})
    search.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=50)
    list(search.chat.completions.create(model="gpt-4.1-mini", messages=image_message((512, 300)), max_tokens=50,
                                        stream=True))  # fmt: skip
    ads = anthropic_client(proxy, **{"x-mmtok-tags": "team=ads,app=copy"})
    for text in ("Write a tagline.", "Shorter, please."):
        ads.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": text}])
    google = gemini_client(proxy)  # held: the client closes its connections when collected
    google.models.generate_content(model="gemini-2.5-pro", contents="Hello", config={"max_output_tokens": 64})
    with pytest.raises(openai.RateLimitError):  # over the day's budget for team=search
        search.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=2000)
    with pytest.raises(openai.InternalServerError):
        openai_client(proxy, **{"x-upstream-behaviour": "500"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )


def shown(page, selector: str) -> list[str]:
    return page.evaluate(f"[...document.querySelectorAll({selector!r})].map(n => n.dataset.value ?? n.textContent)")


def group_spend(page, table: str) -> dict[str, Decimal]:
    found = page.evaluate(
        f"[...document.querySelectorAll('{table} tbody tr')].map(r => [r.dataset.group, "
        "r.querySelector('td.spend').dataset.value])"
    )
    return {group: Decimal(spend) for group, spend in found}


def test_the_dashboard_shows_the_ledgers_numbers_in_a_real_browser_and_updates_live(upstream, tmp_path, monkeypatch):
    _, url = upstream
    monkeypatch.chdir(tmp_path)  # the page names the ledger as given: calls.sqlite
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, "calls.sqlite", **BUDGETS) as proxy:
        make_calls(proxy)
        with Browser(width=900, height=1000) as browser:  # the docs show it about 700 px wide: text stays >= 9 px
            page = browser.open(proxy + "/mmtok/", ready="Number(document.body.dataset.updates) >= 1")
            records = rows(ledger)
            spend = sum((r.spend for r in records), Decimal(0))
            assert Decimal(page.evaluate("document.getElementById('spend').dataset.value")) == spend
            assert int(page.evaluate("document.getElementById('calls').dataset.value")) == len(records) == 7
            assert int(page.evaluate("document.getElementById('refused').dataset.value")) == 1
            assert int(page.evaluate("document.getElementById('errors').dataset.value")) == 1
            by_model = {}
            for r in records:
                by_model[r.model] = by_model.get(r.model, Decimal(0)) + r.spend
            assert group_spend(page, "#by-model") == by_model
            by_key = {}
            for r in records:
                by_key[r.key_fingerprint] = by_key.get(r.key_fingerprint, Decimal(0)) + r.spend
            assert group_spend(page, "#by-key") == by_key
            by_team = {}
            for r in records:
                team = r.tags.get("team", "(untagged)")
                by_team[team] = by_team.get(team, Decimal(0)) + r.spend
            assert group_spend(page, "#by-tag table[data-tag=team]") == by_team
            day = dt.datetime.now(dt.UTC).date().isoformat()
            store = open_ledger(ledger, read_only=True)
            budgets = dict(page.evaluate(
                "[...document.querySelectorAll('#budgets tbody tr')].map(r => [r.dataset.scope, "
                "r.querySelector('td.spent').dataset.value])"
            ))  # fmt: skip
            assert Decimal(budgets["all"]) == store.spend_on(day, "all") == spend
            assert Decimal(budgets["tag:team=search"]) == store.spend_on(day, "tag:team=search") > 0
            predicted = sum(r.predicted_input for r in records if r.billed_input is not None and r.outcome != "refused")
            assert int(page.evaluate("document.getElementById('predicted-input').dataset.value")) == predicted
            assert shown(page, "#recent tbody td:nth-child(3)") == ["upstream_error", "refused"]

            before = int(page.evaluate("document.body.dataset.updates"))
            anthropic_client(proxy).messages.create(
                model="claude-sonnet-4-5", max_tokens=32, messages=[{"role": "user", "content": "Hello again"}]
            )
            page.wait_for(f"Number(document.getElementById('calls').dataset.value) === {len(records) + 1}", 20)
            assert int(page.evaluate("document.body.dataset.updates")) > before  # no reload: the same page polled
            after = sum((r.spend for r in rows(ledger)), Decimal(0))
            assert Decimal(page.evaluate("document.getElementById('spend').dataset.value")) == after > spend
            assert page.errors() == []
            assert all(seen.startswith(proxy + "/mmtok/") for seen in page.requests), page.requests
            page.screenshot(artifact("proxy-dashboard.png"))  # docs/images/ has one: MMTOK_TEST_OUTPUT=docs/images


def test_what_callers_choose_is_shown_as_text_never_run(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite") as proxy:
        anthropic_client(proxy, **{"x-mmtok-tags": f"team={HOSTILE}"}).messages.create(
            model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
            metadata={"user_id": HOSTILE},
        )  # fmt: skip
        with Browser() as browser:
            page = browser.open(proxy + "/mmtok/", ready="Number(document.body.dataset.updates) >= 1")
            text = page.evaluate("document.body.innerText")
            assert text.count(HOSTILE) == 2  # the team and the user, as text
            assert page.evaluate("document.images.length") == 0 and page.evaluate("document.title") == "mmtok proxy"
            assert page.errors() == []


def test_the_page_and_its_files_allow_nothing_from_elsewhere(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite") as proxy:
        page = httpx.get(proxy + "/mmtok/", timeout=10)
        script = httpx.get(proxy + "/mmtok/static/dashboard.js", timeout=10)
        missing = httpx.get(proxy + "/mmtok/static/../app.py", timeout=10)
        posted = httpx.post(proxy + "/mmtok/api/summary", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "http" not in page.text.replace('href="/mmtok', "").split("<footer>")[0]  # no external URL
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text  # values are set as text
    assert missing.status_code == 404 and posted.status_code == 405


def test_the_summary_is_computed_from_the_ledger_and_cached_briefly(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, **BUDGETS) as proxy:
        make_calls(proxy)
        served = httpx.get(proxy + "/mmtok/api/summary", timeout=10).json()
    store = open_ledger(ledger, read_only=True)
    direct = summary(store, budget_rules(Decimal("1"), None, ("tag:team=0.01",)))
    for key in ("totals", "budgets", "by_model", "by_key", "by_tag", "accuracy", "recent"):
        assert served[key] == direct[key], key
    assert SUMMARY_TTL_S <= 2


def test_the_summary_reads_a_postgresql_ledger_with_its_budget_counters(upstream, postgres_url):  # noqa: F811
    _, url = upstream
    with running_proxy(url, postgres_url, **BUDGETS) as proxy:
        make_calls(proxy)
        served = httpx.get(proxy + "/mmtok/api/summary", timeout=10).json()
    store = open_ledger(postgres_url)
    try:
        records = list(store.records())
        day = records[0].day
        budgets = {row["scope"]: Decimal(row["spent"]) for row in served["budgets"]}
        assert budgets["all"] == store.spend_on(day, "all") == sum((r.spend for r in records), Decimal(0))
        assert budgets["tag:team=search"] == store.spend_on(day, "tag:team=search") > 0
        assert all(Decimal(row["held"]) == 0 for row in served["budgets"])  # every call has ended
        assert served["totals"]["calls"] == len(records) == 7
    finally:
        store.close()


class UnreadableLedger:
    """A ledger whose database has gone: writes are taken, reads fail."""

    where, salt, skipped = "postgresql://db.internal/mmtok", "salt", []

    def write(self, records):
        return []

    def records(self, since=None):
        raise OSError("connection refused")

    def spend_on(self, day, scope="all"):
        raise OSError("connection refused")

    def close(self):
        pass


def test_a_ledger_that_cannot_be_read_is_a_503_the_page_shows(tmp_path):
    from mmtok.budgets.proxy import ProxyConfig, create_app

    config = ProxyConfig(ledger=str(tmp_path / "unused.sqlite"))
    with serve(create_app(config, ledger=UnreadableLedger())) as proxy:
        answer = httpx.get(proxy + "/mmtok/api/summary", timeout=10)
        assert answer.status_code == 503 and "cannot read the ledger (OSError)" in answer.json()["error"]
        with Browser() as browser:
            page = browser.open(proxy + "/mmtok/", ready="!document.getElementById('problem').hidden")
            assert "Cannot read the summary" in page.evaluate("document.getElementById('problem').textContent")
