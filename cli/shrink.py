"""``mmtok shrink``: the cheapest version of each input that keeps what the user needs, per model."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import typer

from mmtok.cli.common import (
    err_console,
    flushes_json_lines,
    max_pixels_option,
    print_error,
    print_json_line,
    print_note,
    print_warning,
    resolve_max_pixels,
    short_path,
    stderr_is_terminal,
)
from mmtok.errors import MediaError, MmtokError
from mmtok.extras import MissingExtra

if TYPE_CHECKING:
    from mmtok.budgets.shrink import ShrinkResult

MISSING_EXTRA = 2  # an input needed an extra that is not installed (mmtok.extras): the run ends in exit 2
DEFAULT_MODEL = "gpt-4o"  # price's, when neither -m, a body nor the settings name one


@flushes_json_lines
def shrink(
    paths: list[str] = typer.Argument(
        ...,
        click_type=click.Path(),  # a path or a URL, kept as typed (a Path would fold https:// into https:/)
        metavar="INPUTS...",
        help="Images, recordings, videos, PDFs, API request bodies (JSON), folders (walked recursively) or http(s) "
        "URLs.",
    ),
    model: list[str] = typer.Option(
        [],
        "--model",
        "-m",
        help="Model to shrink for (repeatable). Default: a body's own, else the settings' model or gpt-4o.",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the outputs (never inside an input folder)."),
    keep: list[str] = typer.Option(
        [],
        "--keep",
        help="A quality bar, e.g. ocr>=0.98, ssim>=0.95, recog>=0.9, wer<=0.05 (repeatable; replaces that "
        "modality's defaults: ssim>=0.90, recog>=0.91 and, where an image has text, ocr>=0.98; wer<=0.05 for audio).",
    ),
    lossless: bool = typer.Option(
        False, "--lossless", help="Only changes that leave what the model sees pixel-exact (a lossy source: said)."
    ),
    slice_: bool = typer.Option(
        False,
        "--slice",
        help="Cut a tall or wide image no single rendition serves into pieces the model sees whole (they cost more).",
    ),
    speed: float = typer.Option(1.0, "--speed", help="Also try speech sped up by this factor (1 to 2)."),
    min_silence: float = typer.Option(0.8, "--min-silence", help="Cut silences longer than this (seconds).", min=0.1),
    detail: str | None = typer.Option(None, help="The detail / media_resolution the originals would be sent with."),
    no_crop: bool = typer.Option(False, "--no-crop", help="Never cut uniform borders."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML)."),
    max_pixels: int | None = max_pixels_option(),
    allow_private: bool = typer.Option(
        False,
        "--allow-private",
        help="URLs in bodies, and redirects, may reach loopback, private and link-local addresses.",
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input and model on stdout."),
) -> None:
    """For each input and model, write the cheapest version that meets every bar to --out, with tokens and cost
    before and after, what was done, and each measure. Outputs are priced again from the written file and never
    cost more than the original (--slice: said when they do); where no cheaper version meets the bars the original
    is copied once and said so. A file several models share is written once."""
    bars = _checked_bars(keep, speed, detail)
    out = out.expanduser()
    local = [Path(p) for p in paths if not _is_url(p)]
    _check_out(out, local)
    paths, batched = _batch_files(paths, local, model, out, json_out, bars, lossless, slice_, prices)
    if not paths:  # batch files alone
        raise typer.Exit(0 if batched else 1)
    options = {
        "lossless": lossless, "detail": detail, "speed": speed, "min_silence_s": min_silence, "crop": not no_crop,
        "slice": slice_, "prices": prices, "max_pixels": resolve_max_pixels(max_pixels), "allow_private": allow_private,
    }  # fmt: skip
    _shrink_inputs(paths, model, bars, out, options, json_out, batched)


def _check_out(out: Path, local: list[Path]) -> None:
    """Exit 2 with one line where --out cannot hold the outputs (:func:`_out_problem`)."""
    problem = _out_problem(out, local)
    if problem:
        print_error(problem)
        raise typer.Exit(2)


def _shrink_inputs(
    paths: list[str], model: list[str], bars: dict, out: Path, options: dict, json_out: bool, batched: bool
) -> None:
    """Shrink the inputs that are not batch files for each model (none named: a body's own, else the settings'), print
    the table, and end with the run's exit code."""
    prices = options["prices"]
    usable = _usable_models(model, prices, json_out) if model else []
    options["fallback"] = None if model else _usable_models([_configured_model()], prices, json_out)[0]  # for files
    with _Downloads(options["allow_private"]) as downloads:
        results, failures = _shrink_all(paths, usable, bars, out, options, json_out, downloads)
    if not json_out and results:
        from mmtok.cli.shrink_table import print_shrink_table

        print_shrink_table(results, downloads.urls)
    if failures or len(usable) != len(model) or not batched:
        raise typer.Exit(2 if failures == MISSING_EXTRA else 1)


