"""Shrinking a video for one model: the per-frame ``media_resolution`` level, where the model bills by it.

Gemini bills a video by frames sampled at 1 fps, each at its level's tokens, plus its sound track by the second.
Candidates are the levels cheaper than the default, priced through ``price(detail=level)``; the bar is SSIM on up
to ``SAMPLED_FRAMES`` frames sampled evenly, each at the level's estimated view (no internal frame size is
published). The file itself is not changed (the level is a request setting), so its sound track is unchanged and
needs no WER. Models whose video count depends on the file's own frame size or rate (Qwen2-VL, mmtok) are not
re-encoded: kept, with a line saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing import Model, price
from mmtok.budgets.shrink import candidates as C
from mmtok.budgets.shrink import pictures as P
from mmtok.budgets.shrink.bars import Bar
from mmtok.budgets.shrink.result import Plan

if TYPE_CHECKING:
    import PIL.Image

    from mmtok.media import Video

SAMPLED_FRAMES = 8


class VideoJob:
    def __init__(self, path: Path, media: Video) -> None:
        self.path = Path(path)
        self.media = media
        self._frames: list[PIL.Image.Image] | None = None

    @property
    def frames(self) -> list[PIL.Image.Image]:
        """Up to ``SAMPLED_FRAMES`` frames, evenly spaced over the stream."""
        if self._frames is None:
            import PIL.Image

            fps = min(self.media.fps or 1.0, max(SAMPLED_FRAMES / max(self.media.duration_s, 1e-3), 0.1))
            frames = [f for chunk in self.media.frames(fps=fps) for f in chunk.frames]
            step = max(1, len(frames) // SAMPLED_FRAMES)
            self._frames = [PIL.Image.fromarray(f.permute(1, 2, 0).numpy()) for f in frames[::step][:SAMPLED_FRAMES]]
        return self._frames


def _tokens(quote: Any) -> int:
    return quote.tokens("video") + quote.tokens("audio")


def plan_video(
    job: VideoJob,
    model: Model,
    bars: list[Bar],
    *,
    lossless: bool = False,
    detail: str | None = None,
    prices: tuple = (),
) -> Plan:
    params = model.formulas.get("video", {})
    levels: dict[str, int] = params.get("levels", {})
    if lossless:
        return Plan("kept", "kept: no lossless change is priced for video")
    if params.get("formula") != "frames" or not levels:
        return Plan("kept", f"kept: {model.asked} bills this video by its own frame size and rate; not re-encoded")
    default = detail or params.get("default_level")
    original = _tokens(price(job.path, model.asked, detail=default, prices=prices))
    ladder = sorted(
        ((level, _tokens(price(job.path, model.asked, detail=level, prices=prices))) for level in levels),
        key=lambda lt: lt[1],
    )
    ladder = [(level, tokens) for level, tokens in ladder if tokens < original]
    if not ladder:
        return Plan("kept", f"kept: no media_resolution level costs fewer than {original:,} tokens on {model.asked}")
    wanted = [bar for bar in bars if bar.metric == "ssim"]
    width, height = job.media.width, job.media.height
    reference = C._estimated(width, height, levels[default])
    tried: list[dict[str, Any]] = []
    for level, tokens in ladder:  # cheapest first; a few levels at most
        seen = C._estimated(width, height, levels[level])
        measures: dict[str, float | None] = {}
        if wanted:
            scores = [
                P.ssim(
                    P.resized(frame, reference.size),
                    P.to_view(frame, seen.size, reference.size, frame.size, None, None),
                )
                for frame in job.frames
            ]
            measures["ssim"] = sum(scores) / len(scores)
        ok = all(bar.met(measures["ssim"]) for bar in wanted)  # type: ignore[arg-type]
        tried.append({"detail": level, "tokens": tokens, **measures, "meets": ok})
        if ok:
            notes = [
                f"frames measured at an estimated view ({seen.width}x{seen.height}; no frame size is published)",
                "sound track unchanged",
            ]
            return Plan(
                "shrunk",
                f"media_resolution {default} -> {level} (file unchanged)",
                None,
                job.path.suffix,
                level,
                measures,
                tried,
                notes,
            )
    return Plan("kept", f"kept: no cheaper media_resolution level meets {', '.join(map(str, wanted))}", tried=tried)
