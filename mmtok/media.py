"""Media types and ``load()``: content-sniffed, validated, lazily decoded.

``load(path)`` reads only headers and containers: an ``Image`` knows its displayed size, an ``Audio`` its rate,
channels and length, a ``Video`` its size, rate, frame count and audio track, without decoding a pixel or a
sample. Decoding happens on request (``Image.to_tensor()``, ``Audio.waveform()``, ``Video.frames()``), and every
decoder failure becomes a :class:`~mmtok.errors.MediaError` that names the file.

The kind is chosen by content (magic bytes, then the container's streams), never by the file's extension.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Union

from mmtok.errors import MediaError
from mmtok.headers import (
    HEAD_BYTES,
    HeaderError,
    ImageHeader,
    TruncatedError,
    check_image_end,
    image_format,
    read_image_header,
)

if TYPE_CHECKING:
    import numpy as np
    import PIL.Image
    import torch

# Images claiming more pixels than this are refused before any decoding (decompression-bomb guard). It equals the
# size at which Pillow itself raises DecompressionBombError (2 x Image.MAX_IMAGE_PIXELS), about 13,377 x 13,377.
MAX_IMAGE_PIXELS = 178_956_970

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".webp", ".gif", ".bmp", ".tif", ".tiff"})
AUDIO_EXTENSIONS = frozenset({".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aac", ".m4a", ".aif", ".aiff"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi", ".ogv"})
MEDIA_EXTENSIONS = IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS

KINDS = ("image", "audio", "video", "text")


def _source(path: Path | None) -> str:
    return str(path) if path is not None else "<memory>"


# ----------------------------------------------------------------------------------------------------------- Image
@dataclass(frozen=True)
class Image:
    """A still image. ``width``/``height`` are as displayed (EXIF orientation applied)."""

    kind: ClassVar[str] = "image"
    path: Path | None
    format: str  # png | jpeg | webp | gif | bmp | tiff | tensor
    width: int
    height: int
    orientation: int = 1  # EXIF orientation of the stored pixels (1 = as stored)
    size_bytes: int | None = None
    data: torch.Tensor | None = field(default=None, repr=False, compare=False)  # uint8 [3, H, W] when in memory

    @classmethod
    def from_tensor(cls, pixels: torch.Tensor) -> Image:
        """An in-memory image from a uint8 tensor ``[3, H, W]`` (RGB)."""
        import torch

        if pixels.ndim != 3 or pixels.shape[0] != 3 or pixels.dtype != torch.uint8:
            raise MediaError(None, f"expected a uint8 tensor [3, H, W], got {pixels.dtype} {tuple(pixels.shape)}")
        return cls(None, "tensor", int(pixels.shape[2]), int(pixels.shape[1]), data=pixels)

    @classmethod
    def from_pil(cls, image: PIL.Image.Image) -> Image:
        return cls.from_tensor(_pil_to_tensor(_to_rgb(image)))

    def to_pil(self, draft_size: tuple[int, int] | None = None) -> PIL.Image.Image:
        """Decode to an RGB Pillow image, orientation applied, transparency composited over white.

        ``draft_size`` (width, height) lets JPEG decode at a reduced DCT scale no smaller than that size: a large
        speed-up when the image is going to be resized down anyway.
        """
        import PIL.Image
        import PIL.ImageOps

        if self.data is not None:
            return PIL.Image.fromarray(self.data.permute(1, 2, 0).numpy())
        try:
            with PIL.Image.open(self.path) as im:
                if draft_size is not None and im.format == "JPEG":
                    # draft() works in stored orientation; swap the request for rotated images.
                    dw, dh = draft_size if self.orientation not in (5, 6, 7, 8) else draft_size[::-1]
                    im.draft("RGB", (dw, dh))
                im.load()
                oriented = PIL.ImageOps.exif_transpose(im)
                return _to_rgb(oriented)
        except Exception as e:  # Pillow raises many types (OSError, SyntaxError, ValueError, ...) on bad data
            raise MediaError(self.path, f"cannot decode {self.format} image: {e}") from None

    def to_tensor(self, draft_size: tuple[int, int] | None = None) -> torch.Tensor:
        """Decoded pixels, uint8 ``[3, H, W]`` RGB."""
        if self.data is not None:
            return self.data
        return _pil_to_tensor(self.to_pil(draft_size))

    def info(self) -> dict[str, Any]:
        return _info(self, fmt=self.format, width=self.width, height=self.height, orientation=self.orientation)


def _to_rgb(im: PIL.Image.Image) -> PIL.Image.Image:
    import PIL.Image

    if im.mode == "RGB":
        return im
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        background = PIL.Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return PIL.Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")


def _pil_to_tensor(im: PIL.Image.Image) -> torch.Tensor:
    import numpy as np
    import torch

    array = np.asarray(im, dtype=np.uint8)  # (H, W, 3)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()  # (3, H, W)


# ----------------------------------------------------------------------------------------------------------- Audio
@dataclass(frozen=True)
class Audio:
    """An audio stream: a file (or one stream of a video container), or an in-memory waveform."""

    kind: ClassVar[str] = "audio"
    path: Path | None
    format: str  # container: wav | flac | ogg | aiff | mp3 | aac | m4a | mp4 | webm | matroska | tensor
    codec: str
    sample_rate_hz: int
    channels: int
    num_samples: int  # per channel; from the header (an estimate for some compressed streams)
    size_bytes: int | None = None
    stream_index: int | None = None  # PyAV stream index when decoded through PyAV
    data: torch.Tensor | None = field(default=None, repr=False, compare=False)  # float32 [C, T] when in memory

    @property
    def duration_s(self) -> float:
        return self.num_samples / self.sample_rate_hz

    @classmethod
    def from_tensor(cls, waveform: torch.Tensor, sample_rate_hz: int) -> Audio:
        """An in-memory audio clip from a float waveform ``[C, T]`` (or ``[T]`` for mono)."""
        import torch

        if waveform.ndim == 1:
            waveform = waveform[None]
        if waveform.ndim != 2 or not waveform.is_floating_point():
            raise MediaError(None, f"expected a float waveform [C, T], got {waveform.dtype} {tuple(waveform.shape)}")
        if sample_rate_hz <= 0:
            raise MediaError(None, f"sample rate must be positive, got {sample_rate_hz}")
        waveform = waveform.to(torch.float32)
        _check_samples(None, waveform)
        c, t = waveform.shape
        return cls(None, "tensor", "pcm_f32", int(sample_rate_hz), int(c), int(t), data=waveform)

    def waveform(self, sample_rate_hz: int | None = None, mono: bool = False) -> torch.Tensor:
        """Decoded samples, float32 ``[C, T]`` in [-1, 1] (``[1, T]`` with ``mono``), resampled on request."""
        wave = self.data if self.data is not None else self._decode()
        if mono and wave.shape[0] > 1:
            wave = wave.mean(dim=0, keepdim=True)
        if sample_rate_hz is not None and sample_rate_hz != self.sample_rate_hz:
            wave = resample(wave, self.sample_rate_hz, sample_rate_hz)
        return wave

    def blocks(
        self, block_seconds: float = 30.0, sample_rate_hz: int | None = None, mono: bool = True
    ) -> Iterator[torch.Tensor]:
        """Stream the samples in blocks of ``block_seconds`` (``[C, n]`` float32), so memory stays bounded for any
        length. Files are decoded and resampled by FFmpeg's stateful resampler, so block edges are seamless."""
        import av
        import numpy as np
        import torch

        rate = sample_rate_hz or self.sample_rate_hz
        block = max(1, int(block_seconds * rate))
        if self.data is not None:
            wave = self.waveform(rate, mono)
            for start in range(0, wave.shape[1], block):
                yield wave[:, start : start + block]
            return
        if self.stream_index is None and rate == self.sample_rate_hz:  # libsndfile, no resampling: read blocks
            yield from self._soundfile_blocks(block, mono)
            return
        channels = 1 if mono else self.channels
        pending: list[np.ndarray] = []
        held = 0
        # Samples past the declared length are held back: a codec's end padding (within one or two frames) is
        # dropped, as in waveform(); more than that means the header under-counted, and everything is yielded.
        declared = round(self.num_samples * rate / self.sample_rate_hz) if self.stream_index is not None else None
        tolerance = _padding_samples(rate)
        sent = 0
        try:
            with _av_open(self.path) as container:
                stream = (
                    container.streams.audio[0] if self.stream_index is None else container.streams[self.stream_index]
                )
                resampler = av.AudioResampler(format="fltp", layout="mono" if mono else f"{channels}c", rate=rate)
                frames = container.decode(stream)
                for frame in [*frames, None]:
                    for out in resampler.resample(frame):
                        pending.append(_planar(self.path, out, channels))
                        held += out.samples
                    while held >= block or (frame is None and held):
                        joined = np.concatenate(pending, axis=1)
                        size = block
                        if declared is not None:
                            room = declared - sent
                            if room > 0:
                                size = min(block, room)  # stop at the declared length first
                            elif held > tolerance:
                                declared = None  # the header under-counted: stream everything
                            elif frame is None:
                                pending, held = [], 0  # the codec's end padding: drop it
                                break
                            else:
                                break  # within the padding allowance: wait for more samples or the end
                        chunk, rest = joined[:, :size], joined[:, size:]
                        pending, held = ([rest] if rest.shape[1] else []), rest.shape[1]
                        wave = torch.from_numpy(np.ascontiguousarray(chunk, dtype=np.float32))
                        _check_samples(self.path, wave)
                        sent += wave.shape[1]
                        yield wave
        except av.FFmpegError as e:
            raise MediaError(self.path, f"audio stream is corrupt: {e}") from None

    def _soundfile_blocks(self, block: int, mono: bool) -> Iterator[torch.Tensor]:
        import soundfile as sf
        import torch

        try:
            for array in sf.blocks(str(self.path), blocksize=block, dtype="float32", always_2d=True):  # (n, C)
                wave = torch.from_numpy(array.T.copy())
                if mono and wave.shape[0] > 1:
                    wave = wave.mean(dim=0, keepdim=True)
                _check_samples(self.path, wave)
                yield wave
        except MediaError:
            raise
        except Exception as e:  # soundfile.LibsndfileError / RuntimeError on corrupt data
            raise MediaError(self.path, f"cannot decode {self.format} audio: {e}") from None

    def _decode(self) -> torch.Tensor:
        import torch

        if self.stream_index is None:
            import soundfile as sf

            try:
                array, _ = sf.read(self.path, dtype="float32", always_2d=True)  # (T, C)
            except Exception as e:  # soundfile.LibsndfileError / RuntimeError on corrupt data
                raise MediaError(self.path, f"cannot decode {self.format} audio: {e}") from None
            wave = torch.from_numpy(array.T.copy())
        else:
            wave = _decode_av_audio(self.path, self.stream_index, self.format, self.channels, self.sample_rate_hz)
            if 0 < wave.shape[-1] - self.num_samples <= _padding_samples(self.sample_rate_hz):
                wave = wave[:, : self.num_samples]  # the codec's end padding (e.g. AAC's last frame)
        if wave.shape[-1] == 0:
            raise MediaError(self.path, "audio contains no samples")
        _check_samples(self.path, wave)
        return wave

    def info(self) -> dict[str, Any]:
        return _info(
            self,
            fmt=self.format,
            codec=self.codec,
            duration_s=round(self.duration_s, 6),
            sample_rate_hz=self.sample_rate_hz,
            channels=self.channels,
            samples=self.num_samples,
        )


