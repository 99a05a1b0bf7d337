"""Shrinking a PDF for one model: the cheapest rendition the provider takes that meets the bars.

Three renditions are weighed against the document as it is (or the pages asked for, ``pages="1-3,7"``, written as
a new PDF by PDFium in the bounded child):

- **the pages as images**: each page rendered at 150 dpi and shrunk as an image is, at the model's own breakpoints
  and held to the image bars (``mmtok.budgets.shrink.shrink_models`` on the page: SSIM, OCR against the page's own
  rendering); written to a folder, one image a page. Cheaper where the provider bills a PDF page as its text layer
  plus an image (Anthropic, OpenAI), or a smaller image suffices.
- **the text layer alone**: only when the bars say that text is all that matters (an ``ocr`` bar and no ``ssim``
  bar), and only where every page has a text layer that holds what can be read on the page: RapidOCR reads the page
  rendered at 150 dpi, and the page's own text must agree with that reading at the ``ocr`` bar (a figure's words the
  layer lacks, or a scanned page, fail it). Written as UTF-8 text, pages separated by a blank line.
- **the pages asked for, as a PDF** (the original when none are asked for).

Every rendition is priced by pricing's own rules; the one chosen is written and priced again from the written
files, and a rendition that would cost more than the document as it is is never kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing import Model, Quote, price, resolve
from mmtok.budgets.shrink.bars import Bar, bars_for
from mmtok.budgets.shrink.result import ShrinkResult, copy_atomic, model_slug, write_bytes_atomic
from mmtok.errors import MediaError, MmtokError
from mmtok.media.document import RENDER_DPI


def starts_like_pdf(source: Path) -> bool:
    """Whether ``source`` holds a PDF header where readers look for one (its first 1,024 bytes)."""
    from mmtok.media.document import is_pdf

    try:
        with open(source, "rb") as f:
            return is_pdf(f.read(1024))
    except OSError:
        return False


def shrink_document(
    source: str | os.PathLike[str],
    model: str = "gpt-4o",
    *,
    keep: Mapping[str, float] | Sequence[str] | None = None,
    pages: str | None = None,
    out: str | os.PathLike[str] | None = None,
    detail: str | None = None,
    prices: Sequence[str | os.PathLike[str]] = (),
) -> ShrinkResult:
    """The cheapest rendition of the PDF ``source`` for ``model`` that meets ``keep`` (``["ocr>=0.98"]``: text is all
    that matters, so the text layer alone may do), of the ``pages`` given (``"1-3,7"``; default all), written to
    ``out`` (default: the user cache folder). Raises the input's or the model's error."""
    from mmtok.budgets.shrink.bars import make_bars
    from mmtok.cache import cache_dir

    path = Path(source)
    folder = Path(out) if out is not None else cache_dir("shrink")
    (result,) = shrink_documents(
        path, [model], make_bars(keep), folder, path.stem, detail=detail, pages=pages, prices=prices
    )
    if isinstance(result, MmtokError):
        raise result
    return result


def shrink_documents(
    source: Path,
    models: Sequence[str | Model],
    bars: Mapping[str, Bar],
    out_dir: Path,
    name: str,
    *,
    detail: str | None = None,
    pages: str | None = None,
    prices: Sequence[str | os.PathLike[str]] = (),
    protect: frozenset[Path] = frozenset(),
) -> Iterator[ShrinkResult | MmtokError]:
    """One result (or error) per model for the PDF ``source``, written to ``out_dir/<name>.<model>.<pdf|txt|pages>``
    (the document kept as it is: ``out_dir/<name>.pdf``, once); ``pages``: the pages to keep (``"1-3,7"``);
    ``detail``: the PDF detail / media_resolution it would be sent with."""
    import mmtok
    from mmtok.media.document import parse_pages

    try:
        document = mmtok.load(source)
        if document.kind != "document":
            raise MediaError(source, f"is {document.kind}, not a PDF")
        chosen = document.select(parse_pages(pages, document.file_pages)) if pages else document
    except (MmtokError, ValueError) as e:
        yield e if isinstance(e, MmtokError) else MediaError(source, str(e))
        return
    protected = protect | {Path(os.path.realpath(source))}
    with tempfile.TemporaryDirectory(prefix="mmtok-pdf-") as scratch:
        work = _Work(Path(source), document, chosen, Path(scratch))
        for asked in models:
            try:
                model = asked if isinstance(asked, Model) else resolve(asked, tuple(prices))
                yield _shrink_one(work, model, bars, out_dir, name, detail, tuple(prices), protected)
            except MmtokError as e:
                yield e


@dataclass
class _Work:
    """The document, the pages chosen, and what is made from them once for every model: page renders, readings."""

    source: Path
    document: Any
    chosen: Any
    scratch: Path
    renders: dict[int, Path] = field(default_factory=dict)
    readings: dict[int, float] = field(default_factory=dict)  # page -> agreement of its text layer with OCR
    jobs: dict[str, Any] = field(default_factory=dict)  # the page images' decodings and readings, for every model
    chosen_pdf: Path | None = None
    kept: tuple[Path, str] | None = None  # the document copied as it is (``<name>.pdf``), and the model that did

    def keep(self, out_dir: Path, name: str, model: str, protect: frozenset[Path]) -> tuple[Path, str | None]:
        """The document as it is, copied once as ``<name>.pdf`` for every model that keeps it: (its path, the model
        whose result wrote it, or None when written now)."""
        if self.kept is not None:
            return self.kept[0], self.kept[1]
        target = out_dir / f"{name}.pdf"
        if Path(os.path.realpath(target)) in protect:
            raise MediaError(self.source, f"the output {target} would overwrite an input: choose another --out")
        self.kept = (copy_atomic(self.source, target), model)
        return target, None

    def render(self, number: int) -> Path:
        """Page ``number`` rendered at 150 dpi, as a PNG in the scratch folder."""
        if number not in self.renders:
            page = next(p for p in self.chosen.pages if p.number == number)
            path = self.scratch / f"page-{number:05d}.png"
            self.document.render(number, page.pixels(RENDER_DPI)).save(path)
            self.renders[number] = path
        return self.renders[number]

    def text_agreement(self, number: int) -> float:
        """How well page ``number``'s text layer holds what OCR reads on the rendered page (1.0: all of it)."""
        import PIL.Image

        from mmtok.budgets.shrink.ocr import read_text

        if number not in self.readings:
            with PIL.Image.open(self.render(number)) as image:
                reading = read_text(image.convert("RGB"))
            self.readings[number] = layer_holds(reading, self.document.text(number))
        return self.readings[number]

    def pages_pdf(self) -> Path:
        """The chosen pages as a new PDF in the scratch folder (the original file when every page is chosen)."""
        if not self.chosen.selected:
            return self.source
        if self.chosen_pdf is None:
            self.chosen_pdf = self.scratch / "pages.pdf"
            self.chosen_pdf.write_bytes(self.chosen.extract())
        return self.chosen_pdf


