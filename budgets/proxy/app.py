"""The proxy's ASGI app: one route over every path, each call read, priced, checked, sent and recorded.

    SDK ─▶ read (capped) ─▶ parse + quote (+ shrink) ─▶ limits ─▶ upstream ─▶ answer passed on ─▶ ledger row

The upstream client is passed in (``create_app(config, client=...)``), so tests swap its transport; the app makes
one with the config's timeouts otherwise. Routes are thin: the body is read by :mod:`mmtok.request`, priced by
:mod:`mmtok.budgets.pricing` and shrunk by :mod:`mmtok.budgets.shrink`, the same calls ``mmtok price`` and
``mmtok shrink`` make (:mod:`mmtok.budgets.proxy.quoting` adapts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from mmtok.budgets.ledger import Ledger, Record, open_ledger
from mmtok.budgets.ledger.usage import Usage, billed_cost
from mmtok.budgets.proxy import attribution, dashboard, forward, quoting, shrinking
from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.limits import Budgets, Refusal, cost_refusal
from mmtok.budgets.proxy.metrics import Metrics
from mmtok.budgets.proxy.providers import (
    COUNT_APIS,
    DEFAULT_UPSTREAMS,
    Route,
    error_response,
    forwarded_headers,
    provider_of,
    route,
)
from mmtok.budgets.proxy.recorder import Recorder
from mmtok.budgets.proxy.warm import warm, warm_loop
from mmtok.errors import MmtokError

log = logging.getLogger("mmtok.proxy")
POOLS = 8  # upstream clients (connection pools) the app makes for itself
# A batch of records waits this long for more after its first: one commit per call (its writes and the writer
# thread's turns at the interpreter lock) added ~5 ms to each call's latency here; batched, ~0.
LINGER_S = 0.02


class _NoQueryStrings(logging.Filter):
    """httpx logs each request's URL at INFO; a Gemini key may be in its query string: log URLs without one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a.copy_with(query=None) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


logging.getLogger("httpx").addFilter(_NoQueryStrings())


