"""A quote is an upper bound unless labelled otherwise (issue 36): bodies made by the official SDKs are bounded at
their own output limit or the model's maximum, times n / candidateCount, with thinking where the provider bills it
beside the limit, at the rate of the output modalities asked for; every value a provider refuses is one error."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from mmtok.budgets.pricing import price_request
from mmtok.errors import PriceError
from mmtok.request import InvalidBody, parse_body
from tests.sdk_bodies import anthropic_messages, gemini_generate, openai_chat, openai_responses

AT = "2026-12-05"
HELLO = [{"role": "user", "content": "Hello"}]


def _output(quote):
    return next(line for line in quote.lines if line.item == "output")


def _gemini(config, model="gemini-2.5-flash", contents="Hello"):
    _, body = gemini_generate(model, contents, config)
    return price_request(body, model, at=AT)


# ------------------------------------------------------------------------------------------------ output bound
def test_a_body_without_an_output_limit_is_bounded_at_the_models_maximum_output():
    quote = price_request(openai_chat(model="gpt-4o", messages=HELLO), at=AT)
    output = _output(quote)
    assert output.tokens == 16_384 and output.label == "upper bound"  # LiteLLM's max_output_tokens for gpt-4o
    assert "gpt-4o's maximum output, LiteLLM map" in output.working
    assert quote.output_cost == Decimal(16_384) * 10 / 1_000_000  # $10 / 1M output tokens
    assert quote.total_cost > Decimal("0.16")  # the issue's $0.0000225 was the input alone


def test_the_body_limit_bounds_the_output_and_n_multiplies_it():
    one = price_request(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=100), at=AT)
    three = price_request(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=100, n=3), at=AT)
    assert (one.output_tokens, three.output_tokens) == (100, 300)
    assert three.output_cost == 3 * one.output_cost and three.input_cost == one.input_cost
    assert _output(three).working == "at most 3 x 100 = 300 output tokens (the body's max_tokens: 100, n=3)"


def test_openai_reasoning_is_within_max_completion_tokens():
    quote = price_request(openai_chat(model="o3", messages=HELLO, max_completion_tokens=2000), at=AT)
    assert quote.output_tokens == 2000 and "reasoning tokens are within it" in _output(quote).working
    responses = price_request(openai_responses(model="o3", input="Hello", max_output_tokens=500), at=AT)
    assert responses.output_tokens == 500


def test_anthropic_thinking_counts_within_max_tokens():
    body = anthropic_messages(
        model="claude-sonnet-4-5", max_tokens=4000, messages=HELLO, thinking={"type": "enabled", "budget_tokens": 2000}
    )
    assert price_request(body, at=AT).output_tokens == 4000


def test_anthropic_server_tools_make_the_output_an_estimate():
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    quote = price_request(anthropic_messages(model="claude-sonnet-4-5", max_tokens=500, messages=HELLO, tools=tools))
    assert _output(quote).label == "estimate" and "more than once" in _output(quote).working


def test_gemini_thinking_is_added_to_the_limit_and_candidates_multiply_it():
    budget = {"max_output_tokens": 1000, "candidate_count": 2, "thinking_config": {"thinking_budget": 512}}
    assert _gemini(budget).output_tokens == 2 * (1000 + 512)
    off = {"max_output_tokens": 1000, "thinking_config": {"thinking_budget": 0}}
    assert _gemini(off).output_tokens == 1000
    dynamic = _gemini({"max_output_tokens": 1000})  # thinking on by default: thoughts up to the output limit
    assert dynamic.output_tokens == 65_536 and "thinking on by default" in _output(dynamic).working
    assert _gemini({"max_output_tokens": 1000}, model="gemini-2.0-flash").output_tokens == 1000  # no thinking


# ------------------------------------------------------------------------------------------ output modalities
def test_audio_output_is_bounded_at_the_audio_output_rate():
    body = openai_chat(
        model="gpt-4o-audio-preview",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        max_completion_tokens=1000,
        messages=HELLO,
    )
    quote = price_request(body, at=AT)
    output = _output(quote)
    assert output.modality == "output_audio" and output.label == "upper bound"
    assert quote.output_cost == Decimal("0.08")  # $80 / 1M audio output tokens; the text rate gave $0.01
    assert "every token at the highest of their rates" in output.working
    text = price_request(openai_chat(model="gpt-4o-audio-preview", max_completion_tokens=1000, messages=HELLO), at=AT)
    assert text.output_cost == Decimal("0.01")


def test_gemini_response_modalities_choose_the_image_and_audio_output_rates():
    image = _gemini({"max_output_tokens": 2000, "response_modalities": ["TEXT", "IMAGE"]}, "gemini-2.5-flash-image")
    assert _output(image).modality == "output_image" and image.output_cost == Decimal("0.06")  # $30 / 1M
    speech = _gemini({"response_modalities": ["AUDIO"], "max_output_tokens": 1000}, "gemini-2.5-flash-preview-tts")
    assert _output(speech).modality == "output_audio" and "audio output tokens" in _output(speech).rate


def test_audio_asked_of_a_model_that_makes_none_is_an_error_not_a_text_price():
    body = openai_chat(model="gpt-4o", modalities=["text", "audio"], max_tokens=10, messages=HELLO)
    with pytest.raises(PriceError, match="gpt-4o does not produce audio"):
        price_request(body, at=AT)


# ------------------------------------------------------------------------------------------- refused values
OPENAI_BAD = [
    ({"max_tokens": "100"}, "max_tokens: must be an integer, got a string ('100')"),
    ({"max_tokens": 1.5}, "max_tokens: must be an integer, got a decimal number (1.5)"),
    ({"max_tokens": -5}, "max_tokens: must be at least 1, got -5"),
    ({"max_tokens": 0}, "max_tokens: must be at least 1, got 0"),
    ({"max_tokens": True}, "max_tokens: must be an integer, got a boolean (true)"),
    ({"max_tokens": 10**3999}, "max_tokens: must be at most 2,147,483,647, got a 4,000-digit integer"),
    ({"max_completion_tokens": 20_000}, "20,000 is above gpt-4o's maximum output of 16,384"),
    ({"n": 0}, "n: must be at least 1, got 0"),
    ({"n": 129}, "n: must be at most 128, got 129"),
    ({"n": "3"}, "n: must be an integer"),
    ({"modalities": ["video"]}, "modalities: must be a list of"),
]


@pytest.mark.parametrize(("fields", "said"), OPENAI_BAD, ids=[str(f) for f, _ in OPENAI_BAD])
def test_each_value_openai_refuses_is_one_error(fields, said):
    body = {"model": "gpt-4o", "messages": HELLO, **fields}  # the SDK sends these as given
    with pytest.raises(InvalidBody, match="OpenAI refuses this body with HTTP 400") as caught:
        price_request(json.dumps(body), at=AT)
    assert said in str(caught.value) and "\n" not in str(caught.value)


ANTHROPIC_BAD = [
    ({"max_tokens": "100"}, "max_tokens: must be an integer"),
    ({"max_tokens": -1}, "max_tokens: must be at least 0, got -1"),
    ({"max_tokens": 100_000}, "100,000 is above claude-sonnet-4-5's maximum output of 64,000"),
    ({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 500}}, "must be at least 1024, got 500"),
    ({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 3000}}, "less than max_tokens (2,000)"),
]


@pytest.mark.parametrize(("fields", "said"), ANTHROPIC_BAD, ids=[str(f) for f, _ in ANTHROPIC_BAD])
def test_each_value_anthropic_refuses_is_one_error(fields, said):
    # timeout given: the SDK otherwise works one out from max_tokens, and stops before sending a string or a huge one
    body = anthropic_messages(model="claude-sonnet-4-5", messages=HELLO, timeout=30, **fields)
    with pytest.raises(InvalidBody, match="Anthropic refuses this body") as caught:
        price_request(body, at=AT)
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"maxOutputTokens": "100"}, "generationConfig.maxOutputTokens: must be an integer"),
        ({"maxOutputTokens": -1}, "generationConfig.maxOutputTokens: must be at least 0, got -1"),
        ({"candidateCount": 9}, "generationConfig.candidateCount: must be at most 8, got 9"),
        ({"responseModalities": ["SMELL"]}, "responseModalities: must be a list of TEXT, IMAGE and AUDIO"),
        ({"thinkingConfig": {"thinkingBudget": "lots"}}, "thinkingConfig.thinkingBudget: must be an integer"),
    ],
)
def test_each_value_google_refuses_is_one_error(config, said):
    body = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}], "generationConfig": config}
    with pytest.raises(InvalidBody, match="Google refuses this body") as caught:
        price_request(body, "gemini-2.5-flash", at=AT)
    assert said in str(caught.value)


def test_a_limit_above_a_gemini_models_maximum_is_said_and_bounded_at_the_limit():
    quote = _gemini({"max_output_tokens": 100_000, "thinking_config": {"thinking_budget": 0}})
    assert quote.output_tokens == 100_000 and "Google may refuse it" in _output(quote).working


def test_the_parser_reads_the_settings_once_for_every_caller():
    request = parse_body(openai_chat(model="gpt-4o", messages=HELLO, n=2, max_completion_tokens=64))
    assert (request.output.limit, request.output.limit_field, request.output.candidates) == (
        64,
        "max_completion_tokens",
        2,
    )
    assert request.max_output_tokens == 64 and not request.invalid


# --------------------------------------------------------------------------------------------- prompt caching
def _cached_body(ttl=None, repeat=400):
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    system = [{"type": "text", "text": "The house style guide says many things. " * repeat, "cache_control": control}]
    return anthropic_messages(model="claude-sonnet-4-5", max_tokens=100, system=system, messages=HELLO)


def test_anthropic_cache_control_is_priced_as_a_cache_write_with_the_read_price_beside():
    quote = price_request(_cached_body(), at=AT)
    system = next(line for line in quote.lines if line.item == "system")
    assert system.cache == "5m" and system.cost == system.tokens * Decimal("3.75") / 1_000_000  # 1.25 x $3
    plan = quote.cache
    assert plan.kind == "written" and plan.tokens == system.tokens
    assert plan.read_cost == system.tokens * Decimal("0.3") / 1_000_000  # 0.1 x $3: what a repeat pays
    assert "a repeat within the lifetime reads them" in plan.working
    message = next(line for line in quote.lines if line.item == "messages[0]")
    assert not message.cache  # after the mark: plain input
    assert quote.to_dict()["cache"]["kind"] == "written"


def test_a_one_hour_cache_write_costs_twice_the_input_rate():
    system = next(line for line in price_request(_cached_body("1h"), at=AT).lines if line.item == "system")
    assert system.cache == "1h" and system.cost == system.tokens * Decimal(6) / 1_000_000


def test_a_prefix_under_the_models_minimum_is_not_cached():
    quote = price_request(_cached_body(repeat=5), at=AT)
    assert quote.cache.kind == "not cached" and "minimum of 1,024" in quote.cache.working
    assert not any(line.cache for line in quote.lines)


def test_openai_caches_long_prompts_by_itself_and_the_quote_says_what_a_repeat_reads():
    long = [{"role": "user", "content": "The house style guide says many things. " * 300}]
    quote = price_request(openai_chat(model="gpt-4o", messages=long, max_tokens=10), at=AT)
    assert quote.cache.kind == "automatic" and quote.cache.read_cost == quote.cache.tokens * Decimal("1.25") / 10**6
    short = price_request(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=10), at=AT)
    assert short.cache is None  # under 1,024 tokens: nothing is cached


def test_a_gemini_cached_content_leaves_the_quote_incomplete():
    body = {"contents": [{"parts": [{"text": "Hello"}]}], "cachedContent": "cachedContents/abc123"}
    quote = price_request(body, "gemini-2.5-flash", at=AT)
    assert not quote.complete and "cachedContents/abc123" in quote.missing[0]


def test_anthropic_refuses_more_than_four_breakpoints_and_a_one_hour_mark_after_a_five_minute_one():
    mark = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {n}", "cache_control": mark} for n in range(5)]
    body = anthropic_messages(model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": blocks}])
    with pytest.raises(InvalidBody, match="at most 4 cache breakpoints, got 5"):
        price_request(body, at=AT)


# ---------------------------------------------------------------------------------------------- the catalog
def test_the_catalog_keeps_each_models_maximum_output_and_whether_it_reasons():
    from mmtok.budgets.pricing.catalog import catalog

    gpt4o, o3, sonnet = (catalog().get(name) for name in ("gpt-4o", "o3", "claude-sonnet-4-5"))
    assert (gpt4o.max_output_tokens, o3.max_output_tokens, sonnet.max_output_tokens) == (16_384, 100_000, 64_000)
    assert o3.reasoning and sonnet.reasoning and not gpt4o.reasoning
    assert "audio" in catalog().get("gemini-2.5-flash-preview-tts").output_modalities  # it has an audio price


def test_a_model_priced_from_litellms_map_has_no_audio_rate_in_silence(samples):
    from mmtok.budgets.pricing import price

    quote = price([samples / "speech.wav"], "deep-research-pro-preview-12-2025", text="hi", at=AT)
    assert not quote.complete and "no audio input rate is known" in quote.missing[0]
    assert "(LiteLLM's map gives none)" in quote.missing[0]
