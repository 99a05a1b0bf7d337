"""Benchmark: documents per second for ``inspect`` and ``price`` on a corpus of generated PDFs.

Run: ``python -m mmtok.eval.bench.documents [--files 200] [--repeats 5]``.

In one run, over the same warm-cache folder of generated PDFs (1 to 24 pages each: text pages, scanned pages
without a text layer, mixed, rotated, Letter / A4 / slide sizes): the anchor, PDFium's own page-count read
(``len(pypdfium2.PdfDocument(path))``, in this process); the same per-page reading mmtok does (size, rotation, text
layer) but in this process and unbounded, to show what the bounded child costs; ``mmtok.load(path).info()`` (inspect:
every page read in mmtok's bounded child process); and ``mmtok.price`` of each file on three models (Anthropic,
OpenAI, Gemini 3). Reports the median documents per second of each and its ratio to the anchor.

The corpus is written by ``write_pdf``, a small PDF writer (Helvetica text through the standard 14 fonts, JPEG
"scans", ``/Rotate``, any page size) that the tests use too.
"""

from __future__ import annotations

import argparse
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WORDS = [
    "the",
    "contract",
    "term",
    "price",
    "invoice",
    "total",
    "page",
    "model",
    "token",
    "report",
    "revenue",
    "quarter",
    "paper",
    "method",
    "result",
    "table",
    "figure",
    "budget",
    "shipment",
    "order",
    "amount",
    "tax",
    "net",
    "payable",
    "due",
    "date",
    "signed",
    "party",
    "clause",
    "annex",
    "schedule",
]
PAGE_SIZES_PT = {"letter": (612.0, 792.0), "a4": (595.28, 841.89), "slide": (960.0, 540.0)}


# ------------------------------------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class PageSpec:
    """One page to write: its size (points), ``/Rotate``, lines of Helvetica text, and an optional full-page JPEG
    ``scan`` (bytes, width px, height px) under the text."""

    width_pt: float = 612.0
    height_pt: float = 792.0
    lines: tuple[str, ...] = ()
    rotation: int = 0
    scan: tuple[bytes, int, int] | None = None
    font_size: float = 11.0


def write_pdf(pages: Sequence[PageSpec]) -> bytes:
    """A PDF 1.7 file of ``pages``: one object per page, content stream and image, a cross-reference table."""
    objects: list[bytes] = [
        b"",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for spec in pages:
        resources = b"/Font << /F1 3 0 R >>"
        ops = []
        if spec.scan is not None:
            data, width, height = spec.scan
            objects.append(
                b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 "
                b"/Filter /DCTDecode /Length %d >>\nstream\n%s\nendstream" % (width, height, len(data), data)
            )
            resources += b" /XObject << /Im1 %d 0 R >>" % len(objects)
            ops.append(b"q %.2f 0 0 %.2f 0 0 cm /Im1 Do Q" % (spec.width_pt, spec.height_pt))
        if spec.lines:
            size = spec.font_size
            ops.append(b"BT /F1 %.1f Tf %.1f TL 54 %.1f Td" % (size, size * 1.25, spec.height_pt - 72))
            ops.extend(b"(%s) Tj T*" % _escaped(line) for line in spec.lines)
            ops.append(b"ET")
        content = b"\n".join(ops)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.2f %.2f] /Rotate %d /Resources << %s >> /Contents %d 0 R >>"
            % (spec.width_pt, spec.height_pt, spec.rotation, resources, len(objects))
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    return assemble(objects)


