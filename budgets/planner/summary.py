"""A plan: its Pareto front, knee and cheapest setting at the bars, and the objective arithmetic they rest on
(pymoo's minimised vectors, bars, hypervolume and its reference point)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.budgets.planner.spec import OBJECTIVES, Spec
from mmtok.budgets.planner.variables import _distinct, _plain, applicable_setting, setting_key

if TYPE_CHECKING:
    from mmtok.budgets.planner.evaluation import CalibrationEvaluator


@dataclass
class Plan:
    spec: Spec
    front: list[dict[str, Any]]  # {"setting": ..., "objectives": ...} on the Pareto front
    evaluated: list[dict[str, Any]]
    history: list[dict[str, float]]  # per generation: hypervolume, best cost at the bars
    knee: dict[str, Any] | None
    cheapest_meeting_bars: dict[str, Any] | None
    shortfall: str | None = None  # why nothing is feasible, when that happens
    evaluations: int = 0
    measurements: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"setting", "error"} of each failed setting
    reference_point: list[float] | None = None  # of every generation's hypervolume, as pymoo minimises
    population: int = 0  # NSGA-II population and generations this run used (the spec's, or the overrides)
    generations: int = 0
    silence_trim: dict[str, Any] | None = None  # the silence cut on the calibration speech, where it was measured

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data: each setting holds only the knobs that apply to it, and a value that was not
        measured is None, never NaN."""
        spec = self.spec

        def entry(e: dict[str, Any] | None) -> dict[str, Any] | None:
            if e is None:
                return None
            return {
                "setting": applicable_setting(spec, e["setting"]),
                "objectives": e["objectives"],
                "meets_bars": fits_budget_and_bars(spec, e["objectives"]),
            }

        return _json_safe(
            {
                "spec": spec.name,
                "objectives": {o: OBJECTIVES[o] for o in spec.objectives},
                "bars": spec.bars,
                "budget_tokens": spec.budget_tokens,
                "population": self.population,
                "generations": self.generations,
                "evaluations": self.evaluations,
                "measurements": self.measurements,
                "front": [entry(e) for e in self.front],
                "knee": entry(self.knee),
                "cheapest_meeting_bars": entry(self.cheapest_meeting_bars),
                "shortfall": self.shortfall,
                "history": self.history,
                "reference_point": self.reference_point,
                "failed": [{**f, "setting": applicable_setting(spec, f["setting"])} for f in self.failed],
                **({"silence_trim": self.silence_trim} if self.silence_trim is not None else {}),
            }
        )


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return _plain(value) if hasattr(value, "item") else value


def objective_vector(spec: Spec, values: dict[str, float]) -> list[float]:
    """Objectives as pymoo minimises them (maximised ones negated)."""
    return [values[o] if o in spec.minimize else -values[o] for o in spec.objectives]


def meets_bars(spec: Spec, values: dict[str, float]) -> bool:
    for name, bar in spec.bars.items():
        value = values.get(name)
        if value is None or (math.isnan(value)) or (value > bar if OBJECTIVES[name] == "min" else value < bar):
            return False
    return True


def fits_budget_and_bars(spec: Spec, values: dict[str, float]) -> bool:
    """A setting's measured values fit the spec's token budget and meet every bar."""
    return values["tokens"] <= spec.budget_tokens and meets_bars(spec, values)


def reference_point(spec: Spec, rows: list[dict[str, float]]) -> np.ndarray:
    """A reference for hypervolume: 10% of the range beyond the worst of every objective in ``rows``.

    ``plan()`` fixes it once, from the first generation's points, so that every generation's hypervolume is
    measured against the same point (points beyond it add nothing); ``bench_planner`` fixes it from the grid."""
    matrix = np.array([objective_vector(spec, r) for r in rows])
    worst, best = matrix.max(0), matrix.min(0)
    return worst + 0.1 * np.maximum(worst - best, 1e-9)


