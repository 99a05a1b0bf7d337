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
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmtok.budgets.calibrate.checks import (
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
        a, b = least_squares([[1.0, float(m)] for _, m in extra], [float(e) for e, _ in extra])
        per_request, per_message = round(a), round(b)
    else:
        per_request, per_message = round(statistics.median(e for e, _ in extra)), 0
    exact = all(e == per_request + per_message * m for e, m in extra)
    return Overhead(per_request, per_message, len(plain), exact)


def least_squares(rows: list[list[float]], targets: list[float]) -> list[float]:
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
    targets = [image_target(o, overhead) for o in obs]
    joint = None
    if any(t is None for t in targets):  # no overhead measured: the most common residual is it
        residuals = [o.billed_input - o.predicted_rest - p for o, p in zip(obs, predicted, strict=True)]
        per_request = Counter(residuals).most_common(1)[0][0] if residuals else 0
        joint = Overhead(per_request, 0, 0, False)
        targets = [o.billed_input - o.predicted_rest - per_request for o in obs]
    errors = tuple(int(t) - int(p) for t, p in zip(targets, predicted, strict=True))  # type: ignore[arg-type]
    return Fit(params, sum(e == 0 for e in errors), len(obs), errors, joint)


def image_target(o: Observation, overhead: Overhead | None) -> int | None:
    """The image tokens a call was billed: itemised, or billed input less the rest and the overhead."""
    if o.image_tokens is not None:
        return o.image_tokens
    if overhead is None:
        return None
    return o.billed_input - o.predicted_rest - overhead.tokens(o.messages)


# ------------------------------------------------------------------------------------------- per model
@dataclass
class ModelCalibration:
    """A model's documented rule against its bills, the best rule fitted to them, and whether it may replace the
    documented one (:mod:`mmtok.budgets.calibrate.checks`)."""

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
    before, after = flat(before_fit.params), flat(after_fit.params)
    return [(k, before.get(k), after[k]) for k in after if before.get(k) != after[k] and k != "label"]


def flat(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}.")
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
        from mmtok.budgets.calibrate.search import first_tried, own_candidates, search

        candidates = own_candidates(self.counter, self.rule, obs, self.overhead)
        return search(self.counter, first_tried(first, candidates), obs, self.overhead, self.rule)

    def other(self, obs: Sequence[Observation], first: dict[str, Any] | None = None) -> Fit | None:
        from mmtok.budgets.calibrate.search import first_tried, other_candidates, search

        candidates = other_candidates(self.counter, obs, self.overhead)
        return search(self.counter, first_tried(first, candidates), obs, self.overhead, self.rule)

    def error(self, fit: Fit | None, o: Observation) -> int:
        """Billed minus predicted image tokens of a call the fit did not see (a rule that refuses the call's images
        predicts none)."""
        if fit is None:
            return 10**9
        target = image_target(o, self.overhead or fit.overhead) or 0
        predicted = self.counter.count(fit.params, o.images)
        return target - (predicted or 0)

    def held_out(self, procedure: Callable[..., Fit | None], obs: Sequence[Observation], first: Fit | None) -> HeldOut:
        seed = None if first is None else first.params
        return leave_one_out(obs, lambda rest: procedure(rest, seed), self.error)


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
