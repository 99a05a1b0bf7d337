"""CLIP-aligned VQ visual tokenizer: image -> grid of discrete codes -> image, codes aligned with a CLIP teacher.

Encoder (convolutional, downsampling x8) -> 1x1 projection to low-dimensional codes -> quantiser from
vector-quantize-pytorch (``VectorQuantize`` with cosine similarity, i.e. l2-normalised 8-d codes as in LlamaGen, EMA
updates, k-means init and dead-code replacement; or ``FSQ`` / ``ResidualVQ``) -> decoder. An alignment head maps the
quantised tokens into the teacher's embedding space: per token (matched to the teacher's patch tokens) and pooled
(matched to its image feature), trained with -cosine similarity, so the tokens keep their meaning for a language
model (the VILA-U / UniTok recipe at small scale).

Shapes: B batch, S image side, h = w = S / 8 token grid, N = h * w tokens, c code size, D teacher size.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.errors import ConfigError, TokenError
from mmtok.media import Image
from mmtok.models import checkpoint
from mmtok.models.imaging import resize_to_square, to_uint8
from mmtok.tokens import check_ids

CLASS_PATH = "mmtok.models.vq:VQTokenizer"
MAX_DECODE_CELLS = 256 * 256  # grids decoded to pixels: 2,048 px at 8x (the decoder's activations stay ~1-2 GB)
MAX_FEATURE_TOKENS = 8192  # tokens the alignment head attends over at once (4 heads x N^2 scores: ~1 GB)
QUANTIZERS = ("vq", "fsq", "rvq")


VQ_LIMITS = {  # what a config may ask for (checked before anything is built)
    "image_size": (8, 2048),  # 65,536 tokens at 8x: what decode takes (MAX_DECODE_CELLS)
    "channels": (1, 2048),
    "channel_mult": (1, 64),
    "num_res_blocks": (0, 32),
    "code_dim": (1, 4096),
    "codebook_size": (1, 1 << 20),
    "num_quantizers": (1, 64),
    "fsq_levels": (2, 1 << 16),
    "teacher_dim": (1, 8192),
    "align_width": (1, 8192),
    "align_heads": (1, 128),
}


@dataclass
class VQConfig:
    image_size: int = 64  # default input side; any multiple of 8 works (tokens = (S / 8)^2)
    fit: str = "crop"  # crop | pad (see mmtok.models.imaging)
    channels: int = 64  # encoder/decoder base width
    channel_mult: list[int] = field(default_factory=lambda: [1, 2, 4])  # one downsampling between levels
    num_res_blocks: int = 1
    patch_stem: bool = True  # the first layer is a stride-2 conv: no blocks run at full resolution
    code_dim: int = 8  # quantised code size (l2-normalised for "vq")
    quantizer: str = "vq"  # vq | fsq | rvq
    codebook_size: int = 1024  # vq, rvq
    num_quantizers: int = 2  # rvq: codebooks per token
    fsq_levels: list[int] = field(default_factory=lambda: [8, 5, 5, 5])  # fsq: 1000 codes
    ema_decay: float = 0.99
    kmeans_init: bool = True
    dead_code_threshold: float = 2.0  # replace codes used fewer times than this per batch (EMA count)
    commitment_weight: float = 0.25
    teacher_dim: int = 128  # size of the teacher's embedding space
    align_width: int = 128  # alignment head width
    align_heads: int = 4
    teacher: str = "clip-tiny"  # the teacher these tokens are aligned to

    def __post_init__(self) -> None:
        checkpoint.check_ranges(self, VQ_LIMITS)
        if self.fit not in ("crop", "pad"):
            raise ConfigError(f"fit must be crop or pad, got {self.fit!r}")
        if self.quantizer not in QUANTIZERS:
            raise ConfigError(f"quantizer must be one of {QUANTIZERS}, got {self.quantizer!r}")
        if self.image_size % self.downsample:
            raise ConfigError(f"image_size {self.image_size} must be a multiple of {self.downsample}")

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.channel_mult) - 1 + int(self.patch_stem))


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(8, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        widths = [cfg.channels * m for m in cfg.channel_mult]
        self.conv_in = (
            nn.Conv2d(3, widths[0], 4, stride=2, padding=1)
            if cfg.patch_stem  # (B, C, S/2, S/2)
            else nn.Conv2d(3, widths[0], 3, padding=1)
        )
        blocks: list[nn.Module] = []
        for i, width in enumerate(widths):
            blocks += [ResBlock(width, width) for _ in range(cfg.num_res_blocks)]
            if i + 1 < len(widths):
                blocks.append(nn.Conv2d(width, widths[i + 1], 4, stride=2, padding=1))  # halves h and w
        blocks.append(ResBlock(widths[-1], widths[-1]))
        self.blocks = nn.Sequential(*blocks)
        self.norm_out = nn.GroupNorm(8, widths[-1])
        self.conv_out = nn.Conv2d(widths[-1], cfg.code_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 3, S, S) -> (B, c, h, w)
        return self.conv_out(F.silu(self.norm_out(self.blocks(self.conv_in(x)))))


class Decoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        widths = [cfg.channels * m for m in cfg.channel_mult][::-1]
        self.conv_in = nn.Conv2d(cfg.code_dim, widths[0], 3, padding=1)
        blocks: list[nn.Module] = [ResBlock(widths[0], widths[0])]
        for i, width in enumerate(widths):
            blocks += [ResBlock(width, width) for _ in range(cfg.num_res_blocks)]
            if i + 1 < len(widths):
                blocks += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(width, widths[i + 1], 3, padding=1)]
        self.blocks = nn.Sequential(*blocks)
        self.norm_out = nn.GroupNorm(8, widths[-1])
        self.up_out = nn.Upsample(scale_factor=2, mode="nearest") if cfg.patch_stem else nn.Identity()
        self.conv_out = nn.Conv2d(widths[-1], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # (B, c, h, w) -> (B, 3, S, S)
        return self.conv_out(self.up_out(F.silu(self.norm_out(self.blocks(self.conv_in(z))))))


def sincos_2d(positions: torch.Tensor, grid_w: int, dim: int) -> torch.Tensor:
    """Fixed 2-D sin-cos position embeddings for token ``positions`` (row-major in a grid ``grid_w`` wide)."""
    rows, cols = (positions // grid_w).float(), (positions % grid_w).float()  # (N,)
    quarter = dim // 4
    freqs = torch.exp(-math.log(10000.0) * torch.arange(quarter, device=positions.device) / quarter)
    parts = [
        torch.sin(rows[:, None] * freqs),
        torch.cos(rows[:, None] * freqs),
        torch.sin(cols[:, None] * freqs),
        torch.cos(cols[:, None] * freqs),
    ]
    return torch.cat(parts, dim=-1)  # (N, dim)


class AlignmentHead(nn.Module):
    """Quantised tokens -> teacher space: per-token features and a pooled image feature.

    Works on any subset of a grid's tokens (their positions say where they were), so truncated sequences still
    have features.
    """

    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        self.proj_in = nn.Linear(cfg.code_dim, cfg.align_width)
        layer = nn.TransformerEncoderLayer(
            cfg.align_width, cfg.align_heads, 2 * cfg.align_width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.mixer = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.token_out = nn.Linear(cfg.align_width, cfg.teacher_dim)
        self.pool_out = nn.Sequential(nn.LayerNorm(cfg.align_width), nn.Linear(cfg.align_width, cfg.teacher_dim))
        self.width = cfg.align_width

    def forward(
        self,
        codes: torch.Tensor,
        positions: torch.Tensor,
        grid_w: int,
        mask: torch.Tensor | None = None,
        normalized: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """codes (B, N, c), positions (N,) or (B, N) -> tokens (B, N, D), pooled (B, D), l2-normalised unless
        ``normalized`` is False."""
        pos = sincos_2d(positions.reshape(-1), grid_w, self.width).reshape(*positions.shape, self.width)
        h = self.proj_in(codes) + pos  # (B, N, width)
        h = self.mixer(h, src_key_padding_mask=mask)
        if mask is None:
            pooled = h.mean(dim=1)
        else:
            keep = (~mask).float()[..., None]
            pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
        tokens, pooled = self.token_out(h), self.pool_out(pooled)
        if normalized:
            return F.normalize(tokens, dim=-1), F.normalize(pooled, dim=-1)
        return tokens, pooled


def build_quantizer(cfg: VQConfig) -> nn.Module:
    from vector_quantize_pytorch import FSQ, ResidualVQ, VectorQuantize

    common = dict(
        dim=cfg.code_dim,
        codebook_size=cfg.codebook_size,
        use_cosine_sim=True,
        decay=cfg.ema_decay,
        kmeans_init=cfg.kmeans_init,
        threshold_ema_dead_code=cfg.dead_code_threshold,
        commitment_weight=cfg.commitment_weight,
        accept_image_fmap=True,
    )
    if cfg.quantizer == "vq":
        return VectorQuantize(**common)
    if cfg.quantizer == "rvq":  # fed (B, N, c) sequences: its image-map mode mixes up channels and width
        return ResidualVQ(num_quantizers=cfg.num_quantizers, **{**common, "accept_image_fmap": False})
    with torch.device("cpu"):  # FSQ reads its codebook size with .item(): not on the meta device of build_checked
        return FSQ(levels=list(cfg.fsq_levels), dim=cfg.code_dim, channel_first=True)


def neighbourhoods(code_maps: torch.Tensor, radius: int = 1) -> torch.Tensor:
    """Code maps ``[B, c, h, w]`` -> every position's ``(2r+1) x (2r+1)`` neighbourhood, ``[B, h*w, (2r+1)^2 * c]``
    (zero padding at the border)."""
    b, c, h, w = code_maps.shape
    k = 2 * radius + 1
    return F.unfold(code_maps, k, padding=radius).reshape(b, c * k * k, h * w).transpose(1, 2)


def codebook_stats(counts: torch.Tensor) -> tuple[float, float]:
    """(fraction of codes used, perplexity) from a histogram of code ids."""
    total = counts.sum()
    if total == 0:
        return 0.0, 0.0
    p = counts.double() / total
    entropy = -(p[p > 0] * p[p > 0].log()).sum()
    return float((counts > 0).double().mean()), float(entropy.exp())


def _is_pil(image: Any) -> bool:
    import sys

    pil = sys.modules.get("PIL.Image")  # Pillow cannot have made the object unless it is imported
    return pil is not None and isinstance(image, pil.Image)


def crop_note(meta: dict[str, Any]) -> str | None:
    """What a sequence's tokens did not see: a non-square source centre-cropped (``fit = "crop"``) to a square."""
    source = meta.get("source_size")
    if meta.get("fit") != "crop" or not source or source[0] == source[1]:
        return None
    width, height = source
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return (
        f"centre-cropped: the {width}x{height} source was tokenized as its central {side}x{side} square "
        f"(x {left}..{left + side}, y {top}..{top + side}); the edges are not in the tokens or the reconstruction"
    )


