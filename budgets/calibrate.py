"""Each model's media rule fitted to what the provider billed, from the ledger ``mmtok proxy`` keeps.

Providers' pages and bills disagree (Gemini 2.5 Pro billed at 258 for an image its tile rule counts at 1,032;
gpt-4.1-mini billed at a 1,536-patch budget where its page says 6,144). ``calibrate`` takes every recorded call
whose parts are text and images of known size and whose response reported usage, and for each model:

1. measures the per-call overhead the bills carry beyond mmtok's prediction (per request and per message), from
   calls without images (a provider that itemises image tokens, as Gemini does, needs none);
2. leaves the image tokens of each call: the provider's own figure where it itemises them, else billed input less
   the predicted text and overhead;
3. fits the model's documented rule with the rule's OWN parameters (OpenAI tiles: base and tile tokens; OpenAI
   patches: patch budget and multiplier; Claude: long edge and token cap; Gemini tiles: tokens per tile; a flat
   count; a level's count), by least squares where the rule is linear in them and by search otherwise, and keeps
   the values that reproduce the most bills exactly (ties: the roundest value, then the documented one);
4. where the documented rule cannot reproduce the bills, tries the other rule families (a flat count per image,
   tiles of other sizes, patches) and keeps the first that does;
5. changes the rule only when the fit predicts calls it did not see (:func:`judge`): at least
   :data:`CALLS_PER_PARAMETER` calls per fitted parameter (the overhead counts when it is fitted with the images),
   images on both sides of the breakpoints of the documented and the fitted rule, and a leave-one-out error (each
   call predicted by the rule fitted to the others) below the documented rule's; a new rule family must also beat
   the documented family refitted the same way. Otherwise the documented rule stays and the result names the sizes
   to send that would settle it (:attr:`ModelCalibration.send_sizes`);
6. reports where the bills disagree with the documented rule and by how much.

:func:`write_sheet` writes the fitted rules as a dated price sheet of ``[[family]]`` tables, which ``--prices``
takes: a sheet's families come before the shipped ones, and only the token rule changes (money still comes from
genai-prices). Counts are computed by mmtok's own formulas (:mod:`mmtok.budgets.pricing`) with the fitted
parameters, so what the sheet predicts is what was fitted.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.calibration_checks import (
    HeldOut,
    Verdict,
    held_out_check,
    leave_one_out,
    preconditions,
    sizes_to_send,
)
from mmtok.budgets.ledger import Record
from mmtok.errors import PriceError

ImageSpec = tuple[int, int, str | None]  # width, height, detail / media_resolution as mmtok names it
MAX_REMEMBERED = 500_000  # image counts kept while one model is fitted (leave-one-out asks the same ones again)


@dataclass(frozen=True)
class Observation:
    """One billed call, reduced to what the fit needs."""

    model: str
    images: tuple[ImageSpec, ...]
    billed_input: int
    predicted_rest: int  # mmtok's prediction of everything but the images (text, overhead)
    messages: int
    image_tokens: int | None = None  # the provider's own figure, where it itemises image tokens
    record: str = ""  # the ledger row's id


def observations(records: Iterable[Record]) -> tuple[dict[str, list[Observation]], Counter[str]]:
    """The usable observations per model, and how many calls were left out and why."""
    found: dict[str, list[Observation]] = {}
    skipped: Counter[str] = Counter()
    for record in records:
        reason, observation = _observation(record)
        if observation is None:
            skipped[reason] += 1
        else:
            found.setdefault(observation.model, []).append(observation)
    return found, skipped


def _observation(record: Record) -> tuple[str, Observation | None]:
    if record.outcome != "ok" or record.billed_input is None:
        return "no billed usage (refused, failed, or not reported)", None
    if not record.model or record.predicted_input is None:
        return "not priced by mmtok when it was made", None
    kinds = {p.get("kind") for p in record.parts}
    if kinds - {"text", "image"} or any(p.get("uncountable") for p in record.parts):
        return "holds parts other than text and images of known size", None
    images = []
    for part in (p for p in record.parts if p.get("kind") == "image"):
        if not isinstance(part.get("w"), int) or not isinstance(part.get("h"), int):
            return "an image of unknown size", None
        images.append((part["w"], part["h"], part.get("detail") or record.settings.get("media_resolution")))
    rest = sum(v for k, v in record.predicted.items() if k in ("text", "overhead"))
    itemised = (record.billed or {}).get("input_by_modality") or {}
    model = record.model.strip().lower().split("/")[-1]
    image_tokens = itemised.get("image", 0) if itemised else None
    messages = int(record.settings.get("messages") or 1)
    return "", Observation(model, tuple(images), record.billed_input, rest, messages, image_tokens, record.id)


# ------------------------------------------------------------------------------------------------- overhead
@dataclass(frozen=True)
class Overhead:
    """Tokens the bills carry beyond mmtok's prediction of text and framing: ``per_request + per_message x m``."""

    per_request: int = 0
    per_message: int = 0
    measured_on: int = 0  # calls without images it was measured on
    exact: bool = True  # every one of them fits

    def tokens(self, messages: int) -> int:
        return self.per_request + self.per_message * messages


