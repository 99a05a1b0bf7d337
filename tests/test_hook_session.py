"""The recorded Claude Code session the hook bench replays (eval/data/hooks/claude-code-session.jsonl): its events
have the documented PreToolUse input fields, and replayed through `mmtok hook claude-code` in a project folder, the
events that are no read of an image inside it get no answer (exit 0: the tool call goes on as it would), while a read
of an image there is answered with a copy. The bench times the same replay; this pins what it answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtok.cli.main import app
from tests.test_hook import isolate_hook

SESSION = Path(__file__).resolve().parents[1] / "eval" / "data" / "hooks" / "claude-code-session.jsonl"
FIELDS = {"session_id", "transcript_path", "cwd", "permission_mode", "hook_event_name", "tool_name", "tool_input",
          "tool_use_id"}  # fmt: skip
runner = CliRunner()


def _events(project: Path) -> list[dict]:
    text = SESSION.read_text().replace("${PROJECT}", str(project))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def project(tmp_path, samples, monkeypatch):
    isolate_hook(tmp_path, monkeypatch)
    root = tmp_path / "webapp"
    for sub in ("docs/screens", "src", "public"):
        (root / sub).mkdir(parents=True)
    (root / "README.md").write_text("# webapp\n")
    (root / "src" / "settings.tsx").write_text("export const proxy = { enabled: false };\n")
    shutil.copy(samples / "astronaut.png", root / "docs" / "screens" / "settings.png")
    return root


def test_the_recorded_session_has_the_documented_pretooluse_fields(tmp_path):
    events = _events(tmp_path)
    assert len(events) == 15
    for event in events:
        assert set(event) == FIELDS
        assert event["hook_event_name"] == "PreToolUse" and isinstance(event["tool_input"], dict)
        if event["tool_name"] == "Read":
            assert Path(event["tool_input"]["file_path"]).is_absolute()
    reads = [e["tool_input"]["file_path"] for e in events if e["tool_name"] == "Read"]
    assert sum(path.endswith((".png", ".jpg")) for path in reads) == 8  # images, two read twice


def test_the_sessions_events_that_are_no_image_read_in_the_project_get_no_answer(project):
    for event in _events(project):
        path = event["tool_input"].get("file_path", "")
        if event["tool_name"] == "Read" and path.endswith((".png", ".jpg")) and Path(path).is_file():
            continue
        result = runner.invoke(app, ["hook", "claude-code"], input=json.dumps(event))
        assert result.exit_code == 0, (event["tool_name"], path, result.output)
        assert result.stdout == "", (event["tool_name"], path)


def test_the_sessions_screenshot_read_is_answered_with_a_copy_and_again_from_its_record(project):
    event = next(e for e in _events(project) if e["tool_input"].get("file_path", "").endswith("settings.png"))
    answers = []
    for _ in range(2):
        result = runner.invoke(app, ["hook", "claude-code", "--keep", "ssim>=0.9"], input=json.dumps(event))
        assert result.exit_code == 0, result.output
        answers.append(json.loads(result.stdout)["hookSpecificOutput"])
    assert answers[0]["permissionDecision"] == "allow"
    copy = Path(answers[0]["updatedInput"]["file_path"])
    assert copy.is_file() and copy.parent != project / "docs" / "screens"
    assert answers[1] == answers[0]  # the second read is answered from the first one's record
