"""mmtok.price(): quotes for every kind of input, exact decimal money, provenance, calibration and bad sheets."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from decimal import Decimal

import pytest
import torch

import mmtok
from mmtok.budgets.litellm import import_litellm
from mmtok.budgets.pricing import price, price_many
from mmtok.errors import MediaError, PriceError
from mmtok.tokens import TokenSequence


def write_sheet(tmp_path, body: str, name: str = "mine.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_image_quote_has_tokens_exact_cost_working_and_source(samples):
    quote = mmtok.price(samples / "chelsea.jpg", model="gpt-4o", detail="high")
    assert quote.tokens("image") == 255
    assert quote.total_cost == Decimal(255) * Decimal("2.5") / Decimal(1_000_000)
    assert isinstance(quote.total_cost, Decimal)
    assert "85 + 170 x 1 = 255" in quote.lines[0].working
    assert quote.source.startswith("https://") and quote.as_of == dt.date(2026, 7, 24)
    assert quote.sheet.endswith("openai.toml")


def test_output_tokens_are_priced_at_the_output_rate(samples):
    quote = mmtok.price(samples / "chelsea.jpg", model="gpt-4o", output_tokens=1000)
    assert quote.output_cost == Decimal("0.01")  # 1000 x $10 / 1M
    assert quote.total_cost == quote.input_cost + Decimal("0.01")


def test_text_is_counted_with_the_models_encoding():
    quote = price(text="Hello, world!", model="gpt-4o")
    assert quote.tokens("text") == 4 and quote.exact
    estimate = price(text="Hello, world!", model="gemini-2.5-flash")
    assert not estimate.exact


def test_audio_and_video_on_gemini(samples):
    speech = price(samples / "speech.wav", model="gemini-2.5-flash")
    assert speech.tokens("audio") == 111  # ceil(3.4385 s x 32)
    assert speech.lines[0].cost == Decimal(111) * Decimal(1) / Decimal(1_000_000)
    video = price(samples / "clip.mp4", model="gemini-2.5-flash")
    assert video.tokens("video") == 789  # 3 s x 263, audio included
    frames_and_sound = price(samples / "clip.mp4", model="gemini-3-flash-preview")
    assert frames_and_sound.tokens("video") == 3 * 70 and frames_and_sound.tokens("audio") == 96


def test_models_that_do_not_take_a_modality_say_so(samples):
    with pytest.raises(PriceError, match="gpt-4o does not accept video"):
        price(samples / "clip.mp4", model="gpt-4o")
    with pytest.raises(PriceError, match="does not accept audio"):
        price(samples / "speech.wav", model="claude-sonnet-4-5")


def test_token_sequences_use_mmtoks_semantic_scheme():
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8), tokenizer="vq")
    quote = price(seq, model="mmtok-semantic")
    assert quote.tokens("image") == 64
    assert quote.total_cost == Decimal(64) * Decimal("0.50") * Decimal("1.8") / Decimal(1_000_000)
    with pytest.raises(PriceError, match="priced on mmtok's own models"):
        price(seq, model="gpt-4o")


def test_unknown_model_lists_the_closest_names():
    with pytest.raises(PriceError, match=r"unknown model 'gpt-4-o'; closest: gpt-4o"):
        price(text="x", model="gpt-4-o")


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
    assert quote.source == "my invoices, March"


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
    with pytest.raises(PriceError, match=r"no image rate .* refusing to price image at zero"):
        price(samples / "chelsea.jpg", model="gpt-4o", prices=[sheet])


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ('input_per_mtok = "-1"', "must not be negative"),
        ('input_per_mtok = "cheap"', "must be a number"),
        ("input_per_mtok = true", "must be a number"),
        ('input_per_mtok = "nan"', "must be finite"),
        ('input_per_mtok = "1"\ncolour = "red"', r"unknown key\(s\) colour"),
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


def test_price_many_reports_bad_files_and_prices_the_rest(tmp_path, samples):
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff" + b"\x00" * 10)
    (tmp_path / "ok.jpg").write_bytes((samples / "chelsea.jpg").read_bytes())
    results = dict(price_many([tmp_path], ["gpt-4o", "claude-haiku-4-5"]))
    assert isinstance(results[str(tmp_path / "broken.jpg")][0], MediaError)
    ok = results[str(tmp_path / "ok.jpg")]
    assert [q.model for q in ok] == ["gpt-4o", "claude-haiku-4-5"]


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
    from mmtok.budgets.sheets import model_rows

    rows = model_rows((out,))
    assert rows["gpt-4o"].rates["input_per_mtok"] == Decimal("2.5")
    assert rows["gpt-4o"].rates["image_input_per_mtok"] == Decimal("2.5")  # family has an image rule
    assert rows["gemini-2.5-flash"].rates["audio_input_per_mtok"] == Decimal("1")
    assert rows["vendor-vision"].rates["image_input_per_image"] == Decimal("0.001")
    assert rows["vendor-vision"].rates["video_input_per_second"] == Decimal("0.0002")


def test_import_litellm_rejects_bad_json(tmp_path):
    src = tmp_path / "bad.json"
    src.write_text("{not json")
    with pytest.raises(PriceError, match="not valid JSON"):
        import_litellm(src, tmp_path / "out.toml")
