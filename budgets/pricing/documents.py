"""What a PDF costs on a model: each provider's published document rule, its limits, per page.

Every provider bills a PDF page by page, as the page's text layer, the page as an image, or both. The rules, as
read on 2026-12-02 (the search tool's stored copies of each page):

- **Anthropic** (https://platform.claude.com/docs/en/build-with-claude/pdf-support): "The system converts each page
  of the document into an image. The text from each page is extracted and provided alongside each page's image";
  "Image token costs: Because each page is converted into an image, the same image-based cost calculations are
  applied". Limits: 32 MB request, 600 pages (100 when the request's context window is under 1M tokens), "no
  passwords/encryption". The render size is not published: counts measured by others (a scanned page: 1,592 tokens
  on Claude Haiku 4.5 and 1,600 on Claude 5.5, huggingface.co/datasets/JOHNISKING/pdf-token-cost, v2 2026-10-18)
  match a page fitted to the standard 1,568 px / 1,568-token box on every model, not the 4,784-token box of the
  high-resolution models. mmtok counts the text layer by the model's text rule plus the page at 150 dpi fitted to
  that box: an **estimate**.
- **OpenAI** (https://developers.openai.com/api/docs/guides/file-inputs): "the API extracts both text and page images
  and sends both to the model"; ``detail`` low / high / auto on Responses ("For GPT-5.6 and later models, auto uses
  high; for earlier models, it uses low"); each file under 50 MB, 50 MB in all. No render size is published: mmtok
  counts the text layer plus the page at 150 dpi by the model's image rule at that detail: an **estimate**.
- **Gemini 3** (https://ai.google.dev/gemini-api/docs/media-resolution#token-counts and
  https://ai.google.dev/gemini-api/docs/document-processing): a PDF page costs its ``media_resolution`` budget, 560
  by default, 280 / 560 / 1120 at low / medium / high ("+ native text"); "You are not charged for tokens originating
  from the extracted native text in PDFs". The budgets are maxima: an **upper bound**. 50 MB or 1,000 pages.
- **Gemini 2.5** (the media-resolution page's Gemini 2.5 table): a page is 256 tokens at the default, medium and
  high levels, 64 at low, "+ Native Text" (the text layer, billed: no exemption is stated for 2.5; counted at Google's
  4 characters a token, an estimate) or "+ OCR" for a scanned page (Google's own OCR text, which mmtok cannot count:
  a PDF with scanned pages is then a **lower bound**, and says why). **documented** for the pages. 50 MB or 1,000
  pages.
- **Gemini 2.0 and earlier** (https://ai.google.dev/gemini-api/docs/document-processing): "Each document page is
  equivalent to 258 tokens"; pages are scaled to fit 3072 x 3072 (larger) or up to 768 x 768 (smaller) with "no cost
  reduction for pages at lower sizes": **documented**. 50 MB or 1,000 pages.
- **Self-hosted** (mmtok-semantic, Qwen-VL, LLaVA): a model served by you sees what you send; mmtok renders each
  page at 150 dpi (as ``mmtok tokenize`` does) and counts it by the model's image rule: that rule's label.

Models of other providers (xAI, Mistral) publish no PDF rule: pricing one is refused, not guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing.formulas import TokenCount, anthropic_patches, weakest
from mmtok.errors import PriceError
from mmtok.media.document import RENDER_DPI  # mmtok's own page renders, and its assumption where none is published

if TYPE_CHECKING:
    from mmtok.budgets.pricing.models import Model
    from mmtok.media.document import Document, Page

READ = "2026-12-02"
MB = 1_000_000
ImageRule = Callable[[int, int, "str | None"], TokenCount]  # (width, height, detail) -> the model's image count


@dataclass(frozen=True)
class DocumentRule:
    """A provider's PDF rule: where it is published, how far its count can be trusted, and its limits."""

    name: str  # anthropic | openai | gemini-3 | gemini-2 | rendered
    source: str
    label: str
    text_billed: bool  # the text layer is billed as text tokens
    max_pages: int | None = None
    max_bytes: int | None = None  # of the file as sent
    base64_request_bytes: int | None = None  # the request's limit, the file counted base64-encoded
    refuses_encrypted: bool = False


