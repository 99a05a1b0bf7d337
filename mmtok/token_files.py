"""Token files read by their headers: what each sequence holds, checked before any tensor is read, without torch.

A token file is safetensors: an 8-byte little-endian length, a JSON header naming each tensor's dtype, shape and
byte range, then the data; mmtok's own JSON header rides in its ``"mmtok"`` metadata. :func:`read_token_headers`
reads that much through one checked descriptor (:func:`mmtok.files.open_regular`: a FIFO or device is refused,
never waited on), so ``inspect`` and ``price`` learn everything they show in memory independent of the tensors'
size. Every sequence is checked against the limits below and against the tokenizer it names
(:func:`mmtok.registry.token_limits`: modality, codebook levels, embedding width) before a byte of tensor data is
read; :func:`mmtok.tokens.load_sequences` then reads each tensor straight into its final memory and checks the ids'
range, so a token command's peak memory is the tensors it needs plus a few MiB.

Limits (each refused with a :class:`~mmtok.errors.TokenError` naming the file): the safetensors header at most
:data:`MAX_TOKEN_HEADER_BYTES`, the file at most :data:`MAX_TOKEN_FILE_BYTES`, :data:`MAX_SEQUENCES` sequences per
file, :data:`MAX_TOKENS` tokens per sequence, :data:`MAX_CODEBOOK_LEVELS` levels per token and
:data:`MAX_EMBEDDING_DIM` embedding values per token where the tokenizer does not say fewer.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.errors import TokenError
from mmtok.files import UnreadableFile, open_regular, parse_json

FORMAT = "mmtok.TokenSequence"
FORMAT_VERSION = 1
MODALITIES = ("image", "audio", "video", "text")
MAX_GRID_CELLS = 1 << 20  # 1024 x 1024 tokens: an 8,192-px image at 8x downsampling; consumers allocate the grid
MAX_TOKEN_HEADER_BYTES = 16 << 20  # the safetensors JSON header (a shard of 1,024 sequences takes ~0.5 MiB)
MAX_TOKEN_FILE_BYTES = 4 << 30  # 4 h of av-tiny embeddings at its fastest rate (250/s x 256 floats) is 3.4 GiB
MAX_SEQUENCES = 100_000  # sequences in one file (tokenize writes shards of 1,024)
MAX_TOKENS = 1 << 22  # tokens in one sequence: 4.6 h at 250 tokens/s; an image grid holds at most MAX_GRID_CELLS
MAX_CODEBOOK_LEVELS = 64  # ids [N, C]: the most levels a model config may have (models.vq / models.av limits)
MAX_EMBEDDING_DIM = 8192  # embeddings [N, D]: the widest embedding a model config may have
TENSOR_FIELDS = ("ids", "embeddings", "times", "positions")
HEADER_KEYS = {"format", "version", "modality", "grid", "tokenizer", "meta"}
# safetensors dtype -> bytes per element; the dtypes each field may have
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8}
FIELD_DTYPES = {
    "ids": ("I64",),
    "positions": ("I64",),
    "embeddings": ("F16", "BF16", "F32", "F64"),
    "times": ("F32", "F64"),
}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as its header describes it: dtype, shape and where its bytes lie in the file (absolute)."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class TokenHeader:
    """One sequence of a token file, as its headers describe it: the fields of a TokenSequence, with its tensors
    as :class:`TensorInfo` (shape and dtype, no data). ``len()`` is the token count, as a TokenSequence's."""

    source: str  # the file (and [key] in a shard), for messages
    modality: str
    tokenizer: str
    grid: tuple[int, int] | None
    meta: dict[str, Any]
    ids: TensorInfo | None = None
    embeddings: TensorInfo | None = None
    times: TensorInfo | None = None
    positions: TensorInfo | None = None
    size_bytes: int = 0  # the whole file's
    tensors: dict[str, TensorInfo] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        source = self.ids if self.ids is not None else self.embeddings
        return source.shape[0] if source is not None else 0


def read_token_headers(path: str | os.PathLike[str]) -> dict[str, TokenHeader]:
    """Every sequence a token file holds, by key (a single-sequence file: its name's stem), checked, without its
    tensors: what ``inspect`` shows and ``price`` counts. Anything malformed or over a limit is a TokenError
    naming the file."""
    source = os.fspath(path)
    fd, size = open_token_file(source)
    try:
        return headers_of(fd, size, source)
    finally:
        os.close(fd)