def hypervolume(spec: Spec, rows: list[dict[str, float]], ref: np.ndarray | None) -> float:
    from pymoo.indicators.hv import HV

    if not rows or ref is None:
        return 0.0
    return float(HV(ref_point=ref)(np.array([objective_vector(spec, r) for r in rows])))


def generation_record(
    spec: Spec, entries: list[dict[str, Any]], reference: np.ndarray | None, generation: int
) -> dict[str, Any]:
    """A plan's history line for one generation: how many settings ``entries`` holds, the hypervolume of their
    Pareto front against the run's one ``reference`` point, and the lowest cost of those within the budget that
    meet every bar (None while there is none)."""
    front = pareto_rows(spec, entries)
    at_bars = [e for e in entries if fits_budget_and_bars(spec, e["objectives"])]
    return {
        "generation": generation,
        "evaluations": len(entries),
        "hypervolume": hypervolume(spec, [e["objectives"] for e in front], reference),
        "best_cost_at_bars": min((e["objectives"]["cost"] for e in at_bars), default=None),
    }


def pareto_rows(spec: Spec, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    feasible = [e for e in entries if e["objectives"]["tokens"] <= spec.budget_tokens]
    if not feasible:
        return []
    matrix = np.array([objective_vector(spec, e["objectives"]) for e in feasible])
    front = NonDominatedSorting().do(matrix, only_non_dominated_front=True)
    return [feasible[i] for i in front]


def summarise(
    spec: Spec,
    entries: list[dict[str, Any]],
    history: list[dict[str, float]],
    evaluator: CalibrationEvaluator,
    failed: list[dict[str, Any]] | None = None,
) -> Plan:
    def by_cost(e: dict[str, Any]) -> tuple[float, ...]:  # equal costs (a flat per-image rate): the better one first
        # and at equal values, the audio as it is before a cut that changed nothing (no silence long enough)
        return (
            e["objectives"]["cost"],
            *objective_vector(spec, e["objectives"]),
            bool(e["setting"].get("trim_silence")),
        )

    front = sorted(_distinct(spec, pareto_rows(spec, entries)), key=by_cost)
    feasible = [e for e in entries if e["objectives"]["tokens"] <= spec.budget_tokens]
    shortfall = None
    if not entries:
        shortfall = f"no setting could be measured ({len(failed or [])} failed)"
    elif not feasible:
        cheapest = min(entries, key=lambda e: e["objectives"]["tokens"])
        need = int(cheapest["objectives"]["tokens"])
        shortfall = (
            f"no setting fits the budget of {spec.budget_tokens:,} tokens; the smallest needs {need:,} "
            f"({need - spec.budget_tokens:,} over): {setting_key(cheapest['setting'])}"
        )
    at_bars = [e for e in feasible if meets_bars(spec, e["objectives"])]
    cheapest_at_bars = min(at_bars, key=by_cost) if at_bars else None
    if feasible and spec.bars and not at_bars:
        shortfall = shortfall or "no feasible setting meets every bar: " + "; ".join(
            f"best {name} = {best_value(spec, feasible, name):.4g} vs bar {bar}" for name, bar in spec.bars.items()
        )
    knee = None
    if len(front) >= 3:
        from pymoo.mcdm.high_tradeoff import HighTradeoffPoints

        matrix = np.array([objective_vector(spec, e["objectives"]) for e in front])
        span = np.maximum(matrix.max(0) - matrix.min(0), 1e-12)
        points = HighTradeoffPoints().do((matrix - matrix.min(0)) / span)
        if points is not None and len(points):
            knee = front[int(points[0])]
    elif front:
        knee = front[len(front) // 2]
    return Plan(
        spec,
        front,
        entries,
        history,
        knee,
        cheapest_at_bars,
        shortfall,
        evaluator.evaluations,
        evaluator.measurements,
        failed=failed or [],
    )


def best_value(spec: Spec, entries: list[dict[str, Any]], name: str) -> float:
    values = [e["objectives"][name] for e in entries if not math.isnan(e["objectives"].get(name, float("nan")))]
    return (min if OBJECTIVES[name] == "min" else max)(values)
