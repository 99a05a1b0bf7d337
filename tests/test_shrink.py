"""mmtok.budgets.shrink: bars, candidates at each rule's breakpoints, measures, and shrinking images, audio, video."""

from __future__ import annotations

import io
import math
import random
import re

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont
import pytest
import soundfile as sf

import mmtok
from mmtok.budgets.pricing import image_token_count, price, resolve
from mmtok.budgets.shrink import Skipped, make_bars, parse_bar, shrink
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.audio import Cut, keep_intervals, tempo
from mmtok.budgets.shrink.ocr import agreement
from mmtok.budgets.shrink.vad import Segment, model_path, speech_segments
from mmtok.errors import ConfigError, MediaError, PriceError

AT_DEFAULT = {"keep": ["ssim>=0.9"]}  # no OCR: the fast path for tests that are not about text


def _luma(image):
    """SSIM's luma of an image (ITU-R 601 Y, in [-1, 1]), as shrink's SSIM makes it."""
    return P.SsimReference(image, kept=False).luma


def _font(size: int) -> PIL.ImageFont.FreeTypeFont:
    import matplotlib

    return PIL.ImageFont.truetype(f"{matplotlib.get_data_path()}/fonts/ttf/DejaVuSans.ttf", size)


def text_image(width: int = 900, height: int = 560, size: int = 34, margin: int = 40) -> PIL.Image.Image:
    image = PIL.Image.new("RGB", (width, height), "white")
    draw = PIL.ImageDraw.Draw(image)
    for i, line in enumerate(["Invoice 7781-AB total due", "2,450.00 USD by Friday", "Settings > Network"]):
        draw.text((margin, margin + i * int(size * 1.5)), line, font=_font(size), fill="black")
    return image


