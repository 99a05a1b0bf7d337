"""A batch file's quote: every request priced as a body is, at the provider's batch rates, summed per model.

    >>> quote = price_batch("batch.jsonl")                                         # doctest: +SKIP
    >>> quote.total_cost, quote.standard_cost, quote.discount, quote.totals        # doctest: +SKIP

Each request of the file (:mod:`mmtok.request.batch`) is read by the one body parser and quoted by
:func:`mmtok.budgets.pricing.quote_request` with the body's own settings and output bound, on its own model (and on
each model asked), at the batch rates genai-prices gives (``Options(option="batch")``) and at the standard rates
beside them, so the discount is the two quotes' difference, not an assumed 50%. A model with no batch rates in the
price data is priced at its standard rates and says so. A request that cannot be read or priced is named by its
line; the rest are priced. Memory holds one request at a time (and, to quote requests of the same shape once, a
bounded cache of their quotes); the per-line results are kept only when asked (``keep_lines``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mmtok.budgets import formulas as F
from mmtok.budgets.pricing.models import Model, PriceSheets, rate_card, resolve
from mmtok.budgets.pricing.options import Options
from mmtok.budgets.pricing.quote import Quote
from mmtok.budgets.pricing.requests import quote_request
from mmtok.errors import MmtokError, PriceError
from mmtok.request import Policy, Request, measuring, parse_body
from mmtok.request.batch import BadLine, BatchFile, BatchLine, open_batch

MEMO_QUOTES = 4096  # quotes kept for requests of the same shape (a template filled with the same media and text)
OPTIONS = ("batch", "standard")


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
    """Quotes requests on models at batch and standard rates; models resolved once, and the quotes of requests of
    one shape (the same parts, settings, text and measured media) computed once (:data:`MEMO_QUOTES`)."""

    def __init__(self, prices: PriceSheets = (), at: dt.date | str | None = None, policy: Policy | None = None):
        self.prices = prices
        self.options = {option: Options.of(at=at, batch=option == "batch") for option in OPTIONS}
        self.policy = policy or Policy()
        self.models: dict[str, Model | PriceError] = {}
        self.no_batch_rates: set[str] = set()  # models priced at standard rates for want of batch ones
        self.memo: OrderedDict[Any, tuple[Quote, Quote]] = OrderedDict()

    def model(self, name: str) -> Model:
        found = self.models.get(name)
        if found is None:
            try:
                found = resolve(name, self.prices)
                rate_card(found, self.options["standard"].at, "standard")
                try:
                    rate_card(found, self.options["batch"].at, "batch")
                except PriceError:
                    self.no_batch_rates.add(name)
            except PriceError as e:
                found = e
            self.models[name] = found
        if isinstance(found, PriceError):
            raise found
        return found

    def quote(self, line: BatchLine, names: Sequence[str]) -> list[LinePrice | LineError]:
        """The line on each model named (the first is the one it goes to), or why it cannot be priced there."""
        try:
            request = parse_body(line.body, api=line.api, source=f"line {line.number}")
        except MmtokError as e:
            return [LineError(line.number, line.custom_id, "", str(e).removeprefix(f"line {line.number}: "))]
        found: list[LinePrice | LineError] = []
        with measuring(request.parts, self.policy) as measured:
            shape = _shape(request, measured)
            for name in names:
                try:
                    found.append(self._priced(line, request, measured, name, shape, name == names[0]))
                except MmtokError as e:
                    found.append(LineError(line.number, line.custom_id, name, str(e)))
        return found

    def _priced(self, line: BatchLine, request: Request, measured: Any, name: str, shape: Any, own: bool) -> LinePrice:
        model = self.model(name)
        key = None if shape is None else (name, shape)
        quotes = self.memo.get(key) if key is not None else None
        if quotes is None:
            batch_option = "standard" if name in self.no_batch_rates else "batch"
            quotes = (quote_request(request, measured, model, self.options[batch_option]),
                      quote_request(request, measured, model, self.options["standard"]))  # fmt: skip
            if key is not None:
                self.memo[key] = quotes
                if len(self.memo) > MEMO_QUOTES:
                    self.memo.popitem(last=False)
        return _line_price(line, name, own, *quotes)


def _line_price(line: BatchLine, name: str, own: bool, batch: Quote, standard: Quote) -> LinePrice:
    tokens: dict[str, int] = {}
    for part in batch.lines:
        tokens[part.modality] = tokens.get(part.modality, 0) + part.tokens
    other = batch.total_cost - batch.input_cost - batch.output_cost  # a per-request fee
    return LinePrice(line.number, line.custom_id, name, tokens, batch.input_tokens, batch.output_tokens,
                     batch.input_cost + other, batch.output_cost, standard.total_cost, batch.label, batch.option,
                     own, batch.model_ref, batch.source, batch.as_of.isoformat(), batch.missing,
                     batch.warnings)  # fmt: skip


REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(Request) if f.compare and f.name not in ("parts", "source"))


def _shape(request: Request, measured: Sequence[Any]) -> Any:
    """What a request's quote depends on, hashable: its settings, each part without its bytes, and what measuring
    found (an image's size, format and bytes; a text's words). None where a part is media of another kind (its
    quote is not kept)."""
    found = []
    for m in measured:
        media = m.media
        if media is not None and media.kind not in ("image", "text"):
            return None
        part = m.part
        found.append((part.kind, part.where, part.role, part.text, part.detail, part.uncountable, part.clip,
                      media, m.error, m.notes))  # fmt: skip
    try:
        key = (tuple(getattr(request, name) for name in REQUEST_FIELDS), tuple(found))
        hash(key)
    except TypeError:
        return None
    return key


# ------------------------------------------------------------------------------------------------------ the file
def iter_batch(
    batch: BatchFile, models: Sequence[str] = (), quoter: LineQuoter | None = None, start: int = 0
) -> Iterator[LinePrice | LineError | BadLine]:
    """Each request of ``batch`` priced on its own model and each of ``models``, in file order: one result per
    request and model, or the request's :class:`BadLine`."""
    quoter = quoter or LineQuoter()
    asked = list(dict.fromkeys(models))
    for line in batch.lines(start):
        if isinstance(line, BadLine):
            yield line
            continue
        if line.unpriced:
            yield LineError(line.number, line.custom_id, line.model or "", line.unpriced)
            continue
        names = list(dict.fromkeys([line.model, *asked] if line.model else asked))
        if not names:
            yield LineError(line.number, line.custom_id, "", _no_model(batch))
            continue
        yield from quoter.quote(line, names)


