"""Regenerate the sample media shipped in ``mmtok/samples/`` (run: ``python -m mmtok.eval.tools.make_samples``).

Everything is made by real encoders from real data: scikit-image's bundled photos saved by Pillow (PNG, JPEG,
WebP, an EXIF-rotated JPEG), speech synthesised by espeak-ng (Debian package ``espeak-ng``) with its transcript
recorded, re-encoded to FLAC/Ogg Vorbis (libsndfile) and MP3/AAC (FFmpeg through PyAV), and two short videos
encoded with PyAV (H.264 + AAC in MP4, VP9 + Opus in WebM) whose motion and sound events happen at known times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import PIL.Image
import soundfile as sf
import torch

SPEECH = {
    "speech.wav": "The quick brown fox jumps over the lazy dog.",
    "speech_numbers.wav": "Please send the report by nine thirty on Monday morning.",
}
# Video: static photo background; at each event a square sweeps across for 0.25 s with a simultaneous 880 Hz beep.
VIDEO_EVENTS_S = (0.5, 1.5, 2.25)
VIDEO_SECONDS = 3.0
VIDEO_FPS = 24
VIDEO_SIZE = (320, 240)
EVENT_SECONDS = 0.25
SAMPLE_RATE_HZ = 16_000


def make_images(out: Path) -> dict[str, dict]:
    from skimage import data

    astronaut = PIL.Image.fromarray(data.astronaut()).resize((384, 384), PIL.Image.Resampling.LANCZOS)
    astronaut.save(out / "astronaut.png", optimize=True)
    PIL.Image.fromarray(data.chelsea()).save(out / "chelsea.jpg", quality=88)
    PIL.Image.fromarray(data.coffee()).save(out / "coffee.webp", quality=80)
    # Stored rotated 90 degrees counter-clockwise (427 x 640 pixels) with EXIF orientation 6 ("rotate 90 CW to
    # display"), as a phone camera writes it: the displayed image is the upright 640 x 427 landscape photo.
    rocket = PIL.Image.fromarray(data.rocket())
    stored = rocket.transpose(PIL.Image.Transpose.ROTATE_90)
    exif = PIL.Image.Exif()
    exif[0x0112] = 6
    stored.save(out / "rocket_rotated.jpg", quality=85, exif=exif.tobytes())
    return {
        "astronaut.png": {"source": "skimage.data.astronaut (resized to 384x384)"},
        "chelsea.jpg": {"source": "skimage.data.chelsea"},
        "coffee.webp": {"source": "skimage.data.coffee"},
        "rocket_rotated.jpg": {"source": "skimage.data.rocket, stored rotated with EXIF orientation 6"},
    }


def espeak(text: str, path: Path, sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Synthesise ``text`` with espeak-ng (en-us) and write a 16-bit mono WAV at ``sample_rate_hz``."""
    import torchaudio.functional as AF

    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is not installed (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
        wave, rate = sf.read(raw, dtype="float32")
    wave = AF.resample(torch.from_numpy(wave), rate, sample_rate_hz).numpy()
    wave = 0.9 * wave / max(1e-6, float(np.abs(wave).max()))
    sf.write(path, wave, sample_rate_hz, subtype="PCM_16")
    return wave


def encode_audio(path: Path, wave: np.ndarray, rate: int, codec: str, fmt: str) -> None:
    """Encode a mono float waveform with an FFmpeg encoder through PyAV."""
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate, layout="mono")
        _mux_audio(container, stream, wave, rate)


def _mux_audio(container: av.container.OutputContainer, stream, wave: np.ndarray, rate: int) -> None:
    frame_size = stream.codec_context.frame_size or 1024
    fmt = stream.codec_context.format.name
    for start in range(0, len(wave), frame_size):
        piece = np.clip(wave[start : start + frame_size], -1, 1).astype(np.float32)
        if fmt.startswith("s16"):
            piece = (piece * 32767).astype(np.int16)
        elif fmt.startswith("s32"):
            piece = (piece.astype(np.float64) * 2147483647).astype(np.int32)
        frame = av.AudioFrame.from_ndarray(piece[None, :], format=fmt, layout="mono")
        frame.sample_rate = rate
        frame.pts = start
        frame.time_base = Fraction(1, rate)
        container.mux(stream.encode(frame))
    container.mux(stream.encode(None))


