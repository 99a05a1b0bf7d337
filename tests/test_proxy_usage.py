"""Billed usage read from each provider's responses, whole and streamed, whatever the chunk boundaries."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from mmtok.budgets.usage import MAX_SSE_LINE_BYTES, StreamUsage, Usage, billed_cost, usage_from_body, usage_from_bytes
from mmtok.errors import PriceError
from tests.upstream import Bill, anthropic_messages, gemini_generate, openai_chat, openai_responses

BILL = Bill(text=120, image=765, overhead=6)
STREAMS = {
    "openai-chat": openai_chat({"model": "gpt-4o", "stream_options": {"include_usage": True}}, BILL, 42),
    "openai-responses": openai_responses({"model": "gpt-4o"}, BILL, 42),
    "anthropic-messages": anthropic_messages({"model": "claude-sonnet-4-5"}, BILL, 42),
    "gemini-generate": gemini_generate("gemini-2.5-pro", BILL, 42),
}


@pytest.mark.parametrize("api", list(STREAMS))
def test_whole_bodies_give_input_and_output(api):
    whole, _ = STREAMS[api]
    usage = usage_from_body(api, whole)
    assert (usage.input_tokens, usage.output_tokens) == (891, 42)


@pytest.mark.parametrize("api", list(STREAMS))
@pytest.mark.parametrize("chunk_bytes", [1, 7, 4096])
def test_streams_give_the_same_usage_at_any_chunk_boundary(api, chunk_bytes):
    _, events = STREAMS[api]
    stream = b"".join(events)
    reader = StreamUsage(api)
    for start in range(0, len(stream), chunk_bytes):
        reader.feed(stream[start : start + chunk_bytes])
    usage = reader.close()
    assert (usage.input_tokens, usage.output_tokens) == (891, 42)


def test_gemini_itemises_modalities():
    whole, _ = STREAMS["gemini-generate"]
    assert usage_from_body("gemini-generate", whole).input_by_modality == {"text": 126, "image": 765}
    counted = {"totalTokens": 300, "promptTokensDetails": [{"modality": "IMAGE", "tokenCount": 258}]}
    assert usage_from_body("gemini-count-tokens", counted) == Usage(300, None, 0, 0, 0, {"image": 258})


def test_a_gemini_stream_without_sse_is_read_as_one_json_array():
    whole, _ = STREAMS["gemini-generate"]
    reader = StreamUsage("gemini-generate", sse=False)
    text = json.dumps([whole, whole]).encode()
    for start in range(0, len(text), 100):
        reader.feed(text[start : start + 100])
    assert reader.close().input_tokens == 891


def test_anthropic_cache_tokens_count_as_input_and_a_delta_may_restate_input():
    first = {"input_tokens": 10, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 50, "output_tokens": 1}
    start = {"type": "message_start", "message": {"usage": first}}
    delta = {"type": "message_delta", "usage": {"output_tokens": 77, "input_tokens": 12}}
    reader = StreamUsage("anthropic-messages")
    for event in (start, delta):
        reader.feed(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    usage = reader.close()
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        1062,
        1000,
        50,
        77,
    )


def test_a_chat_stream_without_include_usage_reports_none():
    _, events = openai_chat({"model": "gpt-4o"}, BILL, 42)
    reader = StreamUsage("openai-chat")
    for event in events:
        reader.feed(event)
    assert reader.close() is None


def test_crlf_line_ends_and_a_last_event_without_its_blank_line_are_read():
    body = {"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 3}}
    reader = StreamUsage("gemini-generate")
    reader.feed(b"data: " + json.dumps(body).encode() + b"\r")
    reader.feed(b"\n")
    usage = reader.close()
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (5, 5, 3)


def test_an_endless_line_stops_the_reading_not_the_stream():
    reader = StreamUsage("openai-chat")
    reader.feed(b"data: " + b"x" * (MAX_SSE_LINE_BYTES + 1))
    reader.feed(b'\n\ndata: {"usage": {"prompt_tokens": 1}}\n\n')
    assert reader.close() is None and reader._partial == b""


def test_non_json_and_error_bodies_give_no_usage():
    assert usage_from_bytes("openai-chat", b"<html>502</html>") is None
    assert usage_from_body("anthropic-messages", {"type": "error", "error": {}}) is None


def test_billed_cost_prices_cache_reads_at_their_rate():
    fresh = billed_cost("gpt-4o", Usage(1000, 100))
    cached = billed_cost("gpt-4o", Usage(1000, 100, cached_tokens=800))
    assert cached < fresh and fresh == Decimal(1000) * Decimal("2.5") / 10**6 + Decimal(100) * Decimal(10) / 10**6
    with pytest.raises(PriceError, match="no usage"):
        billed_cost("gpt-4o", Usage())
