"""Random token-file shapes and dtypes through inspect, price, truncate and detokenize (issue 32): each command ends
in at most a few seconds with exit 0 or one ``error:`` line per problem naming the file (never a traceback or an
"unexpected" error), and its peak memory grows by no more than a small multiple of the file's tensors.

Peak memory is this process's high-water mark (``VmHWM``), reset before each example (Linux ``/proc/self/clear_refs``:
writing 5 resets it to the current resident size), so what is measured is what the example itself took. Declared
tensors may be far larger than the data on disk: the data is a hole in a sparse file (zeros, no disk used), so a
header promising gigabytes costs nothing to write, and must cost nothing to refuse.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mmtok.cli.main import app

runner = CliRunner()
STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")
MIB = 1 << 20
BASE_CEILING_MIB = 256  # what a command may take besides its tensors (a model's weights and activations, buffers)
TENSOR_MULTIPLE = 4  # ... plus this many times the bytes of the tensors the file holds
DECODE_BYTES_PER_CELL = 16 << 10  # ... and, decoding an image, this per grid cell (vq-clip-tiny's activations: 64 px^2
# per cell; 65,536 cells, the decode limit, took 960 MiB)
TIME_LIMIT_S = 60.0  # per command: a ceiling, far above what these take on 2 loaded cores (most: refused at once)
DTYPES = {"I64": ("<i8", 8), "I32": ("<i4", 4), "F32": ("<f4", 4), "F16": ("<f2", 2)}
OUT_SUFFIX = {"image": ".png", "audio": ".wav", "text": ".txt", "video": ".wav"}


def peak_mib() -> float:
    return int(STATUS.read_text().split("VmHWM:")[1].split()[0]) / 1024


def reset_peak() -> None:
    CLEAR_REFS.write_text("5")


COHERENT = [("image", "vq-clip-tiny"), ("audio", "av-tiny"), ("text", "text-bytes")]  # what tokenizers write


@st.composite
def token_files(draw):
    """(modality, tokenizer, tensors {name: (dtype, shape)}, grid, sparse, valid ids): half the time what a tokenizer
    writes (so the tensor work is reached), else codebook levels, widths, dtypes, token counts, grids and id
    ranges drawn past every limit."""
    if draw(st.booleans()):
        return draw(written_by_a_tokenizer())
    modality = draw(st.sampled_from(["image", "audio", "text", "video"]))
    tokenizer = draw(st.sampled_from(["vq-clip-tiny", "av-tiny", "text-bytes", "", "nobody"]))
    n = draw(st.sampled_from([0, 1, 16, 64, 256, 3_000_000, 5_000_000]))
    sparse = n > 10_000  # data as a hole: declared, never written
    tensors = {}
    if modality in ("image", "text") or draw(st.booleans()):
        levels = draw(st.sampled_from([None, None, 1, 2, 8, 9, 65, 10_000]))
        shape = [n] if levels is None else [n, levels]
        tensors["ids"] = (draw(st.sampled_from(["I64", "I64", "I32", "F32"])), shape)
    if "ids" not in tensors or draw(st.booleans()):
        width = draw(st.sampled_from([1, 8, 128, 256, 5_000, 9_000]))
        dtype = draw(st.sampled_from(["F32", "F32", "F16", "I64"]))
        tensors["embeddings"] = (dtype, [n, min(width, 8) if sparse else width])
    grid = None
    if modality == "image":
        side = draw(st.sampled_from([8, 1, 4, 16, 2048]))
        grid = [side, draw(st.sampled_from([side, side + 1, 2]))]
    return modality, tokenizer, tensors, grid, sparse, draw(st.booleans())


@st.composite
def written_by_a_tokenizer(draw):
    """What vq-clip-tiny, av-tiny and text-bytes write, at sizes a test decodes in seconds (up to a 32x32 grid, 10 s
    of audio; what larger grids cost to decode is a figure of the model, not of the file: DECODE_BYTES_PER_CELL)."""
    modality = draw(st.sampled_from(["image", "audio", "text"]))
    if modality == "image":
        side = draw(st.sampled_from([1, 8, 8, 16, 32]))
        return "image", "vq-clip-tiny", {"ids": ("I64", [side * side])}, [side, side], False, True
    n = draw(st.sampled_from([1, 16, 160]))
    if modality == "text":
        return "text", "text-bytes", {"ids": ("I64", [n])}, None, False, True
    tensors = {"embeddings": ("F32", [n, 256])}
    if draw(st.booleans()):
        tensors["ids"] = ("I64", [n, draw(st.integers(1, 8))])
    return "audio", "av-tiny", tensors, None, False, True


def write_token_file(
    path: Path, modality: str, tokenizer: str, tensors: dict, grid, sparse: bool, seed: int, valid: bool = True
) -> int:
    """The file by hand (safetensors layout, mmtok header); ids in every tokenizer's range when ``valid`` (else
    some negative or past a codebook); returns the bytes its tensors declare."""
    rng = np.random.default_rng(seed)
    header = {"format": "mmtok.TokenSequence", "version": 1, "modality": modality, "grid": grid, "tokenizer": tokenizer}
    entries, blobs, offset = {}, [], 0
    for name, (dtype, shape) in tensors.items():
        numpy_dtype, size = DTYPES[dtype]
        count = int(np.prod(shape))
        nbytes = count * size
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        if not sparse:
            low, high = (0, 250) if valid else (-3, 1100)
            values = rng.integers(low, high, count) if dtype.startswith("I") else rng.standard_normal(count)
            blobs.append(values.astype(numpy_dtype).tobytes())
        offset += nbytes
    meta = {"tokens_per_second": 16.0} if modality in ("audio", "video") else {}
    head = json.dumps({"__metadata__": {"mmtok": json.dumps({**header, "meta": meta})}, **entries}).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
        f.truncate(8 + len(head) + offset)
    return offset


def commands(path: Path, modality: str) -> list[list[str]]:
    out = path.with_name("out")
    return [
        ["inspect", "--json", str(path)],
        ["price", "--json", "-m", "mmtok-semantic", str(path)],
        ["truncate", str(path), "--method", "random", "--keep-ratio", "0.5", "--out", f"{out}.safetensors"],
        ["detokenize", str(path), "--device", "cpu", "--out", f"{out}{OUT_SUFFIX[modality]}"],
    ]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """Every command once on files it accepts, so that loading models and libraries (once per process) is not
    counted against an example."""
    folder = tmp_path_factory.mktemp("warm")
    for modality, tokenizer, tensors, grid in (
        ("image", "vq-clip-tiny", {"ids": ("I64", [64])}, [8, 8]),
        ("audio", "av-tiny", {"ids": ("I64", [32, 8])}, None),
        ("text", "text-bytes", {"ids": ("I64", [16])}, None),
    ):
        path = folder / f"{modality}.safetensors"
        write_token_file(path, modality, tokenizer, tensors, grid, False, 0)
        for command in commands(path, modality):
            runner.invoke(app, command)


needs_proc = pytest.mark.skipif(not CLEAR_REFS.exists(), reason="peak memory is reset through /proc/self/clear_refs")
FUZZ = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@needs_proc
@settings(max_examples=12, **FUZZ)
@given(case=token_files(), seed=st.integers(0, 2**16))
def test_random_token_files_through_every_token_command_stay_bounded(tmp_path, warm, case, seed):
    """New files every run (no example database): the runs of CI search the space between them."""
    run_every_command(tmp_path, case, seed)


def run_every_command(tmp_path: Path, case: tuple, seed: int) -> None:
    """inspect, price, truncate and detokenize on the drawn file: exit 0, or 1 with one line per problem naming it;
    within the time limit and the memory ceiling."""
    modality, tokenizer, tensors, grid, sparse, valid = case
    path = tmp_path / "tokens.safetensors"
    declared = write_token_file(path, modality, tokenizer, tensors, grid, sparse, seed, valid)
    for command in commands(path, modality):
        cells = grid[0] * grid[1] if grid and command[0] == "detokenize" else 0
        ceiling = BASE_CEILING_MIB + (TENSOR_MULTIPLE * declared + DECODE_BYTES_PER_CELL * cells) / MIB
        reset_peak()
        before, started = peak_mib(), time.monotonic()
        result = runner.invoke(app, command)
        took, grew = time.monotonic() - started, peak_mib() - before
        event(f"{command[0]} exit {result.exit_code}")
        where = f"{command[0]} on {modality} {tokenizer!r} {tensors} grid {grid}"
        assert result.exit_code in (0, 1), f"{where}: exit {result.exit_code}\n{result.output[-2000:]}"
        assert "Traceback" not in result.output and "unexpected" not in result.output, f"{where}: {result.output}"
        if result.exit_code == 1:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert lines and all(line.startswith(("error: ", "warning: ", "note: ")) for line in lines), where
            assert any(str(path) in line for line in lines if line.startswith("error: ")), f"{where}: {lines}"
        assert took < TIME_LIMIT_S, f"{where}: {took:.1f} s"
        assert grew < ceiling, f"{where}: {grew:.0f} MiB over the {ceiling:.0f} MiB ceiling"
