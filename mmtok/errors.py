"""One error hierarchy for everything mmtok refuses to do.

Every message names the input (file, field, model) and says what is wrong, so that a batch can print one line
per bad item and go on with the rest.
"""

from __future__ import annotations

import os


class MmtokError(Exception):
    """Base class: catch this to handle any input mmtok rejected."""


class MediaError(MmtokError, ValueError):
    """A file or in-memory media item that cannot be read as the media it claims to be."""

    def __init__(self, source: str | os.PathLike[str] | None, reason: str) -> None:
        self.source = None if source is None else os.fspath(source)
        self.reason = reason
        super().__init__(f"{self.source}: {reason}" if self.source is not None else reason)


class ConfigError(MmtokError, ValueError):
    """A bad configuration, spec, suite file, or an unknown model / tokenizer name."""


class CheckpointError(MmtokError, ValueError):
    """Weights that cannot be loaded: wrong format (pickle), missing tensors, or a config they do not match."""


class PriceError(MmtokError, ValueError):
    """A price sheet or pricing request that cannot give an exact answer (unknown model, missing rate, ...)."""


class RequestError(MmtokError, ValueError):
    """An API request body that cannot be read as one (malformed JSON, an unknown shape, a part that lies)."""


class TokenError(MmtokError, ValueError):
    """A TokenSequence whose parts are inconsistent, or a file that does not hold one."""


class TruncationError(MmtokError, ValueError):
    """A truncation request that cannot be honoured (bad ratio, mismatched embeddings, NaN scores, ...)."""


class EvalError(MmtokError, RuntimeError):
    """A metric, ASR backend or judge that cannot produce a score for an item."""


def ffmpeg_reason(error: BaseException) -> str:
    """An FFmpeg error as a reason a person reads: its message (``Invalid data found when processing input``), not
    PyAV's ``[Errno 1094995529] ...: 'avcodec_send_packet()'``."""
    return getattr(error, "strerror", None) or str(error)
