"""The proxy as a server facing untrusted clients (``mmtok proxy`` in a process): connections that never finish their
headers are closed (slowloris), a body that stalls is answered 408, oversized headers 431 and never forwarded, and
connections over the cap are answered 503 at once, while the proxy goes on answering everyone else."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from tests.test_proxy_reliability import ProxyProcess
from tests.upstream import Upstream, make_app, serve

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture
def upstream():
    state = Upstream()
    with serve(make_app(state)) as url:
        yield state, url


@pytest.fixture
def proxy_for(upstream, tmp_path):
    started = []

    def start(*flags: str) -> ProxyProcess:
        started.append(ProxyProcess(upstream[1], tmp_path / f"calls-{len(started)}.sqlite", *flags))
        return started[-1]

    yield start
    for proxy in started:
        proxy.stop()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def answer_then_close(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """What the server sends until it closes the connection (b"" if it closes without a word)."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def works(url: str) -> bool:
    return httpx.post(url + "/v1/chat/completions", json=BODY, timeout=30).status_code == 200


def test_connections_that_never_finish_their_headers_are_closed(proxy_for):
    proxy = proxy_for("--read-timeout", "1")
    silent = [connect(proxy.url) for _ in range(50)]
    partial = [connect(proxy.url) for _ in range(250)]
    for sock in partial:
        sock.sendall(HEAD)  # no blank line: the head never ends
    dripping = connect(proxy.url)
    dripping.sendall(HEAD)
    stop = threading.Event()

    def drip() -> None:  # one header byte every 0.2 s: each byte in time, the head never whole
        for byte in b"X-Slow: " + b"a" * 100:
            if stop.wait(0.2):
                return
            try:
                dripping.send(bytes([byte]))
            except OSError:
                return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    assert works(proxy.url)  # answered while they hang
    try:
        answers = [answer_then_close(sock) for sock in partial]
        assert all(a.startswith(b"HTTP/1.1 408 ") and b"within 1 s" in a for a in answers)
        assert all(answer_then_close(sock) == b"" for sock in silent)
        assert answer_then_close(dripping).startswith(b"HTTP/1.1 408 ")
    finally:
        stop.set()
        thread.join(5)
        for sock in [*silent, *partial, dripping]:
            sock.close()
    assert works(proxy.url)


def test_a_body_that_stalls_is_answered_408_and_the_connection_closed(proxy_for, upstream):
    proxy = proxy_for("--read-timeout", "1")
    with connect(proxy.url) as sock:
        sock.sendall(HEAD + b"Content-Length: 100\r\n\r\n" + b'{"model": ')  # 10 of 100 bytes, then nothing
        answer = answer_then_close(sock)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"paused for over 1 s" in answer
    assert b"connection: close" in answer.lower() and not upstream[0].requests


@pytest.mark.parametrize(
    ("extra", "status", "said"),
    [
        ({"x-big": "a" * 200_000}, 431, b"headers are over 32,768 bytes"),
        ({f"x-h{n}": "1" for n in range(150)}, 431, b"over 100 headers"),
    ],
    ids=["200-KB-header", "150-headers"],
)
def test_oversized_headers_are_refused_431_and_never_forwarded(proxy_for, upstream, extra, status, said):
    proxy = proxy_for()
    answer = httpx.post(proxy.url + "/v1/chat/completions", json=BODY, headers=extra, timeout=30)
    assert answer.status_code == status and said.decode() in answer.json()["error"]["message"]
    assert answer.headers["connection"] == "close"
    assert not upstream[0].requests
    assert works(proxy.url)


def test_a_request_line_over_the_cap_is_refused_414(proxy_for, upstream):
    proxy = proxy_for()
    answer = httpx.post(proxy.url + "/v1/chat/completions?x=" + "a" * 40_000, json=BODY, timeout=30)
    assert answer.status_code == 414 and not upstream[0].requests


def test_connections_over_the_cap_are_answered_503_at_once(proxy_for):
    proxy = proxy_for("--max-connections", "20", "--read-timeout", "30")
    held = [connect(proxy.url) for _ in range(20)]
    try:
        deadline = time.monotonic() + 15
        while True:  # until the server has taken the 20 in (a busy machine may take a moment)
            with connect(proxy.url) as extra:
                extra.sendall(b"GET /mmtok/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                answer = answer_then_close(extra, 10)
            if answer.startswith(b"HTTP/1.1 503 ") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"too many open connections" in answer
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the server notices the closed connections
        try:
            if works(proxy.url):
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    assert works(proxy.url)


def test_every_proxy_flag_says_what_it_does():
    import typer.main

    from mmtok.cli.main import app

    proxy = typer.main.get_command(app).commands["proxy"]
    assert [p.name for p in proxy.params if not (getattr(p, "help", None) or "").strip()] == []
    assert {"read_timeout", "max_connections", "anthropic_upstream", "gemini_upstream"} <= {
        p.name for p in proxy.params
    }
