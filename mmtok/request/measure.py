"""A request's media measured as files are: images from their first and last bytes (inline base64 or a URL, never
decoded whole), recordings, videos and documents through ``mmtok.load`` on a private copy within the size caps.

A part whose bytes cannot be had (a provider file id, a URL not read, a path outside the allowed folder) or do not
hold what the body says they hold comes back as an error naming the part, never a guess.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.errors import MediaError, MmtokError
from mmtok.headers import (
    HEAD_BYTES,
    HeaderError,
    TruncatedError,
    check_image_end,
    image_format,
    read_image_header,
)
from mmtok.media.remote import RemoteFile, UrlPolicy, shown
from mmtok.media.types import MAX_IMAGE_PIXELS, Image, Text
from mmtok.request.inline import Base64Bytes
from mmtok.request.types import MediaRef, Part

FAST_IMAGE_FORMATS = frozenset({"png", "jpeg", "webp", "gif", "bmp", "tiff", "heif", "avif"})
MIME_FORMATS = {"image/jpg": "jpeg", "image/pjpeg": "jpeg", "image/x-png": "png", "image/heic": "heif"}


@dataclass(frozen=True)
class Policy:
    """What measuring a body may do."""

    urls: UrlPolicy = field(default_factory=UrlPolicy)
    paths_under: Path | None = None  # local paths a body names are read only inside this folder; None: never
    max_inline_bytes: int = 64 * 1024 * 1024  # one inline part, decoded (above every provider's inline limit)
    max_pixels: int = MAX_IMAGE_PIXELS


@dataclass(frozen=True)
class Measured:
    """A part and what it holds: a loaded media object, or why it cannot be counted."""

    part: Part
    media: Any = None  # Image | Audio | Video | Text | Document
    error: str = ""
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.part.where


class Copies:
    """A private folder for the copies of parts that are loaded as files (recordings, videos, documents), made on
    first use: a body of text and images never touches the disk."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def path(self, name: str) -> Path:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="mmtok-body-")
        return Path(self._folder.name) / name

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


@contextmanager
def measuring(parts: tuple[Part, ...], policy: Policy | None = None) -> Iterator[list[Measured]]:
    """Each part measured; copies made to load recordings, videos and documents live until the block ends."""
    policy = policy or Policy()
    copies = Copies()
    try:
        yield [measure(part, policy, copies) for part in parts]
    finally:
        copies.close()


def measure(part: Part, policy: Policy, copies: Copies) -> Measured:
    if part.uncountable:
        return Measured(part, error=part.uncountable)
    if part.kind == "text" or part.ref is None:
        return Measured(part, media=Text.from_string(part.text or ""))
    try:
        source = _open(part, policy)
        try:
            media, notes = _media(part, source, policy, copies)
        finally:
            if isinstance(source, RemoteFile):
                source.close()
    except MmtokError as e:
        return Measured(part, error=_reason(e, part))
    return Measured(part, media=media, notes=notes)


def load_url(url: str, policy: Policy, copies: Copies) -> Any:
    """The media at a URL the user named (its own host may be private; its redirects follow the policy),
    measured as a body's parts are; a copy it needs goes in ``copies``."""
    if not policy.urls.read:
        raise MediaError(shown(url), "not read (URLs are off: --offline)")
    part = Part("file", url, ref=MediaRef("url", url=url))
    with RemoteFile(url, policy.urls, asked=True) as source:
        media, _ = _media(part, source, policy, copies)
    return media


def _reason(error: MmtokError, part: Part) -> str:
    reason = getattr(error, "reason", None) or str(error)
    ref = part.ref
    if ref is not None and ref.scheme == "url":
        reason = f"{shown(ref.url or '')}: {reason}"
    return reason


def _open(part: Part, policy: Policy) -> Base64Bytes | RemoteFile | Path:
    ref = part.ref
    assert ref is not None
    if ref.scheme == "data":
        return Base64Bytes(ref.data or "", part.where)
    if ref.scheme == "url":
        if not policy.urls.read:
            raise MediaError(ref.url, "not read (URLs are off: --offline)")
        return RemoteFile(ref.url or "", policy.urls)
    if ref.scheme == "path":
        return _allowed_path(ref.path or "", policy)
    raise MediaError(part.where, f"cannot read a {ref.scheme} reference")


def _allowed_path(path: str, policy: Policy) -> Path:
    """A local path a body names: read only inside ``policy.paths_under`` (a body is someone else's data)."""
    if policy.paths_under is None:
        raise MediaError(path, "a local path in a request body: not read (only data URLs and http(s) URLs are)")
    root = policy.paths_under.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise MediaError(path, f"outside {root}: a body may name files only within its own folder")
    return resolved


