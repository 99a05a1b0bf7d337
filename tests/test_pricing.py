"""mmtok.price(): one request, one quote; money from genai-prices (equal to its own calc_price), LiteLLM's map or a
sheet; names as users type them; options (date, batch, tiers, cache, output audio); honest incompleteness."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from decimal import Decimal

import pytest
import torch
from genai_prices import Usage, calc_price

import mmtok
from mmtok.budgets.pricing import price, resolve
from mmtok.budgets.pricing.catalog import catalog
from mmtok.budgets.pricing.litellm import import_litellm
from mmtok.budgets.pricing.sheets import model_rows
from mmtok.errors import PriceError
from mmtok.media import Image
from mmtok.tokens import TokenSequence

TODAY = dt.date(2026, 12, 1)


def write_sheet(tmp_path, body: str, name: str = "mine.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


# ------------------------------------------------------------------------------------------ one request, one quote
def test_a_request_is_one_quote_with_output_counted_once(samples):
    quote = mmtok.price(
        [samples / "chelsea.jpg", samples / "speech.wav"],
        text="Describe the photo and the recording.",
        model="gemini-3.1-pro-preview",
        output_tokens=300,
        at=TODAY,
    )
    assert [ln.modality for ln in quote.lines] == ["image", "audio", "text", "output"]
    assert quote.output_tokens == 300 and quote.tokens("output") == 300
    assert quote.tokens("image") == 1120 and quote.tokens("audio") == 86  # high; 3.4385 s x 25
    assert quote.total_cost == quote.input_cost + Decimal(300) * Decimal(12) / Decimal(1_000_000)
    assert quote.complete and quote.item == "request of 3 parts"


def test_a_photo_with_text_keeps_the_photo(samples):
    quote = mmtok.price(samples / "chelsea.jpg", text="What is this?", model="gpt-4o")
    assert quote.tokens("image") == 255 and quote.tokens("text") > 0


def test_an_attachment_the_model_does_not_take_makes_the_quote_incomplete(samples):
    quote = price([samples / "chelsea.jpg", samples / "speech.wav"], model="gpt-5.2", at=TODAY)
    assert not quote.complete
    assert quote.missing == (f"{samples / 'speech.wav'}: gpt-5.2 does not take audio",)
    assert quote.tokens("image") == 180  # 451x300 -> 15x10 patches x 1.2


def test_a_request_nothing_of_which_can_be_priced_is_an_error(samples):
    with pytest.raises(PriceError, match="gpt-4o does not take video"):
        price(samples / "clip.mp4", model="gpt-4o")


def test_video_sound_is_counted_apart_from_the_frames(samples, tmp_path):
    from tests.makers import write_video

    with_sound = price(samples / "clip.mp4", model="gemini-3-flash-preview", at=TODAY)
    assert [(ln.modality, ln.tokens) for ln in with_sound.lines] == [("video", 3 * 70), ("audio", 3 * 25)]
    assert "sound track" in with_sound.lines[1].working
    silent = write_video(tmp_path / "silent.mkv", [i / 10 for i in range(30)])
    assert [ln.modality for ln in price(silent, model="gemini-3-flash-preview", at=TODAY).lines] == ["video"]


def test_token_sequences_use_mmtoks_semantic_scheme():
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8), tokenizer="vq")
    quote = price(seq, model="mmtok-semantic")
    assert quote.tokens("image") == 64
    assert quote.total_cost == Decimal(64) * Decimal("0.50") * Decimal("1.8") / Decimal(1_000_000)
    with pytest.raises(PriceError, match="priced on mmtok's own models"):
        price(seq, model="gpt-4o")


# ------------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize(
    ("asked", "ref"),
    [
        ("gpt-5.2", "openai:gpt-5.2"),
        ("openai/gpt-4o", "openai:gpt-4o"),
        ("GPT-4o", "openai:gpt-4o"),
        ("claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5"),
        ("anthropic/claude-opus-4-7", "anthropic:claude-opus-4-7"),
        ("gemini/gemini-3.1-pro-preview", "google:gemini-3.1-pro-preview"),
        ("gpt-5.2-20251211", "openai:gpt-5.2"),
        ("xai/grok-4.7", "x-ai:grok-4.7"),
        ("mistral/pixtral-large-latest", "mistral:pixtral-large"),
    ],
)
def test_models_by_the_names_users_type(asked, ref):
    assert price(text="hi", model=asked, at=TODAY).model_ref == ref


def test_user_aliases_in_a_sheet(tmp_path):
    sheet = write_sheet(tmp_path, 'provider = "me"\n[aliases]\nfast = "gpt-5.2"\n')
    assert price(text="hi", model="fast", prices=[sheet], at=TODAY).model_ref == "openai:gpt-5.2"


def test_unknown_model_lists_the_closest_names():
    with pytest.raises(PriceError, match=r"unknown model 'gpt-5.22'; closest: .*gpt-5.2"):
        price(text="x", model="gpt-5.22")


def test_a_retired_model_is_priced_with_a_warning_naming_the_date(samples):
    quote = price(samples / "chelsea.jpg", model="gpt-5.2-chat-latest", at=TODAY)
    assert quote.total_cost > 0
    assert "gpt-5.2-chat-latest was retired on 2026-08-10" in quote.warnings[0]


# --------------------------------------------------------------------------------- money equals genai-prices
POPULAR = [
    "gpt-5.2",
    "gpt-5",
    "gpt-4o",
    "gpt-4.1-mini",
    "claude-opus-4-7",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "gemini-3.1-pro-preview",
    "gemini-3-flash-preview",
    "grok-4.7",
]
USAGES = {
    "text": {"text_tokens": 1200, "output_tokens": 300},
    "cached": {"text_tokens": 1200, "cached_input_tokens": 8000, "cache_write_tokens": 2000, "output_tokens": 300},
    "long context": {"text_tokens": 250_000, "output_tokens": 2000},
}


def _genai_usage(kind: str, image_tokens: int = 0) -> Usage:
    u = USAGES[kind]
    cached, written = u.get("cached_input_tokens", 0), u.get("cache_write_tokens", 0)
    return Usage(
        input_tokens=u["text_tokens"] + cached + written + image_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        input_image_tokens=image_tokens,
        output_tokens=u["output_tokens"],
    )


@pytest.mark.parametrize("kind", list(USAGES))
@pytest.mark.parametrize("model", POPULAR)
def test_quotes_equal_genai_prices_own_calc_price(model, kind):
    quote = price(model=model, at=TODAY, **USAGES[kind])
    when = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    provider = resolve(model).provider.replace("xai", "x-ai")
    expected = calc_price(_genai_usage(kind), model, provider_id=provider, genai_request_timestamp=when)
    assert quote.total_cost == expected.total_price
    assert quote.input_cost == expected.input_price and quote.output_cost == expected.output_price


@pytest.mark.parametrize("model", ["gpt-5.2", "gpt-4o", "claude-opus-4-7", "gemini-3-flash-preview"])
def test_batch_and_image_requests_equal_calc_price(model, samples):
    quote = price(samples / "chelsea.jpg", model=model, at=TODAY, batch=True, **USAGES["text"])
    when = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    expected = calc_price(
        _genai_usage("text", quote.tokens("image")),
        model,
        provider_id=resolve(model).provider,
        genai_request_timestamp=when,
        price_context={"processing": "batch"},
    )
    assert quote.option == "batch" and quote.total_cost == expected.total_price


def test_long_context_tier_is_chosen_from_the_whole_request_and_said():
    short = price(model="claude-sonnet-4-5", text_tokens=200_000, at=TODAY)
    long = price(model="claude-sonnet-4-5", text_tokens=199_000, cached_input_tokens=1_001, at=TODAY)
    assert short.tier == "" and short.lines[0].cost == Decimal("0.6")  # 200,000 x $3 / 1M
    assert long.tier == "tier > 200,000 input tokens" and "$6/1M" in long.lines[0].rate
    assert any("long-context rates above 200,000" in w for w in long.warnings)


def test_flex_and_priority_tiers_and_a_missing_variant():
    standard = price(model="gpt-5.2", text_tokens=1_000_000, at=TODAY).total_cost
    assert price(model="gpt-5.2", text_tokens=1_000_000, tier="flex", at=TODAY).total_cost == standard / 2
    assert price(model="gpt-5.2", text_tokens=1_000_000, tier="priority", at=TODAY).total_cost == standard * 2
    with pytest.raises(PriceError, match="no flex prices for openai:gpt-4o"):
        price(model="gpt-4o", text="hi", tier="flex", at=TODAY)


def test_prices_on_a_past_date():
    """genai-prices dates its price changes: gemini-4-argon's rates double from 2026-12-01 in its data."""
    before = price(model="gemini-4-argon", text_tokens=1000, output_tokens=200, at=dt.date(2026, 11, 15))
    after = price(model="gemini-4-argon", text_tokens=1000, output_tokens=200, at=TODAY)
    assert after.total_cost == 2 * before.total_cost and before.as_of == dt.date(2026, 11, 15)
    with pytest.raises(PriceError, match=r"no flex prices for openai:gpt-5\.2 on 2026-10-01"):
        price(model="gpt-5.2", text_tokens=10, tier="flex", at=dt.date(2026, 10, 1))  # flex starts 2026-10-12


