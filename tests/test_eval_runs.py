"""Evaluation runs never lose, mix or hide results (issue 12, findings 3-7): every failure is an item's error,
the summary counts against the suite, a changed suite is refused, torn lines are repaired, a second run on the
same folder is refused, workers die with their parent, and a resumed speech run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mmtok.eval.runner as runner
from mmtok.cli.main import app
from mmtok.errors import ConfigError, EvalError
from mmtok.eval.runner import read_results, run
from mmtok.eval.suite import items, load_suite


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def image_manifest(tmp_path: Path, samples: Path, rows: list[dict]) -> Path:
    return write(tmp_path / "images.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def image_suite(tmp_path: Path, source: str, *, size: int = 32, limit: int = 0, name: str = "suite.toml") -> Path:
    return write(
        tmp_path / name,
        f"""
name = "tiny"
[dataset]
kind = "images"
source = "{source}"
limit = {limit}
[pipeline]
tokenizer = "vq-clip-tiny"
image_size = {size}
[metrics]
names = ["psnr"]
""",
    )


def photo_suite(tmp_path: Path, *, size: int = 32, limit: int = 4, name: str = "suite.toml") -> Path:
    return image_suite(tmp_path, "builtin:heldout-photos", size=size, limit=limit, name=name)


def lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------------- 3: failures are never lost
def test_any_exception_in_an_item_is_that_items_error_and_the_rest_go_on(tmp_path, monkeypatch):
    real = runner.evaluate_item

    def flaky(item, ctx):
        if item["id"] == "photo-0001":
            raise TypeError("unsupported operand type(s) for /: 'str' and 'str'")
        if item["id"] == "photo-0002":
            b"\xff".decode("utf-8")
        return real(item, ctx)

    monkeypatch.setattr(runner.workers, "evaluate_item", flaky)
    seen: list[tuple[int, int]] = []
    summary = run(photo_suite(tmp_path), tmp_path / "run", progress=lambda done, total: seen.append((done, total)))
    assert (summary["items"], summary["ok"], summary["failed"], summary["missing"]) == (4, 2, 2, 0)
    rows = read_results(tmp_path / "run")
    assert rows["photo-0001"]["error"].startswith("TypeError: unsupported operand")
    assert rows["photo-0002"]["error"].startswith("UnicodeDecodeError: ")
    assert rows["photo-0003"]["error"] is None and seen[-1] == (4, 4)


def test_an_exception_in_the_worker_thread_is_raised_in_the_caller(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(runner.batch, "run_shard", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        run(photo_suite(tmp_path), tmp_path / "run", progress=lambda done, total: None)


def test_a_run_with_failed_items_exits_1_and_counts_against_the_suite(tmp_path, samples):
    manifest = image_manifest(
        tmp_path,
        samples,
        [
            {"id": 7, "path": str(samples / "chelsea.jpg")},  # an int id is the item "7"
            {"id": "missing", "path": str(tmp_path / "nope.png")},
            {"path": str(samples / "coffee.webp")},
        ],
    )
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "run", str(image_suite(tmp_path, str(manifest))), "--out", str(out)])
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["items"], summary["ok"], summary["failed"], summary["missing"]) == (3, 2, 1, 0)
    rows = read_results(out)
    assert rows["7"]["error"] is None and "nope.png" in rows["missing"]["error"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{"id": [1], "path": "a.png"}', r"images\.jsonl:2: 'id' must be a string or an integer, got list"),
        ('{"id": true, "path": "a.png"}', r"images\.jsonl:2: 'id' must be a string or an integer, got bool"),
        ('{"id": "7", "path": "a.png"}', r"images\.jsonl:2: duplicate id '7' \(first on line 1\)"),
        ('{"path": 3}', r"images\.jsonl:2: each item needs a 'path'"),
        ("[1, 2]", r"images\.jsonl:2: each item must be a JSON object"),
        ("{not json", r"images\.jsonl:2: not valid JSON"),
    ],
)
def test_manifest_ids_are_strings_or_ints_and_unique(tmp_path, row, message):
    manifest = write(tmp_path / "images.jsonl", '{"id": 7, "path": "a.png"}\n' + row + "\n")
    suite = load_suite(image_suite(tmp_path, str(manifest)))
    with pytest.raises(ConfigError, match=message):
        items(suite)
    result = CliRunner().invoke(app, ["eval", "run", str(suite.path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "Traceback" not in result.output


# --------------------------------------------------------------------------------- 4: a changed suite is named
def test_resume_refuses_a_changed_suite_and_names_what_changed(tmp_path):
    out = tmp_path / "run"
    run(photo_suite(tmp_path, size=64, limit=3), out)
    stored = (out / "suite.json").read_text()
    changed = photo_suite(tmp_path, size=32, limit=5)
    with pytest.raises(ConfigError) as refused:
        run(changed, out, resume=True)
    message = str(refused.value)
    assert "dataset.limit: 3 -> 5" in message and "pipeline.image_size: 64 -> 32" in message
    assert "2 items added (photo-0003, photo-0004)" in message and "--rerun-changed" in message
    assert (out / "suite.json").read_text() == stored  # nothing overwritten
    result = CliRunner().invoke(app, ["eval", "run", str(changed), "--out", str(out), "--resume"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_rerun_changed_reruns_only_what_changed_and_drops_what_left(tmp_path):
    out = tmp_path / "run"
    first = run(photo_suite(tmp_path, limit=3), out)
    assert len(lines(out)) == 3 and all(row["hash"] for row in lines(out))
    more = run(photo_suite(tmp_path, limit=5), out, rerun_changed=True)
    assert [row["id"] for row in lines(out)][3:] == ["photo-0003", "photo-0004"]  # only the new items ran
    assert (more["items"], more["ok"]) == (5, 5) and json.loads((out / "suite.json").read_text())["limit"] == 5
    fewer = run(photo_suite(tmp_path, limit=3), out, rerun_changed=True)
    assert len(lines(out)) == 5 and (fewer["items"], fewer["ok"]) == (3, 3)  # dropped, nothing re-run
    assert fewer["metrics"] == first["metrics"]
    resized = run(photo_suite(tmp_path, size=64, limit=3), out, rerun_changed=True)
    assert len(lines(out)) == 8 and resized["metrics"] != first["metrics"]  # the pipeline changed: all re-run
    assert run(photo_suite(tmp_path, size=64, limit=3), out, resume=True)["metrics"] == resized["metrics"]
    assert len(lines(out)) == 8


def test_an_items_content_change_is_named_and_rerun_alone(tmp_path, samples):
    import shutil

    for name in ("a.jpg", "b.jpg"):
        shutil.copy(samples / "chelsea.jpg", tmp_path / name)
    shutil.copy(samples / "rocket_rotated.jpg", tmp_path / "c.jpg")
    manifest = image_manifest(tmp_path, samples, [{"id": n, "path": f"{n}.jpg"} for n in "abc"])
    suite, out = image_suite(tmp_path, str(manifest)), tmp_path / "run"
    before = run(suite, out)
    shutil.copy(samples / "rocket_rotated.jpg", tmp_path / "b.jpg")
    with pytest.raises(ConfigError, match=r"the suite changed .*: 1 item changed \(b\)\. Pass --rerun-changed"):
        run(suite, out, resume=True)
    after = run(suite, out, rerun_changed=True)
    assert [row["id"] for row in lines(out)] == ["a", "b", "c", "b"] and after["ok"] == 3
    rows = read_results(out)
    assert rows["b"]["metrics"]["psnr_db"] == pytest.approx(rows["c"]["metrics"]["psnr_db"])
    assert before["metrics"] != after["metrics"]


def test_a_run_folder_from_before_fingerprints_resumes_when_its_suite_is_the_same(tmp_path):
    out, suite = tmp_path / "run", photo_suite(tmp_path, limit=3)
    whole = run(suite, out)
    (out / "fingerprint.json").unlink()
    old_rows = [{k: v for k, v in row.items() if k != "hash"} for row in lines(out)]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old_rows))
    with pytest.raises(ConfigError, match=r"dataset\.limit: 3 -> 4"):
        run(photo_suite(tmp_path, limit=4, name="more.toml"), out, resume=True)
    assert run(suite, out, resume=True)["metrics"] == whole["metrics"]
    assert len(lines(out)) == 3 and all(row["hash"] for row in lines(out))  # stamped, nothing redone


# --------------------------------------------------------------------------------- 5: torn and malformed lines
def test_a_torn_last_line_is_cut_off_on_resume_and_its_item_redone(tmp_path):
    out, suite = tmp_path / "run", photo_suite(tmp_path, limit=4)
    whole = run(suite, out)
    data = (out / "results.jsonl").read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    (out / "results.jsonl").write_bytes(data[: last + (len(data) - last) // 2])  # the last row cut in half
    assert len(read_results(out)) == 3  # a torn line does not count
    resumed = run(suite, out, resume=True)
    assert (resumed["items"], resumed["ok"], resumed["missing"]) == (4, 4, 0)
    assert resumed["metrics"] == whole["metrics"]
    timeless = [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in data.splitlines()]
    assert [{k: v for k, v in row.items() if k != "seconds"} for row in lines(out)] == timeless  # the fragment is
    assert (out / "results.jsonl").read_bytes().count(b"\n") == 4  # gone, the item written once again


def test_a_malformed_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    from mmtok.errors import EvalError

    out, suite = tmp_path / "run", photo_suite(tmp_path, limit=3)
    run(suite, out)
    rows = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text(rows[0] + '{"id": "photo-0001", "metr\n' + rows[2])
    with pytest.raises(EvalError, match=r"results\.jsonl:2: not a result row"):
        run(suite, out, resume=True)
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(out), "--resume"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert CliRunner().invoke(app, ["eval", "report", str(out)]).exit_code == 1


def test_the_summary_takes_the_last_row_of_each_id(tmp_path):
    out = tmp_path / "run"
    run(photo_suite(tmp_path, limit=2), out)
    newer = lines(out)[0] | {"metrics": {"psnr_db": 99.0}}
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(newer) + "\n")
    assert runner.summarize(out)["metrics"]["psnr_db"] == pytest.approx(
        (99.0 + lines(out)[1]["metrics"]["psnr_db"]) / 2
    )


# --------------------------------------------------------------------------------- 6: one run per folder
def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    out, suite = tmp_path / "run", photo_suite(tmp_path, limit=2)
    out.mkdir()
    with runner.RunLock(out):  # another run holds the folder
        with pytest.raises(ConfigError, match=rf"another `mmtok eval run` \(process {os.getpid()}\) is writing"):
            run(suite, out)
        result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(out), "--resume"])
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert not (out / "results.jsonl").exists()
    assert run(suite, out)["ok"] == 2  # the lock goes with its holder


def test_failed_items_are_retried_only_when_asked(tmp_path, samples):
    import shutil

    manifest = image_manifest(tmp_path, samples, [{"id": n, "path": f"{n}.jpg"} for n in "ab"])
    shutil.copy(samples / "chelsea.jpg", tmp_path / "a.jpg")
    suite, out = image_suite(tmp_path, str(manifest)), tmp_path / "run"
    assert run(suite, out)["failed"] == 1
    shutil.copy(samples / "chelsea.jpg", tmp_path / "b.jpg")  # fixed, but b's content changed too: name it
    with pytest.raises(ConfigError, match=r"1 item changed \(b\)"):
        run(suite, out, resume=True)
    (tmp_path / "b.jpg").unlink()  # the same missing file again: a failure that stays done on resume
    assert run(suite, out, resume=True)["failed"] == 1 and len(lines(out)) == 2
    again = run(suite, out, retry_errors=True)
    assert again["failed"] == 1 and [row["id"] for row in lines(out)] == ["a", "b", "b"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(300)
def test_workers_die_with_their_parent_and_the_folder_is_then_free(tmp_path):
    suite = write(
        tmp_path / "qa.toml",
        '[dataset]\nkind = "qa"\nsource = "builtin:digits-qa"\nlimit = 1000\n[metrics]\nnames = ["accuracy"]\n',
    )
    out = tmp_path / "run"
    command = [sys.executable, "-m", "mmtok.cli.main", "eval", "run", str(suite), "--out", str(out), "--workers", "2"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not ((out / "results.jsonl").exists() and len(read_results(out)) >= 2):
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert len(workers) >= 2
    second = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(out), "--resume"])
    assert second.exit_code == 2  # refused while the first holds the folder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 3  # PR_SET_PDEATHSIG: at once
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)
    stopped = (out / "results.jsonl").read_bytes()
    time.sleep(1)
    assert (out / "results.jsonl").read_bytes() == stopped and len(read_results(out)) < 1000  # no one writes
    with runner.RunLock(out):  # the lock died with its holder
        pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
def test_torchrun_ranks_share_one_locked_run_and_a_refusal_reaches_every_rank(tmp_path):
    out = tmp_path / "run"

    def torchrun(suite: Path, *flags: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        command += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
        command += ["-m", "mmtok.cli.main", "eval", "run", str(suite), "--out", str(out), *flags]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)

    done = torchrun(photo_suite(tmp_path, limit=4))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {row["worker"] for row in lines(out)} == {0, 1} and len(lines(out)) == 4
    assert json.loads((out / "summary.json").read_text())["ok"] == 4
    refused = torchrun(photo_suite(tmp_path, limit=6), "--resume")
    # each rank prints the one line and exits 2 (torchrun may stop the second rank once the first has exited)
    assert refused.returncode != 0 and "error: " in refused.stderr and "exitcode  : 2" in refused.stderr
    assert "dataset.limit: 4 -> 6" in refused.stderr and "rank 0 did not" not in refused.stderr
    assert "eval/runner/" not in refused.stderr and len(lines(out)) == 4  # (torchrun prints its own traceback)


@pytest.mark.parametrize(
    ("pipeline", "says"),
    [
        ('tokenizer = "vq-clip-tin"', "did you mean vq-clip-tiny"),
        (
            'tokenizer = "vq-clip-tiny"\nimage_size = 60',
            "image_size must be a positive multiple of 8, at most 2048, got 60",
        ),
        ('tokenizer = "vq-clip-tiny"\nimage_size = -8', "image_size must be a positive multiple of 8"),
        ('tokenizer = "vq-clip-tiny"\nimage_size = 65536', "at most 2048, got 65536"),
    ],
)
def test_a_pipeline_no_item_can_run_is_the_suites_error_before_any_item(pipeline, says, tmp_path):
    suite = write(
        tmp_path / "bad.toml",
        f'[dataset]\nkind = "images"\nsource = "builtin:heldout-photos"\nlimit = 2\n[pipeline]\n{pipeline}\n',
    )
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_speech_suites_rate_and_levels_are_checked_before_any_item(tmp_path):
    for line, says in (("tokens_per_second = 400", "from 1 to 250"), ("codebook_levels = 9", "1 to 8")):
        suite = write(
            tmp_path / "s.toml", f'[dataset]\nkind = "speech"\nsource = "builtin:heldout-speech"\n[pipeline]\n{line}\n'
        )
        result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
        assert result.exit_code == 2 and says in result.output


def test_a_relative_dataset_source_is_read_from_the_suite_files_folder(tmp_path, samples, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    image_manifest(folder, samples, [{"id": "c", "path": str(samples / "chelsea.jpg")}])
    suite = image_suite(folder, "images.jsonl", limit=1)
    monkeypatch.chdir(tmp_path)  # not the suite's folder
    assert load_suite(suite).source == str(folder / "images.jsonl")
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output


def test_a_suites_fd_extractor_cannot_name_a_pickle(tmp_path):
    suite = write(
        tmp_path / "s.toml",
        '[dataset]\nkind = "images"\nsource = "builtin:heldout-photos"\nlimit = 1\n[metrics]\nnames = ["fd"]\n'
        'fd_extractor = "teacher:open_clip:RN50//tmp/evil.pt"\n',
    )
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "pickle can run code" in result.output


@pytest.mark.parametrize("row", ['{"id": "a", "tokens": "many"}', '{"id": "a", "metrics": {"psnr_db": "x"}}'])
def test_a_results_row_of_the_wrong_types_is_named_not_a_traceback(row, tmp_path):
    """A row with tokens "many" ended eval report and every resume in a TypeError."""
    (tmp_path / "results.jsonl").write_text(row + "\n")
    with pytest.raises(EvalError, match=r"results.jsonl:1: not a result row"):
        read_results(tmp_path)


def test_a_run_loads_its_tokenizer_once_for_the_check_and_the_items(tmp_path, monkeypatch):
    import mmtok

    loaded = []
    get_tokenizer = mmtok.get_tokenizer
    monkeypatch.setattr(mmtok, "get_tokenizer", lambda name, **kw: loaded.append(name) or get_tokenizer(name, **kw))
    summary = run(photo_suite(tmp_path, limit=2), tmp_path / "out")
    assert summary["ok"] == 2 and loaded == ["vq-clip-tiny"], (summary, loaded)
