"""The spec's knobs as pymoo variables, and settings: each model's image sizes (its breakpoints), the knobs that
apply to a setting, and a setting's key."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mmtok.budgets.planner.spec import (
    AUDIO_KNOBS,
    BREAKPOINTS,
    KNOBS,
    MAX_BREAKPOINTS,
    MAX_IMAGE_SIZE_PX,
    PROVIDER_DETAIL,
    SELF_HOSTED,
    SELF_HOSTED_KNOBS,
    Spec,
    candidate_models,
)
from mmtok.errors import ConfigError


def domains(spec: Spec) -> dict[str, Any]:
    """pymoo variables for the spec's knobs (a fixed value is a one-choice variable; per-model image sizes are one
    variable of ranks, each setting's size the one at its rank on its model's ladder: ``resolve_setting``)."""
    from pymoo.core.variable import Choice, Real

    out = {}
    for knob in KNOBS:
        value = spec.variables.get(knob, DEFAULTS[knob])
        if knob == "image_size" and per_model_sizes(spec):  # the rank on each model's own ladder
            out[knob] = Choice(options=list(range(_size_ranks(spec))))
            continue
        if knob == "keep_ratio" and isinstance(value, dict):
            low, high = float(value.get("low", 0.1)), float(value.get("high", 1.0))
            if not 0 < low <= high <= 1:
                raise ConfigError(f"{spec.path}: [variables] keep_ratio must satisfy 0 < low <= high <= 1")
            out[knob] = Real(bounds=(low, high))
            continue
        options = value if isinstance(value, list) else [value]
        if not options:
            raise ConfigError(f"{spec.path}: [variables] {knob} has no options")
        out[knob] = Choice(options=[float(v) for v in options] if knob == "keep_ratio" else options)
    return out


DEFAULTS: dict[str, Any] = {  # a knob the spec does not name
    "image_size": [64],
    "keep_ratio": 1.0,
    "audio_tokens_per_second": [16.0],
    "codebook_levels": [8],
    "trim_silence": [False],
    "model": [SELF_HOSTED],
}


def _options(spec: Spec, knob: str) -> list[Any]:
    value = spec.variables.get(knob, DEFAULTS[knob])
    return value if isinstance(value, list) else [value]


def per_model_sizes(spec: Spec) -> bool:
    """Whether image sizes are each model's own (``image_size`` lists ``"breakpoints"``)."""
    return BREAKPOINTS in _options(spec, "image_size")


def image_sizes(spec: Spec, model: str) -> list[int]:
    """The image sizes (px) tried on ``model``: the spec's list; with ``"breakpoints"``, a provider model's own
    sizes (``model_breakpoints``) and, for mmtok-semantic, the sizes listed beside it."""
    options = _options(spec, "image_size")
    if BREAKPOINTS not in options:
        return [int(o) for o in options]
    if model == SELF_HOSTED:
        return sorted(int(o) for o in options if o != BREAKPOINTS)
    return list(model_breakpoints(model, spec.prices))


def model_breakpoints(model: str, prices: Iterable[str | os.PathLike[str]] = ()) -> tuple[int, ...]:
    """The sizes (px, square) at which ``model``'s image token count changes, smallest first: at most
    ``MAX_BREAKPOINTS``, from mmtok shrink's candidates for a ``MAX_IMAGE_SIZE_PX`` square at ``PROVIDER_DETAIL``."""
    return _breakpoints(model, tuple(Path(p) for p in prices))


@functools.lru_cache(maxsize=256)
def _breakpoints(model: str, prices: tuple[Path, ...]) -> tuple[int, ...]:
    from mmtok.budgets.pricing import image_token_count, resolve
    from mmtok.budgets.shrink.candidates import candidates, lossless

    resolved, side = resolve(model, prices), MAX_IMAGE_SIZE_PX
    sizes = [
        r.width
        for r in candidates(resolved, side, side, PROVIDER_DETAIL, prices)
        if r.width == r.height and r.detail in (None, PROVIDER_DETAIL)
    ]
    view = lossless(resolved, side, side, PROVIDER_DETAIL, prices)  # what the model resizes the full size to
    sizes.append(view.width if view is not None and view.width == view.height else side)
    largest: dict[int, int] = {}  # tokens at the planner's detail -> the largest size with that count
    for size in sizes:
        tokens = image_token_count(size, size, model, PROVIDER_DETAIL, prices).tokens
        largest[tokens] = max(largest.get(tokens, 0), size)
    ladder = sorted(largest.values())
    if len(ladder) > MAX_BREAKPOINTS:
        picks = sorted({_spread(i, MAX_BREAKPOINTS, len(ladder)) for i in range(MAX_BREAKPOINTS)})
        ladder = [ladder[i] for i in picks]
    return tuple(ladder)


def _spread(rank: int, ranks: int, n: int) -> int:
    """Rank ``rank`` of ``ranks`` as an index into ``n`` items spread evenly (the first and the last kept)."""
    return 0 if ranks <= 1 else int(rank * (n - 1) / (ranks - 1) + 0.5)


def _size_ranks(spec: Spec) -> int:
    return max(len(image_sizes(spec, m)) for m in candidate_models(spec))


def resolve_setting(spec: Spec, x: dict[str, Any]) -> dict[str, Any]:
    """A setting from pymoo's variables: Python scalars, and with per-model sizes the image size in pixels (the
    size at the variable's rank on the setting's model's ladder)."""
    setting = {k: (float(v) if k == "keep_ratio" else _plain(v)) for k, v in x.items()}
    if "image_size" in setting and per_model_sizes(spec):
        sizes = image_sizes(spec, setting["model"])
        setting["image_size"] = sizes[_spread(int(setting["image_size"]), _size_ranks(spec), len(sizes))]
    return setting


def knob_applies(spec: Spec, knob: str, model: str | None = None) -> bool:
    """Whether a knob changes anything: for the media the request sends and, given a model, for that model
    (keep_ratio and the audio knobs are the mmtok tokenizers'; a provider gets the image resized, the audio as is
    or, with trim_silence, with its silences cut)."""
    if knob in ("image_size", "keep_ratio") and spec.images == 0:
        return False
    if knob in (*AUDIO_KNOBS, "trim_silence") and spec.audio_seconds == 0:
        return False
    if knob in SELF_HOSTED_KNOBS:
        return SELF_HOSTED in candidate_models(spec) if model is None else model == SELF_HOSTED
    return True


def applicable_setting(spec: Spec, setting: dict[str, Any]) -> dict[str, Any]:
    """The knobs of ``setting`` that apply to it (no audio knobs without audio, no keep_ratio for a provider)."""
    return {k: v for k, v in setting.items() if knob_applies(spec, k, setting.get("model"))}


def _distinct(spec: Spec, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per setting of the knobs that apply (gemini at 128 px is one setting, whatever the audio knobs)."""
    out, seen = [], set()
    for entry in entries:
        key = setting_key(applicable_setting(spec, entry["setting"]))
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def setting_key(setting: dict[str, Any]) -> str:
    clean = {k: (round(float(v), 3) if k == "keep_ratio" else _plain(v)) for k, v in setting.items()}
    return json.dumps(clean, sort_keys=True)


def _plain(value: Any) -> Any:
    """numpy scalars (pymoo hands its Choice values back as np.int64 / np.str_) -> Python scalars."""
    if isinstance(value, str):
        return str(value)  # np.str_ -> str
    return value.item() if hasattr(value, "item") else value
