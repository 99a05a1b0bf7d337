"""The media types: ``Image``, ``Audio``, ``Video``, ``Text``, with their lazy decoders.

Each holds the metadata ``load()`` read from the file's headers and decodes on request (``Image.to_tensor()``,
``Audio.waveform()``, ``Video.frames()``); every decoder failure becomes a :class:`~mmtok.errors.MediaError` that
names the file.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Union

from mmtok.errors import MediaError, ffmpeg_reason
from mmtok.extras import MissingExtra
from mmtok.files import UnreadableFile, open_checked
from mmtok.media.resampling import resample

REDUCE_ABOVE_PIXELS = 4096 * 4096  # images decoded for a model input larger than this are box-reduced first
MAX_TEXT_BYTES = 64 << 20  # a text file read whole (as data files are, mmtok.files)
MAX_DECODE_SECONDS = 4 * 3600.0  # a whole waveform decoded at once (waveform(), to_tensor): blocks() streams any length

if TYPE_CHECKING:
    import numpy as np
    import PIL.Image
    import torch

    from mmtok.media.document import Document

# Images claiming more pixels than this are refused before any decoding (decompression-bomb guard). It equals the
# size at which Pillow itself raises DecompressionBombError (2 x Image.MAX_IMAGE_PIXELS), about 13,377 x 13,377.
MAX_IMAGE_PIXELS = 178_956_970

IMAGE_EXTENSIONS = frozenset(
    {".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
    | {".avif", ".heic", ".heif", ".hif"}
)
AUDIO_EXTENSIONS = frozenset({".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aac", ".m4a", ".aif", ".aiff"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi", ".ogv"})
MEDIA_EXTENSIONS = IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS

KINDS = ("image", "audio", "video", "text", "document")  # document: a PDF (mmtok.media.document)


def _source(path: Path | None) -> str:
    return str(path) if path is not None else "<memory>"


FOLDER_REASON = "is a folder, not a file (folders are walked by scan() in Python, and as inputs on the command line)"


def checked_file(path: Path | None) -> io.FileIO:
    """``path`` opened by :func:`mmtok.files.open_checked` (a regular file, never waited on), as a binary file
    named by the path; what cannot be opened is a :class:`MediaError`. Everything read of a media file, by mmtok or
    by PyAV, libsndfile or Pillow, is read through such a file, never by name: a path swapped for a FIFO after its
    check cannot hang a read."""
    try:
        return open_checked(path)  # type: ignore[arg-type]
    except UnreadableFile as e:
        raise MediaError(path, FOLDER_REASON if e.folder else e.reason) from None


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
        speed-up when the image is going to be resized down anyway. An image of more than ``REDUCE_ABOVE_PIXELS``
        is then box-reduced by Pillow to no less than twice that size before anything is made of its pixels (a
        13,000 px PNG once took 7 GB on its way to 64 tokens); smaller ones are left exactly as decoded.
        """
        import PIL.Image
        import PIL.ImageOps

        if self.data is not None:
            return PIL.Image.fromarray(self.data.permute(1, 2, 0).numpy())
        with warnings_naming(self.path):
            return self._decode_pil(draft_size)

    def _decode_pil(self, draft_size: tuple[int, int] | None) -> PIL.Image.Image:
        import PIL.Image
        import PIL.ImageOps

        try:
            with checked_file(self.path) as f, PIL.Image.open(f, formats=pillow_formats(self.format)) as im:
                if draft_size is not None and im.format == "JPEG":
                    # draft() works in stored orientation; swap the request for rotated images.
                    dw, dh = draft_size if self.orientation not in (5, 6, 7, 8) else draft_size[::-1]
                    im.draft("RGB", (dw, dh))
                im.load()
                oriented = PIL.ImageOps.exif_transpose(im)
                if draft_size is not None and oriented.width * oriented.height > REDUCE_ABOVE_PIXELS:
                    factor = min(oriented.width // (2 * draft_size[0]), oriented.height // (2 * draft_size[1]))
                    if factor >= 2:
                        oriented = oriented.reduce(factor)
                return _to_rgb(oriented)
        except (MediaError, MissingExtra):
            raise
        except Exception as e:  # Pillow raises many types (OSError, SyntaxError, ValueError, ...) on bad data
            raise MediaError(self.path, f"cannot decode {self.format} image: {e}") from None

    def to_tensor(self, draft_size: tuple[int, int] | None = None) -> torch.Tensor:
        """Decoded pixels, uint8 ``[3, H, W]`` RGB."""
        if self.data is not None:
            return self.data
        return _pil_to_tensor(self.to_pil(draft_size))

    def info(self) -> dict[str, Any]:
        return _info(self, fmt=self.format, width=self.width, height=self.height, orientation=self.orientation)


def pillow_formats(fmt: str) -> list[str] | None:
    """The Pillow plugin to open an image of ``fmt`` with (None: let Pillow find it). HEIF/HEIC goes through
    pillow-heif's opener, registered on the first HEIF file (so other runs do not pay for its import); AVIF through
    Pillow's own, by name, since pillow-heif's would also claim an AVIF branded mif1 and cannot decode AV1.
    pillow-heif comes with the ``heif`` extra (and those that decode: shrink, models): without it, decoding a HEIF
    is a :class:`~mmtok.extras.MissingExtra` (its size is read from its header all the same)."""
    if fmt == "heif":
        _register_heif()
        return ["HEIF"]
    return ["AVIF"] if fmt == "avif" else None


@functools.cache
def _register_heif() -> None:
    from mmtok.extras import require

    require("pillow_heif", "decoding a HEIF/HEIC image").register_heif_opener()


@contextlib.contextmanager
def warnings_naming(path: Any) -> Iterator[None]:
    """Warnings raised while ``path`` is read (Pillow's DecompressionBombWarning, a corrupt EXIF block, an audio or
    video decoder's) re-raised naming it, so the one warning line says which file; a message that already starts
    with the path is left as it is."""
    prefix = f"{path}:"
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:  # also when reading the file failed: its warnings come before its error
        for w in caught:
            message = str(w.message)
            warnings.warn(message if message.startswith(prefix) else f"{prefix} {message}", w.category, stacklevel=3)


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
    length_from_stream: bool = False  # num_samples is the stream's own declared duration (checked when decoded)

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

    def samples(self, sample_rate_hz: int | None = None, mono: bool = False) -> np.ndarray:
        """Decoded samples as numpy float32 ``[C, T]`` in [-1, 1] (``[1, T]`` with ``mono``), resampled on request:
        what :meth:`waveform` holds, without torch (the core's speech measures run on this)."""
        import numpy as np

        if self.data is None and self.duration_s > MAX_DECODE_SECONDS:  # sized from the header: checked first
            raise MediaError(
                self.path, f"declares {self.duration_s:,.0f} s: at most {MAX_DECODE_SECONDS:,.0f} s are decoded whole"
            )
        wave = np.asarray(self.data.detach().cpu().numpy()) if self.data is not None else self._decode()
        if mono and wave.shape[0] > 1:
            wave = wave.mean(axis=0, keepdims=True, dtype=np.float32)
        if sample_rate_hz is not None and sample_rate_hz != self.sample_rate_hz:
            wave = resample(wave, self.sample_rate_hz, sample_rate_hz)
        return wave

    def waveform(self, sample_rate_hz: int | None = None, mono: bool = False) -> torch.Tensor:
        """Decoded samples, float32 ``[C, T]`` in [-1, 1] (``[1, T]`` with ``mono``), resampled on request."""
        import torch

        if self.data is not None and not mono and sample_rate_hz in (None, self.sample_rate_hz):
            return self.data
        return torch.from_numpy(self.samples(sample_rate_hz, mono))

    def blocks(
        self, block_seconds: float = 30.0, sample_rate_hz: int | None = None, mono: bool = True
    ) -> Iterator[torch.Tensor]:
        """Stream the samples in blocks of ``block_seconds`` (``[C, n]`` float32), so memory stays bounded for any
        length. Files are decoded and resampled by FFmpeg's stateful resampler, so block edges are seamless."""
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
        yield from self._av_blocks(block, rate, mono)

    def _av_blocks(self, block: int, rate: int, mono: bool) -> Iterator[torch.Tensor]:
        """``blocks`` through FFmpeg: decoded and resampled at ``rate``, cut into ``block``-sample pieces."""
        import av
        import numpy as np
        import torch

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
                resampler = av.AudioResampler(format="flt", layout="mono" if mono else f"{channels}c", rate=rate)
                frames = container.decode(stream)
                for frame in [*frames, None]:
                    for out in _resampled(self.path, resampler, frame):
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
                        wave = np.ascontiguousarray(chunk, dtype=np.float32)
                        _check_samples(self.path, wave)
                        sent += wave.shape[1]
                        yield torch.from_numpy(wave)
        except av.FFmpegError as e:
            raise MediaError(self.path, f"audio stream is corrupt: {ffmpeg_reason(e)}") from None
        if declared is not None and self.length_from_stream:
            from mmtok.media.sampling import check_not_cut_short

            check_not_cut_short(self.path, "audio", sent / rate, declared / rate)

    def _soundfile_blocks(self, block: int, mono: bool) -> Iterator[torch.Tensor]:
        import soundfile as sf
        import torch

        try:
            with checked_file(self.path) as f:
                for array in sf.blocks(f, blocksize=block, dtype="float32", always_2d=True):  # (n, C)
                    wave = array.T.copy()
                    if mono and wave.shape[0] > 1:
                        wave = wave.mean(axis=0, keepdims=True, dtype="float32")
                    _check_samples(self.path, wave)
                    yield torch.from_numpy(wave)
        except MediaError:
            raise
        except Exception as e:  # soundfile.LibsndfileError / RuntimeError on corrupt data
            raise MediaError(self.path, f"cannot decode {self.format} audio: {e}") from None

    def _decode(self) -> np.ndarray:
        if self.stream_index is None:
            import soundfile as sf

            try:
                with checked_file(self.path) as f:
                    array, _ = sf.read(f, dtype="float32", always_2d=True)  # (T, C)
            except MediaError:
                raise
            except Exception as e:  # soundfile.LibsndfileError / RuntimeError on corrupt data
                raise MediaError(self.path, f"cannot decode {self.format} audio: {e}") from None
            wave = array.T.copy()
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


def _check_samples(path: Path | None, wave: Any) -> None:
    """Refuse NaN or infinite samples (``wave``: a numpy array or a torch tensor)."""
    import numpy as np

    finite = bool(wave.isfinite().all()) if hasattr(wave, "isfinite") else bool(np.isfinite(wave).all())
    if not finite:
        raise MediaError(path, "audio contains NaN or infinite samples")


@contextlib.contextmanager
def _av_open(source: Path | io.FileIO | None) -> Iterator[Any]:
    """A container for reading, through ``source`` (a file already checked, or a path: :func:`checked_file`); tags
    in a broken encoding are dropped rather than failing the file."""
    import av

    if isinstance(source, io.IOBase):
        with av.open(source, metadata_errors="ignore") as container:
            yield container
        return
    with checked_file(source) as f, av.open(f, metadata_errors="ignore") as container:
        yield container


def _padding_samples(rate: int) -> int:
    """How far decoded audio may run past the header's length and still be codec padding (two 1,024-sample AAC
    frames at 44.1 kHz, scaled to ``rate``)."""
    return round(2048 * rate / 44_100) + 1


def _resampled(path: Path | None, resampler: Any, frame: Any) -> list[Any]:
    """``resampler.resample(frame)``; a frame whose sample format, layout or rate is not the stream's first (PyAV
    refuses it: "Frame does not match AudioResampler setup") is a damaged stream, a :class:`MediaError`."""
    try:
        return resampler.resample(frame)
    except ValueError as e:
        raise MediaError(path, f"audio stream changes its sample format, layout or rate midway ({e})") from None


def _planar(path: Path | None, frame: Any, channels: int) -> np.ndarray:
    """A packed float32 frame as ``(C, n)``. Packed, because PyAV's planar ``to_ndarray`` reads past the eight data
    pointers of a frame with more than eight planes (a 10-channel stream crashed the process)."""
    got = frame.layout.nb_channels
    if got != channels:
        raise MediaError(path, f"audio stream switches from {channels} to {got} channels midway")
    return frame.to_ndarray().reshape(-1, channels).T  # (1, n x C), sample after sample -> (C, n)


def _decode_av_audio(path: Path | None, stream_index: int, fmt: str, channels: int, rate: int) -> np.ndarray:
    import av
    import numpy as np

    pieces: list[np.ndarray] = []
    try:
        with _av_open(path) as container:
            stream = container.streams[stream_index]
            # Packed float32 at the header's layout and rate, even if a damaged stream changes them midway.
            resampler = av.AudioResampler(format="flt", layout=f"{channels}c", rate=rate)
            for frame in container.decode(stream):
                pieces.extend(_planar(path, out, channels) for out in _resampled(path, resampler, frame))
            pieces.extend(_planar(path, out, channels) for out in _resampled(path, resampler, None))
    except av.FFmpegError as e:
        if not pieces:
            raise MediaError(path, f"cannot decode {fmt} audio: {ffmpeg_reason(e)}") from None
        raise MediaError(
            path, f"audio stream is corrupt after {sum(p.shape[1] for p in pieces)} samples: {e}"
        ) from None
    if not pieces:
        raise MediaError(path, "audio contains no samples")
    return np.concatenate(pieces, axis=1).astype(np.float32, copy=False)


# ----------------------------------------------------------------------------------------------------------- Video
class VideoChunk(NamedTuple):
    times: torch.Tensor  # float64 [n], seconds from the start of the stream
    frames: torch.Tensor  # uint8 [n, 3, H, W]


def _video_chunk(times: list[float], arrays: list[np.ndarray]) -> VideoChunk:
    """Output times and RGB frames ``(H, W, 3)`` -> a chunk with frames ``[n, 3, H, W]``."""
    import numpy as np
    import torch

    frames = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()  # (n, 3, H, W)
    return VideoChunk(torch.tensor(times, dtype=torch.float64), frames)


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
    duration_from_stream: bool = False  # duration_s is the video stream's own (checked against the frames decoded)

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
        from av.video.reformatter import VideoReformatter

        from mmtok.media.sampling import PresentationTimes, check_decoded, decode_error

        rate = float(fps) if fps else (self.fps or 25.0)
        if rate <= 0 or chunk_frames <= 0:
            raise MediaError(self.path, f"fps and chunk_frames must be positive, got {fps}, {chunk_frames}")
        width, height = size if size is not None else (self.width, self.height)
        sampler = PresentationTimes(rate, self.fps)
        reformatter = VideoReformatter()  # one scaler context for the stream (frame.reformat builds one per call)
        times: list[float] = []
        arrays: list[np.ndarray] = []

        def take(frame: Any, count: int) -> Iterator[VideoChunk]:
            """``count`` copies of ``frame`` in RGB at the output size; full chunks as they fill."""
            if count:
                image = reformatter.reformat(frame, width=width, height=height, format="rgb24").to_ndarray()
                times.extend(sampler.times(count))
                arrays.extend([image] * count)  # (H, W, 3) each
            while len(arrays) >= chunk_frames:
                yield _video_chunk(times[:chunk_frames], arrays[:chunk_frames])
                del times[:chunk_frames], arrays[:chunk_frames]

        try:
            with _av_open(self.path) as container:
                stream = container.streams[self.stream_index]
                stream.thread_type = "AUTO"
                for frame in container.decode(stream):
                    yield from take(*sampler.push(frame))
                yield from take(*sampler.finish())
        except av.FFmpegError as e:
            raise decode_error(self, sampler, e) from None
        check_decoded(self, sampler)
        if arrays:
            yield _video_chunk(times, arrays)

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
        if self.size_bytes > MAX_TEXT_BYTES:  # the stat size, checked before reading
            raise MediaError(self.path, f"{self.size_bytes:,} bytes of text: at most {MAX_TEXT_BYTES:,} are read")
        try:
            with checked_file(self.path) as f:
                data = f.read(MAX_TEXT_BYTES + 1)
            if len(data) > MAX_TEXT_BYTES:
                raise MediaError(self.path, f"grew past {MAX_TEXT_BYTES:,} bytes of text while being read")
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise MediaError(self.path, f"not valid UTF-8 text (byte {e.start}): {e.reason}") from None
        except OSError as e:
            raise MediaError(self.path, f"cannot read: {e.strerror}") from None

    def info(self) -> dict[str, Any]:
        return _info(self, fmt=self.format)


Media = Union[Image, Audio, Video, Text, "Document"]  # a runtime alias for annotations (Document: a PDF)


def _info(media: Media, *, fmt: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"path": _source(media.path), "kind": media.kind, "format": fmt}
    out.update(fields)
    out["bytes"] = media.size_bytes
    return out
