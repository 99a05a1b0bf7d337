"""PDFs as Documents: page sizes after /Rotate, text layers, scans, page ranges, rendering, PDFs from other
producers (Pillow, matplotlib), and `mmtok inspect` on them."""

from __future__ import annotations

import json

import matplotlib
import PIL.Image
import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.eval.bench.documents import PageSpec, scanned_page, write_pdf
from mmtok.media.document import Document, page_ranges, parse_pages

runner = CliRunner()
LETTER = (612.0, 792.0)
A4 = (595.28, 841.89)
TEXT = ("Invoice 2026-117 (draft)", "Total due: 1,204.50 EUR", "Net 30 days")


@pytest.fixture(scope="module")
def mixed_pdf(tmp_path_factory) -> tuple[object, list[PageSpec]]:
    scan = (scanned_page(["SCANNED PAGE", "no text layer"], 425, 550), 425, 550)
    specs = [
        PageSpec(*LETTER, TEXT),  # a text page
        PageSpec(*A4, ("A4, turned a quarter",), rotation=90),  # rotated: displayed landscape
        PageSpec(*LETTER, scan=scan),  # a scan: no text layer
        PageSpec(*LETTER, ("typed over a scan",), scan=scan),  # mixed
        PageSpec(200.0, 300.0, ("small",), rotation=270),
    ]
    path = tmp_path_factory.mktemp("pdf") / "mixed.pdf"
    path.write_bytes(write_pdf(specs))
    return path, specs


def test_pages_are_measured_as_displayed_with_their_text_layer(mixed_pdf):
    path, specs = mixed_pdf
    doc = mmtok.load(path)
    assert isinstance(doc, Document) and doc.kind == "document" and doc.page_count == 5 and doc.version == "1.7"
    sizes = [(p.width_pt, p.height_pt, p.rotation) for p in doc.pages]
    assert sizes == [(612, 792, 0), (841.89, 595.28, 90), (612, 792, 0), (612, 792, 0), (300, 200, 270)]
    assert doc.text(1) == "\n".join(TEXT)
    assert [p.text_chars for p in doc.pages] == [len("\n".join(s.lines)) for s in specs]
    assert [p.has_text for p in doc.pages] == [True, True, False, True, True]


def test_page_pixels_at_72_and_150_dpi(mixed_pdf):
    doc = mmtok.load(mixed_pdf[0])
    assert doc.pages[0].pixels() == (612, 792)
    assert doc.pages[0].pixels(150) == (1275, 1650)
    assert doc.pages[1].pixels(150) == (1754, 1240)  # 841.89 x 150 / 72 = 1753.9


def test_info_summarises_pages_sizes_and_text(mixed_pdf):
    info = mmtok.load(mixed_pdf[0]).info()
    assert info["kind"] == "document" and info["format"] == "pdf 1.7" and info["pages"] == 5
    assert (info["width"], info["height"]) == (612, 792)
    assert info["page_sizes_pt"] == {"612x792": 3, "841.89x595.28": 1, "300x200": 1}
    assert (info["rotated_pages"], info["text_pages"], info["notes"]) == (2, 4, [])


def test_a_rotated_page_renders_turned(tmp_path):
    path = tmp_path / "turned.pdf"
    path.write_bytes(write_pdf([PageSpec(400.0, 200.0, ("X" * 20,), rotation=90, font_size=30)]))
    doc = mmtok.load(path)
    image = doc.render(1, doc.pages[0].pixels())
    assert image.size == (200, 400)  # displayed portrait
    gray = image.convert("L")
    dark = [(x, y) for x in range(0, 200, 2) for y in range(0, 400, 2) if gray.getpixel((x, y)) < 128]
    assert dark and min(x for x, _ in dark) > 100  # text at the stored page's top-left now runs down the right side


