"""Calibration of shrink's ``recog`` bar: what EfficientNet-Lite0 still recognises in a photo as it is made smaller.

Run: ``python -m mmtok.eval.bench.shrink_recognition --json eval/results/shrink_recognition.json --txt
eval/results/shrink_recognition.txt``.

Photos, each whole and as two crops (70% and 50% of each side, from opposite corners), in two sets that share no
source picture:

- held out (the threshold is chosen on these): scikit-image's bundled ``motorcycle_left``, ``camera``, ``coins``,
  ``moon``, ``retina``, ``clock_motion``, ``brick``, ``grass``, ``gravel``, ``cell`` and scikit-learn's two sample
  images (``china``, ``flower``);
- check (the shrink benchmark's photo corpus is cut from these): ``astronaut``, ``coffee``, ``chelsea``, ``rocket``,
  ``immunohistochemistry``, ``hubble_deep_field``.

Each photo's reference is its view at up to 1,024 px on the long side; each rendition is the photo resized (Lanczos,
as shrink does) to a long side of 768 ... 32 px and looked at as shrink's bar does (``recognition.look``: both at
224 px on the short side). Per long side: the share of renditions whose top-1 class is the reference's (top-1
agreement), the share where the reference's top-1 is among the rendition's top 5 (top-5 agreement), both over the
photos the classifier is sure of (reference top-1 probability >= ``SURE``), the similarity (the bar's measure), and
SSIM at the reference's view. Per candidate threshold: over every rendition whose similarity reaches it, the top-5
and top-1 agreement; and, as shrink picks, over each sure photo's smallest rendition that reaches it (the pick), the
top-5 and top-1 agreement and the median long side picked. The default bar is the smallest threshold at which, on
the held-out photos, every pick keeps the reference's top class within its top 5 (``TARGET_TOP5``) and first
(``TARGET_TOP1``): the renditions shrink would choose, not all those that pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

LONG_SIDES_PX = (768, 512, 384, 320, 256, 224, 192, 160, 128, 112, 96, 80, 64, 48, 32)
REFERENCE_LONG_SIDE_PX = 1024
SURE = 0.25  # a reference top-1 probability at least this: the class agreement means something
TARGET_TOP5 = 1.0  # at the pick, the reference's class always among the rendition's top 5 ...
TARGET_TOP1 = 1.0  # ... and still its top class
THRESHOLDS = tuple(round(0.50 + 0.01 * i, 2) for i in range(50))
HELD_OUT = (
    "motorcycle_left.png",
    "camera.png",
    "coins.png",
    "moon.png",
    "retina.jpg",
    "clock_motion.png",
    "brick.png",
    "grass.png",
    "gravel.png",
    "cell.png",
)
CHECK = (
    "astronaut.png",
    "coffee.png",
    "chelsea.png",
    "rocket.jpg",
    "ihc.png",
    "hubble_deep_field.jpg",
)


def _skimage(name: str) -> Any:
    import PIL.Image
    import skimage.data

    with PIL.Image.open(Path(skimage.data.__file__).parent / name) as im:
        return im.convert("RGB")


def photos(which: str) -> dict[str, Any]:
    """name -> RGB image: each source photo whole and as two crops."""
    import PIL.Image

    sources = {n.split(".")[0]: _skimage(n) for n in (HELD_OUT if which == "held-out" else CHECK)}
    if which == "held-out":
        from sklearn.datasets import load_sample_images

        for name, array in zip(("china", "flower"), load_sample_images().images, strict=True):
            sources[name] = PIL.Image.fromarray(array).convert("RGB")
    out = {}
    for name, image in sources.items():
        w, h = image.size
        out[name] = image
        out[f"{name}-crop70"] = image.crop((0, 0, round(w * 0.7), round(h * 0.7)))
        out[f"{name}-crop50"] = image.crop((round(w * 0.5), round(h * 0.5), w, h))
    return out


def measure(name: str, image: Any) -> list[dict[str, Any]]:
    """One row per long side smaller than the photo's: the bar's similarity, class agreement, SSIM."""
    from mmtok.budgets.shrink import pictures as P
    from mmtok.budgets.shrink import recognition as R

    scale = min(1.0, REFERENCE_LONG_SIDE_PX / max(image.size))
    view = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    reference = P.resized(image, view)
    size = R.eval_size(*view)
    ref = R.look(reference, size)
    rows = []
    for long_side in LONG_SIDES_PX:
        if long_side >= max(view):
            continue
        s = long_side / max(view)
        small = P.resized(image, (max(1, round(view[0] * s)), max(1, round(view[1] * s))))
        seen = small.resize(view, 3)  # bicubic back onto the view, as shrink's measures lay it over the original
        got = R.look(seen, size)
        rows.append(
            {
                "photo": name,
                "long_side_px": long_side,
                "similarity": R.similarity(ref, got),
                "reference_top1_probability": float(ref.probabilities.max()),
                "top1_same": got.top1 == ref.top1,
                "top5_has_reference_top1": ref.top1 in got.top(5),
                "ssim_at_view": P.ssim(reference, seen) if min(view) >= 11 else None,
            }
        )
    return rows


def _share(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def by_long_side(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for long_side in LONG_SIDES_PX:
        sel = [r for r in rows if r["long_side_px"] == long_side]
        sure = [r for r in sel if r["reference_top1_probability"] >= SURE]
        if not sel:
            continue
        ssims = [r["ssim_at_view"] for r in sel if r["ssim_at_view"] is not None]
        out.append(
            {
                "long_side_px": long_side,
                "renditions": len(sel),
                "sure": len(sure),
                "top1_agreement_sure": _share([r["top1_same"] for r in sure]),
                "top5_agreement_sure": _share([r["top5_has_reference_top1"] for r in sure]),
                "similarity_median": statistics.median(r["similarity"] for r in sel),
                "similarity_p10": float(np.percentile([r["similarity"] for r in sel], 10)),
                "ssim_median": statistics.median(ssims) if ssims else None,
                "ssim_090_share": _share([s >= 0.90 for s in ssims]),
            }
        )
    return out


def by_threshold(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    sure = [r for r in rows if r["reference_top1_probability"] >= SURE]
    for t in THRESHOLDS:
        passing = [r for r in sure if r["similarity"] >= t - 1e-12]
        picks: dict[str, dict[str, Any]] = {}  # each sure photo's smallest rendition that reaches t
        for r in passing:
            if r["photo"] not in picks or r["long_side_px"] < picks[r["photo"]]["long_side_px"]:
                picks[r["photo"]] = r
        out.append(
            {
                "threshold": t,
                "renditions_passing_sure": len(passing),
                "top5_agreement": _share([r["top5_has_reference_top1"] for r in passing]),
                "top1_agreement": _share([r["top1_same"] for r in passing]),
                "picks": len(picks),
                "top5_at_pick": _share([r["top5_has_reference_top1"] for r in picks.values()]),
                "top1_at_pick": _share([r["top1_same"] for r in picks.values()]),
                "median_pick_long_side_px": statistics.median(r["long_side_px"] for r in picks.values())
                if picks
                else None,
            }
        )
    return out


def chosen(thresholds: list[dict[str, Any]]) -> dict[str, Any] | None:
    for row in thresholds:
        if (row["top5_at_pick"] or 0) >= TARGET_TOP5 and (row["top1_at_pick"] or 0) >= TARGET_TOP1:
            return row
    return None


def lost_at(table: list[dict[str, Any]], key: str, floor: float) -> int | None:
    """The largest long side at which ``key`` falls under ``floor`` (where recognisable detail is lost)."""
    for row in table:
        if row[key] is not None and row[key] < floor:
            return row["long_side_px"]
    return None


def report(result: dict[str, Any]) -> str:
    lines = [
        f"shrink recog bar calibration: {result['network']}",
        f"{result['machine']}; {result['seconds']:.0f} s",
        "",
    ]
    for which in ("held-out", "check"):
        part = result[which]
        lines += [
            f"{which}: {part['photos']} photos ({part['sure_photos']} the classifier is sure of, top-1 p >= {SURE})",
            f"  {'long side':>9} {'n':>4} {'top-1':>6} {'top-5':>6} {'sim med':>8} {'sim p10':>8} {'ssim med':>8} "
            f"{'ssim>=.9':>8}",
        ]
        for r in part["by_long_side"]:
            lines.append(
                f"  {r['long_side_px']:>9} {r['renditions']:>4} {_pct(r['top1_agreement_sure']):>6} "
                f"{_pct(r['top5_agreement_sure']):>6} {r['similarity_median']:8.3f} {r['similarity_p10']:8.3f} "
                f"{_num(r['ssim_median']):>8} {_pct(r['ssim_090_share']):>8}"
            )
        lines.append(
            f"  top-5 agreement under 90% from a long side of {part['top5_lost_at_px']} px; top-1 under 80% from "
            f"{part['top1_lost_at_px']} px"
        )
        lines.append(
            f"  {'threshold':>9} {'passing':>7} {'top-5':>6} {'top-1':>6}   {'picks':>5} {'top-5':>6} {'top-1':>6} "
            f"{'median long side picked':>24}"
        )
        for r in part["by_threshold"]:
            if r["threshold"] in result["shown_thresholds"]:
                lines.append(
                    f"  {r['threshold']:>9.2f} {r['renditions_passing_sure']:>7} {_pct(r['top5_agreement']):>6} "
                    f"{_pct(r['top1_agreement']):>6}   {r['picks']:>5} {_pct(r['top5_at_pick']):>6} "
                    f"{_pct(r['top1_at_pick']):>6} {r['median_pick_long_side_px']!s:>24}"
                )
        lines.append("")
    c, check = result["chosen"], result["check_at_chosen"]
    lines.append(
        f"chosen: recog>={c['threshold']:.2f}, the smallest threshold at which every held-out pick (each sure photo's "
        f"smallest rendition meeting it, {c['picks']} photos, median long side {c['median_pick_long_side_px']} px) "
        f"keeps the reference's top class first and in its top 5 (over all passing renditions: top-5 "
        f"{_pct(c['top5_agreement'])}, top-1 {_pct(c['top1_agreement'])}); on the check photos at that threshold: "
        f"picks top-5 {_pct(check['top5_at_pick'])}, top-1 {_pct(check['top1_at_pick'])} ({check['picks']} photos), "
        f"all passing top-5 {_pct(check['top5_agreement'])}, top-1 {_pct(check['top1_agreement'])}"
    )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--txt", type=Path, default=None)
    args = parser.parse_args()
    from mmtok.budgets.shrink import recognition as R
    from mmtok.eval.bench import machine

    start = time.perf_counter()
    result: dict[str, Any] = {"network": R.NETWORK, "machine": machine()}
    for which in ("held-out", "check"):
        rows = [row for name, image in photos(which).items() for row in measure(name, image)]
        table = by_long_side(rows)
        result[which] = {
            "photos": len({r["photo"] for r in rows}),
            "sure_photos": len({r["photo"] for r in rows if r["reference_top1_probability"] >= SURE}),
            "by_long_side": table,
            "by_threshold": by_threshold(rows),
            "top5_lost_at_px": lost_at(table, "top5_agreement_sure", 0.90),
            "top1_lost_at_px": lost_at(table, "top1_agreement_sure", 0.80),
            "rows": rows,
        }
    result["chosen"] = chosen(result["held-out"]["by_threshold"])
    if result["chosen"] is None:
        raise SystemExit("no threshold reaches the targets on the held-out photos")
    t = result["chosen"]["threshold"]
    result["check_at_chosen"] = next(r for r in result["check"]["by_threshold"] if r["threshold"] == t)
    result["shown_thresholds"] = sorted({0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, t})
    result["seconds"] = time.perf_counter() - start
    text = report(result)
    print(text)
    if args.txt:
        args.txt.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
