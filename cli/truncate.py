"""``mmtok truncate``: keep the tokens the context does not already carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import console, flushes_json_lines, print_error, print_json_line
from mmtok.errors import MmtokError


def parse_truncation(
    method: str | None, threshold: float | None, keep: int | None, keep_ratio: float | None
) -> dict[str, Any] | None:
    """The keyword arguments for ``mmtok.truncate`` from command-line options (None: no truncation)."""
    if method is None:
        return None
    return {"method": method, "threshold": threshold, "keep": keep, "keep_ratio": keep_ratio}


def apply_truncation(seq: Any, options: dict[str, Any], context: Any) -> Any:
    import mmtok

    short, report = mmtok.truncate(seq, context=context, **options)
    short.meta["truncation_report"] = {k: v for k, v in report.to_dict().items() if k != "kept"}
    return short


def _context(value: str | None) -> Any:
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


@flushes_json_lines
def truncate(
    tokens: Path = typer.Argument(..., help="A token file written by `mmtok tokenize`."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the shorter sequence."),
    context: str | None = typer.Option(None, help="Context: text, or a token file (text/audio tokens)."),
    method: str = typer.Option("mi", help="mi, random, uniform, norm, divprune or tome."),
    threshold: float | None = typer.Option(
        None, help="mi: keep tokens whose pmi with the context exceeds this (nats; default 0.18)."
    ),
    keep: int | None = typer.Option(None, min=1, help="Keep this many tokens."),
    keep_ratio: float | None = typer.Option(None, help="Keep this fraction of the tokens, in (0, 1]."),
    key: str | None = typer.Option(None, help="Which sequence of a multi-sequence file."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Keep the tokens that carry information about the context, by pmi (or a baseline selection at a budget)."""
    import mmtok
    from mmtok.truncation import METHODS

    if method not in METHODS:
        raise typer.BadParameter(f"must be one of {', '.join(METHODS)}, got {method!r}", param_hint="--method")
    if keep_ratio is not None and not 0 < keep_ratio <= 1:
        raise typer.BadParameter(f"must be in (0, 1], got {keep_ratio}", param_hint="--keep-ratio")
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
    try:
        sequences = mmtok.load_sequences(tokens)
        if key is None and len(sequences) != 1:
            raise mmtok.TokenError(f"{tokens}: holds {len(sequences)} sequences; choose one with --key")
        seq = sequences[key] if key is not None else next(iter(sequences.values()))
        short, report = mmtok.truncate(
            seq, context=_context(context), method=method, threshold=threshold, keep=keep, keep_ratio=keep_ratio
        )
        short.save(out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    if json_out:
        print_json_line({"input": str(tokens), "output": str(out), **report.to_dict()})
        return
    info = "" if report.information_kept is None else f", estimated information kept {report.information_kept:.0%}"
    console().print(f"{tokens}: {report.tokens_in} -> {report.tokens_out} tokens ({report.method}{info}) -> {out}")
    for note in report.notes:
        console().print(f"[yellow]note:[/] {note}")