def _media(part: Part, source: Base64Bytes | RemoteFile | Path, policy: Policy, copies: Copies) -> tuple[Any, tuple]:
    from mmtok.media import load

    if isinstance(source, Path):
        return load(source, max_pixels=policy.max_pixels), ()
    if isinstance(source, Base64Bytes) and source.size > policy.max_inline_bytes:
        raise MediaError(
            part.where,
            f"{source.size:,} bytes of inline base64: over the {policy.max_inline_bytes:,}-byte cap for one part "
            "(above every provider's inline limit)",
        )
    head = source.head if isinstance(source, RemoteFile) else source.pread(HEAD_BYTES, 0)
    if not head:
        raise MediaError(part.where, "empty: no bytes")
    fmt = image_format(head)
    served = source.mime if isinstance(source, RemoteFile) else None
    if served and served.startswith("image/") and fmt is None:
        raise MediaError(part.where, _mismatch(f"served as {served}", head))
    notes = _declared(part, fmt, head)
    if fmt in FAST_IMAGE_FORMATS and source.size is not None:
        return _image(part, source, head, fmt, policy), notes
    data = source.read_all() if isinstance(source, RemoteFile) else source.read_all(policy.max_inline_bytes)
    copy = copies.path(f"part-{id(part):x}")
    copy.write_bytes(data)
    media = load(copy, max_pixels=policy.max_pixels)
    if media.kind == "text":
        claim = _claim(part, served)
        if claim:
            raise MediaError(part.where, _mismatch(claim, head))
    return media, notes


MEDIA_TYPES = ("image/", "audio/", "video/", "application/pdf")


def _is_media_type(mime: str | None) -> bool:
    return bool(mime) and mime.startswith(MEDIA_TYPES)


def _claim(part: Part, served: str | None) -> str:
    """What says a part is a medium: its server's media type, the body's declared one, or the part's own kind ("" for
    none: a URL the user named may well be a text prompt)."""
    declared = part.ref.mime if part.ref else None
    if _is_media_type(served):
        return f"served as {served}"
    if _is_media_type(declared):
        return f"declared {declared}"
    return f"sent as a {part.kind} part" if part.kind in ("image", "audio", "video", "document") else ""


def _mismatch(claim: str, head: bytes) -> str:
    """A part (or a URL) that says it is a medium whose bytes are text: refused, never priced as a text prompt."""
    return f"{claim}, but its bytes are not that (they start {_shape(head)}): not priced"


def _image(part: Part, source: Base64Bytes | RemoteFile, head: bytes, fmt: str, policy: Policy) -> Image:
    size = source.size
    assert size is not None
    if isinstance(source, RemoteFile):
        source.tail()  # one ranged read of the end, kept for the end check
    try:
        header = read_image_header(source, head, fmt)
    except HeaderError as e:
        raise MediaError(part.where, f"not a readable {fmt} image: {e}") from None
    width, height = header.size
    if width * height > policy.max_pixels:
        raise MediaError(
            part.where, f"{width}x{height} = {width * height:,} pixels, over the limit of {policy.max_pixels:,}"
        )
    try:
        check_image_end(source, head, fmt, size, header.body_offset)
    except (TruncatedError, HeaderError) as e:
        raise MediaError(part.where, f"cut short: {e}") from None
    if size < header.min_bytes:
        raise MediaError(
            part.where,
            f"truncated or forged: its header declares {width}x{height} pixels, which no {fmt} file holds in under "
            f"{header.min_bytes:,} bytes; it has {size:,}",
        )
    return Image(None, fmt, width, height, header.orientation, size)


def _declared(part: Part, fmt: str | None, head: bytes) -> tuple[str, ...]:
    """What the body says against what the bytes are: an image part whose bytes are no image is an error; a
    declared image type that differs from the bytes' is a note (Anthropic refuses such a block)."""
    declared = part.ref.mime if part.ref else None
    if part.kind == "image" and fmt is None:
        what = f"declared {declared}, " if declared else ""
        raise MediaError(part.where, f"{what}but its bytes are not an image (they start {_shape(head)})")
    if fmt is None or not declared or not declared.startswith("image/"):
        return ()
    named = MIME_FORMATS.get(declared, declared.removeprefix("image/"))
    if named != fmt:
        return (f"declared {declared}, but the bytes are {fmt.upper()}: some providers refuse a mismatch",)
    return ()


def _shape(head: bytes) -> str:
    """How a file starts, without quoting its bytes: an HTML page, text, JSON, or binary."""
    sample = head[:64]
    if any(mark in head[:1024].lower() for mark in (b"<!doctype html", b"<html", b"<head", b"<body")):
        return "like an HTML page"
    if sample.lstrip()[:1] in (b"{", b"["):
        return "like JSON"
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError:
        return "with binary data of no known media format"
    return "like text"