def _check_samples(path: Path | None, wave: torch.Tensor) -> None:
    import torch

    if not bool(torch.isfinite(wave).all()):
        raise MediaError(path, "audio contains NaN or infinite samples")


def resample(waveform: torch.Tensor, from_hz: int, to_hz: int) -> torch.Tensor:
    """Band-limited resampling (torchaudio's windowed-sinc), ``[..., T]`` at ``from_hz`` to ``to_hz``."""
    import torchaudio.functional as AF

    if from_hz == to_hz:
        return waveform
    return AF.resample(waveform, int(from_hz), int(to_hz))


def _av_open(path: Path | None) -> Any:
    """Open a container for reading; tags in a broken encoding are dropped rather than failing the file."""
    import av

    return av.open(str(path), metadata_errors="ignore")


def _padding_samples(rate: int) -> int:
    """How far decoded audio may run past the header's length and still be codec padding (two 1,024-sample AAC
    frames at 44.1 kHz, scaled to ``rate``)."""
    return round(2048 * rate / 44_100) + 1


def _planar(path: Path | None, frame: Any, channels: int) -> np.ndarray:
    array = frame.to_ndarray()  # (C, n)
    if array.shape[0] != channels:
        raise MediaError(path, f"audio stream switches from {channels} to {array.shape[0]} channels midway")
    return array