def make_speech(out: Path) -> dict[str, dict]:
    manifest = {}
    for name, text in SPEECH.items():
        espeak(text, out / name)
        manifest[name] = {"transcript": text, "source": "espeak-ng -v en-us -s 150, resampled to 16 kHz"}
    base = sf.read(out / "speech.wav", dtype="float32")[0]
    sf.write(out / "speech.flac", base, SAMPLE_RATE_HZ, format="FLAC")
    sf.write(out / "speech.ogg", base, SAMPLE_RATE_HZ, format="OGG", subtype="VORBIS")
    encode_audio(out / "speech.mp3", base, SAMPLE_RATE_HZ, "libmp3lame", "mp3")
    encode_audio(out / "speech.m4a", base, SAMPLE_RATE_HZ, "aac", "ipod")
    for name in ("speech.flac", "speech.ogg", "speech.mp3", "speech.m4a"):
        manifest[name] = {"transcript": SPEECH["speech.wav"], "source": f"speech.wav re-encoded ({name[7:]})"}
    return manifest


def video_frames_and_audio(audio_rate: int) -> tuple[list[np.ndarray], np.ndarray]:
    from skimage import data

    width, height = VIDEO_SIZE
    background = np.asarray(PIL.Image.fromarray(data.chelsea()).resize(VIDEO_SIZE, PIL.Image.Resampling.BILINEAR))
    n_frames = round(VIDEO_SECONDS * VIDEO_FPS)
    frames = []
    for i in range(n_frames):
        t = i / VIDEO_FPS
        frame = background.copy()
        for event in VIDEO_EVENTS_S:
            progress = (t - event) / EVENT_SECONDS
            if 0 <= progress < 1:
                x = int(progress * (width - 60))
                frame[height // 2 - 30 : height // 2 + 30, x : x + 60] = (255, 40, 40)
        frames.append(frame)
    t = np.arange(round(VIDEO_SECONDS * audio_rate)) / audio_rate
    rng = np.random.default_rng(0)
    audio = 0.003 * rng.standard_normal(len(t))
    for event in VIDEO_EVENTS_S:
        inside = (t >= event) & (t < event + EVENT_SECONDS)
        audio[inside] += 0.5 * np.sin(2 * np.pi * 880 * t[inside])
    return frames, audio.astype(np.float32)


def encode_video(path: Path, fmt: str, vcodec: str, acodec: str, audio_rate: int, options: dict) -> None:
    frames, audio = video_frames_and_audio(audio_rate)
    with av.open(str(path), "w", format=fmt) as container:
        video = container.add_stream(vcodec, rate=VIDEO_FPS, options=options)
        video.width, video.height = VIDEO_SIZE
        video.pix_fmt = "yuv420p"
        sound = container.add_stream(acodec, rate=audio_rate, layout="mono")
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, VIDEO_FPS)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        _mux_audio(container, sound, audio, audio_rate)


def make_videos(out: Path) -> dict[str, dict]:
    encode_video(out / "clip.mp4", "mp4", "libx264", "aac", 44_100, {"crf": "30", "preset": "medium"})
    encode_video(out / "clip.webm", "webm", "libvpx-vp9", "libopus", 48_000, {"crf": "40", "b:v": "0"})
    events = {"events_s": list(VIDEO_EVENTS_S), "event_seconds": EVENT_SECONDS}
    return {
        "clip.mp4": {**events, "source": "PyAV libx264 + aac; chelsea background, square sweeps + 880 Hz beeps"},
        "clip.webm": {**events, "source": "PyAV libvpx-vp9 + libopus; same content as clip.mp4"},
    }


def make_text(out: Path) -> dict[str, dict]:
    (out / "note.txt").write_text(
        "mmtok sample note.\n"
        "A photo of a cat sits beside a cup of coffee; an astronaut poses for a portrait.\n"
        "How many tokens does this text cost, and how much do the pictures cost?\n",
        encoding="utf-8",
    )
    return {"note.txt": {"source": "written by make_samples.py"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "mmtok" / "samples" / "media")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    manifest = {**make_images(out), **make_speech(out), **make_videos(out), **make_text(out)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"wrote {len(manifest)} samples to {out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
