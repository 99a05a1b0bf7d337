"""``load()``: a file's kind by its content (magic bytes, then the container's streams), its metadata from headers.

Only regular files are opened (checked with ``stat`` first, opened with ``O_NONBLOCK``); images are checked for a
decompression bomb and a missing end before they count.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

from mmtok.errors import MediaError, ffmpeg_reason
from mmtok.extras import MissingExtra
from mmtok.headers import (
    HEAD_BYTES,
    HeaderError,
    ImageHeader,
    TruncatedError,
    check_image_end,
    image_format,
    read_image_header,
)
from mmtok.media.types import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    KINDS,
    MAX_IMAGE_PIXELS,
    MEDIA_EXTENSIONS,
    Audio,
    Image,
    Media,
    Text,
    Video,
    _av_open,
    checked_file,
    pillow_formats,
)


# ------------------------------------------------------------------------------------------------------------ load
def load(source: str | os.PathLike[str], *, kind: str | None = None, max_pixels: int = MAX_IMAGE_PIXELS) -> Media:
    """Open a media file and read its metadata; the kind is chosen by content.

    ``kind`` ("image", "audio", "video", "text"), when given, is what the caller expects: a file whose content
    is something else raises :class:`MediaError`. Images above ``max_pixels`` are refused before decoding.
    """
    path = source if isinstance(source, Path) else Path(source)
    if kind is not None and kind not in KINDS:
        raise MediaError(path, f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    with checked_file(path) as f:
        fd = f.fileno()
        size_bytes = os.fstat(fd).st_size
        try:
            head = os.read(fd, HEAD_BYTES)
        except OSError as e:
            raise MediaError(path, f"cannot read: {e.strerror}") from None
        if not head:
            raise MediaError(path, "empty file (0 bytes)")
        fmt = image_format(head)
        if fmt is not None:
            media: Media = _load_image(path, f, head, fmt, size_bytes, max_pixels)
        else:
            media = _load_stream_or_text(path, f, head, size_bytes)
    if kind is not None and media.kind != kind:
        raise MediaError(path, f"expected {kind}, but the content is {media.kind} ({media.format})")
    return media


def _load_image(path: Path, f: io.FileIO, head: bytes, fmt: str, size_bytes: int, max_pixels: int) -> Image:
    fd = f.fileno()
    try:
        header: ImageHeader | None = read_image_header(fd, head, fmt)
    except HeaderError as e:
        header, header_error = None, e
    if header is not None:
        width, height = header.size
        orientation = header.orientation
        _check_pixels(path, width, height, max_pixels)  # before the end check: a bomb needs no reading at all
        _check_end(path, fd, head, fmt, size_bytes, header.body_offset)
        if size_bytes < header.min_bytes:
            raise MediaError(
                path,
                f"truncated or forged: its header declares {width}x{height} pixels, which no {fmt} file holds in "
                f"under {header.min_bytes:,} bytes; the file has {size_bytes:,}",
            )
    else:
        _check_end(path, fd, head, fmt, size_bytes, None)  # a cut-off file reads as cut off, not as a Pillow error
        width, height, orientation = _pillow_size(path, f, fmt, header_error)
        _check_pixels(path, width, height, max_pixels)
    return Image(path, fmt, width, height, orientation, size_bytes)


def _check_pixels(path: Path, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise MediaError(
            path,
            f"{width}x{height} image has {width * height:,} pixels, above the limit of {max_pixels:,} "
            "(decompression-bomb guard: raise it with --max-pixels, or max_pixels= in Python)",
        )


def _check_end(path: Path, fd: int, head: bytes, fmt: str, size_bytes: int, body_offset: int | None) -> None:
    try:
        check_image_end(fd, head, fmt, size_bytes, body_offset)
    except TruncatedError as e:
        raise MediaError(path, f"truncated: {e}") from None
    except OSError as e:
        raise MediaError(path, f"cannot read: {e.strerror}") from None


def _pillow_size(path: Path, f: io.FileIO, fmt: str, header_error: HeaderError) -> tuple[int, int, int]:
    """Slow path for header variants the fast parser does not handle. A HEIF whose boxes do not parse, where
    pillow-heif is not installed (the core), is reported with the parser's reason."""
    import PIL.Image

    try:
        formats = pillow_formats(fmt)
    except MissingExtra:
        raise MediaError(path, f"corrupt {fmt} image: {header_error}") from None
    try:
        f.seek(0)
        with PIL.Image.open(f, formats=formats) as im:
            width, height = im.size
            orientation = int(im.getexif().get(0x0112, 1) or 1)
    except PIL.Image.DecompressionBombError as e:  # sizes only Pillow reads: its guard decides before ours can
        raise MediaError(path, f"{e} (Pillow's decompression-bomb guard: no larger image can be decoded)") from None
    except Exception as e:  # Pillow raises many types on bad data
        raise MediaError(path, f"corrupt {fmt} image: {e}") from None
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    if width <= 0 or height <= 0:
        raise MediaError(path, f"{fmt} image has zero size")
    return width, height, orientation


