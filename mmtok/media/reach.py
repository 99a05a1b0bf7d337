"""How far a container's packets reach, against the durations its header declares, read without decoding.

A header says nothing about whether the rest of the file arrived: a Matroska, WebM or MP3 file cut off at its end
keeps the duration its header states, with no index past the end to show the cut. ``packets_reach`` seeks to
where the packets must still go on (``must_reach``: the rule decoding applies) and reads a few there. Some
durations are FFmpeg's estimates, not a header's: ADTS AAC states none (FFmpeg divides the size by the bitrate of
the first frames, so a quiet start puts a 5 s file at 93 s), and MP3's comes from a frame count or the bitrate.
For those, ``measured_spans`` reads every packet's time (demuxing only); an MP3's frames are walked instead
(``mp3_span``: the same span from the frame headers alone, 19x faster: eval/results/bench_load_av.json).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmtok.files import UnreadableFile, open_checked
from mmtok.media.sampling import must_reach

# ADTS has no duration field: the packets' span is always its duration.
MEASURED_FORMATS = frozenset({"aac"})
# A frame count (Xing/VBRI) or the bitrate: measured when the packets stop short of it (a cut file, a quiet start),
# and always when no frame count is stated (``states_frame_count``): a bitrate estimate can be short too.
ESTIMATED_FORMATS = frozenset({"mp3"})
FRAME_COUNT_TAGS = (b"Xing", b"Info", b"VBRI")  # an MP3's first frame that states the stream's frame count
MAX_PACKETS = 2_000_000  # a probe that reads from the start stops here (~15 s) and decides nothing
TIMED_STREAMS = ("video", "audio", "subtitle")  # what a container's duration covers, in the order seeks prefer
PRICED_STREAMS = ("video", "audio")


def measured_spans(container: Any) -> dict[int, float]:
    """Each stream's span (s), from its first packet's time to its last one's end: a pass over every packet
    (demuxing only, linear in the file), for files whose duration is not stated or not to be trusted."""
    import av

    first: dict[int, float] = {}
    last: dict[int, float] = {}
    with contextlib.suppress(av.FFmpegError):
        for packet in container.demux():
            stream = packet.stream
            if packet.pts is None or not stream.time_base:
                continue
            start = float(packet.pts * stream.time_base)
            end = start + float((packet.duration or 0) * stream.time_base)
            first[stream.index] = min(first.get(stream.index, start), start)
            last[stream.index] = max(last.get(stream.index, end), end)
    return {index: last[index] - first[index] for index in last}


@dataclass(frozen=True)
class Reach:
    """What the packets showed: each stream's furthest packet end (s) and how far each had to reach."""

    ends: dict[int, float]
    needed: dict[int, float]

    def reached(self, indices: Iterable[int] | None = None) -> bool:
        """Whether one of ``indices`` (default: every checked stream) reached as far as it had to."""
        chosen = self.needed if indices is None else [i for i in indices if i in self.needed]
        return any(self.ends.get(index, -1.0) >= self.needed[index] for index in chosen)


def packets_reach(container: Any, streams: list[Any]) -> Reach | None:
    """How far the file's packets reach against the streams' durations (``must_reach``); None when no stream's
    duration is long enough for the rule, or the read decided nothing.

    A stream's duration is its own, else the container's. Seeks in the first of the streams that must reach the
    earliest (to any packet: none is decoded, so no keyframe is needed) and reads packets until a video or sound
    stream has a packet ending where it must (subtitles are only recorded: a cue shown until the end can be muxed
    well before it). A packet's end is the later of its time from the file's zero (container durations count from
    there: Matroska's) and from its stream's start. When the seek fails or finds no packet (past the data of a cut
    file), the packets are read from the start; a file cut inside its first cluster has none. A read from the
    start that meets ``MAX_PACKETS`` packets first decides nothing."""
    import av

    container_s = (container.duration or 0) / 1_000_000
    reach = {}
    for stream in streams:
        needed = must_reach(stream_seconds(stream.duration, stream.time_base) or container_s) if stream.time_base else 0
        if needed > 0:  # else too short (or timeless) for the rule
            reach[stream.index] = needed
    if not reach:
        return None
    priced = [s.index for s in streams if s.type in PRICED_STREAMS and s.index in reach]
    first = container.streams[min(reach, key=reach.__getitem__)]
    found: Reach | None = Reach({}, reach)
    try:
        at = int(reach[first.index] / first.time_base) + min(0, first.start_time or 0)
        container.seek(at, stream=first, any_frame=True)
        found = _stream_ends(container, reach, priced, limit=None)
    except (av.FFmpegError, OverflowError, ValueError):  # no seeking here, or a time no seek can name
        pass
    if found is not None and not found.ends:
        with contextlib.suppress(av.FFmpegError):
            container.seek(0)
        found = _stream_ends(container, reach, priced, limit=MAX_PACKETS)
    return found


