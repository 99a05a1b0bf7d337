"""The wheel, installed into a read-only folder and run from another directory: every command works and nothing is
written inside the installed package (caches go to the user cache folder)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Runs the installed copy, not this checkout: the editable install's finder is taken off sys.meta_path first.
BOOTSTRAP = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
sys.path.insert(0, {target!r})
sys.argv = ["mmtok", *{args!r}]
from mmtok.cli.main import app
import mmtok
assert mmtok.__file__.startswith({target!r}), mmtok.__file__
app()
"""


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel built from a copy of the checkout, and what the build printed."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # setuptools writes build/ beside the sources: build from a copy, not the checkout
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", "mmtok-demo", ".cache")
    shutil.copytree(ROOT, source, ignore=ignore)
    wheels = work / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    built = subprocess.run([*command, str(source)], check=True, capture_output=True, text=True)
    return next(wheels.glob("mmtok-*.whl")), built.stdout + built.stderr


def test_the_build_prints_no_warning(wheel):
    """setuptools warns "Package would be ignored" for a data folder missing from [tool.setuptools] packages (pip
    shows its build's warnings even with -q): a fresh clone's make test and make demo print none."""
    _, printed = wheel
    assert "would be ignored" not in printed and "Warning" not in printed, printed[:3000]


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    work = tmp_path_factory.mktemp("install")
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel[0])],
        check=True,
        capture_output=True,
    )
    for path in [target, *target.rglob("*")]:  # read-only for anyone but root (the tree check covers root)
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "MMTOK_CACHE_DIR": str(work / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
    return target, elsewhere, env


def _run(installed, *args: str) -> subprocess.CompletedProcess:
    target, elsewhere, env = installed
    code = BOOTSTRAP.format(target=str(target), args=list(args))
    return subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True)


def test_every_command_runs_from_a_read_only_install_and_writes_nothing_inside_it(installed, samples, tmp_path):
    target, _, _ = installed
    before = _tree(target)
    photo, speech = str(samples / "chelsea.jpg"), str(samples / "speech.wav")
    tokens = tmp_path / "tokens"
    suite = tmp_path / "suite.toml"
    suite.write_text(
        'name = "tiny"\n[dataset]\nkind = "images"\nsource = "builtin:heldout-photos"\nlimit = 2\n'
        '[pipeline]\ntokenizer = "vq-clip-tiny"\n[metrics]\nnames = ["psnr"]\n'
    )
    commands = [
        ["--version"],
        ["inspect", photo, speech],
        ["price", photo, "--text", "hi", "-m", "gpt-4o", "-m", "gemini-3-flash-preview", "--json"],
        ["models", "--provider", "openai", "--json"],
        ["prices", "status"],
        ["tokenize", photo, "--out", str(tokens)],
        ["detokenize", str(tokens / "chelsea.safetensors"), "--out", str(tmp_path / "back.png")],
        [
            "truncate",
            str(tokens / "chelsea.safetensors"),
            "--method",
            "divprune",
            "--keep-ratio",
            "0.5",
            "--out",
            str(tmp_path / "short.safetensors"),
        ],
        ["eval", "run", str(suite), "--out", str(tmp_path / "run")],
        ["shrink", photo, "-m", "gpt-4o", "--lossless", "--out", str(tmp_path / "shrunk")],
    ]
    for args in commands:
        result = _run(installed, *args)
        assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
        assert "Traceback" not in result.stderr, args
    assert json.loads(_run(installed, "price", photo, "-m", "gpt-4o", "--json").stdout)["tokens"]["image"] > 0
    assert _tree(target) == before, "a command wrote inside the installed package"
