"""The caches on pricing's shared path: each keyed on everything that changes its answer, each bounded."""

from __future__ import annotations

from mmtok.budgets.pricing import text
from mmtok.budgets.pricing.text import CountCache, count_text


def test_text_count_cache_gives_what_a_fresh_count_gives_for_each_rule():
    sample = "The quick brown fox jumps over the lazy dog. " * 20
    fresh = {rule: text._count_text(sample, rule) for rule in ("o200k_base", "cl100k_base", "estimate:chars/4")}
    for _ in range(2):  # the second round is served from the cache
        for rule, expected in fresh.items():
            assert count_text(sample, rule) == expected
    assert fresh["o200k_base"].tokens != fresh["estimate:chars/4"].tokens  # the rule is part of the key


def test_text_count_cache_keys_on_the_whole_text():
    base = "a system prompt shared by many lines " * 50
    assert count_text(base + "one", "o200k_base").tokens != count_text(base + "one two three", "o200k_base").tokens
    assert count_text(base + "one", "o200k_base") == text._count_text(base + "one", "o200k_base")


def test_text_count_cache_is_bounded_by_the_characters_it_holds():
    cache = CountCache(max_chars=100, max_text_chars=60)
    for n in range(10):
        cache.put("o200k_base", f"{n:02d}" * 15, text._count_text("x", "o200k_base"))  # 30 characters each
    assert cache.chars <= 100
    assert cache.get("o200k_base", "09" * 15) is not None  # the latest kept
    assert cache.get("o200k_base", "00" * 15) is None  # the oldest dropped
    cache.put("o200k_base", "y" * 61, text._count_text("y", "o200k_base"))  # longer than a text it holds
    assert cache.get("o200k_base", "y" * 61) is None


def test_quote_basis_is_kept_per_model_date_and_option_and_remade_with_new_price_data():
    import datetime as dt

    from mmtok.budgets.pricing import money, price_request, resolve
    from mmtok.budgets.pricing.quoting import basis

    model, other = resolve("gpt-4o-mini"), resolve("gpt-4o")
    day, later = dt.date(2026, 12, 5), dt.date(2026, 12, 6)
    kept = basis(model, day, "standard")
    assert basis(model, day, "standard") is kept
    made = {basis(model, day, "batch"), basis(model, later, "standard"), basis(other, day, "standard"), kept}
    assert len(made) == 4  # each part of the key makes its own
    assert basis(model, day, "batch").card.option == "batch"
    body = {"model": "gpt-4o-mini", "max_tokens": 10, "messages": [{"role": "user", "content": "Hello there"}]}
    before = price_request(body, at=day).to_dict()
    money.forget()  # new price data: the card, and so the basis, is made again
    assert basis(model, day, "standard") is not kept
    assert price_request(body, at=day).to_dict() == before


def test_quote_basis_raises_a_refused_output_afresh_each_time():
    import pytest

    from mmtok.budgets.pricing import price_request
    from mmtok.errors import PriceError

    body = {"model": "gpt-4o-mini", "max_tokens": 10, "modalities": ["text", "audio"],
            "messages": [{"role": "user", "content": "Hello"}]}  # fmt: skip
    raised = []
    for _ in range(2):
        with pytest.raises(PriceError, match="does not produce audio") as caught:
            price_request(body)
        raised.append(caught.value)
    assert raised[0] is not raised[1] and str(raised[0]) == str(raised[1])


def test_changed_options_are_kept_per_options_and_changes():
    from mmtok.budgets.pricing.options import Options, changed

    base, batch = Options(), Options(option="batch")
    bound = {"output_tokens": 60, "output_bound": "at most 60 output tokens", "output_label": "upper bound"}
    first = changed(base, bound)
    assert first.output_tokens == 60 and first.option == "standard"
    assert changed(base, dict(bound)) is first  # the same pair: made once
    assert changed(batch, bound).option == "batch"  # other options: their own
    assert changed(base, {**bound, "output_tokens": 61}).output_tokens == 61  # other changes: their own
    assert changed(base, {}) is base


def test_message_framing_is_kept_per_rule_roles_and_counts_and_long_ones_are_not_kept():
    from mmtok.budgets.pricing import price_request
    from mmtok.budgets.pricing.overheads import message_framing

    one = message_framing("o200k_base", ("user",), 1, 0)
    assert message_framing("o200k_base", ("user",), 1, 0) is one
    assert message_framing("o200k_base", ("system", "user"), 2, 0).item.count.tokens > one.item.count.tokens
    assert message_framing("o200k_base", ("user", "bob"), 1, 1).item.count.tokens > one.item.count.tokens
    assert message_framing("estimate:chars/4", ("user",), 1, 0) is not one
    before = message_framing.cache_info().currsize
    names = [{"role": "user", "name": f"user-{n:04d}-" + "x" * 40, "content": "hi"} for n in range(100)]
    price_request({"model": "gpt-4o-mini", "max_tokens": 1, "messages": names})
    assert message_framing.cache_info().currsize == before  # a body's many long names are counted, not kept