def test_audio_output_models_bill_output_at_the_audio_output_rate():
    text_out = price(model="gpt-realtime", text="hi", output_tokens=1000, at=TODAY)
    audio_out = price(model="gpt-realtime", text="hi", output_tokens=1000, output_audio=True, at=TODAY)
    assert audio_out.output_cost == Decimal(1000) * Decimal(64) / Decimal(1_000_000)  # $64 / 1M audio output
    assert audio_out.output_cost > text_out.output_cost
    with pytest.raises(PriceError, match="does not produce audio"):
        price(model="gpt-4o", text="hi", output_tokens=10, output_audio=True)


# Provider pages read 2026-12-01: developers.openai.com/api/docs/models/gpt-live-1 ("$0.05 per minute, billed per
# second"), .../gpt-realtime-whisper ("$0.017 per minute", by audio duration), .../gpt-4o-audio-preview (text
# $2.50 / $10, audio $40 / $80 per 1M tokens; genai-prices gives it the text rates only).
@pytest.mark.parametrize("model", ["gpt-live-1", "gpt-realtime-whisper", "gpt-transcribe", "voxtral-mini-latest"])
def test_models_billed_by_audio_duration_are_priced_by_the_second(model, samples):
    quote = price(samples / "speech.wav", model=model, at=TODAY)
    seconds = mmtok.load(samples / "speech.wav").duration_s
    when = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
    provider = resolve(model).provider
    per_hour = calc_price(
        Usage(audio_seconds=3600, input_audio_seconds=3600), model, provider_id=provider, genai_request_timestamp=when
    ).total_price
    assert per_hour > 0 and quote.complete
    assert quote.total_cost == per_hour / 3600 * Decimal(str(round(seconds, 6)))
    assert "billed by duration" in quote.lines[0].rate