ANTHROPIC = DocumentRule(
    "anthropic",
    "https://platform.claude.com/docs/en/build-with-claude/pdf-support",
    "estimate",
    text_billed=True,
    max_pages=600,  # 100 when the context window is under 1M tokens (anthropic_max_pages)
    base64_request_bytes=32 * MB,
    refuses_encrypted=True,
)
OPENAI = DocumentRule(
    "openai", "https://developers.openai.com/api/docs/guides/file-inputs", "estimate", True, max_bytes=50 * MB
)
GEMINI_3 = DocumentRule(
    "gemini-3",
    "https://ai.google.dev/gemini-api/docs/media-resolution#token-counts",
    "upper bound",
    text_billed=False,
    max_pages=1000,
    max_bytes=50 * MB,
)
GEMINI_25 = DocumentRule(
    "gemini-2.5",
    "https://ai.google.dev/gemini-api/docs/media-resolution#token-counts",
    "documented",
    text_billed=True,
    max_pages=1000,
    max_bytes=50 * MB,
)
GEMINI_2 = DocumentRule(
    "gemini-2",
    "https://ai.google.dev/gemini-api/docs/document-processing",
    "documented",
    text_billed=False,
    max_pages=1000,
    max_bytes=50 * MB,
)
RENDERED = DocumentRule("rendered", "mmtok renders each page at 150 dpi (mmtok tokenize)", "exact", False)

GEMINI_3_PAGE_TOKENS = {"low": 280, "medium": 560, "high": 1120}  # media_resolution -> tokens per PDF page
GEMINI_25_PAGE_TOKENS = {"low": 64, "medium": 256, "high": 256}  # the default is 256 too
GEMINI_2_PAGE_TOKENS = 258
OPENAI_AUTO_HIGH = frozenset({"openai-gpt-5.6", "openai-gpt-6-astra", "openai-gpt-6-unlisted"})  # GPT-5.6 and later
ANTHROPIC_PAGE_BOX = (1568, 1568)  # max edge px, max tokens: the standard box, on every Claude model
SELF_HOSTED = ("mmtok-semantic", "qwen", "llava")  # family-name prefixes priced from rendered pages


def rule_for(model: Model) -> DocumentRule:
    """The document rule of ``model``'s provider (by its family); a model no rule covers is refused."""
    family = model.family.name if model.family else ""
    if family.startswith("anthropic-"):
        return ANTHROPIC
    if family.startswith("openai-") and "image" in model.formulas:
        return OPENAI
    if family.startswith("google-gemini-3"):
        return GEMINI_3
    if family.startswith("google-gemini-2.5"):
        return GEMINI_25
    if family.startswith("google-gemini-2"):
        return GEMINI_2
    if family.startswith(SELF_HOSTED):
        return RENDERED
    raise PriceError(
        f"{model.asked} has no published PDF rule (mmtok prices PDFs on Anthropic, OpenAI, Gemini and self-hosted "
        "models): send the pages as images instead (mmtok shrink renders them)"
    )


# ------------------------------------------------------------------------------------------------ per-page rules
def anthropic_page(page: Page) -> TokenCount:
    """A page as Claude's image: rendered at 150 dpi, fitted to the standard 1,568 px / 1,568-token box, one token per
    28-px patch (an estimate: the render size is not published)."""
    width, height = page.pixels(RENDER_DPI)
    count = anthropic_patches(width, height, *ANTHROPIC_PAGE_BOX)
    return count.but(f"page at {RENDER_DPI} dpi: {count.working}", "estimate")


def openai_page(page: Page, image_rule: ImageRule, detail: str) -> TokenCount:
    """A page as OpenAI's image: rendered at 150 dpi (assumed) and counted by the model's image rule at ``detail``."""
    width, height = page.pixels(RENDER_DPI)
    count = image_rule(width, height, detail)
    return count.but(f"page at {RENDER_DPI} dpi (assumed): {count.working}", weakest([count.label, "estimate"]))


def gemini_3_page(level: str) -> TokenCount:
    """A page at Gemini 3's ``media_resolution`` ``level``: its published budget (a maximum)."""
    if level not in GEMINI_3_PAGE_TOKENS:
        raise PriceError(f"media_resolution for PDFs must be low, medium or high on Gemini 3, got {level!r}")
    tokens = GEMINI_3_PAGE_TOKENS[level]
    return TokenCount(tokens, f"media_resolution={level}: {tokens} per page", "upper bound")


