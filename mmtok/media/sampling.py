"""Sampling a decoded video by presentation time: the one rule behind ``Video.frames`` and the video embedder's
small-frame reader.

Each output time ``k / rate`` takes the frame on screen at that instant. A frame is on screen from its time
(relative to the stream's first frame) until the next frame's; the last one stays one frame period. So a
variable-frame-rate stream gives evenly spaced samples, a frame covering several output times repeats, and a frame
no output time falls on is never converted.
"""

from __future__ import annotations

from typing import Any

EPSILON_S = 1e-9  # output times within this of a frame's end still take the next frame
# A stream whose decoded media ends before this share of the duration its header declares, and more than
# CUT_SHORT_MIN_S before it, is a file cut short (a faststart MP4 keeps its index of the whole; the data stops).
CUT_SHORT_FRACTION = 0.9
CUT_SHORT_MIN_S = 0.5


def decode_error(video: Any, sampler: PresentationTimes, error: BaseException) -> Exception:
    """The video's ``MediaError`` for an FFmpeg error met while decoding, after how many samples."""
    from mmtok.errors import MediaError, ffmpeg_reason

    return MediaError(
        video.path, f"video stream is corrupt after {sampler.emitted} sampled frames: {ffmpeg_reason(error)}"
    )


def check_decoded(video: Any, sampler: PresentationTimes) -> None:
    """After the last frame: a stream that gave none, or whose frames end well before the duration the stream
    declares (a file cut short), is the video's ``MediaError``."""
    if sampler.emitted == 0:
        from mmtok.errors import MediaError

        raise MediaError(video.path, "video stream contains no decodable frames")
    if video.duration_from_stream:
        check_not_cut_short(video.path, "video", sampler.shown_until(), video.duration_s)


def must_reach(declared_s: float) -> float:
    """How far a stream's data must reach not to count as cut short (``check_not_cut_short``); 0 when the
    declared duration is too short for the rule to apply."""
    return max(0.0, min(CUT_SHORT_FRACTION * declared_s, declared_s - CUT_SHORT_MIN_S))


def check_not_cut_short(path: Any, what: str, ended_s: float, declared_s: float) -> None:
    """Raise the input's ``MediaError`` when its ``what`` stream ended well before its declared duration."""
    if ended_s < must_reach(declared_s):
        from mmtok.errors import MediaError

        raise MediaError(
            path,
            f"{what} stream is cut short: it ends at {ended_s:.2f} s of the {declared_s:.2f} s its header declares",
        )


class PresentationTimes:
    """Feed it decoded frames in order; it says which output times each frame covers."""

    def __init__(self, rate: float, fps: float | None) -> None:
        self.step = 1.0 / rate
        self.native_step = 1.0 / fps if fps else self.step  # the frame period (a frame without a time gets n x it)
        self.start: float | None = None  # the first frame's time: the stream's zero
        self.emitted = 0  # output times given a frame so far
        self._decoded = 0
        self._held: tuple[float, Any] | None = None  # (time, frame) of the frame on screen now

    def push(self, frame: Any) -> tuple[Any, int]:
        """The next decoded frame -> (the frame it takes over from, how many output times that one covered)."""
        t = frame.time if frame.time is not None else self._decoded * self.native_step
        self._decoded += 1
        if self.start is None:
            self.start = t
        covered = self._cover_until(t - self.start)
        self._held = (t - self.start, frame)
        return covered

    def finish(self) -> tuple[Any, int]:
        """After the last frame: (that frame, the output times of its one frame period on screen)."""
        if self._held is None:
            return None, 0
        return self._cover_until(self._held[0] + self.native_step)

    def shown_until(self) -> float:
        """Where the frames decoded so far end: the last one's time plus one frame period (0 before any)."""
        return 0.0 if self._held is None else self._held[0] + self.native_step

    def times(self, count: int) -> list[float]:
        """The last ``count`` output times given a frame."""
        return [i * self.step for i in range(self.emitted - count, self.emitted)]

    def _cover_until(self, limit: float) -> tuple[Any, int]:
        if self._held is None:
            return None, 0
        count = 0
        while (self.emitted + count) * self.step < limit - EPSILON_S:
            count += 1
        self.emitted += count
        return self._held[1], count
