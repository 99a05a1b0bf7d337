"""Reading mmtok's data files (configs, specs, suites, price sheets, manifests) and writing them atomically.

Every path is opened by :func:`open_regular`: checked with ``stat`` before it is opened (opening a FIFO can block,
opening a device can act on it), opened non-blocking and checked again on the descriptor, so a path swapped for a
FIFO in between is refused too; what is read afterwards is read through that descriptor, never by name again.
Every reader refuses anything larger than its limit before reading a byte, and turns every decoding failure into
one line naming the file. TOML is refused when it nests deeper than :data:`MAX_TOML_DEPTH`, measured in one linear
pass before ``tomllib`` (whose dotted keys cost time and memory quadratic in their depth) sees it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, MmtokError

MAX_DATA_FILE_BYTES = 64 * 1024 * 1024  # configs, specs, suites and sheets are small; LiteLLM's map is ~1.5 MB
MAX_TOML_DEPTH = 32  # tables, dotted-key parts, arrays and inline tables inside one another; shipped files use <= 6
FOLDER = "is a folder, not a file"
# Characters that break a line or turn text around when printed (C0 and C1 controls, Unicode line and paragraph
# separators, bidirectional marks, embeddings, overrides and isolates): refused in names a data file sets.
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NOT_REGULAR = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class UnreadableFile(Exception):
    """Why a path cannot be read as a regular file: ``reason`` names the problem, not the path."""

    def __init__(self, reason: str, folder: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.folder = reason, folder


def not_regular(mode: int) -> str:
    """Why a file of ``mode`` (not a folder) is not read: ``is a FIFO (named pipe), not a regular file; ...``."""
    what = _NOT_REGULAR.get(stat.S_IFMT(mode), "a special file")
    return f"is {what}, not a regular file; only regular files are read"


def _check_mode(mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise UnreadableFile(FOLDER, folder=True)
    if not stat.S_ISREG(mode):
        raise UnreadableFile(not_regular(mode))


def _reason(error: OSError, verb: str) -> UnreadableFile:
    if isinstance(error, FileNotFoundError):
        return UnreadableFile("no such file")
    if isinstance(error, IsADirectoryError):
        return UnreadableFile(FOLDER, folder=True)
    if isinstance(error, PermissionError):
        return UnreadableFile("permission denied: the file is not readable")
    return UnreadableFile(f"cannot {verb}: {error.strerror or error}")


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """A read-only descriptor on ``path`` and its ``fstat``; anything but a regular file raises
    :class:`UnreadableFile` without being waited on (the one checked open of every path a user or a data file
    names)."""
    try:
        _check_mode(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise _reason(e, "open") from None
    try:
        info = os.fstat(fd)
        _check_mode(info.st_mode)  # swapped for a FIFO or a device since the stat: still refused, never read
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_checked(path: str | os.PathLike[str]) -> io.FileIO:
    """:func:`open_regular` as a binary file object named ``path`` (libraries that take a file, PyAV, libsndfile,
    Pillow, read through the checked descriptor; FFmpeg still probes by the name's extension)."""
    fd, _ = open_regular(path)
    f = io.FileIO(fd, "rb", closefd=True)
    f.name = os.fspath(path)  # type: ignore[misc]
    return f


def read_text(
    path: str | os.PathLike[str],
    what: str,
    error: type[MmtokError] = ConfigError,
    max_bytes: int = MAX_DATA_FILE_BYTES,
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; anything else raises ``error`` naming ``what``."""
    return decode_utf8(read_bytes(path, what, error, max_bytes), path, what, error)


def read_bytes(
    path: str | os.PathLike[str],
    what: str,
    error: type[MmtokError] = ConfigError,
    max_bytes: int = MAX_DATA_FILE_BYTES,
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (:func:`open_regular`); else ``error`` naming ``what``."""
    path = Path(path)
    try:
        fd, info = open_regular(path)
    except UnreadableFile as e:
        reason = f"{what} is not a regular file" if "not a regular file" in e.reason else f"cannot read {what}: {e}"
        raise error(f"{path}: {reason}") from None
    try:
        if info.st_size > max_bytes:
            raise error(f"{path}: {what} is {info.st_size:,} bytes, over the {max_bytes:,}-byte limit")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise error(f"{path}: {what} grew past the {max_bytes:,}-byte limit while being read")
    return data


def decode_utf8(data: bytes, path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: {what} is not UTF-8 text") from None


def text_lines(text: str) -> list[str]:
    """``text`` split at line feeds (and CR LF) only: JSON lines may hold U+2028, U+2029 or U+0085 raw, which
    ``str.splitlines`` would take for line ends."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def read_toml(path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError) -> dict[str, Any]:
    """``path`` parsed as TOML; unreadable, non-UTF-8, too deeply nested or malformed files raise ``error`` naming
    ``what`` it is."""
    text = read_text(path, what, error)
    depth = toml_depth(text)
    if depth > MAX_TOML_DEPTH:
        raise error(f"{path}: invalid TOML: nested {depth:,} levels deep, over the limit of {MAX_TOML_DEPTH}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise error(f"{path}: invalid TOML: nested too deeply") from None
    except ValueError as e:  # an integer of more digits than Python converts (4,300)
        raise error(f"{path}: invalid TOML: {_number_reason(e)}") from None


# The characters that change what a TOML scanner is reading; everything else is skipped at C speed.
_TOML_MARKS = re.compile(r"""[\n"'#\[\]{}=,.]""")
_HEADER_MARKS = re.compile(r"""[\n"'.\]]""")
_SPACES = re.compile(r"[ \t]*")
_LITERAL_STRING_END = re.compile(r"['\n]")
_BASIC_STRING_END = re.compile(r'(?:[^"\\\n]|\\.)*(?:"|\n|$)')
_MULTILINE_BASIC_END = re.compile(r'(?:[^"\\]|\\[\s\S]|"(?!""))*"""')


def toml_depth(text: str) -> int:
    """How deep a TOML document nests: table-header and dotted-key parts, plus arrays and inline tables inside one
    another (``[models."gpt-4o"]`` then ``image = { tile_tokens = 170 }`` is 4). One pass, linear in the text:
    strings and comments are skipped whole; malformed text is measured as far as it goes (tomllib names its
    error)."""
    deepest = table = 0
    frames: list[tuple[str, int]] = []  # open arrays and inline tables: (kind, depth of the keys or values inside)
    expect_key, parts, first_on_line, line_begin = True, 1, True, 0
    pos = 0
    while (match := _TOML_MARKS.search(text, pos)) is not None:
        mark, at = match.group(), match.start()
        pos = at + 1
        first, first_on_line = first_on_line, False
        if mark == "\n":
            if not frames:  # a new line at the top level starts a key (or a table header)
                expect_key, parts, first_on_line, line_begin = True, 1, True, pos
        elif mark == "#":
            pos = _line_end(text, pos)
            first_on_line = first
        elif mark in "\"'":
            pos = _string_end(text, at)
        elif expect_key:
            if mark == "[" and first and not frames and not text[line_begin:at].strip():
                pos, table = _header(text, pos)
                deepest = max(deepest, table)
            elif mark == ".":
                parts += 1
            elif mark == "=":
                depth = (frames[-1][1] if frames else table) + parts
                deepest = max(deepest, depth)
                expect_key = False
                pos = _SPACES.match(text, pos).end()
                if text.startswith("[", pos):
                    frames.append(("array", depth + 1))
                    deepest, pos = max(deepest, depth + 1), pos + 1
                elif text.startswith("{", pos):
                    frames.append(("inline", depth))
                    expect_key, parts, pos = True, 1, pos + 1
            elif mark == "}" and frames and frames[-1][0] == "inline":  # {} or a trailing comma
                frames.pop()
                expect_key = False
        elif mark == "[":
            frames.append(("array", (frames[-1][1] if frames else table) + 1))
            deepest = max(deepest, frames[-1][1])
        elif mark == "{":
            frames.append(("inline", frames[-1][1] if frames else table))
            expect_key, parts = True, 1
        elif mark in "]}" and frames:
            frames.pop()
        elif mark == "," and frames and frames[-1][0] == "inline":
            expect_key, parts = True, 1
    return deepest


def _header(text: str, pos: int) -> tuple[int, int]:
    """A table header from after its ``[``: where it ends and its depth (an array of tables is one more)."""
    double = text.startswith("[", pos)
    parts, pos = 1, pos + double
    while (match := _HEADER_MARKS.search(text, pos)) is not None:
        if match.group() in "\n]":
            return match.start(), parts + double  # the newline (or "]") is read next
        if match.group() == ".":
            parts, pos = parts + 1, match.end()
        else:
            pos = _string_end(text, match.start())
    return len(text), parts + double


def _line_end(text: str, pos: int) -> int:
    found = text.find("\n", pos)
    return len(text) if found < 0 else found


def _string_end(text: str, at: int) -> int:
    """Where the string that starts at ``at`` ends (basic, literal, or multi-line of either)."""
    quote = text[at]
    if text.startswith(quote * 3, at):
        if quote == "'":
            found = text.find("'''", at + 3)
            return len(text) if found < 0 else found + 3
        match = _MULTILINE_BASIC_END.match(text, at + 3)
        return len(text) if match is None else match.end()
    if quote == "'":
        found = _LITERAL_STRING_END.search(text, at + 1)
        return len(text) if found is None else found.end()
    return _BASIC_STRING_END.match(text, at + 1).end()


def _number_reason(error: Exception) -> str:
    """A parser's error in words; Python's refusal of an integer over 4,300 digits without its advice to developers."""
    if "integer string conversion" in str(error):
        return f"it holds an integer of more than {sys.get_int_max_str_digits():,} digits"
    return str(error)


def parse_json(text: str | bytes, where: str, error: type[MmtokError] = ConfigError) -> Any:
    """JSON text parsed, with malformed or absurdly nested input raised as ``error`` naming ``where``."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:  # ValueError: JSONDecodeError, or an integer over 4,300 digits
        raise error(f"{where}: not valid JSON: {_number_reason(e)}") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deeply") from None


def read_json(
    path: str | os.PathLike[str], what: str, error: type[MmtokError] = ConfigError, max_bytes: int = MAX_DATA_FILE_BYTES
) -> Any:
    return parse_json(read_text(path, what, error, max_bytes), str(path), error)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A new temporary file beside ``path`` for a writer that takes a path (safetensors, matplotlib); when the
    block ends it is synced and renamed over ``path`` (a symlink there is replaced, never written through), and
    removed if the block fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        os.fchmod(fd, 0o644)
        yield Path(partial)
        os.fsync(fd)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename: readers see the old
    file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide a shared sheet or report from its readers
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def make_folder(path: Path, what: str) -> None:
    """``path`` as an output folder (created if missing): a file there, or a folder that cannot be made, is one
    line naming ``--out`` and ``what`` the folder is for."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {path}: not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {path}: cannot create the {what} folder: {e.strerror or e}") from None
