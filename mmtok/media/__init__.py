"""Media types and ``load()``: content-sniffed, validated, lazily decoded.

``load(path)`` reads only headers and containers: an ``Image`` knows its displayed size, an ``Audio`` its rate,
channels and length, a ``Video`` its size, rate, frame count and audio track, a ``Document`` (PDF) its pages, their
sizes and text layer, without decoding a pixel or a sample or rendering a page. Decoding happens on request
(``Image.to_tensor()``, ``Audio.waveform()``, ``Video.frames()``), and every decoder failure becomes a
:class:`~mmtok.errors.MediaError` that names the file.

The kind is chosen by content (magic bytes, then the container's streams), never by the file's extension.
"""

from typing import Any

from mmtok.media.loading import load
from mmtok.media.scanning import iter_files, scan
from mmtok.media.types import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    KINDS,
    MAX_IMAGE_PIXELS,
    MEDIA_EXTENSIONS,
    VIDEO_EXTENSIONS,
    Audio,
    Image,
    Media,
    Text,
    Video,
    VideoChunk,
    resample,
)

__all__ = [
    "AUDIO_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "KINDS",
    "MAX_IMAGE_PIXELS",
    "MEDIA_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "Audio",
    "Document",
    "Image",
    "Media",
    "Page",
    "Text",
    "Video",
    "VideoChunk",
    "iter_files",
    "load",
    "resample",
    "scan",
]


def __getattr__(name: str) -> Any:
    """``Document`` and ``Page`` from :mod:`mmtok.media.document`, imported on first use (an image never needs it)."""
    if name in ("Document", "Page"):
        from mmtok.media import document

        return getattr(document, name)
    raise AttributeError(f"module 'mmtok.media' has no attribute {name!r}")
