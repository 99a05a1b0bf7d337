"""Bounded and contained (issue 32): no file hangs a run, takes memory out of proportion to what it holds, stops a
batch, or makes mmtok write outside its folder. Each test holds one reproduction of the issue, numbered as there.

Memory is measured as the peak resident set of a child process (``ru_maxrss`` of ``os.wait4``), or in this process
after resetting its peak (Linux ``/proc/self/clear_refs``): a ceiling, never a speed figure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
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


# ------------------------------------------------------------------------- 1: no manifest item hangs a run
def image_suite(folder: Path, lines: list[dict], limit: int = 0) -> Path:
    (folder / "manifest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    suite = folder / "suite.toml"
    suite.write_text(
        'name = "bounded"\n[dataset]\nkind = "images"\nsource = "manifest.jsonl"\n'
        f"limit = {limit}\n"
        '[pipeline]\ntokenizer = "vq-clip-tiny"\nimage_size = 64\n[metrics]\nnames = ["psnr"]\n'
    )
    return suite


def test_1_a_manifest_naming_a_device_or_a_fifo_fails_those_items_in_seconds_and_the_run_goes_on(tmp_path):
    """A manifest line naming /dev/zero (or a FIFO) made `eval run` hash it forever, holding the run lock."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    lines = [{"id": i, "path": p} for i, p in (("cat", str(SAMPLES / "chelsea.jpg")), ("zero", "/dev/zero"),
                                               ("random", "/dev/urandom"), ("fifo", str(fifo)))]  # fmt: skip
    started = time.monotonic()
    result = runner.invoke(app, ["eval", "run", str(image_suite(tmp_path, lines)), "--out", str(tmp_path / "run")])
    assert time.monotonic() - started < 60  # a ceiling: the model load, then three refusals at once
    assert result.exit_code == 1 and "Traceback" not in result.output
    rows = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "run" / "results.jsonl").open()}
    assert rows["cat"]["error"] is None and rows["cat"]["metrics"]["psnr_db"] > 10
    assert rows["zero"]["error"] == "/dev/zero: is a character device, not a regular file; only regular files are read"
    assert rows["fifo"]["error"] == f"{fifo}: is a FIFO (named pipe), not a regular file; only regular files are read"
    assert "1/4 items ok, 3 failed" in result.stdout


def test_1_an_item_hash_reads_a_file_through_the_checked_open_within_its_limit(tmp_path, monkeypatch):
    from mmtok.eval import suite as suite_module

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert suite_module.item_hash({"id": "f", "path": str(fifo)}) != suite_module.item_hash({"id": "f", "path": "x"})
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 2048)
    monkeypatch.setattr(suite_module, "MAX_ITEM_BYTES", 1024)
    with pytest.raises(mmtok.EvalError, match="2,048 bytes, over the 1,024-byte limit of an item"):
        suite_module.check_item_file(str(big))


# ------------------------------------------------------------------------- 5: a run folder's links are not followed
def test_5_a_lock_that_is_a_symlink_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    suite = image_suite(tmp_path, [{"id": "cat", "path": str(SAMPLES / "chelsea.jpg")}])
    result = runner.invoke(app, ["eval", "run", str(suite), "--out", str(run)])
    assert result.exit_code == 2 and victim.read_text() == "precious\n"
    assert errors(result) == [
        f"error: {run / '.lock'}: is a symbolic link; mmtok never writes a run's files through a link"
    ]


def test_5_a_results_file_that_is_a_symlink_is_refused_on_resume_before_any_line_is_cut(tmp_path):
    suite = image_suite(tmp_path, [{"id": "cat", "path": str(SAMPLES / "chelsea.jpg")}])
    run = tmp_path / "run"
    assert runner.invoke(app, ["eval", "run", str(suite), "--out", str(run)]).exit_code == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("line one\nline two without its newline")
    (run / "results.jsonl").unlink()
    (run / "results.jsonl").symlink_to(victim)
    result = runner.invoke(app, ["eval", "run", str(suite), "--out", str(run), "--resume"])
    assert result.exit_code == 2 and victim.read_text() == "line one\nline two without its newline"
    assert errors(result) == [
        f"error: {run / 'results.jsonl'}: is a symbolic link; mmtok never writes a run's files through a link"
    ]


def test_5_a_features_folder_that_is_a_link_is_refused(tmp_path):
    from mmtok.eval.runner.results import features_folder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "features").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"not a folder of this run \(a link or a file\)"):
        features_folder(tmp_path / "run")


