"""Shrinking PDFs: the text layer alone only when the bars ask only for text and the layer holds what OCR reads,
pages as images where that is cheaper than the document rule, page ranges as new PDFs; priced again from what was
written, never dearer than the PDF as it is."""

from __future__ import annotations

import io
from pathlib import Path

import PIL.Image
import pytest

import mmtok
from mmtok.budgets.shrink.document import layer_holds, shrink_document
from mmtok.eval.bench.documents import PageSpec, scanned_page, write_pdf

LINES = ("Invoice 2026-117", "Total due: 1,204.50 EUR", "Payment within 30 days of the invoice date")


@pytest.fixture(scope="module")
def invoice(tmp_path_factory):
    path = tmp_path_factory.mktemp("pdf") / "invoice.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=LINES, font_size=18), PageSpec(lines=("Page two.",), font_size=18)]))
    return path


def test_a_text_layer_that_holds_what_ocr_reads_is_sent_alone(invoice, tmp_path):
    result = shrink_document(invoice, "gemini-3.1-pro-preview", keep=["ocr>=0.95"], pages="1", out=tmp_path)
    assert result.status == "shrunk" and result.path.suffix == ".txt"
    assert result.path.read_text() == "\n".join(LINES)
    assert result.before.input_tokens == 2 * 560  # the whole PDF at the default media_resolution
    assert result.after.input_tokens == result.after.tokens("text") < 560  # what was written, priced again
    assert result.measures["ocr"] >= 0.95
    assert (result.tokens_before, result.tokens_after) == (1120, result.after.input_tokens)  # the table's, not 0 -> 0


def test_a_picture_bar_keeps_the_text_layer_from_being_sent_alone(invoice, tmp_path):
    result = shrink_document(invoice, "gpt-4o", keep=["ssim>=0.9", "ocr>=0.95"], pages="2", out=tmp_path)
    text = next(t for t in result.tried if t["rendition"] == "text")
    assert not text["met"] and "only with an ocr bar" in text["why"]
    assert result.path.suffix in (".pdf", ".pages") and result.after.total_cost <= result.before.total_cost


def test_a_scanned_page_is_never_reduced_to_text(tmp_path):
    scan = (scanned_page(["NO TEXT LAYER HERE"], 425, 550), 425, 550)
    path = tmp_path / "scan.pdf"
    path.write_bytes(write_pdf([PageSpec(scan=scan)]))
    result = shrink_document(path, "gemini-3.1-pro-preview", keep=["ocr>=0.9"], out=tmp_path / "out")
    text = next(t for t in result.tried if t["rendition"] == "text")
    assert not text["met"] and "have no text layer" in text["why"]
    assert result.path.suffix != ".txt"


def test_a_page_range_is_written_as_a_new_pdf_when_nothing_cheaper_meets_the_bars(tmp_path):
    noise = PIL.Image.effect_noise((425, 550), 80).convert("RGB")  # a full-bleed page: no border to crop
    buffer = io.BytesIO()
    noise.save(buffer, "JPEG", quality=90)
    scan = (buffer.getvalue(), 425, 550)
    path = tmp_path / "photos.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=("Page one.",), scan=scan), PageSpec(lines=("Page two.",), scan=scan)]))
    result = shrink_document(path, "mmtok-semantic", keep=["ssim>=1.0"], pages="2", out=tmp_path / "out")
    assert result.path.suffix == ".pdf" and result.status == "shrunk" and result.action == "pages 2 of 2 as a PDF"
    written = mmtok.load(result.path)
    assert written.page_count == 1 and written.text(1) == "Page two."
    assert result.after.input_tokens == result.before.input_tokens // 2 == 48  # 1275 x 1650 px: 6 x 8 patches


def test_layer_holds_counts_what_ocr_reads_and_the_layer_lacks():
    assert layer_holds("Total due\n1,204.50", "Invoice\nTotal due 1,204.50 EUR") == 1.0  # extra layer text is free
    assert layer_holds("Quarterlyreport,Q32026", "Quarterly report, Q3 2026") == 1.0  # spacing does not count
    assert layer_holds("Signed: A. Smith", "") == 0.0  # a figure's or a stamp's words the layer lacks
    assert layer_holds("", "anything") == 1.0


def test_pages_as_images_replace_text_plus_page_on_claude_where_the_bars_hold(tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    result = shrink_document("tests/data/report.pdf", "claude-haiku-4-5", pages="1", out=tmp_path)  # default bars
    assert result.status == "shrunk" and result.path.suffix == ".pages"
    (written,) = result.path.iterdir()
    assert mmtok.load(written).kind == "image"
    assert [ln.modality for ln in result.after.input_lines] == ["image"]  # priced again from the image written
    pages = next(t for t in result.tried if t["rendition"] == "pages")  # page 1 as a PDF: its text + 1,496
    assert result.after.input_tokens < pages["tokens"] - 1496
    assert result.before.tokens("text") > 0 and result.before.tokens("image") == 2 * 1496  # the whole PDF
    assert all(result.measures[m] >= bar for m, bar in (("ssim", 0.9), ("ocr", 0.98)))


def test_a_pdf_kept_as_it_is_is_copied_once_under_its_own_name(tmp_path):
    """As docs/shrink.md says of every kept original: OUT/<name>.pdf, once, the other models pointing to it."""
    import json

    from typer.testing import CliRunner

    from mmtok.cli.main import app

    noise = PIL.Image.effect_noise((425, 550), 80).convert("RGB")
    buffer = io.BytesIO()
    noise.save(buffer, "JPEG", quality=90)
    path = tmp_path / "photos.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=("Page one.",), scan=(buffer.getvalue(), 425, 550))]))
    out = tmp_path / "out"
    args = ["shrink", str(path), "-m", "gpt-4o", "-m", "claude-opus-4-7", "--keep", "ssim>=1.0", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["status"] for r in rows] == ["kept", "kept"]
    assert [r["output"] for r in rows] == [str(out / "photos.pdf")] * 2
    assert [r["same_file_as"] for r in rows] == [None, "gpt-4o"]
    assert sorted(p.name for p in out.iterdir()) == ["photos.pdf"]
    assert (out / "photos.pdf").read_bytes() == path.read_bytes()