def test_a_scanned_page_renders_its_image(mixed_pdf):
    doc = mmtok.load(mixed_pdf[0])
    image = doc.render(3, (425, 550))
    assert image.mode == "RGB" and image.size == (425, 550)
    assert image.convert("L").getextrema()[0] < 64  # the scan's black text, not a blank page


def test_render_refuses_a_size_beyond_the_limit(mixed_pdf):
    doc = mmtok.load(mixed_pdf[0])
    with pytest.raises(mmtok.MediaError, match="at most 40,000,000 pixels"):
        doc.render(1, (10_000, 10_000))


def test_pillow_pdf_reads_as_scanned_pages(tmp_path):
    path = tmp_path / "pillow.pdf"
    first = PIL.Image.new("RGB", (1275, 1650), "white")
    first.save(path, resolution=150.0, save_all=True, append_images=[PIL.Image.new("RGB", (1650, 1275), "gray")])
    doc = mmtok.load(path)
    assert [(p.width_pt, p.height_pt) for p in doc.pages] == [(612, 792), (792, 612)]
    assert not any(p.has_text for p in doc.pages)


def test_matplotlib_pdf_keeps_its_text_layer(tmp_path):
    matplotlib.use("pdf")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(11, 8.5))
    figure.text(0.1, 0.9, "Quarterly report: revenue rose 12%")
    path = tmp_path / "chart.pdf"
    figure.savefig(path)
    plt.close(figure)
    doc = mmtok.load(path)
    assert doc.page_count == 1 and (doc.pages[0].width_pt, doc.pages[0].height_pt) == (792, 612)
    assert "Quarterly report: revenue rose 12%" in doc.text(1)


def test_page_ranges_parse_in_order_and_name_bad_parts():
    assert parse_pages("1-3,7", 9) == (1, 2, 3, 7)
    assert parse_pages("8-", 9) == (8, 9) and parse_pages("-2", 9) == (1, 2)
    assert parse_pages("3,1-3", 9) == (3, 1, 2)
    for bad, words in (("0", "from 1"), ("4-2", "from 1"), ("1-x", "not a page"), ("10", "past the last page")):
        with pytest.raises(ValueError, match=words):
            parse_pages(bad, 9)
    assert page_ranges((1, 2, 3, 7, 9, 10)) == "1-3,7,9-10"


def test_select_keeps_the_chosen_pages_and_their_text(mixed_pdf):
    doc = mmtok.load(mixed_pdf[0]).select([4, 1])
    assert [p.number for p in doc.pages] == [4, 1] and doc.selected and doc.file_pages == 5
    assert doc.text(1) == "\n".join(TEXT)
    with pytest.raises(mmtok.MediaError, match="page 9 is out of range"):
        doc.select([9])


def test_inspect_shows_a_document(mixed_pdf):
    result = runner.invoke(app, ["inspect", "--json", str(mixed_pdf[0])])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert (row["kind"], row["pages"], row["text_pages"]) == ("document", 5, 4)


def test_each_page_becomes_one_token_sequence(mixed_pdf):
    from mmtok.media.document import page_sequences

    doc = mmtok.load(mixed_pdf[0])
    sequences = page_sequences(doc, mmtok.get_tokenizer("vq-clip-tiny"))
    assert list(sequences) == [f"page-{n}" for n in range(1, 6)]
    first = sequences["page-1"]
    assert first.modality == "image" and len(first) == 64 and first.meta["source_size"] == [1275, 1650]
    assert sequences["page-2"].meta["source_size"] == [1754, 1240]  # rendered as displayed (rotated)


def test_tokenize_a_pdf_gives_one_sequence_a_page(tmp_path):
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    args = ["tokenize", "tests/data/report.pdf", "--image-size", "64", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    sequences = mmtok.load_sequences(tmp_path / "report.safetensors")
    assert list(sequences) == ["page-1", "page-2"]
    assert all(seq.modality == "image" and seq.grid == (8, 8) for seq in sequences.values())