def _decode_av_audio(path: Path | None, stream_index: int, fmt: str, channels: int, rate: int) -> torch.Tensor:
    import av
    import numpy as np
    import torch

    pieces: list[np.ndarray] = []
    try:
        with _av_open(path) as container:
            stream = container.streams[stream_index]
            # Planar float32 at the header's layout and rate, even if a damaged stream changes them midway.
            resampler = av.AudioResampler(format="fltp", layout=f"{channels}c", rate=rate)
            for frame in container.decode(stream):
                pieces.extend(_planar(path, out, channels) for out in resampler.resample(frame))
            pieces.extend(_planar(path, out, channels) for out in resampler.resample(None))
    except av.FFmpegError as e:
        if not pieces:
            raise MediaError(path, f"cannot decode {fmt} audio: {e}") from None
        raise MediaError(
            path, f"audio stream is corrupt after {sum(p.shape[1] for p in pieces)} samples: {e}"
        ) from None
    if not pieces:
        raise MediaError(path, "audio contains no samples")
    return torch.from_numpy(np.concatenate(pieces, axis=1).astype(np.float32, copy=False))


# ----------------------------------------------------------------------------------------------------------- Video
class VideoChunk(NamedTuple):
    times: torch.Tensor  # float64 [n], seconds from the start of the stream
    frames: torch.Tensor  # uint8 [n, 3, H, W]


