"""The HTTP judge client is bounded (issue 12, finding 8), tested against real HTTP servers on 127.0.0.1: a cap on
the reply's bytes, an overall deadline (a 1 byte/s drip fails in time), every malformed reply one EvalError line,
no API key sent across origins on a redirect, and a cache keyed by endpoint, model and rubric, written atomically,
that shrugs off a corrupted file."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app
from mmtok.errors import EvalError
from mmtok.eval.judge import MAX_REPLY_BYTES, HTTPJudge, get_judge
from mmtok.eval.runner import read_results


def completion(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"content": text}}]}).encode()


class Server:
    """A real HTTP server on loopback; ``reply(handler)`` writes each response and sees the request's headers."""

    def __init__(self, reply: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.requests: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.requests.append(dict(self.headers))
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
                    reply(self)

            do_GET = do_POST

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = self.base + "/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def answer(body: bytes, status: int = 200, length: bool = True) -> Callable[[BaseHTTPRequestHandler], None]:
    def reply(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        if length:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return reply


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(reply) -> Server:
        servers.append(Server(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def judge(server: Server, tmp_path: Path, **options) -> HTTPJudge:
    return HTTPJudge(server.url, "test-model", backoff_s=0.01, cache_dir=str(tmp_path / "cache"), **options)


def test_a_normal_reply_is_scored_with_the_key_from_the_environment(serve, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = serve(answer(completion("Score: 4")))
    result = judge(server, tmp_path).score("the digit seven", "seven", "which digit?")
    assert (result.score, result.status) == (4.0, "ok")
    assert server.requests[0]["Authorization"] == "Bearer sk-test"


def test_an_endless_reply_without_a_length_is_cut_at_the_cap(serve, tmp_path):
    sent = []

    def flood(h: BaseHTTPRequestHandler) -> None:  # "200 MB": no Content-Length, until the client hangs up
        h.send_response(200)
        h.end_headers()
        block = b"x" * 65536
        for _ in range(200 * 16):
            h.wfile.write(block)
            sent.append(len(block))

    server = serve(flood)
    with pytest.raises(EvalError, match=rf"sent more than {MAX_REPLY_BYTES:,} bytes: refused"):
        judge(server, tmp_path, retries=0).score("a", "b")
    time.sleep(0.2)
    assert sum(sent) < 50 * MAX_REPLY_BYTES  # the client stopped reading long before 200 MB


def test_an_announced_oversized_reply_is_refused_before_reading(serve, tmp_path):
    def big(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(200_000_000))
        h.end_headers()
        h.wfile.write(b"{")

    with pytest.raises(EvalError, match=r"announced a 200,000,000-byte reply"):
        judge(serve(big), tmp_path, retries=0).score("a", "b")


def test_a_one_byte_per_second_drip_fails_within_the_deadline(serve, tmp_path):
    def drip(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        for byte in completion("5") * 10:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(1)

    server = serve(drip)
    with pytest.raises(EvalError, match=r"no complete reply within the 2 s deadline"):  # not the 5-s read timeout
        judge(server, tmp_path, timeout_s=5, deadline_s=2, retries=3).score("a", "b")
    assert len(server.requests) == 1  # no retry after the deadline


def test_a_silent_server_fails_within_the_deadline_across_retries(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        with pytest.raises(EvalError, match="unreachable after") as caught:
            HTTPJudge(
                f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                "m",
                timeout_s=1,
                deadline_s=1.5,
                retries=10,
                cache_dir=tmp_path,
            ).score("a", "b")
        attempts = int(re.search(r"unreachable after (\d+) attempt", str(caught.value)).group(1))
        assert 1 <= attempts <= 2  # the 1.5-s deadline ended the 1-s attempts, not the ten retries
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"choices": [{"message": {"content": "\xff\xfe 5"}}]}', "not UTF-8 text"),
        (b"<html>busy</html>", "not JSON"),
        (b'{"choices": []}', "not a chat completion"),
        (b'{"choices": [{"message": {"content": 5}}]}', "content is not text"),
        (b'["choices"]', "not a chat completion"),
    ],
)
def test_a_malformed_reply_is_one_eval_error_line(serve, tmp_path, body, message):
    with pytest.raises(EvalError, match=message) as caught:
        judge(serve(answer(body)), tmp_path).score("a", "b")
    assert "\n" not in str(caught.value)


def test_a_broken_status_line_is_retried_then_one_line(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    seen = []

    def garbage() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.recv(65536)
            seen.append(1)  # before the reply: the client cannot have its answer before this is counted
            conn.sendall(b"HELLO THERE\r\n\r\n")  # http.client.BadStatusLine
            conn.close()

    threading.Thread(target=garbage, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        with pytest.raises(EvalError, match=r"unreachable after 2 attempts .*BadStatusLine") as caught:
            HTTPJudge(url, "m", retries=1, backoff_s=0.01, timeout_s=2, cache_dir=tmp_path).score("a", "b")
        assert "\n" not in str(caught.value) and len(seen) == 2
    finally:
        listener.close()


def test_options_of_the_wrong_type_are_one_line(tmp_path):
    with pytest.raises(EvalError, match="timeout_s must be a number"):
        get_judge({"kind": "http", "base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": "slow"})
    with pytest.raises(EvalError, match="base_url must be an http"):
        get_judge({"kind": "http", "base_url": "file:///etc/passwd", "model": "m"})
    with pytest.raises(EvalError, match="unexpected keyword argument 'colour'"):
        get_judge({"kind": "http", "base_url": "http://127.0.0.1:9/v1", "model": "m", "colour": 1})


def test_a_redirect_to_another_origin_is_refused_and_the_key_never_leaves(serve, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    elsewhere = serve(answer(completion("5")))

    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", elsewhere.url + "/chat/completions")
        h.send_header("Content-Length", "0")
        h.end_headers()

    endpoint = serve(redirect)
    with pytest.raises(EvalError, match=r"redirected \(HTTP 302\) to another origin, http://127\.0\.0\.1:\d+: not"):
        judge(endpoint, tmp_path).score("a", "b")
    assert endpoint.requests[0]["Authorization"] == "Bearer sk-secret"
    assert not any("Authorization" in request for request in elsewhere.requests)
    assert elsewhere.requests == []  # not followed at all


def test_the_cache_is_keyed_by_endpoint_written_atomically_and_survives_corruption(serve, tmp_path):
    low, high = serve(answer(completion("2"))), serve(answer(completion("5")))
    cache = tmp_path / "cache"
    assert judge(low, tmp_path).score("a", "b").score == 2.0
    assert judge(high, tmp_path).score("a", "b").score == 5.0  # same request, another endpoint: not the cached 2
    assert judge(low, tmp_path).score("a", "b").score == 2.0 and len(low.requests) == 1  # from the cache
    assert HTTPJudge(low.url, "other-model", cache_dir=cache).score("a", "b").score == 2.0
    assert len(low.requests) == 2  # another model: not the cached reply either
    files = sorted(cache.iterdir())
    assert len(files) == 3 and all(f.suffix == ".json" for f in files)  # no partial files left behind
    entry = json.loads(files[0].read_text())
    assert {"endpoint", "model", "rubric_sha1", "reply"} <= set(entry)
    for f in files:
        f.write_bytes(b"\xff{ torn")
    assert judge(low, tmp_path).score("a", "b").score == 2.0 and len(low.requests) == 3  # asked again
    repaired = [json.loads(f.read_text()) for f in files if f.read_bytes() != b"\xff{ torn"]
    assert [(e["endpoint"], e["model"], e["reply"]) for e in repaired] == [
        (low.url + "/chat/completions", "test-model", "2")
    ]


def test_the_default_cache_is_mmtoks_user_cache_folder(monkeypatch, tmp_path, serve):
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "mmtok-cache"))
    server = serve(answer(completion("3")))
    assert HTTPJudge(server.url, "m").score("a", "b").score == 3.0
    assert len(list((tmp_path / "mmtok-cache" / "judge").glob("*.json"))) == 1


def test_a_bad_judge_reply_in_a_run_is_that_items_error(serve, tmp_path, monkeypatch, seeded_cache):
    server = serve(answer(b'{"choices": [{"message": {"content": "\xff"}}]}'))
    monkeypatch.setenv("MMTOK_JUDGE_BASE_URL", server.url)
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(seeded_cache))
    suite = tmp_path / "qa.toml"
    suite.write_text(
        f"""
[dataset]
kind = "qa"
source = "builtin:digits-qa"
limit = 2
[metrics]
names = ["accuracy", "judge"]
judge = {{ kind = "http", base_url = "{server.url}", model = "m" }}
"""
    )
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(out)])
    assert result.exit_code == 1, result.output
    rows = read_results(out)
    assert len(rows) == 2 and all("not UTF-8 text" in row["error"] for row in rows.values())
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["items"], summary["ok"], summary["failed"]) == (2, 0, 2)


def test_a_key_that_cannot_be_sent_is_one_line_that_does_not_show_it(serve, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret\nX-Injected: 1")
    with pytest.raises(EvalError, match=r"cannot send the request \(ValueError\); check base_url and the value") as e:
        judge(serve(answer(completion("5"))), tmp_path).score("a", "b")
    assert "sk-secret" not in str(e.value)


def _qa_suite(tmp_path, judge: str) -> Path:
    suite = tmp_path / "qa.toml"
    suite.write_text(
        f'[dataset]\nkind = "qa"\nsource = "builtin:digits-qa"\nlimit = 1\n[metrics]\nnames = ["judge"]\n'
        f"judge = {judge}\n"
    )
    return suite


def test_a_file_cannot_choose_which_secret_is_sent_where_nor_where_replies_are_written(
    serve, tmp_path, monkeypatch, seeded_cache
):
    """A suite naming its own endpoint, an environment variable and a cache folder once sent that variable's value
    to that endpoint and wrote there."""
    seen: list[str] = []

    def record(handler):
        seen.append(handler.headers.get("Authorization", ""))
        answer(completion("5"))(handler)

    server = serve(record)
    monkeypatch.setenv("FAKE_SECRET", "hunter2")
    monkeypatch.setenv("MMTOK_JUDGE_API_KEY", "sk-judge")
    monkeypatch.delenv("MMTOK_JUDGE_BASE_URL", raising=False)
    for judge, says in (
        (
            f'{{ kind = "http", base_url = "{server.url}", model = "m", api_key_env = "FAKE_SECRET" }}',
            "api_key_env cannot be set in a file",
        ),
        (
            f'{{ kind = "http", base_url = "{server.url}", model = "m", cache_dir = "{tmp_path / "chosen"}" }}',
            "cache_dir cannot be set in a file",
        ),
        (
            f'{{ kind = "http", base_url = "{server.url}", model = "m" }}',
            f"set $MMTOK_JUDGE_BASE_URL to {server.url}",
        ),
    ):
        result = CliRunner().invoke(app, ["eval", "run", str(_qa_suite(tmp_path, judge)), "-o", str(tmp_path / "r")])
        assert result.exit_code == 2 and says in result.output, result.output  # the suite's error: nothing ran
    assert seen == [] and not (tmp_path / "chosen").exists()
    monkeypatch.setenv("MMTOK_JUDGE_BASE_URL", server.url)  # the user's choice: now the key goes there, and only it
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(seeded_cache))
    suite = _qa_suite(tmp_path, f'{{ kind = "http", base_url = "{server.url}", model = "m" }}')
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "-o", str(tmp_path / "ok")])
    assert result.exit_code == 0, result.output
    assert seen and set(seen) == {"Bearer sk-judge"}
