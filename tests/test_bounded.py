"""Bounded and contained (issue 32): no file hangs a run, takes memory out of proportion to what it holds, stops a
batch, or makes mmtok write outside its folder. Each test holds one reproduction of the issue, numbered as there.

Memory is measured as the peak resident set of a child process (``ru_maxrss`` of ``os.wait4``), or in this process
after resetting its peak (Linux ``/proc/self/clear_refs``): a ceiling, never a speed figure.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import ConfigError, MediaError, TokenError
from mmtok.samples import samples_dir

runner = CliRunner()
SAMPLES = samples_dir()


PEAK = (  # appended to a child's code: its peak resident KiB as the last line of stderr
    "\nimport sys as _s\n"
    "_s.stderr.write('\\npeak-kib ' + open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"
)


def run_child(code: str, *args: str, timeout_s: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """``python -c code args``: its result (stderr without the last line) and its peak resident MiB, read from
    ``VmHWM`` at its end (an exec'd process's own; ``wait4``'s ``ru_maxrss`` would count the forked test process)."""
    if not Path("/proc/self/status").is_file():
        pytest.skip("peak memory is read from /proc (Linux)")
    result = subprocess.run(
        [sys.executable, "-c", code + PEAK, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    err, _, peak = result.stderr.rpartition("\npeak-kib ")
    assert peak.strip().isdigit(), result.stderr[-2000:]
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout, err), int(peak) / 1024


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def safetensors_file(path: Path, tensors: dict[str, tuple[str, list[int]]], mmtok_header: str, sparse: bool = True):
    """A safetensors file written by hand: each tensor's dtype and shape declared, its data a hole in a sparse file
    (zeros on read, no disk used), so a header can promise gigabytes for free."""
    sizes = {"I64": 8, "I32": 4, "F32": 4, "F16": 2, "F64": 8, "U8": 1}
    entries, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        nbytes = sizes[dtype]
        for dim in shape:
            nbytes *= dim
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = json.dumps({"__metadata__": {"mmtok": mmtok_header}, **entries}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + offset)
    return path


def sequence_header(modality: str = "image", tokenizer: str = "vq-clip-tiny", grid=(8, 8), **extra) -> str:
    header = {"format": "mmtok.TokenSequence", "version": 1, "modality": modality, "grid": grid}
    return json.dumps({**header, "tokenizer": tokenizer, "meta": {}, **extra})


# ------------------------------------------------------------------------- 2: token files in proportion
def test_2_image_ids_wider_than_the_tokenizers_codebooks_are_refused_before_any_tensor_work(tmp_path):
    """[64, 10,000] ids for vq-clip-tiny (one codebook) took 1.4 GB in truncate and ended in an AssertionError."""
    path = safetensors_file(tmp_path / "wide.safetensors", {"ids": ("I64", [64, 10_000])}, sequence_header())
    for method in ("mi", "random", "divprune", "tome", "norm"):
        result = runner.invoke(
            app, ["truncate", str(path), "--method", method, "--keep-ratio", "0.5", "--context", "a digit", "--out",
                  str(tmp_path / "out.safetensors")],
        )  # fmt: skip
        assert result.exit_code == 1 and len(errors(result)) == 1, result.output
        assert errors(result)[0].startswith(f"error: {path}: ") and "codebook levels" in result.stderr
    narrow = safetensors_file(tmp_path / "two.safetensors", {"ids": ("I64", [64, 2])}, sequence_header())
    with pytest.raises(TokenError, match=r"vq-clip-tiny has 1 codebook level: its ids are \[N\]"):
        mmtok.load_sequences(narrow)


def test_2_a_tokenizer_of_another_modality_or_width_is_refused_from_the_header(tmp_path):
    image_as_text = safetensors_file(
        tmp_path / "a.safetensors", {"ids": ("I64", [64])}, sequence_header(tokenizer="text-bytes")
    )
    with pytest.raises(TokenError, match="image tokens, but text-bytes is a tokenizer of text"):
        mmtok.load_sequences(image_as_text)
    wide = safetensors_file(
        tmp_path / "b.safetensors", {"embeddings": ("F32", [16, 4096])}, sequence_header("audio", "av-tiny", None)
    )
    with pytest.raises(TokenError, match="embeddings are 4,096-d, but av-tiny's are 256"):
        mmtok.load_sequences(wide)
    levels = safetensors_file(
        tmp_path / "c.safetensors", {"ids": ("I64", [16, 9])}, sequence_header("audio", "av-tiny", None)
    )
    with pytest.raises(TokenError, match="av-tiny has 8 codebook levels"):
        mmtok.load_sequences(levels)


def test_2_ids_outside_the_named_tokenizers_codebook_are_refused_at_load(tmp_path):
    import torch

    seq = mmtok.TokenSequence("image", ids=torch.full((64,), 5000), grid=(8, 8), tokenizer="vq-clip-tiny")
    path = seq.save(tmp_path / "far.safetensors")
    with pytest.raises(TokenError, match=r"ids 5000..5000 outside vq-clip-tiny's codebook \[0, 1024\)"):
        mmtok.load_sequences(path)


def test_2_a_token_file_is_read_into_the_memory_of_its_tensors_once(tmp_path):
    """Loading reads each tensor from the checked descriptor straight into its own memory: a 256 MiB file costs
    its 256 MiB (plus torch), not a second copy."""
    import torch

    seq = mmtok.TokenSequence("audio", embeddings=torch.ones(262_144, 256), tokenizer="av-tiny")
    path = seq.save(tmp_path / "quarter.safetensors")
    code = "import sys, mmtok\ns = mmtok.load_sequences(sys.argv[1])\nprint(float(s['quarter'].embeddings.sum()))"
    baseline, torch_only = run_child("import mmtok.tokens")
    result, peak = run_child(code, str(path))
    assert result.returncode == 0 and float(result.stdout) == 262_144 * 256, result.stderr
    assert baseline.returncode == 0 and peak - torch_only < 256 * 1.25 + 32  # one copy, plus a little


# ------------------------------------------------------------------------- 4: one bad token file, a batch goes on
def test_4_a_header_integer_of_5000_digits_is_that_files_error_and_the_batch_goes_on(tmp_path):
    evil = sequence_header().replace('"version": 1', '"version": 1' + "0" * 5000)
    bad = safetensors_file(tmp_path / "bigint.safetensors", {"ids": ("I64", [64])}, evil)
    good = safetensors_file(tmp_path / "good.safetensors", {"ids": ("I64", [64])}, sequence_header())
    result = runner.invoke(app, ["inspect", "--json", str(bad), str(good), str(SAMPLES / "chelsea.jpg")])
    assert result.exit_code == 1 and len(errors(result)) == 1 and "Traceback" not in result.output
    assert errors(result)[0].startswith(f"error: {bad}: ") and "more than 4,300 digits" in errors(result)[0]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["path"] for r in rows if "error" not in r] == [str(good), str(SAMPLES / "chelsea.jpg")]
    priced = runner.invoke(app, ["price", "--json", "-m", "mmtok-semantic", str(bad), str(good)])
    assert (
        priced.exit_code == 1 and errors(priced)[0].startswith(f"error: {bad}: ") and "Traceback" not in priced.output
    )


def test_4_a_40_gb_sparse_token_file_is_refused_from_its_size_and_the_batch_goes_on(tmp_path):
    n = 40 * 10**9 // 8
    huge = safetensors_file(
        tmp_path / "huge.safetensors", {"ids": ("I64", [n])}, sequence_header("audio", "av-tiny", None)
    )
    good = safetensors_file(tmp_path / "good.safetensors", {"ids": ("I64", [64])}, sequence_header())
    for command in (["inspect", "--json"], ["price", "--json", "-m", "mmtok-semantic"]):
        result = runner.invoke(app, [*command, str(huge), str(good)])
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert len(errors(result)) == 1 and errors(result)[0].startswith(f"error: {huge}: 40,000,000,")
        assert errors(result)[0].endswith("bytes, over the 4,294,967,296-byte token-file limit")
        assert str(good) in result.stdout


def test_4_token_headers_are_read_in_memory_independent_of_the_tensors_and_without_torch(tmp_path):
    """``read_token_headers`` (what inspect and price need) on a 2 GiB file: its header only."""
    path = safetensors_file(
        tmp_path / "big.safetensors",
        {"embeddings": ("F32", [2_000_000, 256])},
        sequence_header("audio", "av-tiny", None),
    )
    code = (
        "import sys\nfrom mmtok.token_files import read_token_headers\n"
        "h = next(iter(read_token_headers(sys.argv[1]).values()))\n"
        "print(len(h), h.embeddings.shape, 'torch' in sys.modules)"
    )
    result, peak = run_child(code, str(path))
    assert result.stdout.split() == ["2000000", "(2000000,", "256)", "False"], result.stderr
    assert peak < 80  # MiB: Python and the header, not the 2 GiB of tensors


# ------------------------------------------------------------------------- 6: the FIFO check cannot be raced
@pytest.mark.parametrize("name", ["speech.flac", "clip.mp4", "speech.m4a", "chelsea.jpg"])
def test_6_a_path_swapped_for_a_fifo_after_its_check_is_still_read_from_the_checked_file(tmp_path, name, monkeypatch):
    """After load()'s checked open, audio was opened again by name (sf.info, sf.SoundFile) and video too (PyAV): a
    path swapped for a FIFO in between hung inspect and price. Here the swap happens right after the check, every
    time; load and decoding read the file they checked."""
    from mmtok.media import types

    target, fifo = tmp_path / name, tmp_path / "fifo"
    shutil.copy(SAMPLES / name, target)
    os.mkfifo(fifo)
    real = types.open_checked

    def checked_then_swapped(path):
        opened = real(path)
        os.replace(target, tmp_path / "moved")  # the checked file stays open; its name now leads to a FIFO
        os.symlink(fifo, target)
        return opened

    def load_and_decode() -> None:
        media = mmtok.load(target)
        _restore(target, tmp_path / "moved")
        if media.kind in ("audio", "video"):
            monkeypatch.setattr(types, "open_checked", checked_then_swapped)
            first = next(media.blocks(1.0) if media.kind == "audio" else media.frames(chunk_frames=2))
            assert len(first)
        outcome.append(media.kind)

    monkeypatch.setattr(types, "open_checked", checked_then_swapped)
    outcome: list[str] = []
    worker = threading.Thread(target=load_and_decode, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "load() or a decoder waited on the FIFO"
    assert outcome == [mmtok.load(SAMPLES / name).kind]


def _restore(target: Path, moved: Path) -> None:
    target.unlink()
    os.replace(moved, target)


def test_6_a_fifo_or_device_named_by_any_path_is_refused_in_time():
    for path in ("/dev/zero", "/dev/urandom"):
        with pytest.raises(MediaError, match="is a character device, not a regular file"):
            mmtok.load(path)


# ------------------------------------------------------------------------- 7: TOML nesting in linear time
@pytest.mark.parametrize(
    ("what", "write"),
    [
        ("price sheet", lambda deep: ["price", "-m", "gpt-4o", str(SAMPLES / "chelsea.jpg"), "--prices", deep]),
        ("spec", lambda deep: ["plan", deep, "--out", deep + ".out"]),
        ("suite", lambda deep: ["eval", "run", deep, "--out", deep + ".out"]),
    ],
)
def test_7_a_400_kb_dotted_key_is_refused_at_once_naming_the_depth(tmp_path, what, write):
    """A 400 KB sheet of one dotted key 200,000 parts deep took minutes and 16 GB before tomllib refused it."""
    deep = tmp_path / "deep.toml"
    deep.write_text("a" + ".a" * 200_000 + " = 1\n")
    started = time.monotonic()
    result = runner.invoke(app, write(str(deep)))
    assert time.monotonic() - started < 10  # a ceiling (the scan itself takes ~0.05 s), not a speed figure
    assert result.exit_code == 2, result.output
    assert errors(result) == [f"error: {deep}: invalid TOML: nested 200,001 levels deep, over the limit of 32"]


def test_7_depth_counts_tables_keys_arrays_and_inline_tables_but_not_strings_or_numbers():
    from mmtok.files import toml_depth

    assert toml_depth('[models."gpt.4o"]\nimage = { tile_tokens = 170, levels = { low = 5 } }') == 5
    assert toml_depth('x = "a.b.c.[[["\ny = 1.5\nz = [[1, 2], [3]]  # a.b.c') == 3
    assert toml_depth("[[a.b]]\nc.d = '''x.y\n[[['''") == 5
    deep_arrays = "x = " + "[" * 100_000 + "]" * 100_000
    assert toml_depth(deep_arrays) == 100_001


def test_7_every_shipped_toml_file_is_within_the_depth_limit():
    from mmtok.files import MAX_TOML_DEPTH, toml_depth

    root = Path(mmtok.__file__).resolve().parent.parent
    shipped = [p for folder in ("budgets", "eval", "models") for p in (root / folder).rglob("*.toml")]
    assert shipped and max(toml_depth(p.read_text()) for p in shipped) <= MAX_TOML_DEPTH // 4


def test_7_a_toml_integer_of_5000_digits_is_one_line(tmp_path):
    from mmtok.files import read_toml

    big = tmp_path / "big.toml"
    big.write_text("x = 1" + "0" * 5000 + "\n")
    with pytest.raises(ConfigError, match="more than 4,300 digits"):
        read_toml(big, "spec")
