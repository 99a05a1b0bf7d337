"""What a first shrink in a process does before measuring: the networks load beside the decoding (once, however
many threads ask), and a page's lines are searched inside its uniform border, the same lines found."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import PIL.Image
import PIL.ImageDraw
import pytest

import mmtok
from mmtok.budgets.shrink import loading
from mmtok.budgets.shrink import ocr as O
from mmtok.budgets.shrink.job import ImageJob
from tests.test_shrink import text_image


def _loaded(monkeypatch, metrics, pixels) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(loading, "_load", calls.append)
    loading.start(metrics, pixels)
    for thread in threading.enumerate():
        if thread.name == "mmtok-loading":
            thread.join()
    return calls


def test_networks_start_loading_once_for_an_image_that_is_measured(monkeypatch):
    monkeypatch.setattr(loading, "_started", set())
    assert _loaded(monkeypatch, ["ssim", "recog", "ocr"], 2400 * 1500) == [["ocr", "recog"]]  # OCR first: read first
    assert _loaded(monkeypatch, ["ssim", "recog", "ocr"], 2400 * 1500) == []  # once per process


@pytest.mark.parametrize(("metrics", "pixels"), [(["ssim", "recog", "ocr"], 32 * 24), (["ssim"], 2400 * 1500)])
def test_an_icon_or_bars_without_networks_load_nothing_ahead(monkeypatch, metrics, pixels):
    monkeypatch.setattr(loading, "_started", set())
    assert _loaded(monkeypatch, metrics, pixels) == []


def test_the_ocr_engine_is_built_once_when_two_threads_ask_at_once():
    O._engine.cache_clear()
    engines: list[object] = []
    threads = [threading.Thread(target=lambda: engines.append(O.ocr_engine())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(engines) == 2 and engines[0] is engines[1]


def test_a_pages_lines_are_searched_inside_its_border_with_the_same_text(tmp_path, monkeypatch):
    """A page with wide white margins: the detector is given the content and a margin of border, not the page, and
    finds the lines the whole page's search finds (the same text, at the same place)."""
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "cache"))
    page = PIL.Image.new("RGB", (1400, 1800), "white")
    page.paste(text_image(), (250, 300))
    path = tmp_path / "page.png"
    page.save(path)
    seen: list[tuple[int, int]] = []
    detect = O.detect
    monkeypatch.setattr(O, "detect", lambda image, *a, **k: seen.append(image.size) or detect(image, *a, **k))
    job = ImageJob(path, mmtok.load(path), kept=False)
    inside = job.lines
    assert seen and seen[0][0] * seen[0][1] < 0.9 * 1400 * 1800
    whole = detect(page)
    assert len(inside) == len(whole) == 3
    assert job.truth_text.replace(" ", "") == "\n".join(
        t for t, s in O.recognise(page, [line.corners for line in whole]) if s >= O.MIN_SCORE
    ).replace(" ", "")
    assert np.abs(np.array([ln.corners for ln in inside]) - np.array([ln.corners for ln in whole])).max() < 8


def test_wait_returns_once_the_loading_under_way_is_done(monkeypatch):
    """What the hook does before its process ends at once: a first write of the weights is never cut short."""
    monkeypatch.setattr(loading, "_started", set())
    monkeypatch.setattr(loading, "_threads", [])
    release, done = threading.Event(), []
    monkeypatch.setattr(loading, "_load", lambda metrics: release.wait(60) and done.append(metrics))
    loading.start(["ocr"], 2400 * 1500)
    waiter = threading.Thread(target=loading.wait)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not done  # still loading: wait() waits
    release.set()
    waiter.join(60)
    assert not waiter.is_alive() and done == [["ocr"]]


def test_the_engine_builds_no_angle_classifier_and_runs_its_networks_in_an_arena_handed_back():
    """mmtok reads with use_cls=False: the classifier's session is made only if called. The detector allocates from
    an arena that each run hands back, the recogniser (two runs at once, long lines) from none; RapidOCR's own engine
    (``reference``) is left as it is."""
    from rapidocr_onnxruntime import main
    from rapidocr_onnxruntime.ch_ppocr_cls import TextClassifier

    O._engine.cache_clear()
    engine = O.ocr_engine()
    assert isinstance(engine.text_cls, O._BuiltWhenCalled) and engine.text_cls._part is None
    assert main.TextClassifier is TextClassifier  # RapidOCR's own again once the engine is built
    detector = engine.text_det.infer.session
    assert detector.get_session_options().enable_cpu_mem_arena
    shrinkage = detector.run.keywords["run_options"].get_run_config_entry("memory.enable_memory_arena_shrinkage")
    assert shrinkage == "cpu:0"
    assert not engine.text_rec.session.session.get_session_options().enable_cpu_mem_arena
    reference = O.ocr_engine(reference=True)
    assert isinstance(reference.text_cls, TextClassifier)
    assert not reference.text_det.infer.session.get_session_options().enable_cpu_mem_arena


