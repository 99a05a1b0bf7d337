"""Shrink you can trust (issue 28): every bar measures something or says it cannot, names say what happened, each
output is written once, and the measures in JSON have one type each."""

from __future__ import annotations

import io

import numpy as np
import PIL.Image
import PIL.ImageDraw
import pytest

import mmtok
from mmtok.budgets.shrink import make_bars, shrink, shrink_models
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.job import NO_TEXT
from mmtok.budgets.shrink.ocr import DETECTOR
from tests.test_shrink import _font, photo, text_image

CAT = mmtok.sample_path("chelsea.jpg")  # a 451x300 photo of a cat, no text


def _mixed(path):
    """The cat photo, doubled, with a caption band of large text under it."""
    with PIL.Image.open(CAT) as cat:
        picture = cat.convert("RGB").resize((902, 600))
    canvas = PIL.Image.new("RGB", (902, 720), "white")
    canvas.paste(picture, (0, 0))
    PIL.ImageDraw.Draw(canvas).text((30, 630), "Invoice 7781-AB: total due 2,450.00", font=_font(44), fill="black")
    canvas.save(path)
    return path


# ----------------------------------------------------------------------------------------- bars that measure
def test_a_photo_without_text_says_ocr_does_not_apply_and_the_recog_bar_decides(tmp_path):
    loose = shrink(CAT, "claude-opus-4-7", keep=["ocr>=0.98", "recog>=0.5"], out=tmp_path / "loose")
    strict = shrink(CAT, "claude-opus-4-7", keep=["ocr>=0.98", "recog>=0.995"], out=tmp_path / "strict")
    for result in (loose, strict):
        assert result.measures.get("ocr") is None  # not 1.000: there is nothing to read
        assert result.reasons["ocr"] == NO_TEXT and NO_TEXT.startswith(f"no text found ({DETECTOR}; fewer than 4 ")
    assert loose.status == "shrunk" and 0.5 <= loose.measures["recog"] < 0.995
    assert strict.tokens_after > loose.tokens_after  # the recog bar alone held the strict one larger
    assert strict.status == "kept" or strict.measures["recog"] >= 0.995
    read = [t for t in loose.tried if t.get("recog") is not None]
    assert read and all(isinstance(t["recog"], float) and t["ocr"] is None for t in read)


def test_a_screenshot_with_text_is_held_by_ocr_and_recog_alike(tmp_path):
    source = tmp_path / "shot.png"
    text_image().save(source)
    result = shrink(source, "claude-opus-4-7", keep=["ocr>=0.98", "recog>=0.5"], out=tmp_path / "out")
    assert result.status == "shrunk" and result.measures["ocr"] >= 0.98 and result.measures["recog"] >= 0.5
    assert not result.reasons


def test_a_mixed_image_is_held_by_both_its_text_and_its_picture(tmp_path):
    source = _mixed(tmp_path / "mixed.png")
    result = shrink(source, "claude-opus-4-7", keep=["ocr>=0.98", "recog>=0.9"], out=tmp_path / "out")
    assert isinstance(result.measures["ocr"], float) and result.measures["ocr"] >= 0.98
    assert isinstance(result.measures["recog"], float) and result.measures["recog"] >= 0.9
    assert result.tokens_after < result.tokens_before and not result.reasons


def test_measures_in_json_are_a_number_or_null_with_the_reason_beside_it(tmp_path):
    (result,) = shrink_models(CAT, ["gpt-5.4"], make_bars(None), tmp_path, "cat")
    row = result.to_dict()
    for entry in [row, *row["tried"]]:
        measures = row["measures"] if entry is row else {k: entry[k] for k in ("ssim", "recog", "ocr") if k in entry}
        reasons = entry.get("reasons") or {}
        for metric, value in measures.items():
            assert value is None or isinstance(value, float), (metric, value)
            assert (value is None) == (metric in reasons), (metric, entry)
        assert all(isinstance(why, str) and why for why in reasons.values())


# ------------------------------------------------------------------------------------ names that say what happened
def test_lossless_png_is_pixel_exact_at_the_view_and_says_a_change_of_format(tmp_path):
    source = tmp_path / "big.png"
    photo(3000, 2000).save(source)
    result = shrink(source, "gpt-4o", lossless=True, out=tmp_path / "out")
    assert result.status == "lossless" and result.tokens_after == result.tokens_before
    view = P.resized(P.decode(source, "png").pixels, (1152, 768))
    with PIL.Image.open(result.path) as written:
        assert np.array_equal(np.asarray(written.convert("RGB")), np.asarray(view))
    if result.path.suffix == ".webp":
        assert result.action.endswith("as WebP (PNG in)") and "written as WEBP (PNG in)" in result.notes
    else:
        assert result.path.suffix == ".png" and "(PNG in)" not in result.action