@dataclass
class _Option:
    """A rendition weighed: what it is, its quote, whether it meets the bars, and how to write it."""

    kind: str  # pages | images | text
    action: str
    quote: Quote | None
    met: bool
    measures: dict[str, float | None]
    files: list[Path] = field(default_factory=list)  # what to write (images: one a page)
    detail: str | None = None
    why: str = ""
    folder: Path | None = None  # where the option wrote its files (images), removed when another is chosen

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"rendition": self.kind, "action": self.action, "met": self.met, **self.measures}
        if self.quote is not None:
            row.update(tokens=self.quote.input_tokens, cost=str(self.quote.total_cost))
        if self.why:
            row["why"] = self.why
        return row


def _shrink_one(
    work: _Work,
    model: Model,
    bars: Mapping[str, Bar],
    out_dir: Path,
    name: str,
    detail: str | None,
    prices: tuple,
    protect: frozenset[Path],
) -> ShrinkResult:
    before = price(work.document, model.asked, detail=detail, prices=prices)
    image_bars = bars_for(bars, "image")
    stem = out_dir / f"{name}.{model_slug(model.asked)}"
    options = [_pages_option(work, model, detail, prices)]
    options.append(_images_option(work, model, image_bars, detail, prices, stem))
    options.append(_text_option(work, model, image_bars, prices))
    best = min((o for o in options if o.met and o.quote is not None), key=lambda o: o.quote.total_cost)
    if best.quote.total_cost > before.total_cost:
        best = options[0]
    same = None
    if best.kind == "pages" and not work.chosen.selected:  # the document as it is: one copy, under its own name
        target, same = work.keep(out_dir, name, model.asked, protect)
        after = price(target, model.asked, detail=detail, prices=prices)
    else:
        target, after = _write(work, best, stem, model, detail, prices, protect)
    if after.total_cost > before.total_cost:  # priced again from what was written: never more than the original
        _remove(target)
        target, same = work.keep(out_dir, name, model.asked, protect)
        after = price(target, model.asked, detail=detail, prices=prices)
        best = _Option("pages", f"kept: {best.action} priced higher when written", after, True, {})
    for option in options:
        if option is not best and option.folder is not None:
            shutil.rmtree(option.folder, ignore_errors=True)
    kept = best.kind == "pages" and not work.chosen.selected
    return ShrinkResult(
        source=work.source,
        model=model.asked,
        kind="document",
        status="kept" if kept else "shrunk",
        action="kept: no cheaper rendition meets the bars" if kept else best.action,
        path=target,
        before=before,
        after=after,
        detail=best.detail if best.kind == "images" else detail,
        detail_name="media_resolution" if (model.family and "gemini" in model.family.name) else "detail",
        measures=best.measures,
        bars={m: str(b) for m, b in bars.items() if b.modality == "image"},
        tried=[o.row() for o in options],
        bytes_before=work.document.size_bytes,
        bytes_after=_size(target),
        notes=[o.why for o in options if o.why],
        same_file_as=same,
    )