def open_token_file(source: str) -> tuple[int, int]:
    """A descriptor on the token file ``source`` and its size (a regular file within the size limit)."""
    try:
        fd, info = open_regular(source)
    except UnreadableFile as e:
        reason = "no such token file" if e.reason == "no such file" else e.reason
        raise TokenError(f"{source}: {'is a folder, not a token file' if e.folder else reason}") from None
    if info.st_size > MAX_TOKEN_FILE_BYTES:
        os.close(fd)
        raise TokenError(f"{source}: {info.st_size:,} bytes, over the {MAX_TOKEN_FILE_BYTES:,}-byte token-file limit")
    return fd, info.st_size


def headers_of(fd: int, size: int, source: str) -> dict[str, TokenHeader]:
    """The checked headers of the token file open on ``fd`` (``size`` bytes)."""
    metadata, tensors = _safetensors_header(fd, size, source)
    if "mmtok" not in metadata:
        raise TokenError(f"{source}: safetensors file without an mmtok header")
    header = parse_json(metadata["mmtok"], f"{source}: mmtok header", TokenError)
    if not isinstance(header, dict):
        raise TokenError(f"{source}: the mmtok header must be a JSON object")
    if header.get("format") == FORMAT:
        return {Path(source).stem: _sequence(header, tensors, source, size)}
    if header.get("format") != FORMAT + "s":
        raise TokenError(f"{source}: not an mmtok token file (format {str(header.get('format'))[:40]!r})")
    sequences = header.get("sequences")
    if not isinstance(sequences, dict) or not sequences:
        raise TokenError(f"{source}: a shard header needs a non-empty 'sequences' object")
    if len(sequences) > MAX_SEQUENCES:
        raise TokenError(f"{source}: {len(sequences):,} sequences, over the limit of {MAX_SEQUENCES:,} per file")
    claimed = {f"{key}/{name}" for key in sequences for name in TENSOR_FIELDS}
    stray = sorted(set(tensors) - claimed)
    if stray:
        raise TokenError(f"{source}: tensor(s) that belong to no sequence: {', '.join(stray[:3])}")
    out = {}
    for key, seq_header in sequences.items():
        parts = {name: tensors[f"{key}/{name}"] for name in TENSOR_FIELDS if f"{key}/{name}" in tensors}
        out[key] = _sequence(seq_header, parts, f"{source}[{key}]", size)
    return out


# ---------------------------------------------------------------------------------------------- safetensors
def _safetensors_header(fd: int, size: int, source: str) -> tuple[dict[str, str], dict[str, TensorInfo]]:
    """The metadata and the tensors' layout of a safetensors file, checked: a header within the limit, dtypes it
    knows, byte ranges that match the shapes and tile the data exactly."""
    prefix = _pread(fd, 8, 0)
    if len(prefix) < 8:
        raise TokenError(f"{source}: not a safetensors file (shorter than its 8-byte header length)")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_TOKEN_HEADER_BYTES or 8 + length > size:
        raise TokenError(
            f"{source}: not a safetensors file (a {length:,}-byte header in a {size:,}-byte file; at most "
            f"{MAX_TOKEN_HEADER_BYTES:,} bytes are read)"
        )
    raw = parse_json(_pread(fd, length, 8), f"{source}: safetensors header", TokenError)
    if not isinstance(raw, dict):
        raise TokenError(f"{source}: not a safetensors file (its header is not a JSON object)")
    metadata = raw.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise TokenError(f"{source}: safetensors metadata must map names to strings")
    start = 8 + length
    tensors = {name: _tensor(name, entry, start, source) for name, entry in raw.items()}
    covered = start
    for info in sorted(tensors.values(), key=lambda t: t.offset):  # the data, tiled without gaps or overlaps
        if info.offset != covered:
            raise TokenError(f"{source}: not a safetensors file (tensor data overlaps or leaves gaps)")
        covered += info.nbytes
    if covered != size:
        raise TokenError(
            f"{source}: its tensors declare {covered - start:,} bytes of data, the file holds {size - start:,}"
        )
    return metadata, tensors