# ------------------------------------------------------------------------- 8: suites refused up front, one line
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("name = 5", "name must be a string, got 5"),
        ('[pipeline]\ntruncation = "mi"', "[pipeline] truncation must be a table"),
        ('[pipeline]\nquantize = "yes"', "[pipeline] quantize must be true or false, got 'yes'"),
        ('[pipeline]\nimage_size = "64"', "[pipeline] image_size must be an integer (px), got '64'"),
        ('[pipeline]\ntruncation = { method = "mi", keep = 4, threshold = 0.1 }', "only one of threshold, keep"),
        ('[pipeline]\ntruncation = { method = "magic" }', "truncation method must be one of mi, random"),
        ('[pipeline]\ntruncation = { method = "random" }', "random keeps a budget: give keep or keep_ratio"),
        ('[pipeline]\ntokenizer = "av-tiny"', "av-tiny is an audio tokenizer; an images suite needs an image one"),
    ],
)
def test_8_wrong_typed_suite_settings_are_refused_before_any_item(tmp_path, line, message):
    suite = tmp_path / "suite.toml"
    body = 'name = "x"\n' if not line.startswith("name") else ""
    suite.write_text(body + line + '\n[dataset]\nkind = "qa"\nsource = "builtin:digits-qa"\nlimit = 2\n')
    if "av-tiny" in line:
        suite.write_text(
            suite.read_text().replace('kind = "qa"', 'kind = "images"').replace("digits-qa", "heldout-photos")
        )
    result = runner.invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and len(errors(result)) == 1 and message in errors(result)[0], result.output
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_8_a_manifest_line_holding_a_raw_u2028_is_one_item(tmp_path):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(json.dumps({"id": "a\u2028b", "path": str(SAMPLES / "chelsea.jpg")}, ensure_ascii=False) + "\n")
    suite = image_suite(tmp_path, [])
    manifest.write_text(json.dumps({"id": "a\u2028b", "path": str(SAMPLES / "chelsea.jpg")}, ensure_ascii=False) + "\n")
    from mmtok.eval.suite import items, load_suite

    assert [item["id"] for item in items(load_suite(suite))] == ["a\u2028b"]


def test_8_results_are_read_a_line_at_a_time_and_progress_reads_only_what_was_appended(tmp_path):
    from mmtok.eval.runner.results import MAX_ROW_BYTES, RESULTS, ResultTail, read_results

    results = tmp_path / RESULTS
    results.write_text("".join(json.dumps({"id": f"i{n}", "hash": "h", "metrics": {}}) + "\n" for n in range(1000)))
    tail = ResultTail(results, {"i1": "h", "i2": "other", "i3": "h"})
    assert tail.done() == 2 and tail.offset == results.stat().st_size
    with results.open("a") as f:
        f.write(json.dumps({"id": "i1", "hash": "stale", "metrics": {}}) + "\n" + '{"id": "i2", "ha')
    assert tail.done() == 1  # i1's newest row is stale; the torn line waits for its newline
    assert set(read_results(tmp_path, ids=["i5", "i6"])) == {"i5", "i6"}
    results.write_text('{"id": "x", "t": "' + "a" * MAX_ROW_BYTES + '"}\n')
    with pytest.raises(mmtok.EvalError, match="over the 16,777,216-byte limit of a result row"):
        read_results(tmp_path)


# ------------------------------------------------------------------------- 8: Ctrl-C and a full disk: one line
def photo_run(folder: Path, workers: int, preexec=None, interrupt: bool = False) -> subprocess.CompletedProcess:
    """``mmtok eval run`` of 200 held-out photos in a child process (its own process group, as a terminal's
    foreground job); with ``interrupt``, SIGINT to the group once the first rows are written (Ctrl-C)."""
    suite = folder / "photos.toml"
    suite.write_text(
        'name = "photos"\n[dataset]\nkind = "images"\nsource = "builtin:heldout-photos"\nlimit = 200\n'
        '[pipeline]\ntokenizer = "vq-clip-tiny"\nimage_size = 64\n[metrics]\nnames = ["psnr"]\n'
    )
    out = folder / "run"
    command = [
        sys.executable,
        "-m",
        "mmtok.cli.main",
        "eval",
        "run",
        str(suite),
        "--out",
        str(out),
        "--workers",
        str(workers),
    ]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=preexec
    )
    if interrupt:
        deadline = time.monotonic() + 120
        results = out / "results.jsonl"
        while time.monotonic() < deadline and not (results.is_file() and results.stat().st_size):
            time.sleep(0.02)
        # The run holds still (SIGSTOP) while Ctrl-C is queued, then goes on and meets it mid-run: on a busy machine
        # the rest of the 200 photos cannot be done before the signal lands.
        os.killpg(child.pid, signal.SIGSTOP)
        os.killpg(child.pid, signal.SIGINT)
        os.killpg(child.pid, signal.SIGCONT)
    stdout, stderr = child.communicate(timeout=300)
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