def gemini_25_page(level: str) -> TokenCount:
    """A page at Gemini 2.5's ``media_resolution`` ``level`` (its text layer is counted apart)."""
    if level not in GEMINI_25_PAGE_TOKENS:
        raise PriceError(f"media_resolution for PDFs must be low, medium or high on Gemini 2.5, got {level!r}")
    tokens = GEMINI_25_PAGE_TOKENS[level]
    return TokenCount(tokens, f"media_resolution={level}: {tokens} per page", "documented")


def gemini_2_page(page: Page) -> TokenCount:
    """A page on Gemini 2.x: 258 tokens at any size. The size shown is the page at 150 dpi scaled down to fit 3072 x
    3072, or up to fit 768 x 768 when smaller ("no cost reduction for pages at lower sizes")."""
    width, height = page.pixels(RENDER_DPI)
    box = 3072 if max(width, height) > 3072 else (768 if max(width, height) < 768 else 0)
    if box:
        scale = box / max(width, height)
        width, height = max(1, round(width * scale)), max(1, round(height * scale))
    return TokenCount(GEMINI_2_PAGE_TOKENS, f"{width}x{height}: 258 per page", "documented", (width, height))


def rendered_page(page: Page, image_rule: ImageRule) -> TokenCount:
    """A page rendered by mmtok at 150 dpi, counted by the model's own image rule."""
    width, height = page.pixels(RENDER_DPI)
    count = image_rule(width, height, None)
    return count.but(f"page at {RENDER_DPI} dpi: {count.working}")


# ------------------------------------------------------------------------------------------------------ limits
def anthropic_max_pages(model: Model) -> tuple[int, str]:
    """600 pages where the model's context window is 1M tokens or more, else 100 (and 100 when it is not known)."""
    window = model.entry.max_input_tokens if model.entry is not None else None
    if window is not None and window >= 1_000_000:
        return 600, f"{window:,}-token context window"
    known = f"a {window:,}-token context window" if window else "an unknown context window"
    return 100, f"{known} (under 1M tokens)"


def broken_limits(model: Model, rule: DocumentRule, document: Document) -> list[str]:
    """The provider's limits ``document`` breaks, in words (empty: none). A page selection is checked by its page
    count; its size is only known once written (``mmtok shrink`` writes it), so the file's size is not held to it."""
    broken = []
    max_pages, why = (rule.max_pages, "")
    if rule is ANTHROPIC:
        max_pages, why = anthropic_max_pages(model)
        why = f" with {why}"
    if max_pages is not None and document.page_count > max_pages:
        broken.append(f"{document.page_count:,} pages: {model.asked} takes at most {max_pages:,} per request{why}")
    if not document.selected:
        if rule.max_bytes is not None and document.size_bytes >= rule.max_bytes:
            broken.append(f"{document.size_bytes:,} bytes: files must be under {rule.max_bytes // MB} MB")
        encoded = 4 * math.ceil(document.size_bytes / 3)
        if rule.base64_request_bytes is not None and encoded > rule.base64_request_bytes:
            broken.append(
                f"{document.size_bytes:,} bytes are {encoded:,} as base64: over the {rule.base64_request_bytes // MB} "
                "MB request limit (upload it with the Files API)"
            )
    if rule.refuses_encrypted and document.encrypted:
        broken.append("encrypted: Anthropic takes no encrypted PDFs")
    return broken


# ----------------------------------------------------------------------------------------------------- counting
@dataclass(frozen=True)
class PageCount:
    """One page's tokens under a rule: its text layer and its image."""

    number: int
    text: int
    image: TokenCount


def page_counts(model: Model, document: Document, detail: str | None = None) -> tuple[DocumentRule, list[PageCount]]:
    """Each page's text and image tokens on ``model`` (``detail``: OpenAI's PDF detail, or Gemini 3's
    media_resolution), after the provider's limits are checked: a broken one raises ``PriceError`` naming them all."""
    from mmtok.budgets.pricing.counts import model_image_count
    from mmtok.budgets.pricing.text import count_text

    rule = rule_for(model)
    if not model.accepts("image"):
        raise PriceError(f"{model.asked} does not take images, so it takes no PDFs (each page is sent as one)")
    broken = broken_limits(model, rule, document)
    if broken:
        raise PriceError("; ".join(broken))

    def image_rule(width: int, height: int, level: str | None) -> TokenCount:
        return model_image_count(model, width, height, level)

    page_image = _page_image(model, rule, detail, image_rule)
    counts = []
    for page in document.pages:
        text = document.text(page.number)
        text_tokens = count_text(text, model.text_rule).tokens if rule.text_billed and text.strip() else 0
        counts.append(PageCount(page.number, text_tokens, page_image(page)))
    return rule, counts


