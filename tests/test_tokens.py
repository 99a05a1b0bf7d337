"""TokenSequence: validation, selection, and exact safetensors round trips."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from mmtok import TokenSequence, load_sequences, save_sequences
from mmtok.errors import TokenError, TruncationError
from mmtok.registry import get_tokenizer
from mmtok.tokens import check_ids


def full_sequence() -> TokenSequence:
    return TokenSequence(
        modality="image",
        ids=torch.randint(0, 4096, (16, 2)),
        embeddings=torch.randn(16, 8, dtype=torch.bfloat16),
        times=None,
        grid=(4, 4),
        tokenizer="test-tok",
        meta={"source": "x.png", "image_size": [64, 64]},
    )


def assert_same(a: TokenSequence, b: TokenSequence) -> None:
    assert (a.modality, a.grid, a.tokenizer, a.meta) == (b.modality, b.grid, b.tokenizer, b.meta)
    for name in ("ids", "embeddings", "times", "positions"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y)


def test_round_trip_is_exact(tmp_path):
    seq = full_sequence()
    loaded = TokenSequence.load(seq.save(tmp_path / "t.safetensors"))
    assert_same(seq, loaded)
    assert len(loaded) == 16


def test_audio_sequence_with_times_round_trips(tmp_path):
    seq = TokenSequence("audio", embeddings=torch.randn(5, 3), times=torch.arange(5, dtype=torch.float64) / 16)
    assert_same(seq, TokenSequence.load(seq.save(tmp_path / "a.safetensors")))


def test_select_keeps_positions_and_times():
    seq = TokenSequence("video", ids=torch.arange(10), times=torch.arange(10) / 16.0)
    kept = seq.select(torch.tensor([1, 4, 7]), truncation="test")
    assert kept.ids.tolist() == [1, 4, 7]
    assert kept.positions.tolist() == [1, 4, 7]
    assert kept.times.tolist() == [1 / 16, 4 / 16, 7 / 16]
    again = kept.select(torch.tensor([True, False, True]))
    assert again.positions.tolist() == [1, 7]
    assert again.meta == {"truncation": "test"}


def test_select_without_revalidating_equals_a_validated_sequence_and_leaves_the_original_alone():
    seq = full_sequence()
    kept = seq.select(torch.tensor([5, 0, 9]), truncation="mi")
    built = TokenSequence(  # what the constructor, with every check, makes of the same rows
        "image", ids=seq.ids[[5, 0, 9]], embeddings=seq.embeddings[[5, 0, 9]], positions=torch.tensor([5, 0, 9]),
        grid=(4, 4), tokenizer=seq.tokenizer, meta={**seq.meta, "truncation": "mi"},
    )  # fmt: skip
    for name in ("ids", "embeddings", "positions"):
        assert torch.equal(getattr(kept, name), getattr(built, name)), name
    assert (kept.grid, kept.tokenizer, kept.meta, len(kept)) == (built.grid, built.tokenizer, built.meta, 3)
    assert len(seq) == 16 and seq.positions is None and "truncation" not in seq.meta
    with pytest.raises(IndexError):
        seq.select(torch.tensor([16]))


def test_select_repeating_rows_past_the_grid_is_still_refused():
    seq = TokenSequence("image", ids=torch.arange(4), grid=(2, 2))
    with pytest.raises(TokenError, match="do not fit a 2x2 grid"):
        seq.select(torch.zeros(5, dtype=torch.long))


def test_shard_holds_many_sequences(tmp_path):
    seqs = {"a/b.png": full_sequence(), "c.png": TokenSequence("image", ids=torch.arange(3), grid=(1, 3))}
    loaded = load_sequences(save_sequences(tmp_path / "shard.safetensors", seqs))
    assert list(loaded) == ["a/b.png", "c.png"]
    for key in seqs:
        assert_same(seqs[key], loaded[key])
    with pytest.raises(TokenError, match="holds 2 sequences"):
        TokenSequence.load(tmp_path / "shard.safetensors")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"modality": "smell", "ids": torch.arange(3)}, "modality must be one of"),
        ({"modality": "image"}, "needs ids, embeddings, or both"),
        ({"modality": "image", "ids": torch.randn(3)}, "ids must be an integer tensor"),
        ({"modality": "image", "embeddings": torch.arange(3)}, "embeddings must be a float tensor"),
        ({"modality": "image", "ids": torch.arange(3), "embeddings": torch.randn(4, 2)}, "embeddings has 4 rows"),
        ({"modality": "audio", "ids": torch.arange(3), "times": torch.zeros(3, 2)}, "times must be one-dimensional"),
        ({"modality": "image", "ids": torch.arange(3), "grid": (0, 3)}, "grid must be"),
    ],
)
def test_inconsistent_sequences_are_rejected(kwargs, match):
    with pytest.raises(TokenError, match=match):
        TokenSequence(**kwargs)


def test_meta_must_be_json(tmp_path):
    seq = TokenSequence("image", ids=torch.arange(2), meta={"bad": object()})
    with pytest.raises(TokenError, match="JSON-serialisable"):
        seq.save(tmp_path / "x.safetensors")


def test_loading_files_that_are_not_token_files(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not safetensors at all")
    with pytest.raises(TokenError, match="not a safetensors file"):
        TokenSequence.load(junk)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(TokenError, match="without an mmtok header"):
        TokenSequence.load(plain)
    with pytest.raises(TokenError, match="no such token file"):
        TokenSequence.load(tmp_path / "missing.safetensors")


# ------------------------------------------------------------------------------------- check_ids: one range check
@pytest.mark.parametrize(
    ("ids", "options", "match"),
    [
        (torch.tensor([0, -2, 3]), {}, "ids must be non-negative, got -2"),
        (torch.tensor([0, -2, 3]), {"vocab": 64}, r"ids outside the codebook \[0, 64\)"),
        (torch.tensor([[0, 1], [64, 2]]), {"vocab": 64}, r"ids outside the codebook \[0, 64\)"),
        (torch.tensor([70], dtype=torch.int32), {"vocab": 64, "what": "image ids"}, r"image ids outside the codebook"),
        (torch.tensor([70]), {"vocab": 64, "message": "image ids must be [N] in [0, 64)"}, r"must be \[N\] in"),
        (torch.tensor([3, 300]), {"vocab": 259, "message": lambda lo, hi: f"got {lo}..{hi}"}, r"got 3\.\.300"),
        (torch.tensor([1.0, 2.0]), {"vocab": 64}, "ids must be an integer tensor, got torch.float32"),
        (torch.tensor([True, False]), {}, "ids must be an integer tensor, got torch.bool"),
        ([1, 2], {"vocab": 64}, "ids must be an integer tensor, got list"),
        (None, {}, "ids must be an integer tensor, got NoneType"),
        (torch.zeros(0, dtype=torch.long), {"vocab": 64}, r"no ids \(an empty sequence\)"),
        (torch.zeros(3, 0, dtype=torch.long), {}, r"no ids \(an empty sequence\)"),
    ],
)
def test_check_ids_refuses_what_cannot_index_the_table(ids, options, match):
    with pytest.raises(TokenError, match=match):
        check_ids(ids, **options)


def test_check_ids_passes_ids_in_range_and_raises_the_callers_error():
    check_ids(torch.tensor([0, 63]), 64)
    check_ids(torch.tensor([5, 0]))  # no vocab: non-negative is enough
    check_ids(torch.tensor([[0, 1], [2, 3]], dtype=torch.uint8), 4)
    check_ids(torch.tensor([1, 2], dtype=torch.uint16), 3)  # a dtype torch cannot reduce: compared as int64
    check_ids(torch.zeros(0, dtype=torch.long), 64, allow_empty=True)
    with pytest.raises(TruncationError, match=r"ids outside the codebook \[0, 4\)"):
        check_ids(torch.tensor([4]), 4, error=TruncationError)
    with pytest.raises(TruncationError, match="no ids"):
        check_ids(torch.zeros(0, dtype=torch.long), 4, error=TruncationError)


def test_sequences_use_the_same_check():
    with pytest.raises(TokenError, match="ids must be non-negative, got -1"):
        TokenSequence("text", ids=torch.tensor([3, -1]))
    with pytest.raises(TokenError, match="positions must be non-negative, got -4"):
        TokenSequence("text", ids=torch.tensor([3, 1]), positions=torch.tensor([-4, 0]))
    with pytest.raises(TokenError, match=r"ids must be an integer tensor \[N\] or \[N, C\], got torch.bool"):
        TokenSequence("text", ids=torch.tensor([True]))
    assert len(TokenSequence("text", ids=torch.zeros(0, dtype=torch.long))) == 0  # empty sequences stay valid


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({"tokens_per_second": [16]}, "tokens_per_second must be a positive finite number"),
        ({"tokens_per_second": "fast"}, "tokens_per_second must be a positive finite number"),
        ({"duration_s": float("inf")}, "duration_s must be a positive finite number"),
        ({"content_box": "abcd"}, "content_box must be"),
        ({"content_box": [0.5, 0, 64, 64]}, "content_box must be"),
        ({"content_box": [0, 0, -70, -70]}, "content_box must be"),
    ],
)
def test_meta_values_mmtok_computes_with_are_checked(meta, says):
    """A list for a rate stopped `mmtok inspect` of a whole folder with a TypeError."""
    with pytest.raises(TokenError, match=says):
        TokenSequence("audio", embeddings=torch.zeros(4, 8), meta=meta)


@pytest.mark.parametrize("name", ["text-bytes", "text-o200k", "text-cl100k"])
def test_text_ids_past_the_vocabulary_are_refused_never_an_empty_text(name):
    tok = get_tokenizer(name)
    for ids in (torch.tensor([2**62]), torch.tensor([tok.vocab_size])):
        with pytest.raises(TokenError, match="text ids must be in"):
            tok.decode(TokenSequence("text", ids=ids))
    with pytest.raises(TokenError, match=r"text decodes from ids \[N\]"):
        tok.decode(TokenSequence("text", embeddings=torch.zeros(3, 4)))