def test_lossless_jpeg_within_the_view_keeps_its_pixels_and_drops_its_metadata(tmp_path):
    exif = PIL.Image.Exif()
    exif[0x010F] = "Camera maker " * 300
    source = tmp_path / "small.jpg"
    photo(600, 400).save(source, quality=90, exif=exif.tobytes())
    result = shrink(source, "gpt-4o", lossless=True, out=tmp_path / "out")
    assert result.status == "lossless" and "not resized" in result.action and result.path.suffix == ".jpg"
    assert result.bytes_after < result.bytes_before
    with PIL.Image.open(source) as a, PIL.Image.open(result.path) as b:
        assert np.array_equal(np.asarray(a), np.asarray(b)) and not b.getexif()


def test_lossless_on_a_lossy_webp_is_kept_or_says_it_was_re_encoded(tmp_path):
    within = tmp_path / "within.webp"
    photo(600, 400).save(within, quality=80)
    kept = shrink(within, "gpt-4o", lossless=True, out=tmp_path / "out")
    assert kept.status == "kept" and kept.path.read_bytes() == within.read_bytes()  # never re-encoded silently
    large = tmp_path / "large.webp"
    photo(3000, 2000).save(large, quality=80)  # noisy: its exact view is larger than it
    resized = shrink(large, "gpt-4o", lossless=True, out=tmp_path / "out")
    assert resized.status == "re-encoded" and resized.tokens_after == resized.tokens_before
    assert "re-encoded (lossy source): WebP quality 90, ssim " in resized.action
    assert isinstance(resized.measures["ssim"], float) and resized.path.suffix == ".webp"


# ---------------------------------------------------------------------------------------- outputs written once
def test_two_models_sharing_a_rendition_write_it_once_and_the_second_points_to_it(tmp_path):
    source = tmp_path / "p.png"
    photo(1600, 1200).save(source)
    bars = make_bars(["ssim>=0.9"])
    first, second = shrink_models(source, ["claude-sonnet-4-5", "claude-haiku-4-5"], bars, tmp_path / "o", "p")
    assert first.status == second.status == "shrunk" and first.action == second.action  # one image rule
    assert first.same_file_as is None and second.same_file_as == "claude-sonnet-4-5"
    assert second.path == first.path == tmp_path / "o" / "p.claude-sonnet-4-5.png"
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["p.claude-sonnet-4-5.png"]
    assert second.to_dict()["same_file_as"] == "claude-sonnet-4-5"


def test_an_input_kept_for_several_models_is_copied_once_under_its_own_name(tmp_path):
    source = tmp_path / "p.png"
    photo(900, 600).save(source)
    results = list(
        shrink_models(source, ["claude-sonnet-4-5", "gpt-4o"], make_bars(["ssim>=0.9999"]), tmp_path / "o", "p")
    )
    assert [r.status for r in results] == ["kept", "kept"]
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["p.png"]
    assert all(r.path == tmp_path / "o" / "p.png" for r in results)
    assert results[1].same_file_as == "claude-sonnet-4-5"


@pytest.mark.parametrize("side", [8, 10])
def test_an_image_under_ssims_window_is_measured_where_its_pixels_are_the_same_and_kept_elsewhere(tmp_path, side):
    source = tmp_path / "tiny.png"
    photo(side, side).save(source)
    openai, claude = shrink_models(source, ["gpt-4o", "claude-opus-4-7"], make_bars(None), tmp_path / "o", "tiny")
    assert openai.status == "shrunk" and openai.detail == "low" and openai.measures["ssim"] == 1.0  # same pixels
    assert claude.status == "kept"  # no smaller size on its 28-px grid: kept, never an error


def test_an_image_under_ssims_window_whose_rendition_changes_pixels_is_unmeasured_and_fails_the_bar(tmp_path):
    from mmtok.budgets.shrink.job import ImageJob

    source = tmp_path / "tiny.png"
    photo(9, 9).save(source)
    job = ImageJob(source, mmtok.load(source))
    other = PIL.Image.new("RGB", (9, 9), "white")
    value, reason = job.ssim(job.original_view((9, 9)), other)
    assert value is None and reason == "cannot be measured: the view is 9x9, under SSIM's 11-px window"
    assert job.ssim(job.original_view((9, 9)), job.original_view((9, 9)).copy()) == (1.0, None)


