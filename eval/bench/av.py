"""Benchmark: audio/video embedding speed (real-time factor) against its anchors, and memory on long inputs.

Run: ``python -m mmtok.eval.bench.av [--tokenizer av-tiny] [--repeats 7] [--long]``.

Real-time factor = seconds of media embedded per second of compute. In one run, interleaved, medians:
- audio (a 60 s 16 kHz speech WAV made from the shipped training sentences): the embedding (streamed decode +
  80-bin log-mel at the token rate + projection: the issue's "decode + mel + projection"), the same plus the
  8-level residual codebook (discrete ids), and the codebook's ids alone on the embedding's content, vs
  torchaudio's MelSpectrogram alone (80 bins, 100 frames/s) on the decoded waveform, and vs reading the file with
  soundfile;
- video (30 s 640x360 H.264 clips made with PyAV; preset ultrafast, which has no B-frames, and preset medium,
  which has): full embedding (decode, 16 fps sampling, 32x32 motion + appearance features, projection, codebook)
  vs PyAV decoding every frame alone, and vs PyAV decoding only the frames the 16 fps sampling uses (non-reference
  frames between samples skipped, as the embedding skips them; with no B-frames that is every frame). Both decode
  with FFmpeg's automatic threads, as the embedding does; decoding every frame on one thread is shown too (on a
  2-core machine it can be the faster decode).
``--long`` also embeds a 10-minute audio file and a 2-minute 1280x720 video, each in a fresh process, and reports
peak resident memory against the process's memory before embedding. The JSON records the load average before and
after the timed runs (the machine is shared).
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
from mmtok.models.av import between_samples


def speech_file(seconds: float, path: Path) -> Path:
    """Concatenated training sentences (with 0.3 s pauses) as a 16 kHz WAV of ``seconds`` seconds."""
    if path.is_file():
        return path
    from mmtok.models.data import speech_files, speech_folder

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


def video_file(seconds: float, size: tuple[int, int], path: Path, fps: int = 24, preset: str = "ultrafast") -> Path:
    """A generated H.264 video (moving gradient and square), encoded with the given x264 preset."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": preset, "crf": "28"})
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


