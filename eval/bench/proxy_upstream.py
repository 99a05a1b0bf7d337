"""A stand-in provider for the proxy's tests and benchmarks: an ASGI app that speaks the OpenAI, Anthropic and Gemini
APIs (response shapes, streamed and not, usage fields, count endpoints, error bodies) and bills images by rules that
DIFFER from mmtok's documented ones, so that calibration has something real to recover. Serve it on the loopback
interface (``tests/upstream.py`` serves it in a thread; ``mmtok.eval.bench.proxy_calibration`` in a process).

The upstream reads request bodies with its own small walk over each provider's JSON (it plays the provider: it
must not share mmtok's reader) and measures images by decoding them with Pillow. Text is billed with the encodings
mmtok's families name (o200k_base for OpenAI, cl100k_base for Claude, ceil(characters / 4) for Gemini) so that
only the media rule and the overheads differ from mmtok's documented counts.

Behaviour is chosen per request by a header the proxy passes through untouched: ``x-upstream-behaviour`` =
``500`` (a provider-shaped server error), ``slow`` (answers after ``x-upstream-delay`` seconds), ``drip`` (a
stream of ``x-upstream-chunks`` chunks ``x-upstream-delay`` seconds apart), ``cut`` (a stream that breaks off).
With ``x-upstream-hold: last``, a stream's last chunk waits until ``Upstream.release`` is set (a test sets it once
the first chunk reached its client: a stream the proxy held back whole would never be released).
``x-upstream-output-tokens`` and ``x-upstream-input-tokens`` make it bill those counts instead (a long answer to a
body without an output limit; an absurd usage figure).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.text import encoding
from mmtok.budgets.proxy.server import bind

GEMINI = re.compile(r"^/v1(?:beta)?/models/([^:/]+):(\w+)$")
REPLY = "A photo of a person in a space suit."
CREATED = 1764892800  # the answers' creation time (fixed, so that two answers to one body are the same bytes)


# ----------------------------------------------------------------------------------------------- billing rules
def _openai_tile(base: int, tile: int) -> Callable[[int, int, str], int]:
    return lambda w, h, detail: F.openai_tile(w, h, base, tile, "high" if detail == "auto" else detail).tokens


def _openai_patch(budget: int, multiplier: float) -> Callable[[int, int, str], int]:
    return lambda w, h, detail: F.openai_patch(w, h, multiplier, budget, 2048).tokens


def _anthropic(max_edge: int, max_tokens: int) -> Callable[[int, int, str], int]:
    return lambda w, h, detail: F.anthropic_patches(w, h, max_edge, max_tokens).tokens


# model -> the upstream's image rule. mmtok documents: gpt-4o tiles 85 + 170; gpt-4.1-mini a 6,144-patch budget;
# Claude Sonnet 4.5 1,568 px / 1,568 tokens; Gemini 2.5 Pro 258 per 768-px tile. This upstream bills otherwise.
IMAGE_RULES: dict[str, Callable[[int, int, str], int]] = {
    "gpt-4o": _openai_tile(100, 190),
    "gpt-4.1-mini": _openai_patch(1536, 1.62),  # the budget 2025 bills showed (families.toml notes)
    "claude-sonnet-4-5": _anthropic(1568, 1200),
    "gemini-2.5-pro": lambda w, h, detail: 258,  # flat, as measured (issue 30)
}
TEXT_ENCODINGS = {"openai": "o200k_base", "anthropic": "cl100k_base"}


@dataclass
class Bill:
    """What the upstream bills one request: input by modality, and output."""

    text: int = 0
    image: int = 0
    overhead: int = 0
    images: list[tuple[int, int, str]] = field(default_factory=list)  # (w, h, detail) seen
    billed_input: int | None = None  # bill this input instead of what was counted
    billed_output: int | None = None  # bill this output instead of the reply's own tokens

    @property
    def input(self) -> int:
        return self.text + self.image + self.overhead if self.billed_input is None else self.billed_input


@dataclass
class Upstream:
    """The billing rules in force; ``overheads`` per API (tokens per message, per request)."""

    image_rules: dict[str, Callable[[int, int, str], int]] = field(default_factory=lambda: dict(IMAGE_RULES))
    overheads: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"openai-chat": (3, 3), "openai-responses": (0, 0), "anthropic": (0, 0)}
    )
    requests: list[dict[str, Any]] = field(default_factory=list)  # what arrived: path, headers, bill
    release: threading.Event = field(default_factory=threading.Event)  # x-upstream-hold: the last chunk may go

    def text_tokens(self, provider: str, text: str) -> int:
        if provider == "gemini":
            return math.ceil(len(text) / 4)
        return len(encoding(TEXT_ENCODINGS[provider]).encode(text, disallowed_special=()))

    def image_tokens(self, model: str, data: bytes, detail: str) -> tuple[int, tuple[int, int, str]]:
        with Image.open(io.BytesIO(data)) as image:
            w, h = image.size
        rule = self.image_rules.get(model.split("/")[-1])
        if rule is None:
            raise ValueError(f"the test upstream has no image rule for {model}")
        return rule(w, h, detail), (w, h, detail)


def _data_url_bytes(url: str) -> bytes:
    """An image URL's bytes: inline, or fetched as the provider would (test servers on the loopback interface)."""
    if url.startswith(("http://", "https://")):
        import httpx

        return httpx.get(url, timeout=10).content
    return base64.b64decode(url.split(",", 1)[1])


