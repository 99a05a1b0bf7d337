"""``mmtok inspect``: what each file is, from its headers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

import mmtok
from mmtok.cli.common import console, flushes_json_lines, fmt_num, print_error, print_json_line, progress
from mmtok.errors import MediaError

if TYPE_CHECKING:
    from rich.table import Table


@flushes_json_lines
def inspect(
    paths: list[Path] = typer.Argument(..., help="Files or folders (walked recursively)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input on stdout."),
    kind: str | None = typer.Option(None, help="Expect this kind (image, audio, video, text); others are errors."),
) -> None:
    """Kind, container, codec, size, duration, rates, frames and channels of media files, from headers only."""
    rows: list[dict] = []
    failures = 0
    files = list(mmtok.iter_files(paths))
    for item in progress(files, "inspecting"):
        try:
            if isinstance(item, MediaError):
                raise item
            info = mmtok.load(item, kind=kind).info()
        except MediaError as e:
            failures += 1
            print_error(e)
            if json_out:
                print_json_line({"path": e.source, "error": e.reason})
            continue
        if json_out:
            print_json_line(info)
        else:
            rows.append(info)
    if not json_out and rows:
        console().print(inspect_table(rows))
    if failures:
        raise typer.Exit(1)


def inspect_table(rows: list[dict], root: Path | None = None) -> Table:
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for column, justify in (
        ("path", "left"),
        ("kind", "left"),
        ("format", "left"),
        ("codec", "left"),
        ("size", "right"),
        ("duration s", "right"),
        ("rate Hz", "right"),
        ("fps", "right"),
        ("frames", "right"),
        ("ch", "right"),
        ("bytes", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=column != "path", overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        size = f"{r['width']}x{r['height']}" if "width" in r else ""
        codec = r.get("codec", "")
        if r.get("audio_codec"):
            codec = f"{codec}+{r['audio_codec']}"
        table.add_row(
            _short(r["path"], root),
            r["kind"],
            r["format"],
            codec,
            size,
            fmt_num(r.get("duration_s")),
            fmt_num(r.get("sample_rate_hz")),
            fmt_num(r.get("fps")),
            fmt_num(r.get("frames")),
            fmt_num(r.get("channels")),
            fmt_num(r.get("bytes")),
        )
    return table


def _short(path: str, root: Path | None) -> str:
    """``path`` relative to ``root`` (or the working folder) when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return path
