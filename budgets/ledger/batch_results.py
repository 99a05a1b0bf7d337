"""A batch's results as ledger rows: each output line's bill paired with its request by custom_id, priced as the
proxy prices a call, so ``mmtok calibrate`` fits batch bills exactly as it fits a ledger's and ``mmtok ledger import``
adds batch spend to the reports and budgets.

Output files (each provider's page read 2026-12-05):

- OpenAI: JSON Lines of ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``; the body
  is the endpoint's response with its ``usage`` (platform.openai.com/docs/guides/batch, "retrieve the results").
- Anthropic: the results of ``client.messages.batches.results`` (its ``results_url``), JSON Lines of
  ``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored" | "canceled" | "expired"}}``
  (platform.claude.com/docs/en/build-with-claude/batch-processing, "Retrieving batch results").
- Gemini: the output file, JSON Lines of ``{"key", "response"}`` (a GenerateContentResponse with ``usageMetadata``)
  or ``{"key", "error" | "status"}``; or a batch job's inline responses (``inlinedResponses``: ``{"response" |
  "error", "metadata": {"key"}}``, matched to the inline requests by key, else by order)
  (ai.google.dev/gemini-api/docs/batch-api).

Usage is read by :func:`mmtok.budgets.ledger.usage.usage_from_body`, the proxy's own reader; the prediction is the
request quoted at batch rates (:mod:`mmtok.budgets.pricing.batch`) and the bill priced at batch rates too. The
results are read first and held as usage (a few numbers per request, bounded by the provider's request count); the
requests are then read one at a time, so neither file is held whole. A row's id is derived from the response's own
id (or the line), so importing the same results twice leaves one row per request.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.ledger.records import Record
from mmtok.budgets.ledger.usage import Usage, usage_from_body
from mmtok.errors import MmtokError, RequestError
from mmtok.request.batch import MAX_LINE_BYTES, BadLine, BatchLine, jsonl_lines, open_batch

MAX_JOB_BYTES = 64 * 2**20  # a Gemini batch job with inline responses (its requests were under 20 MB)
PROVIDER_OF = {"openai": "openai", "anthropic": "anthropic", "gemini": "gemini", "gemini-inline": "gemini"}
PATHS = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses",
         "anthropic-messages": "/v1/messages/batches", "gemini-generate": ":batchGenerateContent"}  # fmt: skip


@dataclass(frozen=True)
class Result:
    """One request's outcome in a batch's output: its bill, or why there is none."""

    custom_id: str
    usage: Usage | None
    model: str | None = None  # as the response names it
    status: int = 200
    problem: str = ""  # the error the provider answered, in words
    response_id: str = ""
    created: str | None = None  # ISO time, where the response says


@dataclass
class Pairing:
    """What pairing a batch's output with its input found, beside the rows."""

    rows: int = 0
    no_result: int = 0  # requests the output has no line for
    unmatched: list[str] = field(default_factory=list)  # output ids no request has
    problems: list[str] = field(default_factory=list)  # lines of either file that could not be read


# ------------------------------------------------------------------------------------------------------ output
def read_results(path: str | os.PathLike[str], problems: list[str]) -> dict[str, Result]:
    """Each request's result in a batch output file, by custom_id (a Gemini inline job's by key, else ``#N``)."""
    path = Path(path)
    with path.open("rb") as f:
        first = f.readline(MAX_LINE_BYTES)
    try:
        head = json.loads(first)
    except (ValueError, RecursionError):
        head = None
    if not (isinstance(head, dict) and ("custom_id" in head or "key" in head)):
        return _inline_results(path, problems)  # not JSON Lines of results: a batch job's document
    found: dict[str, Result] = {}
    with path.open("rb") as f:
        for number, raw in jsonl_lines(f):
            result = _result_line(raw, number, path.name, problems)
            if result is not None:
                found[result.custom_id] = result
    return found


def _result_line(raw: bytes | str, number: int, name: str, problems: list[str]) -> Result | None:
    if isinstance(raw, str):
        problems.append(f"{name} line {number}: {raw}")
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as e:
        problems.append(f"{name} line {number}: not valid JSON ({e})")
        return None
    result = None
    if isinstance(value, dict):
        result = _openai(value) or _anthropic(value) or _gemini(value)
    if result is None:
        problems.append(f"{name} line {number}: not a result of a known batch API (OpenAI, Anthropic, Gemini)")
    return result


