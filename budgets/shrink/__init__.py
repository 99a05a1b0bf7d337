"""Shrink: the cheapest version of each image, recording and video that keeps what the user needs, per model.

    >>> from mmtok.budgets.shrink import shrink                                  # doctest: +SKIP
    >>> result = shrink("screenshot.png", model="claude-opus-4-7", keep={"ocr": 0.98})  # doctest: +SKIP
    >>> result.action, result.tokens_before, result.tokens_after, result.measures       # doctest: +SKIP
    >>> result.reasons, result.pieces, result.same_file_as                               # doctest: +SKIP

Modules: ``bars`` (quality bars), ``candidates`` (renditions at each rule's breakpoints, what the model sees, and the
scale it shows text at), ``pictures`` (decoding, borders, encoding, SSIM), ``ocr`` (RapidOCR and character
agreement), ``recognition`` (the recog bar: EfficientNet-Lite0's features), ``job`` (one image decoded, read and
measured once for every model), ``search`` (measures cheapest first, and the search over a ladder), ``slices`` (tall
and wide pages cut into pieces), ``vad`` (Silero VAD through onnxruntime), ``image`` / ``audio`` / ``video`` /
``document`` (one plan per kind), ``result`` (``ShrinkResult``, atomic writes), ``core`` (``shrink``), ``request``
(request bodies).
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
