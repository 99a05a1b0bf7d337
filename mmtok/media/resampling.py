"""Band-limited resampling without torch: torchaudio's windowed-sinc resampler written in numpy.

The core decodes and resamples audio with no torch installed (the shrink extra's speech measures read 16-kHz mono
through it), and the research parts get the same samples they had from ``torchaudio.functional.resample``
(``tests/test_torch_free_measures.py``: equal within 5e-5 on real speech at the common rates).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def resample(waveform: Any, from_hz: int, to_hz: int) -> Any:
    """Band-limited resampling of ``waveform`` (``[..., T]``, a numpy array or a torch tensor, returned as the same
    kind) from ``from_hz`` to ``to_hz``: torchaudio's windowed sinc (Hann window, 6 zero crossings, roll-off 0.99)
    written in numpy, so the core resamples without torch and both give the same samples
    (``tests/test_media.py``)."""
    if from_hz == to_hz:
        return waveform
    if hasattr(waveform, "detach"):  # a torch tensor: resampled in numpy, returned on its device
        import torch

        array = waveform.detach().cpu().numpy()
        return torch.from_numpy(_sinc_resample(array, int(from_hz), int(to_hz))).to(waveform.device)
    return _sinc_resample(waveform, int(from_hz), int(to_hz))


def _sinc_resample(wave: np.ndarray, from_hz: int, to_hz: int, zeros: int = 6, rolloff: float = 0.99) -> np.ndarray:
    """torchaudio.functional.resample's kernel and strided convolution (float32 like it): each output phase is a
    windowed sinc over the input, the input advancing ``from_hz / gcd`` samples per ``to_hz / gcd`` outputs."""
    import math

    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    gcd = math.gcd(from_hz, to_hz)
    orig, new = from_hz // gcd, to_hz // gcd
    base = min(orig, new) * rolloff
    width = math.ceil(zeros * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64)[None] / orig  # (1, K)
    t = (np.arange(0, -new, -1) / new).astype(np.float32).astype(np.float64)[:, None] + idx  # (new, K), as torch
    t = np.clip(t * base, -zeros, zeros)
    window = np.cos(t * math.pi / zeros / 2) ** 2
    t *= math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        kernel = np.where(t == 0, 1.0, np.sin(t) / t)
    kernel = (kernel * window * (base / orig)).astype(np.float32)  # (new, K)
    shape = wave.shape
    flat = np.asarray(wave, dtype=np.float32).reshape(-1, shape[-1])  # (B, T)
    padded = np.pad(flat, ((0, 0), (width, width + orig)))
    frames = sliding_window_view(padded, kernel.shape[1], axis=1)[:, ::orig]  # (B, n, K)
    out = (frames @ kernel.T).reshape(flat.shape[0], -1)  # (B, n * new)
    target = math.ceil(new * shape[-1] / orig)
    return np.ascontiguousarray(out[:, :target]).reshape(*shape[:-1], -1)