def _batch_files(paths: list[str], local: list[Path], model: list[str], out: Path, json_out: bool, bars: dict,
                 lossless: bool, slice_: bool, prices: list[Path]) -> tuple[list[str], bool]:  # fmt: skip
    """Batch files among the inputs, each shrunk to a new batch file of the same format (cli/shrink_batch.py); the
    other inputs, and whether the batches went well."""
    from mmtok.cli.shrink_batch import is_batch_file, shrink_batches

    batches = [p for p in local if is_batch_file(p)]
    if not batches:
        return paths, True
    ok = shrink_batches(batches, model, out, json_out, keep=[str(b) for b in bars.values()], lossless=lossless,
                        slice=slice_, prices=prices)  # fmt: skip
    return [p for p in paths if _is_url(p) or Path(p) not in batches], ok


def _is_url(text: str) -> bool:
    return text[:8].lower().startswith(("http://", "https://"))


class _Downloads:
    """URLs named on the command line, each read whole by bounded reads (as ``mmtok price`` reads them: the size
    cap, the deadline, redirects to private addresses refused unless allowed) into a private folder removed at the
    end, under the name its URL ends with; ``urls`` maps each copy back to its URL for what is printed."""

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private
        self.urls: dict[Path, str] = {}
        self._folder: Any = None

    def __enter__(self) -> _Downloads:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._folder is not None:
            self._folder.cleanup()

    def fetch(self, url: str) -> Path | MediaError:
        """The URL's bytes in a file of their own, or its error."""
        import tempfile
        import urllib.parse

        from mmtok.errors import MmtokError
        from mmtok.media.remote import RemoteFile, UrlPolicy, shown

        try:
            with RemoteFile(url, UrlPolicy(allow_private=self.allow_private), asked=True) as remote:
                data = remote.read_all()
        except MmtokError as e:
            return e if isinstance(e, MediaError) else MediaError(shown(url), str(e))
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="mmtok-shrink-urls-")
        name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name).strip("._") or "download"
        folder = Path(self._folder.name) / str(len(self.urls))  # one folder each: two URLs may end alike
        folder.mkdir()
        copy = folder / safe
        copy.write_bytes(data)
        self.urls[copy] = shown(url)
        return copy


def _shrink_all(
    paths: list[str], models: list[str], bars: dict, out: Path, options: dict, json_out: bool, downloads: _Downloads
) -> tuple[list[ShrinkResult], bool]:
    """Every input for every model (none given: a body's own, else the settings'), each outcome said as it comes;
    (the results, whether any input failed)."""
    from mmtok.media import iter_files

    files = [item for given in paths for item in ([downloads.fetch(given)] if _is_url(given) else iter_files([given]))]
    local = [Path(p) for p in paths if not _is_url(p)]
    names = _output_names([f for f in files if not isinstance(f, MediaError)], local)
    inputs = frozenset(Path(os.path.realpath(p)) for p in names if p not in downloads.urls)
    results: list[ShrinkResult] = []
    warned: set[str] = set()
    failures = False
    with _progress(len(files), max(1, len(models)), min_items=1 if any(p.is_dir() for p in local) else 2) as now:
        for n, item in enumerate(files):
            if isinstance(item, MediaError):
                failures = True
                _error(item, json_out, {"input": item.source})
                continue
            label = downloads.urls.get(item, str(item))
            now(n, item, models[0] if models else "")
            made = 0
            for k, result in enumerate(_outcomes(item, models, bars, out / names[item].parent, names[item].name,
                                                 options, inputs)):  # fmt: skip
                written, failed = _report(item, label, result, json_out, warned, results)
                made, failures = made + written, failures or failed
                failures = MISSING_EXTRA if isinstance(result, MissingExtra) else failures
                if k + 1 < len(models):
                    now(n, item, models[k + 1])
            failures = failures or made == 0
    return results, failures


@contextmanager
def _progress(files: int, models: int, min_items: int) -> Iterator[Callable[[int, Path, str], None]]:
    """``now(index, file, model)`` for a transient bar on stderr naming the file and model being measured (drawn only
    on a terminal, for ``min_items`` files or more)."""
    if not stderr_is_terminal() or files < min_items:
        yield lambda n, item, model: None
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task("shrinking", total=files * models)
        done = [0]

        def now(n: int, item: Path, model: str) -> None:
            bar.update(task, description=f"{escape(short_path(item))} · {model}", completed=done[0])
            done[0] += 1

        yield now