@pytest.mark.parametrize("workers", [1, 2])
def test_8_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path, workers):
    """With 2 workers Ctrl-C printed 141 lines of worker tracebacks; with 1 worker the process aborted (exit 134)."""
    result = photo_run(tmp_path, workers, interrupt=True)
    assert result.returncode == 130, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'run'}: interrupted; the items done are kept: run again with --resume to go on"
    ]
    assert (tmp_path / "run" / "results.jsonl").read_text().endswith("\n")  # whole rows only


@pytest.mark.parametrize("workers", [1, 2])
def test_8_a_full_disk_is_one_line_and_exit_1(tmp_path, workers):
    """A disk that fills during a run (here a 20,000-byte file size limit: writes past it fail, as on a full disk)
    printed a traceback per worker."""
    import resource
    import signal

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    result = photo_run(tmp_path, workers, preexec=small_disk)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr[-2000:]
    assert "(disk full?)" in result.stderr or "File too large" in result.stderr  # a row cut, or refused whole
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------- 3: a plan spec cannot ask for anything
PLAN_SPEC = """
name = "capped"
[request]
images = 1
audio_seconds = 0
[variables]
image_size = [32, 64]
model = ["gpt-4o"]
[objectives]
minimize = ["cost", "fd"]
[calibration]
photos = 8
fd_extractor = "clip-tiny"
[search]
population = 6
generations = 2
"""


SPEECH_PLAN_SPEC = PLAN_SPEC.replace('model = ["gpt-4o"]', 'model = ["gpt-4o-audio-preview"]')
SPEECH_PLAN_SPEC = SPEECH_PLAN_SPEC.replace("image_size = [32, 64]\n", "").replace('fd_extractor = "clip-tiny"', "")
SPEECH_PLAN_SPEC = SPEECH_PLAN_SPEC.replace("images = 1\naudio_seconds = 0", "images = 0\naudio_seconds = 10")
SPEECH_PLAN_SPEC = SPEECH_PLAN_SPEC.replace('minimize = ["cost", "fd"]', 'minimize = ["cost", "wer"]')


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("population = 6", "population = 1000000000"), "[search] population must be an integer from 4 to 1,000"),
        (("population = 6\ngenerations = 2", "population = 1000\ngenerations = 1000"), "x generations = 1,000,000"),
        (("photos = 8", "photos = 1000000"), "[calibration] photos must be an integer from 2 to 2,048"),
        (("images = 1", "images = 1\ntext_tokens = 100000000"), "text_tokens must be an integer from 0 to 10,000,000"),
        (('name = "capped"', 'name = "x\\nerror: forged"'), "name must be a name: 1 to 200 characters on one line"),
        (("image_size = [32, 64]", f"image_size = {list(range(8, 8 * 300, 8))}"), "lists 299 options; at most 256"),
    ],
)
def test_3_every_size_a_spec_sets_is_capped_before_any_work(tmp_path, change, message):
    """population = 10^9 was accepted: 8 GB in 33 s with nothing printed."""
    spec = tmp_path / "spec.toml"
    spec.write_text(PLAN_SPEC.replace(*change))
    started = time.monotonic()
    result = runner.invoke(app, ["plan", str(spec), "--out", str(tmp_path / "out")])
    assert time.monotonic() - started < 30 and result.exit_code == 2, result.output
    assert len(errors(result)) == 1 and message in errors(result)[0]
    assert "\nerror: forged" not in result.stderr


