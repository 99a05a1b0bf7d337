"""Shared audio/video time-frequency embedder: time-aligned audio and video tokens in one space.

Audio: waveform -> 16 kHz mono -> torchaudio log-mel (80 bins); ``frames_per_token`` consecutive mel frames make
one token, so the mel hop is chosen from the token rate (16 tokens/s: 4 frames of 15.6 ms). Video: frames sampled
at the token rate (PyAV, streamed), 32 x 32 grey frame differences (1,024-d motion, as the design seed's optical
flow features) plus a 4 x 4 RGB appearance grid. Each modality has a linear projection into one ``d_model`` space;
a shared codebook (vector-quantize-pytorch) turns both into discrete ids. Tokens get a modality embedding and a
learned position embedding indexed by time (token i sits at t = i / rate), so audio and video tokens of the same
instant share a position. Sequences longer than the position table (256 = 16 s at 16 Hz) are chunked: positions
restart every 256 tokens while ``times`` stay absolute; nothing is truncated.

Audio decodes back to a waveform (features -> log-mel -> torchaudio InverseMelScale + GriffinLim), so the WER of
speech after tokenisation can be measured at each token rate, with and without the codebook.

Shapes: N tokens, A = 80 x frames_per_token audio feature size, V = 32^2 + 3 x 4^2 video feature size, d model size.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.errors import TokenError
from mmtok.media.sampling import EPSILON_S
from mmtok.models import checkpoint
from mmtok.tokens import check_ids

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


def sampled_small_frames(video: Any, rate: float, side: int, chunk_frames: int = 256) -> Iterator[torch.Tensor]:
    """The frames of ``video`` sampled at ``rate`` per second, as uint8 ``[n, 3, side, side]`` chunks: what
    ``Video.frames(fps=rate, size=(side, side))`` yields, decoded only as far as the features need.

    Sampling is by presentation time, as there (each grid time takes the frame on screen; the last frame stays one
    frame period). FFmpeg scales each sampled frame straight from the decoder's YUV to ``side`` x ``side`` RGB in
    one single-threaded swscale call (its automatic slice threads cost more than scaling 1,024 pixels, for the same
    bytes). A packet whose frame no grid time falls on (by its time and duration; packets without them are always
    needed) is sent with ``skip_frame = NONREF``, so the decoder skips it when nothing else refers to it: B-frames in
    most encodes; a stream without B-frames decodes every frame. Each small frame is copied channel-first into its
    chunk as it comes (a uint8 permute copy of a whole chunk took ~9 ms per 256 frames)."""
    import av
    import numpy as np
    from av.video.reformatter import VideoReformatter

    from mmtok.media.sampling import PresentationTimes, check_decoded, decode_error

    sampler = PresentationTimes(rate, video.fps)
    reformatter = VideoReformatter()
    chunk = np.empty((chunk_frames, 3, side, side), np.uint8)  # filled frame by frame, channel-first
    filled = 0

    def take(frame: Any, count: int) -> Iterator[torch.Tensor]:
        """``count`` copies of ``frame`` at ``side`` x ``side``; full chunks as they fill."""
        nonlocal chunk, filled
        if not count:
            return
        small = reformatter.reformat(frame, width=side, height=side, format="rgb24", threads=1)
        small = small.to_ndarray().transpose(2, 0, 1)  # (3, side, side) view of (side, side, 3)
        for _ in range(count):
            chunk[filled] = small
            filled += 1
            if filled == chunk_frames:
                yield torch.from_numpy(chunk)
                chunk, filled = np.empty_like(chunk), 0

    try:
        with av.open(str(video.path), metadata_errors="ignore") as container:
            stream = container.streams[video.stream_index]
            stream.thread_type = "AUTO"
            skipper = _NonrefSkipper(stream, sampler)
            for packet in container.demux(stream):
                skipper.before(packet)
                for frame in stream.codec_context.decode(packet):
                    yield from take(*sampler.push(frame))
            yield from take(*sampler.finish())
    except av.FFmpegError as e:
        raise decode_error(video, sampler, e) from None
    check_decoded(video, sampler)
    if filled:
        yield torch.from_numpy(chunk[:filled])


class _NonrefSkipper:
    """Sets the decoder's ``skip_frame`` to NONREF for the packets whose frame no output time falls on (by the
    packet's time and duration), and back to DEFAULT for the others. Only for streams with B-frames: without them
    every frame is a reference, so nothing could be skipped. Packets without a time or duration, and every packet
    before the first frame fixes the stream's zero, are decoded."""

    def __init__(self, stream: Any, sampler: Any) -> None:
        self.context = stream.codec_context
        self.time_base = float(stream.time_base) if stream.time_base else 0.0
        self.reorders = bool(self.context.has_b_frames)
        self.sampler = sampler
        self.skipping = False

    def before(self, packet: Any) -> None:
        start = self.sampler.start
        if not (self.reorders and start is not None and packet.pts is not None and packet.duration and self.time_base):
            return
        t = packet.pts * self.time_base - start
        shown = max(packet.duration * self.time_base, self.sampler.native_step)  # at least one frame period
        if (t >= 0 and between_samples(t, shown, self.sampler.step)) != self.skipping:
            self.skipping = not self.skipping
            self.context.skip_frame = "NONREF" if self.skipping else "DEFAULT"


