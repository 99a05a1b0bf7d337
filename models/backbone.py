"""The Mixture-of-Experts backbone that consumes mmtok's token sequences.

A pre-norm transformer whose FFNs are MoE layers (``mmtok.models.moe``). Input adapters turn each modality's
TokenSequence into ``dim``-wide rows: visual codebook ids — either through a learned embedding table
(``visual_input = "ids"``) or through the image tokenizer's own frozen code vectors laid back on their grid and read by
a small convolutional stem (``visual_input = "codes"``; positions truncated away are zeros on that grid, so a pruned
sequence is read as a sparser picture, and similar codes start with similar rows; early convolutions are what lets a
small transformer learn from few examples, Xiao et al. 2021) — with 2-D positions taken from the sequence's grid
positions (so truncated sequences keep where their tokens were), audio/video embeddings (linear
adapter; they already carry time positions), and UTF-8 text bytes with 1-D positions. A learned modality embedding
is added to each row and a [CLS] row leads every example; a linear head on the readout ([CLS], or the mean or
channel-wise max over all rows) solves the task.

Examples of mixed modalities and lengths are padded into one batch; attention masks the padding and the MoE layers
route only real tokens. Router statistics (load per expert, average k, dropped tokens) come back with the output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.errors import CheckpointError, ConfigError, TokenError
from mmtok.models import checkpoint
from mmtok.models.moe import MoE, MoEConfig
from mmtok.models.vq import sincos_2d

CLASS_PATH = "mmtok.models.backbone:Backbone"
MODALITIES = ("cls", "text", "image", "audio", "video")


@dataclass
class BackboneConfig:
    dim: int = 128
    layers: int = 4
    heads: int = 4
    moe: dict[str, Any] = field(default_factory=lambda: {"num_experts": 8, "hidden_dim": 256, "top_k": 2})
    visual_vocab: int = 1024  # ids of the image tokenizer's codebook
    av_dim: int = 256  # width of audio/video token embeddings
    text_vocab: int = 259  # UTF-8 bytes + BOS/EOS/PAD
    max_text: int = 128
    num_classes: int = 10
    class_names: list[str] = field(default_factory=list)
    image_tokenizer: str = "vq-clip-tiny"
    visual_input: str = "ids"  # "ids": learned embedding per id; "codes": the tokenizer's code vectors + conv stem
    code_dim: int = 8  # width of the tokenizer's code vectors (visual_input = "codes")
    stem_layers: int = 3  # 3x3 convolutions over the code grid (visual_input = "codes")
    stem_width: int = 64
    readout: str = "cls"  # what feeds the head: "cls" the [CLS] row; "mean" / "max" over all real rows

    def moe_config(self) -> MoEConfig:
        return MoEConfig(dim=self.dim, **self.moe)


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.moe = MoE(cfg.moe_config())

    def forward(self, x_BLD: torch.Tensor, keep_BL: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, L, D = x_BLD.shape
        q, k, v = self.qkv(self.norm1(x_BLD)).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep_BL[:, None, None, :])  # (B, h, L, hd)
        x_BLD = x_BLD + self.proj(attn.transpose(1, 2).reshape(B, L, D))
        h = self.norm2(x_BLD)
        routed, aux = self.moe(h[keep_BL])  # only real tokens are routed
        out = torch.zeros_like(x_BLD)
        out[keep_BL] = routed
        return x_BLD + out, aux


class Backbone(nn.Module):
    kind = "backbone"

    def __init__(self, config: BackboneConfig | None = None, name: str = "backbone") -> None:
        super().__init__()
        self.config = cfg = config or BackboneConfig()
        self.name = name
        self.modality_embedding = nn.Embedding(len(MODALITIES), cfg.dim)
        if cfg.readout not in ("cls", "mean", "max"):
            raise ConfigError(f"readout must be 'cls', 'mean' or 'max', got {cfg.readout!r}")
        if cfg.visual_input not in ("ids", "codes"):
            raise ConfigError(f"visual_input must be 'ids' or 'codes', got {cfg.visual_input!r}")
        if cfg.visual_input == "ids":
            self.visual_embedding = nn.Embedding(cfg.visual_vocab, cfg.dim)
        else:
            self.register_buffer("visual_codes", torch.zeros(cfg.visual_vocab, cfg.code_dim))  # frozen, saved
            stem: list[nn.Module] = []
            width = cfg.code_dim
            for _ in range(max(cfg.stem_layers - 1, 0)):
                stem += [nn.Conv2d(width, cfg.stem_width, 3, padding=1), nn.GELU()]
                width = cfg.stem_width
            stem.append(nn.Conv2d(width, cfg.dim, 3, padding=1))
            self.visual_stem = nn.Sequential(*stem)
            self.visual_norm = nn.LayerNorm(cfg.dim)  # content rows at the scale of the position code
        self.av_adapter = nn.Linear(cfg.av_dim, cfg.dim)
        self.text_embedding = nn.Embedding(cfg.text_vocab, cfg.dim)
        self.text_position = nn.Embedding(cfg.max_text, cfg.dim)
        for table in (self.modality_embedding, self.text_embedding, self.text_position):
            nn.init.normal_(table.weight, std=0.02)  # GPT-2's scale: tags and prompts do not drown the picture
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    # ------------------------------------------------------------------------------------------------ inputs
    def _image_ids(self, seq: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if seq.ids is None or seq.grid is None:
            raise TokenError("image sequences need codebook ids and a grid")
        ids = seq.ids.to(self.device)
        if ids.ndim != 1 or int(ids.min()) < 0 or int(ids.max()) >= self.config.visual_vocab:
            raise TokenError(f"image ids must be [N] in [0, {self.config.visual_vocab})")
        return ids, seq.token_positions.to(self.device)

    def embed(self, seq: Any, visual: torch.Tensor | None = None) -> torch.Tensor:
        """One TokenSequence -> rows ``[N, dim]`` (modality embedding included). ``visual``: an image sequence's
        content rows when already computed (``batch`` runs the conv stem once for all images of a batch)."""
        dev = self.device
        if len(seq) == 0:
            raise TokenError(f"empty {seq.modality} sequence")
        if seq.modality == "image":
            if visual is None:
                ids, positions = self._image_ids(seq)
                visual = self.visual_rows(ids, positions, seq.grid)
            else:  # the batch path checked the ids when it ran the stem
                positions = seq.token_positions.to(dev)
            rows = visual + sincos_2d(positions, seq.grid[1], self.config.dim)
        elif seq.modality in ("audio", "video"):
            if seq.embeddings is None:
                raise TokenError(f"{seq.modality} sequences need embeddings")
            if seq.embeddings.shape[1] != self.config.av_dim:
                raise TokenError(
                    f"{seq.modality} embeddings are {seq.embeddings.shape[1]}-d, the backbone takes "
                    f"{self.config.av_dim}-d"
                )
            rows = self.av_adapter(seq.embeddings.to(dev, torch.float32))
        elif seq.modality == "text":
            ids = seq.ids.to(dev)[: self.config.max_text]
            if int(ids.max()) >= self.config.text_vocab:
                raise TokenError(
                    f"text ids must be below {self.config.text_vocab} (UTF-8 bytes); got "
                    f"{int(ids.max())} — use the text-bytes tokenizer"
                )
            rows = self.text_embedding(ids) + self.text_position(torch.arange(len(ids), device=dev))
        else:
            raise TokenError(f"unknown modality {seq.modality}")
        if not torch.isfinite(rows).all():
            raise TokenError(f"{seq.modality} sequence contains NaN or infinite values")
        return rows + self.modality_embedding.weight[MODALITIES.index(seq.modality)]

    def visual_rows(self, ids: torch.Tensor, positions: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Content rows ``[N, dim]`` of one image sequence."""
        if self.config.visual_input == "ids":
            return self.visual_embedding(ids)
        return self._stem([(ids, positions)], grid)[0]

    def _stem(self, images: list[tuple[torch.Tensor, torch.Tensor]], grid: tuple[int, int]) -> list[torch.Tensor]:
        """The conv stem over several images of one grid at once: (ids, positions) each -> rows ``[N_i, dim]``."""
        h, w = grid
        maps = self.visual_codes.new_zeros(len(images), self.config.code_dim, h * w)
        for i, (ids, positions) in enumerate(images):
            maps[i][:, positions] = self.visual_codes[ids].T  # tokens truncated away stay zero
        features = self.visual_stem(maps.reshape(len(images), -1, h, w)).flatten(2)  # (B, dim, h*w)
        return [self.visual_norm(features[i][:, positions].T) for i, (_, positions) in enumerate(images)]

    def _batched_visual_rows(self, examples: list[list[Any]]) -> dict[int, torch.Tensor]:
        if self.config.visual_input != "codes":
            return {}
        groups: dict[tuple[int, int], list[Any]] = {}
        for seq in (s for example in examples for s in example):
            if seq.modality == "image" and len(seq) and seq.grid is not None:
                groups.setdefault(tuple(seq.grid), []).append(seq)
        rows: dict[int, torch.Tensor] = {}
        for grid, seqs in groups.items():
            for seq, r in zip(seqs, self._stem([self._image_ids(s) for s in seqs], grid), strict=True):
                rows[id(seq)] = r
        return rows

    def set_visual_codes(self, tokenizer: Any) -> None:
        """Copy the image tokenizer's code vectors (``visual_input = "codes"``)."""
        with torch.no_grad():
            ids = torch.arange(self.config.visual_vocab)
            codes = tokenizer.codes_from_ids(ids[None, :, None])[0, :, :, 0].T  # (V, c)
            if codes.shape != self.visual_codes.shape:
                raise CheckpointError(
                    f"{tokenizer.name} has {tuple(codes.shape)} codes, the backbone expects "
                    f"{tuple(self.visual_codes.shape)}"
                )
            self.visual_codes.copy_(codes.to(self.visual_codes))

    def batch(self, examples: list[list[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Examples (each a list of TokenSequences) -> padded rows ``[B, L, dim]`` and the keep mask ``[B, L]``."""
        if not examples:
            raise TokenError("empty batch: no examples")
        cls = self.modality_embedding.weight[0][None]
        visual = self._batched_visual_rows(examples)
        rows = [torch.cat([cls, *[self.embed(seq, visual.get(id(seq))) for seq in example]]) for example in examples]
        longest = max(len(r) for r in rows)
        x = torch.zeros(len(rows), longest, self.config.dim, device=self.device)
        keep = torch.zeros(len(rows), longest, dtype=torch.bool, device=self.device)
        for i, r in enumerate(rows):
            x[i, : len(r)] = r
            keep[i, : len(r)] = True
        return x, keep

    # ------------------------------------------------------------------------------------------------ forward
    def forward(self, examples: list[list[Any]]) -> dict[str, Any]:
        """Logits ``[B, num_classes]``, the MoE auxiliary loss and per-layer router statistics."""
        x, keep = self.batch(examples)
        aux = x.new_zeros(())
        for block in self.blocks:
            x, block_aux = block(x, keep)
            aux = aux + block_aux
        if self.config.readout == "mean":  # every real row feeds the head directly
            pooled = (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)
        elif self.config.readout == "max":  # channel-wise max over real rows: a small object anywhere stands out
            pooled = x.masked_fill(~keep[..., None], float("-inf")).amax(1)
        else:
            pooled = x[:, 0]
        logits = self.head(self.norm(pooled))
        stats = [block.moe.last_stats for block in self.blocks]
        return {
            "logits": logits,
            "aux_loss": aux,
            "router": stats,
            "average_k": sum(s["average_k"] for s in stats) / len(stats),
            "dropped": sum(s["dropped"] for s in stats),
            "tokens": int(keep.sum()),
        }

    def active_flops_per_token(self) -> float:
        """Multiply-adds x 2 of one token through attention projections and the active experts (no attention
        scores, which depend on length), at the average k of the last forward pass."""
        cfg = self.config
        moe = cfg.moe_config()
        per_layer_attn = 2 * 4 * cfg.dim * cfg.dim
        flops = 0.0
        for block in self.blocks:
            k = block.moe.last_stats.get("average_k", moe.k_slots)
            flops += per_layer_attn + 2 * 3 * cfg.dim * moe.hidden_dim * k + 2 * cfg.dim * moe.num_experts
        return flops

    # ------------------------------------------------------------------------------------------------ files
    def save_pretrained(self, folder: str | os.PathLike[str], **extra: Any) -> Path:
        return checkpoint.save_pretrained(
            folder,
            self,
            class_path=CLASS_PATH,
            kind="backbone",
            config=self.config,
            extra={"name": self.name, **extra},
            storage_dtype=torch.float16,
        )

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike[str], device: str | None = None, **_: Any) -> Backbone:
        data = checkpoint.read_config(folder)
        if data.get("class") != CLASS_PATH:
            raise CheckpointError(f"{folder}: holds a {data.get('class')}, not a backbone")
        config = checkpoint.config_from_dict(BackboneConfig, data.get("config", {}), str(folder))
        name = str(data.get("name", Path(folder).name))
        try:
            model = checkpoint.build_checked(folder, lambda: cls(config, name=name))
            checkpoint.load_weights(folder, model)
        except CheckpointError as e:
            expected = config.moe_config().num_experts
            raise CheckpointError(f"{e} (the config says {expected} experts per layer)") from None
        model.eval()
        return model.to(device) if device else model
