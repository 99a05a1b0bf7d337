"""The docs site and the reports as a reader gets them: ``mkdocs build --strict`` offline into a folder, the ledger's
HTML report of the example ledger in eval/results/, and a file server on 127.0.0.1 over such folders."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.docs_pages import ROOT

EXAMPLE_LEDGER = ROOT / "eval" / "results" / "bench_proxy_ledger.sqlite"


def build_site(out: Path) -> Path:
    """The site built strictly (every link, anchor and nav entry checked) into ``out``; raises with mkdocs' output
    when the build fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about its successor, not a build problem
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    command += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    if result.returncode != 0:
        raise AssertionError(f"mkdocs build failed:\n{result.stdout}{result.stderr}")
    return out


def write_ledger_report(out: Path, ledger: Path = EXAMPLE_LEDGER) -> Path:
    """``mmtok ledger LEDGER --html OUT`` as a user runs it, on the example ledger; the report's folder."""
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    result = CliRunner().invoke(app, ["ledger", str(ledger), "--html", str(out)])
    if result.exit_code != 0:
        raise AssertionError(result.output)
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(roots: dict[str, Path]) -> Iterator[str]:
    """A file server on 127.0.0.1 over ``roots`` (name -> folder, served at ``/name/``); yields its base URL."""
    with tempfile.TemporaryDirectory(prefix="mmtok-serve-") as top:
        for name, folder in roots.items():
            (Path(top) / name).symlink_to(Path(folder).resolve(), target_is_directory=True)
        handler = functools.partial(_Quiet, directory=top)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
