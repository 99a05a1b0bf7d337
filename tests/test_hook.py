"""`mmtok hook claude-code` answering recorded Claude Code PreToolUse events in Claude Code's documented format.

The events in tests/data/hooks/ have the shape of Claude Code's PreToolUse input (session_id, transcript_path, cwd,
permission_mode, hook_event_name, tool_name, tool_input, tool_use_id); each test points their `cwd` and `file_path`
at its own folder and leaves every other field as recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app

EVENTS = Path(__file__).parent / "data" / "hooks"
FAST = ["--keep", "ssim>=0.9"]  # no OCR: the bar that decides is SSIM
DECISION_KEYS = {"hookEventName", "permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"}
runner = CliRunner()


def _event(name: str, project: Path, file_name: str | None = None) -> dict:
    event = json.loads((EVENTS / name).read_text())
    recorded = Path(event["cwd"])
    event["cwd"] = str(project)
    if "file_path" in event["tool_input"]:
        relative = Path(event["tool_input"]["file_path"]).relative_to(recorded)
        event["tool_input"]["file_path"] = str(project / (file_name or relative))
    return event


def isolate_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's environment for one test: a cache of its own, no user settings file, none of mmtok's settings
    variables (shared by the hook tests' ``project`` fixtures)."""
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user settings file
    for name in ("MMTOK_CONFIG", "MMTOK_MODEL", "MMTOK_KEEP"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def project(tmp_path, samples, monkeypatch):
    isolate_hook(tmp_path, monkeypatch)
    root = tmp_path / "app"
    (root / "docs").mkdir(parents=True)
    shutil.copy(samples / "astronaut.png", root / "docs" / "screenshot.png")
    (root / "README.md").write_text("# app\n")
    return root


def _run(event: dict, *args: str):
    return runner.invoke(app, ["hook", "claude-code", *args], input=json.dumps(event))


def test_image_read_answers_with_a_shrunk_copy_in_claude_codes_format(project):
    event = _event("read-image.json", project)
    result = _run(event, "-m", "claude-opus-4-7", *FAST)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert set(answer) == {"hookSpecificOutput"}
    decision = answer["hookSpecificOutput"]
    assert set(decision) == DECISION_KEYS
    assert decision["hookEventName"] == "PreToolUse" and decision["permissionDecision"] == "allow"
    copy = Path(decision["updatedInput"]["file_path"])
    assert set(decision["updatedInput"]) == set(event["tool_input"]) and copy != Path(event["tool_input"]["file_path"])
    original = mmtok.price(event["tool_input"]["file_path"], "claude-opus-4-7")
    shrunk = mmtok.price(copy, "claude-opus-4-7")
    assert shrunk.tokens("image") < original.tokens("image")
    assert f"{original.tokens('image'):,} -> {shrunk.tokens('image'):,} tokens" in decision["additionalContext"]
    assert (
        "ssim>=0.9" in decision["additionalContext"]
        and str(project / "docs" / "screenshot.png") in (decision["additionalContext"])
    )
    way_back = decision["additionalContext"].split("read the original as it is at ")[1].split(" (not shrunk)")[0]
    original_copy = Path(way_back)  # outside the project: the hook leaves a read of it alone
    assert original_copy.read_bytes() == Path(event["tool_input"]["file_path"]).read_bytes()
    assert not original_copy.resolve().is_relative_to(project.resolve())
    assert _run({**event, "tool_input": {"file_path": str(original_copy)}}, *FAST).stdout == ""


def test_an_unchanged_image_read_again_reuses_the_copy(project):
    event = _event("read-image.json", project)
    first = json.loads(_run(event, *FAST).stdout)["hookSpecificOutput"]["updatedInput"]["file_path"]
    written = Path(first).stat().st_mtime_ns
    again = json.loads(_run(event, *FAST).stdout)["hookSpecificOutput"]["updatedInput"]["file_path"]
    assert again == first and Path(again).stat().st_mtime_ns == written
    (project / "docs" / "screenshot.png").write_bytes((project / "docs" / "screenshot.png").read_bytes())  # touched
    assert json.loads(_run(event, *FAST).stdout)["hookSpecificOutput"]["updatedInput"]["file_path"] != first


def test_model_and_bars_come_from_the_settings_file(project, tmp_path, monkeypatch):
    settings = tmp_path / "mmtok.toml"
    settings.write_text('model = "gpt-4o"\nkeep = ["ssim>=0.9"]\n')
    monkeypatch.setenv("MMTOK_CONFIG", str(settings))
    decision = json.loads(_run(_event("read-image.json", project)).stdout)["hookSpecificOutput"]
    assert "on gpt-4o" in decision["permissionDecisionReason"] and "ssim>=0.9" in decision["additionalContext"]


@pytest.mark.parametrize("name", ["read-text.json", "read-missing.json", "bash.json"])
def test_reads_it_does_not_handle_get_no_answer_and_exit_0(project, name):
    result = _run(_event(name, project), *FAST)
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""


def test_an_image_outside_the_project_is_left_alone(project, tmp_path):
    outside = tmp_path / "elsewhere.png"
    shutil.copy(project / "docs" / "screenshot.png", outside)
    event = _event("read-image.json", project)
    event["tool_input"]["file_path"] = str(outside)
    result = _run(event, *FAST)
    assert result.exit_code == 0 and result.stdout == ""


def test_an_image_named_like_text_is_told_by_its_bytes(project):
    shutil.copy(project / "docs" / "screenshot.png", project / "docs" / "notes.txt")
    result = _run(_event("read-image.json", project, "docs/notes.txt"), *FAST)
    assert json.loads(result.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


@pytest.mark.parametrize(
    ("stdin", "args", "said"),
    [
        ("not json", [], "error: mmtok hook: Expecting value"),
        ("[1, 2]", [], "not a JSON object"),
        (None, ["--keep", "ssim>=2"], "ssim is a fraction between 0 and 1"),
    ],
)
def test_an_error_is_one_line_on_stderr_and_exit_1_never_2(project, stdin, args, said):
    """Claude Code blocks the tool call on exit 2: a failing hook must not stop the agent reading."""
    stdin = stdin if stdin is not None else json.dumps(_event("read-image.json", project))
    result = runner.invoke(app, ["hook", "claude-code", *args], input=stdin)
    assert result.exit_code == 1 and result.stdout == ""
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_agent_is_exit_1(project):
    result = runner.invoke(app, ["hook", "cursor"], input="{}")
    assert result.exit_code == 1 and "unknown agent 'cursor'" in result.stderr


def _hook_process(event: dict, env: dict, *args: str, timeout_s: float = 60):
    """The hook as Claude Code runs it: a process given the event on stdin, bounded in time (a hang fails)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "mmtok.cli.main", "hook", "claude-code", *args]
    return subprocess.run(command, input=json.dumps(event), capture_output=True, text=True, env=env, timeout=timeout_s)


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_fifo_is_left_alone_without_blocking(project, tmp_path, where):
    """A FIFO with no writer blocks an ordinary open; the hook checks the folder first and opens without blocking,
    so it answers nothing at once (inside the project) or never opens it (outside)."""
    import os

    fifo = (project / "docs" if where == "inside" else tmp_path) / "pipe.png"
    os.mkfifo(fifo)
    event = _event("read-image.json", project)
    event["tool_input"]["file_path"] = str(fifo)
    done = _hook_process(event, dict(os.environ), *FAST, timeout_s=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


def test_other_non_regular_files_are_left_alone(project):
    event = _event("read-image.json", project)
    for path in (project / "docs", project / "docs" / "a\x00b.png"):
        event["tool_input"]["file_path"] = str(path)
        result = _run(event, *FAST)
        assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""


def test_an_image_whose_copy_saves_less_than_the_note_costs_is_left_alone(project):
    """A 32x24 icon: Claude bills it 1 token less when shrunk, and the note telling the agent so is ~130 tokens."""
    import PIL.Image

    icon = project / "docs" / "icon.png"
    PIL.Image.effect_noise((32, 24), 60).convert("RGB").save(icon)
    before = mmtok.price(icon, "claude-opus-4-7").tokens("image")
    event = _event("read-image.json", project, "docs/icon.png")
    result = _run(event, "-m", "claude-opus-4-7", "--keep", "ssim>=0.1")
    assert result.exit_code == 0 and result.stdout == "", result.stdout
    from mmtok.cli.hook import _shrunk
    from mmtok.config import load_config

    shrunk = _shrunk(icon, load_config(None).override(model="claude-opus-4-7", keep=["ssim>=0.1"]))
    assert shrunk["status"] == "shrunk" and 0 < before - shrunk["tokens_after"] < 20  # it would have been rewritten


def test_a_still_png_cheaper_than_any_note_is_left_alone_without_being_shrunk(project):
    """A 32x24 icon costs Claude fewer tokens than half the words of any note: no copy can be worth it, so nothing is
    shrunk (no copy, no record in the cache folder) and the read goes on as it is."""
    import PIL.Image

    icon = project / "docs" / "icon.png"
    PIL.Image.effect_noise((32, 24), 60).convert("RGB").save(icon)
    result = _run(_event("read-image.json", project, "docs/icon.png"), "-m", "claude-opus-4-7", *FAST)
    assert result.exit_code == 0 and result.stdout == "", result.stdout
    made = project.parent / "cache" / "hook"
    assert not made.exists() or not any(made.rglob("*.*"))


def test_an_animated_png_icon_is_still_shrunk_and_a_large_png_is_not_too_cheap(project):
    """The shortcut is for still PNGs only: an APNG (``acTL`` before its image data) goes to shrink, which decides
    whether the model takes its animation; a screenshot costs more than any note."""
    import PIL.Image

    from mmtok.cli.hook import _still_png_size, _too_cheap

    icon = project / "docs" / "icon.png"
    frames = [PIL.Image.effect_noise((32, 24), 60).convert("RGB") for _ in range(2)]
    frames[0].save(icon, save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert _still_png_size(icon.read_bytes()) is None
    event = _event("read-image.json", project, "docs/icon.png")
    assert not _too_cheap(event, event["tool_input"], icon, "claude-opus-4-7")
    screenshot = project / "docs" / "screenshot.png"
    assert _still_png_size(screenshot.read_bytes()[:65536]) == PIL.Image.open(screenshot).size
    assert not _too_cheap(event, event["tool_input"], screenshot, "claude-opus-4-7")
    assert not _too_cheap(event, event["tool_input"], icon.with_name("missing.png"), "claude-opus-4-7")
