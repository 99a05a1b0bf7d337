"""Shared CLI plumbing: consoles, one-line errors, progress bars, JSON lines, CSV, tables that fit the terminal.

rich is imported on first use, so that `--json` runs over large folders do not pay for it at start-up.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from mmtok.errors import MediaError, MmtokError

if TYPE_CHECKING:
    import csv

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

PIPE_WIDTH = 200  # columns of output sent to a pipe or file without COLUMNS set (rich would assume 80)
MIN_PROGRESS_ITEMS = 50  # smaller jobs finish before a bar is worth drawing


def _width(stream: Any) -> int | None:
    """None lets rich ask the terminal (or read COLUMNS); a pipe without COLUMNS gets :data:`PIPE_WIDTH`."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else PIPE_WIDTH


def console() -> Console:
    """stdout console: a terminal's width, COLUMNS when set, else 200 columns (tables are wide)."""
    return _console(False, _width(sys.stdout), os.environ.get("COLUMNS"))


def err_console() -> Console:
    return _console(True, _width(sys.stderr), os.environ.get("COLUMNS"))


@functools.cache
def _console(stderr: bool, width: int | None, columns: str | None) -> Console:
    from rich.console import Console

    # emoji=False: a file named cat:smile:.jpg is shown as it is named, not as cat😄.jpg (and rich's emoji table
    # is not imported at each start)
    return Console(stderr=stderr, highlight=False, emoji=False, width=width)


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


# C0 and C1 controls, and the characters that break a line or turn text around on a terminal: U+2028/U+2029 (line
# and paragraph separators), bidirectional marks, embeddings, overrides and isolates (U+202E shows "gnp.exe" for
# "exe.png").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control, line-breaking and direction-changing characters escaped (``\\n``, ``\\x1b``,
    ``\\u2028``, ``\\u202e``): a file named ``a\\nerror: b.png ok``, one carrying a terminal escape, or one whose name
    a right-to-left override turns around cannot split a message line, forge another one or disguise itself."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _to_stderr(line: str) -> None:
    """On a terminal through rich's console, so a live progress bar is redrawn below the line instead of being
    tangled with it; otherwise as plain text. Always one line: control characters are escaped."""
    line = printable(_stdin_named(line))
    _lines.flush()
    if stderr_is_terminal():
        err_console().print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        sys.stderr.write(line + "\n")


def print_error(error: MmtokError | str) -> None:
    """One line on stderr naming the input and what is wrong (JSON lines held back are written first)."""
    _to_stderr(f"error: {error}")


def about(item: object, error: object) -> str:
    """``error``'s message naming ``item`` first (unless it already does)."""
    text, name = str(error), str(item)
    return text if text.startswith(name) else f"{name}: {text}"


def print_warning(message: str) -> None:
    _to_stderr(f"warning: {message}")


def print_note(message: str) -> None:
    _to_stderr(f"note: {message}")


def say(text: str) -> None:
    """A plain line on stdout: never wrapped (a pipe reads it whole), no markup read in file names, control
    characters escaped."""
    console().print(printable(text), markup=False, highlight=False, soft_wrap=True)


_json = json.JSONEncoder(default=str)  # built once: json.dumps(..., default=) builds an encoder per call


class _JsonLines:
    """JSON lines to stdout in batches (at most 64 KiB or 0.2 s held back), so a large run is not one write per
    line (stdout is unbuffered under PYTHONUNBUFFERED) while a reader still sees results as they come."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.size = 0
        self.since = time.monotonic()

    def write(self, obj: dict[str, Any]) -> None:
        line = _stdin_named(_json.encode(obj)) + "\n"
        self.pending.append(line)
        self.size += len(line)
        if self.size > 65536 or time.monotonic() - self.since > 0.2:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            try:
                sys.stdout.write("".join(self.pending))
                sys.stdout.flush()
            except BrokenPipeError:  # the reader left (`| head`): stop writing, quietly
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
        self.pending.clear()
        self.size = 0
        self.since = time.monotonic()


_lines = _JsonLines()
atexit.register(_lines.flush)


def print_json_line(obj: dict[str, Any]) -> None:
    _lines.write(obj)


def flushes_json_lines(command: F) -> F:
    """Decorate a command that prints JSON lines: what is held back is written when it ends, however it ends."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        finally:
            _lines.flush()

    return wrapper  # type: ignore[return-value]