def test_a_decoded_jpeg_is_read_once_for_every_model(tmp_path, monkeypatch):
    from mmtok.budgets.shrink import job as J

    decodes = []
    real = J.P.decode
    monkeypatch.setattr(J.P, "decode", lambda *a: decodes.append(a) or real(*a))
    buffer = io.BytesIO()
    photo(1200, 800).save(buffer, "JPEG", quality=90)
    source = tmp_path / "p.jpg"
    source.write_bytes(buffer.getvalue())
    results = list(
        shrink_models(source, ["gpt-4o", "claude-opus-4-7", "gpt-5.4"], make_bars(["ssim>=0.9"]), tmp_path, "p")
    )
    assert len(results) == 3 and len(decodes) == 1


def test_a_stray_character_read_in_a_photo_is_no_text_to_keep(tmp_path):
    """A photo's texture read as one character (a "6" at a score of 0.85) made the ocr bar apply, and every smaller
    rendition read 0.000 against it: the photo was kept whole. Fewer than 4 characters in the whole original are
    no text to keep; a line of a few words is."""
    from mmtok.budgets.shrink.job import ImageJob

    photo = P.decode(CAT, "jpeg").rgb.resize((900, 600))
    for text, found in (("6", False), ("Invoice 7781", True)):
        canvas = photo.copy()
        PIL.ImageDraw.Draw(canvas).rectangle((40, 40, 520, 140), fill="white")
        PIL.ImageDraw.Draw(canvas).text((60, 50), text, font=_font(60), fill="black")
        path = tmp_path / f"{len(text)}.png"
        canvas.save(path)
        job = ImageJob(path, mmtok.load(path))
        assert job.text_found is found, (text, job.truth(list(range(len(job.lines)))))


# ------------------------------------------------------------------------------------------- the search order
def test_claudes_fine_ladder_is_searched_first_and_answers_come_in_the_order_asked(tmp_path, monkeypatch):
    """Claude's 28-px steps pin down where the text stops being read; gpt-4o's search then starts from there."""
    from mmtok.budgets.shrink import core

    source = tmp_path / "t.png"
    text_image().save(source)
    searched = []
    plan = core._Options.plan

    def spied(self, job, kind, model, bars):
        searched.append(model.asked)
        return plan(self, job, kind, model, bars)

    monkeypatch.setattr(core._Options, "plan", spied)
    models = ["gpt-4o", "gemini-3-flash-preview", "claude-opus-4-7"]
    results = list(shrink_models(source, models, make_bars(None), tmp_path / "o", "t"))
    assert [r.model for r in results] == models
    assert searched == ["claude-opus-4-7", "gpt-4o", "gemini-3-flash-preview"]
    searched.clear()
    list(shrink_models(source, models, make_bars(None), tmp_path / "r", "t", reference=True))
    assert searched == models  # the path before issue 39 searches in the order asked


def test_a_photos_search_beside_the_look_for_its_text_gives_the_answer_the_search_after_it_gives(tmp_path, monkeypatch):
    """A photo's cheap search runs while its lines of text are looked for, presuming none. Without text (the cat),
    that search is the answer; with text (a caption), it is dropped and the search with text starts afresh. Either
    way the answers, and every rung measured, are those of the search made after the look (nothing run beside it).
    Nothing of the original is kept between calls here, so that each call looks for its text."""
    from mmtok.budgets.shrink.job import ImageJob
    from mmtok.budgets.shrink.search import LadderSearch

    beside = LadderSearch._beside_the_text_search
    outcomes = []

    def spied(self):
        out = beside(self)
        outcomes.append(None if not self.job.looks_like_photo else "answer" if out is not None else "dropped")
        return out

    monkeypatch.setattr(LadderSearch, "_beside_the_text_search", spied)
    monkeypatch.setattr(ImageJob, "look_ahead", lambda self: None)  # the look starts with the search, not before
    monkeypatch.setenv("MMTOK_SHRINK_ANALYSIS", "0")
    models = ["claude-opus-4-7", "gpt-4o"]
    for name, path, expected in (("cat", CAT, "answer"), ("caption", _mixed(tmp_path / "mixed.png"), "dropped")):
        outcomes.clear()
        first = list(shrink_models(path, models, make_bars(None), tmp_path / name / "1", "x"))
        assert outcomes[0] == expected and ImageJob(path, mmtok.load(path)).looks_like_photo, name
        with monkeypatch.context() as patched:
            patched.setattr(LadderSearch, "_beside_the_text_search", lambda self: None)
            after = list(shrink_models(path, models, make_bars(None), tmp_path / name / "2", "x"))
        for a, b in zip(first, after, strict=True):
            assert (a.status, a.tokens_after, a.measures) == (b.status, b.tokens_after, b.measures), name
            assert a.reasons == b.reasons, name
            assert a.tried == b.tried, name
    assert first[0].reasons.get("ocr") != NO_TEXT  # the caption is text the bar keeps


