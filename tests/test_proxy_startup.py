"""What a proxy does before it is ready: it warms its own path with calls on a throwaway copy (no ledger row, no
metric, nothing sent anywhere) and opens a connection to each upstream the user named (a HEAD of its base URL with
no credentials, one per pool); the providers' own hosts are not contacted."""

from __future__ import annotations

import httpx
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.proxy import ProxyConfig
from mmtok.budgets.proxy.app import POOLS, configured_upstreams
from tests.upstream import running_proxy, serve

ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}  # fmt: skip


def recording_upstream(seen: list[tuple[str, str, dict[str, str]]]) -> Starlette:
    async def handle(request: Request) -> Response:
        seen.append((request.method, request.url.path, dict(request.headers)))
        if request.method == "HEAD":
            return Response(status_code=404)
        return JSONResponse(ANSWER)

    return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "HEAD", "POST"])])


def test_start_up_leaves_no_trace_and_preconnects_without_credentials(tmp_path):
    seen: list[tuple[str, str, dict[str, str]]] = []
    ledger = tmp_path / "calls.sqlite"
    with serve(recording_upstream(seen)) as upstream, running_proxy(upstream, ledger) as proxy:
        heads = [s for s in seen if s[0] == "HEAD"]
        assert not [s for s in seen if s[0] != "HEAD"]  # the warming calls sent nothing upstream
        assert len(heads) == POOLS * 2  # each pool, to each upstream named: {upstream}/v1 and {upstream}
        assert not any("authorization" in h or "x-api-key" in h or "x-goog-api-key" in h for _, _, h in heads)
        metrics = httpx.get(proxy + "/mmtok/metrics").text
        assert "mmtok_proxy_requests_total{" not in metrics  # no call counted
        client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test-0000", max_retries=0)
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
        assert [s[0] for s in seen if s[0] != "HEAD"] == ["POST"]
    rows = list(open_ledger(ledger, read_only=True).records())
    assert len(rows) == 1 and rows[0].billed_output == 2  # only the real call


def test_only_the_upstreams_the_user_named_are_contacted_before_a_call():
    assert configured_upstreams(ProxyConfig(ledger="x.sqlite")) == []  # the providers' defaults: never
    named = ProxyConfig(ledger="x.sqlite", upstreams={"openai": "http://127.0.0.1:9/v1/"})
    assert configured_upstreams(named) == ["http://127.0.0.1:9/v1"]


def test_upstream_urls_are_parsed_once_and_never_kept_with_a_query_string():
    import asyncio

    from mmtok.budgets.ledger import Record
    from mmtok.budgets.proxy import forward

    url = "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent"
    assert forward.parsed_url(url) is forward.parsed_url(url)
    assert str(forward.parsed_url(url + "x")) == url + "x"  # the whole URL is the key
    seen: list[str] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=ANSWER)

    async def call(target: str) -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            await forward.send(client, target, {}, b"{}", Record())

    asyncio.run(call(url))
    before = forward.parsed_url.cache_info().currsize
    asyncio.run(call(url + "?key=secret"))  # a Gemini key in the query string: sent, never kept
    assert seen == [url, url + "?key=secret"] and forward.parsed_url.cache_info().currsize == before
