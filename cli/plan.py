"""``mmtok plan``: NSGA-II token budgets over measured cost and quality, with a planning report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import console, print_error
from mmtok.errors import MmtokError


def plan(
    spec: Path = typer.Argument(..., help="Planning spec (TOML), e.g. budgets/examples/voice-and-photos.toml."),
    out: Path = typer.Option(..., "--out", "-o", help="Report folder (report.md, report.html, front.csv/json)."),
    generations: int | None = typer.Option(None, min=1, help="NSGA-II generations (overrides the spec)."),
    population: int | None = typer.Option(None, min=4, help="NSGA-II population (overrides the spec)."),
) -> None:
    """Search token budgets: the Pareto front of cost vs FD/WER/accuracy/judge, its knee, and the cheapest
    setting that meets the quality bars."""
    from mmtok.budgets.planner import load_spec
    from mmtok.budgets.planner import plan as run_plan
    from mmtok.budgets.report import write_report

    try:
        parsed = load_spec(spec)

        def progress(record: dict) -> None:
            best = record["best_cost_at_bars"]
            console().print(
                f"generation {record['generation']}: {record['evaluations']} settings evaluated, "
                f"hypervolume {record['hypervolume']:.4g}, best cost at the bars "
                + ("—" if best is None else f"${best:.6f}")
            )

        result = run_plan(parsed, population=population, generations=generations, on_generation=progress)
        files = write_report(result, out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2 if "spec" in str(e) or ".toml" in str(e) else 1) from None
    print_summary(result, files)


def print_summary(result: Any, files: dict[str, Path]) -> None:
    """The shortfall (if any), the recommended settings and where the report went."""
    from mmtok.budgets.report import recommendations

    if result.shortfall:
        console().print(f"[yellow]note:[/] {result.shortfall}")
    for label, entry in recommendations(result):
        objectives = ", ".join(f"{k} {v:.4g}" for k, v in entry["objectives"].items())
        console().print(f"{label}: {entry['setting']} -> {objectives}")
    console().print(f"report: {files['md']} and {files['html']}; front: {files['csv']}")