@dataclass(frozen=True)
class Reconstruction(Image):
    """A decoded image, with ``notes`` on what the reconstruction leaves out (also in ``info()``)."""

    notes: tuple[str, ...] = ()

    def info(self) -> dict[str, Any]:
        return {**super().info(), "notes": list(self.notes)}


class VQTokenizer(checkpoint.Pretrained, nn.Module):
    """The tokenizer: ``encode`` images to TokenSequences, ``decode`` back, ``features`` in teacher space."""

    kind = "tokenizer"
    CLASS_PATH = CLASS_PATH
    CONFIG_CLASS = VQConfig
    WHAT = "a VQ tokenizer"
    modality = "image"

    def __init__(self, config: VQConfig | None = None, name: str = "vq") -> None:
        super().__init__()
        self.config = config or VQConfig()
        self.name = name
        self.encoder = Encoder(self.config)
        self.quantizer = build_quantizer(self.config)
        self.decoder = Decoder(self.config)
        self.align = AlignmentHead(self.config)

    # ------------------------------------------------------------------------------------------- core passes
    @property
    def codebook_size(self) -> int:
        if self.config.quantizer == "fsq":
            return math.prod(self.config.fsq_levels)
        return self.config.codebook_size

    def quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """images (B, 3, S, S) in [-1, 1] -> quantised codes (B, c, h, w), ids (B, h, w[, Q]), commitment loss."""
        z = self.encoder(x)
        if self.config.quantizer == "fsq":
            quantized, ids = self.quantizer(z)
            return quantized, ids, z.new_zeros(())
        if self.config.quantizer == "rvq":
            b, c, h, w = z.shape
            quantized, ids, commit = self.quantizer(z.flatten(2).transpose(1, 2))  # (B, N, c), (B, N, Q)
            quantized = quantized.transpose(1, 2).reshape(b, c, h, w)
            return quantized, ids.reshape(b, h, w, -1), commit.sum()
        quantized, ids, commit = self.quantizer(z)
        return quantized, ids, commit.sum()

    def codes_from_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, h, w[, Q]) -> quantised codes (B, c, h, w)."""
        if self.config.quantizer == "fsq":
            return self.quantizer.indices_to_codes(ids)  # channel-first FSQ: (B, c, h, w)
        if self.config.quantizer == "rvq":
            b, h, w, q = ids.shape
            codes = self.quantizer.get_output_from_indices(ids.reshape(b, h * w, q))  # (B, N, c)
            return codes.transpose(1, 2).reshape(b, -1, h, w)
        return self.quantizer.get_output_from_indices(ids)  # image-map VQ: (B, c, h, w), normalised codes

    def aligned(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """codes (B, c, h, w) -> teacher-space tokens (B, N, D) and pooled features (B, D)."""
        h, w = codes.shape[-2:]
        tokens = codes.flatten(2).transpose(1, 2)  # (B, N, c)
        positions = torch.arange(h * w, device=codes.device)
        return self.align(tokens, positions, w)

    def forward(self, x: torch.Tensor, align_detached: bool = False) -> dict[str, torch.Tensor]:
        """Training pass: reconstruction, codes, ids, commitment loss and the aligned features (computed from
        detached codes when ``align_detached``: the alignment head is then only a probe)."""
        quantized, ids, commit = self.quantize(x)
        tokens, pooled = self.aligned(quantized.detach() if align_detached else quantized)
        return {
            "recon": self.decoder(quantized),
            "codes": quantized,
            "ids": ids,
            "commit": commit,
            "align_tokens": tokens,
            "align_pooled": pooled,
        }

    # ------------------------------------------------------------------------------------------- public API
    def preprocess(self, image: Any, image_size: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """An ``mmtok.Image``, ``PIL.Image.Image``, uint8 tensor ``[3, H, W]`` or path -> float ``[3, S, S]`` and
        what was done to it."""
        import mmtok

        size = image_size or self.config.image_size
        largest = VQ_LIMITS["image_size"][1]
        if size <= 0 or size % self.config.downsample or size > largest:
            raise TokenError(
                f"image_size {size} must be a multiple of {self.config.downsample} from {self.config.downsample} "
                f"to {largest}"
            )
        meta: dict[str, Any] = {}
        if isinstance(image, (str, os.PathLike)):
            image = mmtok.load(image, kind="image")
        elif _is_pil(image):  # open_clip users pass Pillow images
            image = Image.from_pil(image)
        if isinstance(image, Image):
            meta["source"] = str(image.path) if image.path else "<memory>"
            meta["source_size"] = [image.width, image.height]
            pixels = image.to_tensor(draft_size=(size, size))
        elif torch.is_tensor(image):
            pixels = image
        else:
            raise TokenError(
                f"cannot tokenize a {type(image).__name__}; pass an mmtok Image, a PIL image, a path or a tensor"
            )
        x, box = resize_to_square(pixels, size, self.config.fit)
        meta.update({"image_size": size, "fit": self.config.fit, "content_box": list(box)})
        return x, meta

    @torch.no_grad()
    def encode_batch(self, x: torch.Tensor) -> torch.Tensor:
        """float images (B, 3, S, S) -> ids (B, h, w[, Q])."""
        return self.quantize(x.to(self._device))[1]

    def sequence(self, ids: torch.Tensor, meta: dict[str, Any]) -> Any:
        from mmtok.tokens import TokenSequence

        h, w = ids.shape[0], ids.shape[1]
        flat = ids.reshape(h * w, *ids.shape[2:]).long().cpu()
        return TokenSequence("image", ids=flat, grid=(h, w), tokenizer=self.name, meta=meta)

    @torch.no_grad()
    def encode(self, image: Any, image_size: int | None = None) -> Any:
        """One image (``mmtok.Image``, ``PIL.Image.Image``, path or uint8 tensor) -> ``TokenSequence`` of
        (S / 8)^2 ids."""
        x, meta = self.preprocess(image, image_size)
        return self.sequence(self.encode_batch(x[None])[0], meta)

    def _grid_ids(self, seq: Any) -> torch.Tensor:
        if seq.grid is None or seq.ids is None:
            raise TokenError("decoding needs a sequence with ids and a grid")
        if seq.tokenizer and seq.tokenizer != self.name:
            raise TokenError(f"tokens were made by {seq.tokenizer!r}, not {self.name!r}")
        h, w = seq.grid
        if h * w > MAX_DECODE_CELLS:
            raise TokenError(
                f"a {h}x{w} grid would decode to {h * self.config.downsample} px a side: grids of at most "
                f"{MAX_DECODE_CELLS:,} cells are decoded"
            )
        if len(seq) != h * w:
            raise TokenError(
                f"decode needs all {h * w} tokens of the grid, got {len(seq)} (truncated sequences "
                "have features() but no pixels)"
            )
        order = torch.argsort(seq.token_positions)
        ids = seq.ids[order].reshape(h, w, *seq.ids.shape[1:])
        check_ids(ids, self.codebook_size)
        return ids

    @torch.no_grad()
    def decode(self, seq: Any) -> Reconstruction:
        """``TokenSequence`` -> :class:`Reconstruction`, an ``mmtok.Image`` (RGB, the tokenizer's resolution;
        padding cropped off) whose ``notes`` say when the tokens saw only the centre of the source image."""
        ids = self._grid_ids(seq)[None].to(self._device)
        x = self.decoder(self.codes_from_ids(ids))[0].cpu()
        top, left, h, w = seq.meta.get("content_box", [0, 0, x.shape[1], x.shape[2]])
        pixels = to_uint8(x[:, top : top + h, left : left + w])  # (3, h, w)
        note = crop_note(seq.meta)
        notes = (note,) if note else ()
        return Reconstruction(None, "tensor", int(pixels.shape[2]), int(pixels.shape[1]), data=pixels, notes=notes)

    @torch.no_grad()
    def features(
        self, seq: Any, tokens: bool = False, normalized: bool = True
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Teacher-aligned features of a sequence (complete or truncated): pooled ``[D]`` (and tokens ``[N, D]``),
        l2-normalised unless ``normalized`` is False."""
        if seq.ids is None or seq.grid is None:
            raise TokenError("features need a sequence with ids and a grid")
        if len(seq) > MAX_FEATURE_TOKENS:
            raise TokenError(
                f"features of {len(seq):,} tokens: at most {MAX_FEATURE_TOKENS:,} are attended over at once"
            )
        ids = seq.ids.to(self._device)
        check_ids(ids, self.codebook_size)
        codes = self.codes_from_ids(ids[None, :, None])[0, :, :, 0].T  # (N, c)
        token_feats, pooled = self.align(
            codes[None], seq.token_positions.to(self._device), seq.grid[1], normalized=normalized
        )
        return (pooled[0], token_feats[0]) if tokens else pooled[0]

    @torch.no_grad()
    def local_codes(self, seq: Any, radius: int = 1) -> torch.Tensor:
        """Each token's code vector with its grid neighbours': ``[N, (2r+1)^2 * c]`` (zeros off the grid and where
        a neighbour was truncated away). Works on complete and truncated sequences (it follows their positions)."""
        if seq.ids is None or seq.grid is None:
            raise TokenError("local codes need a sequence with ids and a grid")
        h, w = seq.grid
        ids = seq.ids.to(self._device)
        check_ids(ids, self.codebook_size)
        codes = self.codes_from_ids(ids[None, :, None])[0, :, :, 0].T  # (N, c)
        positions = seq.token_positions.to(self._device)
        grid = codes.new_zeros(codes.shape[1], h * w)
        grid[:, positions] = codes.T
        return neighbourhoods(grid.reshape(1, -1, h, w), radius)[0, positions]

    @property
    def _device(self) -> torch.device:
        return next(self.parameters()).device

    def tokens_per_image(self, image_size: int | None = None) -> int:
        return ((image_size or self.config.image_size) // self.config.downsample) ** 2
