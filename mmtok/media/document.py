"""``Document``: a PDF's pages (size, rotation, text layer) read by PDFium in a bounded child process.

PDFium (through pypdfium2) is chosen over pypdf: it reads the page count and sizes without loading a page (about
400 times faster than pypdf's count on a 200-page file), extracts the text layer 3 to 4 times faster, and renders
pages, which tokenize and shrink need; pypdf cannot render. PDFium is C++: a call into it cannot be interrupted or
held to a memory budget in this process, so every read runs in a child process (``mmtok.media.document_worker``) kept
for the next file, under an address-space limit (``WORKER_MEMORY_BYTES``) and a deadline per request
(``READ_DEADLINE_S``); a file that runs past either, or crashes PDFium, is killed with its child, reported in one
line, and the next file gets a fresh child. Sizes are checked before anything is read: at most ``MAX_PDF_BYTES``
bytes, ``MAX_PAGES`` pages, ``MAX_TEXT_CHARS`` characters of text. JavaScript and embedded files are counted, never
run or opened (no form environment is created, and this PDFium has no JavaScript engine).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mmtok.errors import MediaError

if TYPE_CHECKING:
    import PIL.Image

MAX_PDF_BYTES = 1 << 30  # files above this are refused before any parsing
MAX_PAGES = 10_000  # a page count above this is a PDF bomb (providers take 100 to 1,000)
MAX_TEXT_CHARS = 16_000_000  # characters of text layer over all pages
MAX_RENDER_PIXELS = 40_000_000  # one rendered page (a Letter page at 600 dpi is 33.7 million)
RENDER_DPI = 150  # pages rendered for image tokenizers (and, in budgets.documents, for self-hosted models)
MAX_RENDER_SIDE_PX = 4096  # a page rendered for a tokenizer is scaled to fit this (a 200-inch page is not 30,000 px)
READ_DEADLINE_S = 60.0  # one request to the child: open + every page, or one render
WORKER_MEMORY_BYTES = 1 << 30  # the child's address space (RLIMIT_AS)
EOF_WINDOW_BYTES = 1024  # "%%EOF" must be within the file's last 1,024 bytes (as Acrobat reads it)
PDF_MAGIC = b"%PDF-"


def is_pdf(head: bytes) -> bool:
    """A PDF header in the first 1,024 bytes (where readers look for it)."""
    return PDF_MAGIC in head[:1024]


# ------------------------------------------------------------------------------------------------------------ types
@dataclass(frozen=True)
class Page:
    """One page as displayed: its size after ``/Rotate`` (points, 1/72 inch, of the crop box) and its text layer."""

    number: int  # 1-based
    width_pt: float
    height_pt: float
    rotation: int  # /Rotate: 0, 90, 180 or 270 (clockwise)
    text_chars: int  # characters in the text layer (0: none, as in a scan)

    @property
    def has_text(self) -> bool:
        return self.text_chars > 0

    def pixels(self, dpi: float = 72.0) -> tuple[int, int]:
        """The page's size in pixels rendered at ``dpi`` (72 dpi: one pixel per point)."""
        scale = dpi / 72.0
        return max(1, round(self.width_pt * scale)), max(1, round(self.height_pt * scale))

    def render_size(self, dpi: float = RENDER_DPI, max_side_px: int = MAX_RENDER_SIDE_PX) -> tuple[int, int]:
        """The page's size at ``dpi``, scaled down to fit ``max_side_px`` on its long side."""
        width, height = self.pixels(dpi)
        scale = min(1.0, max_side_px / max(width, height))
        return max(1, round(width * scale)), max(1, round(height * scale))

    def to_dict(self) -> dict[str, Any]:
        return {
            "page": self.number,
            "width_pt": round(self.width_pt, 2),
            "height_pt": round(self.height_pt, 2),
            "rotation": self.rotation,
            "text_chars": self.text_chars,
        }