def test_3_population_and_generations_given_on_the_command_line_are_capped_too(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(PLAN_SPEC)
    result = runner.invoke(app, ["plan", str(spec), "--out", str(tmp_path / "out"), "--population", "5000"])
    assert result.exit_code == 2 and "--population/--generations: population must be an integer from 4" in result.stderr


def test_3_a_million_line_speech_manifest_is_read_only_up_to_the_capped_count(tmp_path):
    """A 10^6-line calibration manifest (speech = 10^6) ran past 300 s with no progress."""
    shutil.copy(SAMPLES / "speech.flac", tmp_path / "speech.flac")
    line = json.dumps({"path": "speech.flac", "text": "hello"}) + "\n"
    (tmp_path / "speech.jsonl").write_text(line * 1_000_000)
    body = SPEECH_PLAN_SPEC
    spec = tmp_path / "spec.toml"
    spec.write_text(body.replace("photos = 8", 'speech = 1000000\nspeech_manifest = "speech.jsonl"'))
    result = runner.invoke(app, ["plan", str(spec), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "[calibration] speech must be an integer from 1 to 1,000" in result.stderr
    from mmtok.budgets.planner import load_spec, user_speech

    spec.write_text(body.replace("photos = 8", 'speech = 1000\nspeech_manifest = "speech.jsonl"'))
    started = time.monotonic()
    try:
        assert len(user_speech(load_spec(spec))) == 1000
    except ConfigError as e:  # no ASR backend installed: the manifest is still read only to its count
        assert "eval extra" in str(e)
    assert time.monotonic() - started < 60


# ------------------------------------------------------------------------- 8: price sheets: one line naming the sheet
def sheet(folder: Path, model: str = "gpt-4o", extra: str = "") -> Path:
    path = folder / "mine.toml"
    path.write_text(
        f'provider = "me"\n[models."{model}"]\ninput_per_mtok = "2.50"\nimage_input_per_mtok = "2.50"\n'
        f'source = "https://example.com/prices"\nas_of = 2026-11-30\n{extra}\n'
    )
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "image = { tile_tokens = 1" + "0" * 300 + " }",
            "image.tile_tokens must be a positive integer of at most 10,000,000",
        ),
        ('image = { formula = "tiles" }', "image formula 'tiles' needs tile_px, tile_tokens, base_tokens, fit_px"),
        (
            'image = { formula = "fixed-level", levels = { low = 5 } }',
            "image formula 'fixed-level' needs default_level",
        ),
        ('image = { formula = "openai-patch", multiplier = 1, auto = "a", levels = { a = 5 } }', "max_dim"),
        ("image = { patch_px = 1e-300 }", "image.patch_px must be a positive integer"),
    ],
)
def test_8_a_sheets_formula_override_is_checked_and_bounded_when_the_sheet_is_read(tmp_path, extra, message):
    """Overrides ended as `unexpected KeyError` (exit 1, the sheet not named); tile_tokens = 10^300 quoted $1e294."""
    path = sheet(tmp_path, extra=extra)
    result = runner.invoke(app, ["price", "-m", "gpt-4o", str(SAMPLES / "chelsea.jpg"), "--prices", str(path)])
    assert result.exit_code == 2 and len(errors(result)) == 1, result.output
    assert errors(result)[0].startswith(f"error: {path} [models.'gpt-4o']: ") and message in errors(result)[0]


def test_8_a_model_name_holding_a_newline_cannot_forge_an_error_line(tmp_path):
    path = sheet(tmp_path, model="gpt-4o\\nerror: chelsea.jpg is fine")
    result = runner.invoke(app, ["price", "-m", "gpt-4o", str(SAMPLES / "chelsea.jpg"), "--prices", str(path)])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "a model name is 1 to 200 characters on one line" in result.stderr


