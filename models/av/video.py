"""Video into token features: frames sampled at the token rate by presentation time, decoded only as far as the
features need (frames no sample falls on are skipped), scaled to ``video_side`` grey for motion (frame differences)
plus a small RGB appearance grid."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.media.sampling import EPSILON_S
from mmtok.models.av.config import (
    AVConfig,
)


def sampled_small_frames(video: Any, rate: float, side: int, chunk_frames: int = 256) -> Iterator[torch.Tensor]:
    """The frames of ``video`` sampled at ``rate`` per second, as uint8 ``[n, 3, side, side]`` chunks: what
    ``Video.frames(fps=rate, size=(side, side))`` yields, decoded only as far as the features need.

    Sampling is by presentation time, as there (each grid time takes the frame on screen; the last frame stays one
    frame period). FFmpeg scales each sampled frame straight from the decoder's YUV to ``side`` x ``side`` RGB in
    one single-threaded swscale call (its automatic slice threads cost more than scaling 1,024 pixels, for the same
    bytes). A packet whose frame no grid time falls on (by its time and duration; packets without them are always
    needed) is sent with ``skip_frame = NONREF``, so the decoder skips it when nothing else refers to it: B-frames in
    most encodes; a stream without B-frames decodes every frame. Each small frame is copied channel-first into its
    chunk as it comes (a uint8 permute copy of a whole chunk took ~9 ms per 256 frames)."""
    import av
    import numpy as np
    from av.video.reformatter import VideoReformatter

    from mmtok.media.sampling import PresentationTimes, check_decoded, decode_error

    sampler = PresentationTimes(rate, video.fps)
    reformatter = VideoReformatter()
    chunk = np.empty((chunk_frames, 3, side, side), np.uint8)  # filled frame by frame, channel-first
    filled = 0

    def take(frame: Any, count: int) -> Iterator[torch.Tensor]:
        """``count`` copies of ``frame`` at ``side`` x ``side``; full chunks as they fill."""
        nonlocal chunk, filled
        if not count:
            return
        small = reformatter.reformat(frame, width=side, height=side, format="rgb24", threads=1)
        small = small.to_ndarray().transpose(2, 0, 1)  # (3, side, side) view of (side, side, 3)
        for _ in range(count):
            chunk[filled] = small
            filled += 1
            if filled == chunk_frames:
                yield torch.from_numpy(chunk)
                chunk, filled = np.empty_like(chunk), 0

    try:
        for frame, count in _sampled_frames(video, sampler):
            yield from take(frame, count)
    except av.FFmpegError as e:  # decoding or scaling
        raise decode_error(video, sampler, e) from None
    check_decoded(video, sampler)
    if filled:
        yield torch.from_numpy(chunk[:filled])


def _sampled_frames(video: Any, sampler: Any) -> Iterator[tuple[Any, int]]:
    """What ``sampler`` (a :class:`~mmtok.media.sampling.PresentationTimes`) makes of the video stream as it is
    decoded: (frame, how many grid times take it) pairs, packets no grid time needs skipped where the decoder can.
    The file is read through :func:`mmtok.media.types.checked_file`, never by name."""
    import av

    from mmtok.media.types import checked_file

    with checked_file(video.path) as f, av.open(f, metadata_errors="ignore") as container:
        stream = container.streams[video.stream_index]
        stream.thread_type = "AUTO"
        skipper = _NonrefSkipper(stream, sampler)
        for packet in container.demux(stream):
            skipper.before(packet)
            for frame in stream.codec_context.decode(packet):
                yield sampler.push(frame)
        yield sampler.finish()


class _NonrefSkipper:
    """Sets the decoder's ``skip_frame`` to NONREF for the packets whose frame no output time falls on (by the
    packet's time and duration), and back to DEFAULT for the others. Only for streams with B-frames: without them
    every frame is a reference, so nothing could be skipped. Packets without a time or duration, and every packet
    before the first frame fixes the stream's zero, are decoded."""

    def __init__(self, stream: Any, sampler: Any) -> None:
        self.context = stream.codec_context
        self.time_base = float(stream.time_base) if stream.time_base else 0.0
        self.reorders = bool(self.context.has_b_frames)
        self.sampler = sampler
        self.skipping = False

    def before(self, packet: Any) -> None:
        start = self.sampler.start
        if not (self.reorders and start is not None and packet.pts is not None and packet.duration and self.time_base):
            return
        t = packet.pts * self.time_base - start
        shown = max(packet.duration * self.time_base, self.sampler.native_step)  # at least one frame period
        if (t >= 0 and between_samples(t, shown, self.sampler.step)) != self.skipping:
            self.skipping = not self.skipping
            self.context.skip_frame = "NONREF" if self.skipping else "DEFAULT"


def between_samples(t: float, shown: float, step: float) -> bool:
    """No grid time ``k * step`` falls while a frame is on screen, from ``t`` for ``shown`` seconds (within the
    sampler's ``EPSILON_S``)."""
    first = math.ceil((t - EPSILON_S) / step)  # the first grid time the sampler could give this frame
    return first * step >= t + shown - EPSILON_S


def video_features_from_frames(
    frames: torch.Tensor, previous: torch.Tensor | None, cfg: AVConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 frames ``[n, 3, side, side]`` -> features ``[n, V]`` (grey differences + appearance grid) and the
    last grey frame (the ``previous`` of the next chunk)."""
    rgb = frames.float() / 255.0
    grey = rgb.mean(dim=1)  # (n, side, side)
    before = torch.cat([grey[:1] if previous is None else previous[None], grey[:-1]])
    motion = (grey - before).flatten(1)  # (n, side^2); the first frame of a stream has no motion
    appearance = F.adaptive_avg_pool2d(rgb, cfg.appearance_grid).flatten(1)  # (n, 3 * grid^2)
    return torch.cat([motion, appearance], dim=1), grey[-1]
