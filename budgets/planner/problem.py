"""The NSGA-II search: pymoo's mixed-variable problem over the spec's knobs, each setting measured once, the
hypervolume tracked per generation; and the exhaustive grid of a discrete spec."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mmtok.budgets.planner.checks import validate
from mmtok.budgets.planner.evaluation import CalibrationEvaluator
from mmtok.budgets.planner.spec import FAILED_OBJECTIVE, Spec, check_search_size, load_spec
from mmtok.budgets.planner.summary import Plan, generation_record, objective_vector, reference_point, summarise
from mmtok.budgets.planner.variables import domains, resolve_setting, setting_key
from mmtok.errors import EvalError, MmtokError


def plan(
    spec: Spec | str | os.PathLike[str],
    *,
    population: int | None = None,
    generations: int | None = None,
    evaluator: CalibrationEvaluator | None = None,
    on_generation: Callable[[dict[str, Any]], None] | None = None,
    on_evaluation: Callable[[dict[str, Any]], None] | None = None,
    prices: Iterable[str | os.PathLike[str]] | None = None,
    on_load: Callable[[str], None] | None = None,
) -> Plan:
    """Search the spec's knobs with NSGA-II; returns the Pareto front, the knee and the cheapest point at the bars.

    ``prices``: your own price sheets (rows override the shipped ones); by default the spec's (``load_spec``).
    ``on_evaluation`` is called after every evaluation NSGA-II asks for (``evaluation`` of at most ``of``, the
    ``generation``, distinct ``settings`` so far), ``on_generation`` after each generation with its history record,
    ``on_load`` with what is loading when a model is first needed ("the ASR whisper": a cold start takes minutes).
    """
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.mixed import MixedVariableDuplicateElimination, MixedVariableMating, MixedVariableSampling
    from pymoo.optimize import minimize

    if not isinstance(spec, Spec):
        spec = load_spec(spec, prices or ())
    elif prices is not None:
        spec = replace(spec, prices=tuple(Path(p) for p in prices))
        validate(spec)  # its models, priced with these sheets
    population_used, generations_used = population or spec.population, generations or spec.generations
    check_search_size(population_used, generations_used, "--population/--generations:")
    search = _Search(
        spec, evaluator or CalibrationEvaluator(spec), population_used * generations_used, on_evaluation, on_generation
    )
    if on_load is not None:
        search.evaluator.on_load = on_load
    algorithm = NSGA2(
        pop_size=population_used,
        sampling=MixedVariableSampling(),
        mating=MixedVariableMating(eliminate_duplicates=MixedVariableDuplicateElimination()),
        eliminate_duplicates=MixedVariableDuplicateElimination(),
    )
    minimize(
        _problem(search),
        algorithm,
        ("n_gen", generations_used),
        seed=spec.seed,
        callback=_tracker(search),
        verbose=False,
    )
    result = summarise(spec, list(search.seen.values()), search.history, search.evaluator, list(search.failed.values()))
    result.reference_point = None if search.reference is None else [float(v) for v in search.reference]
    result.population, result.generations = population_used, generations_used
    result.silence_trim = getattr(search.evaluator, "trimmed", None)
    return result


@dataclass
class _Search:
    """One NSGA-II run's state: the settings measured (each once), those whose measurement failed, the history per
    generation, and the one hypervolume reference point, fixed when the first generation is measured."""

    spec: Spec
    evaluator: CalibrationEvaluator
    of: int  # evaluations asked for at most (duplicates are not bred twice)
    on_evaluation: Callable[[dict[str, Any]], None] | None = None
    on_generation: Callable[[dict[str, Any]], None] | None = None
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"setting", "error"}
    history: list[dict[str, Any]] = field(default_factory=list)
    reference: np.ndarray | None = None
    calls: int = 0

    def evaluate(self, x: dict[str, Any]) -> tuple[list[float], list[float]]:
        """pymoo's objectives F and constraint G for one setting (a failed one: worse than anything, infeasible)."""
        spec = self.spec
        setting = resolve_setting(spec, x)
        key = setting_key(setting)
        if key not in self.seen and key not in self.failed:
            try:
                self.seen[key] = {"setting": setting, "objectives": self.evaluator.evaluate(setting)}
            except Exception as e:  # a measurement error is this setting's, recorded; the search goes on
                self.failed[key] = {"setting": setting, "error": _error_line(e)}
        self.calls += 1
        if self.on_evaluation:
            self.on_evaluation(
                {
                    "evaluation": self.calls,
                    "of": self.of,
                    "generation": len(self.history) + 1,
                    "settings": len(self.seen) + len(self.failed),
                    "failed": len(self.failed),
                }
            )
        if key in self.failed:  # never on the front, never bred from
            return [FAILED_OBJECTIVE] * len(spec.objectives), [FAILED_OBJECTIVE]
        values = self.seen[key]["objectives"]
        return objective_vector(spec, values), [values["tokens"] - spec.budget_tokens]

    def record(self, generation: int) -> None:
        """Close a generation: fix the reference point at the first one measured, then append its history line."""
        entries = list(self.seen.values())
        if self.reference is None and entries:
            self.reference = reference_point(self.spec, [e["objectives"] for e in entries])
        record = generation_record(self.spec, entries, self.reference, generation)
        self.history.append(record)
        if self.on_generation:
            self.on_generation(record)


def _problem(search: _Search) -> Any:
    """The pymoo mixed-variable problem whose evaluations are the search's."""
    from pymoo.core.problem import ElementwiseProblem

    class Problem(ElementwiseProblem):
        def __init__(self) -> None:
            super().__init__(vars=domains(search.spec), n_obj=len(search.spec.objectives), n_ieq_constr=1)

        def _evaluate(self, x: dict[str, Any], out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            out["F"], out["G"] = search.evaluate(x)

    return Problem()


def _tracker(search: _Search) -> Any:
    from pymoo.core.callback import Callback

    class Track(Callback):
        def notify(self, algorithm: Any) -> None:
            search.record(algorithm.n_gen)

    return Track()


def _error_line(error: Exception) -> str:
    """One line for a failed measurement: mmtok's own errors as they are, anything else with its type."""
    text = " ".join(str(error).split()) or "(no message)"
    return text if isinstance(error, MmtokError) else f"{type(error).__name__}: {text}"


def grid(spec: Spec) -> list[dict[str, Any]]:
    """Every distinct setting of a spec whose knobs are all discrete (for the exhaustive comparison)."""
    choices = {}
    for knob, var in domains(spec).items():
        if not hasattr(var, "options"):
            raise EvalError(f"knob {knob} is continuous: the grid needs discrete options")
        choices[knob] = list(var.options)
    settings: dict[str, dict[str, Any]] = {}
    for combo in itertools.product(*choices.values()):
        setting = resolve_setting(spec, dict(zip(choices, combo, strict=True)))
        settings.setdefault(setting_key(setting), setting)
    return list(settings.values())
