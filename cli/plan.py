"""``mmtok plan``: NSGA-II token budgets over measured cost and quality, with a planning report.

On a terminal, a progress bar on stderr counts the evaluations NSGA-II asks for, with the generation, the
hypervolume and an ETA; a pipe gets only the final output: a table of the recommended settings, or with
``--json`` one JSON object (the plan: front, knee, cheapest at the bars, shortfall, history, report files).

Exit codes: 0 when every setting was measured, 1 when the search ran but some measurement failed (each distinct
error is one line on stderr; the report holds the rest), 2 for a bad spec or option (one line naming it).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import console, err_console, print_error
from mmtok.errors import ConfigError, MmtokError


def plan(
    spec: Path = typer.Argument(..., help="Planning spec (TOML), e.g. budgets/examples/voice-and-photos.toml."),
    out: Path = typer.Option(..., "--out", "-o", help="Report folder (report.md, report.html, front.csv/json)."),
    generations: int | None = typer.Option(None, min=1, help="NSGA-II generations (overrides the spec)."),
    population: int | None = typer.Option(None, min=4, help="NSGA-II population (overrides the spec)."),
    prices: list[Path] = typer.Option(
        [], "--prices", help="Your own price sheet (TOML); its rows override the shipped ones in every cost."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as one JSON object on stdout."),
) -> None:
    """Search token budgets: the Pareto front of cost vs FD/WER/accuracy/judge, its knee, and the cheapest
    setting that meets the quality bars."""
    from mmtok.budgets.planner import load_spec
    from mmtok.budgets.planner import plan as run_plan
    from mmtok.budgets.planner.report import write_report
    from mmtok.budgets.planner.spec import check_search_size
    from mmtok.budgets.pricing.sheets import sheets

    try:
        sheets(tuple(prices))  # a bad sheet is one line naming it, before anything else
        parsed = load_spec(spec, prices)
        check_search_size(
            population or parsed.population, generations or parsed.generations, "--population/--generations:"
        )
        _check_out(out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    try:
        with search_progress(_progress_shown()) as callbacks:
            result = run_plan(parsed, population=population, generations=generations, **callbacks)
        files = write_report(result, out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    if json_out:
        sys.stdout.write(json.dumps({**result.to_dict(), "report": {k: str(v) for k, v in files.items()}}) + "\n")
    else:
        print_summary(result, files)
    print_failures(result)
    if result.failed:
        raise typer.Exit(1)


def _progress_shown() -> bool:
    return sys.stderr.isatty()


@contextlib.contextmanager
def search_progress(shown: bool) -> Iterator[dict[str, Any]]:
    """``plan()``'s callbacks driving a transient rich progress bar on stderr (none when ``shown`` is false):
    evaluations done of at most population x generations, the generation, the hypervolume, elapsed and ETA. Until
    the first setting is measured the bar says what is loading (a cold start loads models for minutes) and shows no
    ETA; the ETA is then estimated from the settings measured after the first one, not from the loading."""
    if not shown:
        yield {}
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), _eta_column())
    state = {"hypervolume": "", "measured": False}
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task("generation 1: measuring the first setting", total=None)

        def on_load(what: str) -> None:
            if not state["measured"]:
                bar.update(task, description=f"generation 1: loading {what}", refresh=True)

        def on_evaluation(record: dict[str, Any]) -> None:
            settings = f"{record['settings']} setting{'s' if record['settings'] != 1 else ''}"
            description = f"generation {record['generation']}: {settings}{state['hypervolume']}"
            if not state["measured"]:  # the ETA's clock starts now: the loading is behind us
                state["measured"] = True
                bar.reset(task, total=record["of"], completed=record["evaluation"], description=description)
                bar.refresh()  # each change drawn as it happens (a setting takes seconds to measure)
                return
            bar.update(task, completed=record["evaluation"], total=record["of"], description=description, refresh=True)

        def on_generation(record: dict[str, Any]) -> None:
            best = record["best_cost_at_bars"]
            state["hypervolume"] = f", hypervolume {record['hypervolume']:.3g}" + (
                "" if best is None else f", best at the bars {_dollars(best)}"
            )

        yield {"on_evaluation": on_evaluation, "on_generation": on_generation, "on_load": on_load}


def _eta_column() -> Any:
    """rich's time remaining, as "ETA 0:01:23", and nothing while it is not known (no "ETA -:--:--")."""
    from rich.progress import TimeRemainingColumn
    from rich.text import Text

    class EtaColumn(TimeRemainingColumn):
        def render(self, task: Any) -> Text:
            if task.total is None or task.time_remaining is None:
                return Text("")
            return Text("ETA ", style="progress.remaining") + super().render(task)

    return EtaColumn()


def _dollars(value: float) -> str:
    from mmtok.budgets.planner.report import dollars

    return dollars(value)


def _check_out(out: Path) -> None:
    """--out must be a folder mmtok can write, checked before minutes of search: created, and a file written in it
    and removed (a read-only folder, or one on a full disk, is found now, not after the search)."""
    import tempfile

    from mmtok.files import make_folder

    make_folder(out, "report")
    try:
        with tempfile.TemporaryFile(dir=out) as probe:
            probe.write(b"mmtok plan: can the report be written here?\n" * 64)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot write the report there: {e.strerror or e}") from None


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


def print_summary(result: Any, files: dict[str, Path] | None = None) -> None:
    """The shortfall (if any), a table of the recommended settings (only the knobs that matter, rounded values)
    and where the report went."""
    from rich import box
    from rich.table import Table

    from mmtok.budgets.planner.report import (
        KNOB_LABELS,
        fixed_text,
        knob_cell,
        knob_columns,
        objective_text,
        recommendations,
    )

    spec = result.spec
    if result.shortfall:
        console().print(f"[yellow]note:[/] {result.shortfall}")
    columns, fixed = knob_columns(spec)
    objectives = list(dict.fromkeys([*spec.objectives, "tokens"]))
    rows = [
        [
            label,
            *(knob_cell(spec, entry["setting"], k) for k in columns),
            *(objective_text(name, entry["objectives"].get(name)) for name in objectives),
        ]
        for label, entry in recommendations(result)
    ]
    table = Table(
        box=box.SIMPLE_HEAD,
        title="recommended settings",
        caption=fixed_text(spec, fixed) or None,
        pad_edge=False,
        collapse_padding=True,
    )  # at 80 columns labels, model names and headers wrap; numbers keep their whole width, never cut
    headers = ["", *(KNOB_LABELS[k].replace(" ", "\n") for k in columns), *objectives]  # "image\npx": narrow
    for index, header in enumerate(headers):
        text = index <= 1  # the label and the model wrap; the rest are numbers
        widest = max((len(row[index]) for row in rows), default=0)
        table.add_column(
            header, justify="left" if text else "right", overflow="fold", min_width=None if text else widest
        )
    for row in rows:
        table.add_row(*row)
    if table.row_count:
        console().print(table)
    if files:
        console().print(f"report: {files['md']} and {files['html']}; front: {files['csv']}")