def _tensor(name: str, entry: Any, start: int, source: str) -> TensorInfo:
    if not isinstance(entry, dict):
        raise TokenError(f"{source}: tensor {name!r} is not described by an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise TokenError(f"{source}: tensor {name!r} has an unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or len(shape) > 8 or not all(_count(v) for v in shape):
        raise TokenError(f"{source}: tensor {name!r} has no valid shape")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(v) for v in offsets):
        raise TokenError(f"{source}: tensor {name!r} has no valid data_offsets")
    nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != nbytes:
        raise TokenError(
            f"{source}: tensor {name!r} declares {nbytes:,} bytes but its data spans {offsets[1] - offsets[0]:,}"
        )
    return TensorInfo(dtype, tuple(shape), start + offsets[0], nbytes)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_FILE_BYTES


def _pread(fd: int, n: int, offset: int) -> bytes:
    try:
        return os.pread(fd, n, offset)
    except OSError as e:
        raise TokenError(f"cannot read the token file: {e.strerror}") from None


# ---------------------------------------------------------------------------------------------- sequences
def _sequence(header: Any, tensors: dict[str, TensorInfo], source: str, size: int) -> TokenHeader:
    """A sequence's header and tensor layout checked, against the generic limits and its tokenizer's."""
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TokenError(f"{source}: not an mmtok TokenSequence header")
    version = header.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise TokenError(f"{source}: format version must be an integer, got {str(version)[:20]}")
    if version > FORMAT_VERSION:
        raise TokenError(f"{source}: written by a newer mmtok (format version {version})")
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise TokenError(f"{source}: unknown header key(s) {', '.join(map(str, unknown))[:200]}")
    extra = sorted(set(tensors) - set(TENSOR_FIELDS))
    if extra:
        raise TokenError(f"{source}: unexpected tensor(s) {', '.join(extra)[:200]}")
    modality, tokenizer, meta = header.get("modality"), header.get("tokenizer"), header.get("meta")
    if modality not in MODALITIES:
        raise TokenError(f"{source}: modality must be one of {', '.join(MODALITIES)}, got {str(modality)[:40]!r}")
    tokenizer = "" if tokenizer is None else tokenizer
    if not isinstance(tokenizer, str):
        raise TokenError(f"{source}: tokenizer must be a name (a string), got {type(tokenizer).__name__}")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise TokenError(f"{source}: meta must be a JSON object (a dict), got {type(meta).__name__}")
    try:
        check_known_meta(meta)
        n = check_layout(tensors, modality)
        grid = None if header.get("grid") is None else check_grid(header["grid"], n)
        check_against_tokenizer(tensors, modality, tokenizer)
    except TokenError as e:
        raise TokenError(f"{source}: {e}") from None
    return TokenHeader(source, modality, tokenizer, grid, meta, size_bytes=size, tensors=tensors, **tensors)


def check_layout(tensors: dict[str, TensorInfo], modality: str) -> int:
    """Dtypes and shapes of a sequence's tensors (one token count N shared by all, within :data:`MAX_TOKENS`);
    returns N."""
    if "ids" not in tensors and "embeddings" not in tensors:
        raise TokenError("a TokenSequence needs ids, embeddings, or both")
    for name, info in tensors.items():
        if info.dtype not in FIELD_DTYPES[name]:
            wanted = " or ".join(_DTYPE_NAMES[d] for d in FIELD_DTYPES[name])
            raise TokenError(f"{name} must be {wanted}, got {_DTYPE_NAMES[info.dtype]}")
    ids, emb = tensors.get("ids"), tensors.get("embeddings")
    if ids is not None and ids.ndim not in (1, 2):
        raise TokenError(f"ids must be [N] or [N, C], got shape {list(ids.shape)}")
    if emb is not None and emb.ndim != 2:
        raise TokenError(f"embeddings must be [N, D], got shape {list(emb.shape)}")
    for name in ("times", "positions"):
        if name in tensors and tensors[name].ndim != 1:
            raise TokenError(f"{name} must be one-dimensional [N], got shape {list(tensors[name].shape)}")
    n = (ids or emb).shape[0]  # type: ignore[union-attr]
    for name, info in tensors.items():
        if info.shape[0] != n:
            raise TokenError(f"{name} has {info.shape[0]} rows but the sequence has {n} tokens")
    if n > MAX_TOKENS:
        raise TokenError(f"{n:,} tokens, over the limit of {MAX_TOKENS:,} per sequence")
    if ids is not None and ids.ndim == 2 and not 1 <= ids.shape[1] <= MAX_CODEBOOK_LEVELS:
        raise TokenError(f"ids have {ids.shape[1]:,} codebook levels per token; at most {MAX_CODEBOOK_LEVELS}")
    if emb is not None and not 1 <= emb.shape[1] <= MAX_EMBEDDING_DIM:
        raise TokenError(f"embeddings are {emb.shape[1]:,}-d; at most {MAX_EMBEDDING_DIM:,}")
    return n