def decode_all_frames(path: Path, threads: int = 0) -> None:
    """Every frame decoded: with FFmpeg's automatic threads (``threads=0``, as the embedding decodes), or a fixed
    thread count."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        for _ in container.decode(stream):
            pass


def decode_sampled_frames(path: Path, rate: float) -> None:
    """Decode only what sampling at ``rate`` needs: packets between samples go to the decoder with skip_frame NONREF
    (it still decodes the reference frames among them), as the embedding sends them."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        context = stream.codec_context
        time_base, native_step, start = float(stream.time_base), 1.0 / float(stream.average_rate), None
        for packet in container.demux(stream):
            if start is not None and packet.pts is not None and packet.duration:
                t = packet.pts * time_base - start
                between = t >= 0 and between_samples(t, max(packet.duration * time_base, native_step), 1.0 / rate)
                context.skip_frame = "NONREF" if between else "DEFAULT"
            for frame in context.decode(packet):
                start = frame.time if start is None else start


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
    import os

    import torchaudio.transforms as T

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="av-tiny")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    tok = mmtok.get_tokenizer(args.tokenizer).eval()
    rate = tok.config.tokens_per_second
    folder = cache_dir("bench-av")
    speech = speech_file(60, folder / "speech-60s.wav")
    clips = {
        "video 360p": video_file(30, (640, 360), folder / "video-30s-360p.mp4"),
        "video 360p B-frames": video_file(30, (640, 360), folder / "video-30s-360p-medium.mp4", preset="medium"),
    }
    audio = mmtok.load(speech)
    wave = audio.waveform(16000, mono=True)
    mel100 = T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=80)
    with torch.no_grad():
        content = tok.content("audio", tok.audio_token_features(audio, rate))

    def embed_audio(quantize: bool):
        def run() -> None:
            with torch.no_grad():
                tok.encode(audio, quantize=quantize)

        return run

    def ids_alone() -> None:
        with torch.no_grad():
            tok.quantize(content)

    def embed_video(video: mmtok.Video):
        def run() -> None:
            with torch.no_grad():
                tok.encode_streams(video, quantize=True)

        return run

    cases = {
        "audio: mmtok embedding (decode+mel+projection)": embed_audio(False),
        "audio: mmtok tokens (embedding + 8-level residual codebook)": embed_audio(True),
        "audio: residual codebook ids alone (8 levels, on the embedding)": ids_alone,
        "audio: torchaudio MelSpectrogram alone (100 fr/s)": lambda: mel100(wave),
        "audio: soundfile read alone": lambda: sf.read(speech, dtype="float32"),
    }
    durations = {name: audio.duration_s for name in cases}
    for label, path in clips.items():
        video = mmtok.load(path)
        video_cases = {
            f"{label}: mmtok embedding (video stream)": embed_video(video),
            f"{label}: PyAV decode of every frame alone": lambda path=path: decode_all_frames(path),
            f"{label}: PyAV decode of every frame, one thread": lambda path=path: decode_all_frames(path, 1),
            f"{label}: PyAV decode of the sampled frames only": lambda path=path: decode_sampled_frames(path, rate),
        }
        cases.update(video_cases)
        durations.update({name: video.duration_s for name in video_cases})
    for fn in cases.values():
        fn()  # warm-up: caches, allocator, lazy imports
    load_before = os.getloadavg()
    seconds = time_interleaved(cases, args.repeats)
    load_after = os.getloadavg()
    rtf = {name: durations[name] / s for name, s in seconds.items()}
    rows = [[name, value] for name, value in rtf.items()]
    a_embed = rtf["audio: mmtok embedding (decode+mel+projection)"]
    a_tokens = rtf["audio: mmtok tokens (embedding + 8-level residual codebook)"]
    a_ids = rtf["audio: residual codebook ids alone (8 levels, on the embedding)"]
    a_mel = rtf["audio: torchaudio MelSpectrogram alone (100 fr/s)"]
    print(
        f"bench_av: {args.tokenizer} at {rate:g} tokens/s; median of {args.repeats}. {machine()}; torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )
    print_table("real-time factor (media seconds per compute second)", ["path", "x real time"], rows)
    print(
        f"\naudio embedding {a_embed:,.0f}x real time; its time / mel alone = {a_mel / a_embed:.2f} (target <= 2); "
        f"tokens with the 8-level residual codebook {a_tokens:,.0f}x real time, the ids alone {a_ids:,.0f}x "
        "(target >= 1,500x)"
    )
    ratios = {}
    for label in clips:
        embed = rtf[f"{label}: mmtok embedding (video stream)"]
        every = rtf[f"{label}: PyAV decode of every frame alone"]
        sampled = rtf[f"{label}: PyAV decode of the sampled frames only"]
        single = rtf[f"{label}: PyAV decode of every frame, one thread"]
        ratios[label] = {
            "embedding / decode every frame": every / embed,
            "embedding / decode sampled": sampled / embed,
            "embedding / decode every frame, one thread": single / embed,
        }
        print(
            f"{label}: the embedding adds {every / embed - 1:.0%} to decoding every frame (target <= 50%), "
            f"{sampled / embed - 1:.0%} to decoding only the sampled frames (which takes {every / sampled:.2f}x "
            f"the time of decoding every frame), {single / embed - 1:.0%} to decoding every frame on one thread "
            f"({single / every:.2f}x the speed of automatic threads)"
        )
    result = {
        "rtf": rtf,
        "video_time_ratios": ratios,
        "audio_time_ratios": {"embedding / mel alone": a_mel / a_embed},
        "repeats": args.repeats,
        "machine": machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_before_after": [load_before[0], load_after[0]],
    }
    if args.long:
        long_audio = speech_file(600, folder / "speech-10min.wav")
        long_video = video_file(120, (1280, 720), folder / "video-2min-720p.mp4")
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
