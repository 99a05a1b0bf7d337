"""A batch file's quote: every request priced as a body is, at the provider's batch rates, summed per model.

    >>> quote = price_batch("batch.jsonl")                                         # doctest: +SKIP
    >>> quote.total_cost, quote.standard_cost, quote.discount, quote.totals        # doctest: +SKIP

Each request of the file (:mod:`mmtok.request.batch`) is read by the one body parser and quoted by
:func:`mmtok.budgets.pricing.quote_request` with the body's own settings and output bound, on its own model (and on
each model asked), at the batch rates genai-prices gives (``Options(option="batch")``) and at the standard rates
beside them (each line's tokens at the standard card's rate of the same name, or a second quote where the cards
differ in shape), so the discount is what the rates say, not an assumed 50%. A model with no batch rates in the
price data is priced at its standard rates and says so. A request that cannot be read or priced is named by its
line; the rest are priced. Memory holds one request at a time (a few chunks of them with worker processes); the
per-line results are kept only when asked (``keep_lines``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.models import INPUT_RATES, Model, PriceSheets, rate_card, resolve
from mmtok.budgets.pricing.money import MILLION, RateCard
from mmtok.budgets.pricing.options import Options
from mmtok.budgets.pricing.quote import OUTPUT_KINDS, Quote
from mmtok.budgets.pricing.requests import quote_request
from mmtok.errors import MmtokError, PriceError
from mmtok.request import Policy, Request, measuring, parse_body
from mmtok.request.batch import BadLine, BatchFile, BatchLine, open_batch

OPTIONS = ("batch", "standard")
POOL_FROM_REQUESTS = 2000  # a file of fewer requests is priced in this process (workers cost more to start)


@dataclass(frozen=True)
class LinePrice:
    """One request of the file on one model."""

    number: int
    custom_id: str
    model: str  # as asked
    tokens: dict[str, int]  # modality -> tokens (the output bound included, as "output")
    input_tokens: int
    output_tokens: int
    input_cost: Decimal  # at the batch rates (the standard ones where the model has none)
    output_cost: Decimal
    standard_cost: Decimal
    label: str
    option: str  # batch, or standard where no batch rates are known
    own: bool = True  # the model the request goes to (its own, or the one given for a request naming none)
    model_ref: str = ""  # as the price source names the model
    money_source: str = ""
    as_of: str = ""
    missing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def cost(self) -> Decimal:
        return self.input_cost + self.output_cost

    @property
    def complete(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["line"] = out.pop("number")
        for key in ("input_cost", "output_cost", "standard_cost"):
            out[key] = str(out[key])
        out["cost"] = str(self.cost)
        out["complete"], out["missing"], out["warnings"] = self.complete, list(self.missing), list(self.warnings)
        return out


@dataclass(frozen=True)
class LineError:
    """A request of the file that could not be priced on a model (the line itself was read)."""

    number: int
    custom_id: str
    model: str
    problem: str

    def __str__(self) -> str:
        on = f" on {self.model}" if self.model else ""
        return f"line {self.number} ({self.custom_id}){on}: {self.problem}"


@dataclass
class ModelTotal:
    """A model's share of the file: its requests, tokens and cost at batch and standard rates."""

    model: str
    model_ref: str = ""
    option: str = "batch"
    own: bool = True  # the requests' own model (False: a model they are compared on, -m)
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    standard_cost: Decimal = Decimal(0)
    label: str = "exact"
    incomplete: int = 0  # requests with a part left out of their quote

    @property
    def discount(self) -> Decimal:
        return self.standard_cost - self.cost

    def add(self, line: LinePrice, model_ref: str) -> None:
        self.model_ref = self.model_ref or model_ref
        self.option = line.option
        self.own = self.own and line.own
        self.requests += 1
        self.input_tokens += line.input_tokens
        self.output_tokens += line.output_tokens
        self.cost += line.cost
        self.standard_cost += line.standard_cost
        self.label = F.weakest([self.label, line.label])
        self.incomplete += not line.complete

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("cost", "standard_cost"):
            out[key] = str(out[key])
        out["discount"] = str(self.discount)
        return out


@dataclass
class BatchQuote:
    """A batch file's quote: per-model totals, the lines that failed, the provider limits the file breaks."""

    path: str
    format: str
    provider: str
    size_bytes: int = 0
    requests: int = 0  # requests read (good or not)
    totals: dict[str, ModelTotal] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # each bad line or unpriced request, named by its number
    limits: list[str] = field(default_factory=list)  # the provider limits the file breaks
    warnings: list[str] = field(default_factory=list)
    lines: list[LinePrice] = field(default_factory=list)  # kept only with keep_lines
    last_line: int = field(default=0, repr=False)  # the number of the request last counted

    @property
    def total_cost(self) -> Decimal:
        """What the file costs at batch rates, each request on its own model (models given only to compare on are
        in ``totals``)."""
        return sum((t.cost for t in self.totals.values() if t.own), Decimal(0))

    @property
    def standard_cost(self) -> Decimal:
        return sum((t.standard_cost for t in self.totals.values() if t.own), Decimal(0))

    @property
    def discount(self) -> Decimal:
        return self.standard_cost - self.total_cost

    @property
    def ok(self) -> bool:
        return not self.errors and not self.limits

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "provider": self.provider,
            "size_bytes": self.size_bytes,
            "requests": self.requests,
            "total_cost": str(self.total_cost),
            "standard_cost": str(self.standard_cost),
            "discount": str(self.discount),
            "models": [t.to_dict() for t in self.totals.values()],
            "errors": self.errors,
            "limits": self.limits,
            "warnings": self.warnings,
        }