def _checked_bars(keep: list[str], speed: float, detail: str | None) -> list:
    """The quality bars from ``--keep``; a bad bar, ``--speed`` or ``--detail`` is a usage error (exit 2)."""
    from mmtok.budgets.shrink import make_bars
    from mmtok.budgets.shrink.audio import check_speed

    try:
        bars = make_bars(keep)
        check_speed(speed)
        if detail is not None:
            from mmtok.budgets.pricing import Options

            Options.of(detail=detail)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    _say_unmeasured_defaults(keep)
    return bars


def _say_unmeasured_defaults(keep: list[str]) -> None:
    """On an install without the shrink extra, one note that the default bars it cannot measure are not held."""
    from mmtok.budgets.shrink.bars import DEFAULT_BARS, measurable

    if keep:
        return
    missing = [metric for metric in DEFAULT_BARS if not measurable(metric)]
    if missing:
        print_note(f"the {', '.join(missing)} bars need mmtok's shrink extra (pip install 'mmtok[shrink]'); "
                   "images are held to ssim alone, and recordings are not shrunk")  # fmt: skip


def _usable_models(model: list[str], prices: list[Path], json_out: bool) -> list[str]:
    """The models that can be priced; each other is one line (closest names). None usable: exit 2."""
    from mmtok.budgets.pricing import rate_card, resolve

    usable = []
    for name in model:
        try:
            rate_card(resolve(name, prices))  # an unknown name fails here, naming the closest models
            usable.append(name)
        except MmtokError as e:
            print_error(f"{name}: {e}")
            if json_out:
                print_json_line({"model": name, "error": str(e)})
    if not usable:
        raise typer.Exit(2)
    return usable


def _report(
    item: Path, label: str, result: object, json_out: bool, warned: set[str], results: list
) -> tuple[int, bool]:
    """Say one model's outcome for ``item`` (named ``label``: its path, or the URL it was read from; a skip, an
    error, or a result with its warnings); (written, failed)."""
    from mmtok.budgets.shrink import Skipped

    if isinstance(result, Skipped):
        print_note(f"skipped: {label}: {result}")
        if json_out:
            print_json_line({"input": label, "skipped": str(result)})
        return 0, False
    if isinstance(result, MmtokError):
        said = f"{label}: {result}" if label != str(item) or not isinstance(result, MediaError) else result
        _error(said, json_out, {"input": label})
        return 0, True
    said = [f"{label}: {warning}" for warning in result.warnings] + list(result.before.warnings)
    for warning in said:  # the input's (an animated GIF) and the price's own (a retired model ...): said once
        if warning not in warned:
            warned.add(warning)
            print_warning(warning)
    if json_out:
        print_json_line({**result.to_dict(), "input": label})
    else:
        results.append(result)
    return 1, False


def _error(error: object, json_out: bool, row: dict) -> None:
    print_error(error)  # type: ignore[arg-type]
    if json_out:
        print_json_line({**row, "error": str(error)})


def _out_problem(out: Path, paths: list[Path]) -> str | None:
    """Why ``out`` cannot take the outputs: a file, inside (or equal to) a folder being read, or a folder that
    cannot be created (else it is created here)."""
    if out.exists() and not out.is_dir():
        return f"--out {out}: is a file, not a folder"
    target = Path(os.path.realpath(out))
    for path in paths:
        if path.is_dir():
            folder = Path(os.path.realpath(path))
            if target == folder or folder in target.parents:
                return (
                    f"--out {out} is inside the input folder {path}: choose a folder outside it "
                    "(inputs are never overwritten)"
                )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"--out {out}: cannot create it: {e.strerror or e}"
    return None


def _output_names(files: list[Path], roots: list[Path]) -> dict[Path, Path]:
    """Each input's output stem, relative to --out: its path under the folder it was found in (files named alone:
    their own name), made unique."""
    names: dict[Path, Path] = {}
    used: set[str] = set()
    folders = [Path(os.path.realpath(r)) for r in roots if r.is_dir()]
    for f in files:
        real = Path(os.path.realpath(f))
        relative = next((real.relative_to(d) for d in folders if d in real.parents), Path(f.name))
        stem = relative.with_suffix("") if relative.suffix else relative
        candidate, n = stem, 2
        while str(candidate).lower() in used:
            candidate = stem.with_name(f"{stem.name}-{n}")
            n += 1
        used.add(str(candidate).lower())
        names[f] = candidate
    return names


