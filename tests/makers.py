"""Makers for real media files written by real encoders (Pillow, libsndfile, FFmpeg through PyAV)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import PIL.Image
import soundfile as sf


def write_video(
    path: Path,
    times_s: list[float],
    size: tuple[int, int] = (64, 48),
    fmt: str = "matroska",
    codec: str = "libx264",
    audio_rate: int | None = None,
    audio_seconds: float | None = None,
    options: dict[str, str] | None = None,
) -> Path:
    """Encode frames whose brightness is 8 * their index, shown at ``times_s`` (ms-resolution timestamps);
    ``options`` go to the muxer (``{"movflags": "faststart"}``: an MP4 with its index first)."""
    width, height = size
    with av.open(str(path), "w", format=fmt, options=options or {}) as container:
        stream = container.add_stream(codec, rate=1000, options={"qp": "0", "preset": "ultrafast"})
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, 1000)
        audio = None
        if audio_rate:
            audio = container.add_stream("aac", rate=audio_rate, layout="mono")
        for i, t in enumerate(times_s):
            rgb = np.full((height, width, 3), min(255, 8 * i), dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = round(t * 1000)
            frame.time_base = Fraction(1, 1000)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        if audio is not None:
            n = round((audio_seconds or times_s[-1]) * audio_rate)
            wave = (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / audio_rate)).astype(np.float32)
            size_ = audio.codec_context.frame_size or 1024
            for start in range(0, n, size_):
                frame = av.AudioFrame.from_ndarray(wave[None, start : start + size_], format="fltp", layout="mono")
                frame.sample_rate = audio_rate
                frame.pts = start
                frame.time_base = Fraction(1, audio_rate)
                container.mux(audio.encode(frame))
            container.mux(audio.encode(None))
    return path


def write_audio_only_mp4(path: Path, seconds: float = 1.0, rate: int = 16000) -> Path:
    with av.open(str(path), "w", format="mp4") as container:
        audio = container.add_stream("aac", rate=rate, layout="mono")
        n = round(seconds * rate)
        wave = (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / rate)).astype(np.float32)
        step = audio.codec_context.frame_size or 1024
        for start in range(0, n, step):
            frame = av.AudioFrame.from_ndarray(wave[None, start : start + step], format="fltp", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            frame.time_base = Fraction(1, rate)
            container.mux(audio.encode(frame))
        container.mux(audio.encode(None))
    return path


def write_wav(path: Path, wave: np.ndarray, rate: int = 16000, subtype: str = "PCM_16") -> Path:
    sf.write(path, wave, rate, subtype=subtype)
    return path


def write_image(path: Path, size: tuple[int, int], fmt: str, orientation: int = 1, mode: str = "RGB") -> Path:
    """A real photo (the shipped sample astronaut.png, scikit-image's astronaut) resized to ``size``, saved by Pillow
    with an optional EXIF orientation. From the package, not scikit-image, so the core tests can make one too."""
    from mmtok.samples import sample_path

    with PIL.Image.open(sample_path("astronaut.png")) as photo:
        im = photo.convert("RGB").resize(size).convert(mode)
    kwargs = {}
    if orientation != 1:
        exif = PIL.Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    im.save(path, format=fmt, **kwargs)
    return path


def tiny_teacher_config():
    """The smallest CLIP teacher the trainers' tests build on (32 px, 8-px patches, one layer a tower)."""
    from mmtok.models.teacher import TeacherConfig

    return TeacherConfig(
        embed_dim=32,
        image_size=32,
        patch_size=8,
        vision_width=32,
        vision_layers=1,
        vision_head_width=16,
        text_context=16,
        text_width=32,
        text_heads=2,
        text_layers=1,
    )
