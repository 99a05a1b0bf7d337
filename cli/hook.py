"""``mmtok hook claude-code``: a Claude Code PreToolUse hook that sends the agent a shrunk copy of each image it reads.

Claude Code runs the command before each tool call its settings match (``"matcher": "Read"``), with the event as
JSON on stdin, and reads the answer as JSON on stdout. Format, from the hooks reference
(https://code.claude.com/docs/en/hooks, sections "PreToolUse input" and "PreToolUse decision control", read through
excerpts on 2026-12-02) and the Agent SDK's types of it (anthropics/claude-agent-sdk-python,
``src/claude_agent_sdk/types.py`` at e8bde601, 2026-08-22: ``PreToolUseHookInput``, ``PreToolUseHookSpecificOutput``):

- in: ``session_id``, ``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name: "PreToolUse"``,
  ``tool_name``, ``tool_input`` (for Read: ``file_path``, absolute, and optional ``offset``, ``limit``, ``pages``),
  ``tool_use_id``;
- out: ``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow" | "deny" | "ask" |
  "defer", "permissionDecisionReason": ..., "updatedInput": {...}, "additionalContext": ...}}``; exit 0 with no
  output lets the call go on unchanged; exit 2 blocks it.

What this hook answers: for a Read of an image inside the project (the event's ``cwd``) or a configured root that
mmtok can make cheaper for the model while meeting the bars, ``allow`` with ``updatedInput`` pointing ``file_path``
at the shrunk copy (in the cache folder, reused while the image is unchanged) and ``additionalContext`` telling the
agent what it sees and where the original is. Anything else (another tool, a file that is no image, missing, or
outside those folders, anything but a regular file, an image already as cheap as it gets, or one whose copy saves
fewer tokens than the note about it adds) gets no answer and exit 0; an error (bad settings, an
image mmtok cannot read) one line on stderr and exit 1, which Claude Code shows as a non-blocking hook error. Either
way the read goes on as it would without the hook: it never blocks a read and never widens what the agent may read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import print_error
from mmtok.config import Config

AGENTS = ("claude-code",)
DEFAULT_MODEL = "claude-opus-4-7"  # Claude Code's models share Anthropic's image rule; set yours with --model
MAX_EVENT_BYTES = 1024 * 1024  # an event is a few hundred bytes of JSON
HEAD_BYTES = 64  # enough for image_format's magic numbers
PNG_HEAD_BYTES = 64 * 1024  # a still PNG's chunks before its image data (its header, colours, text) fit in this
REWRITTEN = ("shrunk", "lossless", "converted")


def hook(
    agent: str = typer.Argument(..., help="The agent whose hook event is on stdin: claude-code."),
    model: str | None = typer.Option(None, "--model", "-m", help="The model the agent reads with (else settings)."),
    keep: list[str] = typer.Option([], "--keep", help="A quality bar, e.g. ocr>=0.98 (repeatable; else settings)."),
    config: Path | None = typer.Option(
        None, "--config", help="The settings file (default: MMTOK_CONFIG or the user's)."
    ),
) -> None:
    """Read an agent's hook event on stdin and answer in its format: a Read of an image gets a shrunk copy that meets
    your bars on your model. Never blocks: what it does not handle gets no answer (exit 0), an error one line on
    stderr (exit 1), and the read goes on."""
    if agent not in AGENTS:
        print_error(f"mmtok hook: unknown agent {agent!r}; known: {', '.join(AGENTS)}")
        raise typer.Exit(1)  # not 2: Claude Code reads exit 2 as "block the tool call"
    try:
        from mmtok.config import load_config

        settings = load_config(config).override(model=model, keep=keep)
        settings.use_cache()
        answer = claude_code_answer(_event(sys.stdin.buffer), settings)
    except Exception as e:  # a hook that fails must not stop the agent reading: say why, answer nothing
        print_error(f"mmtok hook: {e}")
        raise typer.Exit(1) from None
    finally:
        _loaded()
    if answer is not None:
        sys.stdout.write(json.dumps(answer) + "\n")


def _loaded() -> None:
    """Wait for the networks' loading, if this process started it: the process ends without waiting for its threads
    (``cli/main.py``'s ``ENDS_AT_ONCE``)."""
    loading = sys.modules.get("mmtok.budgets.shrink.loading")
    if loading is not None:
        loading.wait()


def _event(stream: Any) -> dict[str, Any]:
    raw = stream.read(MAX_EVENT_BYTES + 1)
    if len(raw) > MAX_EVENT_BYTES:
        raise ValueError(f"the event on stdin is over {MAX_EVENT_BYTES:,} bytes: not a hook event")
    event = json.loads(raw)
    if not isinstance(event, dict):
        raise ValueError("the event on stdin is not a JSON object")
    return event


def claude_code_answer(event: dict[str, Any], settings: Config) -> dict[str, Any] | None:
    """The answer to one Claude Code PreToolUse event, or None for "go on unchanged"."""
    tool_input = event.get("tool_input")
    if event.get("hook_event_name") != "PreToolUse" or event.get("tool_name") != "Read":
        return None
    if not isinstance(tool_input, dict) or not isinstance(tool_input.get("file_path"), str):
        return None
    path = Path(tool_input["file_path"])
    if not _inside(path, event.get("cwd"), settings.roots) or not _is_image(path):
        return None  # where it is is checked first: nothing outside those folders is ever opened
    if _too_cheap(event, tool_input, path, settings.model_or(DEFAULT_MODEL)):
        return None
    result = _shrunk(path, settings)
    if result is None or result["status"] not in REWRITTEN:
        return None
    answer = _rewrite(event, tool_input, path, result)
    if result["status"] != "converted" and not _worth_it(result, answer["hookSpecificOutput"]["additionalContext"]):
        return None  # the note would cost the agent more tokens than the copy saves (a 32x24 icon saves 1)
    return answer


def _is_image(path: Path) -> bool:
    """By its first bytes, as mmtok.load tells kinds (never by the name); a missing file, or anything that is not a
    regular file (a FIFO, a device, a folder), is not one. Opened without blocking: a FIFO with no writer would
    otherwise hang the agent's read."""
    from mmtok.headers import image_format

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):  # missing, unreadable, a NUL byte in the name
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return image_format(os.read(fd, HEAD_BYTES)) is not None
    except OSError:
        return False
    finally:
        os.close(fd)


