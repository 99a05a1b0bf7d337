"""The proxy as a process (``mmtok proxy``): 200 concurrent calls recorded once each, SIGKILL mid-stream losing no
committed record, SIGTERM letting a stream in flight finish, loopback by default."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mmtok.budgets.ledger import open_ledger
from tests.upstream import Upstream, make_app, serve

DRIP = {"x-upstream-behaviour": "drip", "x-upstream-delay": "0.2", "x-upstream-chunks": "10"}


class ProxyProcess:
    """``mmtok proxy`` in a child process on a free port of 127.0.0.1."""

    def __init__(self, upstream: str, ledger: Path, *extra: str) -> None:
        command = [sys.executable, "-m", "mmtok.cli.main", "proxy", "--port", "0", "--ledger", str(ledger),
                   "--openai-upstream", upstream + "/v1", "--anthropic-upstream", upstream,
                   "--gemini-upstream", upstream, *extra]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"the proxy did not start: {line}{self.process.stderr.read()}")
        self.url = line.split("listening on ")[1].split(";")[0]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


@pytest.fixture
def upstream():
    with serve(make_app(Upstream())) as url:
        yield url


def wait_until_written(client: httpx.Client, url: str) -> None:
    """Until the proxy says every record it was handed is committed."""
    deadline = time.monotonic() + 20
    while client.get(url + "/mmtok/health").json()["ledger_pending"] and time.monotonic() < deadline:
        time.sleep(0.02)


def body(n: int, stream: bool = False) -> bytes:
    message = {"model": "claude-sonnet-4-5", "max_tokens": 16, "stream": stream,
               "messages": [{"role": "user", "content": f"call number {n}"}]}  # fmt: skip
    return json.dumps(message).encode()


def test_the_proxy_listens_on_loopback_unless_told_otherwise(upstream, tmp_path):
    proxy = ProxyProcess(upstream, tmp_path / "calls.sqlite")
    try:
        assert proxy.url.startswith("http://127.0.0.1:")
    finally:
        assert proxy.stop() == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_200_concurrent_calls_are_each_recorded_exactly_once(upstream, tmp_path, workers):
    ledger = tmp_path / "calls.sqlite"
    proxy = ProxyProcess(upstream, ledger, "--workers", workers)
    bodies = [body(n, stream=n % 4 == 0) for n in range(200)]

    async def send_all() -> list[int]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            url = proxy.url + "/anthropic/v1/messages"
            answers = await asyncio.gather(*(client.post(url, content=b, headers={"x-api-key": "k"}) for b in bodies))
        return [a.status_code for a in answers]

    try:
        statuses = asyncio.run(send_all())
    finally:
        assert proxy.stop() == 0  # SIGTERM: whatever was queued is written before the process ends
    assert statuses == [200] * 200
    found = list(open_ledger(ledger).records())
    assert sorted(r.body_sha256 for r in found) == sorted(hashlib.sha256(b).hexdigest() for b in bodies)
    assert len({r.id for r in found}) == 200 and all(r.billed_input for r in found)


def test_sigkill_mid_stream_loses_no_committed_record_and_the_ledger_stays_consistent(upstream, tmp_path):
    ledger = tmp_path / "calls.sqlite"
    proxy = ProxyProcess(upstream, ledger)
    with httpx.Client(timeout=30) as client:
        for n in range(10):
            assert client.post(proxy.url + "/anthropic/v1/messages", content=body(n)).status_code == 200
        wait_until_written(client, proxy.url)
        with client.stream("POST", proxy.url + "/anthropic/v1/messages", content=body(99, True), headers=DRIP) as s:
            chunks = s.iter_raw()
            next(chunks)  # the stream is under way
            proxy.process.kill()
            with pytest.raises(httpx.HTTPError):
                for _ in chunks:
                    pass
    proxy.process.wait(10)
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 10
    restarted = ProxyProcess(upstream, ledger)
    try:
        with httpx.Client(timeout=30) as client:
            for n in range(10, 15):
                assert client.post(restarted.url + "/anthropic/v1/messages", content=body(n)).status_code == 200
    finally:
        assert restarted.stop() == 0
    found = list(open_ledger(ledger).records())
    assert len(found) == 15 == len({r.body_sha256 for r in found})


def test_sigterm_lets_a_stream_in_flight_finish_and_records_it(upstream, tmp_path):
    ledger = tmp_path / "calls.sqlite"
    proxy = ProxyProcess(upstream, ledger)
    received = b""
    url = proxy.url + "/anthropic/v1/messages"
    with httpx.Client(timeout=30) as client, client.stream("POST", url, content=body(1, True), headers=DRIP) as s:
        chunks = s.iter_raw()
        received += next(chunks)
        proxy.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        for chunk in chunks:
            received += chunk
    assert b"event: message_stop" in received and time.monotonic() - started > 1  # drained, not cut
    assert proxy.stop() == 0
    (record,) = open_ledger(ledger).records()
    assert record.outcome == "ok" and record.stream and record.billed_output
