"""A hostile upstream cannot take the proxy down: an SSE event that never ends, a line that never ends and a gzip
bomb (1 MB expanding to 1 GiB) each end that call with a ledger row saying why, no traceback, the proxy still
answering and its peak memory a few hundred MB (each case in a fresh proxy process, measured from /proc). The
figures for the docs come from ``python -m mmtok.eval.bench.proxy_hostile`` (eval/results/bench_proxy_hostile.*)."""

from __future__ import annotations

import gzip
import json
import zlib

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from mmtok.eval.bench.proxy_hostile import ANSWER, BODY, CASES, gzip_bomb, hostile_app, measure
from tests.test_proxy import openai_client, rows
from tests.upstream import running_proxy, serve

GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
PEAK_LIMIT_MIB = 400  # "a few hundred MB": before the caps these cases reached 4.1 GB and 2.2 GB


@pytest.fixture(scope="module")
def hostile():
    with serve(hostile_app()) as url:
        yield url


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_answer_ends_its_call_with_a_recorded_error_and_bounded_memory(hostile, tmp_path, case):
    found = measure(case, hostile, tmp_path)
    assert found["peak_mib"] < PEAK_LIMIT_MIB, found
    assert found["rows"] == 2 and found["outcome"] == "upstream_error", found
    assert "ended by the proxy" in found["message"] and "passed" in found["message"]
    assert found["client"]["ended"] != "complete"  # the client sees the answer cut, not a clean end
    assert found["still_answering"] and not found["traceback_on_stderr"], found["stderr"]


def test_the_gzip_bomb_is_valid_gzip_a_thousand_times_smaller():
    bomb = gzip_bomb(64 * 2**20)
    assert len(bomb) < 80_000 and len(gzip.decompress(bomb)) == 64 * 2**20


def encoded_upstream(encoding: str, content: bytes):
    async def handle(request):
        await request.body()
        return Response(content, headers={"content-encoding": encoding, "content-type": "application/json"})

    return Starlette(routes=[Route("/{path:path}", handle, methods=["POST"])])


def deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("deflate", lambda d: deflate(d, zlib.MAX_WBITS)),
        ("deflate", lambda d: deflate(d, -15)),
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
def test_compressed_answers_are_decoded_and_billed(tmp_path, encoding, pack):
    upstream = encoded_upstream(encoding, pack(json.dumps(ANSWER).encode()))
    with serve(upstream) as url, running_proxy(url, tmp_path / "calls.sqlite") as proxy:
        reply = openai_client(proxy).chat.completions.create(**BODY)
    assert reply.choices[0].message.content == "Hi." and rows(tmp_path / "calls.sqlite")[0].billed_input == 8


@pytest.mark.parametrize(
    ("encoding", "content", "said"),
    [
        ("br", b"\x1b\x00", "content-encoding 'br'"),
        ("gzip", GZIP_HEADER + b"\xff" * 20, "corrupt"),
        ("gzip", gzip.compress(json.dumps(ANSWER).encode())[:-12], "end before"),
    ],
    ids=["br", "corrupt", "truncated"],
)
def test_an_answer_the_proxy_cannot_decode_is_a_502_and_recorded(tmp_path, encoding, content, said):
    with serve(encoded_upstream(encoding, content)) as url, running_proxy(url, tmp_path / "calls.sqlite") as proxy:
        answer = httpx.post(proxy + "/v1/chat/completions", json=BODY, timeout=30)
    assert answer.status_code == 502 and said in answer.json()["error"]["message"]
    record = rows(tmp_path / "calls.sqlite")[0]
    assert record.outcome == "upstream_error" and said in record.message