def csv_writer(fields: Sequence[str]) -> csv.DictWriter:
    """A CSV writer on stdout with its header written; fields a row lacks are left empty."""
    import csv

    writer = csv.DictWriter(sys.stdout, list(fields), extrasaction="ignore")
    writer.writeheader()
    return writer


def one_output_format(json_out: bool, csv_out: bool) -> None:
    if json_out and csv_out:
        raise typer.BadParameter("choose one of --json and --csv")


# ----------------------------------------------------------------------------------------------------- progress
@contextmanager
def progress_bar(total: int | None, description: str, min_items: int | None = None) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` for a transient bar on stderr, drawn only on a terminal and for jobs of ``min_items`` or more
    (with a known total, so it never shows ``0/?``). Errors printed meanwhile go above it (:func:`print_error`)."""
    floor = MIN_PROGRESS_ITEMS if min_items is None else min_items
    if not stderr_is_terminal() or total is None or total < floor:
        yield lambda n=1: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


@contextmanager
def progress_counter(description: str) -> Iterator[Callable[[int, int], None]]:
    """``update(done, total)`` for a transient bar on stderr whose total is learnt as the job runs (drawn only on a
    terminal)."""
    if not stderr_is_terminal():
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def progress(
    items: Iterable[T], description: str, total: int | None = None, min_items: int | None = None
) -> Iterator[T]:
    """Wrap ``items`` in :func:`progress_bar` (a list, or an iterable with its ``total``)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar(total, description, min_items) as advance:
        for item in items:
            yield item
            advance(1)


# ----------------------------------------------------------------------------------------------------- options
def check_device(device: str) -> str:
    """--device is cpu, cuda, cuda:N or auto (a usage error otherwise, before any model is loaded)."""
    kind, _, index = device.partition(":")
    if device == "auto" or (kind in ("cpu", "cuda", "mps") and (not index or index.isdigit())):
        return device
    raise typer.BadParameter(f"must be cpu, cuda, cuda:N, mps or auto, got {device!r}", param_hint="--device")


def check_out_folder(out: Path) -> None:
    """--out names a folder that can be made: an existing file there, or a folder that cannot be created, is a
    usage error before any work (the folder is created here)."""
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file, not a folder", param_hint="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise typer.BadParameter(f"cannot create {out}: {e.strerror or e}", param_hint="--out") from None


def check_out_file(out: Path, suffixes: Sequence[str] = ()) -> None:
    """--out names a file to write: not a folder, and with one of ``suffixes`` when given."""
    if out.is_dir():
        raise typer.BadParameter(f"{out} is a folder; name the file to write", param_hint="--out")
    if out.exists() and not out.is_file():
        raise typer.BadParameter(f"{out} is not a regular file", param_hint="--out")
    if suffixes and out.suffix.lower() not in suffixes:
        raise typer.BadParameter(f"{out} must end in {', '.join(suffixes)}", param_hint="--out")


def max_pixels_option() -> Any:
    return typer.Option(
        None,
        "--max-pixels",
        min=1,
        help="Refuse images with more pixels than this before decoding (decompression-bomb guard; default "
        "178,956,970, Pillow's own limit).",
    )


def resolve_max_pixels(max_pixels: int | None) -> int:
    """The pixel limit for mmtok.load; a limit above Pillow's own is given to Pillow too, so decoding agrees."""
    from mmtok.media import MAX_IMAGE_PIXELS

    if max_pixels is None:
        return MAX_IMAGE_PIXELS
    if max_pixels > MAX_IMAGE_PIXELS:
        import PIL.Image

        PIL.Image.MAX_IMAGE_PIXELS = max(PIL.Image.MAX_IMAGE_PIXELS or 0, max_pixels // 2 + 1)
    return max_pixels


# ----------------------------------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class Column:
    """A table column. ``fold`` columns (paths, working) fold onto more lines in the room the others leave, at a
    path separator or a space, never inside a file name or a word (up to :data:`WHOLE_PIECE_MAX` columns); all
    other columns keep their widest cell (numbers are never cut or wrapped). On a narrow terminal the columns
    with the lowest ``priority`` are left out first; ``priority=None`` is never left out."""

    header: str
    numeric: bool = False
    fold: bool = False
    priority: int | None = None
    min_width: int = 12  # a fold column is never narrower than this (or its widest cell, when less)


def _cell_width(cell: str) -> int:
    from rich.text import Text

    return max((Text.from_markup(line, emoji=False).cell_len for line in cell.split("\n")), default=0)


FOLD_FLOOR = 6  # a fold column squeezed below its own min_width when nothing else can give way
WHOLE_PIECE_MAX = 40  # a file name or word up to this wide is never folded inside; a longer one folds anywhere
_PIECES = re.compile(r"\s+|[^\s/]+/?|/")  # a fold column's cells break after a run of spaces or a '/'


def _longest_piece(cell: str) -> int:
    """The widest file name or word of a cell, at most :data:`WHOLE_PIECE_MAX`: what folding keeps whole. A
    folder's name (a piece ending in '/') may fold when the column has no room for it."""
    from rich.cells import cell_len
    from rich.text import Text

    pieces = _PIECES.findall(Text.from_markup(cell, emoji=False).plain)
    return min(
        max((cell_len(p) for p in pieces if not p.isspace() and not p.endswith("/")), default=0), WHOLE_PIECE_MAX
    )


def fold_at_separators(cell: str, width: int) -> Text:
    """``cell`` (rich markup) on lines of at most ``width`` columns, broken after a '/' or at spaces, so that a
    path folds between its folders and a file name or word stays whole; a piece wider than ``width`` is left for
    rich to fold."""
    from rich.cells import cell_len
    from rich.text import Text

    lines = []
    for line in Text.from_markup(cell, emoji=False).split("\n", allow_blank=True):
        start, used = 0, 0
        for match in _PIECES.finditer(line.plain):
            piece_width = cell_len(match.group())
            if used and used + piece_width > width and not match.group().isspace():
                done = line[start : match.start()]
                done.rstrip()  # in place
                lines.append(done)
                start, used = match.start(), 0
            used += piece_width
        lines.append(line[start:])
    return Text("\n").join(lines)


def fit_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, section_at: int | None = None
) -> tuple[Table, list[str], int]:
    """The columns that have values and fit ``width``, as a rich table with every column's width fixed; the headers
    of the columns left out; and the table's width (more than ``width`` only when its numbers alone need more).

    Columns whose cells are all empty are dropped silently (nothing is lost); the others are dropped by priority
    until the rest fits, and the caller says which (or shows them another way). ``section_at``: the row a section
    (a rule across the table) starts at, e.g. totals."""
    from rich.table import Table

    filled = [i for i, _ in enumerate(columns) if any(row[i] for row in rows)] or list(range(len(columns)))
    natural = {i: max([_cell_width(columns[i].header), *(_cell_width(row[i]) for row in rows)]) for i in filled}
    whole = {i: max([_longest_piece(columns[i].header), *(_longest_piece(row[i]) for row in rows)]) for i in filled}

    def floor(i: int, squeezed: bool = False) -> int:
        if not columns[i].fold:
            return natural[i]
        return min(natural[i], max(whole[i], FOLD_FLOOR if squeezed else columns[i].min_width))

    kept = list(filled)
    dropped: list[int] = []
    while sum(floor(i) for i in kept) + 3 * len(kept) - 1 > width:
        droppable = [i for i in kept if columns[i].priority is not None]
        if not droppable:
            break
        lowest = min(droppable, key=lambda i: (columns[i].priority, -i))
        kept.remove(lowest)
        dropped.append(lowest)
    squeezed = sum(floor(i) for i in kept) + 3 * len(kept) - 1 > width  # only fold columns can give way now
    widths = {i: floor(i, squeezed) for i in kept}
    room = width - (sum(widths.values()) + 3 * len(kept) - 1)
    folding = [i for i in kept if columns[i].fold]
    while room > 0:  # share what is left among the fold columns, one cell at a time, up to their widest cell
        growing = [i for i in folding if widths[i] < natural[i]]
        if not growing:
            break
        for i in growing[:room]:
            widths[i] += 1
            room -= 1
    table = Table(show_edge=False, header_style="bold")
    for i in kept:
        c = columns[i]
        table.add_column(
            c.header, justify="right" if c.numeric else "left", no_wrap=not c.fold, overflow="fold", width=widths[i]
        )
    for index, row in enumerate(rows):
        if index == section_at:
            table.add_section()
        table.add_row(*(fold_at_separators(row[i], widths[i]) if columns[i].fold else row[i] for i in kept))
    return (
        table,
        [columns[i].header.replace("\n", " ") for i in sorted(dropped)],
        sum(widths.values()) + 3 * len(kept) - 1,
    )


def print_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], section_at: int | None = None, note_left_out: bool = True
) -> list[str]:
    """Print :func:`fit_table`'s table at the console's width (and a dim line naming the columns left out, unless
    the caller shows them itself); returns the headers left out."""
    width = console().width
    table, dropped, needed = fit_table(columns, rows, width, section_at)
    console().print(table, width=max(width, needed), crop=False)  # wider only when its numbers need it: never cut
    if dropped and note_left_out:
        console().print(f"[dim]left out at {width} columns: {', '.join(dropped)} (every field: --json or --csv)[/]")
    return dropped


def fmt_num(value: Any, digits: int = 2) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# The folders a command was given (its ``paths``), while it runs: their files are named relative to them.
_INPUT_FOLDERS: ContextVar[tuple[Path, ...]] = ContextVar("input_folders", default=())


@contextmanager
def input_folders(paths: Iterable[str | os.PathLike[str]] | None) -> Iterator[None]:
    """While the block runs, :func:`short_path` names a file found in one of the folders among ``paths`` relative to
    that folder where that is shorter (``2019/a.jpg`` for ``photos/2019/a.jpg`` after ``mmtok inspect photos``).
    With several folders a file is named from the folder's parent, so it starts with the folder's name (``a/x.jpg``,
    ``b/x.jpg``); folders of the same name give no such names. The ``mmtok`` app sets this for every command that
    takes ``paths`` or ``inputs``; an input that is not a folder (a file, a URL, ``-``) is passed over."""
    folders = []
    for path in paths or ():
        try:
            if Path(path).is_dir():
                folders.append(Path(path).resolve())
        except OSError:
            continue
    if len(folders) > 1:
        folders = [f.parent for f in folders] if len({f.name for f in folders}) == len(folders) else []
    token = _INPUT_FOLDERS.set(tuple(folders))
    try:
        yield
    finally:
        _INPUT_FOLDERS.reset(token)


def short_path(path: str | os.PathLike[str], root: Path | None = None) -> str:
    """``path`` as people read it in a table: the shortest of the path as given, relative to ``root`` (else to the
    working folder), and relative to the folder given on the command line that holds it (:func:`input_folders`);
    ``-`` for what was read from stdin; control characters escaped (a name with a newline stays on its line)."""
    names = [os.fspath(path)]
    if names[0] in _STDIN_FILES.get():
        return STDIN
    try:
        resolved = Path(path).resolve()
        bases = [root.resolve()] if root else [Path.cwd().resolve(), *_INPUT_FOLDERS.get()]
    except OSError:
        return printable(names[0])
    for base in bases:
        if resolved.is_relative_to(base) and resolved != base:
            names.append(str(resolved.relative_to(base)))
    return printable(min(names, key=len))


# ----------------------------------------------------------------------------------------------- stdin as an input
STDIN = "-"  # an input named so is read from stdin
STDIN_MAX_BYTES = 64 * 1024 * 1024  # read_stdin_input's default: a request body or a token file
STDIN_FILE_MAX_BYTES = 2 * 1024**3  # media piped into a command that reads files
INPUT_PARAMETERS = ("paths", "tokens", "spec", "suite", "file", "config")  # a command's inputs that may be '-'
_STDIN_CHUNK = 1 << 20
_STDIN_FILES: ContextVar[tuple[str, ...]] = ContextVar("stdin_files", default=())  # shown as '-'


def read_stdin_input(max_bytes: int = STDIN_MAX_BYTES) -> bytes:
    """What was piped into stdin (a request body, an image), at most ``max_bytes``: read in chunks and counted, so
    more is refused without being held. A :class:`MediaError` naming ``-`` when stdin is a terminal (nothing was
    piped in) or holds more than ``max_bytes``."""
    chunks, size = [], 0
    for chunk in _stdin_chunks(max_bytes):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _stdin_chunks(max_bytes: int) -> Iterator[bytes]:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None or sys.stdin.isatty():
        raise MediaError(STDIN, "stdin is a terminal: pipe the input in (cat photo.jpg | mmtok inspect -)")
    size = 0
    while chunk := stream.read(min(_STDIN_CHUNK, max_bytes + 1 - size)):
        size += len(chunk)
        if size > max_bytes:
            raise MediaError(STDIN, f"more than {max_bytes:,} bytes on stdin: pass it as a file")
        yield chunk


def _stdin_named(text: str) -> str:
    """``text`` with the temporary file holding stdin named ``-``, as the user named it."""
    for path in _STDIN_FILES.get():
        text = text.replace(path, STDIN)
    return text


@contextmanager
def stdin_inputs(arguments: dict[str, Any]) -> Iterator[list[str]]:
    """While the block runs, a ``-`` among a command's inputs (:data:`INPUT_PARAMETERS` in ``arguments``, which are
    changed in place) is a temporary file holding what was piped into stdin, named ``-`` in tables, messages and
    JSON. Yields the reasons a ``-`` could not be read (stdin a terminal, more than :data:`STDIN_FILE_MAX_BYTES`,
    ``-`` given twice): that ``-`` is taken out of its list, and the caller reports them and fails the command
    after the other inputs. When no input is left, the reasons are raised at once as a :class:`MediaError`. The
    file is removed afterwards."""
    refused: list[str] = []
    folder: str | None = None
    token = None

    def stdin_file(value: Any) -> Any:
        nonlocal folder
        if str(value) != STDIN:
            return value
        if folder is not None:
            refused.append(f"{STDIN}: given twice; stdin can be read once")
            return None
        import tempfile

        folder = tempfile.mkdtemp(prefix="mmtok-stdin-")
        path = Path(folder, "stdin")
        try:
            with path.open("wb") as out:
                for chunk in _stdin_chunks(STDIN_FILE_MAX_BYTES):
                    out.write(chunk)
        except MediaError as e:
            refused.append(str(e))
            return None
        return type(value)(path) if isinstance(value, os.PathLike) else str(path)

    try:
        for name in INPUT_PARAMETERS:
            value = arguments.get(name)
            if value is None:
                continue
            if isinstance(value, list):
                arguments[name] = [v for v in map(stdin_file, value) if v is not None]
            else:
                arguments[name] = stdin_file(value) or value
            if refused and arguments[name] in ([], STDIN, Path(STDIN)):  # nothing left to do
                raise MediaError(None, "; ".join(refused))
        if folder is not None:
            token = _STDIN_FILES.set((str(Path(folder, "stdin")),))
        yield refused
    finally:
        if token is not None:
            _STDIN_FILES.reset(token)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
