"""Voice activity detection: Silero VAD v6 as ONNX, the copy the ``faster-whisper`` wheel ships
(``faster_whisper/assets/silero_vad_v6.onnx``), run through onnxruntime directly: no torch, no torch.hub, no pickle.

The ``silero-vad`` wheel requires torch, so the shrink extra takes faster-whisper's copy (faster-whisper is its ASR
anyway). The two are exports of different v6 releases whose window probabilities differ; the stretches of speech
they find agree within 0.1 s on the speech samples and held-out clips (``tests/test_torch_free_measures.py``). The
model reads 16 kHz mono audio in 512-sample windows (32 ms), each with the 64 samples before
it as context; its LSTM runs over the windows in one call, with the state carried from window to window inside the
graph; it returns one speech probability per window. Speech is where the probability rises above ``threshold`` and
lasts until it falls below ``threshold - 0.15`` (Silero's own hysteresis).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmtok.errors import EvalError
from mmtok.extras import MissingExtra, installed, require

SAMPLE_RATE_HZ = 16_000
WINDOW_SAMPLES = 512  # 32 ms
CONTEXT_SAMPLES = 64
MODEL = "Silero VAD v6 (faster-whisper's copy, ONNX via onnxruntime)"
FEATURE = "trimming silence (Silero VAD)"
BATCH_WINDOWS = 10_000  # windows per call (5.3 min of audio, 23 MB of input)


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def model_path() -> Path:
    """The ONNX file inside the installed faster-whisper package (found without importing faster-whisper)."""
    import importlib.util

    if not installed("faster_whisper"):
        raise MissingExtra(FEATURE, "shrink", "faster_whisper")
    origin = importlib.util.find_spec("faster_whisper").origin  # type: ignore[union-attr]
    path = Path(origin).parent / "assets" / "silero_vad_v6.onnx"  # type: ignore[arg-type]
    if not path.is_file():
        raise EvalError(f"the faster-whisper package has no {path.name}; reinstall it")
    return path


@functools.cache
def _session() -> Any:
    onnxruntime = require("onnxruntime", FEATURE)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # a small network: threads only add overhead
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])


def speech_probabilities(samples: np.ndarray) -> np.ndarray:
    """One speech probability per 32-ms window of mono 16-kHz ``samples`` (float32 [T])."""
    session = _session()
    samples = np.asarray(samples, dtype=np.float32)
    padded = np.concatenate([samples, np.zeros((-len(samples)) % WINDOW_SAMPLES, np.float32)])
    windows = padded.reshape(-1, WINDOW_SAMPLES)  # (N, 512)
    if not len(windows):
        return np.zeros(0, np.float32)
    context = np.concatenate([np.zeros((1, CONTEXT_SAMPLES), np.float32), windows[:-1, -CONTEXT_SAMPLES:]])
    x = np.concatenate([context, windows], axis=1)  # (N, 576): each window after the 64 samples before it
    h = c = np.zeros((1, 1, 128), np.float32)
    probs = []
    for start in range(0, len(x), BATCH_WINDOWS):  # bounded memory for long recordings; the state carries over
        p, h, c = session.run(None, {"input": x[start : start + BATCH_WINDOWS], "h": h, "c": c})
        probs.append(np.asarray(p, np.float32).reshape(-1))
    return np.concatenate(probs)


def speech_segments(
    samples: np.ndarray, threshold: float = 0.5, min_speech_s: float = 0.1, merge_gap_s: float = 0.1
) -> list[Segment]:
    """Stretches of speech in mono 16-kHz ``samples``: hysteresis on the window probabilities, bursts shorter than
    ``min_speech_s`` dropped, gaps shorter than ``merge_gap_s`` closed."""
    probs = speech_probabilities(samples)
    window_s = WINDOW_SAMPLES / SAMPLE_RATE_HZ
    low = max(threshold - 0.15, 0.01)
    segments: list[Segment] = []
    start: int | None = None
    for i, p in enumerate(probs):
        if start is None and p >= threshold:
            start = i
        elif start is not None and p < low:
            segments.append(Segment(start * window_s, i * window_s))
            start = None
    if start is not None:
        segments.append(Segment(start * window_s, len(probs) * window_s))
    merged: list[Segment] = []
    for seg in segments:
        if merged and seg.start_s - merged[-1].end_s < merge_gap_s:
            merged[-1] = Segment(merged[-1].start_s, seg.end_s)
        else:
            merged.append(seg)
    end = len(samples) / SAMPLE_RATE_HZ
    return [Segment(s.start_s, min(s.end_s, end)) for s in merged if s.duration_s >= min_speech_s]
