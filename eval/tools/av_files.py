"""Generated audio and video files for benchmarks and tests, written by real encoders through PyAV: a grey ramp
with a moving white square at 24 fps, and a 440 Hz tone."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

VIDEO_OPTIONS = {"libx264": {"preset": "ultrafast"}, "libvpx-vp9": {"deadline": "realtime", "cpu-used": "8"}}


def av_file(
    path: Path,
    fmt: str,
    video: str | None,
    sound: str,
    seconds: int,
    size: tuple[int, int] = (96, 64),
    keyframe_every: int | None = None,
) -> Path:
    """``seconds`` of mono sound (``sound``: an FFmpeg encoder) and, with ``video``, of 24 fps picture, in ``fmt``;
    ``keyframe_every`` frames a keyframe (the encoder's default when None)."""
    options = dict(VIDEO_OPTIONS.get(video or "", {}))
    if keyframe_every and video == "libx264":
        options["x264-params"] = f"keyint={keyframe_every}:min-keyint={keyframe_every}"
    elif keyframe_every:
        options["g"] = str(keyframe_every)
    with av.open(str(path), "w", format=fmt) as container:
        rate = 48000 if sound == "libopus" else 44100
        audio = container.add_stream(sound, rate=rate, layout="mono")  # every stream before the first packet
        if video:
            picture = container.add_stream(video, rate=24, options=options)
            (width, height), side = size, min(size) // 2
            picture.width, picture.height, picture.pix_fmt = width, height, "yuv420p"
            for i in range(seconds * 24):
                rgb = np.full((height, width, 3), (3 * i) % 256, np.uint8)
                x = (4 * i) % (width - side)
                rgb[height // 4 : height // 4 + side, x : x + side] = 255
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts, frame.time_base = i, Fraction(1, 24)
                container.mux(picture.encode(frame))
            container.mux(picture.encode(None))
        encode_sound(container, audio, seconds)
    return path


def encode_sound(container: Any, stream: Any, seconds: float) -> None:
    """``seconds`` of a 440 Hz tone through ``stream``'s encoder, then the encoder flushed."""
    rate, step = stream.codec_context.sample_rate, stream.codec_context.frame_size or 1152
    fmt = stream.codec_context.format.name
    for start in range(0, round(seconds * rate), step):
        wave = 0.2 * np.sin(2 * np.pi * 440 * np.arange(start, start + step) / rate)
        frame = av.AudioFrame.from_ndarray(encoder_samples(wave, fmt)[None], format=fmt, layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
        container.mux(stream.encode(frame))
    container.mux(stream.encode(None))


def encoder_samples(wave: np.ndarray, sample_format: str) -> np.ndarray:
    """``wave`` (floats in [-1, 1]) in an encoder's sample format (s16, s32, flt or dbl, packed or planar)."""
    if sample_format.startswith("s16"):
        return (wave * 32767).astype(np.int16)
    if sample_format.startswith("s32"):
        return (wave * 2**31 * 0.99).astype(np.int32)
    return wave.astype(np.float64 if sample_format.startswith("dbl") else np.float32)