def test_gpt_live_1_costs_five_cents_a_minute(samples):
    quote = price(samples / "speech.wav", model="gpt-live-1", at=TODAY)
    seconds = Decimal(str(round(mmtok.load(samples / "speech.wav").duration_s, 6)))
    assert "$0.05/minute" in quote.lines[0].rate
    assert abs(quote.total_cost - Decimal("0.05") / 60 * seconds) < Decimal("1e-12")


def test_a_model_priced_only_by_duration_has_no_text_price_never_a_zero():
    with pytest.raises(PriceError, match="has no input rate"):
        price(text="hello there", model="gpt-transcribe", output_tokens=100, at=TODAY)


def test_audio_is_never_priced_at_the_text_rate_in_silence(samples):
    # gpt-4o-audio-preview: genai-prices has no audio rate; its newest snapshot in LiteLLM's map has OpenAI's $40/1M
    openai_audio = price(samples / "speech.wav", model="gpt-4o-audio-preview", at=TODAY)
    (audio,) = openai_audio.lines
    assert audio.cost == audio.tokens * Decimal(40) / Decimal(1_000_000) and "LiteLLM map" in audio.rate
    # a Flash model: Google lists its audio input price apart, and no price source here has it: left out, said
    flash = price([samples / "speech.wav", samples / "chelsea.jpg"], model="gemini-3.8-flash", at=TODAY)
    assert not flash.complete and [ln.modality for ln in flash.lines] == ["image"]
    assert "no audio input rate is known for google:gemini-3.8-flash" in flash.missing[0]
    assert "not priced at the text rate" in flash.missing[0]
    # a Pro model: one input price for every modality, cited, no warning
    pro = price(samples / "speech.wav", model="gemini-3.1-pro-preview", at=TODAY)
    assert pro.complete and "one input price for every modality (https://ai.google.dev/gemini-api/docs/pricing" in (
        pro.lines[0].rate
    )
    assert not any("text rate" in w for w in pro.warnings)