def between_samples(t: float, shown: float, step: float) -> bool:
    """No grid time ``k * step`` falls while a frame is on screen, from ``t`` for ``shown`` seconds (within the
    sampler's ``EPSILON_S``)."""
    first = math.ceil((t - EPSILON_S) / step)  # the first grid time the sampler could give this frame
    return first * step >= t + shown - EPSILON_S


def video_features_from_frames(
    frames: torch.Tensor, previous: torch.Tensor | None, cfg: AVConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 frames ``[n, 3, side, side]`` -> features ``[n, V]`` (grey differences + appearance grid) and the
    last grey frame (the ``previous`` of the next chunk)."""
    rgb = frames.float() / 255.0
    grey = rgb.mean(dim=1)  # (n, side, side)
    before = torch.cat([grey[:1] if previous is None else previous[None], grey[:-1]])
    motion = (grey - before).flatten(1)  # (n, side^2); the first frame of a stream has no motion
    appearance = F.adaptive_avg_pool2d(rgb, cfg.appearance_grid).flatten(1)  # (n, 3 * grid^2)
    return torch.cat([motion, appearance], dim=1), grey[-1]


def residual_nearest_codes(
    codebooks: list[tuple[torch.Tensor, torch.Tensor]], content: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual quantisation of ``content`` ``[N, d]`` by nearest codes, level after level: (codes ``[N, d]``, the
    sum of the chosen codes, and ids ``[N, L]``), equal to vector-quantize-pytorch's eval-mode ResidualVQ forward.

    ``codebooks`` holds per level the codes ``[1, C, d]`` and their squared norms ``[1, C]``. The library scores a
    level as argmax(-sqrt(clamp(|x|^2 + |c|^2 - 2 x.c))) over a full distance matrix, then one-hot encodes the
    choice. Here the same squared distances, from the same einsum (the -2 folded into x, which is exact: a power of
    two scales every rounding step alike), go to one min per row; ``_library_choice`` settles the rows where the
    library's square root could round the best and another distance to one value."""
    residual_1ND = content[None].float()
    out_1ND = torch.zeros_like(residual_1ND)
    ids = []
    for codes_1CD, norms_1C in codebooks:
        norms_1N = (residual_1ND**2).sum(-1)
        dots_1NC = torch.einsum("b i d, b j d -> b i j", residual_1ND * -2, codes_1CD)
        dist_1NC = norms_1N[..., None] + norms_1C[:, None, :]
        dist_1NC += dots_1NC  # (|x|^2 + |c|^2) + (-2 x.c), as the library adds them
        index_1N = _library_choice(dist_1NC)
        chosen_1ND = codes_1CD[0][index_1N]
        residual_1ND = residual_1ND - chosen_1ND
        out_1ND = out_1ND + chosen_1ND
        ids.append(index_1N)
    return out_1ND[0], torch.stack(ids, dim=-1)[0]


def _library_choice(dist_1NC: torch.Tensor) -> torch.Tensor:
    """argmax(-sqrt(clamp(dist))) per row, as the library takes it, from one min and one second-best pass.

    The min is the library's choice unless another distance could share its rounded root (a tie the library gives
    to the lower index): within 2^-20 of it, relative (the root merges at most ~2^-22), or both under the clamp.
    Those rows, and any that are not finite, are decided the library's way on the same distances."""
    best_1N, index_1N = dist_1NC.min(-1)
    slot_1N1 = index_1N[..., None]
    dist_1NC.scatter_(-1, slot_1N1, float("inf"))
    runner_up_1N = dist_1NC.amin(-1)
    dist_1NC.scatter_(-1, slot_1N1, best_1N[..., None])
    unsure_1N = runner_up_1N <= best_1N.clamp(min=DISTANCE_FLOOR) * (1 + 2**-20)
    unsure_1N |= ~torch.isfinite(best_1N)
    if bool(unsure_1N.any()):
        rows = unsure_1N[0].nonzero().flatten()
        index_1N = index_1N.clone()
        index_1N[0, rows] = (-dist_1NC[0, rows].clamp(min=DISTANCE_FLOOR).sqrt()).argmax(-1)
    return index_1N


def _mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, d_out)
    )