@dataclass(frozen=True)
class Video:
    """A video stream in a container, with its first audio track's metadata if it has one."""

    kind: ClassVar[str] = "video"
    path: Path
    format: str  # mp4 | mov | webm | matroska | ogg | avi
    codec: str
    width: int
    height: int
    fps: float  # average frame rate
    frame_count: int  # from the container, else duration x fps
    duration_s: float
    size_bytes: int | None = None
    stream_index: int = 0
    audio: Audio | None = None

    def frames(
        self,
        fps: float | None = None,
        size: tuple[int, int] | None = None,
        chunk_frames: int = 32,
    ) -> Iterator[VideoChunk]:
        """Frames sampled at ``fps`` (default: the stream's rate), resized to ``size`` (width, height).

        Streams chunks of at most ``chunk_frames`` frames, so memory stays bounded for any length. Sampling is by
        presentation time: each output time takes the frame on screen at that instant, so variable-frame-rate
        video gives evenly spaced samples.
        """
        import av
        import numpy as np
        import torch

        rate = float(fps) if fps else (self.fps or 25.0)
        if rate <= 0 or chunk_frames <= 0:
            raise MediaError(self.path, f"fps and chunk_frames must be positive, got {fps}, {chunk_frames}")
        step = 1.0 / rate
        width, height = size if size is not None else (self.width, self.height)
        times: list[float] = []
        arrays: list[np.ndarray] = []

        from av.video.reformatter import VideoReformatter

        reformatter = VideoReformatter()  # one scaler context for the stream (frame.reformat builds one per call)

        def rgb(frame: av.VideoFrame) -> np.ndarray:
            return reformatter.reformat(frame, width=width, height=height, format="rgb24").to_ndarray()  # (H, W, 3)

        def flush() -> VideoChunk:
            chunk = VideoChunk(
                torch.tensor(times, dtype=torch.float64),
                torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous(),  # (n, 3, H, W)
            )
            times.clear()
            arrays.clear()
            return chunk

        emitted = 0
        try:
            with _av_open(self.path) as container:
                stream = container.streams[self.stream_index]
                stream.thread_type = "AUTO"
                start: float | None = None
                held: tuple[float, av.VideoFrame] | None = None
                held_rgb: np.ndarray | None = None
                native_step = 1.0 / self.fps if self.fps else step
                for n, frame in enumerate(container.decode(stream)):
                    t = frame.time if frame.time is not None else n * native_step
                    if start is None:
                        start = t
                    t -= start
                    # the held frame is on screen from its time until this one's: emit it for every grid time there
                    while held is not None and emitted * step < t - 1e-9:
                        if held_rgb is None:
                            held_rgb = rgb(held[1])
                        times.append(emitted * step)
                        arrays.append(held_rgb)
                        emitted += 1
                        if len(arrays) == chunk_frames:
                            yield flush()
                    held, held_rgb = (t, frame), None
                if held is not None:
                    end = held[0] + native_step  # the last frame stays on screen for one frame period
                    while emitted * step < end - 1e-9:
                        if held_rgb is None:
                            held_rgb = rgb(held[1])
                        times.append(emitted * step)
                        arrays.append(held_rgb)
                        emitted += 1
                        if len(arrays) == chunk_frames:
                            yield flush()
        except av.FFmpegError as e:
            raise MediaError(self.path, f"video stream is corrupt after {emitted} sampled frames: {e}") from None
        if arrays:
            yield flush()
        if emitted == 0:
            raise MediaError(self.path, "video stream contains no decodable frames")

    def info(self) -> dict[str, Any]:
        out = _info(
            self,
            fmt=self.format,
            codec=self.codec,
            width=self.width,
            height=self.height,
            duration_s=round(self.duration_s, 6),
            fps=round(self.fps, 6),
            frames=self.frame_count,
        )
        if self.audio is not None:
            out["audio_codec"] = self.audio.codec
            out["sample_rate_hz"] = self.audio.sample_rate_hz
            out["channels"] = self.audio.channels
        return out


