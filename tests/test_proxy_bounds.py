"""The proxy judges each call by its upper bound (issue 36, items 1-3, 9, 10), with the official SDKs as clients and
a stand-in provider on 127.0.0.1: a body without an output limit is bounded at the model's maximum, n multiplies the
bound, audio output is bounded at the audio rate, a value the provider refuses is that provider's own 400 and never
sent, a request the provider will refuse is recorded, prompt-cache marks are predicted as writes."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import anthropic
import httpx
import openai
import pytest
from google import genai

from mmtok.budgets.ledger import open_ledger
from tests.upstream import Upstream, make_app, photo, running_proxy, serve

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


def _openai(proxy: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=proxy + "/v1", max_retries=0)


def _anthropic(proxy: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=proxy + "/anthropic", max_retries=0)


def _gemini(proxy: str) -> genai.Client:
    options = genai.types.HttpOptions(base_url=proxy + "/gemini/", api_version="v1beta")
    return genai.Client(api_key="g-test", http_options=options)


def _rows(ledger) -> list:
    return list(open_ledger(ledger).records())


def test_a_body_without_an_output_limit_is_judged_at_the_models_maximum_and_never_sent(upstream, tmp_path):
    state, url = upstream
    with running_proxy(url, tmp_path / "a.sqlite", max_cost=Decimal("0.001")) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"predicted cost \$0\.16\d+ is over --max-cost \$0\.001"):
            _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO)  # 16,384 output tokens at most
        google = _gemini(proxy)  # held: the client closes its connections when collected
        with pytest.raises(genai.errors.ClientError, match="over --max-cost"):
            google.models.generate_content(model="gemini-2.5-flash", contents="Hello")
        assert not state.requests  # refused before sending
        bounded = _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=20)
    assert bounded.choices and len(state.requests) == 1


def test_the_daily_budget_judges_the_bound_not_the_input(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "a.sqlite"
    with running_proxy(url, ledger, budget_usd_per_day=Decimal("0.01")) as proxy:
        with pytest.raises(openai.RateLimitError, match=r"this request is bounded at \$0\.16"):
            _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO)
        _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=100)  # $0.001 at most
    assert len(state.requests) == 1 and [r.outcome for r in _rows(ledger)] == ["refused", "ok"]


def test_n_is_in_the_prediction(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "a.sqlite"
    with running_proxy(url, ledger) as proxy:
        costs = []
        for n in (1, 3):
            raw = _openai(proxy).chat.completions.with_raw_response.create(
                model="gpt-4o", messages=HELLO, max_tokens=100, n=n
            )
            costs.append(Decimal(raw.headers["x-mmtok-predicted-cost-usd"]))
    assert costs[1] - costs[0] == Decimal(2 * 100 * 10) / 1_000_000  # two more replies of 100 tokens at $10 / 1M
    rows = _rows(ledger)
    assert [r.predicted["output"] for r in rows] == [100, 300] and rows[1].settings["replies"] == 3


def test_audio_output_is_judged_at_the_audio_output_rate(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "a.sqlite"
    asked = dict(
        model="gpt-4o-audio-preview",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        max_completion_tokens=1000,
        messages=HELLO,
    )
    over = pytest.raises(openai.BadRequestError, match=r"predicted cost \$0\.08")  # the text rate gave $0.01
    with running_proxy(url, ledger, max_cost=Decimal("0.05")) as proxy, over:
        _openai(proxy).chat.completions.create(**asked)
    with running_proxy(url, ledger, max_cost=Decimal("0.1")) as proxy:
        _openai(proxy).chat.completions.create(**asked)
    refused, sent = _rows(ledger)
    assert refused.outcome == "refused" and sent.outcome == "ok" and len(state.requests) == 1
    assert sent.predicted["output_audio"] == 1000 and sent.settings["output_modalities"] == ["text", "audio"]


def test_values_a_provider_refuses_are_its_own_400_and_never_sent(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "a.sqlite"
    with running_proxy(url, ledger) as proxy:
        with pytest.raises(openai.BadRequestError) as caught:
            _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens="100")
        assert caught.value.body["type"] == "invalid_request_error" and caught.value.body["code"] == "invalid_value"
        assert "max_tokens: must be an integer, got a string ('100')" in caught.value.body["message"]
        with pytest.raises(anthropic.BadRequestError) as refused:
            _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=100_000, messages=HELLO, timeout=30)
        assert refused.value.body["error"]["type"] == "invalid_request_error"
        assert "above claude-sonnet-4-5's maximum output of 64,000" in refused.value.body["error"]["message"]
        google = _gemini(proxy)
        with pytest.raises(genai.errors.ClientError) as gemini:
            google.models.generate_content(
                model="gemini-2.5-flash", contents="Hello", config={"candidate_count": 9, "max_output_tokens": 10}
            )
        assert gemini.value.code == 400 and gemini.value.status == "INVALID_ARGUMENT"
        assert "candidateCount: must be at most 8, got 9" in gemini.value.message
    assert not state.requests
    rows = _rows(ledger)
    assert [(r.outcome, r.status) for r in rows] == [("refused", 400)] * 3


def test_a_4000_digit_max_tokens_is_a_400_and_its_row_is_kept(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "a.sqlite"
    body = json.dumps({"model": "gpt-4o", "messages": HELLO, "max_tokens": 10**3999})
    with running_proxy(url, ledger) as proxy:
        answer = httpx.post(proxy + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        fine = _openai(proxy).chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=5)
    assert answer.status_code == 400 and "a 4,000-digit integer" in answer.json()["error"]["message"]
    assert fine.choices and len(state.requests) == 1
    rows = _rows(ledger)
    assert [r.outcome for r in rows] == ["refused", "ok"] and rows[0].predicted_cost is None


def test_a_request_the_provider_will_refuse_is_recorded_with_the_limit(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "a.sqlite"
    image = {"type": "base64", "media_type": "image/jpeg", "data": base64.b64encode(photo(8200, 100)).decode()}
    content = [{"type": "image", "source": image}, {"type": "text", "text": "What is this?"}]
    with running_proxy(url, ledger) as proxy:
        _anthropic(proxy).messages.create(
            model="claude-sonnet-4-5", max_tokens=20, messages=[{"role": "user", "content": content}]
        )
    (row,) = _rows(ledger)
    assert "provider limit: messages[0].content[0]: 8200x100 px is over the 8,000 px limit per side" in row.message
    assert "platform.claude.com/docs/en/build-with-claude/vision" in row.message


def test_prompt_cache_marks_are_predicted_as_writes_with_the_read_price_kept(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "a.sqlite"
    guide = "The house style guide says many things. " * 300
    with running_proxy(url, ledger) as proxy:
        for control in ({"type": "ephemeral"}, None):
            block = {"type": "text", "text": guide, **({"cache_control": control} if control else {})}
            _anthropic(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=20, system=[block], messages=HELLO)
    cached, plain = _rows(ledger)
    assert cached.settings["cache"]["kind"] == "written" and "cache" not in plain.settings
    written = cached.settings["cache"]["tokens"]
    assert cached.predicted_cost - plain.predicted_cost == written * (Decimal("3.75") - 3) / 1_000_000
    assert Decimal(cached.settings["cache"]["read_cost"]) == written * Decimal("0.3") / 1_000_000