def _openai(value: dict[str, Any]) -> Result | None:
    custom_id, response = value.get("custom_id"), value.get("response")
    if not isinstance(custom_id, str) or "response" not in value:
        return None
    if not isinstance(response, dict):
        return Result(custom_id, None, status=0, problem=_error_text(value.get("error")) or "no response")
    body = response.get("body") if isinstance(response.get("body"), dict) else {}
    status = response.get("status_code") if isinstance(response.get("status_code"), int) else 0
    api = "openai-responses" if body.get("object") == "response" else "openai-chat"
    created = body.get("created") if isinstance(body.get("created"), int) else body.get("created_at")
    when = dt.datetime.fromtimestamp(created, dt.UTC).isoformat() if isinstance(created, int) else None
    problem = "" if status == 200 else _error_text(body.get("error")) or f"status {status}"
    return Result(custom_id, usage_from_body(api, body) if status == 200 else None, body.get("model"), status,
                  problem, str(value.get("id") or body.get("id") or ""), when)  # fmt: skip


def _anthropic(value: dict[str, Any]) -> Result | None:
    custom_id, result = value.get("custom_id"), value.get("result")
    if not isinstance(custom_id, str) or not isinstance(result, dict):
        return None
    if result.get("type") != "succeeded" or not isinstance(result.get("message"), dict):
        kind = result.get("type", "?")
        return Result(custom_id, None, status=0, problem=f"{kind}: {_error_text(result.get('error')) or kind}")
    message = result["message"]
    return Result(custom_id, usage_from_body("anthropic-messages", message), message.get("model"), 200, "",
                  str(message.get("id") or ""))  # fmt: skip


def _gemini(value: dict[str, Any], key: str | None = None) -> Result | None:
    metadata = value.get("metadata")
    key = key or value.get("key") or (metadata.get("key") if isinstance(metadata, dict) else None)
    if not isinstance(key, str):
        return None
    response = value.get("response")
    if not isinstance(response, dict):
        problem = _error_text(value.get("error") or value.get("status")) or "no response"
        return Result(key, None, status=0, problem=problem)
    return Result(key, usage_from_body("gemini-generate", response), response.get("modelVersion"), 200, "",
                  str(response.get("responseId") or ""), response.get("createTime"))  # fmt: skip


def _inline_results(path: Path, problems: list[str]) -> dict[str, Result]:
    """A Gemini batch job's inline responses, by key (``#N`` in order where a response has none)."""
    found: dict[str, Result] = {}
    if path.stat().st_size > MAX_JOB_BYTES:
        problems.append(f"{path.name}: {path.stat().st_size:,} bytes: not JSON Lines of results, and a batch job's "
                        f"document is read up to {MAX_JOB_BYTES:,}")  # fmt: skip
        return found
    try:
        document = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:
        problems.append(f"{path.name}: neither JSON Lines of results nor a batch job's JSON ({e})")
        return found
    responses = _find_list(document, ("inlinedResponses", "inlined_responses"))
    for number, item in enumerate(responses or [], 1):
        result = _gemini(item, None if _has_key(item) else f"#{number}") if isinstance(item, dict) else None
        if result is None:
            problems.append(f"{path.name} response {number}: not a Gemini inline response")
        else:
            found[result.custom_id] = result
    if responses is None:
        problems.append(f"{path.name}: no inlinedResponses list in it")
    return found


def _has_key(item: dict[str, Any]) -> bool:
    metadata = item.get("metadata")
    return isinstance(metadata, dict) and isinstance(metadata.get("key"), str)


