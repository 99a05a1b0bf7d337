"""What ``mmtok price`` is given, sorted into requests: media files (one request each, or all one), API request
bodies (by their structure, never their name), http(s) URLs, and folders (whose text files are skipped, listed,
unless --text-files). ``-`` (stdin) reaches here as a file the app wrote (``mmtok.cli.common.stdin_inputs``)."""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.errors import MediaError, MmtokError, RequestError


@dataclass
class Files:
    """One request made of media (and text) items."""

    label: str
    items: list[Any]


@dataclass
class Body:
    """One API request body, and the folder its local paths are read from (the body file's own)."""

    label: str
    request: Any  # mmtok.request.Request
    folder: Path | None = None


@dataclass
class Batch:
    """A batch file (OpenAI, Anthropic or Gemini batch input): its requests are priced together
    (``cli/price_batch.py``)."""

    label: str
    path: Path


@dataclass
class Inputs:
    """Everything the command line named, sorted."""

    jobs: list[Files | Body | tuple[str, MmtokError]] = field(default_factory=list)
    skipped_text: list[str] = field(default_factory=list)  # text files found in folders
    not_bodies: list[str] = field(default_factory=list)  # JSON files named directly that are no request body


class Reader:
    """Reads inputs with the pixel limit and the URL policy; copies (stdin, URLs' media) go in ``copies``, which
    the caller closes (:meth:`close`)."""

    def __init__(self, max_pixels: int, policy: Callable[[], Any], text_files: bool, pages: str | None = None) -> None:
        self.max_pixels = max_pixels
        self._policy = policy  # made on first use: files alone never import the URL and body machinery
        self.text_files = text_files
        self.pages = pages  # "1-3,7": the pages of each PDF that would be sent

    @functools.cached_property
    def policy(self) -> Any:
        """The URL policy and caps (``mmtok.request.Policy``)."""
        return self._policy()

    @functools.cached_property
    def copies(self) -> Any:
        """The private folder of copies (``mmtok.request.measure.Copies``), made when a URL or body needs one."""
        from mmtok.request.measure import Copies

        return Copies()

    def close(self) -> None:
        """Remove the copies, if any were made."""
        if "copies" in self.__dict__:
            self.copies.close()

    def entries(self, raw: list[str]) -> Iterator[tuple[str, Path | str | MmtokError, bool]]:
        """(label, what to read, found in a folder) for each input; folders walked first, so a bar has a total."""
        from mmtok.media import iter_files

        for given in raw:
            if _is_url(given):
                from mmtok.media.addresses import shown

                yield shown(given), given, False  # named without credentials or a signed query string
                continue
            walked = Path(given).is_dir()
            for item in iter_files([given]):
                label = str(item.source) if isinstance(item, MediaError) else str(item)
                yield label, item, walked

    def read(self, label: str, item: Path | str | MmtokError, walked: bool, inputs: Inputs) -> Any:
        """The request an entry makes (``Files`` / ``Body``), None when it is skipped; raises its error."""
        if isinstance(item, MmtokError):
            raise item
        if isinstance(item, str) and _is_url(item):
            return self._url(label, item, inputs)
        path = Path(item)
        if path.name.endswith(".safetensors"):
            return Files(label, [path])  # a token file: its sequences are the request's parts
        if not walked and _is_batch(path):
            return Batch(label, path)
        import mmtok

        media = mmtok.load(path, max_pixels=self.max_pixels)
        if media.kind == "document" and self.pages:
            media = self._selected(media)
        if media.kind != "text":
            return Files(label, [media])
        return self._text(label, path, media, walked, inputs)

    def _url(self, label: str, url: str, inputs: Inputs) -> Any:
        """A URL's media, or the request body it serves (read whole, as a body file is); named by the URL."""
        from mmtok.budgets.pricing.counts import Attachment
        from mmtok.request.measure import load_url

        media = load_url(url, self.policy, self.copies)
        if media.kind == "text" and media.path is not None:
            found = self._text(label, Path(media.path), media, False, inputs)
            if isinstance(found, Body):
                return Body(label, found.request)  # its local paths are not read: a URL's body names none of ours
        return Files(label, [Attachment(label, media)])

    def _selected(self, document: Any) -> Any:
        from mmtok.media.document import parse_pages

        try:
            return document.select(parse_pages(self.pages or "", document.file_pages))
        except ValueError as e:
            raise MediaError(document.path, str(e)) from None

    def _text(self, label: str, path: Path, media: Any, walked: bool, inputs: Inputs) -> Any:
        from mmtok.request import MAX_BODY_BYTES, looks_like_body, parse_body

        data = _read_regular(path, MAX_BODY_BYTES, whole_if=looks_like_body)
        if looks_like_body(data):
            try:
                return Body(label, parse_body(data, source=label), path.parent)
            except RequestError as e:
                if not walked:  # named on the command line: malformed JSON is its error; other JSON a prompt, said
                    if "not a request body" not in str(e):
                        raise
                    inputs.not_bodies.append(label)
        # in a folder, text (JSON Lines, JSON with comments, a package.json, code, notes) is skipped unless asked
        if walked and not self.text_files:
            inputs.skipped_text.append(label)
            return None
        return Files(label, [media])


def _read_regular(path: Path, limit: int, whole_if: Any) -> bytes:
    """A file's first 4 KiB, and the rest (up to ``limit``) where ``whole_if(first)`` holds, read through a
    descriptor checked to be a regular file (a path swapped for a FIFO since ``load`` checked it does not block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise MediaError(path, f"cannot open: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MediaError(path, "is no longer a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(4096)
            if whole_if(data):
                data += f.read(limit + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) > limit:
        raise MediaError(path, f"over {limit:,} bytes: a request body is read up to that")
    return data


def _is_batch(path: Path) -> bool:
    """A batch file named on the command line (JSON that starts as a batch's first request, or a batch document)."""
    from mmtok.request.sniff import looks_like_body

    try:
        if not path.is_file():  # a FIFO or a device is never opened here (it could block): load says what it is
            return False
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False  # load says why
    if not looks_like_body(head):
        return False
    from mmtok.request.batch import looks_like_batch

    return looks_like_batch(path)


def _is_url(text: str) -> bool:
    return text[:8].lower().startswith(("http://", "https://"))
