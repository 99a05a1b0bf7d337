"""What an input costs on a model: per-modality token counts, exact decimal costs, the working and the source.

    >>> quote = price("photo.jpg", model="gpt-4o")            # doctest: +SKIP
    >>> quote.tokens("image"), quote.total_cost, quote.source   # doctest: +SKIP

Token rules come from ``families.toml`` (each with its published source), prices from ``prices/*.toml`` (each row
with its source URL and date). Media are read from headers only (``mmtok.load``), so pricing a folder of photos
never decodes a pixel.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets import formulas as F
from mmtok.budgets.sheets import Family, ModelRow, families, model_rows
from mmtok.errors import MediaError, MmtokError, PriceError
from mmtok.media import Audio, Image, Media, Text, Video, iter_files, load

MILLION = Decimal(1_000_000)
PriceSheets = Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class Line:
    """One modality of one input on one model."""

    modality: str  # text | image | audio | video
    tokens: int
    cost: Decimal
    working: str  # how the tokens were counted
    rate: str  # the rate applied, in words
    exact: bool = True  # False when the token rule is a documented estimate


@dataclass(frozen=True)
class Quote:
    item: str
    model: str
    provider: str
    family: str
    lines: tuple[Line, ...]
    currency: str
    source: str
    as_of: dt.date
    sheet: str
    output_tokens: int = 0
    output_cost: Decimal = Decimal(0)

    @property
    def input_tokens(self) -> int:
        return sum(line.tokens for line in self.lines)

    @property
    def input_cost(self) -> Decimal:
        return sum((line.cost for line in self.lines), Decimal(0))

    @property
    def total_cost(self) -> Decimal:
        return self.input_cost + self.output_cost

    @property
    def exact(self) -> bool:
        return all(line.exact for line in self.lines)

    def tokens(self, modality: str | None = None) -> int:
        """Input tokens of one modality (or all)."""
        return sum(line.tokens for line in self.lines if modality is None or line.modality == modality)

    def to_dict(self) -> dict[str, Any]:
        tokens: dict[str, int] = {}
        lines = []
        input_cost = Decimal(0)
        for ln in self.lines:
            tokens[ln.modality] = tokens.get(ln.modality, 0) + ln.tokens
            input_cost += ln.cost
            lines.append(
                {
                    "modality": ln.modality,
                    "tokens": ln.tokens,
                    "cost": str(ln.cost),
                    "working": ln.working,
                    "rate": ln.rate,
                    "exact": ln.exact,
                }
            )
        return {
            "item": self.item,
            "model": self.model,
            "provider": self.provider,
            "family": self.family,
            "tokens": tokens,
            "input_tokens": sum(tokens.values()),
            "output_tokens": self.output_tokens,
            "input_cost": str(input_cost),
            "output_cost": str(self.output_cost),
            "total_cost": str(input_cost + self.output_cost),
            "currency": self.currency,
            "exact": all(ln["exact"] for ln in lines),
            "lines": lines,
            "source": self.source,
            "as_of": self.as_of.isoformat(),
            "sheet": self.sheet,
        }


@dataclass(frozen=True)
class ModelSpec:
    """A priced model: its sheet row, its family's token rules, and the row's calibration overrides."""

    row: ModelRow
    family: Family | None
    formulas: dict[str, dict[str, Any]]
    text_rule: str

    @property
    def name(self) -> str:
        return self.row.name

    def accepts(self, modality: str) -> bool:
        return modality == "text" or modality in self.formulas


def _sheet_paths(prices: PriceSheets) -> tuple[Path, ...]:
    return tuple(Path(p) for p in prices)


@functools.lru_cache(maxsize=256)
def _spec(model: str, sheet_paths: tuple[Path, ...]) -> ModelSpec:
    rows = model_rows(sheet_paths)
    row = rows.get(model)
    if row is None:
        close = difflib.get_close_matches(model, list(rows), n=4, cutoff=0.6)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise PriceError(f"unknown model {model!r}{hint} (see `mmtok models`)")
    family = next((f for f in families(sheet_paths) if f.matches(model)), None)
    formulas = {m: {**spec, **row.overrides.get(m, {})} for m, spec in (family.formulas if family else {}).items()}
    for modality, override in row.overrides.items():
        if modality not in formulas:
            if "formula" not in override:
                raise PriceError(f"{row.sheet}: {model} overrides {modality} but its family has no {modality} rule")
            formulas[modality] = dict(override)
    text_rule = row.text or (family.text if family else "estimate:chars/4")
    return ModelSpec(row, family, formulas, text_rule)


def model_spec(model: str, prices: PriceSheets = ()) -> ModelSpec:
    return _spec(model, _sheet_paths(prices))


def list_models(prices: PriceSheets = ()) -> list[ModelSpec]:
    paths = _sheet_paths(prices)
    return [_spec(name, paths) for name in sorted(model_rows(paths))]


# ------------------------------------------------------------------------------------------------------ tokens
def _image_count(spec: ModelSpec, width: int, height: int, detail: str | None) -> F.TokenCount:
    params = spec.formulas.get("image")
    if params is None:
        raise PriceError(f"model {spec.name} does not accept images")
    formula = params["formula"]
    if formula == "openai-tile":
        return F.openai_tile(width, height, int(params["base_tokens"]), int(params["tile_tokens"]), detail or "auto")
    if formula == "openai-patch":
        return F.openai_patch(
            width,
            height,
            float(params["multiplier"]),
            int(params.get("patch_px", 32)),
            int(params.get("max_patches", 1536)),
        )
    if formula == "anthropic-area":
        return F.anthropic_area(
            width,
            height,
            int(params.get("max_long_edge", 1568)),
            int(params.get("max_tokens", 1600)),
            int(params.get("pixels_per_token", 750)),
        )
    if formula == "gemini-tiles":
        return F.gemini_tiles(width, height, int(params.get("tokens_per_tile", 258)))
    if formula == "gemini-media-resolution":
        F._check_size(width, height)
        return F.gemini_media_resolution(detail or params.get("default_level", "high"))
    if formula == "qwen2-vl":
        return F.qwen2_vl_image(
            width, height, int(params.get("min_pixels", 3136)), int(params.get("max_pixels", 12845056))
        )
    if formula == "llava-next":
        return F.llava_next(width, height)
    if formula == "fixed":
        F._check_size(width, height)
        return F.fixed(int(params["tokens"]), f"{spec.family.name if spec.family else spec.name} fixed")
    if formula == "patch-grid":
        return F.patch_grid(width, height, int(params["patch_px"]))
    raise PriceError(f"model {spec.name}: unknown image formula {formula!r}")


def image_token_count(
    width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()
) -> F.TokenCount:
    """Tokens of a ``width`` x ``height`` image (as displayed) on ``model``, with the working."""
    return _image_count(model_spec(model, prices), int(width), int(height), detail)


def image_tokens(width: int, height: int, model: str, detail: str | None = None, prices: PriceSheets = ()) -> int:
    """Tokens of a ``width`` x ``height`` image on ``model`` (``detail``: low / high / auto, or a Gemini 3
    media_resolution level)."""
    return image_token_count(width, height, model, detail, prices).tokens


def _audio_count(spec: ModelSpec, duration_s: float) -> F.TokenCount:
    params = spec.formulas.get("audio")
    if params is None:
        raise PriceError(f"model {spec.name} does not accept audio")
    if params["formula"] != "per-second":
        raise PriceError(f"model {spec.name}: unknown audio formula {params['formula']!r}")
    return F.per_second(duration_s, float(params["tokens_per_second"]), "audio", bool(params.get("exact", True)))


def _video_counts(spec: ModelSpec, video: Video, detail: str | None) -> list[tuple[str, F.TokenCount, float]]:
    """(modality, count, seconds) parts of a video: its frames and, where the model bills it apart, its sound."""
    params = spec.formulas.get("video")
    if params is None:
        raise PriceError(f"model {spec.name} does not accept video")
    formula = params["formula"]
    duration = video.duration_s
    parts: list[tuple[str, F.TokenCount, float]] = []
    if formula == "per-second":
        parts.append(
            ("video", F.per_second(duration, float(params["tokens_per_second"]), "video incl. audio"), duration)
        )
        return parts
    if formula == "gemini3-frames":
        level = detail or params.get("default_level", "medium")
        per_frame = F.gemini_media_resolution(level, F.GEMINI3_FRAME_TOKENS).tokens
        frames = math.ceil(duration * float(params.get("fps", 1.0)) - 1e-9)
        parts.append(
            (
                "video",
                F.TokenCount(
                    frames * per_frame,
                    f"{frames} frames at {params.get('fps', 1.0):g} fps "
                    f"x {per_frame} (media_resolution={level}) = {frames * per_frame}",
                ),
                duration,
            )
        )
    elif formula == "qwen2-vl-video":
        parts.append(
            (
                "video",
                F.qwen2_vl_video(duration, video.frame_count, video.width, video.height, float(params.get("fps", 2.0))),
                duration,
            )
        )
    elif formula == "frames-patch-grid":
        frames = math.ceil(duration * float(params.get("fps", 1.0)) - 1e-9)
        grid = F.patch_grid(video.width, video.height, int(params["patch_px"]))
        parts.append(("video", F.TokenCount(frames * grid.tokens, f"{frames} frames x ({grid.working})"), duration))
    else:
        raise PriceError(f"model {spec.name}: unknown video formula {formula!r}")
    if video.audio is not None and "audio" in spec.formulas:
        audio = video.audio
        parts.append(("audio", _audio_count(spec, audio.duration_s), audio.duration_s))
    return parts


# ------------------------------------------------------------------------------------------------------- money
def _cost(spec: ModelSpec, modality: str, tokens: int, quantity: float = 1.0) -> tuple[Decimal, str]:
    """Cost of ``tokens`` of ``modality`` (``quantity``: images or seconds, for per-item rates)."""
    rates, currency = spec.row.rates, spec.row.currency
    if modality == "text":
        rate = rates["input_per_mtok"]
        return tokens * rate / MILLION, f"{rate} {currency}/1M tokens"
    key = f"{modality}_input_per_mtok"
    if key in rates:
        return tokens * rates[key] / MILLION, f"{rates[key]} {currency}/1M {modality} tokens"
    if modality == "image" and "image_input_per_image" in rates:
        rate = rates["image_input_per_image"]
        return rate * Decimal(str(quantity)), f"{rate} {currency}/image"
    per_second = f"{modality}_input_per_second"
    if per_second in rates:
        rate = rates[per_second]
        return rate * Decimal(str(round(quantity, 6))), f"{rate} {currency}/second"
    relative = f"{modality}_relative"
    if relative in rates:
        rate = rates["input_per_mtok"] * rates[relative]
        return tokens * rate / MILLION, f"{rates['input_per_mtok']} x {rates[relative]} {currency}/1M tokens"
    raise PriceError(
        f"{spec.row.sheet}: model {spec.name} has no {modality} rate (add {key}, or "
        f"{modality}_relative); refusing to price {modality} at zero"
    )


# ------------------------------------------------------------------------------------------------------- price
def _lines_for(spec: ModelSpec, media: Media, detail: str | None) -> list[Line]:
    def line(modality: str, count: F.TokenCount, quantity: float = 1.0) -> Line:
        cost, rate = _cost(spec, modality, count.tokens, quantity)
        return Line(modality, count.tokens, cost, count.working, rate, count.exact)

    if isinstance(media, Image):
        return [line("image", _image_count(spec, media.width, media.height, detail))]
    if isinstance(media, Audio):
        return [line("audio", _audio_count(spec, media.duration_s), media.duration_s)]
    if isinstance(media, Video):
        return [line(modality, count, seconds) for modality, count, seconds in _video_counts(spec, media, detail)]
    if isinstance(media, Text):
        from mmtok.budgets.text import count_text  # tiktoken loads only when there is text to count

        return [line("text", count_text(media.text, spec.text_rule))]
    raise PriceError(f"cannot price {type(media).__name__}")


def _token_sequence_lines(spec: ModelSpec, seq: Any) -> list[Line]:
    if not (spec.family and spec.family.name == "mmtok-semantic"):
        raise PriceError(f"token sequences are priced on mmtok's own models (mmtok-*), not {spec.name}")
    count = F.TokenCount(len(seq), f"{len(seq)} {seq.modality} tokens from {seq.tokenizer or 'a tokenizer'}")
    cost, rate = _cost(spec, seq.modality, count.tokens, 1.0)
    return [Line(seq.modality, count.tokens, cost, count.working, rate)]


def _is_token_sequence(item: Any) -> bool:
    """Without importing torch: if mmtok.tokens was never imported, ``item`` cannot be a TokenSequence."""
    tokens = sys.modules.get("mmtok.tokens")
    return tokens is not None and isinstance(item, tokens.TokenSequence)


def _describe(item: Any) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    path = getattr(item, "path", None)
    if path is not None:
        return str(path)
    return f"<{type(item).__name__}>"


def price(
    item: Any = None,
    model: str = "gpt-4o",
    *,
    text: str | None = None,
    detail: str | None = None,
    output_tokens: int = 0,
    prices: PriceSheets = (),
) -> Quote:
    """Price one input on one model.

    ``item``: a file path, a loaded ``Image``/``Audio``/``Video``/``Text``, or a ``TokenSequence`` (mmtok-* models);
    or pass ``text="..."``. ``detail``: OpenAI low/high/auto or a Gemini 3 media_resolution level.
    ``output_tokens``: add the output side at the model's output rate. ``prices``: extra sheets (they override).
    """
    spec = model_spec(model, prices)
    if text is not None:
        item = Text.from_string(text)
    if item is None:
        raise PriceError("nothing to price: pass a path, a media object, a TokenSequence or text=...")
    if isinstance(item, (str, os.PathLike)):
        item = load(item)
    return _quote(spec, item, detail, output_tokens, "<text>" if text is not None else _describe(item))


def _quote(spec: ModelSpec, item: Any, detail: str | None, output_tokens: int, label: str) -> Quote:
    if output_tokens < 0:
        raise PriceError(f"output_tokens must not be negative, got {output_tokens}")
    lines = _token_sequence_lines(spec, item) if _is_token_sequence(item) else _lines_for(spec, item, detail)
    output_cost = Decimal(0)
    row = spec.row
    if output_tokens:
        if "output_per_mtok" not in row.rates:
            raise PriceError(f"{row.sheet}: model {spec.name} has no output_per_mtok rate")
        output_cost = output_tokens * row.rates["output_per_mtok"] / MILLION
    return Quote(
        label,
        row.name,
        row.provider,
        spec.family.name if spec.family else "",
        tuple(lines),
        row.currency,
        row.source,
        row.as_of,
        str(row.sheet),
        output_tokens,
        output_cost,
    )


def price_many(
    paths: Iterable[str | os.PathLike[str]],
    models: Sequence[str],
    *,
    detail: str | None = None,
    output_tokens: int = 0,
    prices: PriceSheets = (),
) -> Iterator[tuple[str, list[Quote | MmtokError]]]:
    """Price every file under ``paths`` on every model; each file is read once. Bad files and models that cannot
    price a file come back as errors in the results, never raised, so a batch always finishes."""
    specs = [model_spec(m, prices) for m in models]  # unknown models fail here, before any work
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            yield str(item.source), [item]
            continue
        try:
            media = load(item)
        except MediaError as e:
            yield str(item), [e]
            continue
        label = str(item)
        results: list[Quote | MmtokError] = []
        for spec in specs:
            try:
                results.append(_quote(spec, media, detail, output_tokens, label))
            except MmtokError as e:
                results.append(e)
        yield label, results