def _no_model(batch: BatchFile) -> str:
    if batch.provider.startswith("gemini"):
        return "a Gemini batch request names no model (the batch's model is in its URL): give one with -m"
    return "the request names no model: give one with -m"


def price_batch(
    path: str | os.PathLike[str],
    model: str | Sequence[str] | None = None,
    *,
    prices: PriceSheets = (),
    at: dt.date | str | None = None,
    policy: Policy | None = None,
    keep_lines: bool = True,
    on_result: Callable[[LinePrice | LineError | BadLine], None] | None = None,
) -> BatchQuote:
    """Price a batch file (OpenAI Batch input, Anthropic Message Batches, Gemini batch input or inline requests):
    per-model totals at the provider's batch rates and at standard rates, each bad line named, the provider's file
    limits checked first. ``model``: price each request on this model (or these) as well as its own (Gemini batch
    requests name none: give one). ``keep_lines``: keep each line's price in ``.lines``; ``on_result`` sees each
    result as it comes (what the CLI streams)."""
    batch = open_batch(path)
    survey = batch.survey()
    quote = BatchQuote(str(path), batch.format, batch.provider, survey.size_bytes, limits=list(survey.problems))
    names = [model] if isinstance(model, str) else list(model or ())
    quoter = LineQuoter(prices, at, policy)
    for result in iter_batch(batch, names, quoter):
        add_result(quote, batch, result, quoter, keep_lines)
        if on_result is not None:
            on_result(result)
    quote.warnings += [f"{name}: no batch rates are known (genai-prices, LiteLLM's map): priced at standard rates"
                       for name in sorted(quoter.no_batch_rates)]  # fmt: skip
    return quote


def add_result(
    quote: BatchQuote, batch: BatchFile, result: LinePrice | LineError | BadLine, quoter: LineQuoter, keep: bool
) -> None:
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
        model = quoter.models.get(result.model)
        ref = model.name if isinstance(model, Model) else result.model
        quote.totals.setdefault(result.model, ModelTotal(result.model)).add(result, ref)
        if keep:
            quote.lines.append(result)
    else:
        quote.errors.append(str(result))
