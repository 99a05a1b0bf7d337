"""Benchmark: shrink at the speed of one OCR pass (issue 39), side by side with one warm RapidOCR pass.

Run: ``python -m mmtok.eval.bench.shrink_speed --json eval/results/bench_shrink_speed.json --txt
eval/results/bench_shrink_speed.txt`` (``--screens 6 --diagrams 3 --documents 3 --photos 4 --tall 1 --repeats 3
--rounds 3`` by default; ``--screens 1 --diagrams 1 --documents 0 --photos 1 --tall 1 --repeats 1 --rounds 1`` for a
quick look).

**Inputs** (held out: made here with seed 39, none of them seen while shrink's search was tuned, which used the
shrink benchmark's seed-0 pages): UI screenshots (the issue's 2400x1500 first, then long sides of 1,600-2,800 px),
diagrams (boxes, arrows and labels on a grid, the issue's 2013x2241 first), document pages, photos (crops of
scikit-image's photos, ``mmtok.eval.tools.corpus``), and a 1080x9000 full-page screenshot; all written as PNG
(photos as JPEG, PNG or WebP) under ``.cache/shrink-speed/``. The bench names each input in its results.

**The anchor** is one warm RapidOCR pass over the original: ``rapidocr_onnxruntime.RapidOCR()`` with the engine's
own settings (detection, angle classification and recognition, its own thread counts), loaded and run once on
another image first, then timed on the input (median of ``--repeats``). On the tall page it is the same engine run
over the page in 2,000-px tiles at full resolution (shrunk whole to 2,000 px, its 16-px text would be ~3.6 px and
nothing would be read), so that the anchor reads the text once, as shrink must.

**Shrink** is timed in a fresh process per measurement, with a fresh cache folder (no analysis kept from another
run), after the same warm-up as the anchor's (the same call run once on another image: the OCR engine, the
recognition network and the price data loaded): ``mmtok.budgets.shrink.shrink_models`` for one model (gpt-4o), for
three (gpt-4o, claude-opus-4-7, gemini-3-flash-preview), and with ``--slice`` on the tall page (gpt-4o), at the
default bars. Cold figures (the same
call without the warm-up: loading included) are kept beside them. The hook is timed whole, as Claude Code runs it:
``mmtok hook claude-code`` started as a process with a PreToolUse event on stdin (process start, imports, loading,
shrinking and the answer), with a fresh cache; and again on the same image (its copy reused). Each input is timed
in ``--rounds`` rounds, one after the other (the anchor, then each shrink), and each of its times is the median of
its rounds': on the shared 2-core machine one round's anchor of an input moved by up to 55% between runs. Each
ratio is the median over the inputs of shrink's seconds over the anchor's, measured in the same run. Peak memory is each
process's own high-water mark of its resident set (``VmHWM`` from ``/proc``, read every 10 ms), the warm-up included.

**The same answers**: each input is shrunk at the default bars for gpt-4o, gpt-5.4, claude-opus-4-7 and
gemini-3-flash-preview by the path before issue 39 (``reference=True``: the search from the 10-px rung galloping
down, whole detector passes, nothing kept between calls) and by today's path, in one call each (so each path shares
its work across the models as a user's ``-m a -m b`` does). A pair agrees when today's answer costs the same or
fewer tokens; every answer of today's path is then measured again in full, from the written file
(``verify.measure_written``: nothing kept between calls or inferred by the search, SSIM and recog at the model's
view, the file's text found and read at its view against the original's text found and read whole, by today's
detector settings), and must meet every bar. The earlier path reads views and originals without bands; today's
searches an original over 0.5 MP, and a view over 0.7 MP, in bands (memory): that difference is in the agreement.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "shrink-speed"
SEED = 39
ONE = ("gpt-4o",)
THREE = ("gpt-4o", "claude-opus-4-7", "gemini-3-flash-preview")
AGREEMENT_MODELS = ("gpt-4o", "gpt-5.4", "claude-opus-4-7", "gemini-3-flash-preview")
HOOK_MODEL = "claude-opus-4-7"  # the hook's default
TARGETS = {"one": 2.0, "three": 3.0, "hook": 2.5, "slice": 3.0, "peak_mb": 600.0, "agreement": 0.95}
TILE_PX = 2000


# ------------------------------------------------------------------------------------------------------ corpus
def render_diagram(rng: random.Random, width: int, height: int, sentences: list[str]) -> tuple[Any, str]:
    """A diagram: rounded boxes on a grid, each with a short bold title and one or two lines of small text, joined
    by arrows, with a caption; (image, its text)."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    from mmtok.eval.bench.shrink import _phrase, font_path

    image = PIL.Image.new("RGB", (width, height), "white")
    draw = PIL.ImageDraw.Draw(image)
    text_px = max(12, round(min(width, height) / rng.uniform(90, 130)))
    body = PIL.ImageFont.truetype(font_path(), text_px)
    bold = PIL.ImageFont.truetype(font_path(True), round(text_px * 1.25))
    columns, rows = rng.randint(3, 4), rng.randint(3, 5)
    cell_w, cell_h = width // columns, (height - 4 * text_px) // rows
    written, centres = [], []
    for r in range(rows):
        for c in range(columns):
            if rng.random() < 0.2:
                continue
            left, top = c * cell_w + cell_w // 8, r * cell_h + cell_h // 5
            right, bottom = left + cell_w * 3 // 4, top + cell_h * 3 // 5
            fill = rng.choice([(232, 240, 254), (254, 243, 226), (232, 245, 233), (245, 245, 245)])
            draw.rounded_rectangle((left, top, right, bottom), radius=text_px // 2, fill=fill, outline=(60, 60, 80),
                                   width=2)  # fmt: skip
            words = _phrase(rng, sentences).rstrip(".").split()
            title = " ".join(words[:2])[:18]
            detail = " ".join(words[2:5])[:26]
            draw.text((left + text_px // 2, top + text_px // 2), title, font=bold, fill=(20, 20, 30))
            draw.text((left + text_px // 2, top + text_px * 2), detail, font=body, fill=(40, 40, 50))
            written += [title, detail] if detail else [title]
            centres.append(((left + right) // 2, bottom, (left + right) // 2, top))
    for a, b in itertools.pairwise(centres):
        draw.line((a[0], a[1], b[2], b[3]), fill=(90, 90, 110), width=2)
        draw.polygon([(b[2], b[3]), (b[2] - 6, b[3] - 12), (b[2] + 6, b[3] - 12)], fill=(90, 90, 110))
    caption = _phrase(rng, sentences)[:70]
    draw.text((text_px, height - 2 * text_px), caption, font=body, fill=(30, 30, 30))
    return image, "\n".join([*written, caption])


def tall_page(width: int, height: int, text_px: int, sentences: list[str], rng: random.Random) -> Any:
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    from mmtok.eval.bench.shrink import _phrase, _wrap, font_path

    page = PIL.Image.new("RGB", (width, height), "white")
    draw = PIL.ImageDraw.Draw(page)
    font = PIL.ImageFont.truetype(font_path(), text_px)
    y = 60
    while y < height - 6 * text_px:
        for line in _wrap(draw, " ".join(_phrase(rng, sentences) for _ in range(3)), font, width - 240):
            if y >= height - 6 * text_px:
                break
            draw.text((120, y), line, font=font, fill=(30, 30, 30))
            y += round(text_px * 1.6)
        y += text_px * 5
    return page


def corpus(screens: int, diagrams: int, documents: int, photos: int, tall: int) -> list[tuple[str, Path]]:
    """(kind, path) of each input, made once under ``CACHE`` (seeded: the same inputs on every machine)."""
    from mmtok.eval.bench.shrink import _sentences, render_document, render_screenshot
    from mmtok.eval.tools.corpus import folder_files, photo_folder

    folder = CACHE / f"inputs-{SEED}"
    folder.mkdir(parents=True, exist_ok=True)
    sentences = _sentences()
    out: list[tuple[str, Path]] = []

    def made(kind: str, name: str, make: Any) -> None:
        path = folder / name
        if not path.is_file():
            image = make()
            image.save(path.with_suffix(".partial.png"))
            path.with_suffix(".partial.png").replace(path)
        out.append((kind, path))

    for i in range(screens):
        side = 2400 if i == 0 else 1600 + 200 * (i % 7)
        size = (2400, 1500) if i == 0 else None  # the screenshot
        made("screenshot", f"screen_{i:02d}.png", lambda r=random.Random(SEED * 100 + i), s=side, z=size: _resized(
            render_screenshot(r, s, sentences)[0], z))  # fmt: skip
    for i in range(diagrams):
        size = (2013, 2241) if i == 0 else (1600 + 200 * (i % 5), 1400 + 150 * (i % 4))
        made("diagram", f"diagram_{i:02d}.png", lambda r=random.Random(SEED * 200 + i), z=size: render_diagram(
            r, *z, sentences)[0])  # fmt: skip
    for i in range(documents):
        made("document", f"document_{i:02d}.png", lambda r=random.Random(SEED * 300 + i), s=1400 + 250 * (i % 5):
             render_document(r, s, sentences)[0])  # fmt: skip
    for i in range(tall):
        made(
            "tall", f"tall_{i:02d}.png", lambda r=random.Random(SEED * 400 + i): tall_page(1080, 9000, 16, sentences, r)
        )
    if photos:
        for path in folder_files(photo_folder(photos, folder=CACHE / f"photos-{photos}-{SEED}", seed=SEED)):
            out.append(("photo", path))
    return out


def _resized(image: Any, size: tuple[int, int] | None) -> Any:
    return image if size is None or image.size == size else image.resize(size)


def _warm_image() -> Any:
    """A small image with a line of text, not one of the inputs: what the warm-ups read."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    from mmtok.eval.bench.shrink import font_path

    image = PIL.Image.new("RGB", (640, 160), "white")
    PIL.ImageDraw.Draw(image).text((20, 50), "Warm up: invoice 1234-AB", font=PIL.ImageFont.truetype(font_path(), 32),
                                   fill="black")  # fmt: skip
    return image


# ------------------------------------------------------------------------------------------------ child processes
def child(job: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process: the anchor's passes, or one shrink call."""
    if job["do"] == "anchor":
        return _anchor(Path(job["path"]), job["repeats"], job["tiled"])
    return _shrink(job)


def _anchor(path: Path, repeats: int, tiled: bool) -> dict[str, Any]:
    import numpy as np
    import PIL.Image
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    engine(np.asarray(_warm_image())[:, :, ::-1].copy())
    with PIL.Image.open(path) as im:
        bgr = np.ascontiguousarray(np.asarray(im.convert("RGB"))[:, :, ::-1])
    tiles = [bgr[top : top + TILE_PX] for top in range(0, bgr.shape[0], TILE_PX - 200)] if tiled else [bgr]
    times, lines = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        lines = sum(len(engine(tile)[0] or []) for tile in tiles)
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "lines": lines}


def _shrink(job: dict[str, Any]) -> dict[str, Any]:
    from mmtok.budgets.shrink import make_bars, shrink_models

    if job["warm"]:
        _warm(job["models"], Path(job["out"]).parent / "warm")
    path = Path(job["path"])
    start = time.perf_counter()
    results = list(shrink_models(path, job["models"], make_bars(None), Path(job["out"]), path.stem,
                                 slice=job["slice"], reference=job["reference"]))  # fmt: skip
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "results": [_summary(r) for r in results]}


def _warm(models: list[str] | None = None, out: Path | None = None) -> None:
    """As the anchor's engine is run once on another image first: the same shrink call run once on an image that
    is not the input (OCR engine, recognition network and price data loaded; nothing about the input kept)."""
    from mmtok.budgets.shrink import make_bars, shrink_models

    folder = Path(tempfile.mkdtemp(prefix="mmtok-warm-")) if out is None else out
    folder.mkdir(parents=True, exist_ok=True)
    image = folder / "warm.png"
    _warm_image().save(image)
    list(shrink_models(image, models or list(ONE), make_bars(None), folder, "warm"))


def _summary(result: Any) -> dict[str, Any]:
    if isinstance(result, Exception):
        return {"error": str(result)}
    readings = [t for t in result.tried if isinstance(t.get("ocr"), float)]
    return {
        "model": result.model,
        "status": result.status,
        "action": result.action,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "detail": result.detail,
        "measures": result.measures,
        "readings": len(readings),
        "pieces": len(result.pieces),
    }


def run_child(job: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``job`` in a fresh process; its answer with ``peak_mb`` (its maximum resident set) and ``wall_s``."""
    command = [sys.executable, "-m", "mmtok.eval.bench.shrink_speed", "--child", json.dumps(job)]
    return _measured(command, env, None)


def _measured(command: list[str], env: dict[str, str], stdin: bytes | None) -> dict[str, Any]:
    """Run ``command`` with ``stdin``; its last stdout line as JSON (if any), its wall time and its peak memory: the
    high-water mark of its resident set after it started (``VmHWM``, read every 10 ms; ``wait4``'s ``ru_maxrss``
    would count the parent's resident set at the fork too)."""
    import threading

    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
    reader.start()
    high = [0.0]
    watcher = threading.Thread(target=_watch, args=(process.pid, high), daemon=True)
    watcher.start()
    process.stdin.write(stdin or b"")
    process.stdin.close()
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    process.stdout.close()
    process.stderr.close()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])}: exit {process.returncode}: {b''.join(errors).decode()[-2000:]}")
    answer = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    watcher.join(1)
    return {**answer, "wall_s": wall, "peak_mb": high[0] or usage.ru_maxrss / 1024}


def _watch(pid: int, high: list[float]) -> None:
    """Keep the process's resident high-water mark (MB) in ``high[0]`` until it is gone."""
    status = Path(f"/proc/{pid}/status")
    while True:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    high[0] = max(high[0], int(line.split()[1]) / 1024)
        except (OSError, ValueError):
            return
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------- the runs
def measure_input(kind: str, path: Path, repeats: int, base_env: dict[str, str]) -> dict[str, Any]:
    """The anchor, shrink for one and three models (warm and cold), the hook, and --slice on a tall page."""
    row: dict[str, Any] = {"input": path.name, "kind": kind}
    with tempfile.TemporaryDirectory(prefix="mmtok-speed-") as scratch:

        def fresh(name: str) -> dict[str, str]:
            cache = Path(scratch) / name / "cache"
            cache.mkdir(parents=True)
            return {**base_env, "MMTOK_CACHE_DIR": str(cache)}

        anchor = run_child({"do": "anchor", "path": str(path), "repeats": repeats, "tiled": kind == "tall"}, fresh("a"))
        row["anchor_s"], row["anchor_peak_mb"], row["anchor_lines"] = anchor["seconds"], anchor["peak_mb"], anchor[
            "lines"]  # fmt: skip
        runs = [("one", ONE, False, True), ("one_cold", ONE, False, False), ("three", THREE, False, True)]
        if kind == "tall":
            runs = [("slice", ONE, True, True), ("one", ONE, False, True)]
        for name, models, sliced, warm in runs:
            job = {"do": "shrink", "path": str(path), "models": list(models), "slice": sliced, "warm": warm,
                   "reference": False, "out": str(Path(scratch) / name / "out")}  # fmt: skip
            done = run_child(job, fresh(name))
            row[f"{name}_s"], row[f"{name}_peak_mb"] = done["seconds"], done["peak_mb"]
            row[f"{name}_results"] = done["results"]
        if kind != "tall":
            row.update(_hook(path, fresh("hook")))
    return row


def combined(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One input's row from its rounds: each time the median of the rounds' (each round's beside it, under
    ``<key>_rounds``), each peak the largest, the answers the first round's."""
    row = dict(rounds[0])
    for key in rounds[0]:
        if key.endswith("_s"):
            row[key] = statistics.median(r[key] for r in rounds)
            row[f"{key}_rounds"] = [r[key] for r in rounds]
        elif key.endswith("_peak_mb"):
            row[key] = max(r[key] for r in rounds)
    return row


def _hook(path: Path, env: dict[str, str]) -> dict[str, Any]:
    """``mmtok hook claude-code`` on a Read of ``path``, as Claude Code starts it: whole, then again (reused)."""
    event = hook_event(path, path.parent)
    command = [*mmtok_command(), "hook", "claude-code"]
    first = _measured(command, env, json.dumps(event).encode())
    again = _measured(command, env, json.dumps(event).encode())
    answered = bool(first.get("hookSpecificOutput"))
    return {"hook_s": first["wall_s"], "hook_peak_mb": first["peak_mb"], "hook_again_s": again["wall_s"],
            "hook_rewrote": answered}  # fmt: skip


def mmtok_command() -> list[str]:
    script = Path(sys.executable).with_name("mmtok")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mmtok.cli.main"]


def hook_event(path: Path, project: Path, n: int = 0) -> dict[str, Any]:
    """A Claude Code PreToolUse event for a Read of ``path`` in ``project`` (the documented input shape)."""
    return {
        "session_id": "5b0e9d62-8f1a-4c3e-b7d2-3a9c6e1f0b48",
        "transcript_path": f"/home/dev/.claude/projects/{str(project).replace('/', '-')}/5b0e9d62.jsonl",
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(path)},
        "tool_use_id": f"toolu_01Bench{n:012d}",
    }


def agreement(kind: str, path: Path, out: Path) -> list[dict[str, Any]]:
    """Each model's answer by the path before issue 39 and by today's, and today's measured again in full."""
    from mmtok.budgets.shrink import make_bars, shrink_models
    from mmtok.budgets.shrink.verify import measure_written

    bars = make_bars(None)
    earlier = list(shrink_models(path, AGREEMENT_MODELS, bars, out / "earlier", path.stem, reference=True))
    start = time.perf_counter()
    today = list(shrink_models(path, AGREEMENT_MODELS, bars, out / "today", path.stem))
    seconds = time.perf_counter() - start
    rows = []
    full = _full_job(path)
    for model, before, now in zip(AGREEMENT_MODELS, earlier, today, strict=True):
        row: dict[str, Any] = {"input": path.name, "kind": kind, "model": model, "today_s": seconds}
        if isinstance(before, Exception) or isinstance(now, Exception):
            row["error"] = str(before if isinstance(before, Exception) else now)
            rows.append(row)
            continue
        row["earlier"], row["today"] = _summary(before), _summary(now)
        row["same"] = (before.tokens_after, before.action) == (now.tokens_after, now.action)
        row["same_or_cheaper"] = now.tokens_after <= before.tokens_after
        row["remeasured"] = measure_written(now, bars, full)
        rows.append(row)
    return rows


def _full_job(path: Path) -> Any:
    import mmtok
    from mmtok.budgets.shrink.job import ImageJob

    return ImageJob(path, mmtok.load(path), kept=False)


# ------------------------------------------------------------------------------------------------------ summary
def summarise(speed: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    def ratios(name: str, kinds: tuple[str, ...] | None = None) -> list[float]:
        return [r[f"{name}_s"] / r["anchor_s"] for r in speed if f"{name}_s" in r and (kinds is None or r["kind"] in
                                                                                        kinds)]  # fmt: skip

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    kinds = sorted({r["kind"] for r in speed})
    figures: dict[str, Any] = {}
    for name in ("one", "one_cold", "three", "hook", "hook_again", "slice"):
        figures[name] = {"median_ratio": median(ratios(name)), "max_ratio": max(ratios(name), default=None),
                         "by_kind": {k: median(ratios(name, (k,))) for k in kinds if ratios(name, (k,))},
                         "by_round": _by_round(speed, name)}  # fmt: skip
    peaks = [r[k] for r in speed for k in r if k.endswith("_peak_mb") and not k.startswith("anchor") and r[k]]
    figures["peak_mb"] = max(peaks, default=None)
    figures["anchor_peak_mb"] = max((r["anchor_peak_mb"] for r in speed if r.get("anchor_peak_mb")), default=None)
    ok = [p for p in pairs if "error" not in p]
    figures["pairs"] = len(ok)
    figures["agreement"] = sum(p["same_or_cheaper"] for p in ok) / len(ok) if ok else None
    figures["identical"] = sum(p["same"] for p in ok) / len(ok) if ok else None
    figures["remeasured_failures"] = [f"{p['input']} {p['model']}: {p['remeasured']}" for p in ok
                                      if not p["remeasured"]["ok"]]  # fmt: skip
    figures["readings"] = {
        "earlier": statistics.fmean([p["earlier"]["readings"] for p in ok]) if ok else None,
        "today": statistics.fmean([p["today"]["readings"] for p in ok]) if ok else None,
    }
    figures["targets"] = _targets(figures)
    return figures


def _by_round(speed: list[dict[str, Any]], name: str) -> list[float]:
    """The median ratio of each round taken alone (each input's time in that round over its anchor's in that round)."""
    rows = [r for r in speed if f"{name}_s_rounds" in r and "anchor_s_rounds" in r]
    rounds = min((len(r[f"{name}_s_rounds"]) for r in rows), default=0)
    return [statistics.median(r[f"{name}_s_rounds"][k] / r["anchor_s_rounds"][k] for r in rows) for k in range(rounds)]


def _targets(f: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in ("one", "three", "hook", "slice"):
        value = f[name]["median_ratio"]
        out[name] = {"target": TARGETS[name], "value": value, "met": value is not None and value <= TARGETS[name]}
    out["peak_mb"] = {"target": TARGETS["peak_mb"], "value": f["peak_mb"],
                      "met": f["peak_mb"] is not None and f["peak_mb"] <= TARGETS["peak_mb"]}  # fmt: skip
    out["agreement"] = {"target": TARGETS["agreement"], "value": f["agreement"],
                        "met": f["agreement"] is not None and f["agreement"] >= TARGETS["agreement"]}  # fmt: skip
    out["remeasured"] = {"target": 0, "value": len(f["remeasured_failures"]), "met": not f["remeasured_failures"]}
    return out


def report(figures: dict[str, Any], speed: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> str:
    from mmtok.eval.bench import machine

    lines = [
        f"bench_shrink_speed: {len(speed)} held-out inputs (seed {SEED}): "
        + ", ".join(f"{sum(r['kind'] == k for r in speed)} {k}" for k in sorted({r["kind"] for r in speed}))
        + f"; {machine()}; load average {os.getloadavg()[0]:.1f} at the end.",
        "anchor: one warm RapidOCR() pass over the original (its own settings; the tall page in 2,000-px tiles); "
        "shrink: shrink_models in a fresh process after the same warm-up, fresh cache, default bars; hook: the whole "
        "`mmtok hook claude-code` process; each input timed in "
        f"{len(speed[0].get('anchor_s_rounds', [0])) if speed else 0} rounds, one after the other, its times the "
        "median of its rounds'; ratios are medians over the inputs of seconds / the anchor's seconds.",
        "",
        f"  {'input':18} {'kind':10} {'anchor s':>8} {'1 model':>8} {'cold':>6} {'3 models':>8} {'hook':>6} "
        f"{'again':>6} {'slice':>6} {'peak MB':>8}",
    ]
    for r in speed:
        peak = max((r[k] for k in r if k.endswith("_peak_mb") and not k.startswith("anchor") and r[k]), default=0)
        cells = [f"{r.get(k + '_s', float('nan')):8.2f}" for k in ("one", "one_cold", "three", "hook", "hook_again",
                                                                     "slice")]  # fmt: skip
        lines.append(f"  {r['input']:18} {r['kind']:10} {r['anchor_s']:8.2f} " + " ".join(cells) + f" {peak:8.0f}")
    lines += ["", "ratios to the anchor (median, worst; by kind):"]
    for name in ("one", "one_cold", "three", "hook", "hook_again", "slice"):
        f = figures[name]
        if f["median_ratio"] is not None:
            kinds = ", ".join(f"{k} {v:.2f}x" for k, v in f["by_kind"].items())
            by_round = ", ".join(f"{v:.2f}x" for v in f.get("by_round", []))
            lines.append(f"  {name:10} {f['median_ratio']:5.2f}x (worst {f['max_ratio']:.2f}x; {kinds}; round by round "
                         f"{by_round})")  # fmt: skip
    lines += [
        "",
        f"the same answers: {figures['pairs']} input-model pairs, today's answer as cheap or cheaper than the earlier "
        f"path's for {figures['agreement'] or 0:.1%} (identical {figures['identical'] or 0:.1%}); OCR readings per "
        f"model {figures['readings']['earlier'] or 0:.2f} -> {figures['readings']['today'] or 0:.2f}; re-measured in "
        f"full, {len(figures['remeasured_failures'])} miss a bar",
    ]
    lines += [f"    misses: {m}" for m in figures["remeasured_failures"][:10]]
    for p in pairs:
        if "error" not in p and not p["same"]:
            before, now = p["earlier"], p["today"]
            lines.append(f"    {p['input']} {p['model']}: earlier {before['action']} ({before['tokens_after']})  |  "
                         f"today {now['action']} ({now['tokens_after']})")  # fmt: skip
    lines += ["", "targets:"]
    for name, t in figures["targets"].items():
        value = t["value"]
        shown = "n/a" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))
        lines.append(f"  {name:11} {shown:>8} (target {t['target']}) -> {'MET' if t['met'] else 'MISSED'}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--screens", type=int, default=6)
    parser.add_argument("--diagrams", type=int, default=3)
    parser.add_argument("--documents", type=int, default=3)
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--tall", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="anchor passes per input (median)")
    parser.add_argument("--rounds", type=int, default=3, help="timings of each input, one after the other (median)")
    parser.add_argument("--no-agreement", action="store_true", help="time only")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--txt", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    from mmtok.eval.bench import compile_package, machine, write_results

    compile_package()
    inputs = corpus(args.screens, args.diagrams, args.documents, args.photos, args.tall)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MMTOK_")}
    speed, pairs = [], []
    with tempfile.TemporaryDirectory(prefix="mmtok-speed-") as scratch:
        os.environ["MMTOK_CACHE_DIR"] = str(Path(scratch) / "cache")  # the agreement runs' own, fresh
        for n, (kind, path) in enumerate(inputs):
            speed.append(combined([measure_input(kind, path, args.repeats, env) for _ in range(args.rounds)]))
            if not args.no_agreement and kind != "tall":
                pairs += agreement(kind, path, Path(scratch) / f"agreement-{n}")
            print(f"[{n + 1}/{len(inputs)}] {kind} {path.name}: anchor {speed[-1]['anchor_s']:.2f} s", flush=True)
    figures = summarise(speed, pairs)
    text = report(figures, speed, pairs)
    print(text)
    payload = {"figures": figures, "inputs": speed, "pairs": pairs, "machine": machine(), "args": vars(args)}
    write_results(args.txt, text, args.json, lambda: payload)


if __name__ == "__main__":
    main()