def assemble(objects: Sequence[bytes], trailer: bytes = b"") -> bytes:
    """A PDF file of ``objects`` (numbered from 1; object 1 is the catalog) with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, xref)
    return bytes(out)


def _escaped(line: str) -> bytes:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("cp1252")


def scanned_page(lines: Sequence[str], width_px: int = 850, height_px: int = 1100, quality: int = 80) -> bytes:
    """A "scanned" page: ``lines`` drawn in black on white by Pillow's default font, as JPEG bytes."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    image = PIL.Image.new("RGB", (width_px, height_px), "white")
    draw = PIL.ImageDraw.Draw(image)
    font = PIL.ImageFont.load_default(size=max(12, width_px // 40))
    step = round(font.size * 1.6)
    for n, line in enumerate(lines):
        draw.text((width_px // 12, height_px // 12 + n * step), line, fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def sentence(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def corpus_document(rng: random.Random) -> list[PageSpec]:
    """One document of the corpus: 1 to 24 pages of one size, each a text page, a scan, or both; some rotated."""
    width, height = PAGE_SIZES_PT[rng.choice(tuple(PAGE_SIZES_PT))]
    pages = []
    for _ in range(rng.choice((1, 1, 2, 3, 5, 8, 12, 24))):
        kind = rng.choice(("text", "text", "text", "scan", "mixed"))
        lines = tuple(sentence(rng) for _ in range(rng.randint(8, 40)))
        scan = None
        if kind != "text":
            scan = (scanned_page(lines[:12], 425, round(425 * height / width), 60), 425, round(425 * height / width))
        rotation = rng.choice((0, 0, 0, 90, 180, 270))
        pages.append(PageSpec(width, height, lines if kind != "scan" else (), rotation, scan))
    return pages


def pdf_folder(folder: Path, files: int, seed: int = 0) -> list[Path]:
    """``files`` generated PDFs in ``folder`` (kept between runs: the same seed writes the same files)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for n in range(files):
        pages = corpus_document(rng)
        path = folder / f"doc-{seed}-{n:05d}.pdf"
        if not path.exists():
            path.write_bytes(write_pdf(pages))
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------------------------- timing
MODELS = ("claude-haiku-4-5", "gpt-5.6", "gemini-3.1-pro-preview")


def page_count_read(paths: Sequence[Path]) -> int:
    """The anchor: PDFium's own page count of each file, in this process."""
    import pypdfium2

    pages = 0
    for path in paths:
        pdf = pypdfium2.PdfDocument(path)
        pages += len(pdf)
        pdf.close()
    return pages


def pages_in_process(paths: Sequence[Path]) -> int:
    """The child's own work (every page's size, rotation and text layer) done in this process, unbounded: what the
    child process costs on top of it is the difference to ``inspect_all``."""
    import os

    from mmtok.media.document_worker import _scan

    pages = 0
    for path in paths:
        st = os.stat(path)
        found = _scan({"path": str(path), "id": [st.st_dev, st.st_ino], "pages": 10**6, "text": 10**9})
        pages += len(found["pages"])
    return pages


def inspect_all(paths: Sequence[Path]) -> int:
    import mmtok

    return sum(mmtok.load(path).info()["pages"] for path in paths)


def price_all(paths: Sequence[Path]) -> int:
    import mmtok
    from mmtok.budgets.pricing import price

    tokens = 0
    for path in paths:
        document = mmtok.load(path)
        tokens += sum(price(document, model).input_tokens for model in MODELS)
    return tokens


def main(argv: Sequence[str] | None = None) -> None:
    from mmtok.cache import cache_dir
    from mmtok.eval.bench import machine, print_table, time_interleaved, write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("eval/results/bench_documents.json"))
    args = parser.parse_args(argv)
    paths = pdf_folder(cache_dir("bench", "documents"), args.files)
    pages = page_count_read(paths)
    if inspect_all(paths) != pages:
        raise SystemExit("mmtok's page counts differ from PDFium's own")
    price_all(paths[:5])  # rate cards and encodings warm, as on any call after the first
    cases = {"pdfium page count (anchor)": lambda: page_count_read(paths)}
    cases["pdfium every page, in process"] = lambda: pages_in_process(paths)
    cases["mmtok inspect (load + info)"] = lambda: inspect_all(paths)
    cases[f"mmtok price ({len(MODELS)} models)"] = lambda: price_all(paths)
    medians = time_interleaved(cases, args.repeats)
    anchor = medians["pdfium page count (anchor)"]
    rows = [[name, len(paths) / s, pages / s, anchor / s] for name, s in medians.items()]
    title = f"Documents: {len(paths)} generated PDFs, {pages:,} pages, median of {args.repeats} ({machine()})"
    print_table(title, ["case", "documents/s", "pages/s", "x anchor"], rows)
    payload = {
        "files": len(paths),
        "pages": pages,
        "repeats": args.repeats,
        "machine": machine(),
        "models": list(MODELS),
        "cases": {
            name: {"seconds": s, "documents_per_s": len(paths) / s, "ratio_to_anchor": anchor / s}
            for name, s in medians.items()
        },
    }
    write_json(args.out, payload)
    if args.out is not None:
        lines = [title] + [f"{r[0]}: {r[1]:,.1f} documents/s, {r[2]:,.0f} pages/s, {r[3]:.4f} x anchor" for r in rows]
        args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
