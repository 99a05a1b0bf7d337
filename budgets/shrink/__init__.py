"""Shrink: the cheapest version of each image, recording and video that keeps what the user needs, per model.

    >>> from mmtok.budgets.shrink import shrink                                  # doctest: +SKIP
    >>> result = shrink("screenshot.png", model="claude-opus-4-7", keep={"ocr": 0.98})  # doctest: +SKIP
    >>> result.action, result.tokens_before, result.tokens_after, result.measures       # doctest: +SKIP

Modules: ``bars`` (quality bars), ``candidates`` (renditions at each rule's breakpoints, and what the model sees),
``pictures`` (decoding, borders, encoding, SSIM), ``ocr`` (RapidOCR and character agreement), ``vad`` (Silero VAD
through onnxruntime), ``image`` / ``audio`` / ``video`` (one plan per kind), ``result`` (``ShrinkResult``, atomic
writes), ``core`` (``shrink``).
"""

from mmtok.budgets.shrink.bars import DEFAULT_BARS, METRICS, Bar, make_bars, parse_bar
from mmtok.budgets.shrink.core import Skipped, shrink, shrink_models
from mmtok.budgets.shrink.result import ShrinkResult, model_slug

__all__ = [
    "DEFAULT_BARS",
    "METRICS",
    "Bar",
    "ShrinkResult",
    "Skipped",
    "make_bars",
    "model_slug",
    "parse_bar",
    "shrink",
    "shrink_models",
]