def fit_overhead(plain: Sequence[Observation]) -> Overhead | None:
    """The overhead from calls without images, or None without any."""
    if not plain:
        return None
    extra = [(o.billed_input - o.predicted_rest, o.messages) for o in plain]
    counts = {m for _, m in extra}
    if len(counts) > 1:
        a, b = _least_squares([[1.0, float(m)] for _, m in extra], [float(e) for e, _ in extra])
        per_request, per_message = round(a), round(b)
    else:
        per_request, per_message = round(statistics.median(e for e, _ in extra)), 0
    exact = all(e == per_request + per_message * m for e, m in extra)
    return Overhead(per_request, per_message, len(plain), exact)


def _least_squares(rows: list[list[float]], targets: list[float]) -> list[float]:
    import numpy as np

    return [float(v) for v in np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)[0]]


# ------------------------------------------------------------------------------------------------------ rules
@dataclass(frozen=True)
class Fit:
    """A rule (image formula table) and how it meets the observations."""

    params: dict[str, Any]
    exact: int  # observations reproduced to the token
    total: int
    errors: tuple[int, ...]  # billed minus predicted image tokens, per observation
    overhead: Overhead | None = None  # fitted jointly, where no call without images measured it

    @property
    def mean_abs_error(self) -> float:
        return sum(abs(e) for e in self.errors) / len(self.errors) if self.errors else 0.0

    @property
    def all_exact(self) -> bool:
        return self.exact == self.total


class RuleCounter:
    """Image token counts of a resolved model under candidate rule parameters, by mmtok's own formulas."""

    def __init__(self, model: Any) -> None:
        from mmtok.budgets.pricing import model_image_count

        self.model = model
        self._count = model_image_count
        self._known: dict[tuple[Any, tuple[ImageSpec, ...]], int | None] = {}  # leave-one-out asks again and again

    def bind(self, params: dict[str, Any]) -> Callable[[Sequence[ImageSpec]], int | None]:
        """A counter of images under ``params``: their tokens, or None where the rule refuses one of them."""
        key, known, count = _frozen(params), self._known, self._count
        model = None

        def tokens(images: Sequence[ImageSpec]) -> int | None:
            nonlocal model
            images = tuple(images)
            if (key, images) in known:
                return known[key, images]
            if model is None:
                model = dataclasses.replace(self.model, formulas={**self.model.formulas, "image": params})
            try:
                found: int | None = sum(count(model, w, h, detail).tokens for w, h, detail in images)
            except (PriceError, KeyError, ZeroDivisionError, ValueError, TypeError):
                found = None
            if len(known) >= MAX_REMEMBERED:
                known.clear()
            known[key, images] = found
            return found

        return tokens

    def count(self, params: dict[str, Any], images: Sequence[ImageSpec]) -> int | None:
        return self.bind(params)(images)


