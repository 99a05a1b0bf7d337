"""Voice activity detection: Silero VAD's ONNX model (``silero_vad/data/silero_vad.onnx`` inside the ``silero-vad``
wheel), run through onnxruntime directly: no torch.hub, no pickle.

The model reads 16 kHz mono audio in 512-sample windows (32 ms), each with the 64 samples before it as context,
and carries an LSTM state from window to window; it returns one speech probability per window. Speech is where the
probability rises above ``threshold`` and lasts until it falls below ``threshold - 0.15`` (Silero's own hysteresis).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmtok.errors import EvalError

SAMPLE_RATE_HZ = 16_000
WINDOW_SAMPLES = 512  # 32 ms
CONTEXT_SAMPLES = 64
MODEL = "Silero VAD v6 (silero-vad wheel, ONNX via onnxruntime)"


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def model_path() -> Path:
    try:
        import silero_vad
    except ImportError:
        raise EvalError("trimming silence needs `pip install silero-vad` (mmtok's eval extra)") from None
    path = Path(silero_vad.__file__).parent / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise EvalError(f"the silero-vad package has no {path.name}; reinstall it")
    return path


@functools.cache
def _session() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise EvalError("trimming silence needs `pip install onnxruntime` (mmtok's eval extra)") from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one 32-ms window at a time: threads only add overhead
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])


def speech_probabilities(samples: np.ndarray) -> np.ndarray:
    """One speech probability per 32-ms window of mono 16-kHz ``samples`` (float32 [T])."""
    session = _session()
    samples = np.asarray(samples, dtype=np.float32)
    padded = np.concatenate([samples, np.zeros((-len(samples)) % WINDOW_SAMPLES, np.float32)])
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(CONTEXT_SAMPLES, np.float32)
    rate = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
    out = np.empty(len(padded) // WINDOW_SAMPLES, np.float32)
    for i in range(len(out)):
        window = padded[i * WINDOW_SAMPLES : (i + 1) * WINDOW_SAMPLES]
        x = np.concatenate([context, window])[None]  # (1, 576)
        prob, state = session.run(None, {"input": x, "state": state, "sr": rate})
        out[i] = prob[0, 0]
        context = window[-CONTEXT_SAMPLES:]
    return out


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