def test_the_look_for_text_started_ahead_gives_the_answers_of_the_look_made_in_turn(tmp_path, monkeypatch):
    """shrink starts looking for an image's text on the reading thread while it prices each model
    (``ImageJob.look_ahead``): for a page, a photo without text and one with a caption, the answers and every rung
    measured are those of the look made when the search first asks for it, and the look ran ahead only once."""
    from mmtok.budgets.shrink.job import ImageJob

    started = []
    ahead = ImageJob.look_ahead

    def counted(self):
        started.append(self.path.name)
        ahead(self)

    monkeypatch.setenv("MMTOK_SHRINK_ANALYSIS", "0")
    monkeypatch.setattr(ImageJob, "look_ahead", counted)
    page = tmp_path / "page.png"
    text_image().save(page)
    models = ["claude-opus-4-7", "gpt-4o"]
    for name, path in (("page", page), ("cat", CAT), ("caption", _mixed(tmp_path / "mixed.png"))):
        started.clear()
        first = list(shrink_models(path, models, make_bars(None), tmp_path / name / "1", "x"))
        assert started == [path.name], name
        with monkeypatch.context() as patched:
            patched.setattr(ImageJob, "look_ahead", lambda self: None)
            in_turn = list(shrink_models(path, models, make_bars(None), tmp_path / name / "2", "x"))
        for a, b in zip(first, in_turn, strict=True):
            assert (a.status, a.tokens_after, a.measures, a.reasons, a.tried) == (
                b.status, b.tokens_after, b.measures, b.reasons, b.tried), name  # fmt: skip
    started.clear()
    lossless = list(shrink_models(page, models, make_bars(None), tmp_path / "lossless", "x", lossless=True))
    assert started == [] and all(r.status for r in lossless)  # nothing measured: nothing looked for


def test_an_images_quote_made_beside_its_plan_fails_as_that_models_error(tmp_path, monkeypatch):
    """An image's quote is made on a thread of its own while it is planned: a quote that fails is that model's error,
    the message unchanged, and the next model's answer is given as before."""
    from mmtok.budgets.shrink import core
    from mmtok.errors import PriceError

    real = core.price

    def failing(source, model, **kw):
        if model == "gpt-4o":
            raise PriceError("gpt-4o: no image rate on this date")
        return real(source, model, **kw)

    monkeypatch.setattr(core, "price", failing)
    failed, answered = shrink_models(CAT, ["gpt-4o", "claude-opus-4-7"], make_bars(None), tmp_path, "x")
    assert isinstance(failed, PriceError) and str(failed) == "gpt-4o: no image rate on this date"
    assert answered.model == "claude-opus-4-7" and answered.tokens_before > answered.tokens_after


def test_photos_look_like_photos_and_pages_do_not(tmp_path):
    """What runs beside the look for text depends on it (never an answer): the sample photos are photos, a rendered
    page and a screenshot-like image with a coloured bar are not."""
    from mmtok.budgets.shrink.job import ImageJob

    page = tmp_path / "page.png"
    text_image().save(page)
    screen = tmp_path / "screen.png"
    canvas = text_image(1200, 800)
    PIL.ImageDraw.Draw(canvas).rectangle((0, 0, 1200, 60), fill=(40, 90, 200))
    canvas.save(screen)
    for path, expected in [*((mmtok.sample_path(n), True) for n in ("chelsea.jpg", "coffee.webp", "astronaut.png")),
                           (page, False), (screen, False)]:  # fmt: skip
        assert ImageJob(path, mmtok.load(path)).looks_like_photo is expected, path
