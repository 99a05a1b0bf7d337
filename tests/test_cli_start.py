"""The ``mmtok`` command as the entry point runs it: a command named first is the only one registered (the others
are not imported), and it behaves as in the full app: its output, its one-line errors, usage errors, help."""

from __future__ import annotations

import json
import subprocess
import sys

import mmtok

RUN = """
import json, sys
sys.argv = ["mmtok", *json.loads(sys.argv[1])]
from mmtok.cli.main import app
try:
    app()
except SystemExit as e:
    code = e.code
loaded = sorted(m for m in sys.modules if m.startswith("mmtok.cli."))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _mmtok(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(args)], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return done, report


def test_a_named_command_loads_only_its_own_module():
    done, report = _mmtok("price", "--json", "-m", "gpt-4o", str(mmtok.sample_path("chelsea.jpg")))
    assert report["code"] == 0 and json.loads(done.stdout)["model"] == "gpt-4o"
    assert "mmtok.cli.price" in report["loaded"]
    assert not {"mmtok.cli.shrink", "mmtok.cli.tokenize", "mmtok.cli.train", "mmtok.cli.demo"} & set(report["loaded"])


def test_a_named_command_keeps_its_one_line_errors_and_exit_codes(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    done, report = _mmtok("price", "-m", "gpt-4o", str(bad))
    assert report["code"] == 1 and "bad.png" in done.stderr and "Traceback" not in done.stderr
    _, usage = _mmtok("price", "--no-such-option")
    assert usage["code"] == 2


def test_no_command_or_a_misspelt_one_sees_every_command():
    done, report = _mmtok("--help")
    assert report["code"] == 0 and all(name in done.stdout for name in ("shrink", "tokenize", "prices", "train"))
    done, report = _mmtok("pricee")
    assert report["code"] == 2 and "price" in done.stderr
    done, report = _mmtok("prices", "status")
    assert report["code"] == 0 and "mmtok.cli.prices" in report["loaded"] and "mmtok.cli.shrink" not in report["loaded"]


def test_after_a_lazy_call_the_app_still_has_every_command(monkeypatch):
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    monkeypatch.setattr(sys, "argv", ["mmtok", "version"])
    try:
        app()
    except SystemExit as e:
        assert e.code in (0, None)
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and all(name in result.stdout for name in ("shrink", "tokenize", "prices", "train"))
    assert CliRunner().invoke(app, ["shrink", "--help"]).exit_code == 0


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, samples):
    """Ctrl-C while a URL is being read (a server dripping a byte every 50 ms: the read goes on until its 10-s
    deadline), after the first input's line said the command is running: no race with the command's end."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.loopback import serving

    os.link(samples / "clip.mp4", tmp_path / "a.mp4")  # priced first: its error line says the command is running
    exe = Path(sys.executable).with_name("mmtok")
    with serving(tmp_path) as (base, _):
        command = [str(exe), "price", str(tmp_path / "a.mp4"), f"{base}/drip", "-m", "gpt-4o", "--allow-private"]
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "does not take video" in run.stderr.readline()
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Traceback" not in err and "Aborted" not in err, err  # its stderr, if not
    assert err.splitlines()[-1] == "error: interrupted (Ctrl-C): what was finished is kept; what was under way is not"