def _page_image(model: Model, rule: DocumentRule, detail: str | None, image_rule: ImageRule) -> Any:
    if rule is ANTHROPIC:
        return anthropic_page
    if rule is OPENAI:
        family = model.family.name if model.family else ""
        level = detail if detail not in (None, "auto") else ("high" if family in OPENAI_AUTO_HIGH else "low")
        if level not in ("low", "high"):
            raise PriceError(f"detail for PDFs must be low, high or auto on {model.asked}, got {detail!r}")
        return lambda page: openai_page(page, image_rule, level)
    if rule is GEMINI_3:
        count = gemini_3_page("medium" if detail in (None, "auto") else detail)
        return lambda page: count
    if rule is GEMINI_25:
        count = gemini_25_page("medium" if detail in (None, "auto") else detail)
        return lambda page: count
    if rule is GEMINI_2:
        return gemini_2_page
    return lambda page: rendered_page(page, image_rule)


def document_parts(
    model: Model, document: Document, detail: str | None = None
) -> tuple[list[tuple[str, TokenCount, float]], str]:
    """A document's (modality, count, quantity) parts on ``model``, as pricing takes an attachment's: the text layer
    (where billed) and the pages as images (quantity: pages), and a note on what is ignored or not billed."""
    rule, counts = page_counts(model, document, detail)
    pages = f"{document.page_count:,} page{'s' if document.page_count != 1 else ''}"
    source = f"{rule.source}, read {READ}"
    free = not rule.text_billed and rule is not RENDERED and any(p.has_text for p in document.pages)
    image = TokenCount(
        sum(c.image.tokens for c in counts),
        f"{pages} as images: {_grouped(counts)}{'; the text layer is not billed' if free else ''} ({source})",
        weakest([rule.label, *(c.image.label for c in counts)]),
    )
    parts: list[tuple[str, TokenCount, float]] = []
    with_text = [c for c in counts if c.text]
    if rule.text_billed and with_text:
        estimated = model.text_rule.startswith("estimate:")
        text = TokenCount(
            sum(c.text for c in with_text),
            f"text layer of {len(with_text)} of {pages} as PDFium extracts it, {model.text_rule} count",
            weakest(["estimate" if estimated else "exact", rule.label]),
        )
        parts.append(("text", text, 1.0))
    parts.append(("image", image, float(document.page_count)))
    notes = list(document.notes)
    if rule is GEMINI_25 and any(not p.has_text for p in document.pages):
        notes.append(
            "scanned pages: the text Gemini 2.5 reads from them by OCR is billed too, and not counted here: the "
            "count is a lower bound"
        )
        unread = image.but(f"{image.working}; + the OCR text of scanned pages, not counted", "lower bound")
        parts[-1] = ("image", unread, parts[-1][2])
    if rule is GEMINI_2 and detail not in (None, "auto"):
        notes.append(f"media_resolution={detail} is not applied to PDF pages on this model (258 tokens a page)")
    if document.selected:
        notes.append(
            f"only pages {_selection(document)} of {document.file_pages:,} are priced, as a page range sends them"
        )
    return parts, "; ".join(notes)


def _grouped(counts: Sequence[PageCount]) -> str:
    """The page counts in words, pages with the same working said once: ``3 x (612x792 -> ... = 765)``."""
    groups: dict[str, list[int]] = {}
    for c in counts:
        groups.setdefault(c.image.working, []).append(c.number)
    parts = [f"{len(numbers)} x ({working})" for working, numbers in groups.items()]
    shown = "; ".join(parts[:4])
    return shown + (f"; and {len(parts) - 4} more page sizes" if len(parts) > 4 else "")


def _selection(document: Document) -> str:
    from mmtok.media.document import page_ranges

    return page_ranges([p.number for p in document.pages])
