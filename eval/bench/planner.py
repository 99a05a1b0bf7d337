"""Benchmark: NSGA-II against an exhaustive grid over the same discrete space and the same cached evaluator.

Run: ``python -m mmtok.eval.bench.planner [--spec budgets/examples/voice-and-photos.toml]``.

The grid evaluates every setting; NSGA-II (pymoo, mixed variables) runs with a population and generation count
whose evaluations are at most 10% of the grid's. Both fronts' hypervolumes are computed with one reference point
(10% of the range beyond the worst objective values over the whole grid), the same for every search: a run's own
per-generation hypervolume (``Plan.history``, against the point fixed after its first generation) is not used here,
since each run fixes a different point. Measurements are cached on disk by setting, so the
grid pays for each component measurement once and NSGA-II reuses them: "evaluations" counts settings, which is
what a search costs when measurements are not cached.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mmtok.budgets.planner import CalibrationEvaluator, grid, hypervolume, load_spec, pareto_rows, plan, reference_point
from mmtok.eval.bench import machine, print_table, write_json

DEFAULT_SPEC = Path(__file__).resolve().parents[2] / "budgets" / "examples" / "voice-and-photos.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--generations", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    evaluator = CalibrationEvaluator(spec)
    settings = grid(spec)
    started = time.perf_counter()
    everything = [{"setting": s, "objectives": evaluator.evaluate(s)} for s in settings]
    grid_seconds = time.perf_counter() - started
    ref = reference_point(spec, [e["objectives"] for e in everything])
    grid_front = pareto_rows(spec, everything)
    grid_hv = hypervolume(spec, [e["objectives"] for e in grid_front], ref)
    rows, runs = [], []
    for seed in range(args.seeds):
        spec.seed = seed + 1
        fresh = CalibrationEvaluator(spec)  # the same disk cache, its own counters
        result = plan(spec, population=args.population, generations=args.generations, evaluator=fresh)
        hv = hypervolume(spec, [e["objectives"] for e in result.front], ref)
        runs.append({"seed": spec.seed, "evaluations": len(result.evaluated), "hypervolume": hv, "ratio": hv / grid_hv})
        rows.append(
            [
                f"NSGA-II seed {spec.seed}",
                len(result.evaluated),
                f"{len(result.evaluated) / len(settings):.1%}",
                f"{hv:.4g}",
                f"{hv / grid_hv:.1%}",
            ]
        )
    rows.insert(0, ["exhaustive grid", len(settings), "100%", f"{grid_hv:.4g}", "100%"])
    print(
        f"bench_planner: {spec.name}: {len(settings)} settings, objectives {', '.join(spec.objectives)}, "
        f"budget {spec.budget_tokens} tokens; NSGA-II population {args.population} x {args.generations} "
        f"generations. Grid measured in {grid_seconds:.0f} s (component measurements cached on disk). {machine()}"
    )
    print_table(
        "hypervolume of the feasible Pareto front (common reference point)",
        ["search", "evaluations", "of the grid", "hypervolume", "vs grid"],
        rows,
    )
    worst = min(r["ratio"] for r in runs)
    most = max(r["evaluations"] for r in runs) / len(settings)
    print(
        f"\nNSGA-II: worst seed reaches {worst:.1%} of the grid's hypervolume with at most {most:.1%} of its "
        f"evaluations (target >= 95% with <= 10%)"
    )
    write_json(
        args.json, {"grid": {"settings": len(settings), "hypervolume": grid_hv}, "runs": runs, "machine": machine()}
    )


if __name__ == "__main__":
    main()
