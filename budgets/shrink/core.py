"""``shrink()``: the cheapest version of an image, recording or video that keeps what the user needs, per model.

For each model: price the input as it is, plan a rendition (``image.py``, ``audio.py``, ``video.py``), write it
atomically, price the written file again, and keep the original instead if the rendition would cost more. The input
is read and decoded once for all models; an output several models share is written once (``_Outputs``). Nothing is
raised for one bad model or input in :func:`shrink_models`: errors are yielded in place of results.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing import Model, price, resolve
from mmtok.budgets.pricing.formats import format_warning
from mmtok.budgets.shrink.bars import Bar, bars_for, make_bars
from mmtok.budgets.shrink.result import (
    Plan,
    ShrinkResult,
    cheaper_or_equal,
    copy_atomic,
    model_slug,
    write_bytes_atomic,
)

__all__ = ["Skipped", "shrink", "shrink_models"]
from mmtok.errors import MediaError, MmtokError, PriceError


class Skipped(PriceError):
    """A model that does not take the input's kind, or an input kind that is not shrunk: said, not a failure."""


def shrink(
    source: str | os.PathLike[str] | Any,
    model: str = "gpt-4o",
    *,
    keep: Mapping[str, float] | Sequence[str] | None = None,
    lossless: bool = False,
    out: str | os.PathLike[str] | None = None,
    detail: str | None = None,
    speed: float = 1.0,
    min_silence_s: float = 0.8,
    crop: bool = True,
    slice: bool = False,
    prices: Sequence[str | os.PathLike[str]] = (),
    max_pixels: int | None = None,
) -> ShrinkResult:
    """The cheapest rendition of ``source`` (a path or a loaded ``mmtok.Image`` / ``Audio`` / ``Video``) for
    ``model`` that meets every bar in ``keep`` (``{"ocr": 0.98}``, ``["ssim>=0.95"]``; defaults: ssim >= 0.90,
    recog >= 0.91 and, where the image has text, ocr >= 0.98 for images; wer <= 0.05 for audio).

    ``lossless``: only what leaves the model's view unchanged (its own internal size, no metadata). ``out``: the
    folder to write to (default: the user cache folder). ``detail``: the detail / media_resolution the original
    would be sent with. ``speed``: also try time compression (1 to 2). ``min_silence_s``: cut silences longer than
    this (to 0.5 s). ``crop``: allow cutting uniform borders. ``slice``: where no single image meets the bars, not
    even the original as the model sees it (a tall page), pieces the model sees whole (``result.pieces``).
    ``max_pixels``: refuse larger images before decoding (default: Pillow's limit). Raises the input's or the
    model's error."""
    bars = make_bars(keep)
    path = _path_of(source)
    folder = Path(out) if out is not None else _default_folder()
    name = path.stem if out is not None else f"{path.stem}-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    (result,) = shrink_models(
        path,
        [model],
        bars,
        folder,
        name,
        lossless=lossless,
        detail=detail,
        speed=speed,
        min_silence_s=min_silence_s,
        crop=crop,
        slice=slice,
        prices=prices,
        max_pixels=max_pixels,
    )
    if isinstance(result, MmtokError):
        raise result
    return result


def _default_folder() -> Path:
    from mmtok.cache import cache_dir

    return cache_dir("shrink")


def _path_of(source: Any) -> Path:
    if isinstance(source, (str, os.PathLike)):
        return Path(source)
    path = getattr(source, "path", None)
    if path is None:
        raise MediaError(None, "shrink reads files: save an in-memory image or waveform to a file first")
    return Path(path)


