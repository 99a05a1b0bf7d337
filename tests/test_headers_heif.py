"""HEIF/HEIC and AVIF photos priced from their boxes in the core (no HEIF decoder installed): the displayed size
after ``clap`` and ``irot``/``imir``, a cut-off file refused by its ``iloc``, a malformed file in one line naming
it, and decoding one (shrink) asking for the heif extra. The samples (tests/data/heif, made by
``python -m mmtok.eval.tools.heif_samples``) were written by libheif/x265 and libavif; their sizes, in sizes.json,
are what those decoders give. tests/test_heif_decoded.py checks the reading against the decoders on many more."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import mmtok
from mmtok.budgets.pricing import price_request
from mmtok.cli.main import app
from mmtok.errors import MediaError
from mmtok.extras import installed
from mmtok.headers import HeaderError, image_format, read_image_header
from tests.sdk_bodies import data_url, openai_chat

HEIF = Path(__file__).parent / "data" / "heif"
SIZES = json.loads((HEIF / "sizes.json").read_text())
AT = "2026-12-01"


@pytest.mark.parametrize("name", sorted(SIZES))
def test_heif_and_avif_sizes_are_read_from_their_boxes_as_the_decoders_display_them(name):
    photo = mmtok.load(HEIF / name)
    assert (photo.kind, photo.format) == ("image", "avif" if name.endswith(".avif") else "heif")
    assert [photo.width, photo.height] == SIZES[name]


def test_a_heic_padded_by_its_encoder_is_priced_at_its_clean_aperture():
    """x265 codes the 451x300 photo as 452x300 (an odd width does not fit 4:2:0 chroma): the ispe says 452x300, the
    clap crops it back."""
    data = (HEIF / "chelsea.heic").read_bytes()
    at = data.index(b"ispe")
    assert data[at + 8 : at + 16] == (452).to_bytes(4, "big") + (300).to_bytes(4, "big")
    header = read_image_header(None, data, "heif")
    assert header.size == (451, 300) and header.orientation == 1


def test_a_rotated_heic_is_displayed_turned_and_an_avif_keeps_its_orientation_for_the_decoder():
    heic = read_image_header(None, (HEIF / "rotated.heic").read_bytes(), "heif")
    assert (heic.stored_width, heic.stored_height, heic.orientation) == (35, 61, 1)  # libheif turns the pixels
    avif = read_image_header(None, (HEIF / "mirrored.avif").read_bytes(), "avif")
    assert (avif.stored_width, avif.stored_height, avif.orientation) == (61, 35, 5)  # irot 1 + imir 0, as Pillow
    assert avif.size == (35, 61)


def test_a_heic_photo_is_priced_like_the_jpeg_it_was_made_from(samples):
    result = CliRunner().invoke(
        app, ["price", "--json", "-m", "gpt-4o", str(HEIF / "chelsea.heic"), str(samples / "chelsea.jpg")]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert rows[0]["input_tokens"] == rows[1]["input_tokens"] == 255


def test_a_heic_in_a_request_body_is_priced_from_its_header_without_a_copy(samples):
    url = data_url((HEIF / "chelsea.heic").read_bytes(), "image/heic")
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}}]}])  # fmt: skip
    quote = price_request(body, at=AT)
    (image,) = [line for line in quote.lines if line.modality == "image"]
    assert image.tokens == 255 and quote.complete


def test_a_cut_off_heic_is_refused_by_where_its_item_data_ends(tmp_path):
    data = (HEIF / "chelsea.heic").read_bytes()
    cut = tmp_path / "cut.heic"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(MediaError, match=r"truncated: HEIF item data runs to byte [\d,]+, but the file has"):
        mmtok.load(cut)
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(cut.read_bytes(), "image/heic")}}]}])  # fmt: skip
    (missing,) = price_request(body, at=AT).missing
    assert "cut short" in missing and "item data runs to byte" in missing


def _spoiled(name: str, old: bytes, new: bytes) -> bytes:
    data = (HEIF / name).read_bytes()
    assert data.count(old) == 1
    return data.replace(old, new)


def _clap_zero_denominator() -> bytes:
    data = (HEIF / "chelsea.heic").read_bytes()
    at = data.index(b"clap") + 4
    return data[: at + 4] + b"\0\0\0\0" + data[at + 8 :]  # cleanApertureWidthD = 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_spoiled("chelsea.heic", b"meta", b"mzta"), "no meta box"),
        (_spoiled("chelsea.heic", b"pitm", b"pitz"), "no primary item"),
        (_spoiled("chelsea.heic", b"ispe", b"ispz"), "has no ispe"),
        (_spoiled("chelsea.heic", b"iprp", b"iprz"), "no item properties"),
        (_clap_zero_denominator(), "clap box with a zero denominator"),
        ((HEIF / "chelsea.heic").read_bytes()[:200], "truncated"),
    ],
)
def test_malformed_heif_boxes_are_a_header_error_with_the_reason(data, reason):
    assert image_format(data) == "heif"
    with pytest.raises(HeaderError, match=reason):
        read_image_header(None, data, "heif")


def test_a_box_that_runs_past_meta_and_an_oversized_meta_are_refused():
    data = bytearray((HEIF / "chelsea.heic").read_bytes())
    at = data.index(b"ipco") - 4
    data[at : at + 4] = (1 << 30).to_bytes(4, "big")
    with pytest.raises(HeaderError, match="runs past its container"):
        read_image_header(None, bytes(data), "heif")
    data = bytearray((HEIF / "chelsea.heic").read_bytes())
    at = data.index(b"meta") - 4
    data[at : at + 4] = (64 << 20).to_bytes(4, "big")
    with pytest.raises(HeaderError, match="over the 4,194,304-byte limit"):
        read_image_header(None, bytes(data), "heif")


@pytest.mark.skipif(installed("pillow_heif"), reason="the core has no HEIF decoder; the full venv has pillow-heif")
def test_on_the_core_a_malformed_heic_is_one_line_and_decoding_one_names_the_heif_extra(tmp_path):
    bad = tmp_path / "bad.heic"
    bad.write_bytes(_spoiled("chelsea.heic", b"ispe", b"ispz"))
    result = CliRunner().invoke(app, ["price", "-m", "gpt-4o", str(bad)])
    assert result.exit_code == 1 and "corrupt heif image: heif primary item 1 has no ispe" in result.output
    result = CliRunner().invoke(app, ["shrink", str(HEIF / "chelsea.heic"), "-m", "gpt-4o", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "needs mmtok's heif extra (pillow_heif is not installed): pip install 'mmtok[heif]'" in result.output


def test_pricing_a_heic_imports_no_heif_decoder():
    code = (
        "import sys, mmtok; from mmtok.budgets.pricing import price; "
        f"q = price({str(HEIF / 'rotated.heic')!r}, model='gpt-4o', at='2026-12-01'); "
        "print(q.input_tokens, 'pillow_heif' in sys.modules, 'PIL' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"], out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_damage_to_a_heif_header_is_a_header_error_or_a_size(data):
    """Bytes changed anywhere in the boxes: the reading gives a size or one HeaderError, never another exception."""
    photo = bytearray((HEIF / "rotated.heic").read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, 600))
        if at < len(photo):
            photo[at] = data.draw(st.integers(0, 255))
    try:
        header = read_image_header(None, bytes(photo), "heif")
    except HeaderError:
        return
    assert header.stored_width > 0 and header.stored_height > 0