# Containers read with soundfile (libsndfile), by magic bytes.
def _soundfile_format(head: bytes) -> str | None:
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"OggS" and any(sig in head[:256] for sig in (b"\x01vorbis", b"OpusHead", b"\x7fFLAC")):
        return "ogg"
    return None


# Containers read with PyAV (FFmpeg), by magic bytes.
def _av_format(head: bytes) -> str | None:
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand == b"qt  ":
            return "mov"
        return "m4a" if brand in (b"M4A ", b"M4B ") else "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm" if b"webm" in head[:64] else "matroska"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF:
        if head[1] & 0xF6 == 0xF0:  # ADTS sync word with layer 00
            return "aac"
        if head[1] & 0xE0 == 0xE0 and head[1] & 0x06:  # MPEG audio frame sync, layer I-III
            return "mp3"
    return None


def _load_stream_or_text(path: Path, f: io.FileIO, head: bytes, size_bytes: int) -> Media:
    from mmtok.media.document import is_pdf, load_document

    if is_pdf(head):
        return load_document(path, head, size_bytes)
    sf_fmt = _soundfile_format(head)
    if sf_fmt is not None:
        return _load_soundfile(path, f, sf_fmt, size_bytes)
    av_fmt = _av_format(head)
    if av_fmt is not None:
        return _load_av(path, f, av_fmt, size_bytes)
    suffix = path.suffix.lower()
    if _looks_like_text(head, whole_file=size_bytes <= len(head)):
        if suffix in MEDIA_EXTENSIONS:
            expected = _kind_of_extension(suffix)
            raise MediaError(path, f"named {suffix} but the content is text, not {expected}")
        return Text(path, size_bytes)
    if suffix in MEDIA_EXTENSIONS:
        noun = _kind_of_extension(suffix).removeprefix("an ")  # "a readable image file", not "a readable an image"
        raise MediaError(path, f"named {suffix} but the content is not a readable {noun} file")
    raise MediaError(path, "not a supported image, audio, video or text file")  # its bytes are never quoted


def _kind_of_extension(suffix: str) -> str:
    if suffix in IMAGE_EXTENSIONS:
        return "an image"
    return "audio" if suffix in AUDIO_EXTENSIONS else "video"


def _looks_like_text(head: bytes, whole_file: bool) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        # A multi-byte character cut by the end of the head is fine; anything earlier is not text.
        return not whole_file and e.start >= len(head) - 3
    return True


UNKNOWN_FRAMES = 2**62  # libsndfile reports SF_COUNT_MAX frames for a length it does not know


def _load_soundfile(path: Path, f: io.FileIO, fmt: str, size_bytes: int) -> Audio:
    import soundfile as sf

    try:
        f.seek(0)
        info = sf.info(f)
    except Exception as e:  # LibsndfileError: a codec libsndfile lacks (FFmpeg's FLAC in Ogg), or damage
        try:
            return _av_audio_only(path, f, fmt, size_bytes)
        except MediaError:
            raise MediaError(path, f"corrupt {fmt} audio: {e}") from None
    if info.frames >= UNKNOWN_FRAMES:  # libsndfile's count when the header states none (FLAC written to a pipe)
        return _av_audio_only(path, f, fmt, size_bytes, measure=True)
    if info.frames <= 0:
        raise MediaError(path, "audio contains no samples")
    if info.samplerate <= 0 or info.channels <= 0:
        raise MediaError(path, f"audio header gives {info.samplerate} Hz and {info.channels} channels")
    _check_samples_reach(path, f, int(info.frames), int(info.samplerate))
    codec = info.subtype.lower() if info.subtype else fmt
    return Audio(path, fmt, codec, int(info.samplerate), int(info.channels), int(info.frames), size_bytes)