def shrink_models(
    source: Path,
    models: Sequence[str | Model],
    bars: Mapping[str, Bar],
    out_dir: Path,
    name: str,
    *,
    lossless: bool = False,
    detail: str | None = None,
    speed: float = 1.0,
    min_silence_s: float = 0.8,
    crop: bool = True,
    slice: bool = False,
    prices: Sequence[str | os.PathLike[str]] = (),
    jobs: dict[str, Any] | None = None,
    protect: frozenset[Path] = frozenset(),
    max_pixels: int | None = None,
    reference: bool = False,
) -> Iterator[ShrinkResult | MmtokError]:
    """One result (or error) per model for ``source``, written to ``out_dir/<name>.<model><suffix>`` (an original
    kept as it is: ``out_dir/<name><suffix>``, once). ``jobs`` keeps decoded inputs and their measurements between
    calls (the benchmark shrinks one input under several bars). ``protect``: resolved paths never written to (the
    inputs); the source itself is always protected. ``slice``: see :func:`shrink`. ``max_pixels``: refuse larger
    images before decoding. ``reference``: measure OCR as the earlier path did (the benchmark's side-by-side)."""
    from mmtok.budgets.shrink.document import shrink_documents, starts_like_pdf

    if starts_like_pdf(source):
        yield from shrink_documents(source, models, bars, out_dir, name, detail=detail, prices=prices, protect=protect)
        return
    options = _Options(lossless, detail, speed, min_silence_s, crop, slice, tuple(prices))
    try:
        media, job = _load_job(source, jobs, max_pixels, reference, [bar.metric for bar in bars.values()])
    except MmtokError as e:
        yield e
        return
    outputs = _Outputs(source, out_dir, name, protect | {Path(os.path.realpath(source))})
    if media.kind == "image" and not lossless and any(bar.metric == "ocr" for bar in bars_for(bars, "image")):
        job.look_ahead()  # the original's text looked for while each model is priced (``ImageJob.look_ahead``)
    try:
        yield from _each_model(source, media, job, models, bars, options, outputs)
    finally:
        if hasattr(job, "save"):
            job.save()  # what was learnt of the original, for the next call (``analysis.py``)


def _each_model(
    source: Path,
    media: Any,
    job: Any,
    models: Sequence[str | Model],
    bars: Mapping[str, Bar],
    options: _Options,
    outputs: _Outputs,
) -> Iterator[ShrinkResult | MmtokError]:
    done: dict[int, ShrinkResult | MmtokError] = {}
    next_out = 0
    for index in _search_order(models, media, job, options.prices):
        done[index] = _one_model(source, media, job, models[index], bars, options, outputs)
        while next_out in done:  # each answer as soon as those of the models asked before it are given
            yield done.pop(next_out)
            next_out += 1


def _search_order(models: Sequence[str | Model], media: Any, job: Any, prices: tuple) -> list[int]:
    """The order the models are searched in: for an image, the models whose price steps at every few pixels (Claude's
    28-px patches, OpenAI's 32-px patches) first, the rest in the order asked. Such a model's search pins down the
    scale where the image's text stops being read to a few percent, and every model after it starts from there: its
    rungs under that scale are known to fail without reading (``ImageJob.known_failure``), the first above it is
    read first. Answers are still given in the order asked. Measured while this was written on the shrink benchmark's
    held-in pages (5 screenshots and 5 documents of seed 0; gpt-4o, claude-opus-4-7, gemini-3-flash-preview; a fresh
    process each, after a warm-up), this took 7.5% less CPU time for the same answers. The path before issue 39
    (``reference``) searches in the order asked."""
    if media.kind != "image" or getattr(job, "reference", False) or len(models) < 2:
        return list(range(len(models)))

    def fine(asked: str | Model) -> bool:
        try:
            model = asked if isinstance(asked, Model) else resolve(asked, prices)
            return model.formulas.get("image", {}).get("formula") in FINE_LADDERS
        except Exception:
            return False  # its error is said in its turn

    return sorted(range(len(models)), key=lambda i: not fine(models[i]))


FINE_LADDERS = ("anthropic-patches", "openai-patch", "mistral-patches", "qwen2-vl", "patch-grid")


def _one_model(
    source: Path,
    media: Any,
    job: Any,
    asked: str | Model,
    bars: Mapping[str, Bar],
    options: _Options,
    outputs: _Outputs,
) -> ShrinkResult | MmtokError:
    detail = options.detail
    try:
        model = asked if isinstance(asked, Model) else resolve(asked, options.prices)
        if not model.accepts(media.kind) or media.kind not in model.formulas:
            raise Skipped(f"{model.asked} does not take {media.kind}")
        before = _priced(source, model.asked, None if media.kind == "audio" else detail, options.prices, media.kind)
        plan = options.plan(job, media.kind, model, bars)
        return _finish(media, model, plan, before.result(), outputs, bars, detail, options.prices)
    except MmtokError as e:
        return e
    except Exception as e:  # an input a measure cannot take (the OCR's resize of 10000x1): its error, not a crash
        return MediaError(source, f"cannot shrink for {asked}: {type(e).__name__}: {e}".rstrip(": "))


