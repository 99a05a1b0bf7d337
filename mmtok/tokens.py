"""``TokenSequence``: what every tokenizer produces and every consumer (truncator, pricing, backbone) reads.

A sequence holds per-token tensors that all share the first dimension N (``len(seq)``):

- ``ids``         int64 ``[N]`` or ``[N, C]`` (C codebooks, e.g. residual VQ), optional
- ``embeddings``  float ``[N, D]``, optional (at least one of ids / embeddings is present)
- ``times``       float64 ``[N]`` seconds, for audio and video tokens
- ``positions``   int64 ``[N]``, index of each token in its original sequence or grid (row-major); absent means
                  ``arange(N)``. Truncation keeps it, so a pruned image still knows where its tokens were.

and sequence-level fields: ``modality``, ``grid`` (h, w of an image's token grid), ``tokenizer`` (name) and
``meta`` (JSON-serialisable). Files are safetensors: the tensors by name plus a JSON header under the
``"mmtok"`` metadata key. A shard file holds many sequences under ``"<key>/<tensor>"`` names.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import MmtokError, TokenError
from mmtok.files import parse_json

FORMAT = "mmtok.TokenSequence"
FORMAT_VERSION = 1
MODALITIES = ("image", "audio", "video", "text")
MAX_GRID_CELLS = 1 << 20  # 1024 x 1024 tokens: an 8,192-px image at 8x downsampling; consumers allocate the grid
_TENSOR_FIELDS = ("ids", "embeddings", "times", "positions")
_HEADER_KEYS = {"format", "version", "modality", "grid", "tokenizer", "meta"}
# meta keys mmtok itself reads back (decoders, inspect): positive finite numbers, or a box of four integers


def _check_known_meta(meta: dict[str, Any]) -> None:
    """The meta values mmtok computes with are of the kind it wrote: a file cannot hand a decoder ``inf`` seconds,
    a list for a rate or a string for a box."""
    for key in ("tokens_per_second", "duration_s"):
        value = meta.get(key)
        if value is not None and not _positive_number(value):
            raise TokenError(f"meta {key} must be a positive finite number, got {value!r}")
    box = meta.get("content_box")
    if box is not None and not (
        isinstance(box, list) and len(box) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in box)
        and box[0] >= 0 and box[1] >= 0 and box[2] > 0 and box[3] > 0
    ):  # fmt: skip
        raise TokenError(f"meta content_box must be [top, left, height, width] (whole numbers), got {box!r}")


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _is_integer(tensor: torch.Tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)


_MINMAX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)  # the rest: compared as int64


def check_ids(
    ids: Any,
    vocab: int | None = None,
    what: str = "ids",
    *,
    error: type[MmtokError] = TokenError,
    allow_empty: bool = False,
    message: str | Callable[[int, int], str] | None = None,
) -> None:
    """Refuse token ids that cannot index a table of ``vocab`` rows (a codebook, an embedding): not an integer
    tensor, empty (unless ``allow_empty``), negative, or ``>= vocab`` (with ``vocab`` None: negative only).

    Raises ``error`` (``TokenError``; ``TruncationError`` inside truncation). Ids out of range get ``message``
    when given (a string, or a function of the smallest and largest id), else "ids outside the codebook [0, vocab)"
    ("ids must be non-negative, got -3" without a ``vocab``). One reduction, one device sync."""
    if not torch.is_tensor(ids) or not _is_integer(ids):
        got = ids.dtype if torch.is_tensor(ids) else type(ids).__name__
        raise error(f"{what} must be an integer tensor, got {got}")
    if ids.numel() == 0:
        if allow_empty:
            return
        raise error(f"no {what} (an empty sequence)")
    lo, hi = torch.stack(torch.aminmax(ids if ids.dtype in _MINMAX_DTYPES else ids.to(torch.int64))).tolist()
    if vocab is None:
        if lo < 0:
            raise error(f"{what} must be non-negative, got {lo}")
    elif lo < 0 or hi >= vocab:
        if callable(message):
            raise error(message(lo, hi))
        raise error(message or f"{what} outside the codebook [0, {vocab})")


def _check_grid(grid: Any, n: int, positions: torch.Tensor | None) -> tuple[int, int]:
    """(rows, cols) of positive ints, no more cells than :data:`MAX_GRID_CELLS`, holding every token."""
    if not isinstance(grid, (tuple, list)) or len(grid) != 2:
        raise TokenError(f"grid must be (rows, cols), got {grid!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid):
        raise TokenError(f"grid must be two positive integers, got {grid!r}")
    rows, cols = int(grid[0]), int(grid[1])
    if rows * cols > MAX_GRID_CELLS:
        raise TokenError(f"grid {rows}x{cols} has {rows * cols:,} cells, over the limit of {MAX_GRID_CELLS:,}")
    if n > rows * cols:
        raise TokenError(f"{n} tokens do not fit a {rows}x{cols} grid")
    if positions is not None and n and int(positions.max()) >= rows * cols:
        raise TokenError(f"position {int(positions.max())} is outside the {rows}x{cols} grid")
    return rows, cols


@dataclass(frozen=True, eq=False)
class TokenSequence:
    modality: str
    ids: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None
    times: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    grid: tuple[int, int] | None = None
    tokenizer: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.modality not in MODALITIES:
            raise TokenError(f"modality must be one of {', '.join(MODALITIES)}, got {self.modality!r}")
        if self.ids is None and self.embeddings is None:
            raise TokenError("a TokenSequence needs ids, embeddings, or both")
        n = len(self)
        ids, emb = self.ids, self.embeddings
        if ids is not None and (ids.ndim not in (1, 2) or not _is_integer(ids)):
            raise TokenError(f"ids must be an integer tensor [N] or [N, C], got {ids.dtype} {tuple(ids.shape)}")
        if emb is not None and (emb.ndim != 2 or not emb.is_floating_point()):
            raise TokenError(f"embeddings must be a float tensor [N, D], got {emb.dtype} {tuple(emb.shape)}")
        for name in _TENSOR_FIELDS:
            tensor = getattr(self, name)
            if tensor is not None and tensor.shape[0] != n:
                raise TokenError(f"{name} has {tensor.shape[0]} rows but the sequence has {n} tokens")
        for name in ("times", "positions"):
            tensor = getattr(self, name)
            if tensor is not None and tensor.ndim != 1:
                raise TokenError(f"{name} must be one-dimensional [N], got {tuple(tensor.shape)}")
        if self.positions is not None and not _is_integer(self.positions):
            raise TokenError(f"positions must be an integer tensor, got {self.positions.dtype}")
        if self.times is not None and not self.times.is_floating_point():
            raise TokenError(f"times must be a float tensor (seconds), got {self.times.dtype}")
        if ids is not None:
            check_ids(ids, allow_empty=True)
        if self.positions is not None:
            check_ids(self.positions, what="positions", allow_empty=True)
        if self.grid is not None:
            object.__setattr__(self, "grid", _check_grid(self.grid, n, self.positions))
        if not isinstance(self.tokenizer, str):
            raise TokenError(f"tokenizer must be a name (a string), got {type(self.tokenizer).__name__}")
        if not isinstance(self.meta, dict):
            raise TokenError(f"meta must be a JSON object (a dict), got {type(self.meta).__name__}")
        _check_known_meta(self.meta)

    def __len__(self) -> int:
        source = self.ids if self.ids is not None else self.embeddings
        return int(source.shape[0])

    def __repr__(self) -> str:
        parts = [f"modality={self.modality!r}", f"tokens={len(self)}"]
        if self.ids is not None:
            parts.append(f"ids={tuple(self.ids.shape)}")
        if self.embeddings is not None:
            parts.append(f"embeddings={tuple(self.embeddings.shape)}")
        if self.grid is not None:
            parts.append(f"grid={self.grid}")
        if self.tokenizer:
            parts.append(f"tokenizer={self.tokenizer!r}")
        return f"TokenSequence({', '.join(parts)})"

    @property
    def token_positions(self) -> torch.Tensor:
        """Positions of the tokens in the original sequence (``arange(N)`` when never truncated)."""
        return self.positions if self.positions is not None else torch.arange(len(self))

    def select(self, index: torch.Tensor, **meta: Any) -> TokenSequence:
        """The tokens at ``index`` (int indices or a bool mask), positions and times kept; ``meta`` merged in."""
        if index.dtype == torch.bool:
            index = index.nonzero().flatten()
        index = index.to(torch.long)
        picked = {name: getattr(self, name)[index] for name in _TENSOR_FIELDS if getattr(self, name) is not None}
        picked["positions"] = self.token_positions[index]
        picked["meta"] = {**self.meta, **meta}
        if len(index) > len(self):  # rows repeated past the sequence's length: the grid check must see them
            return replace(self, **picked)
        # Rows of a validated sequence, picked by indices inside it, are valid: no second validation pass (it cost
        # ~35 us per sequence, a quarter of truncate_many's time for 256-token images).
        out = copy.copy(self)
        for name, value in picked.items():
            object.__setattr__(out, name, value)
        return out

    def to(self, device: torch.device | str) -> TokenSequence:
        moved = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS if getattr(self, name) is not None}
        return replace(self, **moved)

    # ------------------------------------------------------------------------------------------------- files
    def _header(self) -> dict[str, Any]:
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "modality": self.modality,
            "grid": list(self.grid) if self.grid else None,
            "tokenizer": self.tokenizer,
            "meta": self.meta,
        }
        try:
            json.dumps(header)
        except TypeError as e:
            raise TokenError(f"meta must be JSON-serialisable: {e}") from None
        return header

    def _tensors(self, prefix: str = "") -> dict[str, torch.Tensor]:
        return {
            prefix + name: getattr(self, name).detach().cpu().contiguous()
            for name in _TENSOR_FIELDS
            if getattr(self, name) is not None
        }

    @classmethod
    def _from_parts(cls, header: Any, tensors: Mapping[str, torch.Tensor], source: str) -> TokenSequence:
        """A sequence from a file's header and tensors; anything malformed is a TokenError naming ``source``."""
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise TokenError(f"{source}: not an mmtok TokenSequence header")
        version = header.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise TokenError(f"{source}: format version must be an integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise TokenError(f"{source}: written by a newer mmtok (format version {version})")
        unknown = sorted(set(header) - _HEADER_KEYS)
        if unknown:
            raise TokenError(f"{source}: unknown header key(s) {', '.join(unknown)}")
        extra = sorted(set(tensors) - set(_TENSOR_FIELDS))
        if extra:
            raise TokenError(f"{source}: unexpected tensor(s) {', '.join(extra)}")
        for name in ("ids", "positions"):
            if name in tensors and tensors[name].dtype != torch.int64:
                raise TokenError(f"{source}: {name} must be int64, got {tensors[name].dtype}")
        modality, grid, meta = header.get("modality"), header.get("grid"), header.get("meta")
        if not isinstance(modality, str):
            raise TokenError(f"{source}: header needs a modality (one of {', '.join(MODALITIES)})")
        try:
            return cls(
                modality=modality,
                grid=None if grid is None else _check_grid(grid, 0, None),
                tokenizer="" if header.get("tokenizer") is None else header["tokenizer"],
                meta={} if meta is None else meta,
                **{name: tensors[name] for name in _TENSOR_FIELDS if name in tensors},
            )
        except TokenError as e:
            raise TokenError(f"{source}: {e}") from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a safetensors file (tensors + JSON header); returns the path."""
        return _write_safetensors(path, self._tensors(), {"mmtok": json.dumps(self._header())})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenSequence:
        """Read a file written by :meth:`save` (a shard with exactly one sequence is accepted too)."""
        sequences = load_sequences(path)
        if len(sequences) != 1:
            raise TokenError(f"{path}: holds {len(sequences)} sequences; use mmtok.load_sequences()")
        return next(iter(sequences.values()))


def save_sequences(path: str | os.PathLike[str], sequences: Mapping[str, TokenSequence]) -> Path:
    """Write many sequences into one safetensors shard, keyed by name (e.g. the source file's relative path)."""
    tensors: dict[str, torch.Tensor] = {}
    headers: dict[str, Any] = {}
    for key, seq in sequences.items():
        tensors.update(seq._tensors(prefix=f"{key}/"))
        headers[key] = seq._header()
    return _write_safetensors(path, tensors, {"mmtok": json.dumps({"format": FORMAT + "s", "sequences": headers})})


def _write_safetensors(path: str | os.PathLike[str], tensors: dict[str, torch.Tensor], metadata: dict) -> Path:
    """Serialise in memory, then write atomically (``write_atomic``): a failed write is an ``OSError`` and never
    leaves half a file."""
    from safetensors.torch import save

    from mmtok.files import write_atomic

    return write_atomic(path, save(tensors, metadata=metadata))


def load_sequences(path: str | os.PathLike[str]) -> dict[str, TokenSequence]:
    """Every sequence in a file written by :func:`save_sequences` or :meth:`TokenSequence.save`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, safe_open

    source = os.fspath(path)
    if Path(source).is_dir():
        raise TokenError(f"{source}: is a folder, not a token file")
    if not Path(source).is_file():
        raise TokenError(f"{source}: no such token file")
    try:
        with safe_open(source, framework="pt") as f:
            metadata = f.metadata() or {}
        tensors = load_file(source)
    except (SafetensorError, OSError, ValueError) as e:
        raise TokenError(f"{source}: not a safetensors file ({e})") from None
    if "mmtok" not in metadata:
        raise TokenError(f"{source}: safetensors file without an mmtok header")
    header = parse_json(metadata["mmtok"], f"{source}: mmtok header", TokenError)
    if not isinstance(header, dict):
        raise TokenError(f"{source}: the mmtok header must be a JSON object")
    if header.get("format") == FORMAT:
        return {Path(source).stem: TokenSequence._from_parts(header, tensors, source)}
    if header.get("format") != FORMAT + "s":
        raise TokenError(f"{source}: not an mmtok token file (format {str(header.get('format'))[:40]!r})")
    sequences = header.get("sequences")
    if not isinstance(sequences, dict) or not sequences:
        raise TokenError(f"{source}: a shard header needs a non-empty 'sequences' object")
    claimed = {f"{key}/{name}" for key in sequences for name in _TENSOR_FIELDS}
    stray = sorted(set(tensors) - claimed)
    if stray:
        raise TokenError(f"{source}: tensor(s) that belong to no sequence: {', '.join(stray[:3])}")
    out = {}
    for key, seq_header in sequences.items():
        parts = {name: tensors[f"{key}/{name}"] for name in _TENSOR_FIELDS if f"{key}/{name}" in tensors}
        out[key] = TokenSequence._from_parts(seq_header, parts, f"{source}[{key}]")
    return out
