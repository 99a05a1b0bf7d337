"""Every bar on its refusal side, for every kind of input (issue 39): a candidate that loses what a bar keeps is
refused, and the answer, measured again in full from the written file (``verify.measure_written``), meets the bar.

Each test runs twice: as shipped ("measured"), and with the bar's measure forced to pass ("forced"), where it must
then accept what the full measure refuses. The second run is the proof that the first one tests the bar: were the
bar to stop refusing, the first run would fail. The search's prediction of where text is legible only orders what
is read (a rung it trusts is still read); here it is made to trust rungs where the text is 5 px tall, so that the
OCR measure alone must refuse them.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math

import numpy as np
import PIL.Image
import PIL.ImageDraw
import pytest
import soundfile as sf

import mmtok
from mmtok.budgets.shrink import ocr as O
from mmtok.budgets.shrink import shrink
from mmtok.budgets.shrink.verify import measure_written
from tests.test_shrink import _font, photo

MODES = ["measured", "forced"]
LINES = (
    "Invoice 7781-AB total due 2,450.00 USD",
    "Settings > Network > Proxy: enabled",
    "Payment within 30 days of the invoice date",
    "Ship to: 14 Harbour Road, Leith EH6 6JJ",
    "Order 5523-QZ: 12 units at 37.90 each",
)


def small_text(width: int = 1400, height: int = 440, size: int = 15, border: int = 0) -> PIL.Image.Image:
    """A screenshot-like page of ordinary-size text across its width: read whole, it is 15 px; halved, it is
    lost."""
    image = PIL.Image.new("RGB", (width + 2 * border, height + 2 * border), (236, 239, 244) if border else "white")
    draw = PIL.ImageDraw.Draw(image)
    if border:
        draw.rectangle((border, border, border + width, border + height), fill="white")
    font = _font(size)
    for n in range(5):
        words, line = (" ".join(LINES[(n + k) % len(LINES)] for k in range(4))).split(), ""
        while words and draw.textlength(f"{line} {words[0]}", font=font) < width - 80:
            line = f"{line} {words.pop(0)}".strip()
        draw.text((border + 40, border + 30 + n * 80), line, font=font, fill=(20, 20, 20))  # across the page
    return image


@pytest.fixture
def trusting(monkeypatch):
    """The search first reads a rung where the text is 5 px tall, which loses it (no failure inferred)."""
    from mmtok.budgets.shrink import job

    monkeypatch.setattr(job, "LEGIBLE_LINE_PX", 5.0)
    monkeypatch.setattr(job.ImageJob, "known_failure", lambda *args, **kwargs: None)


def force(monkeypatch, metric: str) -> None:
    """``metric``'s measure passes whatever it is given."""
    from mmtok.budgets.shrink import audio, document, job, pictures

    if metric == "ocr":
        monkeypatch.setattr(job.ImageJob, "ocr", lambda self, *args: (1.0, None))
        monkeypatch.setattr(job.ImageJob, "read_part", lambda self, *args: 1.0)
        monkeypatch.setattr(document, "layer_holds", lambda reading, layer: 1.0)
    elif metric == "ssim":
        monkeypatch.setattr(job.ImageJob, "ssim", lambda self, *args: (1.0, None))
    elif metric == "video ssim":
        monkeypatch.setattr(pictures, "ssim", lambda reference, other: 1.0)
    elif metric == "recog":
        monkeypatch.setattr(job.ImageJob, "recog", lambda self, *args: (1.0, None))
    elif metric == "wer":
        monkeypatch.setattr(audio.AudioJob, "wer", lambda self, cut: 0.0)


def _refused_below(result, metric: str, bar: float) -> bool:
    """The result's search read a cheaper candidate that missed ``metric``'s bar and refused it."""
    return any(
        isinstance(t.get(metric), float) and t[metric] < bar and not t["meets"] and t["tokens"] < result.tokens_before
        for t in result.tried
    )


# --------------------------------------------------------------------------------------------------- images: ocr
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("png", "gpt-4o"),
        ("bordered", "claude-opus-4-7"),
        pytest.param("jpeg", "gpt-4o", marks=pytest.mark.slow),  # the same path as PNG, written lossy
        pytest.param("png", "claude-opus-4-7", marks=pytest.mark.slow),  # the same path as bordered, uncropped
    ],
)
def test_an_image_candidate_that_loses_the_text_is_refused(tmp_path, monkeypatch, trusting, kind, model, mode):
    image = small_text(border=160 if kind == "bordered" else 0)
    source = tmp_path / f"shot.{'jpg' if kind == 'jpeg' else 'png'}"
    image.save(source, **({"quality": 95} if kind == "jpeg" else {}))
    if mode == "forced":
        force(monkeypatch, "ocr")
    result = shrink(source, model, keep=["ssim>=0.3", "ocr>=0.98"], out=tmp_path / "out")
    checked = measure_written(result)
    if mode == "measured":
        assert result.status == "shrunk" and result.measures["ocr"] >= 0.98
        assert _refused_below(result, "ocr", 0.98), result.tried  # the cheapest read first, and refused
        assert checked["ok"], checked
        assert "crop " in result.action or kind != "bordered"
    else:
        assert not checked["ok"] and "ocr>=0.98" in checked["missed"], checked