def _pages_option(work: _Work, model: Model, detail: str | None, prices: tuple) -> _Option:
    from mmtok.media.document import page_ranges

    numbers = [p.number for p in work.chosen.pages]
    if work.chosen.selected:
        action = f"pages {page_ranges(numbers)} of {work.document.file_pages} as a PDF"
    else:
        action = "the PDF as it is"
    quote = price(work.chosen, model.asked, detail=detail, prices=prices)
    return _Option("pages", action, quote, True, {}, [work.pages_pdf()])


def _images_option(
    work: _Work, model: Model, bars: list[Bar], detail: str | None, prices: tuple, stem: Path
) -> _Option:
    """Each chosen page rendered and shrunk as an image for ``model`` (held to the image bars)."""
    from mmtok.budgets.shrink.core import shrink_models

    if not model.accepts("image"):
        return _Option("images", "pages as images", None, False, {}, why=f"{model.asked} takes no images")
    folder = stem.with_name(stem.name + ".pages")
    results = []
    for page in work.chosen.pages:
        page_bars = {bar.metric: bar for bar in bars}
        render = work.render(page.number)
        name = f"p{page.number:05d}"
        (result,) = shrink_models(render, [model.asked], page_bars, folder, name, prices=prices, jobs=work.jobs)
        if isinstance(result, MmtokError):
            shutil.rmtree(folder, ignore_errors=True)
            return _Option("images", "pages as images", None, False, {}, why=f"page {page.number}: {result}")
        results.append(result)
    files = [r.path for r in results]
    levels = {r.detail for r in results}
    level = levels.pop() if len(levels) == 1 else None
    quote = price(files, model.asked, detail=level, prices=prices) if level or len(levels) == 0 else None
    if quote is None:  # pages shrunk to different detail levels: each image priced at its own
        quote = _sum_quotes([r.after for r in results])
    measures = _worst([r.measures for r in results])
    done = list(dict.fromkeys(r.action for r in results))
    pages = f"{len(files)} page{'s' if len(files) != 1 else ''}"
    action = f"{pages} as images ({'; '.join(done[:2])}{'; ...' if len(done) > 2 else ''})"
    return _Option("images", action, quote, True, measures, files, level, folder=folder)


