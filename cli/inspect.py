"""``mmtok inspect``: what each file is, from its headers; token files (``.safetensors``) sequence by sequence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

import mmtok
from mmtok.cli.common import (
    Column,
    csv_writer,
    flushes_json_lines,
    fmt_num,
    max_pixels_option,
    one_output_format,
    print_error,
    print_json_line,
    print_note,
    print_table,
    progress,
    resolve_max_pixels,
    short_path,
)
from mmtok.errors import MediaError, TokenError

KINDS = ("image", "audio", "video", "text", "document", "tokens")
TOKEN_SUFFIX = ".safetensors"
CSV_FIELDS = (
    "path",
    "kind",
    "format",
    "codec",
    "audio_codec",
    "width",
    "height",
    "orientation",
    "duration_s",
    "sample_rate_hz",
    "fps",
    "frames",
    "channels",
    "samples",
    "bytes",
    "pages",
    "text_pages",
    "text_chars",
    "rotated_pages",
    "key",
    "modality",
    "tokens",
    "grid",
    "tokenizer",
    "codebook_levels",
    "tokens_per_second",
    "embedding_dim",
    "truncated",
)


@flushes_json_lines
def inspect(
    paths: list[Path] = typer.Argument(..., help="Files or folders (walked recursively); token files too."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input (per sequence of a token file)."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout: one row per input, every field."),
    kind: str | None = typer.Option(
        None, help="Expect this kind (image, audio, video, text, document, tokens); others are errors."
    ),
    max_pixels: int | None = max_pixels_option(),
) -> None:
    """Kind, container, codec, size, duration, rates, frames and channels of media files, from headers only; for a
    PDF, its pages, first page size and text layer (without rendering); for a token file, each sequence's modality,
    token count, grid or rate, and tokenizer (from its headers: no tensor is read)."""
    one_output_format(json_out, csv_out)
    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"must be one of {', '.join(KINDS)}, got {kind!r}", param_hint="--kind")
    limit = resolve_max_pixels(max_pixels)
    writer = csv_writer(CSV_FIELDS) if csv_out else None
    media: list[dict] = []
    tokens: list[dict] = []
    failures = 0
    files = list(mmtok.iter_files(paths))
    for item in progress(files, "inspecting"):
        try:
            if isinstance(item, MediaError):
                raise item
            rows = _describe(item, kind, limit)
        except (MediaError, TokenError) as e:
            failures += 1
            print_error(e)
            if json_out:
                print_json_line(_error_row(item, e))
            continue
        for row in rows:
            if json_out:
                print_json_line(row)
            elif writer:
                writer.writerow({**row, "grid": "x".join(map(str, row["grid"])) if row.get("grid") else None})
            else:
                (tokens if row["kind"] == "tokens" else media).append(row)
    if media:
        print_media_table(media)
        for row in media:
            for note in row.get("notes") or ():
                print_note(f"{short_path(row['path'])}: {note}")
    if tokens:
        print_token_table(tokens)
    if failures:
        raise typer.Exit(1)


def _error_row(item: Any, error: MediaError | TokenError) -> dict[str, Any]:
    if isinstance(error, MediaError):
        return {"path": error.source, "error": error.reason}
    message = str(error)
    return {"path": str(item), "error": message.removeprefix(f"{item}: ")}


def _describe(path: Path, kind: str | None, max_pixels: int) -> list[dict[str, Any]]:
    """A media file's info, or one row per sequence of a token file (by its name: ``.safetensors``)."""
    if path.suffix.lower() != TOKEN_SUFFIX:
        if kind == "tokens":
            raise MediaError(path, f"expected a token file ({TOKEN_SUFFIX})")
        media = mmtok.load(path, kind=None if kind == "document" else kind, max_pixels=max_pixels)
        if kind == "document" and media.kind != "document":
            raise MediaError(path, f"expected a document, but the content is {media.kind} ({media.format})")
        return [_with_body(media.info(), path) if media.kind == "text" else media.info()]
    if kind not in (None, "tokens"):
        raise MediaError(path, f"expected {kind}, but this is a token file")
    from mmtok.token_files import read_token_headers  # headers only, in constant memory: no tensor is read

    sequences = read_token_headers(path)
    single = len(sequences) == 1
    size = path.stat().st_size
    return [token_info(str(path), None if single else key, seq, size) for key, seq in sequences.items()]