# ---------------------------------------------------------------------------------------- images: ssim and recog
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bar", ["ssim>=0.995", "recog>=0.9999"])
def test_a_picture_candidate_under_a_picture_bar_is_refused(tmp_path, monkeypatch, bar, mode):
    source = tmp_path / "p.png"
    photo(600, 400).save(source)  # Claude's largest cheaper rendition of it: ssim 0.959, recog 0.9997
    metric = bar.split(">=")[0]
    if mode == "forced":
        force(monkeypatch, metric)
    result = shrink(source, "claude-opus-4-7", keep=[bar], out=tmp_path / "out")
    if mode == "measured":
        assert result.status == "kept" and _refused_below(result, metric, float(bar.split(">=")[1]))
        assert measure_written(result)["ok"]
    else:
        assert result.status == "shrunk"
        checked = measure_written(result)
        assert not checked["ok"] and bar in checked["missed"], checked


# -------------------------------------------------------------------------------------------- a request body
@pytest.mark.parametrize("mode", MODES)
def test_a_body_image_part_that_loses_its_text_is_refused(tmp_path, monkeypatch, trusting, mode):
    from mmtok.budgets.shrink.request import shrink_request
    from tests.sdk_bodies import data_url, openai_chat

    buffer = io.BytesIO()
    small_text().save(buffer, "PNG")
    image = {"type": "image_url", "image_url": {"url": data_url(buffer.getvalue(), "image/png"), "detail": "high"}}
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": [{"type": "text", "text": "Total?"},
                                                                             image]}])  # fmt: skip
    if mode == "forced":
        force(monkeypatch, "ocr")
    done = shrink_request(body, keep=["ssim>=0.3", "ocr>=0.98"], out=tmp_path / "parts")
    ((_, part),) = done.parts
    original = tmp_path / "part.png"
    original.write_bytes(buffer.getvalue())  # the part's own copy is gone with shrink_request's scratch folder
    checked = measure_written(dataclasses.replace(part, source=original))
    if mode == "measured":
        assert part.status == "shrunk" and _refused_below(part, "ocr", 0.98) and checked["ok"], checked
    else:
        assert not checked["ok"] and "ocr>=0.98" in checked["missed"], checked


# ----------------------------------------------------------------------------------------------------- PDFs
def _small_text_pdf(tmp_path, lines: tuple[str, ...] = LINES * 3, font_size: float = 8.0):
    from mmtok.eval.bench.documents import PageSpec, write_pdf

    path = tmp_path / "report.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=lines, font_size=font_size)]))
    return path


@pytest.mark.parametrize("mode", MODES)
def test_a_pdf_page_image_that_loses_the_text_is_refused(tmp_path, monkeypatch, trusting, mode):
    """Claude bills a PDF page as its text plus a page image: a smaller page image alone is cheaper, if it keeps
    the page's text (8-pt text, 17 px at 150 dpi: lost when the page is shrunk a lot)."""
    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.shrink import candidates as C
    from mmtok.budgets.shrink.document import shrink_document

    pdf = _small_text_pdf(tmp_path)
    if mode == "forced":
        force(monkeypatch, "ocr")
    result = shrink_document(pdf, "claude-haiku-4-5", keep=["ssim>=0.3", "ocr>=0.98"], out=tmp_path / "out")
    assert result.path.suffix == ".pages", result.tried  # pages as images: the cheapest that met the bars
    (page,) = sorted(result.path.iterdir())
    with PIL.Image.open(page) as im:
        written = im.convert("RGB")
    seen = C.view(resolve("claude-haiku-4-5"), *written.size, None).size
    reading = O.read(written.resize(seen, PIL.Image.Resampling.LANCZOS) if seen != written.size else written)
    document = mmtok.load(pdf)
    truth = O.read(document.render(1, document.pages[0].pixels(150)).convert("RGB"), banded=False)
    agreement = O.agreement(truth, reading)
    if mode == "measured":
        assert result.measures["ocr"] >= 0.98 and agreement >= 0.98, (agreement, result.action)
    else:
        assert agreement < 0.98, (agreement, result.action)


@pytest.mark.parametrize("mode", MODES)
def test_a_text_layer_that_lacks_what_the_page_shows_is_refused(tmp_path, monkeypatch, mode):
    """A page whose picture holds words its text layer lacks (a scanned stamp): the text alone would lose them."""
    from mmtok.budgets.shrink.document import shrink_document
    from mmtok.eval.bench.documents import PageSpec, scanned_page, write_pdf

    scan = (scanned_page(["PAID 14 MARCH", "TOTAL DUE 9,999.00 EUR", "REF 5523-QZ-0042"], 850, 1100), 850, 1100)
    path = tmp_path / "stamped.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=("Page one of the report.",), scan=scan, font_size=14)]))
    if mode == "forced":
        force(monkeypatch, "ocr")
    result = shrink_document(path, "gemini-3.1-pro-preview", keep=["ocr>=0.95"], out=tmp_path / "out")
    text = next(t for t in result.tried if t["rendition"] == "text")
    if mode == "measured":
        assert not text["met"] and text["ocr"] < 0.95 and result.path.suffix != ".txt", text
    else:
        assert text["met"] and result.path.suffix == ".txt"