def _frozen(value: Any) -> Any:
    """A rule's parameters as a hashable key."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def score(counter: RuleCounter, params: dict[str, Any], obs: Sequence[Observation], overhead: Overhead | None) -> Fit:
    """How ``params`` meet ``obs``: exact matches and errors, with the overhead fitted jointly if none is given."""
    tokens = counter.bind(params)
    predicted = [tokens(o.images) for o in obs]
    if any(p is None for p in predicted):
        return Fit(params, 0, len(obs), tuple(10**9 for _ in obs))
    targets = [_target(o, overhead) for o in obs]
    joint = None
    if any(t is None for t in targets):  # no overhead measured: the most common residual is it
        residuals = [o.billed_input - o.predicted_rest - p for o, p in zip(obs, predicted, strict=True)]
        per_request = Counter(residuals).most_common(1)[0][0] if residuals else 0
        joint = Overhead(per_request, 0, 0, False)
        targets = [o.billed_input - o.predicted_rest - per_request for o in obs]
    errors = tuple(int(t) - int(p) for t, p in zip(targets, predicted, strict=True))  # type: ignore[arg-type]
    return Fit(params, sum(e == 0 for e in errors), len(obs), errors, joint)


def _target(o: Observation, overhead: Overhead | None) -> int | None:
    """The image tokens a call was billed: itemised, or billed input less the rest and the overhead."""
    if o.image_tokens is not None:
        return o.image_tokens
    if overhead is None:
        return None
    return o.billed_input - o.predicted_rest - overhead.tokens(o.messages)


def _rank(fit: Fit, documented: dict[str, Any]) -> tuple[Any, ...]:
    """Lower is better: more calls exact, less error, rounder changed values, fewer changes."""
    changed = [k for k, v in fit.params.items() if documented.get(k) != v]
    roundness = sum(_roundness(fit.params[k]) for k in changed)
    return (-fit.exact, round(fit.mean_abs_error, 6), -roundness, len(changed))


def _roundness(value: Any) -> int:
    """Trailing zeros of a number (1200 -> 2, 1.62 -> 0): providers choose round numbers."""
    if isinstance(value, float):
        value = round(value * 100)
        if value % 100 == 0:
            return 2
        return 1 if value % 10 == 0 else 0
    if not isinstance(value, int) or value == 0:
        return 0
    zeros = 0
    while value % 10 == 0:
        value //= 10
        zeros += 1
    return zeros


# ----------------------------------------------------------------------------------------- candidates by rule
LINEAR = {  # formula -> the parameters its count is linear in
    "openai-tile": ("base_tokens", "tile_tokens"),
    "gemini-tiles": ("tokens_per_tile",),
    "fixed": ("tokens",),
    "tiles": ("base_tokens", "tile_tokens"),
}
PATCH_BUDGETS = (1536, 2500, 6144, 10000)  # the budgets OpenAI's pages have used
CLAUDE_EDGES = (1092, 1568, 2576)
CLAUDE_CAPS = (1568, 4784)
MAX_SCAN = 12_000  # the largest patch budget or token cap searched value by value


def linear_candidates(
    counter: RuleCounter, base: dict[str, Any], obs: Sequence[Observation], overhead: Overhead | None
) -> Iterable[dict[str, Any]]:
    """Least squares for a rule linear in its parameters (each parameter's feature is the count with it at 1 and
    the others at 0), rounded, with the integers around the solution."""
    names = LINEAR[base["formula"]]
    rows = []
    for o in obs:
        row = []
        for name in names:
            unit = {**base, **dict.fromkeys(names, 0), name: 1}
            row.append(float(counter.count(unit, o.images) or 0))
        rows.append(row)
    targets = [_target(o, overhead) for o in obs]
    if any(t is None for t in targets):  # the overhead is fitted alongside, as an intercept
        rows = [[*r, 1.0] for r in rows]
        targets = [o.billed_input - o.predicted_rest for o in obs]
    solution = _least_squares(rows, [float(t) for t in targets])  # type: ignore[arg-type]
    centre = [max(1, round(v)) for v in solution[: len(names)]]
    for offsets in _offsets(len(names)):
        yield {**base, **{n: max(1, c + d) for n, c, d in zip(names, centre, offsets, strict=True)}}


def _offsets(n: int) -> list[tuple[int, ...]]:
    if n == 1:
        return [(d,) for d in (0, -1, 1, -2, 2)]
    return [(a, b) for a in (0, -1, 1) for b in (0, -1, 1)]


def patch_candidates(base: dict[str, Any], obs: Sequence[Observation], level: str) -> Iterable[dict[str, Any]]:
    """OpenAI patches: each budget (the published ones, then every value up to MAX_SCAN) with each multiplier the
    single-image calls imply (to 0.01)."""
    sizing = base["levels"][level]
    multipliers = sorted({base["multiplier"], *_implied_multipliers(base, obs, level)})
    budgets = [b for b in (sizing.get("patch_budget"), *PATCH_BUDGETS) if b]
    budgets += [b for b in range(256, MAX_SCAN + 1, 8) if b not in budgets]
    for budget in dict.fromkeys(budgets):
        for multiplier in multipliers:
            levels = {**base["levels"], level: {**sizing, "patch_budget": budget}}
            yield {**base, "levels": levels, "multiplier": multiplier}


def _implied_multipliers(base: dict[str, Any], obs: Sequence[Observation], level: str) -> list[float]:
    from mmtok.budgets import formulas as F

    found = set()
    sizing = base["levels"][level]
    for o in obs:
        if len(o.images) == 1 and o.image_tokens:
            w, h, _ = o.images[0]
            patches = F.openai_patch(w, h, 1.0, sizing.get("patch_budget"), sizing["max_dim"]).tokens
            found.add(round(o.image_tokens / patches, 2))
    return sorted(found)[:8]


def claude_candidates(base: dict[str, Any], obs: Sequence[Observation]) -> Iterable[dict[str, Any]]:
    """Claude: each long edge with each token cap up to the most patches an image here has (a higher cap counts
    every one of them the same)."""
    most = max((math.ceil(w / 28) * math.ceil(h / 28) for o in obs for w, h, _ in o.images), default=6000)
    edges = dict.fromkeys((base["max_edge"], *CLAUDE_EDGES))
    caps = dict.fromkeys((base["max_tokens"], *CLAUDE_CAPS, *range(64, min(6000, most) + 1)))
    for edge in edges:
        for cap in caps:
            yield {**base, "max_edge": edge, "max_tokens": cap}


def search(
    counter: RuleCounter,
    candidates: Iterable[dict[str, Any]],
    obs: Sequence[Observation],
    overhead: Overhead | None,
    documented: dict[str, Any],
) -> Fit | None:
    """The best of ``candidates``. Where each call's image tokens are known, a candidate is dropped as soon as it
    misses more calls than the best so far (the largest images are tried first: they tell rules apart)."""
    ordered = sorted(obs, key=lambda o: -sum(w * h for w, h, _ in o.images))
    targets = [_target(o, overhead) for o in ordered]
    known = all(t is not None for t in targets)
    best: Fit | None = None
    best_misses = math.inf
    for params in candidates:
        if known:
            tokens = counter.bind(params)
            misses = 0
            for o, target in zip(ordered, targets, strict=True):
                if tokens(o.images) != target:
                    misses += 1
                    if misses > best_misses:
                        break
            if misses > best_misses:
                continue
        fit = score(counter, params, obs, overhead)
        if best is None or _rank(fit, documented) < _rank(best, documented):
            best, best_misses = fit, fit.total - fit.exact
    return best


def own_candidates(
    counter: RuleCounter, documented: dict[str, Any], obs: Sequence[Observation], overhead: Overhead | None
) -> Iterable[dict[str, Any]]:
    """Candidate values of the documented rule's own parameters."""
    formula = documented["formula"]
    yield documented
    if formula in LINEAR:
        yield from linear_candidates(counter, documented, obs, overhead)
    elif formula == "openai-patch":
        yield from patch_candidates(documented, obs, _patch_level(documented, obs))
    elif formula == "anthropic-patches":
        yield from claude_candidates(documented, obs)
    elif formula in ("fixed-level", "gemini-2.5"):
        yield from level_candidates(documented, obs, overhead)