def _walk_openai_chat(body: dict[str, Any], up: Upstream, bill: Bill) -> None:
    model = body["model"]
    for message in body.get("messages", []):
        content = message.get("content")
        texts = [content] if isinstance(content, str) else []
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "text":
                texts.append(part["text"])
            elif part.get("type") == "image_url":
                image = part["image_url"]
                _add_image(bill, up, model, _data_url_bytes(image["url"]), image.get("detail", "auto"))
        bill.text += sum(up.text_tokens("openai", t) for t in texts)
        # OpenAI's cookbook framing: each message's role (and name) is encoded as well
        bill.overhead += sum(up.text_tokens("openai", message[k]) for k in ("role", "name") if message.get(k))
    per_message, per_request = up.overheads["openai-chat"]
    bill.overhead += per_message * len(body.get("messages", [])) + per_request


def _walk_openai_responses(body: dict[str, Any], up: Upstream, bill: Bill) -> None:
    model = body["model"]
    given = body.get("input")
    items = [{"content": given}] if isinstance(given, str) else given or []
    for item in items:
        content = item.get("content")
        texts = [content] if isinstance(content, str) else []
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "input_text":
                texts.append(part["text"])
            elif part.get("type") == "input_image":
                _add_image(bill, up, model, _data_url_bytes(part["image_url"]), part.get("detail", "auto"))
        bill.text += sum(up.text_tokens("openai", t) for t in texts)
    if isinstance(body.get("instructions"), str):
        bill.text += up.text_tokens("openai", body["instructions"])
    per_message, per_request = up.overheads["openai-responses"]
    bill.overhead += per_message * len(items) + per_request


def _walk_anthropic(body: dict[str, Any], up: Upstream, bill: Bill) -> None:
    model = body["model"]
    system = body.get("system")
    if isinstance(system, str):
        bill.text += up.text_tokens("anthropic", system)
    for message in body.get("messages", []):
        content = message.get("content")
        texts = [content] if isinstance(content, str) else []
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "text":
                texts.append(block["text"])
            elif block.get("type") == "image":
                _add_image(bill, up, model, base64.b64decode(block["source"]["data"]), "auto")
        bill.text += sum(up.text_tokens("anthropic", t) for t in texts)
    per_message, per_request = up.overheads["anthropic"]
    bill.overhead += per_message * len(body.get("messages", [])) + per_request


def _walk_gemini(body: dict[str, Any], model: str, up: Upstream, bill: Bill) -> None:
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            if isinstance(part.get("text"), str):
                bill.text += up.text_tokens("gemini", part["text"])
            inline = part.get("inlineData") or part.get("inline_data")
            if inline:
                _add_image(bill, up, model, base64.urlsafe_b64decode(inline["data"]), "auto")


def _add_image(bill: Bill, up: Upstream, model: str, data: bytes, detail: str) -> None:
    tokens, seen = up.image_tokens(model, data, detail)
    bill.image += tokens
    bill.images.append(seen)


# ------------------------------------------------------------------------------------------------ responses
def _sse(events: list[tuple[str | None, dict[str, Any] | str]], newline: str = "\n") -> list[bytes]:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}{newline}" if name else ""
        out.append(f"{head}data: {text}{newline}{newline}".encode())
    return out