def photo(width: int, height: int, seed: int = 0) -> PIL.Image.Image:
    """A smooth, detailed picture: low-frequency colour fields plus fine texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    base = np.stack([np.sin(6 * x + 1), np.cos(5 * y), np.sin(4 * (x + y))], axis=-1) * 80 + 128
    noise = rng.normal(0, 6, (height, width, 3))
    return PIL.Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


# ------------------------------------------------------------------------------------------------------ bars
def test_bars_parse_and_replace_only_their_modality():
    assert str(parse_bar("ocr>=0.98")) == "ocr>=0.98" and parse_bar(" SSIM >= 0.9 ").value == 0.9
    assert parse_bar("wer<=0.05").op == "<=" and parse_bar("ocr0.97").value == 0.97  # the direction is implied
    bars = make_bars(["ocr>=0.99"])
    assert set(bars) == {"ocr", "wer"} and bars["ocr"].value == 0.99  # the image SSIM default is replaced
    assert set(make_bars(None)) == {"ssim", "recog", "ocr", "wer"}
    assert make_bars({"wer": 0.1})["wer"].value == 0.1 and "ssim" in make_bars({"wer": 0.1})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ocr>0.98", "ocr is an agreement; write ocr>=0.98"),
        ("psnr>=30", "unknown metric 'psnr'"),
        ("wer>=0.1", "write wer<=0.1"),
        ("ssim<=0.9", "write ssim>=0.9"),
        ("ocr>=1.5", "between 0 and 1"),
        ("ssim>1.5", "ssim is an agreement; write ssim>=VALUE with VALUE between 0 and 1"),
        ("wer>=2", "write wer<=VALUE with VALUE between 0 and 1"),
        ("ocr", "write a bar"),
    ],
)
def test_bad_bars_are_one_config_error(text, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_bar(text)


@pytest.mark.parametrize("text", ["ssim>1.5", "ssim>0.9", "ocr<=0.98", "wer>=0.1", "wer>=7", "recog=<2"])
def test_a_bar_suggested_for_a_wrong_direction_is_itself_taken(text):
    """The fix an error suggests is a bar parse_bar takes, or the message says the range instead of a value."""
    with pytest.raises(ConfigError) as refused:
        parse_bar(text)
    suggested = str(refused.value).split("; write ")[1]
    if "VALUE" in suggested:
        assert "between 0 and 1" in suggested
    else:
        bar = parse_bar(suggested)  # taken: no error
        assert text.startswith(bar.metric) and str(bar) == suggested


# ------------------------------------------------------------------------------------------------ candidates
MODELS = [
    "gpt-4o",
    "gpt-5.4",
    "gpt-5.2",
    "gpt-5-mini",
    "claude-opus-4-7",
    "claude-sonnet-4-5",
    "gemini-2.0-flash",
    "pixtral-large-latest",
    "mistral-medium-latest",
    "qwen2.5-vl-72b-instruct",
    "grok-4.20",
]


@pytest.mark.parametrize("name", MODELS)
def test_the_view_costs_exactly_what_the_original_costs(name):
    """Each family's view (the size its rule resizes to) priced through pricing equals the original's count."""
    model = resolve(name)
    rng = random.Random(name)
    for _ in range(60):
        width, height = rng.randint(30, 5000), rng.randint(30, 5000)
        for detail in [None, "low", "high"] if name.startswith("gpt") else [None]:
            try:
                original = image_token_count(width, height, name, detail).tokens
            except PriceError:
                continue  # a size the rule refuses
            view = C.view(model, width, height, detail)
            assert view.published
            assert image_token_count(view.width, view.height, name, detail).tokens == original, (width, height)


def test_gpt4o_3000x2000_ladder_is_its_tiles_and_low_detail():
    ladder = C.candidates(resolve("gpt-4o"), 3000, 2000, None)
    assert [(r.size, r.detail, r.tokens) for r in ladder] == [
        ((512, 341), "low", 85),
        ((512, 341), "high", 255),
        ((768, 512), "high", 425),
        ((1024, 682), "high", 765),
    ]
    assert C.lossless(resolve("gpt-4o"), 3000, 2000, None).size == (1152, 768)  # 1,105 tokens, as the original


@pytest.mark.parametrize("name", ["claude-opus-4-7", "gpt-5.4", "gemini-2.0-flash", "grok-4.20"])
def test_candidates_are_cheaper_sorted_and_at_grid_breakpoints(name):
    model = resolve(name)
    original = image_token_count(3000, 2000, name).tokens
    ladder = C.candidates(model, 3000, 2000, None)
    assert ladder and all(r.tokens < original for r in ladder)
    assert [r.tokens for r in ladder] == sorted({r.tokens for r in ladder})
    unit = {"claude-opus-4-7": 28, "gpt-5.4": 32, "gemini-2.0-flash": 768, "grok-4.20": 448}[name]
    fits = [r for r in ladder if r.width % unit == 0 or r.height % unit == 0 or r.size == C._fit(3000, 2000, 384)]
    assert len(fits) == len(ladder)
    for r in ladder:
        assert image_token_count(r.width, r.height, name, r.detail).tokens == r.tokens


def test_gemini_3_levels_are_the_knob_and_its_view_is_an_estimate():
    model = resolve("gemini-3-flash-preview")
    ladder = C.candidates(model, 3000, 2000, None)
    assert [(r.size, r.detail, r.tokens) for r in ladder] == [((3000, 2000), "low", 280), ((3000, 2000), "medium", 560)]
    assert not C.view(model, 3000, 2000, None).published
    assert C.lossless(model, 3000, 2000, None) is None  # no published internal size: never resized losslessly


# -------------------------------------------------------------------------------------------------- measures
def test_ssim_equals_torchmetrics_on_luma():
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure as tm_ssim

    a, b = photo(97, 64, 1), photo(97, 64, 2)
    ours = P.ssim(a, b)
    la, lb = (torch.from_numpy(_luma(im))[None, None] for im in (a, b))
    assert ours == pytest.approx(float(tm_ssim(la, lb, data_range=2.0)), abs=1e-5)
    assert P.ssim(a, a) == pytest.approx(1.0)


def test_ocr_agreement_counts_characters_not_spaces():
    assert agreement("Total due 2,450.00", "Totaldue 2,450.00") == 1.0
    assert agreement("abcdefghij", "abcdefghiX") == pytest.approx(0.9)
    assert agreement("", "stray letters") == 1.0  # nothing to keep
    assert agreement("text", "") == 0.0
    assert agreement("Inbox\nTotal due 2,450.00", "Total due 2,450.00\nInbox") == 1.0  # the order lines are listed in


def test_uniform_border_is_found_with_a_margin():
    image = PIL.Image.new("RGB", (1000, 800), (250, 250, 250))
    PIL.ImageDraw.Draw(image).rectangle((300, 200, 499, 399), fill=(0, 0, 0))
    box, colour = P.content_box(image)
    assert colour == (250, 250, 250)
    assert box == (290, 190, 510, 410)  # 1% of the long side around the content
    assert P.content_box(photo(300, 200)) is None


def test_jpeg_metadata_is_cut_without_touching_the_pixels():
    exif = PIL.Image.Exif()
    exif[0x010F] = "Camera maker " * 200  # a large EXIF block
    buffer = io.BytesIO()
    photo(320, 240).save(buffer, "JPEG", quality=90, exif=exif.tobytes())
    stripped = P.strip_jpeg_metadata(buffer.getvalue())
    assert len(stripped) < len(buffer.getvalue()) - 2000
    with PIL.Image.open(io.BytesIO(stripped)) as a, PIL.Image.open(buffer) as b:
        assert not a.getexif() and np.array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------------------------------- images
def _save(image: PIL.Image.Image, path, **kwargs):
    image.save(path, **kwargs)
    return path


def test_photo_is_shrunk_for_claude_and_priced_again_from_the_file(tmp_path):
    source = _save(photo(2400, 1600), tmp_path / "big.png")
    result = shrink(source, "claude-opus-4-7", out=tmp_path / "out", **AT_DEFAULT)
    assert result.status == "shrunk" and result.tokens_after < result.tokens_before
    assert result.measures["ssim"] >= 0.9 and result.bars == {"ssim": "ssim>=0.9"}
    again = price(result.path, "claude-opus-4-7", detail=result.detail)
    assert again.total_cost == result.after.total_cost <= result.before.total_cost
    assert result.path.name == "big.claude-opus-4-7.png" and result.media.kind == "image"
    assert result.tried and all("tokens" in t for t in result.tried)


def test_text_stays_readable_at_the_ocr_bar(tmp_path):
    source = _save(text_image(), tmp_path / "shot.png")
    result = shrink(source, "gpt-4o", keep={"ocr": 0.98}, out=tmp_path / "out")
    assert result.status == "shrunk" and result.measures["ocr"] >= 0.98
    assert result.tokens_after < result.tokens_before
    assert result.to_dict()["bars"] == {"ocr": "ocr>=0.98"}


def test_lossless_is_the_models_view_with_the_same_tokens_and_fewer_bytes(tmp_path):
    source = _save(photo(3000, 2000), tmp_path / "photo.jpg", quality=92)
    result = shrink(source, "gpt-4o", lossless=True, out=tmp_path / "out")
    assert result.status == "lossless" and "1152x768" in result.action
    assert result.tokens_after == result.tokens_before == 1105
    assert result.bytes_after < result.bytes_before and result.media.width == 1152
    view = P.resized(P.decode(source, "jpeg").pixels, (1152, 768))  # pixel-exact at the model's view
    with PIL.Image.open(result.path) as written:
        assert np.array_equal(np.asarray(written.convert("RGB")), np.asarray(view))
    if result.path.suffix != ".jpg":
        assert result.action.endswith(f"as {'WebP' if result.path.suffix == '.webp' else 'PNG'} (JPEG in)")


def test_bars_no_rendition_meets_keep_the_original_and_say_so(tmp_path):
    source = _save(photo(1200, 800), tmp_path / "p.png")
    result = shrink(source, "claude-sonnet-4-5", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert result.status == "kept" and result.action.startswith("kept: no cheaper rendition meets ssim>=0.9999")
    assert result.path.read_bytes() == source.read_bytes()
    assert result.after.total_cost == result.before.total_cost


def test_exif_rotated_jpeg_comes_out_upright_at_its_displayed_size(tmp_path):
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # stored landscape, displayed portrait
    source = _save(photo(1600, 1000), tmp_path / "rotated.jpg", exif=exif.tobytes(), quality=90)
    assert (mmtok.load(source).width, mmtok.load(source).height) == (1000, 1600)
    result = shrink(source, "claude-opus-4-7", out=tmp_path / "out", **AT_DEFAULT)
    out = PIL.Image.open(result.path)
    assert out.getexif().get(0x0112, 1) == 1 and out.height > out.width  # upright pixels, no orientation tag
    assert any("orientation 6" in n for n in result.notes)


def test_png_alpha_is_kept(tmp_path):
    rgba = photo(1400, 1000).convert("RGBA")
    rgba.putalpha(PIL.Image.linear_gradient("L").resize(rgba.size))
    source = _save(rgba, tmp_path / "alpha.png")
    result = shrink(source, "claude-opus-4-7", out=tmp_path / "out", **AT_DEFAULT)
    assert result.path.suffix == ".png" and PIL.Image.open(result.path).mode == "RGBA"
    assert "alpha kept (measured over white)" in result.notes


def test_animated_gif_keeps_its_first_frame_with_a_warning(tmp_path):
    frames = [photo(600, 400, seed=i).convert("P") for i in range(3)]
    source = tmp_path / "anim.gif"
    frames[0].save(source, save_all=True, append_images=frames[1:], duration=100)
    result = shrink(source, "claude-opus-4-7", out=tmp_path / "out", keep=["ssim>=0.3"])
    assert result.status == "shrunk" and result.path.suffix == ".png"  # a smaller first frame
    assert "animated GIF with 3 frames: only the first frame is kept" in result.warnings


def test_bad_inputs_and_models_raise_one_error(tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    with pytest.raises(MediaError):
        shrink(bad, "gpt-4o", out=tmp_path / "out")
    good = _save(photo(300, 200), tmp_path / "ok.png")
    with pytest.raises(Skipped, match="gpt-4o-audio-preview does not take image"):
        shrink(good, "gpt-4o-audio-preview", out=tmp_path / "out")
    with pytest.raises(PriceError):
        shrink(good, "no-such-model-x", out=tmp_path / "out")


# ------------------------------------------------------------------------------------------------------ audio
def test_keep_intervals_cut_long_silences_to_their_edges():
    speech = [Segment(1.0, 2.0), Segment(2.3, 3.0), Segment(5.0, 6.0)]
    # leading 1 s and the 2-s pause are cut to 0.125 s beside speech; the 0.3-s pause stays; the tail stays (0.2 s)
    assert keep_intervals(speech, 6.2, 0.5, 0.25) == [(0.875, 3.125), (4.875, 6.2)]
    assert keep_intervals(speech, 6.2, 5.0) == [(0.0, 6.2)]


def test_vad_is_silero_onnx_through_onnxruntime_without_torch():
    from mmtok.budgets.shrink import vad

    assert model_path().suffix == ".onnx" and model_path().parent.parent.name == "faster_whisper"
    assert type(vad._session()).__module__.startswith("onnxruntime")
    wave = mmtok.load(mmtok.sample_path("speech.wav")).waveform(sample_rate_hz=16_000, mono=True)[0].numpy()
    padded = np.concatenate([np.zeros(16_000, np.float32), wave, np.zeros(24_000, np.float32)])
    segments = speech_segments(padded)
    assert segments and segments[0].start_s >= 0.9 and segments[-1].end_s <= len(padded) / 16_000 - 1.4


def test_tempo_keeps_pitch_and_shortens_time():
    rate = 16_000
    t = np.arange(rate * 2) / rate
    tone = (0.3 * np.sin(2 * math.pi * 440 * t)).astype(np.float32)[None]
    fast = tempo(tone, rate, 1.25)
    assert fast.shape[1] == pytest.approx(tone.shape[1] / 1.25, rel=0.03)
    spectrum = np.abs(np.fft.rfft(fast[0, 2000:18000]))
    assert np.fft.rfftfreq(16000, 1 / rate)[spectrum.argmax()] == pytest.approx(440, abs=5)


def _speech_with_pauses(path):
    wave, rate = sf.read(mmtok.sample_path("speech.wav"), dtype="float32")
    silence = np.zeros(int(1.5 * rate), np.float32)
    clip = np.concatenate([silence, wave, silence, silence, wave, silence])
    sf.write(path, clip, rate, subtype="PCM_16")
    return path, len(clip) / rate


def test_speech_silences_are_cut_within_the_wer_bar(tmp_path):
    source, seconds = _speech_with_pauses(tmp_path / "talk.wav")
    # tiny.en reads this synthetic sentence a little differently with the pauses cut ("round-fark" / "brown fox"):
    # a loose bar here; the benchmark measures the default bar on 40 clips
    result = shrink(source, "gemini-3-flash-preview", keep=["wer<=0.3"], out=tmp_path / "out")
    assert result.status == "shrunk" and result.kind == "audio"
    assert result.seconds_before == pytest.approx(seconds)
    assert result.seconds_after < seconds - 4  # about 5 s of pauses removed
    assert result.measures["wer"] <= 0.3 and result.tokens_after < result.tokens_before
    assert result.path.suffix == ".wav" and result.after.tokens("audio") == math.ceil(result.seconds_after * 25)


def test_audio_lossless_and_models_without_audio(tmp_path):
    source, _ = _speech_with_pauses(tmp_path / "talk.wav")
    kept = shrink(source, "gemini-3-flash-preview", lossless=True, out=tmp_path / "out")
    assert kept.status == "kept" and "no lossless change" in kept.action
    with pytest.raises(Skipped, match="claude-opus-4-7 does not take audio"):
        shrink(source, "claude-opus-4-7", out=tmp_path / "out")
    assert Cut(0.8, 1.25).describe() == "silences over 0.8 s cut to 0.5 s, speed x1.25"


# ------------------------------------------------------------------------------------------------------ video
def test_video_media_resolution_level_where_the_model_bills_by_it(tmp_path):
    clip = mmtok.sample_path("clip.mp4")
    cheaper = shrink(clip, "gemini-2.5-flash", keep=["ssim>=0.3"], out=tmp_path / "out")
    assert cheaper.status == "shrunk" and cheaper.detail == "low" and cheaper.detail_name == "media_resolution"
    assert cheaper.tokens_after < cheaper.tokens_before
    assert cheaper.path.read_bytes() == clip.read_bytes()  # the level is a request setting; the file is unchanged
    same = shrink(clip, "gemini-3-flash-preview", out=tmp_path / "out")
    assert same.status == "kept"  # Gemini 3: low and medium frames cost the same 70 tokens


# ------------------------------------------------------------------------------------------ provider formats
def test_an_xai_model_gets_jpeg_or_png_never_webp(tmp_path):
    webp = _save(photo(2400, 1600), tmp_path / "big.webp", quality=90)
    shrunk = shrink(webp, "grok-4.20", out=tmp_path / "out", **AT_DEFAULT)
    assert shrunk.status == "shrunk" and shrunk.path.suffix == ".jpg" and shrunk.media.format == "jpeg"
    assert "written as JPEG (WEBP in)" in shrunk.notes and not shrunk.warnings
    assert not price(shrunk.path, "grok-4.20").warnings  # xAI takes it
    claude = shrink(webp, "claude-opus-4-7", out=tmp_path / "out", **AT_DEFAULT)
    assert claude.path.suffix == ".webp"  # Anthropic takes WebP: the source's own format
    png = _save(photo(300, 200), tmp_path / "small.png")
    lossless = shrink(png, "grok-4.20", lossless=True, out=tmp_path / "out")
    assert lossless.path.suffix in (".png", ".gif") and lossless.media.format == "png"  # no lossless WebP for xAI


def test_a_format_the_provider_does_not_take_is_converted_where_it_would_be_kept(tmp_path):
    webp = _save(photo(1200, 800), tmp_path / "p.webp", quality=90)
    kept = shrink(webp, "grok-4.20", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert kept.status == "converted" and kept.media.format == "png"  # JPEG at quality 90 misses so near a bar
    assert kept.action.startswith("converted to PNG at the same size: grok-4.20 does not take WebP (kept: no cheaper")
    assert (kept.media.width, kept.media.height) == (1200, 800) and kept.tokens_after == kept.tokens_before
    with PIL.Image.open(webp) as original, PIL.Image.open(kept.path) as written:
        assert np.array_equal(np.asarray(original.convert("RGB")), np.asarray(written.convert("RGB")))
    assert not price(kept.path, "grok-4.20").warnings
    alpha = photo(600, 400).convert("RGBA")
    alpha.putalpha(128)
    clear = shrink(_save(alpha, tmp_path / "a.webp", quality=90), "grok-4.20", lossless=True, out=tmp_path / "out")
    assert clear.status == "converted" and clear.path.suffix == ".png"  # alpha: PNG, not JPEG
    assert PIL.Image.open(clear.path).mode == "RGBA"


def test_audio_for_a_provider_that_does_not_take_its_container_is_written_as_wav(tmp_path):
    source, _ = _speech_with_pauses(tmp_path / "talk.wav")
    flac = tmp_path / "talk.flac"
    sf.write(flac, sf.read(source, dtype="float32")[0], 16_000, format="FLAC", subtype="PCM_16")
    openai = shrink(flac, "gpt-4o-audio-preview", lossless=True, out=tmp_path / "out")  # WAV and MP3 only
    assert openai.status == "converted" and openai.path.suffix == ".wav" and openai.media.format == "wav"
    assert "written as WAV PCM_16 (FLAC in)" in openai.notes and not openai.warnings
    assert openai.seconds_after == pytest.approx(openai.seconds_before, abs=1e-3)
    gemini = shrink(flac, "gemini-3-flash-preview", lossless=True, out=tmp_path / "out")  # Gemini takes FLAC
    assert gemini.status == "kept" and gemini.path.read_bytes() == flac.read_bytes()
    m4a = shrink(mmtok.sample_path("speech.m4a"), "gemini-3-flash-preview", lossless=True, out=tmp_path / "out")
    assert m4a.status == "converted" and m4a.path.suffix == ".flac"  # not taken: FLAC, lossless and smaller than WAV
    assert "written as FLAC PCM_16 (M4A in)" in m4a.notes


def test_a_video_container_the_provider_does_not_take_is_not_rewritten_but_warned(tmp_path):
    from tests.makers import write_video

    mkv = write_video(tmp_path / "v.mkv", [i / 24 for i in range(48)])
    result = shrink(mkv, "gemini-2.5-flash", keep=["ssim>=0.3"], out=tmp_path / "out")
    assert result.path.suffix == ".mkv"
    assert not result.warnings  # said once, by the quotes: the original's and the output's
    (before,) = [w for w in result.before.warnings if "takes video as" in w]
    assert "Google's Gemini API takes video as AVI, MOV, MP4, WebM" in before
    assert any("takes video as" in w for w in result.after.warnings)


def test_a_lossless_webp_for_xai_comes_out_as_png_and_exact_when_lossless(tmp_path):
    shot = _save(text_image(800, 500), tmp_path / "shot.webp", lossless=True)
    same = shrink(shot, "grok-4.20", lossless=True, out=tmp_path / "out")
    assert same.status == "converted" and same.path.suffix == ".png"  # exact pixels stay exact
    assert np.array_equal(np.asarray(PIL.Image.open(same.path).convert("RGB")), np.asarray(text_image(800, 500)))
    smaller = shrink(shot, "grok-4.20", keep=["ssim>=0.9999"], out=tmp_path / "out2")
    assert smaller.path.suffix == ".png"  # a pixel-exact source is written exactly, whatever its size


def test_a_lossy_source_converted_to_jpeg_meets_the_ssim_bar_or_goes_exact(tmp_path):
    for quality in (80, 95):
        lossy = _save(photo(900, 600), tmp_path / f"p{quality}.webp", quality=quality)
        for bar in (0.9, 0.99):
            out = shrink(lossy, "grok-4.20", keep=[f"ssim>={bar}"], out=tmp_path / "out")
            if out.status == "converted" and out.path.suffix == ".jpg":
                assert out.measures["ssim"] >= bar  # a JPEG under the bar is never the answer
            elif out.status == "converted":
                assert out.path.suffix == ".png" and not out.measures  # exact: nothing to measure
            else:
                assert out.status == "shrunk" and out.measures["ssim"] >= bar


def test_only_gif_animation_is_refused_and_a_kept_gif_has_no_first_frame_warning(tmp_path):
    frames = [photo(300, 200, seed=i) for i in range(3)]
    webp = tmp_path / "anim.webp"
    frames[0].save(webp, save_all=True, append_images=frames[1:], duration=100, lossless=True)
    out = shrink(webp, "gpt-4o", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert out.status != "converted" and "animated" not in out.action  # OpenAI's page says nothing of WebP frames
    gif = tmp_path / "anim.gif"
    frames = [f.convert("P") for f in frames]
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=100)
    kept = shrink(gif, "claude-opus-4-7", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert kept.status == "kept" and not kept.warnings  # the original is copied, every frame with it
    assert any("reads only the first frame" in w for w in kept.before.warnings)
    xai = shrink(gif, "grok-4.20", keep=["ssim>=0.9999"], out=tmp_path / "out")
    assert xai.status == "converted" and "grok-4.20 does not take GIF" in xai.action  # not "an animated GIF"


def _pyav_audio(path, codec, container_format, rate, channels, frames, fmt):
    """A tone through PyAV's ``codec`` (``fmt``: "s32p" planar 32-bit or "s16" interleaved 16-bit samples)."""
    from fractions import Fraction

    import av

    layout = "stereo" if channels == 2 else "mono"
    tone = 0.3 * np.sin(2 * np.pi * 440 * np.arange(frames) / rate)
    with av.open(str(path), "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        stream.codec_context.format = fmt
        for at in range(0, frames, 4096):
            part = tone[at : at + 4096]
            if fmt == "s32p":
                samples = np.repeat((part * (2**31 - 1)).astype(np.int32)[None], channels, 0)
            else:
                samples = np.repeat((part * 32767).astype(np.int16), channels)[None]
            frame = av.AudioFrame.from_ndarray(samples, format=fmt, layout=layout)
            frame.sample_rate, frame.pts, frame.time_base = rate, at, Fraction(1, rate)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def test_a_24_bit_alac_converted_to_flac_keeps_24_bits_and_a_rate_flac_cannot_hold_goes_to_wav(tmp_path):
    alac = _pyav_audio(tmp_path / "a24.m4a", "alac", "ipod", 16000, 1, 32000, "s32p")
    out = shrink(alac, "gemini-3-flash-preview", lossless=True, out=tmp_path / "out")
    assert out.status == "converted" and out.path.suffix == ".flac"
    assert sf.info(out.path).subtype == "PCM_24" and "written as FLAC PCM_24 (M4A in)" in out.notes
    high = _pyav_audio(tmp_path / "hi.mka", "pcm_s16le", "matroska", 768_000, 2, 768_000, "s16")
    wav = shrink(high, "gemini-3-flash-preview", lossless=True, out=tmp_path / "out")
    assert wav.status == "converted" and wav.path.suffix == ".wav"  # FLAC holds at most 655,350 Hz
    assert sf.info(wav.path).samplerate == 768_000


def test_a_converted_jpeg_is_measured_as_any_rendition_is_ocr_included(tmp_path):
    from mmtok.budgets.shrink.bars import bars_for
    from mmtok.budgets.shrink.image import ImageJob, _converted
    from mmtok.budgets.shrink.result import Plan

    shot = _save(text_image(900, 560), tmp_path / "shot.webp", quality=90)
    job, model, kept = ImageJob(shot, mmtok.load(shot)), resolve("grok-4.20"), Plan("kept", "kept: test")
    taken = frozenset({"jpeg", "png"})

    def convert(keep: list[str]):
        return _converted(job, model, kept, ("JPEG", ".jpg"), taken, bars_for(make_bars(keep), "image"), None, ())

    jpeg = convert(["ssim>=0.5", "ocr>=0.5"])
    assert jpeg.suffix == ".jpg" and jpeg.measures["ssim"] >= 0.5 and jpeg.measures["ocr"] >= 0.5  # both read
    exact = convert(["ssim>=0.99999", "ocr>=0.5"])
    assert exact.suffix == ".png" and not exact.measures  # the JPEG missed a bar: exact instead
    lossless = _converted(job, model, kept, ("JPEG", ".jpg"), taken, [], None, ())
    assert lossless.suffix == ".png"  # no bars (--lossless): exact