class _NoDeliberateCuts(logging.Filter):
    """A stream the proxy ends on purpose (``forward.StreamCut``: its record says why) is not a server error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], forward.StreamCut))


logging.getLogger("uvicorn.error").addFilter(_NoDeliberateCuts())


WARM_CALLS = 10  # Python specialises a function's code after its first few runs (8 in 3.11): one call is not enough
WARM_PATH = "/v1/chat/completions"
WARM_BODY = {"model": "gpt-4o-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "Say hello."}]}
WARM_ANSWER = json.dumps({
    "id": "chatcmpl-warm", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
}).encode()  # fmt: skip


class _Discard:
    """Where the warming call's record and metrics go: nowhere (a recorder's and a metrics' methods, doing
    nothing)."""

    def submit(self, _record: Record) -> Any:
        from concurrent.futures import Future

        done: Future[None] = Future()
        done.set_result(None)
        return done

    def call(self, *_args: Any) -> None:
        return None

    def refused(self, *_args: Any) -> None:
        return None

    @property
    def in_flight(self) -> _Discard:  # the gauge of calls being served: inc() and dec() do nothing here too
        return self

    def inc(self, *_args: Any) -> None:
        return None

    def dec(self, *_args: Any) -> None:
        return None


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


class Proxy:
    """The state one proxy process holds: config, upstream client, ledger writer, daily budget."""

    def __init__(self, config: ProxyConfig, client: httpx.AsyncClient | None = None, ledger: Ledger | None = None):
        self.config = config
        self.instance = uuid.uuid4().hex[:12]
        self._given_client = client
        self._given_ledger = ledger
        self.clients: list[httpx.AsyncClient] = []
        self._next_client = 0
        self.recorder: Recorder | None = None
        self.budgets: Budgets | None = None
        self.salt = ""  # the ledger's, for key fingerprints
        self.in_flight = 0
        self._ids = itertools.count()
        self.metrics = Metrics()
        self.dashboard: dashboard.Dashboard | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        ledger = self._given_ledger or open_ledger(self.config.ledger)
        self.recorder = Recorder(ledger, 0.0 if self.config.sync_ledger else LINGER_S)
        self.salt = getattr(ledger, "salt", "")
        rules = self.config.budget_rules()
        self.dashboard = dashboard.Dashboard(ledger, rules)
        if rules:
            self.budgets = Budgets(rules, ledger, self.instance, self.config.reservation_ttl_s)
        await asyncio.to_thread(warm, self.config)  # what the first call would load, loaded before ready
        await warm_loop()
        await self._warm_call()
        gc.collect()
        gc.freeze()  # what start-up made (price data, modules) is never collected: a full collection walked it all,
        # ~15 ms at once, in whichever call happened to trigger it (the proxy's p99)
        if self._given_client is not None:
            self.clients = [self._given_client]
        else:
            tls = httpx.create_ssl_context()  # one for all the pools: making each costs ~25 ms
            self.clients = [_client(self.config, tls) for _ in range(POOLS)]
            await preconnect(self.clients, configured_upstreams(self.config))
        try:
            async with self.budgets.heartbeat() if self.budgets else contextlib.nullcontext():
                yield
        finally:
            if self._given_client is None:
                for client in self.clients:
                    await client.aclose()
            self.recorder.close()  # every record queued is written before the process ends

    async def _warm_call(self) -> None:
        """Calls through this proxy's own app before it is ready (a first call ran it all for the first time: ~2x a
        later one), :data:`WARM_CALLS` of them, on a throwaway copy: its upstream a mock transport that answers as the
        provider does, its records and metrics kept nowhere. Nothing leaves the process; best effort, as
        :func:`warm`."""
        answer = WARM_ANSWER

        def upstream(_request: httpx.Request) -> httpx.Response:
            headers = {"content-type": "application/json", "content-length": str(len(answer))}
            return httpx.Response(200, headers=headers, stream=httpx.ByteStream(answer))

        copy = Proxy(self.config, httpx.AsyncClient(transport=httpx.MockTransport(upstream)), self._given_ledger)
        copy.clients, copy.recorder, copy.metrics = [copy._given_client], _Discard(), _Discard()  # type: ignore
        body = json.dumps(WARM_BODY).encode()
        scope = {"type": "http", "method": "POST", "path": WARM_PATH, "raw_path": WARM_PATH.encode(),
                 "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 0),
                 "client": ("127.0.0.1", 0), "http_version": "1.1",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                             (b"authorization", b"Bearer sk-mmtok-warm")]}  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(_message: dict[str, Any]) -> None:
            return None

        app = Starlette(routes=[StarletteRoute("/{path:path}", copy.handle, methods=["POST"])])
        try:
            for _ in range(WARM_CALLS):
                await app(scope, receive, send)
        except Exception as e:  # best effort: the first call would do this work itself
            log.debug("warming a call: %s", e)
        finally:
            await copy._given_client.aclose()  # type: ignore[union-attr]

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        provider = provider_of(path)
        where = route(path)
        if path == "/mmtok/health":
            pending = self.recorder.pending if self.recorder else 0
            return JSONResponse({"ok": True, "in_flight": self.in_flight, "ledger_pending": pending})
        if path == "/mmtok/metrics":
            content, media_type = self.metrics.exposition()
            return Response(content, media_type=media_type)
        if path == "/mmtok" or path.startswith("/mmtok/"):
            return await self._dashboard(request, path)
        if where is None:
            what = f"{provider} API path" if provider else "path"
            served = "/v1/..., /anthropic/v1/..., /gemini/v1beta/..."
            return error_response(provider, 404, f"unknown {what} {path} (the proxy serves {served})", "unknown_path")
        if request.method != "POST":
            return error_response(provider, 405, f"{request.method} {path}: the proxy takes POST here", "method")
        self.in_flight += 1
        self.metrics.in_flight.inc()
        try:
            return await self._call(request, where)
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.dec()

    async def _dashboard(self, request: Request, path: str) -> Response:
        """The live dashboard: its page and files, and the summary it polls."""
        if request.method not in ("GET", "HEAD"):
            return error_response(None, 405, f"{request.method} {path}: the dashboard takes GET", "method")
        if path == "/mmtok/api/summary" and self.dashboard is not None:
            try:
                found = await self.dashboard.summary()
            except Exception as e:  # the database is gone: the page says so and tries again
                log.warning("dashboard: cannot read the ledger (%s: %s)", type(e).__name__, e)
                found, status = {"error": f"cannot read the ledger ({type(e).__name__})"}, 503
            else:
                status = 200
            return JSONResponse(found, status, headers=dashboard.SECURITY_HEADERS)
        if path in ("/mmtok", "/mmtok/"):
            found = dashboard.static_file("dashboard.html")
        else:
            name = path.removeprefix("/mmtok/static/")
            found = dashboard.static_file(name) if path.startswith("/mmtok/static/") else None
        if found is None:
            return error_response(None, 404, f"unknown path {path} (the dashboard is at /mmtok/)", "unknown_path")
        content, media_type = found
        return Response(content, media_type=media_type, headers=dashboard.SECURITY_HEADERS)

    async def _call(self, request: Request, where: Route) -> Response:
        started = time.perf_counter()
        read = await _read_body(request, where, self.config.max_body_bytes, self.config.read_timeout_s)
        if isinstance(read, Response):
            self.metrics.refused(where.provider, read.headers.get("x-mmtok-error", "bad_request"))
            return read
        content, payload = read
        record = Record(
            id=f"{self.instance}{next(self._ids):020x}",  # unique: a random prefix per process, then a count
            provider=where.provider,
            api=where.api,
            path=request.url.path,
            instance=self.instance,
            body_sha256=hashlib.sha256(content).hexdigest(),
            body=content if self.config.store_bodies else None,
            stream=where.streams or payload.get("stream") is True,
        )
        try:
            record.tags = attribution.call_tags(request.headers, payload)
        except attribution.BadTags as e:
            self.metrics.refused(where.provider, "bad_tags")
            return error_response(where.provider, 400, str(e), "bad_tags", retry=False)
        key = attribution.key_of(request.headers, request.query_params)
        record.key_fingerprint = attribution.fingerprint(key, self.salt)
        prediction = await quoting.predict_async(payload, where, self.config, content)
        if prediction.invalid:  # a value the provider refuses: its own 400, and the call is never sent
            prediction.fill(record)
            return await self._refuse(record, where, Refusal(400, prediction.invalid, "invalid_value"), started)
        content, extra = await self._shrink(payload, where, prediction, record, content)
        prediction.fill(record)
        refusal = await self._limits(where, prediction, record)
        if refusal is not None:
            return await self._refuse(record, where, refusal, started)
        extra |= prediction.headers()
        content, strip_usage = forward.ask_for_usage(where, payload, content)
        url = self.config.upstream(where.provider) + where.upstream_path
        if request.url.query:
            url += "?" + request.url.query
        before_sending = time.perf_counter() - started
        upstream = await forward.send(self._client(), url, forwarded_headers(request.headers), content, record)

        async def finish(done: Record, usage: Usage | None) -> None:
            ended = time.perf_counter()
            await self._finish(done, usage, started)
            self.metrics.call(done, before_sending + time.perf_counter() - ended)  # the proxy's own time

        if upstream.response is None:
            record.status, record.outcome, record.message = upstream.status, upstream.outcome, upstream.message
            await finish(record, None)
            return forward.failure(where, upstream)
        return await forward.answer(where, upstream.response, record, finish, extra, strip_usage)

    async def _shrink(
        self, payload: dict[str, Any], where: Route, prediction: quoting.Prediction, record: Record, content: bytes
    ) -> tuple[bytes, dict[str, str]]:
        """With --shrink, the body to send and the header saying what was saved (the body as it came otherwise)."""
        if not shrinking.wanted(self.config, where, prediction):
            return content, {}
        shrunk = await shrinking.shrink_async(payload, where, self.config, prediction)
        if isinstance(shrunk, str):
            record.message = shrunk
            return content, {}
        record.shrink, record.saved_cost = shrunk.summary, shrunk.saved_cost
        return shrunk.content, {"x-mmtok-shrink": shrunk.header}

    async def _limits(self, where: Route, prediction: quoting.Prediction, record: Record) -> Refusal | None:
        """The refusal where a limit says no; otherwise the call's bound is reserved in its budgets (the record
        written when the call ends settles it)."""
        counting = where.api in COUNT_APIS  # free: no limit applies
        complete = prediction.complete or self.config.allow_unpriced
        max_cost = None if counting else self.config.max_cost
        refusal = cost_refusal(prediction.cost, complete, prediction.problem, max_cost)
        if refusal is not None or self.budgets is None or counting:
            return refusal
        if prediction.cost is None or not complete:
            why = prediction.problem or "its cost cannot be predicted"
            return Refusal(400, f"{why}; the daily budgets cannot be checked (--allow-unpriced sends it)", "unpriced")
        return await self.budgets.reserve(record, prediction.cost)

    def _client(self) -> httpx.AsyncClient:
        """The upstream clients in turn: httpcore's pool walks (and polls) every connection it holds on each
        request, so several small pools cost less than one large one under many concurrent calls."""
        self._next_client = (self._next_client + 1) % len(self.clients)
        return self.clients[self._next_client]

    async def _refuse(self, record: Record, where: Route, refusal: Refusal, started: float) -> Response:
        record.status, record.outcome, record.message = refusal.status, "refused", refusal.message
        record.latency_ms = (time.perf_counter() - started) * 1000
        await self._commit(record)
        self.metrics.refused(where.provider, refusal.code)
        self.metrics.call(record, time.perf_counter() - started)
        return error_response(where.provider, refusal.status, refusal.message, refusal.code, retry=refusal.retry)

    async def _finish(self, record: Record, usage: Usage | None, started: float) -> None:
        """The call has ended: its usage and cost into the record, the record committed (which settles its
        reservation: the hold of its bound becomes its spend)."""
        record.latency_ms = (time.perf_counter() - started) * 1000
        if usage is not None:
            record.billed = usage.to_dict()
            record.billed_input, record.billed_output = usage.input_tokens, usage.output_tokens
            record.billed_cost = _billed_cost(record, usage, self.config)
        elif record.outcome == "ok" and record.api not in COUNT_APIS:
            record.message = record.message or _no_usage_reason(record)
        if record.api in COUNT_APIS:
            record.billed_cost = Decimal(0)  # the counting endpoints are free
        await self._commit(record)
        log.info("%s %s %s %.1f ms", record.api, record.model, record.status, record.latency_ms)

    async def _commit(self, record: Record) -> None:
        """Hand the record to the writer; with ``sync_ledger``, wait until it is committed."""
        done = self.recorder.submit(record)
        if self.config.sync_ledger:
            with contextlib.suppress(Exception):  # said on stderr by the recorder; the call goes on
                await asyncio.wrap_future(done)


def _billed_cost(record: Record, usage: Usage, config: ProxyConfig) -> Decimal | None:
    if record.model is None or record.api in COUNT_APIS:
        return None
    from mmtok.budgets.pricing.requests import SERVICE_TIERS

    option = SERVICE_TIERS.get(str(record.settings.get("service_tier") or "").lower(), "standard")
    try:
        return billed_cost(record.model, usage, config.prices, option)
    except MmtokError as e:
        record.message = f"billed usage not priced: {e}"
        return None


def _no_usage_reason(record: Record) -> str:
    if record.api == "openai-chat" and record.stream:
        return "the stream reported no usage (set stream_options={'include_usage': True} to have it billed here)"
    return "the response reported no usage"


async def _read_body(
    request: Request, where: Route, cap: int, pause_s: float
) -> tuple[bytes, dict[str, Any]] | Response:
    """The body and its JSON object, or the provider-shaped answer to a body too large, too slow or not JSON."""
    try:
        content = await _read_capped(request, cap, pause_s)
    except BodyTooLarge as e:
        return error_response(where.provider, 413, str(e), "body_too_large", retry=False)
    except BodyTooSlow as e:
        answer = error_response(where.provider, 408, str(e), "body_timeout")
        answer.headers["connection"] = "close"  # the rest of the body is not read: the connection cannot go on
        return answer
    except ClientDisconnect:
        return Response(status_code=400)
    try:
        payload = json.loads(content)
    except (ValueError, RecursionError) as e:
        reason = f"{e.msg} at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
        return error_response(where.provider, 400, f"the request body is not valid JSON ({reason})", "bad_json")
    if not isinstance(payload, dict):
        return error_response(where.provider, 400, "the request body must be a JSON object", "bad_json")
    return content, payload


async def _read_capped(request: Request, cap: int, pause_s: float) -> bytes:
    """The request body, refused before it is read past ``cap`` bytes (a declared length over it: not read at all),
    or once the client pauses longer than ``pause_s`` while sending it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge(f"the request body is {int(declared):,} bytes; the proxy takes at most {cap:,}")
    chunks, size = [], 0
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(pause_s) as deadline:
            async for chunk in request.stream():
                deadline.reschedule(loop.time() + pause_s)
                size += len(chunk)
                if size > cap:
                    raise BodyTooLarge(f"the request body is over the proxy's cap of {cap:,} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTooSlow(f"the request body paused for over {pause_s:g} s ({size:,} bytes read)") from None
    return b"".join(chunks)


PRECONNECT_S = 2.0  # the most start-up waits for the upstreams to answer


def configured_upstreams(config: ProxyConfig) -> list[str]:
    """The upstream base URLs the user named (``--openai-upstream`` ...), not the providers' defaults."""
    named = {url.rstrip("/") for provider, url in config.upstreams.items() if url != DEFAULT_UPSTREAMS.get(provider)}
    return sorted(named)


async def preconnect(clients: list[httpx.AsyncClient], upstreams: list[str]) -> None:
    """Open a connection from each pool to each upstream the user named, so the first calls find one as later calls
    do (a first call opened its own: about half its time over a later call's). One ``HEAD`` of the base URL each,
    with no header of any caller's (no key), its answer read and ignored; the providers' default hosts are never
    contacted here, and an upstream that does not answer within :data:`PRECONNECT_S` delays nothing further."""

    async def one(client: httpx.AsyncClient, url: str) -> None:
        with contextlib.suppress(Exception):
            await client.head(url, timeout=PRECONNECT_S)

    if upstreams:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PRECONNECT_S):
                await asyncio.gather(*(one(client, url) for client in clients for url in upstreams))


def _client(config: ProxyConfig, tls: Any) -> httpx.AsyncClient:
    """An upstream client: no redirects followed, no proxy or .netrc credentials taken from the environment."""
    timeout = httpx.Timeout(config.upstream_timeout_s, connect=config.connect_timeout_s)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    return httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False, trust_env=False, verify=tls)


def create_app(config: ProxyConfig, client: httpx.AsyncClient | None = None, ledger: Ledger | None = None) -> Any:
    """The proxy as an ASGI app. ``client``: the upstream HTTP client (a test passes one with its own transport);
    ``ledger``: an open ledger (else the config's is opened when the app starts)."""
    proxy = Proxy(config, client, ledger)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[StarletteRoute("/{path:path}", proxy.handle, methods=methods)], lifespan=proxy.lifespan)
    app.state.proxy = proxy
    app.middleware_stack = app.build_middleware_stack()  # built now, not by the first call (Starlette builds it lazily)
    return app
