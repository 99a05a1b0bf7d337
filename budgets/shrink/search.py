"""Measuring a candidate against the bars, and the search for the cheapest candidate that meets them.

Measures run cheapest first and stop at the first bar missed: SSIM (a fraction of a second), then the ``recog``
network's look (a tenth of a second), then OCR (recognition of every line of text, about a second). Where the
original has text, the rendition's reading starts beside the cheap measures, on a thread of its own, and is dropped
when one of them misses (``ImageJob.read_ahead``). Each measure is a number, or None with a reason beside it: a bar
that does not apply (``ocr`` where the original has no text) says so and does not hold the candidate back; a bar
that could not be measured (SSIM on a view under 11 px, a measure not taken because an earlier bar failed) fails
the candidate.

The search walks a ladder ordered by tokens on the assumption that a larger rendition keeps at least as much as a
smaller one. Where the original has text, reading a rendition is the cost (each of its lines recognised, about as
long as reading the original), so the search predicts where the text is legible before reading anything: the
cheapest rung at which the original's text (half its characters in lines at least this tall) is ``LEGIBLE_LINE_PX``
tall in the view, or the rung just above the smallest scale another model's reading met the bar at, whichever is
cheaper. That rung is read; met, the search steps down while rungs meet the bars (the prediction sits just above
the height under which text is known to fail, so there is seldom a rung to read there); missed, it climbs to the
scale its OCR agreement points to (``OCR_SLOPE`` logits a unit of log scale) until a rung meets the bars, and bisects
back to the last that missed. A prediction never accepts a rung: the chosen one has always been measured against
every bar, and a rung the OCR bar is known to fail (a larger scale already failed it, or the original's lines would
be under ``MIN_READ_LINE_PX`` there) is not read. Without text, the cheap measures alone decide, and the ladder is
bisected. ``reference=True`` keeps the search before issue 39 for the benchmark's
side-by-side: from the rung where the median line is ``START_LINE_PX`` tall, galloping down while rungs pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.job import NO_TEXT

if TYPE_CHECKING:
    from mmtok.budgets.shrink.image import ImageJob

START_LINE_PX = 10.0  # the path before issue 39 read first the cheapest rung whose median line is this tall there
OCR_SLOPE = 18.0  # logits of OCR agreement per unit of log scale near the bar (held-in pages: 17-30)
ORDER = ("ssim", "recog", "ocr")  # cheapest first


@dataclass
class Measured:
    """A candidate's measures (number or None), the reason beside each None, and whether every bar held."""

    values: dict[str, float | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    ok: bool = True

    def shown(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: None if v is None else round(float(v), 4) for k, v in self.values.items()}
        if self.reasons:
            out["reasons"] = dict(self.reasons)
        return out


def measure(
    job: ImageJob,
    rendition: C.Rendition,
    reference: C.View,
    box: tuple[int, int, int, int] | None,
    border: tuple[int, int, int] | None,
    bars: list[Bar],
    fmt: str,
    no_text: bool = False,
) -> Measured:
    """``rendition`` (written as ``fmt``) against ``bars``, cheapest measure first, as the model sees it: laid over
    the original's view (``reference``) for SSIM and recog; read line by line at its own view for OCR. ``no_text``:
    the original is presumed to have no text (the OCR bar does not apply) while its lines are still being looked
    for (``LadderSearch._beside_the_text_search``)."""
    seen: list[Any] = []
    if not no_text and len(bars) > 1 and any(bar.metric == "ocr" for bar in bars):
        job.read_ahead(box, rendition, fmt)

    def one(bar: Bar) -> tuple[float | None, str | None]:
        if bar.metric == "ocr":
            return (None, NO_TEXT) if no_text else job.ocr(box, rendition, fmt, bar)
        if not seen:
            image = job.rendered(box, rendition.size, fmt)
            seen.append(P.to_view(image, rendition.view.size, reference.size, (job.width, job.height), box, border))
        original = job.original_view(reference.size)
        if bar.metric == "ssim":
            return job.ssim(original, seen[0])
        return job.recog(("view", reference.size), original, seen[0])

    try:
        return in_order(bars, one)
    finally:
        job.settle()


def in_order(bars: list[Bar], one: Callable[[Bar], tuple[float | None, str | None]]) -> Measured:
    """Each bar's ``one(bar)`` (a measure, or None and why), cheapest first, the rest not measured after a miss."""
    out = Measured()
    failed = None
    for bar in sorted(bars, key=lambda b: ORDER.index(b.metric)):
        if failed is not None:
            out.values[bar.metric] = None
            out.reasons[bar.metric] = f"not measured: the {failed} bar failed first"
            continue
        value, reason = one(bar)
        out.values[bar.metric] = value
        if reason:
            out.reasons[bar.metric] = reason
        if _missed(out, bar):
            failed = bar.metric
    out.ok = failed is None
    return out


def _logit(p: float) -> float:
    p = min(0.999, max(0.001, p))
    return math.log(p / (1 - p))


def _not_applicable(out: Measured, metric: str) -> bool:
    return out.reasons.get(metric, "").startswith("no text found")


def _missed(out: Measured, bar: Bar) -> bool:
    value = out.values.get(bar.metric)
    if value is None:
        return not _not_applicable(out, bar.metric)
    return not bar.met(value) or out.reasons.get(bar.metric, "").startswith("missed:")


class LadderSearch:
    """The cheapest rung of ``ladder`` (ordered by tokens) that meets every bar; each rung measured at most once.
    ``reference``: the earlier path (plain bisection, whole-image OCR), kept to count identical decisions."""

    def __init__(
        self,
        job: ImageJob,
        ladder: list[C.Rendition],
        view: C.View,
        box: Any,
        border: Any,
        bars: list[Bar],
        fmt: str,
    ):
        self.job, self.ladder, self.view, self.box, self.border, self.bars = job, ladder, view, box, border, bars
        self.fmt = fmt  # the Pillow format the rendition is written as
        self.ocr_bar = next((bar for bar in bars if bar.metric == "ocr"), None)
        self.tried: list[dict[str, Any]] = []
        self.results: dict[int, Measured] = {}
        self.presumed_no_text = False  # while the original's lines are looked for beside the search

    def _record(self, i: int, measured: Measured) -> None:
        self.results[i] = measured
        self.tried.append({**self.describe(i), **measured.shown(), "meets": measured.ok})

    def describe(self, i: int) -> dict[str, Any]:
        rung = self.ladder[i]
        size, view = f"{rung.width}x{rung.height}", f"{rung.view.width}x{rung.view.height}"
        return {"size": size, "detail": rung.detail, "tokens": rung.tokens, "view": view}

    def measure(self, i: int) -> Measured:
        rung = self.ladder[i]
        return measure(self.job, rung, self.view, self.box, self.border, self.bars, self.fmt, self.presumed_no_text)

    def known_failure(self, i: int) -> str | None:
        bar = self.ocr_bar
        if bar is None or self.presumed_no_text:
            return None
        return self.job.known_failure(self.box, self.ladder[i], bar, self.fmt)

    def scale(self, i: int) -> float:
        return self.job.scale(self.box, self.ladder[i])

    def meets(self, i: int) -> bool:
        if i in self.results:
            return self.results[i].ok
        known = self.known_failure(i)
        if known is not None:
            values: dict[str, float | None] = {b.metric: None for b in self.bars}
            reasons = {b.metric: "not measured: the ocr bar is known to fail" for b in self.bars if b.metric != "ocr"}
            self._record(i, Measured(values, {**reasons, "ocr": known}, ok=False))
        else:
            self._record(i, self.measure(i))
        return self.results[i].ok

    def start(self) -> tuple[int | None, bool]:
        """(the rung expected to be the cheapest that meets the bars, whether that comes from another model's
        reading), the path before issue 39's guess: the first above the smallest scale another model's search
        found the text read at, else the cheapest whose median line of text is ``START_LINE_PX`` tall in its view;
        None: no guess (no text)."""
        job, bar = self.job, self.ocr_bar
        if bar is None or not self.ladder or not job.text_found:
            return None, False
        scales = [self.scale(i) for i in range(len(self.ladder))]
        passed = job.smallest_passing_scale(self.box, bar, self.fmt)
        if passed is not None:
            return next((i for i, s in enumerate(scales) if s >= passed - 1e-9), len(scales) - 1), True
        line_px = job.median_line_px
        return next((i for i, s in enumerate(scales) if s * line_px >= START_LINE_PX), len(scales) - 1), False

    def predicted(self) -> int | None:
        """The cheapest rung at which the original's text is predicted legible (``ImageJob.legible``: its height at
        the rung's scale), or above the smallest scale another model's reading met the bar at, whichever
        is cheaper; None: no text to predict from."""
        job, bar = self.job, self.ocr_bar
        if bar is None or not self.ladder or not job.text_found:
            return None
        n = len(self.ladder)
        guess = next((i for i in range(n) if job.legible(self.scale(i))), n - 1)
        passed = job.smallest_passing_scale(self.box, bar, self.fmt)
        if passed is not None:
            guess = min(guess, next((i for i in range(n) if self.scale(i) >= passed - 1e-9), n - 1))
        return guess

    def cheapest_meeting(self) -> int | None:
        """The index of the cheapest rung that meets the bars (None: none does). Where the original has text, the
        rung its text is predicted legible at is measured first: met, the search steps down while rungs meet the
        bars (the rungs just below are mostly known to fail: text under ``MIN_READ_LINE_PX``, not read); missed, it
        climbs where its agreement points (``_climb``), then bisects. Without text (the cheap measures alone decide),
        the ladder is bisected. The answer has always been measured against every bar."""
        if self.job.reference:
            return self._galloped()
        beside = self._beside_the_text_search()
        if beside is not None:
            return beside[0]
        n = len(self.ladder)
        low = next((i for i in range(n) if self.known_failure(i) is None), n)
        guess = self.predicted()
        if guess is None or low == n:
            found = self._bisect(low, n)
        else:
            guess = max(guess, low)
            found = self._gallop_down(guess, low) if self.meets(guess) else self._climb(guess)
        return self._largest_said(found)

    def _largest_said(self, found: int | None) -> int | None:
        """``found``; where no rung met the bars, the largest is measured (or known to fail) so that it is said."""
        n = len(self.ladder)
        if found is None and n and (n - 1) not in self.results:
            self.meets(n - 1)
        return found

    def _beside_the_text_search(self) -> tuple[int | None] | None:
        """For a photo whose lines of text are still to be looked for: the search without text (the ladder bisected
        by the cheap measures), run while the original's text is looked for on another thread, and its answer
        (in a 1-tuple) if the original has none, as the search after the look would have found it, rung by rung.
        None where the original has text (what was measured is dropped: the search with text starts afresh) or
        where this does not apply: the look is done, the bars have no OCR, or the image does not look like a photo
        (``ImageJob.looks_like_photo``: a page or a screenshot has text, and its search without text would be work
        thrown away, taken from the look's cores)."""
        job = self.job
        if self.ocr_bar is None or not job.text_unlooked or not job.looks_like_photo:
            return None
        text = job.text_found_ahead()
        n = len(self.ladder)
        self.presumed_no_text = True
        try:
            found = self._largest_said(self._bisect(0, n))
        finally:
            self.presumed_no_text = False
        if not text.result():
            return (found,)
        self.results.clear()
        self.tried.clear()
        return None

    def _climb(self, failed: int) -> int | None:
        """From a rung that missed the bars, up to the rung aimed at (``_aim``) until one meets them, then bisection
        between the last that missed and it. Each miss at least doubles the step in log scale (3%, 6%, 12% ...), so
        text that stays just under the bar costs a few readings, not one per rung."""
        n, low, least = len(self.ladder), failed + 1, math.log(1.03)
        while low < n:
            target = self._aim(failed, least)
            probe = next((i for i in range(low, n) if self.scale(i) >= target - 1e-9), n - 1)
            if self.meets(probe):
                return self._bisect(low, probe + 1)
            low, failed, least = probe + 1, probe, least * 2
        return None

    def _aim(self, failed: int, least: float) -> float:
        """The scale to read next after rung ``failed`` missed: where its OCR agreement says the bar would be met, on
        a line of ``OCR_SLOPE`` logits per unit of log scale through it, at least ``least`` larger in log scale and
        at most 50% larger; 10% larger where another bar missed or the agreement is not known."""
        scale, measured, bar = self.scale(failed), self.results.get(failed), self.ocr_bar
        value = measured.values.get("ocr") if measured is not None else None
        if bar is None or not isinstance(value, float):  # OCR is measured last: a value means the others were met
            return scale * math.exp(max(least, math.log(1.1)))
        gap = _logit(bar.value) - _logit(value)
        return scale * math.exp(max(least, min(math.log(1.5), gap / OCR_SLOPE)))

    def _galloped(self) -> int | None:
        """The search before issue 39 (the benchmark's reference): from another model's passing scale the bracket
        below it is bisected; from the text's median height the search gallops down (or up) from the 10-px rung,
        then bisects."""
        n = len(self.ladder)
        low = next((i for i in range(n) if self.known_failure(i) is None), n)
        hint, from_others = self.start()
        if hint is None or low == n:
            found = self._bisect(low, n)
        elif from_others:
            hint = max(hint, low)
            found = self._bisect(low, hint + 1)
            found = found if found is not None else self._gallop_up(hint + 1)
        else:
            hint = max(hint, low)
            found = self._gallop_down(hint, low) if self.meets(hint) else self._gallop_up(hint + 1)
        return self._largest_said(found)

    def _bisect(self, low: int, high: int) -> int | None:
        """The cheapest rung in [low, high) that meets the bars (None: none does)."""
        end = high
        while low < high:
            mid = (low + high) // 2
            if self.meets(mid):
                high = mid
            else:
                low = mid + 1
        return high if high < end else None

    def _gallop_down(self, passing: int, low: int) -> int:
        """From a rung that meets the bars, steps of 1, 2, 4 ... down until one fails, then bisection between."""
        step = 1
        while passing - step >= low:
            if not self.meets(passing - step):
                low = passing - step + 1
                break
            passing, step = passing - step, step * 2
        found = self._bisect(low, passing + 1)
        return passing if found is None else found

    def _gallop_up(self, low: int) -> int | None:
        """From ``low`` (everything below fails), steps of 1, 2, 4 ... up until a rung meets the bars, then bisection
        between."""
        n, step = len(self.ladder), 1
        while low < n:
            probe = min(low + step - 1, n - 1)
            if self.meets(probe):
                return self._bisect(low, probe + 1)
            low, step = probe + 1, step * 2
        return None
