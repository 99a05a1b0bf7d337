"""Benchmark: audio/video embedding speed (real-time factor) against its anchors, and memory on long inputs.

Run: ``python -m mmtok.eval.bench_av [--tokenizer av-tiny] [--repeats 5] [--long]``.

Real-time factor = seconds of media embedded per second of compute. In one run, interleaved, medians:
- audio (a 60 s 16 kHz speech WAV made from the shipped training sentences): the embedding (streamed decode +
  80-bin log-mel at the token rate + projection: the issue's "decode + mel + projection"), and the same plus the
  8-level residual codebook (discrete ids), vs torchaudio's MelSpectrogram alone (80 bins, 100 frames/s) on the
  decoded waveform, and vs reading the file with soundfile;
- video (a 30 s 640x360 H.264 clip made with PyAV): full embedding (decode, 16 fps sampling, 32x32 motion +
  appearance features, projection, codebook) vs PyAV decoding every frame alone.
``--long`` also embeds a 10-minute audio file and a 2-minute 1280x720 video, each in a fresh process, and reports
peak resident memory against the process's memory before embedding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import soundfile as sf
import torch

import mmtok
from mmtok.cache import cache_dir
from mmtok.eval.bench import machine, print_table, time_interleaved, write_json


def speech_file(seconds: float, path: Path) -> Path:
    """Concatenated training sentences (with 0.3 s pauses) as a 16 kHz WAV of ``seconds`` seconds."""
    if path.is_file():
        return path
    from mmtok.models.train_av import speech_files, speech_folder

    pieces, total = [], 0
    files = speech_files(speech_folder(""))
    i = 0
    while total < seconds * 16000:
        wave = mmtok.load(files[i % len(files)]).waveform(16000, mono=True)[0].numpy()
        pieces += [wave, np.zeros(4800, np.float32)]
        total += len(wave) + 4800
        i += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.concatenate(pieces)[: int(seconds * 16000)], 16000, subtype="PCM_16")
    return path


def video_file(seconds: float, size: tuple[int, int], path: Path, fps: int = 24) -> Path:
    """A generated H.264 video (moving gradient and square) with an AAC sound track."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "28"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(int(seconds * fps)):
            frame = np.zeros((h, w, 3), np.uint8)
            frame[..., 0] = (xx + 3 * i) % 256
            frame[..., 1] = (yy + i) % 256
            x0 = (7 * i) % (w - 80)
            frame[h // 3 : h // 3 + 80, x0 : x0 + 80] = 255
            vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
            vf.pts, vf.time_base = i, Fraction(1, fps)
            container.mux(stream.encode(vf))
        container.mux(stream.encode(None))
    return path


def decode_all_frames(path: Path) -> None:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for _ in container.decode(stream):
            pass


PEAK_SCRIPT = """
import json, resource, sys, torch, mmtok
tok = mmtok.get_tokenizer(sys.argv[1]).eval()
media = mmtok.load(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    streams = tok.encode_streams(media)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"tokens": {k: len(v) for k, v in streams.items()}, "before_mb": before / 1024,
                  "peak_mb": after / 1024, "media_s": media.duration_s}))
"""


def peak_memory(tokenizer: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, tokenizer, str(path)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    import torchaudio.transforms as T

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="av-tiny")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    tok = mmtok.get_tokenizer(args.tokenizer).eval()
    speech = speech_file(60, cache_dir("bench-av") / "speech-60s.wav")
    clip = video_file(30, (640, 360), cache_dir("bench-av") / "video-30s-360p.mp4")
    audio = mmtok.load(speech)
    video = mmtok.load(clip)
    wave = audio.waveform(16000, mono=True)
    mel100 = T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=80)

    def embed_audio(quantize: bool):
        def run() -> None:
            with torch.no_grad():
                tok.encode(audio, quantize=quantize)

        return run

    def embed_video() -> None:
        with torch.no_grad():
            tok.encode_streams(video, quantize=True)

    seconds = time_interleaved(
        {
            "audio: mmtok embedding (decode+mel+projection)": embed_audio(False),
            "audio: mmtok tokens (embedding + 8-level residual codebook)": embed_audio(True),
            "audio: torchaudio MelSpectrogram alone (100 fr/s)": lambda: mel100(wave),
            "audio: soundfile read alone": lambda: sf.read(speech, dtype="float32"),
            "video 360p: mmtok embedding (video stream)": embed_video,
            "video 360p: PyAV decode of every frame alone": lambda: decode_all_frames(clip),
        },
        args.repeats,
    )
    rtf = {
        name: (audio.duration_s if name.startswith("audio") else video.duration_s) / s for name, s in seconds.items()
    }
    rows = [[name, value] for name, value in rtf.items()]
    a_embed = rtf["audio: mmtok embedding (decode+mel+projection)"]
    a_tokens = rtf["audio: mmtok tokens (embedding + 8-level residual codebook)"]
    a_mel = rtf["audio: torchaudio MelSpectrogram alone (100 fr/s)"]
    v_embed = rtf["video 360p: mmtok embedding (video stream)"]
    v_decode = rtf["video 360p: PyAV decode of every frame alone"]
    print(
        f"bench_av: {args.tokenizer} at {tok.config.tokens_per_second:g} tokens/s; median of {args.repeats}. "
        f"{machine()}"
    )
    print_table("real-time factor (media seconds per compute second)", ["path", "x real time"], rows)
    print(
        f"\naudio embedding {a_embed:,.0f}x real time (target >= 1,000x); mel alone / embedding = "
        f"{a_mel / a_embed:.2f} (target <= 2); with the residual codebook (ids): {a_tokens:,.0f}x real time"
    )
    print(f"video embedding adds {v_decode / v_embed - 1:.0%} on top of decoding (target <= 50%)")
    result = {"rtf": rtf, "machine": machine()}
    if args.long:
        long_audio = speech_file(600, cache_dir("bench-av") / "speech-10min.wav")
        long_video = video_file(120, (1280, 720), cache_dir("bench-av") / "video-2min-720p.mp4")
        for label, path in (("10-minute audio", long_audio), ("2-minute 720p video", long_video)):
            report = peak_memory(args.tokenizer, path)
            result[label] = report
            print(
                f"{label}: {report['tokens']} tokens; peak RSS {report['peak_mb']:.0f} MB, "
                f"{report['peak_mb'] - report['before_mb']:.0f} MB above the process before embedding"
            )
    write_json(args.json, result)


if __name__ == "__main__":
    main()