def _text_option(work: _Work, model: Model, bars: list[Bar], prices: tuple) -> _Option:
    """The text layer alone, where only an ``ocr`` bar is in force and every page's text layer holds its text."""
    ocr = next((bar for bar in bars if bar.metric == "ocr"), None)
    action = "the text layer alone"
    if ocr is None or any(bar.metric != "ocr" for bar in bars):
        return _Option("text", action, None, False, {}, why="text alone: only with an ocr bar and no picture bar")
    missing = [p.number for p in work.chosen.pages if not p.has_text]
    if missing:
        return _Option("text", action, None, False, {}, why=f"text alone: pages {missing[:5]} have no text layer")
    worst = min(work.text_agreement(p.number) for p in work.chosen.pages)
    text = "\n\n".join(work.document.text(p.number) for p in work.chosen.pages)
    path = work.scratch / "text.txt"
    path.write_text(text, encoding="utf-8")
    quote = price(path, model.asked, prices=prices)
    met = ocr.met(worst)
    why = "" if met else f"text alone: its text layer agrees {worst:.3f} with OCR of the page, under {ocr}"
    return _Option("text", f"{action} ({len(text):,} characters)", quote, met, {"ocr": worst}, [path], why=why)


def _write(
    work: _Work, option: _Option, stem: Path, model: Model, detail: str | None, prices: tuple, protect: frozenset[Path]
) -> tuple[Path, Quote]:
    """Write the chosen rendition next to the others for this model, and price what was written."""
    suffix = {"pages": ".pdf", "text": ".txt", "images": ".pages"}[option.kind]
    target = stem.with_name(stem.name + suffix)
    if Path(os.path.realpath(target)) in protect:
        raise MediaError(work.source, f"the output {target} would overwrite an input: choose another --out")
    if option.kind == "images":
        return target, price(sorted(target.iterdir()), model.asked, detail=option.detail, prices=prices)
    if option.kind == "text":
        write_bytes_atomic(target, option.files[0].read_bytes())
        return target, price(target, model.asked, prices=prices)
    copy_atomic(option.files[0], target)
    return target, price(work.chosen if work.chosen.selected else target, model.asked, detail=detail, prices=prices)


def layer_holds(reading: str, layer: str) -> float:
    """How much of what OCR read on a page its text layer holds: each read line (whitespace removed) is matched to
    its best place anywhere in the layer (whitespace removed), and the agreement is ``1 - unmatched characters /
    read characters`` (1.0 when nothing was read). The layer's order, line breaks and extra text (a rotated label
    OCR skips) cost nothing; words the layer lacks (a figure's, a scan's) do."""
    from rapidfuzz import fuzz

    target = "".join(layer.split())
    lines = ["".join(line.split()) for line in reading.splitlines()]
    lines = [line for line in lines if line]
    total = sum(len(line) for line in lines)
    if not total:
        return 1.0
    missed = sum(len(line) * (1.0 - fuzz.partial_ratio(line, target) / 100.0) for line in lines)
    return max(0.0, 1.0 - missed / total)


def _sum_quotes(quotes: Sequence[Quote]) -> Quote:
    """One quote of several (the same model): their lines together."""
    import dataclasses

    first = quotes[0]
    return dataclasses.replace(first, item="pages", lines=tuple(ln for q in quotes for ln in q.input_lines))


def _worst(measures: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for m in measures:
        for key, value in m.items():
            if value is not None:
                out[key] = value if out.get(key) is None else min(out[key], value)
    return out


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir())
    return path.stat().st_size
