"""Which file formats each provider takes (budgets/formats.toml): a quote warns when its input's format is not
among them, with the provider's page; a taken format, and a model with no entry (self-hosted), stay quiet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import PIL.Image
import pytest
from typer.testing import CliRunner

from mmtok.budgets.formats import NAMES, accepted
from mmtok.budgets.pricing import price
from mmtok.cli.main import app
from mmtok.errors import PriceError
from tests.makers import write_video

TODAY = "2026-12-01"


def _format_warnings(path: Path, model: str) -> list[str]:
    return [w for w in price(path, model=model, at=TODAY).warnings if "the request would be refused" in w]


@pytest.fixture(scope="module")
def photos(tmp_path_factory, samples) -> dict[str, Path]:
    import pillow_heif

    folder = tmp_path_factory.mktemp("photos")
    pillow_heif.register_heif_opener()
    out = {}
    for suffix in (".heic", ".avif", ".webp", ".jpg"):
        out[suffix] = folder / f"chelsea{suffix}"
        PIL.Image.open(samples / "chelsea.jpg").save(out[suffix], quality=85)
    return out


def test_a_heic_photo_on_openai_and_claude_warns_with_the_providers_page(photos):
    (openai,) = _format_warnings(photos[".heic"], "gpt-4o")
    assert "OpenAI takes image as GIF, JPEG, PNG, WebP, not HEIF/HEIC" in openai
    assert "https://developers.openai.com/api/docs/guides/images-vision, read 2026-12-01" in openai
    assert "`mmtok shrink -m gpt-4o` writes it as WebP" in openai
    (claude,) = _format_warnings(photos[".avif"], "claude-opus-4-7")
    assert "Anthropic takes image as GIF, JPEG, PNG, WebP, not AVIF" in claude


def test_formats_a_provider_takes_and_models_without_an_entry_stay_quiet(photos):
    assert not _format_warnings(photos[".heic"], "gemini-3-flash-preview")  # Gemini takes HEIC
    assert not _format_warnings(photos[".webp"], "claude-opus-4-7")
    assert not _format_warnings(photos[".jpg"], "gpt-5.2")
    assert not _format_warnings(photos[".heic"], "qwen2.5-vl-7b-instruct")  # self-hosted: depends on your stack


def test_gemini_takes_mp4_not_matroska_and_flac_not_m4a(tmp_path, samples):
    mkv = write_video(tmp_path / "v.mkv", [i / 24 for i in range(24)])
    mp4 = write_video(tmp_path / "v.mp4", [i / 24 for i in range(24)], fmt="mp4")
    (warning,) = _format_warnings(mkv, "gemini-3-flash-preview")
    assert "takes video as AVI, MOV, MP4, WebM, not Matroska (MKV)" in warning and "ffmpeg -i FILE" in warning
    assert not _format_warnings(mp4, "gemini-3-flash-preview")
    (m4a,) = _format_warnings(samples / "speech.m4a", "gemini-3-flash-preview")
    assert "takes audio as AAC, AIFF, FLAC, MP3, Ogg, WAV, not M4A" in m4a
    assert "`mmtok shrink -m gemini-3-flash-preview` writes it as WAV" in m4a
    assert not _format_warnings(samples / "speech.flac", "gemini-3-flash-preview")


def test_openais_audio_models_take_wav_and_mp3(samples):
    (flac,) = _format_warnings(samples / "speech.flac", "gpt-4o-audio-preview")
    assert (
        "takes audio as MP3, WAV, not FLAC" in flac
        and "`mmtok shrink -m gpt-4o-audio-preview` writes it as WAV" in flac
    )
    assert not _format_warnings(samples / "speech.wav", "gpt-4o-audio-preview")
    assert not _format_warnings(samples / "speech.flac", "gpt-realtime")  # streamed as PCM: no file format


def test_the_cli_prints_the_warning_and_still_prices(photos):
    result = CliRunner().invoke(app, ["price", "-m", "gpt-4o", str(photos[".heic"])])
    assert result.exit_code == 0, result.output
    assert any(line.startswith("warning:") and "not HEIF/HEIC" in line for line in result.stderr.splitlines())


def test_every_shipped_entry_names_its_page_and_date_and_known_formats():
    entries = accepted()
    assert {e.name.split("'")[0].split(" ")[0] for e in entries} >= {"OpenAI", "Anthropic", "Google", "Mistral", "xAI"}
    for entry in entries:
        for rule in entry.rules.values():
            assert rule.source.startswith("https://") and rule.read == dt.date(2026, 12, 1) and rule.quote
            assert rule.formats <= set(NAMES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[provider]]\nname = "X"\nimage = { formats = ["jpg"], source = "s", read = 2026-12-01 }', "format names"),
        ('[[provider]]\nname = "X"\nimage = { formats = ["png"], source = "s" }', "'read'"),
        ('[[provider]]\nname = "X"\nfamilies = "x-*"', "lists of strings"),
        ('[[provider]]\nname = "X"\nimport = "os"', "keys among"),
        ('provider = "x"', "array of tables"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_problem(tmp_path, text, message):
    path = tmp_path / "formats.toml"
    path.write_text(text)
    with pytest.raises(PriceError, match=message):
        accepted(path)


def test_the_advice_names_what_shrink_writes_for_that_provider(photos):
    (warning,) = _format_warnings(photos[".webp"], "grok-4")
    assert "xAI takes image as JPEG, PNG, not WebP" in warning
    assert "`mmtok shrink -m grok-4` writes it as JPEG (PNG if it has transparency)" in warning
    (claude,) = _format_warnings(photos[".heic"], "claude-opus-4-7")
    assert "`mmtok shrink -m claude-opus-4-7` writes it as WebP" in claude


def test_vertex_ai_and_families_of_your_own_sheet_are_not_checked(photos, samples, tmp_path):
    assert not _format_warnings(samples / "speech.m4a", "vertex_ai/gemini-2.5-flash")  # Vertex lists audio/m4a
    assert _format_warnings(samples / "speech.m4a", "gemini/gemini-2.5-flash")
    sheet = tmp_path / "mine.toml"
    sheet.write_text(
        'provider = "openai"\ncurrency = "USD"\n\n[[family]]\nname = "openai-compatible-vllm"\nmatch = ["my-vlm*"]\n'
        'image = { formula = "patch-grid", patch_px = 14 }\nsource = "local"\n\n[models."my-vlm-7b"]\n'
        'input_per_mtok = "0.50"\nimage_input_per_mtok = "0.50"\nsource = "our serving cost"\nas_of = 2026-11-30\n'
    )
    quote = price(photos[".heic"], model="my-vlm-7b", at=TODAY, prices=(sheet,))
    assert not [w for w in quote.warnings if "would be refused" in w], quote.warnings