def _patch_level(params: dict[str, Any], obs: Sequence[Observation]) -> str:
    """The detail level most of the images were sent at, as the patch rule names it."""
    levels = Counter(params["auto"] if d in (None, "auto") else d for o in obs for _, _, d in o.images)
    level = levels.most_common(1)[0][0] if levels else params["auto"]
    return level if level in params["levels"] else params["auto"]


def level_candidates(
    params: dict[str, Any], obs: Sequence[Observation], overhead: Overhead | None
) -> Iterable[dict[str, Any]]:
    """A per-level flat count: each level's count from the calls whose images were all sent at it."""
    default = params.get("default_level", "high")
    per_level: dict[str, list[float]] = {}
    for o in obs:
        target = _target(o, overhead)
        levels = {d or default for _, _, d in o.images}
        if target is not None and len(levels) == 1 and o.images:
            per_level.setdefault(levels.pop(), []).append(target / len(o.images))
    levels = dict(params.get("levels", {}))
    for level, values in per_level.items():
        if level in levels or params["formula"] == "fixed-level":
            levels[level] = max(1, round(statistics.median(values)))
    if levels != params.get("levels"):
        yield {**params, "levels": levels}


def alternatives() -> list[dict[str, Any]]:
    """Rule families to try when the documented one cannot reproduce the bills, simplest first."""
    found: list[dict[str, Any]] = [
        {"formula": "fixed", "tokens": 258},
        {"formula": "gemini-tiles", "tokens_per_tile": 258},
        {"formula": "openai-tile", "base_tokens": 85, "tile_tokens": 170},
    ]
    for tile_px in (256, 336, 384, 448, 512, 768):
        for fit_px in (1024, 1536, 2048):
            found.append(
                {"formula": "tiles", "tile_px": tile_px, "tile_tokens": 256, "base_tokens": 256, "fit_px": fit_px}
            )
    found.append({"formula": "anthropic-patches", "max_edge": 1568, "max_tokens": 1568})
    sizing = {"max_dim": 2048, "patch_budget": 1536}
    found.append({"formula": "openai-patch", "multiplier": 1.0, "auto": "high", "levels": {"high": sizing}})
    return found


