"""``mmtok price``: what requests cost on each model — media files, API request bodies, URLs, stdin."""

from __future__ import annotations

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
from mmtok.cli.price_inputs import Body, Files, Inputs, Reader
from mmtok.cli.quotes import Output, money
from mmtok.errors import MmtokError, PriceError

__all__ = ["money", "price"]
DEFAULT_MODEL = "gpt-4o"  # for media and text when no -m is given (a request body names its own)


@flushes_json_lines
def price(
    paths: list[str] = typer.Argument(
        None,
        click_type=click.Path(),  # a path or a URL, kept as typed (a Path would fold https:// into https:/)
        metavar="[INPUTS]...",
        help="Files, folders, API request bodies (JSON), http(s) URLs, or - for stdin. Each is one request "
        "(see --one-request).",
        show_default=False,
    ),
    model: list[str] = typer.Option(
        [],
        "--model",
        "-m",
        help="Model to price on (repeatable; a,b is two). Default: a body's own, else the settings' model or gpt-4o.",
    ),
    text: str | None = typer.Option(None, "--text", help="The prompt of every file request."),
    attach: list[Path] = typer.Option([], "--attach", "-a", help="Attach this file to every file request."),
    one_request: bool = typer.Option(False, "--one-request", help="All files, attachments and text form one call."),
    detail: str | None = typer.Option(
        None, help="OpenAI: low|high|original|auto; Gemini media_resolution: low|medium|high|ultra_high."
    ),
    at: str | None = typer.Option(None, "--at", help="Prices on this date (YYYY-MM-DD; default today)."),
    batch: bool = typer.Option(False, "--batch", help="The provider's batch rates."),
    tier: str | None = typer.Option(None, "--tier", help="Service tier: flex or priority (a body's own otherwise)."),
    output_tokens: int | None = typer.Option(
        None, "--output-tokens", min=0, help="Output tokens of each request (a body's output budget otherwise)."
    ),
    output_audio: bool = typer.Option(False, "--output-audio", help="The output is audio: audio-output rate."),
    cached: int = typer.Option(0, "--cached-input-tokens", min=0, help="More input tokens read from the cache."),
    cache_write: int = typer.Option(0, "--cache-write-tokens", min=0, help="More input tokens written to the cache."),
    prices: list[Path] = typer.Option([], "--prices", help="Your own price sheet (TOML); its rows override."),
    max_cost: str | None = typer.Option(None, "--max-cost", help="Fail (exit 1) for a request over this many USD."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Fail for a request over N tokens."),
    text_files: bool = typer.Option(False, "--text-files", help="Price text files found in folders as prompts."),
    pages: str | None = typer.Option(
        None, "--pages", help="Pages of each PDF, as they would be sent: 1-3,7 or 5- or -3 (others priced whole)."
    ),
    offline: bool = typer.Option(False, "--offline", help="Read no URL (its part is left out, said)."),
    allow_private: bool = typer.Option(
        False, "--allow-private", help="URLs in bodies may reach loopback, private and link-local addresses."
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per request and model on stdout."),
    csv_out: bool = typer.Option(False, "--csv", help="CSV on stdout."),
    max_pixels: int | None = max_pixels_option(),
) -> None:
    """What each request costs on each model: tokens per part and modality, the rate applied and why, the working,
    and the price source with its date. A request is a media file (folders are walked), an API request body
    (OpenAI, Anthropic, Gemini: each part counted by its own rule, with the body's settings), or a URL. Token files
    (.safetensors) are priced as their sequences."""
    from mmtok.budgets.pricing import Options

    one_output_format(json_out, csv_out)
    limit = resolve_max_pixels(max_pixels)
    if not paths and text is None and not attach:
        raise typer.BadParameter("give files, folders, request bodies or URLs to price, --attach files, or --text")
    try:
        options = Options.of(
            detail=detail,
            at=at,
            batch=batch,
            tier=tier,
            output_tokens=output_tokens or 0,
            output_audio=output_audio,
            cached_input_tokens=cached,
            cache_write_tokens=cache_write,
        )
        _check_sheets(prices)
        cost_gate = _max_cost(max_cost)
        _check_pages(pages)
    except PriceError as e:
        print_error(e)
        raise typer.Exit(2) from None
    out = Output(json_out, csv_out, cost_gate, max_tokens)
    asked = _model_names(model)
    default_model = _configured_model()
    models = _usable_models(asked, prices, options, out)
    from mmtok.request.measure import Copies

    copies = Copies()
    try:
        policy = _policy(offline, allow_private, limit)
        reader = Reader(limit, policy, copies, text_files, pages)
        try:  # read once, with the pixel limit; a file that cannot be read fails every request: one line, then stop
            attached = [reader.read(str(a), a, False, Inputs()).items[0] for a in attach]
        except MmtokError as e:
            print_error(e)
            raise typer.Exit(1) from None
        found = Inputs()
        jobs = _jobs(reader, paths or [], found, out, "<text>" if text or not attach else str(attach[0]))
        bodies = _BodyPricing(models if asked else [], options, prices, policy, output_tokens is not None)
        _price(jobs, attached, one_request, text, models or [default_model], options, prices, out, bodies)
        _say_skipped(found)
    finally:
        copies.close()
    out.finish()
    if out.failures:
        raise typer.Exit(1)


def _price(
    jobs: Iterator[Files | Body],
    attached: list[Any],
    one_request: bool,
    text: str | None,
    models: list[str],
    options: Any,
    prices: list[Path],
    out: Output,
    bodies: _BodyPricing,
) -> None:
    """Each request priced on its models as it is read: file requests on the models asked (or the default), bodies
    on their own model and the models asked."""
    from mmtok.budgets.pricing import price_requests

    files = []
    for job in jobs:
        if isinstance(job, Body):
            out.results(job.label, *bodies.quotes(job))
        elif one_request:
            files += job.items
        else:
            for item, results in price_requests([(job.label, [*job.items, *attached])], models, options, text=text,
                                                prices=prices):  # fmt: skip
                out.results(item, models, results)
    if one_request and (files or attached):
        for item, results in price_requests([("request", [*files, *attached])], models, options, text=text,
                                            prices=prices):  # fmt: skip
            out.results(item, models, results)


class _BodyPricing:
    """Bodies priced on their own model and the models asked, each measured once (its URLs read once)."""

    def __init__(self, asked: list[str], options: Any, prices: list[Path], policy: Any, output_given: bool) -> None:
        self.asked = asked
        self.options = options
        self.prices = prices
        self.policy = policy
        self.output_given = output_given

    def quotes(self, job: Body) -> tuple[list[str], list[Any] | MmtokError]:
        from mmtok.budgets.pricing import quote_request, resolve
        from mmtok.request import measuring

        request = job.request
        names = list(dict.fromkeys([request.model, *self.asked] if request.model else self.asked))
        if not names:
            return [], PriceError("the body names no model (a Gemini body carries it in the URL): give one with -m")
        results: list[Any] = []
        with measuring(request.parts, self.policy) as measured:
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


def _jobs(reader: Reader, raw: list[str], found: Inputs, out: Output, bare_label: str) -> Iterator[Files | Body]:
    """The requests the inputs make, read one by one under a progress bar; what cannot be read is one line."""
    entries = list(reader.entries(raw))  # walked first, so the bar has a total
    for label, item, walked in progress(entries, "pricing"):
        try:
            job = reader.read(label, item, walked, found)
        except MmtokError as e:
            out.error(e, item=label, json=False)
            continue
        if job is not None:
            yield job
    for label in found.not_bodies:
        print_warning(f"{label}: JSON, but not a request body of a known API: priced as a text prompt")
    if not raw:  # --text and --attach alone: one request
        yield Files(bare_label, [])


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
        from mmtok.media.document import parse_pages

        try:
            parse_pages(pages, 10**9)
        except ValueError as e:
            raise PriceError(f"--pages: {e}") from None


def _check_sheets(prices: list[Path]) -> None:
    """A bad sheet is one line, not one per model."""
    from mmtok.budgets.sheets import sheets

    sheets(tuple(prices))


def _usable_models(names: list[str], prices: list[Path], options: Any, out: Output) -> list[str]:
    """The models that can be priced; an unknown one (or one without the asked-for prices) is one line and the
    others go on. None usable, of some asked, is a usage error."""
    from mmtok.budgets.pricing import rate_card, resolve
    from mmtok.budgets.pricing.names import closest_names

    usable = []
    for name in names:
        try:
            model = resolve(name, prices)
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