# ------------------------------------------------------------------------------------------------------ quoting
class LineQuoter:
    """Quotes requests on models at batch rates, with the standard cost beside; models and their rate cards resolved
    once per file."""

    def __init__(self, prices: PriceSheets = (), at: dt.date | str | None = None, policy: Policy | None = None):
        self.prices = prices
        self.options = {option: Options.of(at=at, batch=option == "batch") for option in OPTIONS}
        self.policy = policy or Policy()
        self.models: dict[str, tuple[Model, RateCard | None, RateCard] | PriceError] = {}

    @property
    def config(self) -> dict[str, Any]:
        """What a worker process needs to make the same quoter."""
        return {"prices": self.prices, "at": self.options["batch"].at, "policy": self.policy}

    def model(self, name: str) -> tuple[Model, RateCard | None, RateCard]:
        """The model, its batch rate card (None where the price data has no batch rates) and its standard one."""
        found = self.models.get(name)
        if found is None:
            try:
                model = resolve(name, self.prices)
                standard = rate_card(model, self.options["standard"].at, "standard")
                try:
                    batch: RateCard | None = rate_card(model, self.options["batch"].at, "batch")
                except PriceError:
                    batch = None
                found = (model, batch, standard)
            except PriceError as e:
                found = e
            self.models[name] = found
        if isinstance(found, PriceError):
            raise found
        return found

    def quote(self, line: BatchLine, names: Sequence[str]) -> list[LinePrice | LineError]:
        """The line on each model named (the first is the one it goes to), or why it cannot be priced there; never
        raises (a fault in mmtok is that line's error, and the batch goes on)."""
        try:
            return self._quote(line, names)
        except Exception as e:  # one line must not stop the file
            problem = f"mmtok failed to price this line ({type(e).__name__}: {e}): please report it"
            return [LineError(line.number, line.custom_id, names[0] if names else "", problem)]

    def _quote(self, line: BatchLine, names: Sequence[str]) -> list[LinePrice | LineError]:
        try:
            request = parse_body(line.body, api=line.api, source=f"line {line.number}")
        except MmtokError as e:
            return [LineError(line.number, line.custom_id, "", str(e).removeprefix(f"line {line.number}: "))]
        found: list[LinePrice | LineError] = []
        with measuring(request.parts, self.policy) as measured:
            for name in names:
                try:
                    found.append(self._priced(line, request, measured, name, name == names[0]))
                except MmtokError as e:
                    found.append(LineError(line.number, line.custom_id, name, str(e)))
        return found

    def _priced(self, line: BatchLine, request: Request, measured: Any, name: str, own: bool) -> LinePrice:
        model, batch_card, standard_card = self.model(name)
        option = "batch" if batch_card is not None else "standard"
        quote = quote_request(request, measured, model, self.options[option])
        standard = None if batch_card is None else standard_cost(quote, batch_card, standard_card)
        if standard is None:
            standard = quote_request(request, measured, model, self.options["standard"]).total_cost
        return _line_price(line, name, own, quote, standard)


def standard_cost(quote: Quote, batch: RateCard, standard: RateCard) -> Decimal | None:
    """What a batch quote's lines cost at the standard rates (:func:`cost_at`)."""
    return cost_at(quote, batch, standard)


def cost_at(quote: Quote, priced: RateCard, other: RateCard) -> Decimal | None:
    """What a quote priced on card ``priced`` costs on card ``other`` (a model's batch and standard rates): each
    line's tokens at the rate of the same name in the same tier. None where the two cards are not alike enough to
    say so (other tiers, per-item rates, a part left out): quote the request again instead."""
    tiers = [t.above_input_tokens for t in priced.tiers]
    if quote.missing or priced.per_item or other.per_item or tiers != [t.above_input_tokens for t in other.tiers]:
        return None
    index = priced.tiers.index(priced.tier_for(quote.input_tokens))
    rates = other.tiers[index].rates
    total = Decimal(0)
    for line in quote.lines:
        if line.modality == "request":
            total += other.request_fee
            continue
        name = line.modality if line.modality in OUTPUT_KINDS else INPUT_RATES.get(line.modality, line.modality)
        rate = rates.get(name)
        if rate is None:
            return None
        total += line.tokens * rate / MILLION
    return total