def _with_body(info: dict[str, Any], path: Path) -> dict[str, Any]:
    """A text file that is an API request body says which (``mmtok price`` prices it as one)."""
    from mmtok.errors import RequestError
    from mmtok.request import MAX_BODY_BYTES, looks_like_body, parse_body

    with open(path, "rb") as f:  # a regular file: load() checked it
        head = f.read(4096)
        if not looks_like_body(head):
            return info
        data = head + f.read(MAX_BODY_BYTES + 1 - len(head))
    try:
        request = parse_body(data, source=str(path))
    except RequestError:
        return info
    return {**info, "format": f"{request.api} body", "model": request.model, "parts": len(request.parts)}


def token_info(path: str, key: str | None, seq: Any, size_bytes: int | None = None) -> dict[str, Any]:
    """What a token sequence is: modality, count, grid or rate, codebook levels, tokenizer."""
    levels = None
    if seq.ids is not None:
        levels = int(seq.ids.shape[1]) if seq.ids.ndim == 2 else 1
    return {
        "path": path,
        "kind": "tokens",
        "key": key,
        "modality": seq.modality,
        "tokens": len(seq),
        "grid": list(seq.grid) if seq.grid else None,
        "tokenizer": seq.tokenizer,
        "codebook_levels": levels,
        "tokens_per_second": seq.meta.get("tokens_per_second"),
        "embedding_dim": None if seq.embeddings is None else int(seq.embeddings.shape[1]),
        "truncated": seq.meta.get("truncation"),
        "bytes": size_bytes,
    }


MEDIA_COLUMNS = (
    Column("path", fold=True, min_width=16),
    Column("kind"),
    Column("format", priority=8),
    Column("codec", priority=4),
    Column("size", numeric=True, priority=9),
    Column("secs", numeric=True, priority=8),
    Column("Hz", numeric=True, priority=6),
    Column("fps", numeric=True, priority=3),
    Column("frames", numeric=True, priority=2),
    Column("ch", numeric=True, priority=1),
    Column("pages", numeric=True, priority=2),
    Column("text", priority=1),
    Column("bytes", numeric=True, priority=7),
)


def print_media_table(rows: list[dict], root: Path | None = None) -> None:
    """The media table, the columns that fit the console (paths fold; numbers are never cut), and which were left
    out."""
    cells = []
    for r in rows:
        codec = r.get("codec", "")
        if r.get("audio_codec"):
            codec = f"{codec}+{r['audio_codec']}"
        cells.append(
            [
                short_path(r["path"], root),
                r["kind"],
                r["format"],
                codec,
                f"{r['width']}x{r['height']}" + (" pt" if r["kind"] == "document" else "") if "width" in r else "",
                fmt_num(r.get("duration_s")),
                fmt_num(r.get("sample_rate_hz")),
                fmt_num(r.get("fps")),
                fmt_num(r.get("frames")),
                fmt_num(r.get("channels")),
                fmt_num(r.get("pages")),
                f"{r['text_pages']}/{r['pages']} pages" if r.get("pages") else "",
                fmt_num(r.get("bytes")),
            ]
        )
    _print_fitted(MEDIA_COLUMNS, cells)


TOKEN_COLUMNS = (
    Column("token file", fold=True, min_width=16),
    Column("sequence", fold=True, min_width=10, priority=8),
    Column("modality"),
    Column("tokens", numeric=True),
    Column("grid / rate", numeric=True, priority=9),
    Column("levels", numeric=True, priority=3),
    Column("tokenizer", priority=7),
    Column("truncated", priority=2),
)


def print_token_table(rows: list[dict], root: Path | None = None) -> None:
    cells = []
    for r in rows:
        if r["grid"]:
            shape = "x".join(map(str, r["grid"]))
        elif r["tokens_per_second"]:
            shape = f"{r['tokens_per_second']:g}/s"
        else:
            shape = ""
        cells.append(
            [
                short_path(r["path"], root),
                r["key"] or "",
                r["modality"],
                fmt_num(r["tokens"]),
                shape,
                fmt_num(r["codebook_levels"]),
                r["tokenizer"],
                r["truncated"] or "",
            ]
        )
    _print_fitted(TOKEN_COLUMNS, cells)


def _print_fitted(columns: tuple[Column, ...], cells: list[list[str]]) -> None:
    from rich.markup import escape

    print_table(columns, [[escape(cell) for cell in row] for row in cells])