def test_an_audio_rate_genai_prices_lacks_is_taken_from_litellms_map_where_it_has_one(samples):
    quote = price(samples / "speech.wav", model="gpt-4o-audio-preview-2025-06-03", at=TODAY, output_tokens=100,
                  output_audio=True)  # fmt: skip
    audio, out = quote.lines
    assert audio.cost == audio.tokens * Decimal(40) / Decimal(1_000_000)  # $40 / 1M audio input (OpenAI's page)
    assert out.cost == 100 * Decimal(80) / Decimal(1_000_000)  # $80 / 1M audio output
    assert "LiteLLM map" in audio.rate and "LiteLLM map" in out.rate
    assert not any("text rate" in w for w in quote.warnings)


def test_stored_rate_cards_keep_duration_prices_and_where_each_rate_came_from():
    from mmtok.budgets.pricing import rate_card
    from mmtok.budgets.pricing.money import RateCard

    for model in ("gpt-live-1", "gpt-4o-audio-preview-2025-06-03", "gpt-4o-audio-preview"):
        card = rate_card(resolve(model), TODAY)
        assert RateCard.from_json(json.loads(json.dumps(card.to_json()))) == card


def test_models_genai_prices_does_not_know_are_priced_from_litellms_map():
    entry = catalog().get("mistral/mistral-medium-3.5")
    assert entry is not None
    quote = price(text="hi", model="mistral/mistral-medium-3.5", at=TODAY)
    assert quote.money_source in ("genai-prices", f"LiteLLM map {catalog().litellm_version}")


# ------------------------------------------------------------------------------------------- coverage
FIVE = ("openai", "anthropic", "google", "xai", "mistral")


def test_every_vision_model_of_the_five_providers_resolves_to_an_image_rule():
    names = [e.name for e in catalog().entries.values() if e.provider in FIVE and e.takes("image")]
    names += [alias for alias, target in catalog().aliases.items() if catalog().entries[target].takes("image")]
    assert len(names) >= 300  # 306 models + aliases in LiteLLM 1.110.2's map
    unruled = [n for n in names if "image" not in resolve(n).formulas]
    assert unruled == []
    for name in names:  # and each one counts a real image size
        count = mmtok.image_tokens(1024, 768, name)
        assert count > 0


