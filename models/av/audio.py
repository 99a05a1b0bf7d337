"""Audio into token features: a log-mel spectrogram (torchaudio's mel scale, computed in one pass over cache-sized
runs of frames) whose hop follows the token rate, ``frames_per_token`` frames a token, streamed block by block."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mmtok.errors import TokenError
from mmtok.models.av.config import (
    LOG_FLOOR,
    MIN_HOP,
    MIN_TOKENS_PER_SECOND,
    AVConfig,
)


@dataclass(frozen=True)
class MelSpec:
    """STFT / mel settings for one token rate."""

    hop: int
    n_fft: int
    win: int

    @classmethod
    def for_rate(cls, cfg: AVConfig, rate: float) -> MelSpec:
        """The settings for ``rate`` tokens per second; a rate whose hop would be under 16 samples (250/s at 16 kHz
        and 4 frames per token) is refused rather than run at another rate."""
        fastest = cfg.sample_rate_hz / (MIN_HOP * cfg.frames_per_token)
        if not MIN_TOKENS_PER_SECOND <= rate <= fastest:
            raise TokenError(f"tokens_per_second must be from {MIN_TOKENS_PER_SECOND:g} to {fastest:g}, got {rate!r}")
        hop = round(cfg.sample_rate_hz / (rate * cfg.frames_per_token))
        n_fft = max(256, 2 ** math.ceil(math.log2(4 * hop)))
        return cls(hop, n_fft, min(n_fft, 4 * hop))


@functools.lru_cache(maxsize=16)
def _mel_tables(sample_rate: int, n_fft: int, win: int, n_mels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchaudio's Hann window (zero-padded to ``n_fft`` and centred, as ``torch.stft`` pads it) ``[n_fft]`` and its
    Slaney mel filterbank ``[n_fft // 2 + 1, n_mels]``: the tables of ``MelSpectrogram(center=False, power=2)``."""
    import torchaudio.transforms as T

    mel = T.MelSpectrogram(
        sample_rate=sample_rate,
        n_fft=n_fft,
        win_length=win,
        hop_length=win // 4,
        n_mels=n_mels,
        power=2.0,
        center=False,
        norm="slaney",
        mel_scale="slaney",
    )
    left = (n_fft - win) // 2
    window = F.pad(mel.spectrogram.window, (left, n_fft - win - left))
    return window.contiguous(), mel.mel_scale.fb.contiguous()


class AudioFeatures:
    """Streaming log-mel features grouped into tokens: feed blocks of samples, get ``[n, A]`` token features.

    The mel frames are what torchaudio's ``MelSpectrogram(center=False, power=2)`` gives, bit for bit, made in one
    pass over cache-sized runs of frames: windowed frames -> real FFT -> |X|^2 as re^2 + im^2 -> filterbank matmul
    straight into the frame-major output, then log. Frame-major ``[frames, n_mels]`` rows group into tokens by a
    reshape, without the transposes and copies of the channel-major spectrogram."""

    frames_per_pass = 256  # frames windowed and transformed at once: ~1 MB per buffer, within a core's L2

    def __init__(self, cfg: AVConfig, rate: float) -> None:
        self.cfg = cfg
        self.spec = MelSpec.for_rate(cfg, rate)
        self.window, self.filters = _mel_tables(cfg.sample_rate_hz, self.spec.n_fft, self.spec.win, cfg.n_mels)
        self.carry = torch.zeros(self.spec.n_fft // 2)  # as centre padding for the first frame
        self.frames: list[torch.Tensor] = []  # log-mel rows [F, n_mels] not yet grouped into tokens
        self.samples = 0
        self.emitted = 0  # tokens returned so far

    def _frames(self, x: torch.Tensor) -> torch.Tensor:
        """Log-mel frames ``[count, n_mels]`` of ``x`` (1-D), hop-aligned; keeps the unconsumed tail."""
        n_fft, hop = self.spec.n_fft, self.spec.hop
        if len(x) < n_fft:
            self.carry = x
            return torch.empty(0, self.cfg.n_mels)
        windows = x.unfold(0, n_fft, hop)  # (count, n_fft), a view
        count = windows.shape[0]
        mel = torch.empty(count, self.cfg.n_mels)
        for start in range(0, count, self.frames_per_pass):
            stop = min(count, start + self.frames_per_pass)
            spectrum = torch.fft.rfft(windows[start:stop] * self.window)  # (p, n_fft // 2 + 1) complex
            squares = torch.view_as_real(spectrum).square()  # (p, n_freq, 2)
            torch.mm(squares[..., 0] + squares[..., 1], self.filters, out=mel[start:stop])
        self.carry = x[count * hop :]
        return mel.add_(LOG_FLOOR).log_()

    def push(self, block: torch.Tensor) -> torch.Tensor:
        """Samples ``[1, n]`` (mono, at the config's rate) -> token features ``[k, A]`` now complete."""
        self.samples += block.shape[-1]
        self.frames.append(self._frames(torch.cat([self.carry, block.reshape(-1)])))
        return self._tokens(final=False)

    def finish(self) -> torch.Tensor:
        """The remaining tokens: the last partial token is padded (a clip shorter than a token gives one token)."""
        self.frames.append(self._frames(torch.cat([self.carry, torch.zeros(self.spec.n_fft // 2)])))
        return self._tokens(final=True)

    def _tokens(self, final: bool) -> torch.Tensor:
        frames = self.frames[0] if len(self.frames) == 1 else torch.cat(self.frames)  # (F, n_mels)
        per = self.cfg.frames_per_token
        if final:
            total = max(1, math.ceil(self.samples / (self.spec.hop * per)))
            wanted = max(0, total - self.emitted)
        else:
            wanted = frames.shape[0] // per
        self.emitted += wanted
        if frames.shape[0] < wanted * per:
            frames = F.pad(frames, (0, 0, 0, wanted * per - frames.shape[0]), value=math.log(LOG_FLOOR))
        used, self.frames = frames[: wanted * per], [frames[wanted * per :]]
        return used.reshape(wanted, self.cfg.audio_dim)  # (tokens, frames_per_token x n_mels), frame after frame
