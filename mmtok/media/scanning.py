"""Folders: the files under them (sorted, hidden entries skipped, links to folders not followed), and ``scan()``.

Every problem comes back as a :class:`~mmtok.errors.MediaError` in the stream instead of being raised, so a batch
reports it and goes on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mmtok.errors import MediaError

if TYPE_CHECKING:
    pass

from mmtok.files import not_regular
from mmtok.media.loading import load
from mmtok.media.types import MAX_IMAGE_PIXELS, Media


# ------------------------------------------------------------------------------------------------------- batches
def iter_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path | MediaError]:
    """Files named by ``paths``, folders walked recursively in sorted order (hidden entries skipped).

    Every problem is yielded as a :class:`MediaError` instead of raised, so a batch can report it and go on: a
    missing path, a folder with no files, a folder that cannot be listed ("cannot read folder: Permission denied",
    for the folder itself or any folder under it), and a FIFO, socket or device, which is refused without being
    opened. Symbolic links to folders are not followed (a link loop would never end). One path (a string or a
    ``Path``) is taken as one path, not as the characters of its name.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for raw in paths:
        path = Path(raw)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            if os.path.islink(path):
                yield path  # a dangling link: load() names it
            else:
                yield MediaError(path, "no such file or folder")
            continue
        except OSError as e:
            yield MediaError(path, f"cannot read: {e.strerror}")
            continue
        if stat.S_ISDIR(mode):
            found = False
            for item in _walk(path):
                found = True
                yield item
            if not found:
                yield MediaError(path, "folder contains no media files")
        elif stat.S_ISREG(mode):
            yield path
        else:
            yield MediaError(path, not_regular(mode))


def _walk(folder: Path) -> Iterator[Path | MediaError]:
    """Files under ``folder``, depth first: each folder's own files (sorted), then its subfolders'. A folder that
    cannot be listed is yielded as an error naming it, and the walk goes on."""
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as listing:
                entries = sorted((e for e in listing if not e.name.startswith(".")), key=lambda e: e.name)
        except OSError as e:
            yield MediaError(current, f"cannot read folder: {e.strerror}")
            continue
        subfolders: list[Path] = []
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append(path)
                elif entry.is_symlink():
                    if not entry.is_dir():  # links to folders are not followed; the rest are load()'s to judge
                        yield path
                elif entry.is_file(follow_symlinks=False):
                    yield path
                else:
                    yield MediaError(path, not_regular(entry.stat(follow_symlinks=False).st_mode))
            except OSError as e:
                yield MediaError(path, f"cannot read: {e.strerror}")
        pending.extend(reversed(subfolders))


def scan(
    paths: Iterable[str | os.PathLike[str]], *, kind: str | None = None, max_pixels: int = MAX_IMAGE_PIXELS
) -> Iterator[Media | MediaError]:
    """``load()`` every file under ``paths``; bad items are yielded as :class:`MediaError`, never raised."""
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            yield item
            continue
        try:
            yield load(item, kind=kind, max_pixels=max_pixels)
        except MediaError as e:
            yield e