@dataclass(frozen=True)
class Document:
    """A PDF: its pages, text layer, and what it holds that is ignored (JavaScript, embedded files). ``pages`` may be
    a selection of the file's pages (``select``); ``page_count`` is then the number selected, ``file_pages`` the
    file's own."""

    kind: ClassVar[str] = "document"
    path: Path | None
    size_bytes: int
    pages: tuple[Page, ...]
    file_pages: int
    version: str = ""  # "1.7"
    encrypted: bool = False  # encrypted, but readable without a password
    javascript_actions: int = 0  # document-level JavaScript: counted, never run
    attachments: int = 0  # embedded files: counted, never opened
    texts: tuple[str, ...] = field(default=(), repr=False, compare=False)  # each page's text layer, in page order
    format: str = "pdf"

    @property
    def page_count(self) -> int:
        return len(self.pages)

    @property
    def selected(self) -> bool:
        return len(self.pages) != self.file_pages

    def text(self, number: int) -> str:
        """Page ``number``'s text layer (as PDFium extracts it: lines joined by newlines)."""
        text = self._texts_by_number.get(number)
        if text is None:
            raise MediaError(self.path, f"page {number} is not in this document ({self.describe_pages()})")
        return text

    @functools.cached_property
    def _texts_by_number(self) -> dict[int, str]:
        return {page.number: text for page, text in zip(self.pages, self.texts, strict=True)}

    def select(self, numbers: Iterable[int]) -> Document:
        """These pages only (1-based, in the order given), as a request that sends a page range would hold them."""
        by_number = {p.number: (p, t) for p, t in zip(self.pages, self.texts, strict=True)}
        chosen = []
        for n in numbers:
            if n not in by_number:
                raise MediaError(self.path, f"page {n} is out of range: {self.describe_pages()}")
            chosen.append(by_number[n])
        if not chosen:
            raise MediaError(self.path, "no pages selected")
        return replace(self, pages=tuple(p for p, _ in chosen), texts=tuple(t for _, t in chosen))

    def describe_pages(self) -> str:
        if not self.selected:
            return f"the document has {self.file_pages:,} pages"
        return f"{self.page_count:,} of its {self.file_pages:,} pages are selected"

    def render(self, number: int, size: tuple[int, int]) -> PIL.Image.Image:
        """Page ``number`` rendered (rotation applied, white background, no forms or annotations' scripts) at
        ``size`` (width, height) pixels, as an RGB Pillow image."""
        import PIL.Image

        from mmtok.media import document_worker

        if self.path is None:
            raise MediaError(None, "an in-memory document cannot be rendered")
        width, height = int(size[0]), int(size[1])
        if width <= 0 or height <= 0 or width * height > MAX_RENDER_PIXELS:
            raise MediaError(
                self.path, f"page {number} at {width}x{height} px: at most {MAX_RENDER_PIXELS:,} pixels are rendered"
            )
        self.text(number)  # the page must be one of this document's
        pixels = document_worker.render(self.path, number - 1, width, height)
        return PIL.Image.frombytes("RGB", (width, height), pixels)

    def extract(self) -> bytes:
        """A new PDF of this document's pages (a selection's, in its order), written by PDFium in the child."""
        from mmtok.media import document_worker

        if self.path is None:
            raise MediaError(None, "an in-memory document has no pages to copy")
        return document_worker.extract(self.path, [p.number - 1 for p in self.pages])

    @property
    def notes(self) -> tuple[str, ...]:
        """What the file holds that mmtok ignores, and what a provider may refuse, in words."""
        notes = []
        if self.encrypted:
            notes.append("encrypted (it opens without a password; Anthropic takes no encrypted PDFs)")
        if self.javascript_actions:
            notes.append(f"holds {self.javascript_actions} JavaScript action(s): ignored, never run")
        if self.attachments:
            notes.append(f"holds {self.attachments} embedded file(s): ignored, never opened")
        return tuple(notes)

    def info(self) -> dict[str, Any]:
        sizes: dict[str, int] = {}
        for page in self.pages:
            key = f"{page.width_pt:g}x{page.height_pt:g}"
            sizes[key] = sizes.get(key, 0) + 1
        first = self.pages[0]
        return {
            "path": str(self.path) if self.path is not None else "<memory>",
            "kind": self.kind,
            "format": f"pdf {self.version}".rstrip(),
            "pages": self.page_count,
            "width": first.pixels()[0],
            "height": first.pixels()[1],
            "page_sizes_pt": sizes,
            "rotated_pages": sum(1 for p in self.pages if p.rotation),
            "text_pages": sum(1 for p in self.pages if p.has_text),
            "text_chars": sum(p.text_chars for p in self.pages),
            "notes": list(self.notes),
            "bytes": self.size_bytes,
        }


