"""Random corruptions of valid files: load(), decoding and `mmtok inspect` either succeed or raise MediaError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import MediaError
from mmtok.samples import samples_dir
from tests.test_media_errors import _decode

SOURCES = [
    "chelsea.jpg",
    "rocket_rotated.jpg",
    "astronaut.png",
    "coffee.webp",
    "speech.wav",
    "speech.flac",
    "speech.ogg",
    "speech.mp3",
    "speech.m4a",
    "clip.mp4",
    "clip.webm",
    "note.txt",
]
ORIGINALS = {name: (samples_dir() / name).read_bytes() for name in SOURCES}


class Case(tuple):
    def __repr__(self) -> str:  # the bytes are huge; name the source and the size instead
        return f"Case({self[0]!r}, {len(self[1])} bytes, sha1={__import__('hashlib').sha1(self[1]).hexdigest()[:10]})"


@st.composite
def corrupted(draw) -> Case:
    name = draw(st.sampled_from(SOURCES))
    data = bytearray(ORIGINALS[name])
    how = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "head"]))
    # Most format logic lives in the first few KiB: bias positions towards the header.
    position = draw(st.one_of(st.integers(0, 4096), st.integers(0, len(data) - 1)).map(lambda p: min(p, len(data))))
    if how == "truncate":
        data = data[:position]
    elif how == "flip":
        for offset in draw(st.lists(st.integers(0, 64), min_size=1, max_size=8)):
            if position + offset < len(data):
                data[position + offset] ^= draw(st.integers(1, 255))
    elif how == "overwrite":
        junk = draw(st.binary(min_size=1, max_size=256))
        data[position : position + len(junk)] = junk
    elif how == "insert":
        data[position:position] = draw(st.binary(min_size=1, max_size=64))
    else:  # keep the header, replace everything after it
        data = data[: min(position, 64)] + draw(st.binary(max_size=512))
    return Case((name, bytes(data)))


def _check(case: Case) -> None:
    name, data = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            _decode(mmtok.load(path))
        except MediaError as e:
            assert str(path) in str(e)
        result = CliRunner().invoke(app, ["inspect", "--json", str(path)])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code in (0, 1)


@pytest.mark.timeout(300)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(corrupted())
def test_corrupt_files_give_media_error_or_load(case):
    _check(case)


@pytest.mark.timeout(600)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(corrupted())
def test_random_corruptions_drawn_anew_each_run(case):
    """The derandomized 200 above are the same every run; these 300 are new each run (hypothesis prints the seed
    of one that fails), so the runs of CI search the space between them. A long search: ``--hypothesis-seed`` and
    a larger ``max_examples`` by hand."""
    _check(case)