def _find_list(value: Any, names: tuple[str, ...]) -> list[Any] | None:
    """The first list under one of ``names`` (itself, or such a list inside it: the REST job nests it twice)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in names:
                return item if isinstance(item, list) else _find_list(item, names)
            found = _find_list(item, names)
            if found is not None:
                return found
    return None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        inner = error.get("error") if isinstance(error.get("error"), dict) else error
        return str(inner.get("message") or inner.get("type") or inner.get("code") or "")
    return str(error) if error else ""


# ------------------------------------------------------------------------------------------------------ pairing
def batch_records(
    output: str | os.PathLike[str], batch_input: str | os.PathLike[str], prices: tuple[Any, ...] = (),
    model: str | None = None, pairing: Pairing | None = None,
) -> Iterator[Record]:  # fmt: skip
    """A ledger row for each request of ``batch_input`` that ``output`` has a result for, in the input's order.
    ``model``: the model of requests that name none (a Gemini batch's is in its URL). ``pairing`` collects what
    did not pair."""
    from mmtok.budgets.pricing.batch import LineQuoter

    pairing = pairing if pairing is not None else Pairing()
    results = read_results(output, pairing.problems)
    batch = open_batch(batch_input)
    quoter = LineQuoter(prices)
    seen: set[str] = set()
    for line in batch.lines():
        if isinstance(line, BadLine):
            pairing.problems.append(f"{batch.path.name} {line}")
            continue
        result = results.get(line.custom_id)
        if result is None:
            pairing.no_result += 1
            continue
        seen.add(line.custom_id)
        pairing.rows += 1
        yield _record(line, result, batch.format, batch.path.name, quoter, model)
    pairing.unmatched = sorted(set(results) - seen)


def _record(line: BatchLine, result: Result, format: str, source: str, quoter: Any, model: str | None) -> Record:
    """The row the proxy would have written had the request gone through it, at batch rates."""
    name = line.model or model or result.model or ""
    provider = PROVIDER_OF[format]
    key = f"{provider}\0{source}\0{line.custom_id}\0{result.response_id}"
    record = Record(id=hashlib.sha256(key.encode()).hexdigest()[:32], provider=provider, api=line.api, model=name,
                    path=PATHS.get(line.api, ""), status=result.status, instance="batch-import",
                    tags={"batch": source[:64]})  # fmt: skip
    if result.created:
        record.time = result.created
    _predict(record, line, name, quoter)
    if result.usage is None or result.usage.input_tokens is None:
        record.outcome, record.message = "upstream_error", result.problem or "the result reported no usage"
        return record
    record.outcome = "ok"
    record.billed = result.usage.to_dict()
    record.billed_input, record.billed_output = result.usage.input_tokens, result.usage.output_tokens
    record.billed_cost = _billed_cost(name, result.usage, quoter.prices)
    return record


def _predict(record: Record, line: BatchLine, name: str, quoter: Any) -> None:
    """The request's parts and quote, at batch rates, as the proxy records a call's prediction."""
    from mmtok.budgets.pricing import quote_request
    from mmtok.budgets.proxy.quoting import Prediction, fill_from_quote, part_shape
    from mmtok.request import measuring, parse_body

    prediction = Prediction(name)
    try:
        request = parse_body(line.body, api=line.api, source=f"line {line.number}")
        record.settings = _settings(request)
        model, batch_card, _ = quoter.model(name)
        with measuring(request.parts, quoter.policy) as measured:
            prediction.parts = [part_shape(m) for m in measured]
            options = quoter.options["batch" if batch_card is not None else "standard"]
            fill_from_quote(prediction, quote_request(request, measured, model, options))
    except MmtokError as e:
        prediction.problem = str(e)
    prediction.settings = record.settings
    prediction.fill(record)


def _settings(request: Any) -> dict[str, Any]:
    settings = {"messages": request.messages, "max_output_tokens": request.max_output_tokens,
                "service_tier": request.service_tier, "media_resolution": request.media_resolution,
                "tools": request.tools, "batch": True}  # fmt: skip
    return {k: v for k, v in settings.items() if v not in (None, 0)}


def _billed_cost(model: str, usage: Usage, prices: tuple[Any, ...]) -> Any:
    from mmtok.budgets.ledger.usage import billed_cost

    for option in ("batch", "standard"):
        try:
            return billed_cost(model, usage, prices, option=option)
        except MmtokError:
            continue
    return None


def check_pair(output: str | os.PathLike[str], batch_input: str | os.PathLike[str]) -> None:
    """Both files readable (a usage error otherwise, before any work)."""
    for path, what in ((output, "batch output"), (batch_input, "batch input")):
        if not Path(path).is_file():
            raise RequestError(f"{path}: no such {what} file")