# ------------------------------------------------------------------------------------------------ sheets
def test_calibration_override_in_a_users_sheet(tmp_path, samples):
    sheet = write_sheet(
        tmp_path,
        """
        provider = "openai"
        [models."gpt-4o"]
        input_per_mtok = "2.50"
        image_input_per_mtok = "2.50"
        image = { tile_tokens = 180 }
        source = "my invoices, March"
        as_of = 2026-03-31
    """,
    )
    quote = price(samples / "chelsea.jpg", model="gpt-4o", prices=[sheet])
    assert quote.tokens("image") == 85 + 180
    assert quote.money_source == str(sheet) and quote.as_of == dt.date(2026, 3, 31)


def test_a_missing_rate_is_an_error_never_a_zero(tmp_path, samples):
    sheet = write_sheet(
        tmp_path,
        """
        provider = "acme"
        [models."gpt-4o"]
        input_per_mtok = "2.50"
        source = "https://example.com"
        as_of = 2026-01-01
    """,
    )
    with pytest.raises(PriceError, match="has no input image rate"):
        price(samples / "chelsea.jpg", model="gpt-4o", prices=[sheet])


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ('input_per_mtok = "-1"', "must not be negative"),
        ('input_per_mtok = "cheap"', "must be a number"),
        ("input_per_mtok = true", "must be a decimal string or an integer"),
        ("input_per_mtok = 2.5", "got a float"),
        ('input_per_mtok = "nan"', "must be finite"),
        ('input_per_mtok = "1"\ncolour = "red"', r"unknown key\(s\) colour"),
        ('input_per_mtok = "1"\nimage = { tile_tokens = -170 }', "tile_tokens must be a positive integer"),
        ('input_per_mtok = "1"\nimage = { tile_tokens = "x" }', "tile_tokens must be a positive integer"),
        ('input_per_mtok = "1"\nimage = { multiplier = 0 }', "multiplier must be a positive number"),
        ('input_per_mtok = "1"\nimage = { formula = "free" }', "unknown image formula 'free'"),
    ],
)
def test_bad_rows_name_the_sheet_and_the_field(tmp_path, row, match):
    sheet = write_sheet(tmp_path, f'provider = "x"\n[models."m"]\n{row}\nsource = "s"\nas_of = 2026-01-01\n')
    with pytest.raises(PriceError, match=match) as info:
        price(text="x", model="m", prices=[sheet])
    assert str(sheet) in str(info.value)


def test_rows_need_a_source_and_a_date(tmp_path):
    sheet = write_sheet(tmp_path, 'provider = "x"\n[models."m"]\ninput_per_mtok = "1"\n')
    with pytest.raises(PriceError, match="'source'"):
        price(text="x", model="m", prices=[sheet])


def test_malformed_toml_names_the_file(tmp_path):
    sheet = write_sheet(tmp_path, "provider = \n")
    with pytest.raises(PriceError, match="invalid TOML") as info:
        price(text="x", model="gpt-4o", prices=[sheet])
    assert str(sheet) in str(info.value)


@pytest.mark.timeout(20)
def test_a_fifo_as_a_price_sheet_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "sheet.toml"
    os.mkfifo(fifo)
    with pytest.raises(PriceError, match="not a regular file"):
        price(text="x", model="gpt-4o", prices=[fifo])