# ------------------------------------------------------------------------------------------- per model
@dataclass
class ModelCalibration:
    """A model's documented rule against its bills, the best rule fitted to them, and whether it may replace the
    documented one (:mod:`mmtok.budgets.calibration_checks`)."""

    model: str
    family: str  # the documented rule family
    text_rule: str
    formulas: dict[str, dict[str, Any]]  # the family's rules (all modalities), for the sheet
    calls: int  # calls with images
    plain_calls: int  # calls without images (they measure the overhead)
    overhead: Overhead | None
    documented: Fit | None
    fitted: Fit | None  # the rule the sheet holds: the candidate where it passed the checks, else the documented one
    notes: list[str] = field(default_factory=list)
    worst: tuple[str, int, int] | None = None  # the documented rule's worst call: images, billed, predicted
    candidate: Fit | None = None  # the best rule found on all the calls, before the checks
    verdict: Verdict | None = None  # the checks on the candidate (None where it is the documented rule)
    send_sizes: list[tuple[int, int]] = field(default_factory=list)  # image sizes that would settle a kept rule
    send_text_only: int = 0  # text-only calls that would measure the overhead apart

    @property
    def kept(self) -> bool:
        """The candidate differs from the documented rule but failed the checks: the sheet keeps the documented."""
        return self.verdict is not None and not self.verdict.accepted

    @property
    def new_family(self) -> bool:
        return bool(
            self.fitted and self.documented and self.fitted.params["formula"] != self.documented.params["formula"]
        )

    @property
    def changed(self) -> list[tuple[str, Any, Any]]:
        """(parameter, documented value, fitted value) for each parameter the bills moved."""
        return _changes(self.documented, self.fitted)

    @property
    def proposed(self) -> list[tuple[str, Any, Any]]:
        """The changes the candidate would make, accepted or not."""
        return _changes(self.documented, self.candidate)

    def to_dict(self) -> dict[str, Any]:
        def fit_dict(fit: Fit | None) -> dict[str, Any] | None:
            if fit is None:
                return None
            return {
                "params": fit.params,
                "exact": fit.exact,
                "calls": fit.total,
                "mean_abs_error": round(fit.mean_abs_error, 3),
                "errors": list(fit.errors),
            }

        return {
            "model": self.model,
            "family": self.family,
            "calls_with_images": self.calls,
            "calls_without_images": self.plain_calls,
            "overhead": dataclasses.asdict(self.overhead) if self.overhead else None,
            "documented": fit_dict(self.documented),
            "candidate": fit_dict(self.candidate),
            "checks": None if self.verdict is None else self.verdict.to_dict(),
            "kept_documented": self.kept,
            "fitted": fit_dict(self.fitted),
            "new_family": self.new_family,
            "changed": [{"parameter": k, "documented": a, "fitted": b} for k, a, b in self.changed],
            "send_sizes": [f"{w}x{h}" for w, h in self.send_sizes],
            "send_text_only": self.send_text_only,
            "worst": None
            if self.worst is None
            else dict(zip(("images", "billed", "predicted"), self.worst, strict=True)),
            "notes": self.notes,
        }


