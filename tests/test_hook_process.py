"""`mmtok hook` as Claude Code runs it, a process per event: it ends as soon as its answer is written, without the
interpreter's clean-up (``cli/main.py``'s ``ENDS_AT_ONCE``), and still leaves its answer, its exit code and the
cache whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import PIL.Image
import pytest

from tests.test_hook import _event, _hook_process, isolate_hook

END_NOW = """
import atexit, sys
from mmtok.cli.main import _end_now
atexit.register(lambda: print("exit functions ran"))
sys.stdout.write("buffered answer\\n")
_end_now(json.loads(sys.argv[1]))
"""


@pytest.fixture
def project(tmp_path, samples, monkeypatch):
    """A project with a screenshot in it, a cache and no settings of its own (as tests/test_hook.py's)."""
    isolate_hook(tmp_path, monkeypatch)
    root = tmp_path / "app"
    (root / "docs").mkdir(parents=True)
    with PIL.Image.open(samples / "astronaut.png") as image:  # 1152x1152: its copy saves far more than the note costs
        image.convert("RGB").resize((1152, 1152)).save(root / "docs" / "screenshot.png")
    return root


@pytest.mark.parametrize(("code", "returncode", "said"), [(0, 0, ""), (None, 0, ""), (3, 3, ""), ("bad", 1, "bad")])
def test_a_process_ended_at_once_flushes_its_output_runs_its_exit_functions_and_keeps_its_code(code, returncode, said):
    command = [sys.executable, "-c", "import json\n" + END_NOW, json.dumps(code)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == returncode
    assert done.stdout.splitlines() == ["buffered answer", "exit functions ran"]
    assert done.stderr.strip() == said


def test_the_hook_process_answers_whole_and_leaves_the_networks_it_loaded_whole_in_the_cache(project, tmp_path):
    """At the default bars the networks load beside the decoding (``loading.py``), and the first process writes the
    recognition weights into the cache: the process ends once that is done, never halfway through a write."""
    done = _hook_process(_event("read-image.json", project), dict(os.environ), "-m", "claude-opus-4-7", timeout_s=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    cache = tmp_path / "cache"  # the project fixture's MMTOK_CACHE_DIR
    weights = list((cache / "recognition").rglob("*.weights"))
    manifest = json.loads((_shipped() / "weights.json").read_text())
    assert [w.stat().st_size for w in weights] == [manifest["weights_bytes"]]
    assert not [p for p in cache.rglob("*") if p.name.endswith(".partial")]


def test_the_hook_process_keeps_its_one_line_error_and_exit_1(project):
    done = _hook_process(_event("read-image.json", project), dict(os.environ), "--keep", "nonsense>=2")
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: mmtok hook:")


def _shipped():
    from mmtok.budgets.shrink.recognition import _shipped

    return _shipped()
