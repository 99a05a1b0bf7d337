"""Attribution (issue 37): each row carries the caller's key fingerprint (never the key) and the call's tags, from
the ``x-mmtok-tags`` header (removed before forwarding) and the body's own ``metadata`` / ``user``; budgets per
key hold one key back while the others go on. Calls through the official OpenAI, Anthropic and Gemini SDKs."""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.proxy.attribution import BadTags, body_tags, fingerprint, header_tags
from tests.test_proxy import KEYS, anthropic_client, gemini_client, openai_client
from tests.upstream import Upstream, make_app, running_proxy, serve

HI = [{"role": "user", "content": "hi"}]
LONG_ANSWERS = {"x-upstream-output-tokens": "900"}  # the stand-in provider bills each answer 900 output tokens


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


def test_each_row_names_its_key_by_fingerprint_and_carries_its_tags(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger) as proxy:
        tagged = openai_client(proxy, **{"x-mmtok-tags": "team=search, app=bot"})
        tagged.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=10, user="u-42",
                                       metadata={"feature": "summaries", "team": "body-loses"}, store=True)  # fmt: skip
        claude, gemini = anthropic_client(proxy), gemini_client(proxy)  # held: a client collected mid-call closes
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HI, metadata={"user_id": "u-7"})
        gemini.models.generate_content(model="gemini-2.5-pro", contents="hi")
    rows = {r.provider: r for r in open_ledger(ledger).records()}
    assert rows["openai"].tags == {"app": "bot", "feature": "summaries", "team": "search", "user": "u-42"}
    assert rows["anthropic"].tags == {"user": "u-7"} and rows["gemini"].tags == {}
    for provider, row in rows.items():
        assert row.key_fingerprint.startswith(f"...{KEYS[provider][-4:]}-") and len(row.key_fingerprint) == 20
    stored = ledger.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("calls.sqlite-*"))
    assert not any(key.encode() in stored for key in KEYS.values())
    assert all("x-mmtok-tags" not in seen["headers"] for seen in state.requests)
    assert state.requests[0]["headers"]["authorization"] == f"Bearer {KEYS['openai']}"  # the key still goes on


def test_a_key_is_named_alike_by_every_proxy_on_one_ledger_and_apart_on_another(upstream, tmp_path):
    _, url = upstream
    for ledger in (tmp_path / "a.sqlite", tmp_path / "a.sqlite", tmp_path / "b.sqlite"):
        with running_proxy(url, ledger) as proxy:
            openai_client(proxy).chat.completions.create(model="gpt-4o", messages=HI, max_tokens=5)
    a = {r.key_fingerprint for r in open_ledger(tmp_path / "a.sqlite").records()}
    b = {r.key_fingerprint for r in open_ledger(tmp_path / "b.sqlite").records()}
    assert len(a) == 1 and len(b) == 1 and a != b


def test_a_per_key_budget_holds_one_key_back_while_the_others_go_on(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite", budget_usd_per_day_per_key=Decimal("0.02")) as proxy:
        settings = {"base_url": proxy + "/v1", "max_retries": 0, "default_headers": LONG_ANSWERS}
        spender = openai.OpenAI(api_key="sk-spender-000000000000000000", **settings)
        other = openai.OpenAI(api_key="sk-other-1111111111111111111111", **settings)
        spender.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)  # billed $0.009
        spender.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)
        with pytest.raises(openai.RateLimitError, match=r"daily budget \$0.02 of key \.\.\.0000-"):
            spender.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)
        other.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)


def test_a_per_tag_budget_counts_the_tagged_calls_only(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite", budgets=("tag:team=search=0.015",)) as proxy:
        search = openai_client(proxy, **{"x-mmtok-tags": "team=search"}, **LONG_ANSWERS)
        search.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)
        with pytest.raises(openai.RateLimitError, match="of tag team=search"):
            search.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=900)
        openai_client(proxy, **{"x-mmtok-tags": "team=ads"}).chat.completions.create(
            model="gpt-4o", messages=HI, max_tokens=1000
        )


def test_fingerprints_show_the_last_4_characters_only_of_a_long_key():
    assert fingerprint("sk-proj-abcdefghijklmnopqrstuvwxyz", "salt").startswith("...wxyz-")
    assert "short" not in fingerprint("short-key", "salt") and len(fingerprint("short-key", "salt")) == 12
    assert fingerprint("sk-proj-abcdefghijklmnopqrstuvwxyz", "salt") != fingerprint(
        "sk-proj-abcdefghijklmnopqrstuvwxyz", "pepper"
    )
    assert fingerprint(None, "salt") is None


@pytest.mark.parametrize(
    "header",
    ["team", "team=", "=search", "te am=x", "a=b," * 20, "team=" + "x" * 600, "team=a\x1bb", "x" * 5000],
)
def test_a_malformed_tags_header_is_refused_by_name(header):
    with pytest.raises(BadTags, match="x-mmtok-tags"):
        header_tags(header)


def test_body_tags_keep_short_strings_only():
    body = {"user": "u-1", "metadata": {"ok": "yes", "n": 3, "long": "x" * 600, "bad key": "v"}, "labels": ["x"]}
    assert body_tags(body) == {"user": "u-1", "ok": "yes"}
    assert body_tags({"safety_identifier": "hash-9", "user": "old"}) == {"user": "hash-9"}
