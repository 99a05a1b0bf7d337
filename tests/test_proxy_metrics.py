"""GET /mmtok/metrics: Prometheus text from the official client library, the same numbers as the ledger, labels
bounded (never a key or a tag; unknown models folded into "other"), and one view of all workers under --workers."""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mmtok.budgets.ledger import Record
from mmtok.budgets.proxy.metrics import MAX_MODELS, Metrics
from tests.test_proxy import KEYS, anthropic_client, image_message, openai_client, rows
from tests.test_proxy_reliability import ProxyProcess, wait_until_written
from tests.upstream import Upstream, make_app, running_proxy, serve

TAGS = {"x-mmtok-tags": "team=search-secret-team"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, by name and labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and all((k, labels[k]) in ls for k in labels))


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


def test_metrics_count_each_call_as_the_ledger_records_it(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, max_cost=Decimal("0.01")) as proxy:
        client = openai_client(proxy, **TAGS)
        client.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=50)
        list(client.chat.completions.create(model="gpt-4o", messages=image_message((512, 300)), max_tokens=50,
                                            stream=True))  # fmt: skip
        with pytest.raises(openai.BadRequestError):  # over --max-cost
            client.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=16_000)
        anthropic_client(proxy).messages.create(
            model="claude-sonnet-4-5", max_tokens=32, messages=[{"role": "user", "content": "Hello"}]
        )
        with pytest.raises(anthropic.BadRequestError):
            anthropic_client(proxy).messages.create(
                model="claude-sonnet-4-5", max_tokens=32, messages=[{"role": "user", "content": "x" * 100_000}]
            )
        answer = httpx.get(proxy + "/mmtok/metrics", timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain; version=")
    text = answer.text
    found = samples(text)
    records = rows(ledger)
    for record in records:
        assert total(found, "mmtok_proxy_requests_total", provider=record.provider, outcome=record.outcome) >= 1
    assert total(found, "mmtok_proxy_requests_total") == len(records) == 5
    assert total(found, "mmtok_proxy_requests_total", provider="openai", model="gpt-4o", outcome="ok") == 2
    assert total(found, "mmtok_proxy_refusals_total", reason="max_cost") == 2
    billed = sum(r.billed_cost or 0 for r in records)
    assert total(found, "mmtok_proxy_cost_usd_total", kind="billed") == pytest.approx(float(billed))
    assert total(found, "mmtok_proxy_cost_usd_total", kind="spent") == pytest.approx(
        float(sum(r.spend for r in records))
    )
    billed_tokens = sum((r.billed_input or 0) + (r.billed_output or 0) for r in records)
    assert total(found, "mmtok_proxy_billed_tokens_total") == billed_tokens
    assert total(found, "mmtok_proxy_predicted_tokens_total", modality="image") == sum(
        r.predicted.get("image", 0) for r in records
    )
    sent = [r for r in records if r.upstream_ms is not None]
    assert total(found, "mmtok_proxy_upstream_seconds_count") == len(sent) == len(state.requests) == 3
    assert total(found, "mmtok_proxy_added_seconds_count") == len(records)
    assert total(found, "mmtok_proxy_in_flight") == 0
    for secret in (*KEYS.values(), "search-secret-team", records[0].key_fingerprint):
        assert secret not in text


def test_early_refusals_are_counted_by_reason(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite", max_body_bytes=1000) as proxy:
        httpx.post(proxy + "/v1/chat/completions", content=b"{not json", timeout=10)
        httpx.post(proxy + "/v1/chat/completions", json={"model": "gpt-4o", "messages": [], "x": "y" * 2000})
        found = samples(httpx.get(proxy + "/mmtok/metrics", timeout=10).text)
    assert total(found, "mmtok_proxy_refusals_total", reason="bad_json") == 1
    assert total(found, "mmtok_proxy_refusals_total", reason="body_too_large") == 1


def test_model_labels_are_bounded_and_unknown_models_are_other():
    metrics = Metrics()
    priced = [Record(model=f"model-{n}", predicted_cost=Decimal(1)) for n in range(MAX_MODELS + 50)]
    labels = {metrics.model_label(r) for r in priced}
    assert len(labels) == MAX_MODELS + 1 and "other" in labels
    assert metrics.model_label(Record(model="gpt-made-up")) == "other"  # not priced: not a model mmtok knows
    assert metrics.model_label(Record(model="model-0", predicted_cost=Decimal(1))) == "model-0"
    assert metrics.model_label(Record(model=None)) == "none"
    assert metrics.model_label(Record(model="x\n" * 3, predicted_cost=Decimal(1))) == "other"


def test_every_worker_serves_the_metrics_of_all_of_them(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "calls.sqlite"
    folders = set(Path(tempfile.gettempdir()).glob("mmtok-metrics-*"))
    proxy = ProxyProcess(url, ledger, "--workers", "2")
    assert len(set(Path(tempfile.gettempdir()).glob("mmtok-metrics-*")) - folders) == 1  # the workers' folder
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}
    try:
        for _ in range(30):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client() as client:
                assert client.post(proxy.url + "/anthropic/v1/messages", json=body, timeout=30).status_code == 200
        with httpx.Client() as client:
            wait_until_written(client, proxy.url)
        scrapes = []
        for _ in range(6):
            with httpx.Client() as client:
                scrapes.append(samples(client.get(proxy.url + "/mmtok/metrics", timeout=10).text))
    finally:
        assert proxy.stop() == 0
    assert set(Path(tempfile.gettempdir()).glob("mmtok-metrics-*")) <= folders  # removed at exit
    workers = {r.instance for r in rows(ledger)}
    assert len(workers) == 2  # both served calls
    for found in scrapes:
        assert total(found, "mmtok_proxy_requests_total", provider="anthropic", outcome="ok") == 30
        assert total(found, "mmtok_proxy_upstream_seconds_count") == 30
