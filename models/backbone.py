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

Examples of mixed modalities and lengths are packed end to end, never padded to the longest: every per-row layer
(norms, projections, the MoE FFN) runs on exactly the rows there are, and attention runs per bucket of examples of
equal length (sorted by length; ``MAX_BUCKET_PADDING`` lets a bucket pad and mask a share of its rows instead), so a
batch of truncated sequences costs what its tokens cost. With ``stem_sites = "kept"`` the conv stem too runs
only at the kept tokens' sites (a submanifold convolution, Graham et al. 2018: each layer reads the kept neighbours
only), so its cost falls with the tokens kept; ``"grid"`` convolves the whole grid with zeros where tokens were
truncated away. Router statistics (load per expert, average k, dropped tokens) come back with the output.

Expert parallelism: ``mmtok.models.expert_parallel.expert_parallel(backbone)`` replaces every MoE layer in place by
its all-to-all version (each process keeping its slice of the experts; the loss and gradients are the single-process
ones, see that module), and ``gather_state_dict`` brings the full state back for saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.errors import CheckpointError, ConfigError, TokenError
from mmtok.models import checkpoint
from mmtok.models.moe import MoE, MoEConfig
from mmtok.models.vq import sincos_2d
from mmtok.tokens import check_ids

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
    # where the stem convolves: "grid" every site of the grid (zeros where tokens were truncated away: its cost is
    # the full grid's); "kept" only the kept tokens' sites, each layer reading only kept neighbours
    stem_sites: str = "grid"
    readout: str = "cls"  # what feeds the head: "cls" the [CLS] row; "mean" / "max" over all real rows

    def moe_config(self) -> MoEConfig:
        return MoEConfig(dim=self.dim, **self.moe)


# An attention bucket pads at most this fraction of its rows. 0: only examples of equal length share a bucket, so
# attention is never padded or masked (a masked call takes scaled-dot-product attention's materialising path):
# on bench_truncation's MI-truncated batch of 128 (lengths ~70-150) that was 8% faster and 5-7 MB lighter than
# 1/8, for one call per distinct length.
MAX_BUCKET_PADDING = 0.0
KEPT_SITES_GATHER_BELOW = 0.5  # kept-site stem: gather windows below this fraction of sites kept, else the
# dense convolution with absent sites zeroed after each layer (the same result; faster when most sites are kept)
STEM_CHUNK_ROWS = 4096  # kept-site stem: rows per block of gathered 3x3 windows (keeps a block in cache)


@dataclass
class Packed:
    """A batch packed end to end: examples sorted by length (longest first), their rows contiguous."""

    lengths: list[int]  # rows per example, in packed order
    order: torch.Tensor  # packed example i is the caller's example order[i]
    buckets: list[tuple[int, int]]  # attention buckets: packed examples [a, b)
    offsets: list[int]  # row offset of each packed example, and the total at the end

    @classmethod
    def plan(cls, lengths_by_example: list[int]) -> Packed:
        order = sorted(range(len(lengths_by_example)), key=lambda i: -lengths_by_example[i])
        lengths = [lengths_by_example[i] for i in order]
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        buckets, start = [], 0
        for i in range(1, len(lengths) + 1):
            if i < len(lengths):
                pads_too_much = (i - start + 1) * lengths[start] * (1 - MAX_BUCKET_PADDING) > offsets[i + 1] - offsets[
                    start
                ]
                ends_equal_run = i - start > 1 and lengths[i - 1] == lengths[start] != lengths[i]  # stays unmasked
                if not (pads_too_much or ends_equal_run):
                    continue
            buckets.append((start, i))
            start = i
        return cls(lengths, torch.tensor(order), buckets, offsets)

    @property
    def rows(self) -> int:
        return self.offsets[-1]

    def example_index(self, device: torch.device) -> torch.Tensor:
        """``[T]``: the packed example each row belongs to."""
        return torch.repeat_interleave(
            torch.arange(len(self.lengths), device=device), torch.tensor(self.lengths, device=device)
        )


