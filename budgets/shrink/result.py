"""What shrinking one input for one model gives back, and where it is written.

Statuses: ``shrunk`` (fewer tokens, every bar met), ``lossless`` (the same tokens in fewer bytes, pixel-exact at
the model's view), ``re-encoded`` (``--lossless`` on a lossy source that had to be resized: the same tokens, its view
re-encoded, with its SSIM), ``kept`` (the original, unchanged: no cheaper rendition meets the bars, or none exists),
``converted`` (what ``kept`` would be, in a file format the model's provider takes, because it does not take the
original's), ``sliced`` (``--slice``: no single image meets the bars, not even the original as the model sees it; the
pieces in ``pieces`` do, and cost more than the one image). Apart from ``sliced``, the output never costs more than
the original: it is priced again from the written file, and a rendition that would cost more is never kept.

Each distinct output is written once per input: a rendition several models share (the same bytes) is written for the
first and the others point to it (``same_file_as``); an original kept as it is is copied once, under its own name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmtok.budgets.pricing import Quote
    from mmtok.media import Media

STATUSES = ("shrunk", "lossless", "re-encoded", "kept", "converted", "sliced")


@dataclass
class Plan:
    """What a kind's planner decided for one input and model: ``data`` to write (None: copy the original file),
    its suffix, the detail to send it with, and what was done and measured."""

    status: str  # one of STATUSES
    action: str
    data: bytes | None = None
    suffix: str = ""
    detail: str | None = None
    measures: dict[str, float | None] = field(default_factory=dict)
    tried: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # metric -> why its measure is None
    pieces: list[bytes] = field(default_factory=list)  # sliced: each piece's bytes, in order (written as ``suffix``)


def _media_tokens(quote: Quote, kind: str) -> int:
    """The tokens of what was shrunk: a video's frames and sound; a document's or a request body's every input line
    (a PDF's text layer and pages; a body's text, media and overheads)."""
    if kind in ("document", "request"):
        return quote.input_tokens
    return quote.tokens(kind) + (quote.tokens("audio") if kind == "video" else 0)


@dataclass
class ShrinkResult:
    source: Path
    model: str
    kind: str  # image | audio | video | document | request (an API request body)
    status: str  # one of STATUSES
    action: str  # what was done, for people ("3000x2000 -> 1232x821, detail high")
    path: Path  # the output (sliced: the first piece; every piece is in ``pieces``)
    before: Quote
    after: Quote
    detail: str | None = None  # the detail / media_resolution to send the output with (None: the model's default)
    detail_name: str = "detail"  # what the provider calls that setting: detail | media_resolution
    measures: dict[str, float | None] = field(default_factory=dict)  # the chosen output's measures (None: see reasons)
    reasons: dict[str, str] = field(default_factory=dict)  # metric -> why its measure is None
    bars: dict[str, str] = field(default_factory=dict)  # metric -> "ocr>=0.98"
    tried: list[dict[str, Any]] = field(default_factory=list)  # every measured candidate
    bytes_before: int = 0
    bytes_after: int = 0
    seconds_before: float | None = None  # audio and video: billed length
    seconds_after: float | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pieces: list[Path] = field(default_factory=list)  # sliced: the pieces' paths in order, to send as several parts
    same_file_as: str | None = None  # the model whose result wrote this output (None: this one wrote it)
    parts: list[tuple[str, ShrinkResult]] = field(default_factory=list)  # a request body: each media part's result

    @property
    def media(self) -> Media:
        """The output, as an mmtok media object (header-only, like ``mmtok.load``)."""
        import mmtok

        return mmtok.load(self.path)

    @property
    def tokens_before(self) -> int:
        return _media_tokens(self.before, self.kind)

    @property
    def tokens_after(self) -> int:
        return _media_tokens(self.after, self.kind)

    @property
    def saving(self) -> float:
        """Fraction of the cost saved (0 when the original is kept)."""
        if not self.before.total_cost:
            return 0.0
        return float((self.before.total_cost - self.after.total_cost) / self.before.total_cost)

    @property
    def token_saving(self) -> float:
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": str(self.source),
            "model": self.model,
            "kind": self.kind,
            "status": self.status,
            "action": self.action,
            "output": str(self.path),
            "detail": self.detail,
            "detail_name": self.detail_name,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "token_saving": round(self.token_saving, 6),
            "cost_before": str(self.before.total_cost),
            "cost_after": str(self.after.total_cost),
            "saving": round(self.saving, 6),
            "currency": self.before.currency,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "seconds_before": self.seconds_before,
            "seconds_after": self.seconds_after,
            "measures": self.measures,
            "reasons": self.reasons,
            "bars": self.bars,
            "tried": self.tried,
            "notes": self.notes,
            "warnings": self.warnings,
            "pieces": [str(p) for p in self.pieces],
            "same_file_as": self.same_file_as,
            "working_before": " | ".join(ln.working for ln in self.before.input_lines),
            "working_after": " | ".join(ln.working for ln in self.after.input_lines),
            "label": self.after.label,
            **({"parts": [{"where": where, **r.to_dict()} for where, r in self.parts]} if self.parts else {}),
        }


def model_slug(model: str) -> str:
    """A model name as a file-name part: ``openai/gpt-4o`` -> ``openai_gpt-4o``."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in model.strip()).strip("._") or "model"


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write through a temporary file in the same folder and a rename: a reader never sees half a file."""
    from mmtok.files import write_atomic

    return write_atomic(path, data)


def copy_atomic(source: Path, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(fd)
    try:
        shutil.copyfile(source, partial)
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def cheaper_or_equal(after: Quote, before: Quote, modality: str) -> bool:
    return after.total_cost <= before.total_cost and after.tokens(modality) <= before.tokens(modality)