def _too_cheap(event: dict[str, Any], tool_input: dict[str, Any], path: Path, model: str) -> bool:
    """Whether a still PNG costs ``model`` so few tokens that no copy of it can save more than its note adds (what
    ``_worth_it`` would decide after shrinking: a copy saves at most the image's tokens), so it is left alone without
    being shrunk (a 32x24 icon: 2 tokens, against a note of ~130). Only a still PNG, which every provider takes as
    it is (a format or an animation the model does not take gets a converted copy, whatever its size). The bound is
    half the words of the note with no figures in it, with no tokeniser loaded (0.2 s): a tokeniser that splits at
    spaces makes a token or more of each word, and a rule by characters at least one of every 4 characters."""
    try:
        with open(path, "rb") as f:
            head = f.read(PNG_HEAD_BYTES)
        size = _still_png_size(head)
        if size is None:
            return False
        from mmtok.budgets.pricing.counts import image_token_count

        tokens = image_token_count(*size, model).tokens
        blank = {"measures": {}, "tokens_before": 0, "tokens_after": 0, "model": model, "cost_before": 0,
                 "cost_after": 0, "bars": {}, "action": "", "output": ""}  # fmt: skip
        note = _rewrite(event, tool_input, path, blank)["hookSpecificOutput"]["additionalContext"]
        return tokens <= len(note.split()) // 2
    except Exception:  # anything unusual: shrink decides, as for any image
        return False


def _still_png_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG whose chunks before its first image data hold no animation control (``acTL``: an
    APNG); None for anything else, or when ``head`` ends before the image data."""
    if not head.startswith(b"\x89PNG\r\n\x1a\n") or head[12:16] != b"IHDR":
        return None
    pos = 8
    while pos + 8 <= len(head):
        length, kind = int.from_bytes(head[pos : pos + 4], "big"), head[pos + 4 : pos + 8]
        if kind == b"acTL":
            return None
        if kind == b"IDAT":
            return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        pos += 12 + length
    return None


def _worth_it(result: dict[str, Any], note: str) -> bool:
    """Whether the copy saves more input tokens than the note the agent is given about it adds. A BPE token holds at
    least one byte, so a saving above the note's length in bytes needs no count; else the note is counted by the
    model's own text rule."""
    saved = result["tokens_before"] - result["tokens_after"]
    if saved > len(note.encode()):
        return True
    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.pricing.text import count_text

    return saved > count_text(note, resolve(result["model"]).text_rule).tokens


