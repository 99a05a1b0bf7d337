"""Which file formats each provider takes (budgets/pricing/formats.toml): a quote warns when its input's format is not
among them, with the provider's page; a taken format, and a model with no entry (self-hosted), stay quiet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import PIL.Image
import pytest
from typer.testing import CliRunner

from mmtok.budgets.pricing import price
from mmtok.budgets.pricing.formats import NAMES, accepted
from mmtok.cli.main import app
from mmtok.errors import PriceError
from tests.makers import write_video

TODAY = "2026-12-01"


def _format_warnings(path: Path, model: str) -> list[str]:
    return [
        w for w in price(path, model=model, at=TODAY).warnings if ", read 2026-12-01)" in w
    ]  # the format warnings cite the page they read


@pytest.fixture(scope="module")
def photos(tmp_path_factory, samples) -> dict[str, Path]:
    """The sample photo as HEIC (the shipped one: the core has no HEIF encoder), AVIF, WebP and JPEG."""
    folder = tmp_path_factory.mktemp("photos")
    out = {".heic": Path(__file__).parent / "data" / "heif" / "chelsea.heic"}
    for suffix in (".avif", ".webp", ".jpg"):
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
    assert "`mmtok shrink -m gemini-3-flash-preview` writes it as FLAC" in m4a  # lossless, and smaller than WAV
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
    assert "`mmtok shrink -m grok-4` writes it as JPEG (PNG if it has transparency or is lossless)" in warning
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


@pytest.fixture
def gifs(tmp_path):
    import numpy as np

    frames = [
        PIL.Image.fromarray(np.random.default_rng(i).integers(0, 255, (120, 160, 3), dtype=np.uint8)).convert("P")
        for i in range(3)
    ]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    frames[0].save(tmp_path / "still.gif")
    (tmp_path / "cut.gif").write_bytes((tmp_path / "anim.gif").read_bytes()[:3000])
    return tmp_path


def test_an_animated_gif_is_told_apart_from_a_still_one(gifs):
    from mmtok.headers import gif_is_animated

    assert gif_is_animated(gifs / "anim.gif") is True and gif_is_animated(gifs / "still.gif") is False
    assert gif_is_animated(gifs / "cut.gif") is None  # cut before its trailer: cannot tell
    data = (gifs / "anim.gif").read_bytes()
    second = data.index(b"\x21\xf9", 800)  # the second frame's graphic control extension
    (gifs / "stray.gif").write_bytes(data[:second] + b"\x00" + data[second:])
    assert gif_is_animated(gifs / "stray.gif") is True  # a stray byte between blocks is skipped, as Pillow skips it
    (openai,) = _format_warnings(gifs / "anim.gif", "gpt-4o")
    assert (
        "OpenAI takes GIFs that are not animated" in openai
        and "`mmtok shrink -m gpt-4o` writes it as PNG or lossless WebP when smaller" in openai
    )
    (claude,) = _format_warnings(gifs / "anim.gif", "claude-opus-4-7")
    assert "Anthropic reads only the first frame of an animated GIF" in claude
    (mistral,) = _format_warnings(gifs / "anim.gif", "pixtral-large-latest")
    assert "Mistral takes GIFs that are not animated" in mistral
    for model in ("gpt-4o", "claude-opus-4-7", "pixtral-large-latest"):
        assert not _format_warnings(gifs / "still.gif", model)


def test_an_animated_gif_for_openai_is_converted_to_its_first_frame(gifs, tmp_path):
    from mmtok.budgets.shrink import shrink

    out = shrink(gifs / "anim.gif", "pixtral-large-latest", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert out.status == "converted" and out.path.suffix in (".png", ".webp")  # no smaller size keeps the noise
    assert "does not take an animated GIF" in out.action and not _format_warnings(out.path, "pixtral-large-latest")
    low = shrink(gifs / "anim.gif", "gpt-4o", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert low.status == "shrunk" and low.detail == "low" and low.path.suffix == ".png"  # its first frame
    assert not _format_warnings(low.path, "gpt-4o")
    kept = shrink(gifs / "anim.gif", "claude-opus-4-7", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert kept.status == "kept"  # Anthropic reads the first frame: the file may go as it is


def test_animated_gif_must_name_what_the_page_says_for_a_gif_list(tmp_path):
    path = tmp_path / "formats.toml"
    path.write_text(
        '[[provider]]\nname = "x"\nfamilies = ["x-*"]\n'
        'image = { formats = ["png"], animated_gif = "refused", source = "s", read = 2026-12-01 }\n'
    )
    with pytest.raises(PriceError, match="animated_gif"):
        accepted(path)