def test_import_litellm_price_map(tmp_path):
    data = {
        "gpt-4o": {"input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "litellm_provider": "openai"},
        "gemini-2.5-flash": {
            "input_cost_per_token": 3e-07,
            "input_cost_per_audio_token": 1e-06,
            "output_cost_per_token": 2.5e-06,
        },
        "vendor-vision": {
            "input_cost_per_token": 1e-06,
            "input_cost_per_image": 0.001,
            "input_cost_per_video_per_second": 0.0002,
        },
        "embedding-only": {"output_vector_size": 768},
    }
    src = tmp_path / "prices.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "sheet.toml"
    assert import_litellm(src, out, provider="mixed", as_of=dt.date(2026, 11, 1)) == 3
    quote = price(text="hello", model="gpt-4o", prices=[out])
    assert quote.as_of == dt.date(2026, 11, 1)
    rows = model_rows((out,))
    assert rows["gpt-4o"].rates["input_per_mtok"] == Decimal("2.5")
    assert rows["gpt-4o"].rates["image_input_per_mtok"] == Decimal("2.5")  # family has an image rule
    assert rows["gemini-2.5-flash"].rates["audio_input_per_mtok"] == Decimal("1")
    assert rows["vendor-vision"].rates["image_input_per_image"] == Decimal("0.001")
    assert rows["vendor-vision"].rates["video_input_per_second"] == Decimal("0.0002")


def test_a_crafted_model_name_cannot_rewrite_another_models_price(tmp_path):
    """The reproduction: a map whose model name closes the TOML table and prices gpt-4o at $0."""
    evil = 'x"]\ninput_per_mtok = "0"\n[models."gpt-4o'
    data = {
        "gpt-4o": {"input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05},
        evil: {"input_cost_per_token": 1e-06},
    }
    src = tmp_path / "prices.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "sheet.toml"
    import_litellm(src, out, provider="mixed", as_of=dt.date(2026, 11, 1))
    rows = model_rows((out,))
    assert rows["gpt-4o"].rates["input_per_mtok"] == Decimal("2.5")
    assert evil.lower() not in rows and len(rows) == 1 + len(model_rows())  # a name no sheet takes is not written


def test_import_litellm_rejects_bad_json(tmp_path):
    src = tmp_path / "bad.json"
    src.write_text("{not json")
    with pytest.raises(PriceError, match="not valid JSON"):
        import_litellm(src, tmp_path / "out.toml")


def test_header_only_images_price_without_pixels():
    quote = price([Image(None, "size", 1024, 1024)] * 2, model="gpt-4o", detail="high")
    assert quote.tokens("image") == 2 * 765


def test_token_files_are_priced_like_media(tmp_path):
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8), tokenizer="vq-clip-tiny")
    path = seq.save(tmp_path / "photo.safetensors")
    quote = price(path, model="mmtok-semantic")
    assert quote.tokens("image") == 64 and quote.lines[0].item == str(path)
    with pytest.raises(PriceError, match="priced on mmtok's own models"):
        price(path, model="gpt-4o")


def test_a_mistyped_model_in_image_tokens_is_unknown_with_the_closest_names_not_imageless():
    with pytest.raises(PriceError, match=r"unknown model 'gtp-4o' .*closest: gpt-4o"):
        mmtok.image_tokens(1024, 1024, "gtp-4o")
    with pytest.raises(PriceError, match="gpt-live-1 does not take images"):  # a real model without images
        mmtok.image_tokens(1024, 1024, "gpt-live-1")


def test_nothing_to_price_is_an_error_never_a_zero(tmp_path):
    """A file holding only a UTF-8 byte-order mark, white space, or a token file with no tokens was priced $0."""
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf")
    (tmp_path / "blank.txt").write_text(" \n\t\n")
    for path in (bom, tmp_path / "blank.txt"):
        with pytest.raises(PriceError, match="empty text"):
            price(path, model="gpt-4o", at=TODAY)
    empty = TokenSequence("image", ids=torch.zeros(0, dtype=torch.long), tokenizer="vq-clip-tiny")
    with pytest.raises(PriceError, match="empty token sequence"):
        price(empty, model="mmtok-semantic", at=TODAY)


