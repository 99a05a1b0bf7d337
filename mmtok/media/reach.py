"""How far a container's packets reach, against the durations its header declares, read without decoding.

A header says nothing about whether the rest of the file arrived: a Matroska, WebM or MP3 file cut off at its end
keeps the duration its header states, with no index past the end to show the cut. ``packets_stop_short`` seeks to
where the packets must still go on (``must_reach``: the rule decoding applies) and reads a few there. Some
durations are FFmpeg's estimates, not a header's: ADTS AAC states none (FFmpeg divides the size by the bitrate of
the first frames, so a quiet start puts a 5 s file at 93 s), and MP3's comes from a frame count or the bitrate.
For those, ``measured_spans`` reads every packet's time (demuxing only, at most ``MAX_PACKETS``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from mmtok.media.sampling import must_reach

# ADTS has no duration field: the packets' span is always its duration.
MEASURED_FORMATS = frozenset({"aac"})
# A frame count (Xing/VBRI) or the bitrate: measured when the packets stop short of it (a cut file, a quiet start).
ESTIMATED_FORMATS = frozenset({"mp3"})
MAX_PACKETS = 2_000_000  # a pass over a file's packets stops here (~10 s): hours of sound, a long film
TIMED_STREAMS = ("video", "audio", "subtitle")  # what a container's duration covers, in the order seeks prefer


def measured_spans(container: Any) -> dict[int, float] | None:
    """Each stream's span (s) by its packets' times, from the container's start; None when the file holds more
    than ``MAX_PACKETS`` packets (the header's duration stands then)."""
    import av

    first: dict[int, float] = {}
    last: dict[int, float] = {}
    with contextlib.suppress(av.FFmpegError):
        for count, packet in enumerate(container.demux()):
            if count >= MAX_PACKETS:
                return None
            stream = packet.stream
            if packet.pts is None or not stream.time_base:
                continue
            start = float(packet.pts * stream.time_base)
            end = start + float((packet.duration or 0) * stream.time_base)
            first[stream.index] = min(first.get(stream.index, start), start)
            last[stream.index] = max(last.get(stream.index, end), end)
    return {index: last[index] - first[index] for index in last}


def packets_stop_short(container: Any, streams: list[Any]) -> dict[int, float] | None:
    """None when the file's packets reach as far as the streams' durations require (``must_reach``), else each
    stream's furthest packet end (s).

    A stream's duration is its own, else the container's. Seeks in the first of the streams that must reach the
    earliest (to any packet: none is decoded, so no keyframe is needed) and reads packets until one stream has a
    packet ending there: one stream that reaches is enough (a sound track shorter than its video, or subtitles
    longer than the sound, is not a cut). A packet's end is the later of its time from the file's zero (container
    durations count from there: Matroska's) and from its stream's start. When the seek fails or finds no packet
    (past the data of a cut file), the packets are read from the start; a file cut inside its first cluster has
    none. A read that meets ``MAX_PACKETS`` packets first decides nothing (None)."""
    import av

    container_s = (container.duration or 0) / 1_000_000
    reach = {}
    for stream in streams:
        needed = must_reach(_seconds(stream.duration, stream.time_base) or container_s) if stream.time_base else 0
        if needed > 0:  # else too short (or timeless) for the rule
            reach[stream.index] = needed
    if not reach:
        return None
    first = container.streams[min(reach, key=reach.__getitem__)]
    ends: dict[int, float] | None = {}
    try:
        at = int(reach[first.index] / first.time_base) + min(0, first.start_time or 0)
        container.seek(at, stream=first, any_frame=True)
        ends = _stream_ends(container, reach)
    except (av.FFmpegError, OverflowError, ValueError):  # no seeking here, or a time no seek can name
        pass
    if ends == {}:
        with contextlib.suppress(av.FFmpegError):
            container.seek(0)
        ends = _stream_ends(container, reach)
    return None if ends is None or _reached(ends, reach) else ends


def _reached(ends: dict[int, float], reach: dict[int, float]) -> bool:
    return any(ends.get(index, -1.0) >= r for index, r in reach.items())


def _stream_ends(container: Any, reach: dict[int, float]) -> dict[int, float] | None:
    """From the container's position on: each stream's furthest packet end (s), read until one reaches its
    ``reach`` or the packets stop (at the end, or at data cut off in the middle of a packet); None after
    ``MAX_PACKETS`` packets."""
    import av

    ends: dict[int, float] = {}
    with contextlib.suppress(av.FFmpegError):
        for count, packet in enumerate(container.demux(*(container.streams[i] for i in reach))):
            if count >= MAX_PACKETS:
                return None
            end = _packet_end_s(packet)
            if end is not None:
                ends[packet.stream.index] = max(end, ends.get(packet.stream.index, end))
                if _reached(ends, reach):
                    break
    return ends


def _packet_end_s(packet: Any) -> float | None:
    """Where a packet's media ends (s): from the file's zero, or from its stream's start when that is earlier
    than zero; None without a time."""
    stream, t = packet.stream, packet.pts if packet.pts is not None else packet.dts
    if t is None or not stream.time_base:
        return None
    return float((t + (packet.duration or 0) - min(0, stream.start_time or 0)) * stream.time_base)


def _seconds(value: int | None, time_base: Any) -> float:
    return float(value * time_base) if value and time_base else 0.0