def _av_audio_only(path: Path, f: io.FileIO, fmt: str, size_bytes: int, measure: bool = False) -> Audio:
    """What FFmpeg reads of a file libsndfile cannot open or size: its sound, decoded by FFmpeg from then on."""
    media = _load_av(path, f, fmt, size_bytes, measure)
    if not isinstance(media, Audio):
        raise MediaError(path, f"{fmt} file holds video")
    return media


def _check_samples_reach(path: Path, f: io.FileIO, frames: int, rate: int) -> None:
    """The sample where the header's length says the data must still go on (``must_reach``) must be readable: a
    FLAC file cut off keeps the length its header states. One seek and a one-frame read (libsndfile's own seek:
    the FLAC seek table, or a bisection of the file)."""
    import soundfile as sf

    from mmtok.media.sampling import must_reach

    declared_s = frames / rate
    reach_s = must_reach(declared_s)
    if reach_s <= 0:
        return
    try:
        f.seek(0)
        with sf.SoundFile(f) as sound:
            sound.seek(math.ceil(reach_s * rate))
            readable = len(sound.read(1)) == 1
    except (RuntimeError, ValueError):  # soundfile.LibsndfileError: the seek or the read failed
        readable = False
    if not readable:
        raise MediaError(
            path,
            f"audio data stops before {reach_s:,.2f} s of the {declared_s:,.2f} s its header declares: the file is "
            "cut short or its header is wrong",
        )


