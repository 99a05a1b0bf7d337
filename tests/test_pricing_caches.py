"""The caches on pricing's shared path: each keyed on everything that changes its answer, each bounded."""

from __future__ import annotations

from mmtok.budgets import text
from mmtok.budgets.text import CountCache, count_text


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