def _changes(before_fit: Fit | None, after_fit: Fit | None) -> list[tuple[str, Any, Any]]:
    if before_fit is None or after_fit is None:
        return []
    before, after = _flat(before_fit.params), _flat(after_fit.params)
    return [(k, before.get(k), after[k]) for k in after if before.get(k) != after[k] and k != "label"]


def _flat(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def calibrate_model(name: str, obs: Sequence[Observation], prices: Sequence[Any] = ()) -> ModelCalibration:
    from mmtok.budgets.pricing import resolve

    model = resolve(name, prices)
    documented = model.formulas.get("image")
    with_images = [o for o in obs if o.images]
    plain = [o for o in obs if not o.images]
    overhead = fit_overhead(plain)
    result = ModelCalibration(
        name,
        model.family.name if model.family else "",
        model.text_rule,
        {m: dict(p) for m, p in model.formulas.items()},
        len(with_images),
        len(plain),
        overhead,
        None,
        None,
    )
    if documented is None:
        result.notes.append(f"{name} has no image rule in mmtok: nothing to calibrate")
        return result
    if not with_images:
        result.notes.append("no calls with images of known size")
        return result
    if overhead is None and any(o.image_tokens is None for o in with_images):
        result.notes.append(
            "no calls without images: the overhead is fitted with the images (send a few text-only calls to "
            "measure it apart)"
        )
    fitter = _Fitter(RuleCounter(model), {k: v for k, v in documented.items() if k != "label"}, overhead)
    result.documented = fitter.documented(with_images)
    result.worst = _worst(result.documented, with_images, fitter.counter, fitter.rule)
    own = fitter.own(with_images)
    other = fitter.other(with_images) if own is None or not own.all_exact else None
    result.candidate = other if other is not None and (own is None or other.exact > own.exact) else own
    result.fitted = _judged(result, fitter, with_images, own)
    if result.overhead is None and result.fitted is not None:
        result.overhead = result.fitted.overhead  # fitted with the images (not measured apart)
    return result


@dataclass
class _Fitter:
    """The fitting procedures for one model, each a function of the calls it sees, so that leave-one-out runs the
    same search on every subset."""

    counter: RuleCounter
    rule: dict[str, Any]  # the documented image rule
    overhead: Overhead | None  # measured on calls without images, or None

    def documented(self, obs: Sequence[Observation]) -> Fit:
        return score(self.counter, self.rule, obs, self.overhead)

    def own(self, obs: Sequence[Observation], first: dict[str, Any] | None = None) -> Fit | None:
        candidates = own_candidates(self.counter, self.rule, obs, self.overhead)
        return search(self.counter, _first(first, candidates), obs, self.overhead, self.rule)

    def other(self, obs: Sequence[Observation], first: dict[str, Any] | None = None) -> Fit | None:
        candidates = _with_linear(self.counter, obs, self.overhead)
        return search(self.counter, _first(first, candidates), obs, self.overhead, self.rule)

    def error(self, fit: Fit | None, o: Observation) -> int:
        """Billed minus predicted image tokens of a call the fit did not see (a rule that refuses the call's images
        predicts none)."""
        if fit is None:
            return 10**9
        target = _target(o, self.overhead or fit.overhead) or 0
        predicted = self.counter.count(fit.params, o.images)
        return target - (predicted or 0)

    def held_out(self, procedure: Callable[..., Fit | None], obs: Sequence[Observation], first: Fit | None) -> HeldOut:
        seed = None if first is None else first.params
        return leave_one_out(obs, lambda rest: procedure(rest, seed), self.error)


def _first(first: dict[str, Any] | None, candidates: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """The best rule on all calls tried first on a subset: the search then drops most others after a miss or two."""
    return candidates if first is None else itertools.chain((first,), candidates)


def _judged(result: ModelCalibration, fitter: _Fitter, obs: Sequence[Observation], own: Fit | None) -> Fit:
    """The rule the sheet holds: the candidate if it passes the checks, else the documented rule's own parameters
    refitted if those pass, else the documented rule (with the sizes that would settle it)."""
    documented = result.documented
    assert documented is not None
    candidate = result.candidate
    if candidate is None or not _changes(documented, candidate):
        return documented
    images = [image for o in obs for image in o.images]
    joint = fitter.overhead is None and any(o.image_tokens is None for o in obs)
    baseline = leave_one_out(obs, lambda rest: fitter.documented(rest), fitter.error)
    tried = [(candidate, candidate is not own)]
    if candidate is not own and own is not None and _changes(documented, own):
        tried.append((own, False))
    verdicts = []
    for fit, new_family in tried:
        verdict = preconditions(fit.params, documented.params, images, len(obs), joint)
        if verdict.accepted:
            baselines = [("documented rule", baseline)]
            if new_family:
                family = fitter.held_out(lambda rest, seed: fitter.own(rest, seed), obs, own)
                baselines.append(("documented family refitted", family))
            procedure = fitter.other if new_family else fitter.own
            held_out_check(verdict, fitter.held_out(procedure, obs, fit), baselines)
        verdicts.append(verdict)
        if verdict.accepted:
            result.verdict = verdict
            return fit
    result.verdict = verdicts[0]
    rules = [documented.params, candidate.params]
    result.send_sizes = sizes_to_send(rules, images, len(obs), verdicts[0].calls_needed)
    result.send_text_only = 3 if joint else 0
    return documented


def _with_linear(counter: RuleCounter, obs: Sequence[Observation], overhead: Overhead | None) -> Iterable[dict]:
    for base in alternatives():
        yield base
        if base["formula"] in LINEAR:
            yield from linear_candidates(counter, base, obs, overhead)
        elif base["formula"] == "openai-patch":
            yield from patch_candidates(base, obs, "high")


def _worst(fit: Fit, obs: Sequence[Observation], counter: RuleCounter, params: dict) -> tuple[str, int, int] | None:
    if not fit.errors or not any(fit.errors):
        return None
    index = max(range(len(obs)), key=lambda i: abs(fit.errors[i]))
    predicted = counter.count(params, obs[index].images) or 0
    sizes = ", ".join(f"{w}x{h}" for w, h, _ in obs[index].images)
    return sizes, predicted + fit.errors[index], predicted


@dataclass
class Calibration:
    models: list[ModelCalibration]
    skipped: Counter[str]
    source: str  # the ledger it was fitted from


def calibrate(records: Iterable[Record], prices: Sequence[Any] = (), source: str = "") -> Calibration:
    """Every model in ``records`` calibrated (see the module's docstring)."""
    found, skipped = observations(records)
    models = []
    for name in sorted(found):
        try:
            models.append(calibrate_model(name, found[name], prices))
        except PriceError as e:
            skipped[f"{name}: {e}"] += len(found[name])
    return Calibration(models, skipped, source)


# ------------------------------------------------------------------------------------------------- the sheet
def write_sheet(calibration: Calibration, path: str | Path, today: dt.date | None = None) -> Path:
    """The fitted rules as a price sheet of ``[[family]]`` tables (``--prices`` takes it). Models whose rule
    could not be fitted are left out; the rest of each model's rules (text, audio, video) are copied from its
    documented family, so only the image rule changes."""
    import tomli_w

    today = today or dt.date.today()
    families = []
    for m in calibration.models:
        if m.fitted is None or (not m.changed and not m.new_family):
            continue
        image = {**m.fitted.params, "label": "exact" if m.fitted.all_exact else "estimate"}
        family = {"name": f"calibrated-{m.model}", "match": [m.model], "text": m.text_rule}
        family |= {k: v for k, v in m.formulas.items() if k != "image"}
        if m.overhead is not None and (m.overhead.per_request or m.overhead.per_message):
            family["overhead"] = {"per_request": m.overhead.per_request, "per_message": m.overhead.per_message}
        family |= {
            "image": image,
            "source": f"mmtok calibrate: {m.calls} billed calls in {calibration.source}",
            "read": today,
            "notes": describe_fit(m),
        }
        families.append(family)
    sheet = {
        "provider": "calibration",
        "currency": "USD",
        "description": f"Media rules fitted by mmtok calibrate on {today} to the bills in {calibration.source}",
        "family": families,
    }
    out = Path(path)
    header = (
        f"# Written by `mmtok calibrate` on {today} from {calibration.source}.\n"
        "# Each [[family]] replaces the image rule of the models it matches; money still comes from genai-prices.\n"
        "# Use it with --prices (mmtok price, shrink, proxy).\n"
    )
    out.write_text(header + tomli_w.dumps(sheet), encoding="utf-8")
    return out


def describe_fit(m: ModelCalibration) -> str:
    """A few sentences for people: what the bills showed against the documented rule, what was fitted, and whether
    the sheet holds it (if not: why, and which sizes to send to settle it)."""
    if m.candidate is None or m.documented is None:
        return "; ".join(m.notes) or "not fitted"
    doc, candidate = m.documented, m.candidate
    parts = [
        f"documented {doc.params['formula']}: {doc.exact}/{doc.total} calls exact, mean error "
        f"{doc.mean_abs_error:.1f} tokens"
    ]
    if not m.proposed:
        parts.append("no other rule reproduces more of the bills")
    else:
        if _is_new(doc, candidate):
            values = ", ".join(f"{k} {v}" for k, v in _flat(candidate.params).items() if k != "formula")
            rule = f"a new rule, {candidate.params['formula']} ({values})"
        else:
            rule = _change_text(m.proposed)
        parts.append(f"best fit: {rule}, {candidate.exact}/{candidate.total} exact on the calls it saw")
    verdict = m.verdict
    if verdict is not None and verdict.held_out is not None and verdict.accepted:
        held = verdict.held_out
        parts.append(
            f"on calls left out of the fit: {held.exact}/{len(held.errors)} exact, mean error "
            f"{held.mean_abs_error:.1f} tokens"
        )
    if m.fitted is not candidate and m.changed:
        parts.append(f"the sheet holds the documented family refitted: {_change_text(m.changed)}")
    elif m.kept:
        parts.append("kept the documented rule: " + "; ".join(verdict.reasons))  # type: ignore[union-attr]
        parts.append(settle_text(m))
    elif m.changed:
        parts.append("the sheet holds it")
    if m.overhead is not None and (m.overhead.per_request or m.overhead.per_message) and m.changed:
        parts.append(
            f"bills carry {m.overhead.per_request} tokens per request and {m.overhead.per_message} per message "
            "beyond mmtok's prediction (the sheet's overhead)"
        )
    return "; ".join(parts)


def _is_new(documented: Fit, fit: Fit) -> bool:
    return fit.params["formula"] != documented.params["formula"]


def _change_text(changes: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, a, b in changes if k != "formula")


def settle_text(m: ModelCalibration) -> str:
    """What to send to settle a kept rule, in words."""
    sizes = ", ".join(f"{w}x{h}" for w, h in m.send_sizes)
    needed = m.verdict.calls_needed if m.verdict else 0
    more = f"send calls with one image each of {sizes}" if sizes else "send more calls with images"
    plain = f" and {m.send_text_only} text-only calls (they measure the overhead apart)" if m.send_text_only else ""
    measure = f" (--measure {m.model} --sizes with these sizes counts them for free)" if sizes else ""
    return f"to settle it, {more}{plain}, {needed} calls with images in all{measure}"