def _load_av(path: Path, f: io.FileIO, fmt: str, size_bytes: int, measure: bool = False) -> Audio | Video:
    """A container's sound and first video stream, by FFmpeg. Durations are the streams' own, else the
    container's, held to the packets (``_held_to_packets``); they are measured from the packets when the
    container states none (a live-mode Matroska recording), for ADTS and for an MP3 that states no frame count
    (FFmpeg's duration is then a bitrate estimate, long or short), or when ``measure`` is set."""
    import av

    from mmtok.media import reach

    try:
        f.seek(0)
        with _av_open(f) as container:
            videos = [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
            estimated = fmt in reach.MEASURED_FORMATS or (fmt == "mp3" and not reach.states_frame_count(f))
            measured = _measured(f, fmt, container) if measure or estimated or not container.duration else {}
            audio = _av_audio_meta(path, fmt, container, size_bytes, measured)
            video = _av_video_meta(path, fmt, container, videos[0], audio, size_bytes, measured) if videos else None
            if not measured:  # durations from headers (or FFmpeg's estimates): held to the data
                spans = _held_to_packets(path, fmt, container, video, audio)
                if spans:
                    audio = _av_audio_meta(path, fmt, container, size_bytes, spans)
                    video = (
                        _av_video_meta(path, fmt, container, videos[0], audio, size_bytes, spans) if videos else None
                    )
            if video is not None:
                return video
    except av.FFmpegError as e:
        raise MediaError(path, f"corrupt or unsupported {fmt} container: {ffmpeg_reason(e)}") from None
    if audio is None:
        raise MediaError(path, f"{fmt} container has no audio or video stream")
    return audio


def _check_index_in_file(path: Path, what: str, stream: Any, duration_s: float, size_bytes: int) -> None:
    """A container whose own index (MP4's sample table, Matroska's cues) places the stream's last data past the end
    of the file is a file cut short (a faststart MP4 cut off keeps its index of the whole): the earliest sample past
    the end is where its data stops, held to the rule decoding applies (``check_not_cut_short``). Reads only the
    index FFmpeg made when it opened the file, and walks it only when its last entry lies past the end."""
    from mmtok.media.reach import stream_seconds
    from mmtok.media.sampling import check_not_cut_short

    entries = stream.index_entries
    count = len(entries)
    if not count or _entry_end(entries[count - 1]) <= size_bytes:
        return
    first_missing = min(entry.timestamp for entry in entries if _entry_end(entry) > size_bytes)
    ends_s = max(0.0, stream_seconds(first_missing - (stream.start_time or 0), stream.time_base))
    check_not_cut_short(path, what, ends_s, duration_s)


def _held_to_packets(
    path: Path, fmt: str, container: Any, video: Video | None, audio: Audio | None
) -> dict[int, float]:
    """The durations checked against the packets (``reach.packets_reach``): a file whose packets all stop short is
    cut short (``check_not_cut_short``), unless its duration was only FFmpeg's estimate (MP3), or only subtitles
    went on (the container's duration is theirs, not the sound's or the picture's): then the packets' spans are
    returned, to replace the durations. Returns {} when the durations stand."""
    import av

    from mmtok.media import reach
    from mmtok.media.sampling import check_not_cut_short

    timed = [  # video first: its keyframes are what a container indexes (Matroska's cues), so seeks there are fast
        s
        for kind in reach.TIMED_STREAMS
        for s in container.streams
        if s.type == kind and not s.disposition & av.stream.Disposition.attached_pic
    ]
    found = reach.packets_reach(container, timed)
    if found is None or found.reached(s.index for s in timed if s.type in reach.PRICED_STREAMS):
        return {}
    if found.reached() or fmt in reach.ESTIMATED_FORMATS:
        container.seek(0)
        spans = reach.measured_spans(container)
        if not any(spans.get(m.stream_index) for m in (video, audio) if m is not None):
            raise MediaError(path, f"{fmt} file has no readable audio or video packets")
        return spans
    for media in (video, audio):
        if media is not None:
            check_not_cut_short(path, media.kind, found.ends.get(media.stream_index, 0.0), media.duration_s)
    return {}


def _entry_end(entry: Any) -> int:
    return int(entry.pos) + max(0, int(entry.size))


def _measured(f: io.FileIO, fmt: str, container: Any) -> dict[int, float]:
    """Each stream's span from its data: an MP3's by walking its frame headers where that vouches for the whole
    file (``reach.mp3_span``, equal to the packets' span), else by a pass over the packets."""
    from mmtok.media import reach

    sounds = container.streams.audio
    if fmt == "mp3" and len(sounds) == 1:
        span = reach.mp3_span(f)
        if span:
            return {sounds[0].index: span}
    return reach.measured_spans(container)


def _av_audio_meta(path: Path, fmt: str, container: Any, size_bytes: int, measured: dict[int, float]) -> Audio | None:
    from mmtok.media.reach import stream_seconds

    if not container.streams.audio:
        return None
    stream = container.streams.audio[0]
    ctx = stream.codec_context
    if ctx is None:
        raise MediaError(path, "audio stream uses a codec FFmpeg does not know")
    rate = int(ctx.sample_rate or 0)
    channels = int(ctx.channels or 0)
    own = stream_seconds(stream.duration, stream.time_base) if stream.index not in measured else 0.0
    duration = measured.get(stream.index) or own or (container.duration or 0) / 1_000_000
    if rate <= 0 or channels <= 0:
        raise MediaError(path, f"audio stream gives {rate} Hz and {channels} channels")
    if duration <= 0:
        raise MediaError(path, "audio stream has no duration (zero-length or unreadable)")
    _check_index_in_file(path, "audio", stream, duration, size_bytes)
    return Audio(
        path,
        fmt,
        ctx.name,
        rate,
        channels,
        round(duration * rate),
        size_bytes,
        stream.index,
        length_from_stream=bool(own),
    )


def _av_video_meta(
    path: Path, fmt: str, container: Any, stream: Any, audio: Audio | None, size_bytes: int, measured: dict[int, float]
) -> Video:
    from mmtok.media.reach import stream_seconds

    ctx = stream.codec_context
    if ctx is None:
        raise MediaError(path, "video stream uses a codec FFmpeg does not know")
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    fps = float(rate) if rate else 0.0
    own = stream_seconds(stream.duration, stream.time_base) if stream.index not in measured else 0.0
    duration = measured.get(stream.index) or own or (container.duration or 0) / 1_000_000
    frames = int(stream.frames or 0) or round(duration * fps)
    if not ctx.width or not ctx.height:
        raise MediaError(path, "video stream has no frame size")
    if frames <= 0 or duration <= 0:
        raise MediaError(path, "video stream has no frames")
    _check_index_in_file(path, "video", stream, duration, size_bytes)
    return Video(
        path, fmt, ctx.name, int(ctx.width), int(ctx.height), fps, frames, duration, size_bytes, stream.index, audio,
        duration_from_stream=bool(own),
    )  # fmt: skip
