"""mmtok: count, price, shrink and plan the tokens of multimodal model inputs.

Heavy parts (torch models, metrics) are imported on first use, so ``import mmtok`` stays fast.

Two kinds of "model": ``list_models()`` / ``get_model()`` and ``list_tokenizers()`` / ``get_tokenizer()`` are
mmtok's own networks (tokenizers, critics, the backbone, from ``models/configs/``), while the priced LLMs a request
is sent to are what ``price(..., model=)`` takes and the ``mmtok models`` command lists.
"""

from __future__ import annotations

from mmtok.errors import (
    CheckpointError,
    ConfigError,
    EvalError,
    MediaError,
    MmtokError,
    PriceError,
    TokenError,
    TruncationError,
)
from mmtok.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY = {
    "load": "mmtok.media",
    "scan": "mmtok.media",
    "iter_files": "mmtok.media",
    "resample": "mmtok.media",
    "Image": "mmtok.media",
    "Audio": "mmtok.media",
    "Video": "mmtok.media",
    "Text": "mmtok.media",
    "Document": "mmtok.media",
    "MAX_IMAGE_PIXELS": "mmtok.media",
    "TokenSequence": "mmtok.tokens",
    "save_sequences": "mmtok.tokens",
    "load_sequences": "mmtok.tokens",
    "list_tokenizers": "mmtok.registry",
    "get_tokenizer": "mmtok.registry",
    "list_models": "mmtok.registry",
    "get_model": "mmtok.registry",
    "add_config_dir": "mmtok.registry",
    "price": "mmtok.budgets.pricing",
    "price_request": "mmtok.budgets.pricing",
    "price_batch": "mmtok.budgets.pricing.batch",
    "parse_body": "mmtok.request",
    "image_tokens": "mmtok.budgets.pricing",
    "Quote": "mmtok.budgets.pricing",
    "truncate": "mmtok.truncation",
    "shrink": "mmtok.budgets.shrink",
    "ShrinkResult": "mmtok.budgets.shrink",
    "sample_path": "mmtok.samples",
    "list_samples": "mmtok.samples",
}

__all__ = [
    "CheckpointError",
    "ConfigError",
    "EvalError",
    "MediaError",
    "MmtokError",
    "PriceError",
    "TokenError",
    "TruncationError",
    "__version__",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
