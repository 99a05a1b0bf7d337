"""The audio/video tokenizer: features (:mod:`.audio`, :mod:`.video`) projected into one ``d_model`` space, a
residual codebook, time-aligned positions; and the way back from audio tokens to a waveform (InverseMelScale +
Griffin-Lim)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from mmtok.errors import TokenError
from mmtok.models import checkpoint
from mmtok.models.av.audio import AudioFeatures, MelSpec
from mmtok.models.av.codes import residual_nearest_codes
from mmtok.models.av.config import (
    CLASS_PATH,
    LOG_FLOOR,
    MAX_MEDIA_SECONDS,
    MODALITY_INDEX,
    SEARCH_ROWS,
    AVConfig,
)
from mmtok.models.av.video import sampled_small_frames, video_features_from_frames
from mmtok.tokens import check_ids


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