def _priced(source: Path, model: str, detail: str | None, prices: tuple, kind: str) -> Future[Any]:
    """The original's quote for ``model``: for an image, priced on a thread of its own while the image is planned
    (the first quote in a process imports the price data: 0.2-0.25 s of a first hook read on a 2-core machine,
    measured while this was written, while the plan's work is mostly in onnxruntime, OpenCV and Pillow, which let
    go of Python's lock); in turn for audio and video, whose quote decodes the file. An image's quote that fails is
    said where it is taken, after the plan, as the same error."""
    if kind == "image":
        return _pricing().submit(price, source, model, detail=detail, prices=prices)
    done: Future[Any] = Future()
    done.set_result(price(source, model, detail=detail, prices=prices))
    return done


@functools.cache
def _pricing() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmtok-pricing")


@dataclass
class _Options:
    """``shrink_models``' settings; the audio plan depends on the model only through the formats its provider takes,
    so it is made once per set of them."""

    lossless: bool
    detail: str | None
    speed: float
    min_silence_s: float
    crop: bool
    slice: bool
    prices: tuple[str | os.PathLike[str], ...]
    audio_plans: dict[frozenset[str] | None, Plan] = field(default_factory=dict)

    def plan(self, job: Any, kind: str, model: Model, bars: Mapping[str, Bar]) -> Plan:
        if kind == "image":
            from mmtok.budgets.shrink.image import plan_image

            image_bars = bars_for(bars, "image")
            return plan_image(
                job,
                model,
                image_bars,
                lossless=self.lossless,
                detail=self.detail,
                crop=self.crop,
                slice_=self.slice,
                prices=self.prices,
            )
        if kind == "video":
            from mmtok.budgets.shrink.video import plan_video

            image_bars = bars_for(bars, "image")
            return plan_video(job, model, image_bars, lossless=self.lossless, detail=self.detail, prices=self.prices)
        from mmtok.budgets.pricing.formats import taken_formats
        from mmtok.budgets.shrink.audio import plan_audio

        taken = taken_formats(model, "audio")
        if taken not in self.audio_plans:
            audio_bars = bars_for(bars, "audio")
            self.audio_plans[taken] = plan_audio(
                job, audio_bars, min_silence_s=self.min_silence_s, speed=self.speed, lossless=self.lossless, taken=taken
            )[0]
        return self.audio_plans[taken]


def _load_job(
    source: Path, jobs: dict[str, Any] | None, max_pixels: int | None, reference: bool, metrics: list[str]
) -> tuple[Any, Any]:
    """The decoded input and its job (kept in ``jobs`` by path, when given, for the next call). For an image, the
    networks the bars (``metrics``) need start loading first, beside the decoding (``loading.py``)."""
    import mmtok
    from mmtok.media import MAX_IMAGE_PIXELS

    media = mmtok.load(source, max_pixels=max_pixels or MAX_IMAGE_PIXELS)
    if media.kind not in ("image", "audio", "video"):
        raise Skipped(f"{media.kind} is not shrunk (images, audio and video are)")
    if media.kind == "image":
        from mmtok.budgets.shrink import loading

        loading.start(metrics, media.width * media.height)
    job = (jobs or {}).get(str(source)) or _job(source, media, reference)
    if jobs is not None:
        jobs[str(source)] = job
    return media, job


def _job(source: Path, media: Any, reference: bool) -> Any:
    if media.kind == "image":
        from mmtok.budgets.shrink.job import ImageJob

        return ImageJob(source, media, reference)
    if media.kind == "audio":
        from mmtok.budgets.shrink.audio import AudioJob

        return AudioJob(source, media)
    from mmtok.budgets.shrink.video import VideoJob

    return VideoJob(source, media)