# ------------------------------------------------------------------------------------------------------------ Text
@dataclass(frozen=True)
class Text:
    """UTF-8 text from a file or a string."""

    kind: ClassVar[str] = "text"
    path: Path | None
    size_bytes: int
    data: str | None = field(default=None, repr=False, compare=False)
    format: str = "utf-8"

    @classmethod
    def from_string(cls, text: str) -> Text:
        return cls(None, len(text.encode("utf-8")), data=text)

    @property
    def text(self) -> str:
        if self.data is not None:
            return self.data
        try:
            return Path(self.path).read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise MediaError(self.path, f"not valid UTF-8 text (byte {e.start}): {e.reason}") from None
        except OSError as e:
            raise MediaError(self.path, f"cannot read: {e.strerror}") from None

    def info(self) -> dict[str, Any]:
        return _info(self, fmt=self.format)


Media = Union[Image, Audio, Video, Text]  # noqa: UP007 - a runtime alias used in isinstance-free annotations


def _info(media: Media, *, fmt: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"path": _source(media.path), "kind": media.kind, "format": fmt}
    out.update(fields)
    out["bytes"] = media.size_bytes
    return out


# ------------------------------------------------------------------------------------------------------------ load
def load(source: str | os.PathLike[str], *, kind: str | None = None, max_pixels: int = MAX_IMAGE_PIXELS) -> Media:
    """Open a media file and read its metadata; the kind is chosen by content.

    ``kind`` ("image", "audio", "video", "text"), when given, is what the caller expects: a file whose content
    is something else raises :class:`MediaError`. Images above ``max_pixels`` are refused before decoding.
    """
    path = source if isinstance(source, Path) else Path(source)
    if kind is not None and kind not in KINDS:
        raise MediaError(path, f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    try:
        # Checked before opening: opening a FIFO can block and opening a device can act on it.
        st = os.stat(path)
    except FileNotFoundError:
        raise MediaError(path, "no such file") from None
    except PermissionError:
        raise MediaError(path, "permission denied: the file is not readable") from None
    except OSError as e:
        raise MediaError(path, f"cannot open: {e.strerror}") from None
    _check_regular(path, st.st_mode)
    try:
        # O_NONBLOCK: should the path be swapped for a FIFO after the check, opening it still does not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MediaError(path, "no such file") from None
    except IsADirectoryError:
        raise MediaError(path, "is a folder, not a file (use mmtok.scan() for folders)") from None
    except PermissionError:
        raise MediaError(path, "permission denied: the file is not readable") from None
    except OSError as e:
        raise MediaError(path, f"cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        _check_regular(path, st.st_mode)
        try:
            head = os.read(fd, HEAD_BYTES)
        except OSError as e:
            raise MediaError(path, f"cannot read: {e.strerror}") from None
        if not head:
            raise MediaError(path, "empty file (0 bytes)")
        fmt = image_format(head)
        if fmt is not None:
            media: Media = _load_image(path, fd, head, fmt, st.st_size, max_pixels)
        else:
            media = _load_stream_or_text(path, head, st.st_size)
    finally:
        os.close(fd)
    if kind is not None and media.kind != kind:
        raise MediaError(path, f"expected {kind}, but the content is {media.kind} ({media.format})")
    return media


def _load_image(path: Path, fd: int, head: bytes, fmt: str, size_bytes: int, max_pixels: int) -> Image:
    try:
        header: ImageHeader | None = read_image_header(fd, head, fmt)
    except HeaderError:
        header = None
    if header is not None:
        width, height = header.size
        orientation = header.orientation
        _check_pixels(path, width, height, max_pixels)  # before the end check: a bomb needs no reading at all
        _check_end(path, fd, head, fmt, size_bytes, header.body_offset)
    else:
        _check_end(path, fd, head, fmt, size_bytes, None)  # a cut-off file reads as cut off, not as a Pillow error
        width, height, orientation = _pillow_size(path, fmt)
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


def _pillow_size(path: Path, fmt: str) -> tuple[int, int, int]:
    """Slow path for header variants the fast parser does not handle."""
    import PIL.Image

    try:
        with PIL.Image.open(path) as im:
            width, height = im.size
            orientation = int(im.getexif().get(0x0112, 1) or 1)
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


def _load_stream_or_text(path: Path, head: bytes, size_bytes: int) -> Media:
    sf_fmt = _soundfile_format(head)
    if sf_fmt is not None:
        return _load_soundfile(path, sf_fmt, size_bytes)
    av_fmt = _av_format(head)
    if av_fmt is not None:
        return _load_av(path, av_fmt, size_bytes)
    suffix = path.suffix.lower()
    if _looks_like_text(head, whole_file=size_bytes <= len(head)):
        if suffix in MEDIA_EXTENSIONS:
            expected = _kind_of_extension(suffix)
            raise MediaError(path, f"named {suffix} but the content is text, not {expected}")
        return Text(path, size_bytes)
    if suffix in MEDIA_EXTENSIONS:
        noun = _kind_of_extension(suffix).removeprefix("an ")  # "a readable image file", not "a readable an image"
        raise MediaError(path, f"named {suffix} but the content is not a readable {noun} file")
    raise MediaError(path, f"not a supported image, audio, video or text file (starts with {head[:8].hex(' ')})")


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


def _load_soundfile(path: Path, fmt: str, size_bytes: int) -> Audio:
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except Exception as e:  # soundfile.LibsndfileError
        raise MediaError(path, f"corrupt {fmt} audio: {e}") from None
    if info.frames <= 0:
        raise MediaError(path, "audio contains no samples")
    if info.samplerate <= 0 or info.channels <= 0:
        raise MediaError(path, f"audio header gives {info.samplerate} Hz and {info.channels} channels")
    codec = info.subtype.lower() if info.subtype else fmt
    return Audio(path, fmt, codec, int(info.samplerate), int(info.channels), int(info.frames), size_bytes)


def _load_av(path: Path, fmt: str, size_bytes: int) -> Audio | Video:
    import av

    try:
        with _av_open(path) as container:
            videos = [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
            audio = _av_audio_meta(path, fmt, container, size_bytes)
            if videos:
                return _av_video_meta(path, fmt, container, videos[0], audio, size_bytes)
    except av.FFmpegError as e:
        raise MediaError(path, f"corrupt or unsupported {fmt} container: {e}") from None
    if audio is None:
        raise MediaError(path, f"{fmt} container has no audio or video stream")
    return audio


def _seconds(value: int | None, time_base: Fraction | None) -> float:
    return float(value * time_base) if value and time_base else 0.0


def _av_audio_meta(path: Path, fmt: str, container: Any, size_bytes: int) -> Audio | None:
    if not container.streams.audio:
        return None
    stream = container.streams.audio[0]
    ctx = stream.codec_context
    if ctx is None:
        raise MediaError(path, "audio stream uses a codec FFmpeg does not know")
    rate = int(ctx.sample_rate or 0)
    channels = int(ctx.channels or 0)
    duration = _seconds(stream.duration, stream.time_base) or (container.duration or 0) / 1_000_000
    if rate <= 0 or channels <= 0:
        raise MediaError(path, f"audio stream gives {rate} Hz and {channels} channels")
    if duration <= 0:
        raise MediaError(path, "audio stream has no duration (zero-length or unreadable)")
    return Audio(path, fmt, ctx.name, rate, channels, round(duration * rate), size_bytes, stream.index)


def _av_video_meta(path: Path, fmt: str, container: Any, stream: Any, audio: Audio | None, size_bytes: int) -> Video:
    ctx = stream.codec_context
    if ctx is None:
        raise MediaError(path, "video stream uses a codec FFmpeg does not know")
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    fps = float(rate) if rate else 0.0
    duration = _seconds(stream.duration, stream.time_base) or (container.duration or 0) / 1_000_000
    frames = int(stream.frames or 0) or round(duration * fps)
    if not ctx.width or not ctx.height:
        raise MediaError(path, "video stream has no frame size")
    if frames <= 0 or duration <= 0:
        raise MediaError(path, "video stream has no frames")
    return Video(
        path, fmt, ctx.name, int(ctx.width), int(ctx.height), fps, frames, duration, size_bytes, stream.index, audio
    )


# ------------------------------------------------------------------------------------------------------- batches
def iter_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path | MediaError]:
    """Files named by ``paths``, folders walked recursively in sorted order (hidden entries skipped).

    Every problem is yielded as a :class:`MediaError` instead of raised, so a batch can report it and go on: a
    missing path, a folder with no files, a folder that cannot be listed ("cannot read folder: Permission denied",
    for the folder itself or any folder under it), and a FIFO, socket or device, which is refused without being
    opened. Symbolic links to folders are not followed (a link loop would never end).
    """
    for raw in paths:
        path = Path(raw)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            if os.path.islink(path):
                yield path  # a dangling link: load() names it
            else:
                yield MediaError(path, "no such file or folder")
            continue
        except OSError as e:
            yield MediaError(path, f"cannot read: {e.strerror}")
            continue
        if stat.S_ISDIR(mode):
            found = False
            for item in _walk(path):
                found = True
                yield item
            if not found:
                yield MediaError(path, "folder contains no media files")
        elif stat.S_ISREG(mode):
            yield path
        else:
            yield MediaError(path, _not_regular(mode))


def _walk(folder: Path) -> Iterator[Path | MediaError]:
    """Files under ``folder``, depth first: each folder's own files (sorted), then its subfolders'. A folder that
    cannot be listed is yielded as an error naming it, and the walk goes on."""
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as listing:
                entries = sorted((e for e in listing if not e.name.startswith(".")), key=lambda e: e.name)
        except OSError as e:
            yield MediaError(current, f"cannot read folder: {e.strerror}")
            continue
        subfolders: list[Path] = []
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append(path)
                elif entry.is_symlink():
                    if not entry.is_dir():  # links to folders are not followed; the rest are load()'s to judge
                        yield path
                elif entry.is_file(follow_symlinks=False):
                    yield path
                else:
                    yield MediaError(path, _not_regular(entry.stat(follow_symlinks=False).st_mode))
            except OSError as e:
                yield MediaError(path, f"cannot read: {e.strerror}")
        pending.extend(reversed(subfolders))


def _not_regular(mode: int) -> str:
    kinds = {
        stat.S_IFIFO: "a FIFO (named pipe)",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
    }
    what = kinds.get(stat.S_IFMT(mode), "a special file")
    return f"is {what}, not a regular file; only regular files are read"


def _check_regular(path: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise MediaError(path, "is a folder, not a file (use mmtok.scan() for folders)")
    if not stat.S_ISREG(mode):
        raise MediaError(path, _not_regular(mode))


def scan(
    paths: Iterable[str | os.PathLike[str]], *, kind: str | None = None, max_pixels: int = MAX_IMAGE_PIXELS
) -> Iterator[Media | MediaError]:
    """``load()`` every file under ``paths``; bad items are yielded as :class:`MediaError`, never raised."""
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            yield item
            continue
        try:
            yield load(item, kind=kind, max_pixels=max_pixels)
        except MediaError as e:
            yield e
