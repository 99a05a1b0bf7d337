"""``mmtok eval run`` and ``mmtok eval report``."""

from __future__ import annotations

from pathlib import Path

import typer

from mmtok.cli.common import Column, console, flushes_json_lines, print_error, print_json_line, print_table, say
from mmtok.errors import ConfigError, MmtokError

eval_app = typer.Typer(
    help="Batch evaluation runs: FD/FID, WER, LLM judge; resumable and sharded.", no_args_is_help=True
)


@eval_app.command("run")
@flushes_json_lines
def eval_run(
    suite: str = typer.Argument(..., help="Suite file (TOML) or a shipped suite's name (see eval/suites/)."),
    out: Path = typer.Option(..., "--out", "-o", help="Run folder (results.jsonl, summary.json)."),
    resume: bool = typer.Option(
        False, help="Continue a run that was interrupted: done items are skipped. A changed suite is refused."
    ),
    rerun_changed: bool = typer.Option(
        False,
        "--rerun-changed",
        help="With a changed suite: re-run only the items whose content or pipeline/metrics settings changed, "
        "drop items no longer in the suite, and store the new suite (implies --resume).",
    ),
    retry_errors: bool = typer.Option(
        False, "--retry-errors", help="Also re-run the items whose last result is an error (implies --resume)."
    ),
    workers: int = typer.Option(1, min=1, help="Local worker processes (or launch with torchrun)."),
    json_out: bool = typer.Option(
        False, "--json", help="Print the run's summary as one JSON object (each item's row is in results.jsonl)."
    ),
) -> None:
    """Evaluate a suite's items, one result line each; bad items are recorded, not fatal. Exit code 1 when an
    item failed or was not run, 2 for a bad suite or a refused resume, 130 when interrupted (Ctrl-C: the items
    done are kept; --resume goes on)."""
    from mmtok.cli.common import progress_counter
    from mmtok.eval.runner import run

    try:
        with progress_counter("eval") as update:
            summary = run(
                suite,
                out,
                resume=resume,
                rerun_changed=rerun_changed,
                retry_errors=retry_errors,
                workers=workers,
                progress=update,
            )
    except ConfigError as e:  # a bad suite or manifest, a refused resume, a run folder in use: nothing ran
        print_error(e)
        raise typer.Exit(2) from None
    except MmtokError as e:  # a worker died, a results file cannot be read
        print_error(e)
        raise typer.Exit(1) from None
    except OSError as e:  # the run folder's disk, permissions, ...
        print_error(f"{out}: {e.strerror or e}" if e.filename is None else f"{e.filename}: {e.strerror or e}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # one line, not a traceback per worker; every finished item is in results.jsonl
        print_error(f"{out}: interrupted; the items done are kept: run again with --resume to go on")
        _end_now(130)
    if not summary:  # a torchrun rank other than 0: rank 0 prints the summary
        return
    if json_out:
        for error in summary["errors"]:
            print_error(f"{error['id']}: {error['error']}")
        print_json_line({**summary, "results": str(out / "results.jsonl"), "summary_file": str(out / "summary.json")})
    else:
        _print_summary(summary, out)
    if summary["failed"] or summary.get("missing"):
        raise typer.Exit(1)


def _end_now(code: int) -> None:
    """End the process at once with ``code``, output flushed. After Ctrl-C the run's state is already safe (rows are
    appended whole, the kernel drops the folder's lock), and PyTorch's threads must not be torn down by the
    interpreter's finalization: after an interrupt that aborted the process (terminate called without an active
    exception, exit 134)."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _print_summary(summary: dict, out: Path) -> None:
    from rich.markup import escape

    title = f"{summary['suite']}: {summary['ok']}/{summary['items']} items ok"
    if summary["failed"] or summary.get("missing"):
        title += f", {summary['failed']} failed, {summary.get('missing', 0)} not run"
    console().print(title, markup=False, highlight=False)
    rows = []
    for key, value in summary["metrics"].items():
        protocol = summary["protocol"].get(key) or summary["protocol"].get(key.split("_")[0], "")
        rows.append([escape(key), f"{value:.4g}" if isinstance(value, float) else str(value), escape(protocol)])
    columns = (Column("metric"), Column("value", numeric=True), Column("protocol", fold=True, min_width=20))
    print_table(columns, rows)
    for error in summary["errors"]:
        print_error(f"{error['id']}: {error['error']}")
    console().print(f"[dim]results: {out / 'results.jsonl'}; summary: {out / 'summary.json'}[/]")


@eval_app.command("report")
@flushes_json_lines
def eval_report(
    run_dir: Path = typer.Argument(..., help="A run folder written by `mmtok eval run`."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: the files written."),
) -> None:
    """Write report.md and report.html (tables and per-item figures) into the run folder."""
    from mmtok.eval.report import write_report

    try:
        md, page = write_report(run_dir)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    except OSError as e:
        print_error(f"{e.filename or run_dir}: {e.strerror or e}")
        raise typer.Exit(1) from None
    if json_out:
        print_json_line({"run": str(run_dir), "markdown": str(md), "html": str(page)})
        return
    say(f"wrote {md} and {page}")