def page_sequences(document: Document, tokenizer: Any, image_size: int | None = None) -> dict[str, Any]:
    """Each page rendered (150 dpi, at most 4,096 px a side) and encoded by an image ``tokenizer``: one
    ``TokenSequence`` a page, keyed ``page-1``, ``page-2``... in page order."""
    return {
        f"page-{page.number}": tokenizer.encode(document.render(page.number, page.render_size()), image_size=image_size)
        for page in document.pages
    }


# ------------------------------------------------------------------------------------------------------------- load
def load_document(path: Path, head: bytes, size_bytes: int) -> Document:
    """Read the PDF at ``path`` (``head``: its first bytes, already read): sizes checked first, its end checked for
    ``%%EOF``, then every page read by PDFium in the bounded child."""
    from mmtok.media import document_worker

    if not is_pdf(head):
        raise MediaError(path, "not a PDF: no %PDF- header in its first 1,024 bytes")
    if size_bytes > MAX_PDF_BYTES:
        raise MediaError(path, f"{size_bytes:,} bytes: PDFs above {MAX_PDF_BYTES:,} bytes are not read")
    _check_end(path, size_bytes)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise MediaError(path, "is not a regular file; only regular files are read")
    found = document_worker.scan(path, (st.st_dev, st.st_ino), MAX_PAGES, MAX_TEXT_CHARS)
    pages = tuple(  # PDFium gives float32 points: kept to 1/100 point
        Page(n, round(w, 2), round(h, 2), int(rot), len(text)) for n, (w, h, rot, text) in enumerate(found["pages"], 1)
    )
    if not pages:
        raise MediaError(path, "PDF has no pages")
    return Document(
        path,
        size_bytes,
        pages,
        len(pages),
        found["version"],
        found["encrypted"],
        found["javascript"],
        found["attachments"],
        tuple(text for *_, text in found["pages"]),
    )


def _check_end(path: Path, size_bytes: int) -> None:
    """A PDF ends with ``%%EOF`` (a cross-reference table must come before it): one missing from the last 1,024 bytes
    is a file cut short, whatever PDFium's repair would make of the rest."""
    with open(path, "rb") as f:
        f.seek(max(0, size_bytes - EOF_WINDOW_BYTES))
        tail = f.read(EOF_WINDOW_BYTES)
    if b"%%EOF" not in tail:
        raise MediaError(path, "truncated: no %%EOF in its last 1,024 bytes (the PDF is cut short)")


# ----------------------------------------------------------------------------------------------------- page ranges
_RANGE = re.compile(r"^\s*(\d*)\s*(-?)\s*(\d*)\s*$")


def parse_pages(spec: str, count: int) -> tuple[int, ...]:
    """Page numbers (1-based) from ``"1-3,7"``, ``"5-"`` (to the end) or ``"-3"`` (from the start), in the order
    written, each once; a page past ``count`` or a malformed part raises ``ValueError`` naming it."""
    numbers: dict[int, None] = {}
    for part in spec.split(","):
        match = _RANGE.match(part)
        if not match or not (match[1] or match[3]) or (not match[2] and match[3]):
            raise ValueError(f"pages {spec!r}: {part.strip()!r} is not a page or a range like 1-3")
        first = int(match[1]) if match[1] else 1
        last = (int(match[3]) if match[3] else count) if match[2] else first
        if first < 1 or last < first:
            raise ValueError(f"pages {spec!r}: {part.strip()!r} is not a range of pages from 1")
        if last > count:
            raise ValueError(f"pages {spec!r}: page {last} is past the last page ({count})")
        numbers.update(dict.fromkeys(range(first, last + 1)))
    return tuple(numbers)


def page_ranges(numbers: Sequence[int]) -> str:
    """``(1, 2, 3, 7)`` as ``"1-3,7"``: runs of consecutive pages joined, in the order given."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
