"""Every streamed call is billed: a Chat Completions stream whose body does not ask for usage is asked for it by the
proxy (``stream_options.include_usage``) and the client gets exactly the stream it asked for, byte for byte; the
Responses, Anthropic and Gemini streams report usage by themselves, and each is recorded with its bill."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from mmtok.budgets.proxy.forward import AskedUsage, ask_for_usage
from mmtok.budgets.proxy.providers import route
from tests.test_proxy import anthropic_client, gemini_client, openai_client, rows
from tests.upstream import Upstream, make_app, running_proxy, serve

HEADERS = {"authorization": "Bearer sk-test", "content-type": "application/json"}
MESSAGES = [{"role": "user", "content": "Describe a photo."}]


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


@pytest.fixture
def proxied(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger) as proxy:
        yield proxy, ledger, state, url


def rows_when(ledger, count: int) -> list:
    """The ledger's rows once it holds ``count`` (a stream's record is committed just after its last byte)."""
    deadline = time.monotonic() + 20
    while len(found := rows(ledger)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def raw_stream(url: str, body: dict) -> bytes:
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30) as answer:
        assert answer.status_code == 200
        return answer.read()


def test_a_chat_stream_without_include_usage_is_billed_and_the_sdk_sees_no_usage(proxied):
    proxy, ledger, state, _ = proxied
    chunks = list(openai_client(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
    assert all(chunk.usage is None for chunk in chunks) and all(chunk.choices for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("A photo")
    assert state.requests[-1]["stream_options"] == {"include_usage": True}  # asked for upstream
    record = rows_when(ledger, 1)[0]
    bill = state.requests[-1]["bill"]
    assert record.stream and record.outcome == "ok" and record.billed_input == bill.input
    assert record.billed_output > 0 and record.billed_cost > 0 and "no usage" not in record.message


def test_the_client_gets_the_bytes_it_would_have_got_from_the_provider(proxied):
    """The same body straight to the upstream and through the proxy: the same bytes, though the proxy asked the
    upstream for usage (which adds a usage chunk and a "usage": null to every other chunk)."""
    proxy, ledger, state, url = proxied
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    direct = raw_stream(url, body)
    through = raw_stream(proxy, body)
    assert through == direct and b'"usage"' not in through and through.endswith(b"data: [DONE]\n\n")
    assert state.requests[-1]["stream_options"] == {"include_usage": True}
    assert rows_when(ledger, 1)[0].billed_input == state.requests[-1]["bill"].input


@pytest.mark.parametrize("options", [{"include_usage": False}, None, {}])
def test_stream_options_that_do_not_ask_for_usage_are_completed_not_replaced(proxied, options):
    proxy, ledger, state, url = proxied
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True, "stream_options": options}
    direct = raw_stream(url, body)
    assert raw_stream(proxy, body) == direct
    assert state.requests[-1]["stream_options"] == {"include_usage": True}
    assert rows_when(ledger, 1)[0].billed_input == state.requests[-1]["bill"].input


def test_a_client_that_asks_for_usage_gets_the_stream_untouched(proxied):
    proxy, ledger, state, url = proxied
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    direct = raw_stream(url, body)
    assert raw_stream(proxy, body) == direct and b'"usage": {"prompt_tokens"' in direct
    chunks = list(
        openai_client(proxy).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.prompt_tokens == state.requests[-1]["bill"].input
    assert [r.billed_input for r in rows_when(ledger, 2)] == [state.requests[-1]["bill"].input] * 2


def test_responses_anthropic_and_gemini_streams_report_usage_by_themselves_and_are_billed(proxied):
    proxy, ledger, state, _ = proxied
    events = list(openai_client(proxy).responses.create(model="gpt-4o", input="Describe a photo.", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.usage.input_tokens
    with anthropic_client(proxy).messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES) as s:
        message = s.get_final_message()
    google = gemini_client(proxy)
    pieces = list(google.models.generate_content_stream(model="gemini-2.5-pro", contents="Describe a photo."))
    found = rows_when(ledger, 3)
    assert [r.api for r in found] == ["openai-responses", "anthropic-messages", "gemini-generate"]
    assert all(r.stream and r.outcome == "ok" and r.billed_cost > 0 for r in found)
    assert [r.billed_input for r in found] == [request["bill"].input for request in state.requests]
    assert found[0].billed_output == events[-1].response.usage.output_tokens
    assert found[1].billed_output == message.usage.output_tokens
    assert found[2].billed_output == pieces[-1].usage_metadata.candidates_token_count
    assert all(request["stream_options"] is None for request in state.requests)  # nothing added to these


# ------------------------------------------------------------------------------------------------ the parts
def chat_route():
    return route("/v1/chat/completions")


def test_include_usage_is_added_to_the_body_as_the_last_key_and_the_rest_left_as_sent():
    content = b'{"model": "gpt-4o", "stream": true, "messages": []}\n'
    sent, asked = ask_for_usage(chat_route(), json.loads(content), content)
    expected = b'{"model": "gpt-4o", "stream": true, "messages": [],"stream_options":{"include_usage":true}}\n'
    assert asked and sent == expected
    assert json.loads(sent)["stream_options"] == {"include_usage": True}
    for body in ({"model": "gpt-4o", "messages": []}, {"model": "gpt-4o", "stream": True,
                                                        "stream_options": {"include_usage": True}}):  # fmt: skip
        content = json.dumps(body).encode()
        assert ask_for_usage(chat_route(), body, content) == (content, False)
    responses = json.dumps({"model": "gpt-4o", "stream": True}).encode()
    assert ask_for_usage(route("/v1/responses"), json.loads(responses), responses) == (responses, False)


def chunk(n: int, usage: str = ', "usage": null') -> bytes:
    return f'data: {{"id": "c", "choices": [{{"index": 0, "delta": {{"content": "w{n}"}}}}]{usage}}}\n\n'.encode()


USAGE_CHUNK = b'data: {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n'


def test_the_asked_usage_is_taken_out_however_the_stream_is_cut_into_chunks():
    sent = b"".join(chunk(n) for n in range(3)) + USAGE_CHUNK + b"data: [DONE]\n\n"
    wanted = b"".join(chunk(n, "") for n in range(3)) + b"data: [DONE]\n\n"
    for size in (1, 2, 7, 64, len(sent)):
        remover = AskedUsage()
        out = b"".join(remover.feed(sent[i : i + size]) for i in range(0, len(sent), size)) + remover.close()
        assert out == wanted, size


def test_the_asked_usage_is_taken_out_of_crlf_streams_and_compact_json():
    sent = b'data: {"usage":null,"id":"c","choices":[{"index":0}]}\r\n\r\n'
    sent += b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5}}\r\n\r\ndata: [DONE]\r\n\r\n'
    remover = AskedUsage()
    assert (
        remover.feed(sent) + remover.close() == b'data: {"id":"c","choices":[{"index":0}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    )


def test_text_that_mentions_usage_is_left_as_sent():
    text = b'data: {"choices": [{"delta": {"content": "the \\"usage\\": null field"}}]}\n\n'
    remover = AskedUsage()
    assert remover.feed(text) == text
