"""``mmtok price``: what requests cost on each model — media files, API request bodies, URLs, stdin."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import click
import typer

from mmtok.cli.common import (
    flushes_json_lines,
    max_pixels_option,
    one_output_format,
    print_error,
    print_warning,
    progress,
    resolve_max_pixels,
)
from mmtok.cli.price_inputs import Batch, Body, Files, Inputs, Reader
from mmtok.cli.quotes import Output, money
from mmtok.errors import MmtokError, PriceError

__all__ = ["money", "price"]
DEFAULT_MODEL = "gpt-4o"  # for media and text when no -m is given (a request body names its own)


INPUTS = typer.Argument(
    None,
    click_type=click.Path(),  # a path or a URL, kept as typed (a Path would fold https:// into https:/)
    metavar="[INPUTS]...",
    help="Files, folders, API request bodies (JSON), http(s) URLs, or - for stdin. Each is one request "
    "(see --one-request).",
    show_default=False,
)
MODELS = typer.Option(
    [], "--model", "-m", help="Model to price on (repeatable; a,b is two). Default: a body's own, else the "
    "settings' model or gpt-4o."
)  # fmt: skip
DETAIL = typer.Option(None, help="OpenAI: low|high|original|auto; Gemini media_resolution: low|medium|high|ultra_high.")
OUTPUT_TOKENS = typer.Option(
    None, "--output-tokens", min=0, help="Output tokens of each request (a body's output budget otherwise)."
)
PAGES = typer.Option(
    None, "--pages", help="Pages of each PDF, as they would be sent: 1-3,7 or 5- or -3 (others priced whole)."
)
ALLOW_PRIVATE = typer.Option(
    False, "--allow-private", help="URLs in bodies may reach loopback, private and link-local addresses."
)


@flushes_json_lines
def price(
    paths: list[str] = INPUTS,
    model: list[str] = MODELS,
    text: str | None = typer.Option(None, "--text", help="The prompt of every file request."),
    attach: list[Path] = typer.Option([], "--attach", "-a", help="Attach this file to every file request."),
    one_request: bool = typer.Option(False, "--one-request", help="All files, attachments and text form one call."),
    detail: str | None = DETAIL,
    at: str | None = typer.Option(None, "--at", help="Prices on this date (YYYY-MM-DD; default today)."),
    batch: bool = typer.Option(False, "--batch", help="The provider's batch rates."),
    tier: str | None = typer.Option(None, "--tier", help="Service tier: flex or priority (a body's own otherwise)."),
    output_tokens: int | None = OUTPUT_TOKENS,
    output_audio: bool = typer.Option(False, "--output-audio", help="The output is audio: audio-output rate."),
    cached: int = typer.Option(0, "--cached-input-tokens", min=0, help="More input tokens read from the cache."),
    cache_write: int = typer.Option(0, "--cache-write-tokens", min=0, help="More input tokens written to the cache."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML); its rows override."),
    max_cost: str | None = typer.Option(None, "--max-cost", help="Fail (exit 1) for a request over this many USD."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Fail for a request over N tokens."),
    per_line: bool = typer.Option(
        False, "--per-line", help="Batch files: the gates apply to each request, not the file."
    ),
    text_files: bool = typer.Option(False, "--text-files", help="Price text files found in folders as prompts."),
    pages: str | None = PAGES,
    offline: bool = typer.Option(False, "--offline", help="Read no URL (its part is left out, said)."),
    allow_private: bool = ALLOW_PRIVATE,
    json_out: bool = typer.Option(False, "--json", help="One JSON object per request and model on stdout."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout."),
    max_pixels: int | None = max_pixels_option(),
) -> None:
    """What each request costs on each model: tokens per part and modality, the rate applied and why, the working,
    and the price source with its date. A request is a media file (folders are walked), an API request body
    (OpenAI, Anthropic, Gemini: each part counted by its own rule, with the body's settings), a batch file (OpenAI,
    Anthropic or Gemini batch input: one quote at batch rates, a line per request), or a URL. Token files
    (.safetensors) are priced as their sequences."""
    one_output_format(json_out, csv_out)
    if not paths and text is None and not attach:
        raise typer.BadParameter("give files, folders, request bodies or URLs to price, --attach files, or --text")
    billing = dict(detail=detail, at=at, batch=batch, tier=tier, output_tokens=output_tokens or 0,
                   output_audio=output_audio, cached_input_tokens=cached, cache_write_tokens=cache_write)  # fmt: skip
    options, cost_gate = _checked(billing, prices, max_cost, pages)
    out = Output(json_out, csv_out, cost_gate, max_tokens)
    asked = _model_names(model)
    models = _usable_models(asked, prices, options, out) or [_configured_model()]

    limit = resolve_max_pixels(max_pixels)
    reader = Reader(limit, functools.partial(_policy, offline, allow_private, limit), text_files, pages)
    run = _Run(out, models, asked, options, prices, output_tokens is not None, reader)
    run.per_line = per_line
    try:
        bare = "<text>" if text or not attach else str(attach[0])  # the label of a request of --text / -a alone
        run.requests(paths or [], run.attachments(attach), text, one_request, bare)
    finally:
        reader.close()
    out.finish()
    if out.failures:
        raise typer.Exit(1)


def _checked(billing: dict[str, Any], prices: list[Path], max_cost: str | None, pages: str | None) -> tuple[Any, Any]:
    """The billing options and the cost gate; a bad option, sheet or range is one line and exit 2."""
    from mmtok.budgets.pricing import Options

    try:
        options = Options.of(**billing)
        _check_sheets(prices)
        _check_pages(pages)
        return options, _max_cost(max_cost)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None


class _Run:
    """One ``mmtok price`` run: file requests on the models asked (or the default), bodies on their own model and
    the models asked, each read once, priced as it is read."""

    def __init__(
        self, out: Output, models: list[str], asked: list[str], options: Any, prices: list[Path],
        output_given: bool, reader: Reader,
    ) -> None:  # fmt: skip
        self.out = out
        self.models = models
        self.asked = models if asked else []  # what a body is compared on, beside its own model
        self.options = options
        self.prices = prices
        self.output_given = output_given
        self.reader = reader
        self.found = Inputs()
        self.per_line = False  # batch files: --max-cost / --max-tokens on each request instead of the whole file

    def attachments(self, attach: list[Path]) -> list[Any]:
        """-a files, read once; one that cannot be read fails every request: one line, then stop."""
        try:
            return [self.reader.read(str(a), a, False, Inputs()).items[0] for a in attach]
        except MmtokError as e:
            print_error(e)
            raise typer.Exit(1) from None

    def requests(self, raw: list[str], attached: list[Any], text: str | None, one_request: bool, bare: str) -> None:
        from mmtok.budgets.pricing import price_requests

        files: list[Any] = []
        for job in self._jobs(raw, bare):
            if isinstance(job, Batch):
                self._batch(job)
            elif isinstance(job, Body):
                self.out.results(job.label, *self._body(job))
            elif one_request:
                files += job.items
            else:
                for item, results in price_requests([(job.label, [*job.items, *attached])], self.models,
                                                    self.options, text=text, prices=self.prices):  # fmt: skip
                    self.out.results(item, self.models, results)
        if one_request and (files or attached):
            for item, results in price_requests([("request", [*files, *attached])], self.models, self.options,
                                                text=text, prices=self.prices):  # fmt: skip
                self.out.results(item, self.models, results)
        _say_skipped(self.found)

    def _batch(self, job: Batch) -> None:
        """A batch file: its own quote and output (``cli/price_batch.py``)."""
        from mmtok.cli.price_batch import Gates, price_batch_file

        options = self.options
        ignored = [flag for flag, given in (("--output-tokens", self.output_given), ("--detail", options.detail),
                   ("--batch/--tier", options.option != "standard"), ("--output-audio", options.output_audio),
                   ("--cached-input-tokens", options.cached_input_tokens), ("--cache-write-tokens",
                   options.cache_write_tokens)) if given]  # fmt: skip
        if ignored:
            print_warning(f"{job.label}: {', '.join(ignored)} not applied: a batch's requests are priced with their "
                          "own settings, at batch rates")  # fmt: skip
        gates = Gates(self.out.max_cost, self.out.max_tokens, self.per_line)
        ok = price_batch_file(job.label, job.path, self.asked, gates, self.out.json_out, self.out.writer,
                              prices=self.prices, at=self.options.at, policy=self.reader.policy)  # fmt: skip
        self.out.failures += not ok

    def _jobs(self, raw: list[str], bare_label: str) -> Iterator[Files | Body | Batch]:
        """The requests the inputs make, read one by one under a progress bar; what cannot be read is one line."""
        entries = list(self.reader.entries(raw))  # walked first, so the bar has a total
        for label, item, walked in progress(entries, "pricing"):
            try:
                job = self.reader.read(label, item, walked, self.found)
            except MmtokError as e:
                self.out.error(e, item=label, json=False)
                continue
            if job is not None:
                yield job
        for label in self.found.not_bodies:
            print_warning(f"{label}: JSON, but not a request body of a known API: priced as a text prompt")
        if not raw:  # --text and --attach alone: one request
            yield Files(bare_label, [])

    def _body(self, job: Body) -> tuple[list[str], list[Any] | MmtokError]:
        """A body measured once (its URLs read once), then quoted on its own model and each model asked."""
        from mmtok.budgets.pricing import quote_request, resolve
        from mmtok.request import measuring

        request = job.request
        names = list(dict.fromkeys([request.model, *self.asked] if request.model else self.asked))
        if not names:
            where = " (a Gemini generateContent body carries it in the URL)" if request.api == "gemini-generate" else ""
            return [], PriceError(f"the body names no model{where}: give one with -m")
        results: list[Any] = []
        policy = dataclasses.replace(self.reader.policy, paths_under=job.folder)  # a file beside the body, or in
        with measuring(request.parts, policy) as measured:  # a folder under it: never above it
            for name in names:
                try:
                    model = resolve(name, self.prices)
                    results.append(
                        quote_request(request, measured, model, self.options, output_given=self.output_given)
                    )
                except MmtokError as e:
                    results.append(e)
        return names, results


def _policy(offline: bool, allow_private: bool, max_pixels: int) -> Any:
    from mmtok.media.remote import UrlPolicy
    from mmtok.request import Policy

    return Policy(urls=UrlPolicy(read=not offline, allow_private=allow_private), max_pixels=max_pixels)


def _say_skipped(found: Inputs) -> None:
    skipped = found.skipped_text
    if skipped:
        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        print_warning(f"skipped {len(skipped)} text file(s) found in folders: {shown} (--text-files prices them)")


def _configured_model() -> str:
    """The model of the settings file (``mmtok.config``, shared with shrink and the MCP server), else gpt-4o."""
    from mmtok.config import load_config
    from mmtok.errors import ConfigError

    try:
        return load_config().model_or(DEFAULT_MODEL)
    except ConfigError as e:
        print_error(e)
        raise typer.Exit(2) from None


def _model_names(given: list[str]) -> list[str]:
    """``-m a,b -m c`` as [a, b, c], each once."""
    names = [name.strip() for value in given for name in value.split(",")]
    return list(dict.fromkeys(name for name in names if name))


def _max_cost(value: str | None) -> Decimal | None:
    if value is None:
        return None
    try:
        cost = Decimal(value.removeprefix("$"))
    except InvalidOperation:
        raise PriceError(f"--max-cost must be an amount in USD like 0.05, got {value!r}") from None
    if not cost.is_finite() or cost < 0:
        raise PriceError(f"--max-cost must be a non-negative amount in USD, got {value!r}")
    return cost


def _check_pages(pages: str | None) -> None:
    """A malformed --pages is a usage error, said once (a page past a file's end is that file's error)."""
    if pages is not None:
        from mmtok.media.document import MAX_PAGES, parse_pages

        try:
            parse_pages(pages, MAX_PAGES)  # each file's own count is checked when it is read
        except ValueError as e:
            raise PriceError(f"--pages: {e}") from None


def _check_sheets(prices: list[Path]) -> None:
    """A bad sheet is one line, not one per model."""
    from mmtok.budgets.pricing.sheets import sheets

    sheets(tuple(prices))


def _usable_models(names: list[str], prices: list[Path], options: Any, out: Output) -> list[str]:
    """The models that can be priced; an unknown one (or one without the asked-for prices) is one line and the
    others go on. None usable, of some asked, is a usage error."""
    from mmtok.budgets.pricing import rate_card, resolve
    from mmtok.budgets.pricing.names import closest_names

    usable: list[str] = []
    seen: set[str] = set()
    for name in names:
        try:
            model = resolve(name, prices)
            if model.name in seen:  # openai/gpt-4o and GPT-4O are one model: priced once
                continue
            seen.add(model.name)
            if model.family is None and model.entry is None and model.row is None:
                closest = closest_names(model.name, model.prices)
                raise PriceError(f"unknown model {name!r}{closest} (see `mmtok models`)")
            rate_card(model, options.at, options.option)
            usable.append(name)
        except PriceError as e:
            out.error(e, model=name)
    if names and not usable:
        raise typer.Exit(2)
    return usable