@pytest.mark.parametrize(
    ("rates", "says"),
    [
        ('input_per_mtok = "1"\n        image_relative = "0"', "must be above 0"),
        ('input_per_mtok = "9e999999"', "at most 1,000,000,000"),
    ],
)
def test_a_sheet_cannot_make_a_modality_free_or_overflow_the_arithmetic(tmp_path, rates, says):
    sheet = write_sheet(
        tmp_path,
        f"""
        provider = "me"
        [models.big]
        {rates}
        output_per_mtok = "1"
        source = "https://example.com"
        as_of = 2026-12-01
        """,
    )
    with pytest.raises(PriceError, match=says):
        price(text="hello", model="big", prices=[sheet], at=TODAY)


def test_a_zero_rate_is_said_in_the_quote(tmp_path):
    sheet = write_sheet(
        tmp_path,
        """
        provider = "me"
        [models.free]
        input_per_mtok = "0"
        output_per_mtok = "0"
        source = "https://example.com"
        as_of = 2026-12-01
        """,
    )
    quote = price(text="hello there", model="free", prices=[sheet], at=TODAY)
    assert quote.total_cost == 0 and any("priced at $0" in w for w in quote.warnings)


def test_a_text_file_over_64_mib_is_refused_before_it_is_read(tmp_path):
    """A 150 MB .txt took 1.8 GB in mmtok price (read whole)."""
    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.write(b"words " * 4096)
        f.seek(64 << 20)
        f.write(b"words " * 4096)  # between the two, a sparse hole: little is written
    with pytest.raises(mmtok.MediaError, match=r"67,133,440 bytes of text: at most 67,108,864 are read"):
        price(big, model="gpt-4o", at=TODAY)


def test_a_file_far_too_small_for_its_declared_duration_is_refused_or_priced_with_a_warning(
    tmp_path, samples, monkeypatch
):
    """A 6.5 KB FLAC whose header claimed 4,294,967 s was priced at $3,579 on gpt-live-1 with no word. Load now
    refuses it (its samples stop long before); where no load check can see it, price warns."""
    import numpy as np
    import soundfile as sf

    from mmtok.errors import MediaError
    from mmtok.media import loading

    flac = tmp_path / "lie.flac"
    sf.write(flac, np.zeros(1600, dtype=np.float32), 16000, format="FLAC")
    data = bytearray(flac.read_bytes())
    packed = int.from_bytes(data[18:26], "big")  # STREAMINFO: rate (20 bits), channels, bits, total samples (36)
    data[18:26] = ((packed >> 36 << 36) | (2**36 - 1)).to_bytes(8, "big")
    flac.write_bytes(bytes(data))
    with pytest.raises(MediaError, match=r"lie\.flac: audio data stops before [\d,.]+ s of the 4,294,967"):
        price(flac, model="gpt-live-1", at=TODAY)
    monkeypatch.setattr(loading, "_check_samples_reach", lambda *args: None)
    quote = price(flac, model="gpt-live-1", at=TODAY)
    assert any("cannot hold that" in w for w in quote.warnings), quote.warnings
    assert not any("cannot hold" in w for w in price(samples / "speech.flac", model="gpt-live-1", at=TODAY).warnings)


def test_a_price_sheet_edited_between_calls_is_read_again(tmp_path):
    import os

    sheet = tmp_path / "mine.toml"

    def write(rate: int, stamp: float) -> None:
        sheet.write_text(
            f'provider = "me"\n[models.my-model]\ninput_per_mtok = "{rate}"\nsource = "a bill"\nas_of = 2026-12-01\n'
        )
        os.utime(sheet, (stamp, stamp))

    write(1, 1_000_000_000)
    before = price(text="hello world", model="my-model", prices=[sheet])
    write(5, 1_000_000_100)
    after = price(text="hello world", model="my-model", prices=[sheet])
    assert after.total_cost == 5 * before.total_cost and "$5/1M" in after.lines[0].rate


@pytest.mark.parametrize("at", [5, ["2026-11-01"], 2026.11])
def test_a_date_that_is_not_a_date_is_one_price_error(at):
    with pytest.raises(PriceError, match="at must be a date like 2026-07-24"):
        price(text="hello", model="gpt-4o", at=at)