# --------------------------------------------------------------------------------------------- --slice pieces
@pytest.mark.parametrize("mode", MODES)
def test_slice_pieces_that_lose_the_text_are_refused(tmp_path, monkeypatch, mode):
    """A 760x4400 page of 13-px text across its width: gpt-4o sees it at 0.47x (~6 px text), so no one image keeps
    its text; the pieces must."""
    page = PIL.Image.new("RGB", (760, 4400), "white")
    draw = PIL.ImageDraw.Draw(page)
    for n, y in enumerate(range(30, 4350, 160)):
        line = " ".join(LINES[(n + k) % len(LINES)] for k in range(3))
        while draw.textlength(line, font=_font(13)) > 720:
            line = line.rsplit(" ", 1)[0]
        draw.text((20, y), f"{n:02d} {line}", font=_font(13), fill="black")
    source = tmp_path / "tall.png"
    page.save(source)
    from mmtok.budgets.shrink import job

    monkeypatch.setattr(job, "LEGIBLE_LINE_PX", 5.0)
    if mode == "forced":
        force(monkeypatch, "ocr")
    result = shrink(source, "gpt-4o", keep=["ocr>=0.98"], slice=True, out=tmp_path / "out")
    checked = measure_written(result)
    if mode == "measured":
        assert result.status == "sliced" and result.measures["ocr"] >= 0.98 and checked["ok"], checked
        assert any(isinstance(t.get("ocr"), float) and t["ocr"] < 0.98 and not t["meets"] for t in result.tried)
    else:
        assert result.status != "sliced" and not checked["ok"], (result.action, checked)


# --------------------------------------------------------------------------------------------- video and audio
@pytest.mark.parametrize("mode", MODES)
def test_a_video_level_under_the_ssim_bar_is_refused(tmp_path, monkeypatch, mode):
    """Gemini 2.5 bills a frame 66 tokens at media_resolution low, 258 at medium: 640x360 frames of fine detail
    seen at low's view keep an SSIM of ~0.98, under a 0.995 bar."""
    import av

    clip = tmp_path / "clip.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("mpeg4", rate=5)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
        for seed in range(5):
            frame = av.VideoFrame.from_ndarray(np.asarray(photo(640, 360, seed=seed)), format="rgb24")
            for packet in [*stream.encode(frame), *(stream.encode() if seed == 4 else [])]:
                container.mux(packet)
    if mode == "forced":
        force(monkeypatch, "video ssim")
    result = shrink(clip, "gemini-2.5-flash", keep=["ssim>=0.995"], out=tmp_path / "out")
    if mode == "measured":
        (tried,) = result.tried
        assert result.status == "kept" and tried["ssim"] < 0.995 and not tried["meets"], result.tried
    else:
        assert result.status == "shrunk" and result.detail == "low"


@pytest.mark.parametrize("mode", MODES)
def test_audio_cut_past_the_wer_bar_is_refused(tmp_path, monkeypatch, mode):
    """The pauses cut, tiny.en reads this synthetic sentence a little differently: a WER of 0 refuses the cut."""
    wave, rate = sf.read(mmtok.sample_path("speech.wav"), dtype="float32")
    silence = np.zeros(int(1.5 * rate), np.float32)
    source = tmp_path / "talk.wav"
    sf.write(source, np.concatenate([silence, wave, silence, silence, wave, silence]), rate, subtype="PCM_16")
    if mode == "forced":
        force(monkeypatch, "wer")
    result = shrink(source, "gemini-3-flash-preview", keep=["wer<=0.0"], out=tmp_path / "out")
    tried = [t for t in result.tried if isinstance(t.get("wer"), float)]
    if mode == "measured":
        assert result.status == "kept" and tried and all(t["wer"] > 0 and not t["meets"] for t in tried), tried
    else:
        assert result.status == "shrunk" and result.seconds_after < result.seconds_before - 4
        assert math.isclose(result.measures["wer"], 0.0)


def test_the_modes_are_what_the_tests_say(monkeypatch):
    """Forcing a bar changes the measure the search calls, and only that one (json: a cheap check of force())."""
    from mmtok.budgets.shrink import job, pictures

    before = (job.ImageJob.ocr, pictures.ssim)
    force(monkeypatch, "ocr")
    assert job.ImageJob.ocr is not before[0] and pictures.ssim is before[1]
    assert json.dumps(job.ImageJob.ocr(None)) == "[1.0, null]"
