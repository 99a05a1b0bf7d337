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


def warm(config: ProxyConfig) -> None:
    """Price one small body of each API the proxy serves and one bill (errors are logged: warming is best effort,
    a model missing from a user's own sheets must not stop the proxy)."""
    from mmtok.budgets.proxy.quoting import predict
    from mmtok.budgets.usage import Usage, billed_cost

    for path, body in BODIES.items():
        where = route(path)
        if where is None:
            continue
        try:
            prediction = predict(body, where, config)
            if prediction.model:
                billed_cost(prediction.model, Usage(10, 1), config.prices)
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