def test_the_engine_reads_the_same_lines_as_rapidocrs_own_and_its_classifier_still_works_when_asked():
    image = text_image()
    engine, reference = O.ocr_engine(), O.ocr_engine(reference=True)
    array = O._bgr(image)
    ours, theirs = engine.text_det(array)[0], reference.text_det(array)[0]
    assert len(ours) == len(theirs) == 3 and np.abs(np.asarray(ours) - np.asarray(theirs)).max() <= 1
    assert "Invoice" in O.read(image)
    lines, _ = engine(array, use_cls=True)
    assert engine.text_cls._part is not None and any("Invoice" in text for _, text, _ in lines)


def test_a_line_across_the_cut_between_two_bands_is_found_once():
    """The original is searched in bands of rows; a line across the cut between two bands is found by both, and
    each may place its centre on its own side of the cut (a pixel apart): it must be one line, as in a whole pass.
    Without ``_one_each`` this layout's line at the cut was found twice at offsets -2 and -1."""
    from tests.test_shrink import _font

    width, height = 2000, 900
    rows = O.MAX_DETECT_PIXELS // width // 32 * 32
    cut = O._spans(height, rows, O.BAND_OVERLAP_PX)[0][3]
    for offset in (-3, -2, -1, 0, 1):
        image = PIL.Image.new("RGB", (width, height), "white")
        draw = PIL.ImageDraw.Draw(image)
        for dy in (-140, -70, 70, 140):
            draw.text((520, cut + dy), "Before noon, the doctor lifted the silver letter.", font=_font(32),
                      fill="black", anchor="lm")  # fmt: skip
        draw.text((526, cut + offset), "Invoice 5229-C45: $3,942.25 A wooden window sold a letter in the kitchen",
                  font=_font(32), fill="black", anchor="lm")  # fmt: skip
        banded, whole = O.detect(image), O.detect(image, banded=False)
        assert len(banded) == len(whole) == 5, (offset, [line.corners.tolist() for line in banded])


@pytest.mark.parametrize("height, most", [(1250, 500), (1066, 555), (2000, 424), (1500, 500), (1700, 500), (600, 500)])
def test_bands_are_as_few_as_before_each_as_short_as_they_can_be(height, most):
    """A pass over more rows than a band holds is made in as many bands as bands of ``most`` rows would take, each
    as short as that count allows: every row in a band and in exactly one core, neighbours overlapping by
    ``BAND_OVERLAP_PX`` or more (a line that tall is whole in one band), none over ``most`` rows, fewer rows read."""
    capped = max(2 * O.BAND_OVERLAP_PX, most // 32 * 32)
    before = O._spans(height, capped, O.BAND_OVERLAP_PX)
    bands = O._bands(height, most)
    assert len(bands) == len(before)
    assert sum(b - t for t, b, _, _ in bands) <= sum(b - t for t, b, _, _ in before)
    assert all(b - t <= capped for t, b, _, _ in bands)
    assert bands[0][0] == 0 and bands[-1][1] == height and bands[0][2] == 0.0 and bands[-1][3] == height
    for (top, bottom, _, core_end), (next_top, _, next_core, _) in itertools.pairwise(bands):
        assert bottom - next_top >= O.BAND_OVERLAP_PX and core_end == next_core and top < next_top


def test_the_detectors_input_made_by_a_table_is_rapidocrs_own_to_the_bit():
    """The detector's input is normalised by a lookup table: on real photos and a page (their own sizes, and bands),
    it is RapidOCR's ``DetPreProcess`` output exactly, and the lines found are the same."""
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

    photos = [mmtok.load(mmtok.sample_path(name)).to_pil().convert("RGB") for name in ("chelsea.jpg", "coffee.webp")]
    for image in [*photos, text_image(), text_image(1400, 300)]:
        array = O._bgr(image)
        for part in (array, array[: array.shape[0] // 2]):
            longest = max(part.shape[:2])
            own = O.ocr_engine(reference=True).text_det.get_preprocess(longest)
            assert isinstance(own, DetPreProcess)
            ours = O.ocr_engine().text_det.get_preprocess(longest)
            assert isinstance(ours, O._TablePreProcess)
            theirs, made = own(part), ours(part)
            assert made.dtype == theirs.dtype == np.float32 and made.flags.c_contiguous
            assert np.array_equal(made, theirs)
    array = O._bgr(text_image())
    ours, theirs = O.ocr_engine().text_det(array)[0], O.ocr_engine(reference=True).text_det(array)[0]
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))