class AVTokenizer(checkpoint.Pretrained, nn.Module):
    kind = "tokenizer"
    CLASS_PATH = CLASS_PATH
    CONFIG_CLASS = AVConfig
    WHAT = "an audio/video tokenizer"
    modality = "audio"  # and video: see encode_streams

    def __init__(self, config: AVConfig | None = None, name: str = "av") -> None:
        from vector_quantize_pytorch import ResidualVQ

        super().__init__()
        self.config = cfg = config or AVConfig()
        self.name = name
        self.proj = nn.ModuleDict(
            {"audio": nn.Linear(cfg.audio_dim, cfg.d_model), "video": nn.Linear(cfg.video_dim, cfg.d_model)}
        )
        self.modality_embedding = nn.Embedding(2, cfg.d_model)
        self.position_embedding = nn.Embedding(cfg.max_positions, cfg.d_model)
        # residual VQ with quantizer dropout in training, so any prefix of the levels decodes (a bit-rate knob)
        self.codebook = ResidualVQ(
            dim=cfg.d_model,
            num_quantizers=cfg.num_quantizers,
            codebook_size=cfg.codebook_size,
            decay=0.99,
            kmeans_init=True,
            threshold_ema_dead_code=2,
            commitment_weight=0.25,
            quantize_dropout=True,
        )
        self.decoders = nn.ModuleDict(
            {
                "audio": _mlp(cfg.d_model, cfg.decoder_hidden, cfg.audio_dim),
                "video": _mlp(cfg.d_model, cfg.decoder_hidden, cfg.video_dim),
            }
        )
        for modality, dim in (("audio", cfg.audio_dim), ("video", cfg.video_dim)):
            self.register_buffer(f"{modality}_mean", torch.zeros(dim))
            self.register_buffer(f"{modality}_std", torch.ones(dim))
        nn.init.normal_(self.position_embedding.weight, std=0.02)
        nn.init.normal_(self.modality_embedding.weight, std=0.02)

    # ----------------------------------------------------------------------------------------------- features
    def normalise(self, modality: str, features: torch.Tensor) -> torch.Tensor:
        return (features - getattr(self, f"{modality}_mean")) / getattr(self, f"{modality}_std")

    def content(self, modality: str, features: torch.Tensor) -> torch.Tensor:
        """Raw features ``[N, A|V]`` -> content embeddings ``[N, d]`` (before quantisation and positions)."""
        return self.proj[modality](self.normalise(modality, features.to(self._device)))

    def quantize(
        self, content: torch.Tensor, levels: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """content ``[N, d]`` -> (codes ``[N, d]``, ids ``[N, levels]``, commitment loss); ``levels`` keeps only
        the first residual codebooks (default: all).

        Inference (eval mode, no gradient) searches the codes itself (``residual_nearest_codes``: the same ids and
        codes as the library's forward, a third of its time); training goes through vector-quantize-pytorch for its
        EMA updates, dead-code expiry and losses."""
        if levels is not None and not 1 <= levels <= self.config.num_quantizers:
            raise TokenError(f"codebook levels must be 1 to {self.config.num_quantizers}, got {levels}")
        if self._can_search_codes(content):
            codebooks = self._codebooks_for_search()
            used = len(codebooks) if levels is None else min(levels, len(codebooks))
            parts = [residual_nearest_codes(codebooks[:used], rows) for rows in content.split(SEARCH_ROWS)]
            codes, ids = torch.cat([c for c, _ in parts]), torch.cat([i for _, i in parts])
            if used < len(codebooks):
                codes = self.codebook.get_output_from_indices(ids[None])[0]  # as the library sums a prefix
            return codes, ids, content.new_zeros(())
        codes, ids, commit = self.codebook(content[None])
        if levels is not None and levels < ids.shape[-1]:
            ids = ids[..., :levels]
            codes = self.codebook.get_output_from_indices(ids)
        return codes[0], ids[0], commit.sum()

    def _can_search_codes(self, content: torch.Tensor) -> bool:
        """The library's eval forward is a plain nearest-code search when nothing trains and the codebooks are
        initialised (an uninitialised one k-means-initialises itself on its first batch, even in eval)."""
        return (
            not self.codebook.training
            and not (torch.is_grad_enabled() and content.requires_grad)
            and content.dtype == torch.float32
            and all(bool(layer._codebook.initted) for layer in self.codebook.layers)
        )

    def _codebooks_for_search(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per level: the codes ``[1, C, d]`` and their squared norms ``[1, C]``, computed once per weight version."""
        embeds = [layer._codebook.embed.detach() for layer in self.codebook.layers]
        key = tuple((e.data_ptr(), e._version, e.device) for e in embeds)
        cached = getattr(self, "_code_norms", None)
        if cached is None or cached[0] != key:
            cached = (key, [(e, (e**2).sum(-1)) for e in embeds])  # the library's |c|^2, bit for bit
            self._code_norms = cached
        return cached[1]

    def token_embeddings(self, modality: str, content: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """What a model consumes: content (or codes) + modality embedding + time position embedding."""
        index = torch.full_like(positions, MODALITY_INDEX[modality])
        return content + self.modality_embedding(index) + self.position_embedding(positions)

    def positions(self, count: int, start: int = 0) -> torch.Tensor:
        """Time positions of tokens ``start..start+count``: chunked every ``max_positions`` tokens."""
        return (torch.arange(start, start + count, device=self._device) % self.config.max_positions).long()

    # ----------------------------------------------------------------------------------------------- encode
    def audio_token_features(self, audio: Any, rate: float, block_seconds: float = 30.0) -> torch.Tensor:
        """An ``mmtok.Audio`` -> token features ``[N, A]``, streamed in blocks (bounded memory for any length)."""
        stream = AudioFeatures(self.config, rate)
        parts = [stream.push(block.float()) for block in audio.blocks(block_seconds, self.config.sample_rate_hz)]
        parts.append(stream.finish())
        return torch.cat(parts)

    def video_token_features(self, video: Any, rate: float) -> torch.Tensor:
        """An ``mmtok.Video`` -> token features ``[N, V]``, one per frame sampled at the token rate (streamed)."""
        parts, previous = [], None
        for frames in sampled_small_frames(video, rate, self.config.video_side):
            features, previous = video_features_from_frames(frames, previous, self.config)
            parts.append(features)
        return torch.cat(parts)

    @torch.no_grad()
    def sequence_from_features(
        self,
        modality: str,
        features: torch.Tensor,
        rate: float,
        quantize: bool = True,
        meta: dict[str, Any] | None = None,
        levels: int | None = None,
    ) -> Any:
        from mmtok.tokens import TokenSequence

        content = self.content(modality, features)
        ids = None
        if quantize:
            content, ids, _ = self.quantize(content, levels)
        positions = self.positions(len(content))
        embeddings = self.token_embeddings(modality, content, positions).cpu()
        times = torch.arange(len(content), dtype=torch.float64) / rate
        meta = {
            **(meta or {}),
            "tokens_per_second": rate,
            "quantized": quantize,
            "codebook_levels": None if ids is None else int(ids.shape[-1]),
            "position_chunk": self.config.max_positions,
        }
        return TokenSequence(
            modality,
            ids=None if ids is None else ids.long().cpu(),
            embeddings=embeddings,
            times=times,
            tokenizer=self.name,
            meta=meta,
        )

    def encode_streams(
        self,
        media: Any,
        tokens_per_second: float | None = None,
        quantize: bool = True,
        codebook_levels: int | None = None,
    ) -> dict[str, Any]:
        """Audio or video (path or ``mmtok`` media) -> ``{"audio": seq, "video": seq}`` for the streams it has.

        ``quantize=False`` keeps continuous embeddings (no ids); ``codebook_levels`` uses only the first residual
        codebooks (fewer bits per token)."""
        import mmtok
        from mmtok.media import Audio, Video

        rate = float(self.config.tokens_per_second if tokens_per_second is None else tokens_per_second)
        MelSpec.for_rate(self.config, rate)  # validates the rate
        if isinstance(media, (str, os.PathLike)):
            media = mmtok.load(media)
        if not isinstance(media, (Audio, Video)):
            raise TokenError(f"the audio/video tokenizer takes audio or video, not {getattr(media, 'kind', media)}")
        source = {"source": str(media.path) if media.path else "<memory>"}
        longest = max(media.duration_s, getattr(getattr(media, "audio", None), "duration_s", 0.0))  # and its sound
        if longest > MAX_MEDIA_SECONDS:
            raise TokenError(
                f"{source['source']}: declares {longest:,.0f} s; at most {MAX_MEDIA_SECONDS:,.0f} s "
                "(4 h) per input are tokenized: split it first"
            )
        streams = {}
        if isinstance(media, Video):
            streams["video"] = self.sequence_from_features(
                "video", self.video_token_features(media, rate), rate, quantize, source, codebook_levels
            )
            audio = media.audio
        else:
            audio = media
        if audio is not None:
            features = self.audio_token_features(audio, rate)
            streams["audio"] = self.sequence_from_features(
                "audio", features, rate, quantize, {**source, "duration_s": audio.duration_s}, codebook_levels
            )
        return streams

    def encode(
        self,
        media: Any,
        tokens_per_second: float | None = None,
        quantize: bool = True,
        codebook_levels: int | None = None,
    ) -> Any:
        """Audio -> its ``TokenSequence``; a video -> its video stream's (use ``encode_streams`` for both)."""
        streams = self.encode_streams(media, tokens_per_second, quantize, codebook_levels)
        return streams.get("video", streams.get("audio"))

    # ----------------------------------------------------------------------------------------------- decode
    def _content_of(self, seq: Any) -> torch.Tensor:
        if seq.ids is not None:
            ids = seq.ids.to(self._device)
            ids = ids[:, None] if ids.ndim == 1 else ids  # (N, levels)
            check_ids(ids, self.config.codebook_size)
            if ids.shape[1] > self.config.num_quantizers:
                raise TokenError(f"{ids.shape[1]} codebook levels, the tokenizer has {self.config.num_quantizers}")
            return self.codebook.get_output_from_indices(ids[None])[0]
        if seq.embeddings is None:
            raise TokenError("a sequence with neither ids nor embeddings cannot be decoded")
        positions = self.positions(len(seq))
        index = torch.full_like(positions, MODALITY_INDEX[seq.modality])
        return seq.embeddings.to(self._device) - self.modality_embedding(index) - self.position_embedding(positions)

    @torch.no_grad()
    def decode_features(self, seq: Any) -> torch.Tensor:
        """Reconstructed raw features ``[N, A|V]`` of a sequence."""
        if seq.modality not in MODALITY_INDEX:
            raise TokenError(f"not an audio/video sequence: {seq.modality}")
        normalised = self.decoders[seq.modality](self._content_of(seq))
        return normalised * getattr(self, f"{seq.modality}_std") + getattr(self, f"{seq.modality}_mean")

    @torch.no_grad()
    def decode(self, seq: Any) -> Any:
        """Audio tokens -> ``mmtok.Audio`` (log-mel -> InverseMelScale -> GriffinLim). Video tokens carry motion
        features, which do not determine pixels: they decode to features only (``decode_features``)."""
        import torchaudio.transforms as T

        from mmtok.media import Audio

        if seq.modality != "audio":
            raise TokenError(
                "only audio tokens decode to media; video tokens hold motion features (see decode_features)"
            )
        if seq.tokenizer and seq.tokenizer != self.name:
            raise TokenError(f"tokens were made by {seq.tokenizer!r}, not {self.name!r}")
        cfg = self.config
        rate = seq.meta.get("tokens_per_second", cfg.tokens_per_second)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise TokenError(f"meta tokens_per_second must be a number, got {rate!r}")
        spec = MelSpec.for_rate(cfg, float(rate))
        if len(seq) / rate > MAX_MEDIA_SECONDS:
            raise TokenError(
                f"{len(seq):,} tokens at {rate:g}/s are {len(seq) / rate:,.0f} s of sound: at most "
                f"{MAX_MEDIA_SECONDS:,.0f} s are decoded"
            )
        features = self.decode_features(seq).float().cpu()  # (N, A)
        log_mel = features.reshape(len(seq), cfg.frames_per_token, cfg.n_mels).reshape(-1, cfg.n_mels).T
        mel = (log_mel.exp() - LOG_FLOOR).clamp(min=0)  # (n_mels, frames)
        n_stft = spec.n_fft // 2 + 1
        inverse = T.InverseMelScale(
            n_stft=n_stft, n_mels=cfg.n_mels, sample_rate=cfg.sample_rate_hz, norm="slaney", mel_scale="slaney"
        )
        power = inverse(mel).clamp(min=0)  # (n_stft, frames)
        griffin = T.GriffinLim(
            n_fft=spec.n_fft, n_iter=cfg.griffin_lim_iters, win_length=spec.win, hop_length=spec.hop, power=2.0
        )
        torch.manual_seed(0)  # GriffinLim starts from random phases: make decoding repeatable
        wave = griffin(power)
        duration = seq.meta.get("duration_s")
        if duration:
            wave = wave[: round(duration * cfg.sample_rate_hz)]
        peak = float(wave.abs().max())
        if peak > 0.99:
            wave = wave * (0.99 / peak)
        return Audio.from_tensor(wave[None].float(), cfg.sample_rate_hz)

    # ----------------------------------------------------------------------------------------------- files
    @property
    def _device(self) -> torch.device:
        return next(self.parameters()).device
