"""Billed usage read from each provider's responses, whole and streamed, whatever the chunk boundaries."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from mmtok.budgets.ledger.usage import (
    MAX_SSE_LINE_BYTES,
    StreamUsage,
    Usage,
    billed_cost,
    usage_from_body,
    usage_from_bytes,
)
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


# ------------------------------------------------------------------ the examples on the providers' own pages
# Each provider's documented response shapes, copied from its API reference and guides (read 2026-12-05): the
# readers must take them as they are published, not only as our stand-in provider writes them.
def _sse(*events: dict, named: bool = True) -> bytes:
    out = b""
    for event in events:
        head = f"event: {event['type']}\n" if named and "type" in event else ""
        out += f"{head}data: {json.dumps(event)}\n\n".encode()
    return out


def _stream(api: str, data: bytes, chunk_bytes: int = 13) -> Usage | None:
    reader = StreamUsage(api)
    for start in range(0, len(data), chunk_bytes):
        reader.feed(data[start : start + chunk_bytes])
    return reader.close()


OPENAI_CHAT_REFERENCE = {  # platform.openai.com/docs/api-reference/chat/create, the default example's response
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I assist you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
}


def test_openai_chat_reference_example():
    usage = usage_from_body("openai-chat", OPENAI_CHAT_REFERENCE)
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.reasoning_tokens) == (19, 10, 0, 0)
    assert usage.input_by_modality == {} and usage.output_by_modality == {}


def test_openai_chat_streamed_with_include_usage_as_the_reference_describes():
    """The chunk object: `usage` is null on every chunk but the last, whose `choices` is empty."""
    head = {"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190, "model": "gpt-4o-mini",
            "system_fingerprint": "fp_44709d6fcb"}  # fmt: skip
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
         "usage": None},
        {**head, "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}], "usage": None},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
        {**head, "choices": [], "usage": OPENAI_CHAT_REFERENCE["usage"]},
    ]  # fmt: skip
    data = _sse(*chunks, named=False) + b"data: [DONE]\n\n"
    usage = _stream("openai-chat", data)
    assert (usage.input_tokens, usage.output_tokens) == (19, 10)


def test_openai_prompt_caching_guide_example_prices_cached_tokens_at_the_cache_rate():
    """platform.openai.com/docs/guides/prompt-caching: 1,920 of 2,006 prompt tokens read from the cache."""
    body = {"usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                      "prompt_tokens_details": {"cached_tokens": 1920},
                      "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}}}  # fmt: skip
    usage = usage_from_body("openai-chat", body)
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (2006, 1920, 300)
    million = Decimal(10**6)
    expected = (86 * Decimal("2.5") + 1920 * Decimal("1.25") + 300 * Decimal(10)) / million
    assert billed_cost("gpt-4o", usage) == expected


def test_openai_audio_output_is_priced_at_the_audio_output_rate():
    """CompletionUsage's documented fields: `completion_tokens_details.audio_tokens` is audio the model produced
    (part of completion_tokens); gpt-4o-audio-preview bills it at $80 per million, text at $10."""
    body = {"usage": {"prompt_tokens": 20, "completion_tokens": 1100, "total_tokens": 1120,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 1000,
                                                    "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}}}  # fmt: skip
    usage = usage_from_body("openai-chat", body)
    assert usage.output_by_modality == {"audio": 1000}
    cost = billed_cost("gpt-4o-audio-preview", usage)
    assert cost == (20 * Decimal("2.5") + 1000 * Decimal(80) + 100 * Decimal(10)) / Decimal(10**6)


OPENAI_REASONING_GUIDE = {  # platform.openai.com/docs/guides/reasoning, the usage object of a response
    "usage": {"input_tokens": 75, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1186,
              "output_tokens_details": {"reasoning_tokens": 1024}, "total_tokens": 1261}
}  # fmt: skip


def test_openai_responses_reasoning_guide_example_whole_and_in_its_completed_event():
    usage = usage_from_body("openai-responses", OPENAI_REASONING_GUIDE)
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (75, 1186, 1024)
    response = {"id": "resp_67ccd2bed1ec8190b14f964abc054267", "object": "response", "status": "completed",
                **OPENAI_REASONING_GUIDE}  # fmt: skip
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress",
                                                                         "usage": None}},
        {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "delta": "Hi"},
        {"type": "response.completed", "sequence_number": 2, "response": response},
    ]  # fmt: skip
    assert _stream("openai-responses", _sse(*events)) == usage


ANTHROPIC_MESSAGES_REFERENCE = {  # docs.claude.com/en/api/messages, the example response
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hi! My name is Claude."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}


def test_anthropic_messages_reference_example():
    usage = usage_from_body("anthropic-messages", ANTHROPIC_MESSAGES_REFERENCE)
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.cache_write_tokens) == (2095, 503, 0, 0)


def test_anthropic_prompt_caching_example_with_both_cache_lifetimes():
    """docs.claude.com/en/docs/build-with-claude/prompt-caching: `cache_creation_input_tokens` is the sum of the
    `cache_creation` object; a 1-hour write costs 2x the input price, a 5-minute one 1.25x, a read 0.1x."""
    body = {"usage": {"input_tokens": 2048, "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 248,
                      "output_tokens": 503,
                      "cache_creation": {"ephemeral_5m_input_tokens": 148,
                                         "ephemeral_1h_input_tokens": 100}}}  # fmt: skip
    usage = usage_from_body("anthropic-messages", body)
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        2048 + 1800 + 248, 1800, 248, 100)  # fmt: skip
    rates = {"input": Decimal(3), "read": Decimal("0.3"), "write": Decimal("3.75"), "output": Decimal(15)}
    expected = (2048 * rates["input"] + 1800 * rates["read"] + 148 * rates["write"] + 100 * 2 * rates["input"]
                + 503 * rates["output"]) / Decimal(10**6)  # fmt: skip
    assert billed_cost("claude-sonnet-4-5", usage) == expected


def test_anthropic_streaming_examples():
    """docs.claude.com/en/docs/build-with-claude/streaming: the basic request (message_start's usage, then the
    cumulative output in message_delta); the web search request, whose message_delta restates the input, with
    cache fields and server tool use; the extended thinking request as printed, with no usage at all."""
    basic = _sse(
        {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message",
         "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": None,
         "stop_sequence": None, "usage": {"input_tokens": 25, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 15}},
        {"type": "message_stop"},
    )  # fmt: skip
    usage = _stream("anthropic-messages", basic)
    assert (usage.input_tokens, usage.output_tokens) == (25, 15)
    web = _sse(
        {"type": "message_start", "message": {"id": "msg_01G...", "type": "message", "role": "assistant",
         "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None, "stop_sequence": None,
         "usage": {"input_tokens": 2679, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                   "output_tokens": 3}}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"input_tokens": 10682, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                   "output_tokens": 510, "server_tool_use": {"web_search_requests": 1}}},
        {"type": "message_stop"},
    )  # fmt: skip
    usage = _stream("anthropic-messages", web)
    assert (usage.input_tokens, usage.output_tokens) == (10682, 510)
    thinking = _sse(
        {"type": "message_start", "message": {"id": "msg_01...", "type": "message", "role": "assistant",
         "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": None, "stop_sequence": None}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}},
        {"type": "message_stop"},
    )  # fmt: skip
    assert _stream("anthropic-messages", thinking) is None  # no usage printed: none read, never a zero


GEMINI_USAGE = {  # ai.google.dev/api/generate-content#UsageMetadata: every documented field
    "promptTokenCount": 1290,
    "cachedContentTokenCount": 1024,
    "candidatesTokenCount": 120,
    "toolUsePromptTokenCount": 40,
    "thoughtsTokenCount": 300,
    "totalTokenCount": 1750,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1032}, {"modality": "IMAGE", "tokenCount": 258}],
    "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 1024}],
    "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": 120}],
    "toolUsePromptTokensDetails": [{"modality": "TEXT", "tokenCount": 40}],
}


def test_gemini_usage_metadata_with_cache_thoughts_and_tools_as_documented():
    """promptTokenCount includes the cached content; thoughts are billed as output; tool-use prompt tokens as
    input."""
    body = {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}, "finishReason": "STOP"}],
            "usageMetadata": GEMINI_USAGE, "modelVersion": "gemini-2.5-flash"}  # fmt: skip
    usage = usage_from_body("gemini-generate", body)
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        1330, 1024, 420, 300)  # fmt: skip
    assert usage.input_by_modality == {"text": 1032, "image": 258} and usage.output_by_modality == {}
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "H"}], "role": "model"}}],
         "usageMetadata": {"promptTokenCount": 1290, "totalTokenCount": 1290}},
        {"candidates": [{"content": {"parts": [{"text": "i"}], "role": "model"}, "finishReason": "STOP"}],
         "usageMetadata": GEMINI_USAGE},
    ]  # fmt: skip
    assert _stream("gemini-generate", _sse(*chunks, named=False).replace(b"\n", b"\r\n")) == usage


def test_gemini_image_output_is_not_priced_at_the_text_rate():
    """candidatesTokensDetails itemises what the model produced: image output at the image output rate (LiteLLM's
    output_cost_per_image_token, $30 / 1M, where genai-prices has none); a rate mmtok does not know makes the bill
    unpriced (said), never priced at the text output rate."""
    metadata = {"promptTokenCount": 10, "candidatesTokenCount": 1290, "totalTokenCount": 1300,
                "candidatesTokensDetails": [{"modality": "IMAGE", "tokenCount": 1290}]}  # fmt: skip
    usage = usage_from_body("gemini-generate", {"usageMetadata": metadata})
    assert usage.output_by_modality == {"image": 1290}
    cost = billed_cost("gemini-2.5-flash-image", usage)
    assert cost == Decimal(1290) * 30 / 10**6 + Decimal(10) * Decimal("0.3") / 10**6  # the text rate: $2.50 / 1M
    with pytest.raises(PriceError, match="output image"):
        billed_cost("gemini-2.5-flash", usage)  # a model that makes no images: no image rate at all