def _inside(path: Path, cwd: object, roots: tuple[Path, ...]) -> bool:
    """Whether ``path`` (links followed) is inside the project folder or a configured root: the hook only rewrites
    reads the agent makes there, so an ``allow`` never opens a file the user would be asked about."""
    folders = [Path(cwd)] if isinstance(cwd, str) and cwd else []
    try:
        real = Path(os.path.realpath(path))
        return any(real.is_relative_to(os.path.realpath(folder)) for folder in [*folders, *roots])
    except (OSError, ValueError):  # a NUL byte in a name, a name over the system's limits: no file of ours
        return False


def _shrunk(path: Path, settings: Config) -> dict[str, Any] | None:
    """mmtok shrink's result for ``path`` (its ``to_dict()``), made once per version of the file, model and bars,
    and kept beside the output in the cache folder for the next read."""
    from mmtok.budgets.shrink import make_bars, shrink_models
    from mmtok.budgets.shrink.ocr import share_malloc_arenas
    from mmtok.cache import cache_dir
    from mmtok.errors import MmtokError

    model = settings.model_or(DEFAULT_MODEL)
    bars = make_bars(list(settings.keep) or None)
    stat = path.stat()
    key = json.dumps([os.path.realpath(path), stat.st_size, stat.st_mtime_ns, model, sorted(map(str, bars.values()))])
    name = hashlib.sha256(key.encode()).hexdigest()[:20]
    folder = cache_dir("hook", "claude-code")
    record = folder / f"{name}.json"
    if record.is_file():
        kept = json.loads(record.read_text(encoding="utf-8"))
        if Path(kept["output"]).is_file():
            return kept
    share_malloc_arenas()  # before shrink starts its threads: lower peaks (budgets/shrink/ocr.py)
    (result,) = shrink_models(path, [model], bars, folder, name)
    if isinstance(result, MmtokError):
        raise result
    done = {k: v for k, v in result.to_dict().items() if k != "tried"}
    done["original_copy"] = str(_original_copy(path, folder / f"{name}.original{path.suffix.lower()}"))
    from mmtok.files import write_atomic

    write_atomic(record, json.dumps(done).encode())
    return done


def _original_copy(path: Path, copy: Path) -> Path:
    """The original kept beside the shrunk copy, outside the project: a read of it is left alone by the hook, so an
    agent that needs a detail the copy lost can still see the whole image (and the user is asked, as for any read
    outside the project)."""
    import shutil

    if not copy.is_file():
        with contextlib.suppress(OSError):
            copy.unlink()
        try:
            os.link(path, copy)
        except OSError:
            shutil.copyfile(path, copy)
    return copy


def _rewrite(event: dict[str, Any], tool_input: dict[str, Any], path: Path, result: dict[str, Any]) -> dict[str, Any]:
    measures = ", ".join(f"{k} {v:.3f}" for k, v in result["measures"].items() if v is not None)
    saved = (
        f"{result['tokens_before']:,} -> {result['tokens_after']:,} tokens on {result['model']}"
        f" (${result['cost_before']} -> ${result['cost_after']})"
    )
    reason = f"mmtok: {path.name} read as a shrunk copy: {saved}"
    tokens = f"{result['tokens_before']:,} -> {result['tokens_after']:,} tokens"
    bars = ", ".join(result["bars"].values()) or "none"
    context = (  # what the agent reads on every such read: short, since it costs tokens too (``_worth_it``)
        f"{path} is shown to you as a copy mmtok made for {result['model']} ({result['action']}; {tokens}; "
        f"{measures or 'exact'} against the original, bars {bars}). If you need a detail it lost, read the original "
        f"as it is at {result.get('original_copy') or path} (not shrunk)."
    )
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": reason,
            "updatedInput": {**tool_input, "file_path": result["output"]},
            "additionalContext": context,
        }
    }
