"""The proxy's Prometheus metrics, served at ``GET /mmtok/metrics`` in the text exposition format by the official
client library (``prometheus-client``).

What is counted (each counter's name ends in ``_total``):

==================================  ==================================  ====================================
metric                              labels                              what
==================================  ==================================  ====================================
``mmtok_proxy_requests_total``      provider, model, outcome            calls, by how they ended
``mmtok_proxy_predicted_tokens``    provider, model, modality           tokens in mmtok's quotes
``mmtok_proxy_billed_tokens``       provider, model, modality           tokens the provider billed
``mmtok_proxy_cost_usd``            provider, model, kind               USD predicted, billed and spent
``mmtok_proxy_shrink_saved_usd``    provider, model                     USD --shrink saved
``mmtok_proxy_refusals_total``      provider, reason                    calls refused before sending
``mmtok_proxy_upstream_seconds``    provider                            sending to the upstream's headers
``mmtok_proxy_added_seconds``       provider                            the proxy's own time in a call
``mmtok_proxy_in_flight``           (none)                              calls being served now
==================================  ==================================  ====================================

Labels are few and bounded, never a key, a tag or any other string a caller chooses: ``provider`` is one of three,
``outcome`` and ``reason`` are mmtok's own words, ``modality`` is mmtok's or the provider's itemisation, and
``model`` is the name a call used only where mmtok could price it (a model it knows), at most :data:`MAX_MODELS`
of them per process; any other is ``other`` (no model at all: ``none``). Spend per key and tag is in the ledger
(``mmtok ledger --by``) and on the dashboard, not here.

Billed tokens by modality: ``output``, each input modality the provider itemises (Gemini's ``promptTokensDetails``,
OpenAI's audio and image counts), and ``input`` for the input it does not itemise. Cost ``kind``: ``predicted``
(the quote, an upper bound), ``billed`` (the usage priced) and ``spent`` (what counts against budgets: the bill,
else the quote for a call that reached the provider).

With ``--workers N`` every worker serves ``/mmtok/metrics`` for all of them: the server gives the workers one
folder of its own for the library's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, made fresh at start and removed
at exit: :func:`multiprocess_folder`) and each scrape merges the workers' files. A single process keeps its metrics
in memory (unless ``PROMETHEUS_MULTIPROC_DIR`` is set in its environment, as the library does).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from mmtok.budgets.ledger import Record
from mmtok.budgets.proxy.providers import DEFAULT_UPSTREAMS

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MAX_MODELS = 100  # model label values per process; more fold into "other"
MAX_MODEL_CHARS = 80
MAX_USD = 10**9  # one call's cost above this is an absurd figure (the ledger keeps and flags it), not counted here
UPSTREAM_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
ADDED_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
OUTPUT = "output"


def _multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class Metrics:
    """One process's metrics: in a registry of its own, or in the shared folder of multiprocess mode."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values

        if _multiprocess() and values.ValueClass is values.MutexValue:  # imported before the folder was set
            values.ValueClass = values.get_value_class()
        self.registry = None if _multiprocess() else CollectorRegistry()
        shared = {"registry": self.registry}
        place = ["provider", "model"]
        self.requests = Counter("mmtok_proxy_requests", "Calls through the proxy.", [*place, "outcome"], **shared)
        self.predicted_tokens = Counter(
            "mmtok_proxy_predicted_tokens", "Tokens in mmtok's quotes, by modality.", [*place, "modality"], **shared
        )
        self.billed_tokens = Counter(
            "mmtok_proxy_billed_tokens",
            "Tokens the provider billed, by modality (input: what it does not itemise).",
            [*place, "modality"],
            **shared,
        )
        self.cost = Counter("mmtok_proxy_cost_usd", "USD predicted, billed and spent.", [*place, "kind"], **shared)
        self.saved = Counter("mmtok_proxy_shrink_saved_usd", "USD saved by --shrink.", place, **shared)
        self.refusals = Counter(
            "mmtok_proxy_refusals", "Calls refused before they were sent, by reason.", ["provider", "reason"], **shared
        )
        self.upstream = Histogram(
            "mmtok_proxy_upstream_seconds",
            "From sending a call upstream to the upstream's response headers.",
            ["provider"],
            buckets=UPSTREAM_BUCKETS_S,
            **shared,
        )
        self.added = Histogram(
            "mmtok_proxy_added_seconds",
            "The proxy's own time in a call: reading, pricing and checking it before sending, recording it after.",
            ["provider"],
            buckets=ADDED_BUCKETS_S,
            **shared,
        )
        self.in_flight = Gauge(
            "mmtok_proxy_in_flight", "Calls being served now.", multiprocess_mode="livesum", **shared
        )
        self._models: set[str] = set()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}  # labelled children: .labels() costs ~4 us
        for provider in DEFAULT_UPSTREAMS:  # each provider's series from the start, at zero (Prometheus' advice for
            self._child(self.upstream, provider)  # labels known in advance), not made by its first call (~1 ms of
            self._child(self.added, provider)  # histogram buckets)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def model_label(self, record: Record) -> str:
        """The call's model as a label: known to mmtok (the call could be priced), among the first MAX_MODELS."""
        model = record.model
        if not model:
            return "none"
        priced = record.predicted_cost is not None or record.billed_cost is not None
        if not priced or len(model) > MAX_MODEL_CHARS or not model.isprintable():
            return "other"
        if model not in self._models:
            if len(self._models) >= MAX_MODELS:
                return "other"
            self._models.add(model)
        return model

    def call(self, record: Record, added_s: float | None) -> None:
        """A call has ended (answered, failed or refused): its record into the metrics."""
        provider = record.provider or "none"
        model = self.model_label(record)
        self._child(self.requests, provider, model, record.outcome or "unknown").inc()
        for modality, tokens in (record.predicted or {}).items():
            if isinstance(tokens, int) and 0 < tokens < 2**63:  # a 4,000-digit max_tokens is no float
                self._child(self.predicted_tokens, provider, model, modality).inc(tokens)
        for modality, tokens in billed_by_modality(record).items():
            self._child(self.billed_tokens, provider, model, modality).inc(tokens)
        costs = {"billed": record.billed_cost, "spent": record.spend}
        if record.outcome != "refused":
            costs["predicted"] = record.predicted_cost
        for kind, amount in costs.items():
            if amount and 0 < amount < MAX_USD:  # an absurd bill (flagged in the ledger) would end the counter
                self._child(self.cost, provider, model, kind).inc(float(amount))
        if record.saved_cost and 0 < record.saved_cost < MAX_USD:
            self._child(self.saved, provider, model).inc(float(record.saved_cost))
        if record.upstream_ms is not None:
            self._child(self.upstream, provider).observe(record.upstream_ms / 1000)
        if added_s is not None:
            self._child(self.added, provider).observe(max(0.0, added_s))

    def refused(self, provider: str | None, reason: str) -> None:
        self._child(self.refusals, provider or "none", reason).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The metrics as Prometheus text (every worker's, merged, in multiprocess mode) and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

        registry = self.registry
        if registry is None:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST


def billed_by_modality(record: Record) -> dict[str, int]:
    """The billed tokens of a call: output, each itemised input modality, and the rest of the input as ``input``."""
    billed = record.billed or {}
    out: dict[str, int] = {}
    if isinstance(record.billed_output, int) and 0 < record.billed_output < 2**63:
        out[OUTPUT] = record.billed_output
    itemised = billed.get("input_by_modality") or {}
    counted = 0
    for modality, tokens in itemised.items():
        if isinstance(tokens, int) and 0 < tokens < 2**63 and isinstance(modality, str) and modality.isidentifier():
            out[modality] = out.get(modality, 0) + tokens
            counted += tokens
    if isinstance(record.billed_input, int) and counted < record.billed_input < 2**63:
        out["input"] = record.billed_input - counted
    return out


@contextlib.contextmanager
def multiprocess_folder() -> Iterator[str]:
    """A fresh folder for the workers' metrics, set as ``PROMETHEUS_MULTIPROC_DIR`` while the server runs (before
    the workers fork, so each of them writes its own files there) and removed afterwards (the library asks for a
    folder wiped between runs)."""
    folder = tempfile.mkdtemp(prefix="mmtok-metrics-")
    before = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = folder
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)


def worker_ended(pid: int) -> None:
    """A worker has ended: its live gauges leave the sums (its counters stay, as Prometheus expects)."""
    from prometheus_client import multiprocess

    with contextlib.suppress(Exception):
        multiprocess.mark_process_dead(pid)