def _line_price(line: BatchLine, name: str, own: bool, batch: Quote, standard: Decimal) -> LinePrice:
    """A line's price from its quote, in one pass over the quote's lines (a per-request fee counts as input)."""
    tokens: dict[str, int] = {}
    input_tokens = output_tokens = 0
    input_cost = output_cost = Decimal(0)
    for part in batch.lines:
        tokens[part.modality] = tokens.get(part.modality, 0) + part.tokens
        if part.modality in OUTPUT_KINDS:
            output_tokens += part.tokens
            output_cost += part.cost
        else:
            input_tokens += part.tokens
            input_cost += part.cost
    return LinePrice(line.number, line.custom_id, name, tokens, input_tokens, output_tokens, input_cost, output_cost,
                     standard, batch.label, batch.option, own, batch.model_ref, batch.source,
                     batch.as_of.isoformat(), batch.missing, batch.warnings)  # fmt: skip


def line_results(line: BatchLine | BadLine, asked: Sequence[str], quoter: LineQuoter, provider: str) -> list[Any]:
    """A request's results: its :class:`BadLine`, or its price (or error) on its own model and each asked."""
    if isinstance(line, BadLine):
        return [line]
    if line.unpriced:
        return [LineError(line.number, line.custom_id, line.model or "", line.unpriced)]
    names = list(dict.fromkeys([line.model, *asked] if line.model else asked))
    if not names:
        return [LineError(line.number, line.custom_id, "", _no_model(provider))]
    return quoter.quote(line, names)


def _no_model(provider: str) -> str:
    if provider.startswith("gemini"):
        return "a Gemini batch request names no model (the batch's model is in its URL): give one with -m"
    return "the request names no model: give one with -m"


# ------------------------------------------------------------------------------------------------------ the file
def iter_batch(
    batch: BatchFile,
    models: Sequence[str] = (),
    quoter: LineQuoter | None = None,
    start: int = 0,
    workers: int = 1,
) -> Iterator[LinePrice | LineError | BadLine]:
    """Each request of ``batch`` priced on its own model and each of ``models``, in file order: one result per
    request and model, or the request's :class:`BadLine`. ``workers`` > 1 prices on that many processes
    (:mod:`mmtok.budgets.pricing.batch_workers`), in the same order."""
    quoter = quoter or LineQuoter()
    asked = list(dict.fromkeys(models))
    if workers > 1:
        from mmtok.budgets.pricing.batch_workers import pooled

        yield from pooled(batch, asked, quoter.config, workers, start)
        return
    for line in batch.lines(start):
        yield from line_results(line, asked, quoter, batch.provider)


def default_workers(requests: int | None) -> int:
    """Processes for a file of ``requests``: one for a small file, else one per CPU (at most 8)."""
    if requests is None or requests < POOL_FROM_REQUESTS:
        return 1
    return max(1, min(8, os.cpu_count() or 1))


def price_batch(
    path: str | os.PathLike[str],
    model: str | Sequence[str] | None = None,
    *,
    prices: PriceSheets = (),
    at: dt.date | str | None = None,
    policy: Policy | None = None,
    keep_lines: bool = True,
    workers: int = 0,
    on_result: Callable[[LinePrice | LineError | BadLine], None] | None = None,
) -> BatchQuote:
    """Price a batch file (OpenAI Batch input, Anthropic Message Batches, Gemini batch input or inline requests):
    per-model totals at the provider's batch rates and at standard rates, each bad line named, the provider's file
    limits checked first. ``model``: price each request on this model (or these) as well as its own (Gemini batch
    requests name none: give one). ``keep_lines``: keep each line's price in ``.lines``; ``on_result`` sees each
    result as it comes (what the CLI streams); ``workers``: pricing processes (0: one per CPU for a large file)."""
    batch = open_batch(path)
    survey = batch.survey()
    quote = BatchQuote(str(path), batch.format, batch.provider, survey.size_bytes, limits=list(survey.problems))
    names = [model] if isinstance(model, str) else list(model or ())
    quoter = LineQuoter(prices, at, policy)
    for result in iter_batch(batch, names, quoter, workers=workers or default_workers(survey.requests)):
        add_result(quote, batch, result, keep_lines)
        if on_result is not None:
            on_result(result)
    finish(quote)
    return quote


def add_result(quote: BatchQuote, batch: BatchFile, result: LinePrice | LineError | BadLine, keep: bool) -> None:
    """One result into the file's quote: a request counted once (whatever the models), a price added to its
    model's total, a failure named."""
    if result.number != quote.last_line:
        quote.last_line = result.number
        quote.requests += 1
        limit = batch.limits.max_requests
        if batch.is_document and limit is not None and quote.requests == limit + 1:
            quote.limits.append(f"over {limit:,} requests: the {batch.limits.provider} batch API takes at most "
                                f"{limit:,} per batch ({batch.limits.source}); split it")  # fmt: skip
    if isinstance(result, LinePrice):
        quote.totals.setdefault(result.model, ModelTotal(result.model)).add(result, result.model_ref)
        if keep:
            quote.lines.append(result)
    else:
        quote.errors.append(str(result))


def finish(quote: BatchQuote) -> None:
    """The file quote's closing warnings: the models priced at standard rates for want of batch ones."""
    quote.warnings += [f"{t.model}: no batch rates are known (genai-prices, LiteLLM's map): priced at standard rates"
                       for t in quote.totals.values() if t.option != "batch"]  # fmt: skip
