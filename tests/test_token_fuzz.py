"""Random token-file headers and tensors: loading either gives TokenSequences or raises TokenError, nothing else."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

import mmtok
from mmtok.errors import TokenError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
SEQUENCE_FIELDS = {
    "version": st.sampled_from([0, 1, 2]) | JSON,
    "modality": st.sampled_from(["image", "audio", "video", "text", "smell"]),
    "grid": st.lists(st.integers(-2, 2**11), min_size=0, max_size=3) | st.none() | JSON,
    "tokenizer": st.sampled_from(["", "vq-clip-tiny", "/etc/passwd", "x.toml"]) | JSON,
    "meta": JSON,
}
SEQUENCE_HEADER = st.fixed_dictionaries(
    {"format": st.sampled_from(["mmtok.TokenSequence"] * 9 + ["mmtok.Other"]), "modality": SEQUENCE_FIELDS["modality"]},
    optional={k: v for k, v in SEQUENCE_FIELDS.items() if k != "modality"},
)
SHARD_HEADER = st.fixed_dictionaries(
    {
        "format": st.just("mmtok.TokenSequences"),
        "sequences": st.dictionaries(st.sampled_from(["a", "b", "a/b"]), SEQUENCE_HEADER, min_size=1, max_size=3)
        | JSON,
    }
)
DTYPES = [torch.int64, torch.int64, torch.int32, torch.uint8, torch.float32, torch.float16, torch.float64, torch.bool]


@st.composite
def token_files(draw):
    """A header (one sequence, a shard, or any JSON) with tensors named mostly as it expects, of mostly consistent
    sizes, so the deeper checks are reached too; any dtype, rank and value range."""
    kind = draw(st.sampled_from(["sequence", "sequence", "shard", "json"]))
    header = draw({"sequence": SEQUENCE_HEADER, "shard": SHARD_HEADER, "json": JSON}[kind])
    keys = list(header.get("sequences") or {}) if kind == "shard" and isinstance(header.get("sequences"), dict) else []
    fields = ["ids", "embeddings", "times", "positions"]
    names = [f"{k}/{f}" for k in keys for f in fields] if keys else fields
    n = draw(st.integers(0, 6))
    parts = {}
    for name in draw(st.lists(st.sampled_from([*names, "junk"]), min_size=1, max_size=5, unique=True)):
        rows = draw(st.sampled_from([n, n, n, n + 1]))
        shape = (rows, *draw(st.lists(st.integers(1, 3), max_size=2)))
        dtype = draw(st.sampled_from(DTYPES))
        low, high = (0, 2) if dtype == torch.bool else draw(st.sampled_from([(0, 30), (-3, 30), (0, 2**20)]))
        parts[name] = torch.randint(low, high, shape).to(dtype)
    return header, parts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=token_files())
def test_any_header_and_tensors_load_or_raise_token_error(case):
    header, parts = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.safetensors"
        save_file(parts, str(path), metadata={"mmtok": json.dumps(header)})
        try:
            sequences = mmtok.load_sequences(path)
        except TokenError as e:
            assert str(path) in str(e)
            return
        for seq in sequences.values():  # what loads is usable
            assert len(seq) == len(seq.token_positions)
            if seq.grid is not None:
                assert seq.grid[0] * seq.grid[1] >= len(seq)
            seq.select(torch.arange(min(1, len(seq))))
