"""Benchmark: what load's end probe costs on audio and video files (the seek to where the data must still go on).

Run: ``python -m mmtok.eval.bench.load_av [--seconds 120] [--repeats 15]``.

``mmtok.load`` reads a container's header through PyAV, then checks that its packets reach as far as the declared
duration requires (``mmtok.media.reach.packets_reach``; for soundfile formats ``_check_samples_reach``): one
seek to any packet and the few packets after it, without decoding. On generated files of ``--seconds`` (H.264 at
320x180 with a keyframe every 10 s in MP4 and Matroska; VP9 in WebM; LAME MP3; FLAC), in the same run and
interleaved: PyAV opening and closing the file (the header read FFmpeg does, the anchor), ``mmtok.load`` with the
probe switched off, and ``mmtok.load`` as shipped. Medians of ``--repeats``, warm page cache.

An MP3 that states no frame count (no Xing frame) is measured instead: ``mmtok.load`` walks its frame headers
(``reach.mp3_span``); beside it, the same load with the walk switched off, which takes the pass over the packets.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import soundfile as sf

import mmtok
from mmtok.eval.bench import machine, print_table, time_interleaved, write_json
from mmtok.eval.tools.av_files import av_file
from mmtok.media import loading, reach

VIDEO = {"mp4": ("mp4", "libx264"), "mkv": ("matroska", "libx264"), "webm": ("webm", "libvpx-vp9")}


def make_files(folder: Path, seconds: int) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, (fmt, codec) in VIDEO.items():
        path = folder / f"{seconds}s.{name}"
        sound = "libopus" if fmt == "webm" else "aac"
        files[name] = path if path.is_file() else av_file(path, fmt, codec, sound, seconds, (320, 180), 240)
    path = folder / f"{seconds}s.mp3"
    files["mp3"] = path if path.is_file() else av_file(path, "mp3", None, "libmp3lame", seconds)
    path = folder / f"{seconds}s.flac"
    if not path.is_file():
        sf.write(path, 0.2 * np.sin(2 * np.pi * 440 * np.arange(seconds * 16000) / 16000), 16000)
    files["flac"] = path
    return files


def bare_mp3(folder: Path, seconds: int) -> Path:
    """A LAME MP3 without a Xing frame (FFmpeg's ``write_xing=0``): it states no frame count."""
    from mmtok.eval.tools.av_files import encode_sound

    path = folder / f"{seconds}s-no-xing.mp3"
    if not path.is_file():
        with av.open(str(path), "w", format="mp3", options={"write_xing": "0"}) as container:
            encode_sound(container, container.add_stream("libmp3lame", rate=44100, layout="mono"), seconds)
    return path


def measure(path: Path, walk: bool) -> Callable[[], None]:
    shipped = reach.mp3_span

    def run() -> None:
        reach.mp3_span = shipped if walk else (lambda path: None)
        try:
            mmtok.load(path)
        finally:
            reach.mp3_span = shipped

    return run


def header_read(path: Path) -> Callable[[], None]:
    def run() -> None:
        if path.suffix == ".flac":
            sf.info(str(path))
        else:
            with av.open(str(path)):
                pass

    return run


def load(path: Path, probe: bool) -> Callable[[], None]:
    shipped = (reach.packets_reach, loading._check_samples_reach)
    off = (lambda *args: None, lambda *args: None)

    def run() -> None:
        reach.packets_reach, loading._check_samples_reach = shipped if probe else off
        try:
            mmtok.load(path)
        finally:
            reach.packets_reach, loading._check_samples_reach = shipped

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from mmtok.cache import cache_dir

    files = make_files(cache_dir("corpus") / "load-av", args.seconds)
    cases = {}
    for name, path in files.items():
        cases[f"{name}: header read (PyAV open, or sf.info)"] = header_read(path)
        cases[f"{name}: mmtok.load without the end probe"] = load(path, probe=False)
        cases[f"{name}: mmtok.load"] = load(path, probe=True)
    bare = bare_mp3(cache_dir("corpus") / "load-av", args.seconds)
    measuring = {
        "mp3 without a frame count: mmtok.load, frame headers walked": measure(bare, walk=True),
        "mp3 without a frame count: mmtok.load, packets passed over": measure(bare, walk=False),
    }
    cases.update(measuring)
    for run in cases.values():
        run()  # warm: page cache, imports
    seconds = time_interleaved(cases, args.repeats)
    rows, ratios = [], {}
    for name, path in files.items():
        anchor, without, shipped = (seconds[k] for k in cases if k.startswith(f"{name}:"))
        ratios[name] = {"load / without probe": shipped / without, "load / header read": shipped / anchor}
        rows.append([f"{name} ({path.stat().st_size / 1e6:.1f} MB)", anchor * 1e3, without * 1e3, shipped * 1e3,
                     shipped / without, (shipped - without) * 1e3])  # fmt: skip
    print(f"bench_load_av: {args.seconds} s files, median of {args.repeats} interleaved runs. {machine()}")
    print_table(
        "ms per file",
        ["file", "header read", "load, no probe", "load", "load / no probe", "probe ms"],
        rows,
    )
    walked, passed = (seconds[k] for k in measuring)
    ratios["mp3 without a frame count"] = {"packet pass / frame walk": passed / walked}
    print(
        f"\nmp3 without a frame count ({bare.stat().st_size / 1e6:.1f} MB): load {walked * 1e3:.2f} ms with its frame"
        f" headers walked, {passed * 1e3:.2f} ms with a pass over its packets ({passed / walked:.1f}x)"
    )
    write_json(
        args.json,
        {
            "seconds_per_file": args.seconds,
            "repeats": args.repeats,
            "ms": {k: v * 1e3 for k, v in seconds.items()},
            "ratios": ratios,
            "bytes": {name: path.stat().st_size for name, path in files.items()},
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