def openai_chat(body: dict[str, Any], bill: Bill, output: int) -> tuple[dict[str, Any], list[bytes]]:
    usage = {
        "prompt_tokens": bill.input,
        "completion_tokens": output,
        "total_tokens": bill.input + output,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }
    head = {"id": "chatcmpl-test", "created": CREATED, "model": body["model"]}
    message = {"role": "assistant", "content": REPLY, "refusal": None}
    whole = {**head, "object": "chat.completion", "usage": usage}
    whole["choices"] = [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}]
    # As OpenAI documents include_usage: every chunk then has "usage": null, and one more chunk carries the usage.
    include_usage = (body.get("stream_options") or {}).get("include_usage") is True
    chunk = {**head, "object": "chat.completion.chunk"} | ({"usage": None} if include_usage else {})

    def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}]}

    events: list[tuple[str | None, dict[str, Any] | str]] = [(None, delta({"role": "assistant", "content": ""}))]
    events += [(None, delta({"content": word + " "})) for word in REPLY.split()]
    events.append((None, delta({}, "stop")))
    if include_usage:
        events.append((None, {**chunk, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return whole, _sse(events)


def openai_responses(body: dict[str, Any], bill: Bill, output: int) -> tuple[dict[str, Any], list[bytes]]:
    usage = {
        "input_tokens": bill.input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": bill.input + output,
    }
    text = {"type": "output_text", "text": REPLY, "annotations": []}
    item = {"id": "msg_test", "type": "message", "role": "assistant", "status": "completed", "content": [text]}
    response = {
        "id": "resp_test",
        "object": "response",
        "created_at": time.time(),
        "model": body["model"],
        "status": "completed",
        "output": [item],
        "usage": usage,
        "parallel_tool_calls": True,
        "tools": [],
        "tool_choice": "auto",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
    }
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": started})
    ]
    for n, word in enumerate(REPLY.split(), 1):
        delta = {
            "type": "response.output_text.delta",
            "item_id": "msg_test",
            "output_index": 0,
            "content_index": 0,
            "delta": word + " ",
            "sequence_number": n,
            "logprobs": [],
        }
        events.append(("response.output_text.delta", delta))
    done = {"type": "response.completed", "sequence_number": len(events), "response": response}
    events.append(("response.completed", done))
    return response, _sse(events)


def anthropic_messages(body: dict[str, Any], bill: Bill, output: int) -> tuple[dict[str, Any], list[bytes]]:
    message = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": REPLY}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": bill.input,
            "output_tokens": output,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    for word in REPLY.split():
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}}
        events.append(("content_block_delta", delta))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return message, _sse(events)


def gemini_generate(model: str, bill: Bill, output: int) -> tuple[dict[str, Any], list[bytes]]:
    details = [{"modality": "TEXT", "tokenCount": bill.text + bill.overhead}]
    if bill.image:
        details.append({"modality": "IMAGE", "tokenCount": bill.image})
    usage = {
        "promptTokenCount": bill.input,
        "candidatesTokenCount": output,
        "totalTokenCount": bill.input + output,
        "promptTokensDetails": details,
    }
    candidate = {"content": {"parts": [{"text": REPLY}], "role": "model"}, "finishReason": "STOP", "index": 0}
    whole = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model}
    words = REPLY.split()
    chunks = []
    for n, word in enumerate(words):
        part = {"content": {"parts": [{"text": word + " "}], "role": "model"}, "index": 0}
        if n == len(words) - 1:
            part["finishReason"] = "STOP"
        partial = {"promptTokenCount": bill.input, "promptTokensDetails": details}
        chunks.append((None, {"candidates": [part], "usageMetadata": usage if n == len(words) - 1 else partial}))
    return whole, _sse(chunks, newline="\r\n")


def output_tokens() -> int:
    return len(encoding("o200k_base").encode(REPLY))


# ------------------------------------------------------------------------------------------------------ app
def _error(provider: str, status: int, message: str) -> JSONResponse:
    if provider == "anthropic":
        return JSONResponse({"type": "error", "error": {"type": "api_error", "message": message}}, status)
    if provider == "gemini":
        return JSONResponse({"error": {"code": status, "message": message, "status": "INTERNAL"}}, status)
    return JSONResponse({"error": {"message": message, "type": "server_error", "param": None, "code": None}}, status)


