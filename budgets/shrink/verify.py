"""A written image measured again, in full, against its original: what the benchmark checks every answer of the
search with, and what a user can check a copy with.

    >>> from mmtok.budgets.shrink.verify import measure_written                      # doctest: +SKIP
    >>> measure_written(result)  # {'ssim': 0.97, 'recog': 0.99, 'ocr': 1.0, 'missed': [], 'ok': True}  # doctest: +SKIP

Nothing the search kept or inferred is used: the original is decoded again and its text found and read whole,
line by line (no analysis kept from another call), the written file decoded from disk and seen as the model sees
it (its view at the detail it is sent with), laid over the original's view for SSIM and recog (a crop pasted back
onto the border colour; each measured by its own function, not by the search's job), and its own text found and
read at its view, with the same detector and recogniser settings as the search. A sliced page's pieces are read each
at its own size and their readings, together, are held to the original's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mmtok.budgets.shrink.bars import Bar, bars_for, make_bars
from mmtok.budgets.shrink.result import ShrinkResult


def measure_written(
    result: ShrinkResult, bars: Mapping[str, Bar] | None = None, original: Any = None
) -> dict[str, Any]:
    """``result``'s written image (or pieces) measured against its source at ``bars`` (default: the result's own):
    each measure, the bars missed, and ``ok``. An original kept as it is meets every bar. ``original``: an
    ``ImageJob(source, media, kept=False)`` to reuse for several results of one source."""
    import mmtok
    from mmtok.budgets.shrink.job import ImageJob

    if result.kind != "image":
        raise ValueError(f"measure_written measures images; this result is {result.kind}")
    wanted = list((bars if bars is not None else make_bars(list(result.bars.values()) or None)).values())
    wanted = bars_for({b.metric: b for b in wanted}, "image")
    if result.status == "kept":
        return {"ok": True, "missed": [], "kept": True}
    job = original or ImageJob(result.source, mmtok.load(result.source), kept=False)
    measures = _pieces(job, result) if result.pieces else _one(job, result, {b.metric for b in wanted})
    missed = [str(b) for b in wanted if b.metric in measures and (measures[b.metric] is None or not b.met(
        measures[b.metric]))]  # fmt: skip
    return {**{k: None if v is None else round(v, 4) for k, v in measures.items()}, "missed": missed, "ok": not missed}


def _one(job: Any, result: ShrinkResult, metrics: set[str]) -> dict[str, float | None]:
    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.shrink import candidates as C
    from mmtok.budgets.shrink import ocr as O
    from mmtok.budgets.shrink import pictures as P
    from mmtok.budgets.shrink import recognition as R
    from mmtok.budgets.shrink.job import class_changed

    model = resolve(result.model)
    out = P.decode_bytes(result.path.read_bytes())
    original_view = C.view(model, job.width, job.height, None)
    out_view = C.view(model, out.width, out.height, result.detail)
    box, border = job.crop if "crop " in result.action and job.crop else (None, None)
    seen = P.to_view(out, out_view.size, original_view.size, (job.width, job.height), box, border)
    original = job.original_view(original_view.size)
    measures: dict[str, float | None] = {}
    same = np.array_equal(np.asarray(original), np.asarray(seen))
    if "ssim" in metrics:
        measures["ssim"] = 1.0 if same else P.ssim(original, seen) if min(original.size) >= 11 else None
    if "recog" in metrics:
        size = R.eval_size(*original.size)
        before, after = R.look(original, size), R.look(seen, size)
        measures["recog"] = 1.0 if same else R.similarity(before, after)
        if not same and class_changed(before, after):
            measures["recog"] = None  # the bar's other condition: the classifier's top class is the original's
    if "ocr" in metrics and job.text_found:
        measures["ocr"] = O.agreement(job.truth_text, O.read(P.resized(out, out_view.size)))
    return measures


def _pieces(job: Any, result: ShrinkResult) -> dict[str, float | None]:
    from mmtok.budgets.shrink import ocr as O
    from mmtok.budgets.shrink import pictures as P

    if not job.text_found:
        return {}
    readings = [O.read(P.decode_bytes(piece.read_bytes())) for piece in result.pieces]
    return {"ocr": O.agreement(job.truth_text, "\n".join(readings))}