# ------------------------------------------------------------------------- 8: a cache that cannot be written
def test_8_a_cache_folder_that_cannot_be_written_does_not_break_price(tmp_path):
    """A read-only cache folder broke `price` (an unexpected FileNotFoundError / PermissionError)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    env = {**os.environ, "MMTOK_CACHE_DIR": str(blocked / "cache")}
    command = [sys.executable, "-m", "mmtok.cli.main", "price", "--json", "-m", "gpt-4o", str(SAMPLES / "chelsea.jpg")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["input_tokens"] == 255
    warned = result.stderr.splitlines()
    assert len(warned) == 1 and warned[0].startswith(f"warning: UserWarning: the cache folder {blocked / 'cache'}")


def test_8_the_stand_in_cache_is_private_and_used_for_every_part(tmp_path, monkeypatch):
    from mmtok.cache import cache_dir

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.warns(UserWarning, match="cannot be written"):
        prices = cache_dir("prices")
    judge = cache_dir("judge")
    assert prices.parent == judge.parent and prices.is_dir() and oct(prices.parent.stat().st_mode)[-3:] == "700"


# ------------------------------------------------------------------------- 8: names escaped on every line
@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\x85"])
def test_8_line_breaking_and_direction_changing_characters_in_file_names_are_escaped(tmp_path, char):
    """U+2028/U+2029/U+202E in file names were printed raw: a terminal breaks the line or turns the name around."""
    name = tmp_path / f"cat{char}error: fine.jpg"
    shutil.copy(SAMPLES / "chelsea.jpg", name)
    missing = tmp_path / f"gone{char}.png"
    result = runner.invoke(app, ["inspect", str(name), str(missing)])
    assert result.exit_code == 1
    escaped = repr(char)[1:-1]
    assert char not in result.output and f"gone{escaped}.png" in result.stderr
    assert len(errors(result)) == 1


# ------------------------------------------------------------------------- 8: token outputs: atomic, not the input
def image_tokens(folder: Path) -> Path:
    import torch

    seq = mmtok.TokenSequence("image", ids=torch.randint(0, 1024, (64,)), grid=(8, 8), tokenizer="vq-clip-tiny")
    return seq.save(folder / "cat.safetensors")


def test_8_truncate_refuses_to_write_over_its_own_input(tmp_path):
    tokens = image_tokens(tmp_path)
    before = tokens.read_bytes()
    result = runner.invoke(
        app, ["truncate", str(tokens), "--method", "random", "--keep-ratio", "0.5", "-o", str(tokens)]
    )
    assert result.exit_code == 2 and "is the input" in result.output and tokens.read_bytes() == before


def test_8_detokenize_writes_atomically_and_never_through_a_link_at_out(tmp_path, monkeypatch):
    tokens = image_tokens(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not mmtok's\n")
    (tmp_path / "out.png").symlink_to(victim)
    result = runner.invoke(app, ["detokenize", str(tokens), "--out", str(tmp_path / "out.png")])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "not mmtok's\n" and not (tmp_path / "out.png").is_symlink()
    assert mmtok.load(tmp_path / "out.png").kind == "image"
    import PIL.Image

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PIL.Image.Image, "save", full_disk)
    failed = runner.invoke(app, ["detokenize", str(tokens), "--out", str(tmp_path / "new.png")])
    assert failed.exit_code == 1 and errors(failed) == [
        f"error: {tmp_path / 'new.png'}: cannot write: No space left on device"
    ]
    assert not (tmp_path / "new.png").exists() and not list(tmp_path.glob(".*partial"))
    same = runner.invoke(app, ["detokenize", str(tokens), "--out", str(tokens)])
    assert same.exit_code == 2


def test_8_image_tokens_are_not_decoded_by_a_text_tokenizer(tmp_path):
    """An image token file naming text-bytes was 'decoded' into raw bytes in a .png (exit 0)."""
    tokens = image_tokens(tmp_path)
    result = runner.invoke(
        app, ["detokenize", str(tokens), "--tokenizer", "text-bytes", "--out", str(tmp_path / "x.png")]
    )
    assert result.exit_code == 1 and not (tmp_path / "x.png").exists()
    assert errors(result) == [f"error: {tokens}: image tokens cannot be decoded by text-bytes, a text tokenizer"]


# ------------------------------------------------------------------------- 8: forged sizes in every Huffman JPEG
@pytest.mark.parametrize(
    ("marker", "least"), [(0xC3, "21,125,000"), (0xC5, "330,078"), (0xC6, "330,078"), (0xC7, "21,125,000")]
)
def test_8_a_lossless_or_hierarchical_jpeg_declaring_13000_px_in_150_bytes_is_refused(tmp_path, marker, least):
    """The forged-size check skipped SOF3 and SOF5-7: a 150-byte file declaring 13000x13000 was priced whole."""
    frame = struct.pack(">BHHB", 8, 13000, 13000, 1) + bytes([1, 0x11, 0])
    data = b"\xff\xd8\xff" + bytes([marker]) + struct.pack(">H", 2 + len(frame)) + frame + b"\xff\xda" + bytes(120)
    path = tmp_path / "forged.jpg"
    path.write_bytes(data + b"\xff\xd9")
    with pytest.raises(
        MediaError, match=f"declares 13000x13000 pixels, which no jpeg file holds in under {least} bytes"
    ):
        mmtok.load(path)


def test_8_a_speech_manifest_line_holding_a_raw_u2028_is_one_recording(tmp_path):
    from mmtok.budgets.planner import load_spec, user_speech

    shutil.copy(SAMPLES / "speech.flac", tmp_path / "speech.flac")
    line = json.dumps({"path": "speech.flac", "text": "hello\u2028world"}, ensure_ascii=False) + "\n"
    (tmp_path / "speech.jsonl").write_text(line)
    body = SPEECH_PLAN_SPEC
    (tmp_path / "spec.toml").write_text(body.replace("photos = 8", 'speech = 4\nspeech_manifest = "speech.jsonl"'))
    assert [text for _, text in user_speech(load_spec(tmp_path / "spec.toml"))] == ["hello\u2028world"]