_DTYPE_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
}  # fmt: skip


def check_against_tokenizer(tensors: dict[str, TensorInfo], modality: str, tokenizer: str) -> None:
    """The sequence is one its tokenizer makes (when it names a registered one): its modality, no more codebook
    levels than it has (image tokenizers of one codebook: ids [N]), and its embedding width."""
    if not tokenizer:
        return
    from mmtok.registry import token_limits

    limits = token_limits(tokenizer)
    if limits is None:
        return  # not a registered tokenizer: only consumers that need it (decode, mi) refuse the name
    if modality not in limits.modalities:
        raise TokenError(
            f"{modality} tokens, but {tokenizer} is a tokenizer of {' and '.join(limits.modalities)}: a file naming "
            "the wrong tokenizer is refused"
        )
    ids, emb = tensors.get("ids"), tensors.get("embeddings")
    if (
        ids is not None
        and ids.ndim == 2
        and ((limits.levels == 1 and modality == "image") or ids.shape[1] > limits.levels)
    ):
        shape = "[N]" if limits.levels == 1 else f"[N] or [N, C <= {limits.levels}]"
        raise TokenError(
            f"ids of shape {list(ids.shape)}, but {tokenizer} has {limits.levels} codebook level"
            f"{'s' if limits.levels > 1 else ''}: its ids are {shape}"
        )
    if emb is not None and emb.shape[1] not in limits.embedding_dims:
        widths = " or ".join(map(str, limits.embedding_dims)) or "none (it writes ids only)"
        raise TokenError(f"embeddings are {emb.shape[1]:,}-d, but {tokenizer}'s are {widths}")


def check_grid(grid: Any, n: int) -> tuple[int, int]:
    """(rows, cols) of positive ints, no more cells than :data:`MAX_GRID_CELLS`, holding every token."""
    if not isinstance(grid, (tuple, list)) or len(grid) != 2:
        raise TokenError(f"grid must be (rows, cols), got {str(grid)[:40]}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid):
        raise TokenError(f"grid must be two positive integers, got {str(grid)[:40]}")
    rows, cols = int(grid[0]), int(grid[1])
    if rows * cols > MAX_GRID_CELLS:
        raise TokenError(f"grid {rows}x{cols} has {rows * cols:,} cells, over the limit of {MAX_GRID_CELLS:,}")
    if n > rows * cols:
        raise TokenError(f"{n} tokens do not fit a {rows}x{cols} grid")
    return rows, cols


def check_known_meta(meta: dict[str, Any]) -> None:
    """The meta values mmtok computes with are of the kind it wrote: a file cannot hand a decoder ``inf`` seconds,
    a list for a rate or a string for a box."""
    for key in ("tokens_per_second", "duration_s"):
        value = meta.get(key)
        if value is not None and not _positive_number(value):
            raise TokenError(f"meta {key} must be a positive finite number, got {str(value)[:40]}")
    box = meta.get("content_box")
    if box is not None and not (
        isinstance(box, list) and len(box) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in box)
        and box[0] >= 0 and box[1] >= 0 and box[2] > 0 and box[3] > 0
    ):  # fmt: skip
        raise TokenError(f"meta content_box must be [top, left, height, width] (whole numbers), got {str(box)[:60]}")


def _positive_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 < value < 1e300 if isinstance(value, int) else math.isfinite(value) and value > 0  # ints: no overflow
