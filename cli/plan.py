"""``mmtok plan``: NSGA-II token budgets over measured cost and quality, with a planning report.

Exit codes: 0 when every setting was measured, 1 when the search ran but some measurement failed (each distinct
error is one line on stderr; the report holds the rest), 2 for a bad spec or option (one line naming it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import console, print_error
from mmtok.errors import ConfigError, MmtokError


def plan(
    spec: Path = typer.Argument(..., help="Planning spec (TOML), e.g. budgets/examples/voice-and-photos.toml."),
    out: Path = typer.Option(..., "--out", "-o", help="Report folder (report.md, report.html, front.csv/json)."),
    generations: int | None = typer.Option(None, min=1, help="NSGA-II generations (overrides the spec)."),
    population: int | None = typer.Option(None, min=4, help="NSGA-II population (overrides the spec)."),
    prices: list[Path] = typer.Option(
        [], "--prices", help="Your own price sheet (TOML); its rows override the shipped ones in every cost."
    ),
) -> None:
    """Search token budgets: the Pareto front of cost vs FD/WER/accuracy/judge, its knee, and the cheapest
    setting that meets the quality bars."""
    from mmtok.budgets.planner import load_spec
    from mmtok.budgets.planner import plan as run_plan
    from mmtok.budgets.report import write_report
    from mmtok.budgets.sheets import sheets

    try:
        sheets(tuple(prices))  # a bad sheet is one line naming it, before anything else
        parsed = load_spec(spec, prices)
        _check_out(out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    try:

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
        raise typer.Exit(1) from None
    print_summary(result, files)
    print_failures(result)
    if result.failed:
        raise typer.Exit(1)


def _check_out(out: Path) -> None:
    """--out must be a folder mmtok can write, checked before minutes of search."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create the folder: {e.strerror}") from None


def print_failures(result: Any) -> None:
    """One line on stderr per distinct measurement error, with how many settings it took and one of them."""
    by_error: dict[str, list[dict[str, Any]]] = {}
    for failure in result.failed:
        by_error.setdefault(failure["error"], []).append(failure["setting"])
    for error, settings in by_error.items():
        count = f"{len(settings)} setting{'s' if len(settings) > 1 else ''}"
        print_error(f"{count} could not be measured ({_setting_text(settings[0])}, ...): {error}")


def _setting_text(setting: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.items())


def print_summary(result: Any, files: dict[str, Path]) -> None:
    """The shortfall (if any), the recommended settings and where the report went."""
    from mmtok.budgets.report import recommendations

    if result.shortfall:
        console().print(f"[yellow]note:[/] {result.shortfall}")
    for label, entry in recommendations(result):
        objectives = ", ".join(f"{k} {v:.4g}" for k, v in entry["objectives"].items())
        console().print(f"{label}: {entry['setting']} -> {objectives}")
    console().print(f"report: {files['md']} and {files['html']}; front: {files['csv']}")
