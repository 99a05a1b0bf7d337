"""``mmtok truncate``: keep the tokens the context does not already carry."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import (
    about,
    check_out_file,
    flushes_json_lines,
    print_error,
    print_json_line,
    print_note,
    print_warning,
    say,
)
from mmtok.errors import MmtokError


def truncation_options(
    method: str | None,
    threshold: float | None,
    keep: int | None,
    keep_ratio: float | None,
    context: str | None,
    method_flag: str = "--method",
) -> dict[str, Any] | None:
    """The keyword arguments for ``mmtok.truncate`` from command-line options (None: no truncation); a bad
    combination is a usage error naming the flag (``method_flag`` is the option that chose the method)."""
    from mmtok.truncation import METHODS

    if method is None:
        given = [flag for flag, v in (("--threshold", threshold), ("--keep-ratio", keep_ratio)) if v is not None]
        if given:
            raise typer.BadParameter(f"{given[0]} is for truncation: pass {method_flag} too", param_hint=method_flag)
        return None
    if method not in METHODS:
        raise typer.BadParameter(f"must be one of {', '.join(METHODS)}, got {method!r}", param_hint=method_flag)
    if keep_ratio is not None and not 0 < keep_ratio <= 1:
        raise typer.BadParameter(f"must be in (0, 1], got {keep_ratio}", param_hint="--keep-ratio")
    if threshold is not None and not math.isfinite(threshold):
        raise typer.BadParameter(f"must be a finite number of nats, got {threshold}", param_hint="--threshold")
    if sum(v is not None for v in (threshold, keep, keep_ratio)) > 1:
        raise typer.BadParameter("give only one of --threshold, --keep and --keep-ratio")
    if method == "mi" and context is None:
        raise typer.BadParameter(
            "mi truncation scores tokens against a context: pass --context", param_hint="--context"
        )
    if method != "mi" and threshold is not None:
        raise typer.BadParameter(f"--threshold is for mi; {method} takes --keep or --keep-ratio")
    if method != "mi" and keep is None and keep_ratio is None:
        raise typer.BadParameter(f"{method} keeps a budget: pass --keep or --keep-ratio")
    return {"method": method, "threshold": threshold, "keep": keep, "keep_ratio": keep_ratio}


def apply_truncation(seq: Any, options: dict[str, Any], context: Any, warned: set[str] | None = None) -> Any:
    """``seq`` truncated; its report (without the kept indices) goes into the sequence's meta, and each distinct
    note is said once on stderr."""
    import mmtok

    short, report = mmtok.truncate(seq, context=context, **options)
    short.meta["truncation_report"] = {k: v for k, v in report.to_dict().items() if k != "kept"}
    for note in report.notes:
        if warned is None or note not in warned:
            say_note(report, note)
            if warned is not None:
                warned.add(note)
    return short


def say_note(report: Any, note: str) -> None:
    """A note on stderr; the note that the context lies outside what the critic knows is a warning."""
    (print_warning if note == report.domain_warning else print_note)(note)


def load_context(value: str | None) -> Any:
    """A token file's sequence when ``value`` names one, else the text itself."""
    if value is None:
        return None
    path = Path(value)
    if path.suffix == ".safetensors" and path.is_file():
        import mmtok

        sequences = mmtok.load_sequences(path)
        if len(sequences) != 1:
            raise mmtok.TokenError(f"{path}: a context file must hold one sequence, it holds {len(sequences)}")
        return next(iter(sequences.values()))
    return value


def choose_sequence(path: Path, sequences: dict[str, Any], key: str | None) -> tuple[str, Any]:
    """The sequence ``key`` names, or the only one; otherwise an error that lists the keys."""
    import mmtok

    if key is None and len(sequences) == 1:
        return next(iter(sequences.items()))
    if key is None:
        raise mmtok.TokenError(
            f"{path}: holds {len(sequences)} sequences ({list_keys(sequences)}); choose one with --key"
        )
    if key not in sequences:
        raise mmtok.TokenError(f"{path}: no sequence {key!r} (has {list_keys(sequences)})")
    return key, sequences[key]


def refuse_input_as_output(out: Path, *inputs: Path) -> None:
    """--out naming one of the command's inputs is a usage error (exit 2): mmtok never overwrites what it reads
    (``truncate IN --out IN`` replaced its own input)."""
    for item in inputs:
        try:
            same = out.resolve() == item.resolve() or (out.exists() and os.path.samefile(out, item))
        except OSError:
            same = False
        if same:
            raise typer.BadParameter(f"{out} is the input {item}: write to another file", param_hint="--out")


def list_keys(sequences: dict[str, Any], limit: int = 8) -> str:
    keys = list(sequences)
    shown = ", ".join(keys[:limit])
    return shown + (f", ... and {len(keys) - limit} more" if len(keys) > limit else "")


@flushes_json_lines
def truncate(
    tokens: Path = typer.Argument(..., help="A token file written by `mmtok tokenize`."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the shorter sequence."),
    context: str | None = typer.Option(None, help="Context: text, or a token file of text tokens."),
    method: str = typer.Option("mi", help="mi, random, uniform, norm, divprune or tome."),
    threshold: float | None = typer.Option(
        None, help="mi: keep tokens whose pmi with the context exceeds this (nats; default -0.15, calibrated)."
    ),
    keep: int | None = typer.Option(None, min=1, help="Keep this many tokens."),
    keep_ratio: float | None = typer.Option(None, help="Keep this fraction of the tokens, in (0, 1]."),
    key: str | None = typer.Option(None, help="Which sequence of a multi-sequence file."),
    out_of_domain: str = typer.Option(
        "divprune",
        help="mi, for a context far from what the critic was trained on: divprune (fall back to diversity at "
        "the budget, half the tokens for a threshold), mi (keep the critic's choice) or error.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Keep the tokens that carry information about the context, by pmi (or a baseline selection at a budget).

    mi's critic knows the digit captions it was trained on; for a context far from them it falls back to
    divprune, with a warning (--out-of-domain)."""
    import mmtok
    from mmtok.truncation import OUT_OF_DOMAIN

    options = truncation_options(method, threshold, keep, keep_ratio, context)
    assert options is not None
    if out_of_domain not in OUT_OF_DOMAIN:
        raise typer.BadParameter(
            f"must be one of {', '.join(OUT_OF_DOMAIN)}, got {out_of_domain!r}", param_hint="--out-of-domain"
        )
    if method == "mi":
        options["out_of_domain"] = out_of_domain
    check_out_file(out)
    refuse_input_as_output(out, tokens, *([Path(context)] if context else []))
    try:
        sequences = mmtok.load_sequences(tokens)
        _, seq = choose_sequence(tokens, sequences, key)
        short, report = mmtok.truncate(seq, context=load_context(context), **options)
        short.save(out)
    except MmtokError as e:
        print_error(about(tokens, e))
        raise typer.Exit(1) from None
    except OSError as e:
        print_error(f"{out}: cannot write: {e.strerror or e}")
        raise typer.Exit(1) from None
    except (ValueError, TypeError, RuntimeError, LookupError, AssertionError) as e:  # values the methods cannot use
        print_error(about(tokens, f"cannot truncate: {type(e).__name__}: {e}"))
        raise typer.Exit(1) from None
    for note in report.notes:
        say_note(report, note)
    if json_out:
        print_json_line({"input": str(tokens), "output": str(out), **report.to_dict()})
        return
    info = "" if report.information_kept is None else f", estimated information kept {report.information_kept:.0%}"
    say(f"{tokens}: {report.tokens_in} -> {report.tokens_out} tokens ({report.method}{info}) -> {out}")
