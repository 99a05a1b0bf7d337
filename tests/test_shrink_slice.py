"""Tall and wide pages (issue 27, item 5): what a model's view does to their text, and --slice's pieces."""

from __future__ import annotations

import PIL.Image
import PIL.ImageDraw
import pytest

from mmtok.budgets.pricing import image_token_count, resolve
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import shrink
from tests.test_shrink import _font

SENTENCE = "the quick brown fox jumps over a lazy dog while invoice 7781-AB totals 2,450.00 USD by Friday"


def tall_page(path, width=900, height=6000, text_px=16, every_px=240):
    """A full-page screenshot: lines of ``text_px`` text every ``every_px``, numbered, down a tall white page."""
    page = PIL.Image.new("RGB", (width, height), "white")
    draw = PIL.ImageDraw.Draw(page)
    words = SENTENCE.split()
    for n, y in enumerate(range(30, height - 2 * text_px, every_px)):
        line = " ".join(words[(3 * n + k) % len(words)] for k in range(7))
        draw.text((24, y), f"{n:03d} {line}", font=_font(text_px), fill="black")
    page.save(path)
    return path


def test_text_scale_is_the_models_view_and_how_much_it_shrinks_text():
    seen = C.text_scale(resolve("gpt-4o"), 1280, 8000)
    assert seen.view.size == (328, 2048) and seen.text_px(18) == pytest.approx(4.6, abs=0.05)
    assert C.text_scale(resolve("gpt-4o"), 800, 600).scale == 1.0  # within the view: text as it is


@pytest.mark.parametrize(("across", "expected"), [(1280, 768), (480, 2048), (2100, 0)])
def test_the_longest_piece_gpt4o_sees_whole_is_where_its_rule_stops_downscaling(across, expected):
    # gpt-4o fits an image in 2048 px, then its short side in 768: a 1280-wide piece is whole up to 768 px long, a
    # 480-wide one up to 2048; one 2100 px wide is downscaled however short
    assert C.largest_unscaled(resolve("gpt-4o"), across, 8000) == expected
    if expected:
        assert C.view(resolve("gpt-4o"), across, expected, None).size == (across, expected)


def test_a_tall_page_is_kept_with_how_small_its_text_gets_and_the_remedy(tmp_path):
    page = tall_page(tmp_path / "tall.png")
    kept = shrink(page, "gpt-4o", keep=["ocr>=0.98"], out=tmp_path / "out")
    assert kept.status == "kept" and not kept.pieces
    assert "gpt-4o sees this 900x6000 image at 307x2048 (0.34x)" in kept.action
    assert kept.action.endswith("--slice cuts it into pieces the model sees whole")
    assert all(
        t["ocr"] is None and t["reasons"]["ocr"].startswith("not read: the original's lines") for t in kept.tried
    )


def test_slice_cuts_a_tall_page_into_pieces_the_model_sees_whole_each_read_against_its_part(tmp_path):
    page = tall_page(tmp_path / "tall.png")
    result = shrink(page, "gpt-4o", keep=["ocr>=0.98"], slice=True, out=tmp_path / "out")
    assert result.status == "sliced" and len(result.pieces) >= 2 and result.path == result.pieces[0]
    assert [p.name for p in result.pieces] == [f"tall.gpt-4o.part{i + 1}of{len(result.pieces)}.png" for i in
                                               range(len(result.pieces))]  # fmt: skip
    assert result.measures["ocr"] >= 0.98
    tokens = 0
    for piece in result.pieces:
        with PIL.Image.open(piece) as im:
            size = im.size
        assert C.view(resolve("gpt-4o"), *size, None).size == size  # seen whole, not downscaled
        tokens += image_token_count(*size, "gpt-4o").tokens
    assert result.tokens_after == tokens > result.tokens_before  # priced piece by piece, dearer than one image
    assert f"{tokens:,} tokens against {result.tokens_before:,} for the one image" in result.action
    as_sent = next(t for t in result.tried if t["size"].endswith("as sent"))
    assert not as_sent["meets"]  # the one image, as the model sees it, fails the bar: read, or known to fail
    assert as_sent["ocr"] < 0.98 if as_sent["ocr"] is not None else as_sent["reasons"]["ocr"].startswith("not read")
    assert result.to_dict()["pieces"] == [str(p) for p in result.pieces]


def test_slice_pieces_cover_the_page_inside_its_uniform_margins(tmp_path):
    """A page whose text is a narrow column in a wide white page: the pieces are cut from the column, so each is
    as narrow as the text needs (issue 39: they kept the margin, two tiles wide where the text needs one)."""
    import mmtok
    from mmtok.budgets.shrink.job import ImageJob
    from mmtok.budgets.shrink.slices import sliced_region, slicings_for

    page = PIL.Image.new("RGB", (1400, 5000), "white")
    draw = PIL.ImageDraw.Draw(page)
    for n, y in enumerate(range(40, 4900, 300)):
        draw.text((560, y), f"{n:03d} invoice 7781-AB", font=_font(16), fill="black")
    page.save(tmp_path / "column.png")
    job = ImageJob(tmp_path / "column.png", mmtok.load(tmp_path / "column.png"))
    left, top, right, bottom = sliced_region(job, crop=True)
    assert 500 < left < 560 and right < 900 and top < 40 and bottom > 4700  # the column, with a small margin
    assert sliced_region(job, crop=False) == (0, 0, 1400, 5000)
    gpt4o = resolve("gpt-4o")
    cropped = slicings_for(job, gpt4o, None, (), (left, top, right, bottom))
    whole = slicings_for(job, gpt4o, None, ())
    assert cropped and whole
    for slicing in cropped:
        assert all(r[0] == left and r[2] == right and top <= r[1] < r[3] <= bottom for r in slicing.regions)
    full = max(cropped, key=lambda s: s.scale), max(whole, key=lambda s: s.scale)  # each at full resolution
    assert full[0].width == right - left and full[1].width == 1400
    assert full[0].tokens < full[1].tokens
