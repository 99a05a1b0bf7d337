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
import io
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import MmtokError, TokenError
from mmtok.token_files import (
    FORMAT,
    FORMAT_VERSION,
    MAX_GRID_CELLS,
    MODALITIES,
    TENSOR_FIELDS,
    TensorInfo,
    TokenHeader,
    check_grid,
    check_known_meta,
    headers_of,
    open_token_file,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "MAX_GRID_CELLS", "MODALITIES", "TokenSequence", "check_ids", "load_sequences"]

_TENSOR_FIELDS = TENSOR_FIELDS
TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
}  # fmt: skip


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
    rows, cols = check_grid(grid, n)
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
        check_known_meta(self.meta)

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
    """Write straight to a temporary file beside ``path``, then rename it over ``path`` (``atomic_path``): a failed
    write never leaves half a file, a symlink at ``path`` is replaced rather than written through, and no second
    copy of the tensors is made in memory."""
    from safetensors.torch import save_file

    from mmtok.files import atomic_path

    with atomic_path(path) as partial:
        save_file(tensors, str(partial), metadata=metadata)
    return Path(path)


def load_sequences(path: str | os.PathLike[str]) -> dict[str, TokenSequence]:
    """Every sequence in a file written by :func:`save_sequences` or :meth:`TokenSequence.save`.

    The headers are read and checked first (:mod:`mmtok.token_files`: limits, dtypes, shapes, the tokenizer's
    modality, levels and width), then each tensor is read from the same descriptor straight into its own memory,
    and ids are checked against the tokenizer's codebook: peak memory is the tensors plus a few MiB."""
    source = os.fspath(path)
    fd, size = open_token_file(source)
    try:
        headers = headers_of(fd, size, source)
        with io.FileIO(fd, "rb", closefd=False) as f:
            return {key: _read_sequence(f, header) for key, header in headers.items()}
    finally:
        os.close(fd)


def _read_sequence(f: io.FileIO, header: TokenHeader) -> TokenSequence:
    tensors = {name: _read_tensor(f, info, header.source) for name, info in header.tensors.items()}
    try:
        seq = TokenSequence(
            modality=header.modality, grid=header.grid, tokenizer=header.tokenizer, meta=header.meta, **tensors
        )
    except TokenError as e:
        raise TokenError(f"{header.source}: {e}") from None
    if seq.ids is not None and header.tokenizer:
        from mmtok.registry import token_limits

        limits = token_limits(header.tokenizer)
        if limits is not None and limits.vocab is not None:
            check_ids(
                seq.ids,
                limits.vocab,
                message=lambda lo, hi: (
                    f"{header.source}: ids {lo}..{hi} outside {header.tokenizer}'s codebook [0, {limits.vocab})"
                ),
                allow_empty=True,
            )
    return seq


def _read_tensor(f: io.FileIO, info: TensorInfo, source: str) -> torch.Tensor:
    """One tensor's bytes read from ``f`` into a tensor of its own (little-endian, as safetensors stores it)."""
    tensor = torch.empty(info.shape, dtype=TORCH_DTYPES[info.dtype])
    if info.nbytes == 0:
        return tensor
    buffer = memoryview(tensor.reshape(-1).view(torch.uint8).numpy()).cast("B")
    f.seek(info.offset)
    done = 0
    while done < info.nbytes:
        got = f.readinto(buffer[done:])
        if not got:
            raise TokenError(f"{source}: the file ends inside its tensor data (cut short while being read?)")
        done += got
    return tensor