def _stream_ends(container: Any, needed: dict[int, float], priced: list[int], limit: int | None) -> Reach | None:
    """From the container's position on: each stream's furthest packet end (s), read until one of ``priced``
    reaches as far as it must, or the packets stop (at the end, or at data cut off in the middle of a packet);
    None after ``limit`` packets."""
    import av

    found = Reach({}, needed)
    with contextlib.suppress(av.FFmpegError):
        for count, packet in enumerate(container.demux(*(container.streams[i] for i in needed))):
            if limit is not None and count >= limit:
                return None
            end = _packet_end_s(packet)
            if end is not None:
                found.ends[packet.stream.index] = max(end, found.ends.get(packet.stream.index, end))
                if found.reached(priced):
                    break
    return found


def states_frame_count(source: Path | io.FileIO) -> bool:
    """Whether an MP3's first frame is a Xing, Info or VBRI frame, which states the stream's frame count (FFmpeg's
    duration then comes from it, not from the bitrate). Reads the ID3v2 tag's size and the first frame's bytes, of
    ``source``: a file ``load`` opened, or a path (checked as every path is)."""
    try:
        with _opened(source) as f:
            frame = _first_frame_bytes(f.fileno())
    except (OSError, UnreadableFile):  # gone since FFmpeg opened it: FFmpeg's own duration stands
        return True
    sync = next((i for i in range(len(frame) - 1) if frame[i] == 0xFF and frame[i + 1] & 0xE0 == 0xE0), None)
    return sync is not None and any(tag in frame[sync : sync + 200] for tag in FRAME_COUNT_TAGS)


def _first_frame_bytes(fd: int) -> bytes:
    """4 KiB from the end of an MP3's ID3v2 tag, where its first frame starts."""
    return os.pread(fd, 4096, _id3v2_size(os.pread(fd, 10, 0)))


@contextlib.contextmanager
def _opened(source: Path | io.FileIO) -> Iterator[io.FileIO]:
    """``source`` itself when it is an open file, else the path opened by ``open_checked``."""
    if isinstance(source, io.IOBase):
        yield source
        return
    with open_checked(source) as f:
        yield f


def _packet_end_s(packet: Any) -> float | None:
    """Where a packet's media ends (s): from the file's zero, or from its stream's start when that is earlier
    than zero; None without a time."""
    stream, t = packet.stream, packet.pts if packet.pts is not None else packet.dts
    if t is None or not stream.time_base:
        return None
    return float((t + (packet.duration or 0) - min(0, stream.start_time or 0)) * stream.time_base)


def stream_seconds(value: int | None, time_base: Any) -> float:
    """A stream's count of ``time_base`` units in seconds; 0 without either."""
    return float(value * time_base) if value and time_base else 0.0


def mp3_span(source: Path | io.FileIO) -> float | None:
    """An MPEG audio (Layer II or III) file's length in seconds, by walking its frame headers from the first frame
    to the end: the frames times their samples, over the sample rate, as a pass over the packets measures it but
    without demuxing (a memory map, one header read per frame: 19x faster, eval/results/bench_load_av.json).
    None where the walk cannot vouch for the whole file (free-format bitrates, a header that changes version,
    layer or rate, bytes that are not a frame or a tag): the caller measures the packets then."""
    import mmap

    try:
        with _opened(source) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _mp3_frames_span(data, _id3v2_size(data))
    except (OSError, ValueError, UnreadableFile):
        return None