def _outcomes(
    item: Path, models: list[str], bars: dict, folder: Path, name: str, options: dict, inputs: frozenset
) -> Iterator[Any]:
    """One outcome per model for ``item``: a shrunk file (or its error), or, for an API request body, the body."""
    from mmtok.budgets.shrink import shrink_models

    try:
        body = _request_body(item)
    except MmtokError as e:
        yield e
        return
    if body is not None:
        yield from _shrink_body(item, body, models or [None], bars, folder, name, options, inputs)
    else:
        fallback = [options["fallback"]] if options["fallback"] else []
        options = {k: v for k, v in options.items() if k not in ("allow_private", "fallback")}
        yield from shrink_models(item, models or fallback, bars, folder, name, protect=inputs, **options)


def _configured_model() -> str:
    """The settings' model (``mmtok.config``, as ``price`` and the MCP server read it), else gpt-4o; a settings
    file that cannot be read is a usage error."""
    from mmtok.config import load_config

    try:
        return load_config().model_or(DEFAULT_MODEL)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None


# ------------------------------------------------------------------------------------------------------ bodies
def _request_body(item: Path) -> Any:
    """The API request body ``item`` holds (a JSON object whose shape a known API has), or None: media, or text
    that is no request body (shrunk as any file is: skipped)."""
    from mmtok.request import MAX_BODY_BYTES, looks_like_body, parse_body

    with open(item, "rb") as f:
        data = f.read(4096)
        if not looks_like_body(data):
            return None
        data += f.read(MAX_BODY_BYTES + 1 - len(data))
    if len(data) > MAX_BODY_BYTES:
        raise MediaError(item, f"over {MAX_BODY_BYTES:,} bytes: a request body is read up to that")
    try:
        return parse_body(data, source=str(item))
    except MmtokError as e:
        if "not a request body" in str(e):
            return None
        raise


def _shrink_body(
    item: Path,
    body: Any,
    models: list[str | None],
    bars: dict,
    folder: Path,
    name: str,
    options: dict,
    inputs: frozenset,
) -> Iterator[ShrinkResult | MmtokError]:
    """Each model's shrunk body (``budgets/shrink/request.py``; a model None: the body's own), written as
    ``<name>.<model>.json`` beside the renditions it holds (``<name>.<model>.parts/``); local paths it names are read
    inside its own folder only."""
    from mmtok.budgets.pricing.requests import model_for
    from mmtok.budgets.shrink import model_slug
    from mmtok.budgets.shrink.request import shrink_request
    from mmtok.files import write_atomic
    from mmtok.media.remote import UrlPolicy
    from mmtok.request import Policy

    keep = [str(bar) for bar in bars.values()]
    urls = UrlPolicy(allow_private=options["allow_private"])
    policy = Policy(urls=urls, paths_under=item.parent, max_pixels=options["max_pixels"])
    for asked in models:
        try:
            model = model_for(body, asked)  # none asked: the body's own
            target = folder / f"{name}.{model_slug(model)}.json"
            if Path(os.path.realpath(target)) in inputs:
                raise MediaError(item, f"the output {target} would overwrite an input: choose another --out")
            done = shrink_request(
                body, model, keep=keep, lossless=options["lossless"], slice=options["slice"],
                prices=options["prices"], policy=policy, out=target.with_suffix(".parts"), source=str(item),
            )  # fmt: skip
            write_atomic(target, (json.dumps(done.body, ensure_ascii=False) + "\n").encode())
            yield _body_result(item, model, target, done)
        except MmtokError as e:
            yield e


def _body_result(source: Path, model: str, path: Path, done: Any) -> ShrinkResult:
    """One model's shrunk request body as a shrink result (kind "request"), read by the table and ``--json`` as a
    file's is. Its costs are the input's: the body's output budget is the same before and after."""
    import dataclasses

    from mmtok.budgets.shrink import ShrinkResult

    shrunk = [(where, r) for where, r in done.parts if where in done.replaced]
    said = "; ".join(f"{where}: {r.action}" for where, r in shrunk) or "no part has a cheaper rendition"
    media = len(done.parts) + len(done.left)
    return ShrinkResult(
        source, model, "request", "shrunk" if shrunk else "kept",
        f"{len(shrunk)} of {media} media parts shrunk ({said}); the body as {path.name}", path,
        dataclasses.replace(done.before, lines=done.before.input_lines),
        dataclasses.replace(done.after, lines=done.after.input_lines),
        bars={metric: bar for _, r in done.parts for metric, bar in r.bars.items()},
        bytes_before=source.stat().st_size, bytes_after=path.stat().st_size,
        warnings=[*done.warnings, *done.left], parts=list(done.parts),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------------- table
