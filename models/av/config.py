"""av-tiny's configuration: :class:`AVConfig` (each field bounded by :data:`AV_LIMITS` before anything is built)
and the limits every part shares (token rates, media length, search block)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mmtok.models import checkpoint

CLASS_PATH = "mmtok.models.av:AVTokenizer"
MODALITY_INDEX = {"audio": 0, "video": 1}
LOG_FLOOR = 1e-6
DISTANCE_FLOOR = 1e-8  # vector-quantize-pytorch clamps squared code distances here before the root


AV_LIMITS = {  # what a config may ask for (checked before anything is built)
    "sample_rate_hz": (1000, 384_000),
    "n_mels": (1, 512),
    "frames_per_token": (1, 64),
    "video_side": (2, 256),
    "appearance_grid": (1, 64),
    "d_model": (1, 8192),
    "max_positions": (1, 1 << 20),
    "codebook_size": (1, 1 << 20),
    "num_quantizers": (1, 64),
    "decoder_hidden": (1, 65536),
    "griffin_lim_iters": (1, 1024),
}


@dataclass
class AVConfig:
    sample_rate_hz: int = 16_000
    tokens_per_second: float = 16.0  # default token rate; any rate works at run time
    n_mels: int = 80
    frames_per_token: int = 4  # mel frames per audio token (the hop is 1 / (rate x frames_per_token) s)
    video_side: int = 32  # frames are compared at video_side x video_side grey: video_side^2 motion features
    appearance_grid: int = 4  # plus the mean colour of a grid x grid layout
    d_model: int = 256
    max_positions: int = 256  # learned position table; longer sequences are chunked, never truncated
    codebook_size: int = 1024  # codes per codebook level
    num_quantizers: int = 8  # residual codebook levels; encoding may use only the first few (fewer bits)
    decoder_hidden: int = 512
    griffin_lim_iters: int = 48
    train_rates: list[float] = field(default_factory=lambda: [12.5, 16.0, 25.0, 50.0])

    def __post_init__(self) -> None:
        checkpoint.check_ranges(self, AV_LIMITS)

    @property
    def audio_dim(self) -> int:
        return self.n_mels * self.frames_per_token

    @property
    def video_dim(self) -> int:
        return self.video_side**2 + 3 * self.appearance_grid**2


MIN_HOP = 16  # samples between mel frames, at least
MIN_TOKENS_PER_SECOND = 1.0  # slower rates give mel windows of seconds
MAX_MEDIA_SECONDS = 4 * 3600.0  # per input, encoded or decoded: 230,400 tokens at 16/s; longer files are split first
SEARCH_ROWS = 16384  # rows of the nearest-code search at once (a 16,384 x 1,024 distance block: 64 MiB)