def _id3v2_size(data: Any) -> int:
    """The bytes an ID3v2 tag at the start of ``data`` takes (its syncsafe size, its header, a footer); 0 without."""
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    return 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(data[6:10])) + (10 if data[5] & 0x10 else 0)


def _mp3_frames_span(data: Any, pos: int) -> float | None:
    end = _mp3_audio_end(data)
    if end is None:
        return None
    while pos + 4 <= end and data[pos] != 0xFF:  # padding between the tag and the first frame
        if data[pos] != 0:
            return None
        pos += 1
    if pos + 4 > end or (key := data[pos + 1] << 8 | data[pos + 2]) & 0xFFFC not in _MP3_FRAMES:
        return None
    stream = key & 0xFE0C  # version, layer and sample rate: the same in every frame of one stream
    first = _MP3_FRAMES[key & 0xFFFC][0] + (key >> 1 & 1)
    frames = 0 if any(tag in data[pos : pos + first] for tag in FRAME_COUNT_TAGS) else 1
    pos += first  # a Xing, Info or VBRI frame holds no audio: FFmpeg does not pass it on as a packet
    while pos + 4 <= end:
        key = data[pos + 1] << 8 | data[pos + 2]
        entry = _MP3_FRAMES.get(key & 0xFFFC)  # padding and private bits cleared
        if data[pos] != 0xFF or entry is None or key & 0xFE0C != stream:
            return None  # not a frame of this stream: FFmpeg may resync where the walk does not guess
        frames += 1
        pos += entry[0] + (key >> 1 & 1)  # the padding bit adds one byte (slot)
    if pos < end or (pos > end and end < len(data)):  # 1-3 bytes left, or a frame running into the tags
        return None
    samples, rate = _MP3_FRAMES[stream | 0x10][1:]  # any bitrate of this stream: the samples and rate are its own
    return frames * samples / rate


def _mp3_audio_end(data: Any) -> int | None:
    """Where the audio ends: before the tags that end the file (ID3v1, then APEv2 blocks), each found at the very
    end and measured by its own size fields, as FFmpeg's demuxer leaves them out; None when one is malformed."""
    end = len(data)
    if end >= 128 and data[end - 128 : end - 125] == b"TAG":
        end -= 128
    for _ in range(4):
        if end >= 32 and data[end - 32 : end - 24] == b"APETAGEX":  # an APEv2 footer: its size, and a header flag
            size = int.from_bytes(data[end - 20 : end - 16], "little")
            header = 32 if int.from_bytes(data[end - 12 : end - 8], "little") & 0x80000000 else 0
            start = end - size - header
        else:  # (a Lyrics3 block is not a tag to FFmpeg, which reads it as frames: the packets decide there)
            return end
        if start < 0 or start >= end:
            return None
        end = start
    return end


def _mp3_frame_table() -> dict[int, tuple[int, int, int]]:
    """Header bytes 2-3 (sync bits, version, layer, protection, bitrate, rate; the padding and private bits
    cleared) -> (frame bytes without padding, samples per frame, sample rate), for Layers II and III of MPEG-1, 2
    and 2.5."""
    rates = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
    kbps = {
        (3, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),  # MPEG-1 Layer II
        (3, 1): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),  # MPEG-1 Layer III
    }
    low = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)  # MPEG-2 and 2.5, Layers II and III
    table = {}
    for version, version_rates in rates.items():
        for layer in (2, 1):  # the header's codes for Layer II and Layer III
            samples = 1152 if layer == 2 or version == 3 else 576
            for protection in (0, 1):
                for index, rate in enumerate(version_rates):
                    for b, kilobits in enumerate(kbps.get((version, layer), low), start=1):
                        key = (0xE0 | version << 3 | layer << 1 | protection) << 8 | b << 4 | index << 2
                        table[key] = (samples // 8 * kilobits * 1000 // rate, samples, rate)
    return table


_MP3_FRAMES = _mp3_frame_table()