class _Outputs:
    """Where one input's outputs go, each distinct file written once: a rendition with the same bytes as one already
    written for another model points to it, and the original, kept as it is, is copied once under its own name."""

    def __init__(self, source: Path, out_dir: Path, name: str, protect: frozenset[Path]) -> None:
        self.source, self.out_dir, self.name, self.protect = source, out_dir, name, protect
        self.written: dict[bytes, tuple[Path, str]] = {}  # sha1 of the bytes -> (path, the model that wrote it)

    def _checked(self, path: Path) -> Path:
        if Path(os.path.realpath(path)) in self.protect:
            raise MediaError(self.source, f"the output {path} would overwrite an input: choose another --out")
        return path

    def write(self, data: bytes | None, suffix: str, model: str, part: str = "") -> tuple[Path, str | None]:
        """(path, the model whose result wrote it, or None when written now); ``data`` None: the original."""
        key = hashlib.sha1(self.source.read_bytes() if data is None else data).digest()
        if key in self.written:
            return self.written[key][0], self.written[key][1]
        if data is None:
            path = copy_atomic(self.source, self._checked(self.out_dir / f"{self.name}{self.source.suffix}"))
        else:
            target = self.out_dir / f"{self.name}.{model_slug(model)}{part}{suffix}"
            path = write_bytes_atomic(self._checked(target), data)
        self.written[key] = (path, model)
        return path, None


def _finish(
    media: Any,
    model: Model,
    plan: Plan,
    before: Any,
    outputs: _Outputs,
    bars: Mapping[str, Bar],
    detail: str | None,
    prices: tuple,
) -> ShrinkResult:
    """Write the plan's output (once per distinct file), price the written file, and fall back to the original if
    it costs more (a sliced plan costs more by design: that is said, not undone)."""
    kind, source = media.kind, outputs.source
    pieces: list[Path] = []
    if plan.pieces:
        written = [
            outputs.write(data, plan.suffix, model.asked, f".part{i + 1}of{len(plan.pieces)}")
            for i, data in enumerate(plan.pieces)
        ]
        pieces = [path for path, _ in written]
        target, same = pieces[0], written[0][1] if all(by == written[0][1] for _, by in written) else None
    else:
        target, same = outputs.write(plan.data, plan.suffix, model.asked)
    send_detail = detail if plan.status in ("kept", "converted") else plan.detail  # converted: the same size
    after = price(pieces or target, model.asked, detail=send_detail if kind != "audio" else None, prices=prices)
    status, action, notes = plan.status, plan.action, list(plan.notes)
    if plan.status not in ("kept", "sliced") and not cheaper_or_equal(after, before, kind):
        target, same = outputs.write(None, source.suffix, model.asked)
        after, send_detail = price(target, model.asked, detail=detail, prices=prices), detail
        status, action = "kept", f"kept: the rendition ({plan.action}) priced higher when written"
    out = mmtok_load(target)
    before = _said_once(before, format_warning(model, media), format_warning(model, out))
    used = {m: str(b) for m, b in bars.items() if b.modality == ("audio" if kind == "audio" else "image")}
    return ShrinkResult(
        source=source,
        model=model.asked,
        kind=kind,
        status=status,
        action=action,
        path=target,
        before=before,
        after=after,
        detail=send_detail,
        detail_name=_detail_name(model, kind),
        measures={k: None if v is None else round(float(v), 4) for k, v in plan.measures.items()},
        reasons=dict(plan.reasons),
        bars={} if plan.status in ("lossless", "re-encoded") else used,
        tried=plan.tried,
        bytes_before=media.size_bytes or 0,
        bytes_after=sum(p.stat().st_size for p in pieces) if pieces else out.size_bytes or 0,
        seconds_before=getattr(media, "duration_s", None),
        seconds_after=getattr(out, "duration_s", None),
        notes=notes,
        warnings=list(plan.warnings),
        pieces=pieces,
        same_file_as=same,
    )


def _said_once(before: Any, original: str, written: str) -> Any:
    """The original's quote with its file-format warning left out when the written file deals with it (converted, or
    a first frame); one the output still has (a video's container, which is never rewritten) stays, said once."""
    if not original or written:
        return before
    return dataclasses.replace(before, warnings=tuple(w for w in before.warnings if not w.endswith(original)))


def _detail_name(model: Model, kind: str) -> str:
    formula = model.formulas.get("image" if kind == "image" else kind, {}).get("formula", "")
    return "media_resolution" if formula in ("fixed-level", "gemini-2.5", "frames") else "detail"


def mmtok_load(path: Path) -> Any:
    import mmtok

    return mmtok.load(path)
