"""The search for a rule's parameters: candidate values of each rule family's own parameters (least squares where
a rule is linear in them, a scan where not), the other families tried where the documented one cannot reproduce the
bills, and the ranking that keeps the values reproducing the most bills exactly, the roundest among equals
(:mod:`mmtok.budgets.calibrate` calls it, on all the calls and on each leave-one-out subset)."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from mmtok.budgets.calibrate.fit import Fit, Observation, Overhead, RuleCounter, image_target, least_squares, score


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
    targets = [image_target(o, overhead) for o in obs]
    if any(t is None for t in targets):  # the overhead is fitted alongside, as an intercept
        rows = [[*r, 1.0] for r in rows]
        targets = [o.billed_input - o.predicted_rest for o in obs]
    solution = least_squares(rows, [float(t) for t in targets])  # type: ignore[arg-type]
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
    from mmtok.budgets.pricing import formulas as F

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
    targets = [image_target(o, overhead) for o in ordered]
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
        target = image_target(o, overhead)
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


def first_tried(first: dict[str, Any] | None, candidates: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """The best rule on all calls tried first on a subset: the search then drops most others after a miss or two."""
    return candidates if first is None else itertools.chain((first,), candidates)


def other_candidates(counter: RuleCounter, obs: Sequence[Observation], overhead: Overhead | None) -> Iterable[dict]:
    for base in alternatives():
        yield base
        if base["formula"] in LINEAR:
            yield from linear_candidates(counter, base, obs, overhead)
        elif base["formula"] == "openai-patch":
            yield from patch_candidates(base, obs, "high")
