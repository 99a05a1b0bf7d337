"""Start-up warming: what the first call through a fresh proxy would load lazily (the body reader, pricing and its
price tables, the tiktoken encodings, the image header readers, the billed-cost path) is loaded before the proxy
says it is ready, so that the first call costs what a later one does (it took 0.7-1.5 s before: issue 37).

Each API is priced once with a small body of its shape, an image in one of them; nothing is sent anywhere.
"""

from __future__ import annotations

import logging
from typing import Any

from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.providers import route

log = logging.getLogger("mmtok.proxy")
PIXEL_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC"
)
HELLO = [{"role": "user", "content": "Hello"}]
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "gpt-4o-mini",
        "max_tokens": 1,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": PIXEL_PNG}}],
            }
        ],
    },
    "/v1/responses": {"model": "gpt-4o-mini", "input": "Hello", "max_output_tokens": 16},
    "/anthropic/v1/messages": {"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": HELLO},
    "/gemini/v1beta/models/gemini-2.5-flash:generateContent": {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}]
    },
}


ANSWERS = {  # an answer of each shape, for the usage readers
    "openai-chat": b'{"usage": {"prompt_tokens": 14, "completion_tokens": 2, "total_tokens": 16}}',
    "openai-responses": b'{"usage": {"input_tokens": 14, "output_tokens": 2, "total_tokens": 16}}',
    "anthropic-messages": b'{"usage": {"input_tokens": 14, "output_tokens": 2}}',
    "gemini-generate": b'{"usageMetadata": {"promptTokenCount": 14, "candidatesTokenCount": 2}}',
}


def warm(config: ProxyConfig) -> None:
    """Price one small body of each API the proxy serves, read an answer's usage, price one bill and make the
    ledger row of such a call without writing it (errors are logged: warming is best effort, a model missing from a
    user's own sheets must not stop the proxy)."""
    from mmtok.budgets.ledger import Record, row_values
    from mmtok.budgets.ledger.usage import Usage, billed_cost, usage_from_bytes
    from mmtok.budgets.proxy.quoting import predict

    for path, body in BODIES.items():
        where = route(path)
        if where is None:
            continue
        try:
            prediction = predict(body, where, config)
            record = Record(provider=where.provider, api=where.api, path=path, outcome="ok", status=200)
            prediction.fill(record)
            usage_from_bytes(where.api, ANSWERS.get(where.api, b"{}"))
            if prediction.model:
                record.billed_cost = billed_cost(prediction.model, Usage(10, 1), config.prices)
            row_values(record)  # what the ledger's writer makes of a record (not written anywhere)
        except Exception as e:  # best effort: the call itself would say what is wrong
            log.debug("warming %s: %s", path, e)


async def warm_loop() -> None:
    """In the event loop: what the first upstream request would set up. httpcore's pool makes an anyio Event, whose
    first use loads anyio's asyncio backend (~60 ms); connecting resolves the host on the loop's resolver threads,
    started on first use (a numeric address here: nothing is looked up on the network)."""
    import socket

    import anyio

    anyio.Event().set()
    await anyio.getaddrinfo("127.0.0.1", 443, type=socket.SOCK_STREAM)
    try:
        await warm_http()
    except Exception as e:  # best effort, as warm(): the first call would do this work itself
        log.debug("warming the HTTP client: %s", e)


WARM_ANSWER = (b"HTTP/1.1 200 OK\r\n", b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n", b"{}")


async def warm_http() -> None:
    """One exchange through each layer the upstream call goes through, in memory: httpcore's pool and its HTTP/1.1
    connection over h11 (on httpcore's mock network backend, which holds the answer's bytes), then an httpx client
    on a mock transport (whose cookie handling compiles urllib's regular expressions: ~5 ms of a first call). Nothing
    is connected, resolved or sent outside the process, and no key is involved."""
    import httpcore
    import httpx

    backend = httpcore.AsyncMockBackend(list(WARM_ANSWER))
    async with (
        httpcore.AsyncConnectionPool(network_backend=backend) as pool,
        pool.stream("POST", "http://warm.invalid/v1/chat/completions", content=b"{}") as response,
    ):
        async for _ in response.aiter_stream():
            pass

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, stream=httpx.ByteStream(b"{}"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        request = client.build_request("POST", "http://warm.invalid/v1/chat/completions", content=b"{}")
        response = await client.send(request, stream=True)
        async for _ in response.aiter_raw():
            pass
        await response.aclose()