def packed_attention(qkv_TE: torch.Tensor, packed: Packed, heads: int) -> torch.Tensor:
    """Self-attention within each example of packed rows: ``qkv`` ``[T, 3D]`` -> ``[T, D]``. Each bucket is one
    scaled-dot-product call over its examples (masked only when their lengths differ)."""
    T, D = qkv_TE.shape[0], qkv_TE.shape[1] // 3
    out_TD = qkv_TE.new_empty(T, D)
    for a, b in packed.buckets:
        rows = qkv_TE[packed.offsets[a] : packed.offsets[b]]  # (t, 3D)
        longest, count = packed.lengths[a], b - a
        if packed.lengths[b - 1] == longest:  # equal lengths: a view, no mask
            x = rows.view(count, longest, 3, heads, D // heads)
            mask = None
        else:
            lengths = torch.tensor(packed.lengths[a:b], device=rows.device)
            slot = torch.arange(longest, device=rows.device)
            mask_BL = slot[None] < lengths[:, None]  # (count, longest)
            x = rows.new_zeros(count, longest, 3 * D)
            x[mask_BL] = rows  # rows are example-major, as the mask's True entries are
            x = x.view(count, longest, 3, heads, D // heads)
            mask = mask_BL[:, None, None, :]
        q, k, v = x.permute(2, 0, 3, 1, 4)  # (count, h, L, hd) each
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(count, longest, D)
        out_TD[packed.offsets[a] : packed.offsets[b]] = attn.flatten(0, 1) if mask is None else attn[mask_BL]
    return out_TD


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.moe = MoE(cfg.moe_config())

    def forward(self, x_TD: torch.Tensor, packed: Packed) -> tuple[torch.Tensor, torch.Tensor]:
        x_TD = x_TD + self.proj(packed_attention(self.qkv(self.norm1(x_TD)), packed, self.heads))
        routed_TD, aux = self.moe(self.norm2(x_TD))
        return x_TD + routed_TD, aux


def kept_site_conv(x_TC: torch.Tensor, neighbours_T9: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """A 3x3 convolution evaluated only at kept sites: ``x`` ``[T, C]`` (one row per kept token), ``neighbours``
    ``[T, 9]`` the row of each 3x3 neighbour (raster order; ``T`` where the neighbour is absent) -> ``[T, C_out]``.
    Equal to the dense convolution of the grid with zeros at absent sites, read at the kept sites."""
    T = x_TC.shape[0]
    weight = conv.weight.permute(0, 2, 3, 1).reshape(conv.out_channels, -1)  # (C_out, 9 C), kernel raster order
    padded = torch.cat([x_TC, x_TC.new_zeros(1, x_TC.shape[1])])  # row T is the absent neighbour
    parts = [  # blocks of rows: each block's gathered windows (t, 9 C) stay in cache
        F.linear(F.embedding(neighbours_T9[s : s + STEM_CHUNK_ROWS], padded).flatten(1), weight, conv.bias)
        for s in range(0, T, STEM_CHUNK_ROWS)
    ]
    return torch.cat(parts) if len(parts) > 1 else parts[0]


class Backbone(checkpoint.Pretrained, nn.Module):
    kind = "backbone"
    CLASS_PATH = CLASS_PATH
    CONFIG_CLASS = BackboneConfig
    WHAT = "a backbone"

    def __init__(self, config: BackboneConfig | None = None, name: str = "backbone") -> None:
        super().__init__()
        self.config = cfg = config or BackboneConfig()
        self.name = name
        self.modality_embedding = nn.Embedding(len(MODALITIES), cfg.dim)
        if cfg.readout not in ("cls", "mean", "max"):
            raise ConfigError(f"readout must be 'cls', 'mean' or 'max', got {cfg.readout!r}")
        if cfg.visual_input not in ("ids", "codes"):
            raise ConfigError(f"visual_input must be 'ids' or 'codes', got {cfg.visual_input!r}")
        if cfg.stem_sites not in ("grid", "kept"):
            raise ConfigError(f"stem_sites must be 'grid' or 'kept', got {cfg.stem_sites!r}")
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
        wrong = f"image ids must be [N] in [0, {self.config.visual_vocab})"
        if ids.ndim != 1:
            raise TokenError(wrong)
        check_ids(ids, self.config.visual_vocab, "image ids", message=wrong)
        return ids, seq.token_positions.to(self.device)

    def embed(self, seq: Any, rows: torch.Tensor | None = None) -> torch.Tensor:
        """One TokenSequence -> rows ``[N, dim]`` (modality embedding included). ``rows``: an image sequence's rows
        when already computed (``pack`` embeds all images of a batch at once)."""
        dev = self.device
        if len(seq) == 0:
            raise TokenError(f"empty {seq.modality} sequence")
        if rows is not None:
            return rows
        if seq.modality == "image":
            ids, positions = self._image_ids(seq)
            rows = self.visual_rows(ids, positions, seq.grid) + sincos_2d(positions, seq.grid[1], self.config.dim)
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
            vocab = self.config.text_vocab
            check_ids(
                ids,
                vocab,
                "text ids",
                message=lambda _, hi: (
                    f"text ids must be below {vocab} (UTF-8 bytes); got {hi} — use the text-bytes tokenizer"
                ),
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
        return self._stem([(ids, positions)], grid)

    def _stem(self, images: list[tuple[torch.Tensor, torch.Tensor]], grid: tuple[int, int]) -> torch.Tensor:
        """The conv stem over several images of one grid at once: (ids, positions) each -> rows ``[sum N_i, dim]``,
        images end to end."""
        h, w = grid
        ids = torch.cat([i for i, _ in images])
        positions = torch.cat([p for _, p in images])
        image = torch.repeat_interleave(
            torch.arange(len(images), device=ids.device), torch.tensor([len(i) for i, _ in images], device=ids.device)
        )
        site = image * (h * w) + positions  # each token's site among all the images' grids
        kept = self.config.stem_sites == "kept"
        if kept and len(ids) <= KEPT_SITES_GATHER_BELOW * len(images) * h * w:
            return self.visual_norm(self._stem_at_kept_sites(ids, image, positions, grid))
        maps = self.visual_codes.new_zeros(len(images) * h * w, self.config.code_dim)
        maps[site] = self.visual_codes[ids]  # tokens truncated away stay zero
        x = maps.view(len(images), h, w, -1).permute(0, 3, 1, 2)  # (B, c, h, w)
        present = maps.new_zeros(len(images) * h * w)
        present[site] = 1
        for layer in self.visual_stem:
            x = layer(x)
            if kept and isinstance(layer, nn.Conv2d):  # absent sites stay zero, as at the kept sites only
                x = x * present.view(len(images), 1, h, w)
        rows = x.permute(0, 2, 3, 1).reshape(len(images) * h * w, -1)[site]  # (sum N_i, dim)
        return self.visual_norm(rows)

    def _stem_at_kept_sites(
        self, ids: torch.Tensor, image: torch.Tensor, positions: torch.Tensor, grid: tuple[int, int]
    ) -> torch.Tensor:
        """The stem evaluated at the kept sites only (cost in proportion to the tokens): rows ``[T, dim]``."""
        h, w = grid
        T = len(ids)
        lookup = torch.full((int(image[-1]) + 1, h + 2, w + 2), T, dtype=torch.long, device=ids.device)  # T: absent
        row, col = positions // w + 1, positions % w + 1
        lookup[image, row, col] = torch.arange(T, device=ids.device)
        neighbours_T9 = torch.stack(
            [lookup[image, row + dr, col + dc] for dr in (-1, 0, 1) for dc in (-1, 0, 1)], dim=1
        )  # (T, 9) in the kernel's raster order
        x_TC = self.visual_codes[ids]
        for layer in self.visual_stem:
            x_TC = kept_site_conv(x_TC, neighbours_T9, layer) if isinstance(layer, nn.Conv2d) else layer(x_TC)
        return x_TC

    def _batched_image_rows(self, examples: list[list[Any]]) -> dict[int, torch.Tensor]:
        """Rows of every image sequence of a batch (content, position and modality embedding), one stem call per
        grid size; keyed by ``id(seq)``."""
        if self.config.visual_input != "codes":
            return {}
        groups: dict[tuple[int, int], list[Any]] = {}
        for seq in (s for example in examples for s in example):
            if seq.modality == "image" and len(seq) and seq.grid is not None:
                groups.setdefault(tuple(seq.grid), []).append(seq)
        rows: dict[int, torch.Tensor] = {}
        tag = self.modality_embedding.weight[MODALITIES.index("image")]
        for grid, seqs in groups.items():
            images = [self._image_ids(s) for s in seqs]
            positions = torch.cat([p for _, p in images])
            content = self._stem(images, grid) + sincos_2d(positions, grid[1], self.config.dim) + tag
            for seq, r in zip(seqs, content.split([len(s) for s in seqs]), strict=True):
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

    def pack(self, examples: list[list[Any]]) -> tuple[torch.Tensor, Packed]:
        """Examples (each a list of TokenSequences) -> their rows end to end ``[T, dim]``, longest example first,
        and the packing (lengths, order, attention buckets)."""
        if not examples:
            raise TokenError("empty batch: no examples")
        cls = self.modality_embedding.weight[0][None]
        embedded = self._batched_image_rows(examples)  # id(seq) -> rows; every sequence is alive, so ids are unique
        shared = not torch.is_grad_enabled()  # in inference a sequence in several examples (a prompt) is embedded
        # once; training embeds each use, so its gradients sum as they always have (bit for bit)

        def rows_of(seq: Any) -> torch.Tensor:
            found = embedded.get(id(seq))
            if found is not None:
                return found
            rows = self.embed(seq)
            if shared:
                embedded[id(seq)] = rows
            return rows

        rows = [torch.cat([cls, *[rows_of(seq) for seq in example]]) for example in examples]
        packed = Packed.plan([len(r) for r in rows])
        return torch.cat([rows[i] for i in packed.order.tolist()]), packed

    # ------------------------------------------------------------------------------------------------ forward
    def forward(self, examples: list[list[Any]]) -> dict[str, Any]:
        """Logits ``[B, num_classes]`` (in the examples' order), the MoE auxiliary loss and per-layer router
        statistics."""
        x_TD, packed = self.pack(examples)
        aux = x_TD.new_zeros(())
        for block in self.blocks:
            x_TD, block_aux = block(x_TD, packed)
            aux = aux + block_aux
        B, D = len(packed.lengths), x_TD.shape[1]
        if self.config.readout == "cls":
            pooled_BD = x_TD[packed.offsets[:-1]]
        else:
            index_TD = packed.example_index(x_TD.device)[:, None].expand(-1, D)
            if self.config.readout == "mean":  # every real row feeds the head directly
                lengths = torch.tensor(packed.lengths, device=x_TD.device, dtype=x_TD.dtype)
                pooled_BD = x_TD.new_zeros(B, D).index_add(0, index_TD[:, 0], x_TD) / lengths[:, None]
            else:  # channel-wise max over real rows: a small object anywhere stands out
                pooled_BD = x_TD.new_zeros(B, D).scatter_reduce(0, index_TD, x_TD, "amax", include_self=False)
        logits = self.head(self.norm(pooled_BD))[packed.order.argsort().to(x_TD.device)]  # caller's order
        stats = [block.moe.last_stats for block in self.blocks]
        return {
            "logits": logits,
            "aux_loss": aux,
            "router": stats,
            "average_k": sum(s["average_k"] for s in stats) / len(stats),
            "dropped": sum(s["dropped"] for s in stats),
            "tokens": packed.rows,
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
    @classmethod
    def load_hint(cls, config: BackboneConfig) -> str:
        """A saved backbone whose weights do not fit its config: most often the experts per layer."""
        try:
            return f"(the config says {config.moe_config().num_experts} experts per layer)"
        except (TypeError, ValueError, ConfigError):  # a moe table that describes no MoE: the error says so
            return ""