def make_app(up: Upstream) -> Starlette:
    """The upstream as an ASGI app: OpenAI under /v1, Anthropic under /v1/messages, Gemini under /v1beta."""

    async def handle(request: Request) -> Response:
        path = request.url.path
        body = json.loads(await request.body())
        provider = "gemini" if GEMINI.match(path) else "anthropic" if "/messages" in path else "openai"
        behaviour = request.headers.get("x-upstream-behaviour", "")
        delay = float(request.headers.get("x-upstream-delay", "0.2"))
        seen = {"path": path, "query": request.url.query, "headers": dict(request.headers), "behaviour": behaviour}
        seen["stream_options"] = body.get("stream_options")
        up.requests.append(seen)
        if behaviour == "500":
            return _error(provider, 500, "the test upstream failed, as asked")
        if behaviour == "slow":
            await asyncio.sleep(delay)
        bill = Bill(billed_input=_number(request, "input"), billed_output=_number(request, "output"))
        whole, events, stream = _answer(path, body, up, bill)
        seen["bill"] = bill
        if whole is None:
            return JSONResponse({"error": f"test upstream: unknown path {path}"}, 404)
        if not stream:
            return JSONResponse(whole)
        if behaviour == "drip":
            events = _dripped(events, int(request.headers.get("x-upstream-chunks", "10")))
        hold = up.release if request.headers.get("x-upstream-hold") == "last" else None
        return StreamingResponse(_paced(events, behaviour, delay, hold), media_type="text/event-stream")

    return Starlette(routes=[Route("/{path:path}", handle, methods=["POST"])])


def _number(request: Request, which: str) -> int | None:
    text = request.headers.get(f"x-upstream-{which}-tokens")
    return None if text is None else int(text)


def _answer(path: str, body: dict[str, Any], up: Upstream, bill: Bill) -> tuple[Any, list[bytes], bool]:
    stream = body.get("stream") is True
    out = output_tokens() if bill.billed_output is None else bill.billed_output
    if path == "/v1/chat/completions":
        _walk_openai_chat(body, up, bill)
        return (*openai_chat(body, bill, out), stream)
    if path in ("/v1/responses", "/v1/responses/input_tokens"):
        _walk_openai_responses(body, up, bill)
        if path.endswith("input_tokens"):
            return {"object": "response.input_tokens", "input_tokens": bill.input}, [], False
        return (*openai_responses(body, bill, out), stream)
    if path in ("/v1/messages", "/v1/messages/count_tokens"):
        _walk_anthropic(body, up, bill)
        if path.endswith("count_tokens"):
            return {"input_tokens": bill.input}, [], False
        return (*anthropic_messages(body, bill, out), stream)
    gemini = GEMINI.match(path)
    if gemini:
        model, method = gemini.group(1), gemini.group(2)
        inner = body.get("generateContentRequest", body) if method == "countTokens" else body
        _walk_gemini(inner, model, up, bill)
        whole, events = gemini_generate(model, bill, out)
        if method == "countTokens":
            return (
                {"totalTokens": bill.input, "promptTokensDetails": whole["usageMetadata"]["promptTokensDetails"]},
                [],
                False,
            )
        return whole, events, method == "streamGenerateContent"
    return None, [], False


def _dripped(events: list[bytes], count: int) -> list[bytes]:
    """``events`` with SSE comments between them, ``count`` chunks in all (comments carry no data)."""
    padding = [b": keep-alive\n\n"] * max(0, count - len(events))
    return events[:1] + padding + events[1:]


async def _paced(events: list[bytes], behaviour: str, delay: float, hold: threading.Event | None = None) -> Any:
    for n, event in enumerate(events):
        if behaviour in ("drip", "cut") and n:
            await asyncio.sleep(delay)
        if hold is not None and n == len(events) - 1:  # bounded: a test that never releases fails, it does not hang
            await asyncio.get_running_loop().run_in_executor(None, hold.wait, 60)
        if behaviour == "cut" and n == 2:
            raise ConnectionResetError("the test upstream cut the stream, as asked")
        yield event


# ------------------------------------------------------------------------------------------------ serving
@contextlib.contextmanager
def serve(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` with Uvicorn on ``host`` and a free port in a background thread; yields the base URL."""
    sock = bind(host, 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
