"""mmtok proxy with the official SDKs as clients: calls priced, passed through and recorded; refusals, bad bodies,
unknown paths and upstream failures answered in each provider's own error shape."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from decimal import Decimal

import anthropic
import httpx
import openai
import pytest
from google import genai

from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.proxy import ProxyConfig, create_app
from tests.upstream import Upstream, data_url, make_app, photo, resetting_server, running_proxy, serve

KEYS = {
    "openai": "sk-proj-SECRETopenai0123456789",
    "anthropic": "sk-ant-SECRETanthropic0123",
    "gemini": "AIzaSECRETgemini0123456",
}


def openai_client(proxy: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=KEYS["openai"], base_url=proxy + "/v1", max_retries=0, default_headers=headers)


def anthropic_client(proxy: str, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=KEYS["anthropic"], base_url=proxy + "/anthropic", max_retries=0, default_headers=headers
    )


def gemini_client(proxy: str, **headers: str) -> genai.Client:
    options = genai.types.HttpOptions(base_url=proxy + "/gemini/", api_version="v1beta", headers=headers)
    return genai.Client(api_key=KEYS["gemini"], http_options=options)


def image_message(size: tuple[int, int] = (1024, 1024)) -> list[dict]:
    url = data_url(*size)
    image = {"type": "image_url", "image_url": {"url": url, "detail": "high"}}
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]


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
        yield proxy, ledger, state


def rows(ledger) -> list:
    return list(open_ledger(ledger).records())


def test_each_sdk_call_is_passed_through_and_recorded_with_prediction_and_bill(proxied):
    proxy, ledger, state = proxied
    reply = openai_client(proxy).chat.completions.create(model="gpt-4o", messages=image_message())
    assert reply.choices[0].message.content.startswith("A photo")
    streamed = list(
        openai_client(proxy).chat.completions.create(
            model="gpt-4o", messages=image_message((512, 300)), stream=True, stream_options={"include_usage": True}
        )
    )
    assert streamed[-1].usage.prompt_tokens == state.requests[-1]["bill"].input
    message = anthropic_client(proxy).messages.create(
        model="claude-sonnet-4-5", max_tokens=32, messages=[{"role": "user", "content": "Hello"}]
    )
    google = gemini_client(proxy)
    gemini = google.models.generate_content(model="gemini-2.5-pro", contents="Hello")
    found = rows(ledger)
    assert [r.api for r in found] == ["openai-chat", "openai-chat", "anthropic-messages", "gemini-generate"]
    first, second = found[0], found[1]
    assert first.billed_input == reply.usage.prompt_tokens and second.stream and second.billed_input
    assert first.predicted["image"] == 765 and first.parts[1]["w"] == 1024 and first.parts[1]["detail"] == "high"
    assert first.predicted_cost > 0 and first.billed_cost > 0 and first.latency_ms > 0 and first.status == 200
    assert found[2].billed_input == message.usage.input_tokens
    assert found[3].billed_input == gemini.usage_metadata.prompt_token_count
    assert all(r.outcome == "ok" and r.body is None and len(r.body_sha256) == 64 for r in found)


def test_answers_say_what_mmtok_predicted_in_headers(proxied):
    proxy, _, _ = proxied
    raw = openai_client(proxy).chat.completions.with_raw_response.create(model="gpt-4o", messages=image_message())
    assert int(raw.headers["x-mmtok-predicted-input-tokens"]) >= 765
    assert Decimal(raw.headers["x-mmtok-predicted-cost-usd"]) > 0


def test_count_endpoints_are_passed_through_and_cost_nothing(proxied):
    proxy, ledger, _ = proxied
    count = anthropic_client(proxy).messages.count_tokens(
        model="claude-sonnet-4-5", messages=[{"role": "user", "content": "Hello there"}]
    )
    tokens = openai_client(proxy).responses.input_tokens.count(model="gpt-4o", input="Hello there")
    google = gemini_client(proxy)
    gemini = google.models.count_tokens(model="gemini-2.5-pro", contents="Hello there")
    found = rows(ledger)
    assert [r.billed_input for r in found] == [count.input_tokens, tokens.input_tokens, gemini.total_tokens]
    assert all(r.billed_cost == 0 and r.spend == 0 for r in found)


def test_credentials_go_upstream_untouched_and_are_never_stored_or_logged(proxied, caplog):
    proxy, ledger, state = proxied
    caplog.set_level("DEBUG")
    openai_client(proxy).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    anthropic_client(proxy).messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    google = gemini_client(proxy)
    google.models.generate_content(model="gemini-2.5-pro", contents="hi")
    with httpx.Client() as client:  # a Gemini key in the query string, as older clients send it
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        client.post(f"{proxy}/gemini/v1beta/models/gemini-2.5-pro:generateContent?key={KEYS['gemini']}", json=body)
    seen = [r["headers"] for r in state.requests]
    assert seen[0]["authorization"] == f"Bearer {KEYS['openai']}"
    anthropic_key = seen[1].get("x-api-key") or seen[1]["authorization"].removeprefix("Bearer ")
    assert anthropic_key == KEYS["anthropic"] and seen[2]["x-goog-api-key"] == KEYS["gemini"]
    assert state.requests[3]["query"] == f"key={KEYS['gemini']}"
    stored = b"".join(p.read_bytes() for p in ledger.parent.iterdir())
    for key in KEYS.values():
        assert key.encode() not in stored and key not in caplog.text
    assert all("?" not in r.path for r in rows(ledger))


def test_bodies_are_stored_only_when_asked(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, store_bodies=True) as proxy:
        openai_client(proxy).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert json.loads(rows(ledger)[0].body)["messages"][0]["content"] == "hi"


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/embeddings", lambda e: e["error"]["type"] == "invalid_request_error"),
        ("/anthropic/v1/complete", lambda e: e["type"] == "error" and e["error"]["type"] == "not_found_error"),
        ("/gemini/v1beta/models/gemini-2.5-pro:embedContent", lambda e: e["error"]["status"] == "NOT_FOUND"),
        ("/elsewhere", lambda e: "unknown path /elsewhere" in e["error"]["message"]),
    ],
)
def test_unknown_paths_get_a_404_in_the_providers_shape(proxied, path, shape):
    proxy, ledger, state = proxied
    answer = httpx.post(proxy + path, json={"model": "x"})
    assert answer.status_code == 404 and shape(answer.json())
    assert "mmtok proxy" in json.dumps(answer.json()) and not state.requests and not rows(ledger)


def test_malformed_json_is_a_400_each_sdk_reads(proxied):
    proxy, _, state = proxied
    answer = httpx.post(proxy + "/v1/chat/completions", content=b'{"model": "gpt-4o", "messages": [', timeout=10)
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]["message"]
    answer = httpx.post(proxy + "/anthropic/v1/messages", content=b"[1, 2]")
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(proxy + "/v1/chat/completions").status_code == 405
    assert not state.requests


def test_a_body_over_the_cap_is_refused_before_it_is_read(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "calls.sqlite", max_body_bytes=64 * 2**20) as proxy:
        host, port = proxy.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            declared = 200 * 2**20  # 200 MB declared; a few bytes sent
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {declared}\r\n\r\n".encode() + b'{"model": ')  # fmt: skip
            answer = b""
            while b"}}" not in answer:
                answer += sock.recv(65536) or b"}}"
        assert answer.startswith(b"HTTP/1.1 413") and b"209,715,200 bytes" in answer
    with running_proxy(url, tmp_path / "other.sqlite", max_body_bytes=1000) as proxy:

        def chunks():  # no declared length: refused once the read passes the cap
            yield b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "'
            yield b"x" * 5000 + b'"}]}'

        answer = httpx.post(proxy + "/v1/chat/completions", content=chunks())
        assert answer.status_code == 413 and "cap of 1,000 bytes" in answer.json()["error"]["message"]


def test_a_request_over_max_cost_is_refused_in_each_providers_shape_before_it_is_sent(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, max_cost=Decimal("0.0001")) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"over --max-cost \$0\.0001"):
            openai_client(proxy).chat.completions.create(model="gpt-4o", messages=image_message())
        with pytest.raises(anthropic.BadRequestError, match="max-cost"):
            anthropic_client(proxy).messages.create(
                model="claude-sonnet-4-5", max_tokens=4096, messages=[{"role": "user", "content": "hi"}]
            )
        google = gemini_client(proxy)
        with pytest.raises(genai.errors.ClientError, match="INVALID_ARGUMENT"):
            google.models.generate_content(model="gemini-2.5-pro", contents="hi", config={"max_output_tokens": 8192})
        cheap = openai_client(proxy).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
    assert cheap.choices and len(state.requests) == 1
    found = rows(ledger)
    assert [r.outcome for r in found] == ["refused", "refused", "refused", "ok"]
    assert all(r.status == 400 and r.spend == 0 for r in found[:3])


def test_the_daily_budget_refuses_once_spent_and_the_sdk_does_not_retry(upstream, tmp_path):
    state, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, budget_usd_per_day=Decimal("0.003")) as proxy:
        client = openai.OpenAI(api_key=KEYS["openai"], base_url=proxy + "/v1", max_retries=3)
        # bounded at 50 output tokens (~$0.0025 predicted, ~$0.0023 billed): a body without a limit is bounded at
        # the model's maximum output (16,384 tokens, $0.16) and would not fit the day at all
        client.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=50)
        with pytest.raises(openai.RateLimitError, match="daily budget"):
            client.chat.completions.create(model="gpt-4o", messages=image_message(), max_tokens=50)
    assert len(state.requests) == 1  # refused before sending, and not retried (x-should-retry: false)
    assert [r.outcome for r in rows(ledger)] == ["ok", "refused"]


def test_an_unpriceable_request_is_refused_under_a_limit_unless_allowed(upstream, tmp_path):
    state, url = upstream
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.jpg"}}]}]}  # fmt: skip
    with running_proxy(url, tmp_path / "a.sqlite", max_cost=Decimal(1), read_urls=False) as proxy:
        answer = httpx.post(proxy + "/v1/chat/completions", json=body)
    assert answer.status_code == 400 and "cannot be checked" in answer.json()["error"]["message"]
    assert not state.requests


def test_upstream_errors_pass_through_as_the_provider_sent_them(proxied):
    proxy, ledger, _ = proxied
    with pytest.raises(openai.InternalServerError, match="failed, as asked"):
        openai_client(proxy, **{"x-upstream-behaviour": "500"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(anthropic.InternalServerError):
        anthropic_client(proxy, **{"x-upstream-behaviour": "500"}).messages.create(
            model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    found = rows(ledger)
    assert [(r.status, r.outcome) for r in found] == [(500, "upstream_error"), (500, "upstream_error")]


def test_an_upstream_timeout_is_a_504_and_an_unreachable_one_a_502(upstream, tmp_path):
    _, url = upstream
    with running_proxy(url, tmp_path / "a.sqlite", upstream_timeout_s=0.3) as proxy:
        slow = {"x-upstream-behaviour": "slow", "x-upstream-delay": "2"}
        with pytest.raises(openai.APIStatusError) as caught:
            openai_client(proxy, **slow).chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 504
        google = gemini_client(proxy, **slow)
        with pytest.raises(genai.errors.ServerError, match="DEADLINE_EXCEEDED"):
            google.models.generate_content(model="gemini-2.5-pro", contents="hi")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{free.getsockname()[1]}"
    with running_proxy(closed, tmp_path / "b.sqlite") as proxy:
        with pytest.raises(anthropic.APIStatusError) as caught:
            anthropic_client(proxy).messages.create(
                model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 502 and caught.value.body["error"]["type"] == "api_error"
    assert [r.outcome for r in rows(tmp_path / "b.sqlite")] == ["upstream_unreachable"]


def test_an_upstream_that_resets_the_connection_is_a_502(tmp_path):
    with resetting_server() as url, running_proxy(url, tmp_path / "calls.sqlite") as proxy:
        answer = httpx.post(proxy + "/v1/chat/completions", json={"model": "gpt-4o", "messages": []}, timeout=10)
    assert answer.status_code == 502 and answer.json()["error"]["type"] == "server_error"
    assert rows(tmp_path / "calls.sqlite")[0].outcome == "upstream_error"


def test_a_stream_is_passed_on_chunk_by_chunk_as_it_arrives(proxied):
    """The upstream holds its last chunk until the first has reached the client: a proxy that held a stream back
    until its end would never pass the first on (the upstream gives up after 60 s and the test fails)."""
    proxy, ledger, state = proxied
    drip = {"x-upstream-behaviour": "drip", "x-upstream-delay": "0.02", "x-upstream-chunks": "12",
            "x-upstream-hold": "last"}  # fmt: skip
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    arrivals = []
    with httpx.stream("POST", proxy + "/anthropic/v1/messages", json=body, headers=drip, timeout=90) as answer:
        for chunk in answer.iter_raw():
            arrivals.append((state.release.is_set(), chunk))
            state.release.set()  # the first chunk is here: the upstream may send its last
    assert len(arrivals) >= 10 and arrivals[0][0] is False  # the first came while the last was still held
    assert b"".join(c for _, c in arrivals).count(b"event: message_stop") == 1
    record = rows(ledger)[0]
    assert record.stream and record.outcome == "ok" and record.billed_output == 10


def test_a_stream_cut_upstream_is_cut_to_the_client_and_recorded(proxied):
    proxy, ledger, _ = proxied
    client = openai_client(proxy, **{"x-upstream-behaviour": "cut", "x-upstream-delay": "0.05"})
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        list(client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True))
    deadline = time.monotonic() + 10
    while not rows(ledger) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rows(ledger)[0].outcome == "cut"


def test_the_injected_client_carries_every_upstream_call(tmp_path):
    """The app takes its upstream client from the caller: a MockTransport sees the call, nothing is reached."""
    seen = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-4o",
                                         "choices": [], "usage": usage})  # fmt: skip

    config = ProxyConfig(ledger=str(tmp_path / "calls.sqlite"), upstreams={"openai": "https://api.openai.test/v1"})
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    with serve(create_app(config, client=client)) as proxy:
        openai_client(proxy).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert str(seen[0].url) == "https://api.openai.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == f"Bearer {KEYS['openai']}"
    assert rows(tmp_path / "calls.sqlite")[0].billed_input == 9


def test_the_ledger_file_is_sqlite_in_wal_mode(proxied):
    proxy, ledger, _ = proxied
    openai_client(proxy).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_by_default_records_are_written_behind_the_answers_and_all_reach_the_ledger(upstream, tmp_path):
    _, url = upstream
    ledger = tmp_path / "calls.sqlite"
    with running_proxy(url, ledger, sync_ledger=False) as proxy:
        client = openai_client(proxy)
        for _ in range(5):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        deadline = time.monotonic() + 20
        while httpx.get(proxy + "/mmtok/health").json()["ledger_pending"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(rows(ledger)) == 5


def test_urls_in_bodies_are_not_read_at_private_addresses_unless_allowed(upstream, tmp_path):
    """A body is someone else's data: an image URL on the loopback interface is not fetched to price the call
    (the call still goes, unpriced, saying why), unless --allow-private."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    fetched: dict[bool, list[str | None]] = {False: [], True: []}  # allowed -> the Range header of each read
    allowed = [False]

    async def image(request):
        fetched[allowed[0]].append(request.headers.get("range"))
        return Response(photo(640, 480), media_type="image/jpeg")

    _, url = upstream
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}]}]}
    with serve(Starlette(routes=[Route("/cat.jpg", image)])) as host:
        part = {"type": "image_url", "image_url": {"url": host + "/cat.jpg", "detail": "high"}}
        body["messages"][0]["content"].append(part)
        for allow, name in ((False, "closed.sqlite"), (True, "open.sqlite")):
            allowed[0] = allow
            with running_proxy(url, tmp_path / name, allow_private=allow) as proxy:
                assert httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30).status_code == 200
    closed, opened = rows(tmp_path / "closed.sqlite")[0], rows(tmp_path / "open.sqlite")[0]
    assert "private" in closed.message and "image" not in closed.predicted
    assert fetched[False] == [None]  # only the provider fetched it, whole
    assert opened.predicted["image"] == 425 and opened.parts[1]["w"] == 640
    assert any(r and r.startswith("bytes=") for r in fetched[True])  # mmtok read it by ranges


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--max-cost", "abc"], 2, "USD"),
        (["--budget-usd-per-day", "-5"], 2, "positive"),
        (["--keep", "sharpness>=1"], 2, "--keep"),
        (["--openai-upstream", "ftp://example.org"], 2, "http(s)"),
        (["--ledger", "/nonexistent/folder/calls.sqlite"], 1, "its folder does not exist"),
        (["--prices", "{sheet}"], 1, "bad.toml"),
    ],
)
def test_the_proxy_command_refuses_bad_settings_before_it_listens(args, code, said, tmp_path):
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    sheet = tmp_path / "bad.toml"
    sheet.write_text("provider = [\n")
    args = [a.format(sheet=sheet) for a in args]
    result = CliRunner().invoke(app, ["proxy", "--port", "0", "--ledger", str(tmp_path / "calls.sqlite"), *args])
    assert result.exit_code == code and said in result.output and "Traceback" not in result.output
