"""Benchmark: what ``mmtok shrink`` saves, per model, on generated screenshots, documents, photos and speech.

Run: ``python -m mmtok.eval.bench.shrink [--pages 200] [--photos 200] [--clips 40] [--limit N] [--only pages]``, then
``python -m mmtok.eval.bench.shrink --report-only --json eval/results/bench_shrink.json --txt
eval/results/bench_shrink.txt``. Rows are appended per item to ``.cache/shrink-bench/rows-*.jsonl`` (a stopped run
resumes where it was); ``--only`` runs some corpora in this process (several processes can share the work) and
``--limit N`` the first N pages and photos (screenshots and documents alternate); the report merges every process's
rows and says how many items of each corpus were run.

Corpus (made once under ``.cache/shrink-bench``, seeded):

- 200 screenshots and document pages rendered by Pillow with DejaVu Sans (matplotlib's bundled font) and known
  text, long side 800-4,000 px: half are UI screenshots (title bar, sidebar, buttons, body text at 1x-2.5x scale),
  half are pages (margins, a title, paragraphs), as PNG;
- 200 photos from ``mmtok.eval.tools.corpus.photo_folder`` (crops of scikit-image's photos, JPEG/PNG/WebP, 256-4,000 px,
  some EXIF-rotated);
- 40 speech clips: 2-4 held-out Harvard sentences (``eval/data/speech/heldout``, espeak-ng) joined with pauses of
  0.4-3 s and 0.3-2 s of leading and trailing silence, with faint noise, 16 kHz WAV; the transcripts are known.

Per model (one each of OpenAI tile, OpenAI patch, Claude and Gemini for images; Gemini and an OpenAI audio model
for speech): the mean token saving at the default bars and at ``ocr>=0.98`` alone, the share of items shrunk under
each bar set (a cheaper rendition met every bar), the share of ``--lossless`` outputs with identical tokens, their
byte saving and the share written pixel-exact, and the time per item. Speech: billed seconds before and after, and
WER against the known transcripts of the original and the shrunk audio (faster-whisper tiny.en, corpus WER).

Side by side on the pages, in the same run: ``ocr>=0.98`` through the earlier path (``reference=True``: the search
before issue 39, from the rung where the median line is 10 px tall, galloping down, whole detector passes, nothing
kept between calls; ``eval/bench/shrink_speed.py`` measures today's path against it), its time per page and model
against the current path's (the issue's target: 3 s at most) and the share of identical decisions (the same
status, tokens and detail for the same page and model: kept, or the same rung of the ladder at the same level).
Every OCR reading of both paths is kept with the height of the original's median line in the rendition's view, to
show where reading stops (what ``START_LINE_PX`` and ``MIN_READ_LINE_PX`` in ``budgets/shrink`` rest on). Photos:
how often the shrunk rendition keeps EfficientNet-Lite0's top class (top 1, and within the top 5) of the original as
the model sees it, beside the recog measure.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "shrink-bench"
IMAGE_MODELS = ("gpt-4o", "gpt-5.4", "claude-opus-4-7", "gemini-3-flash-preview")
AUDIO_MODELS = ("gemini-3-flash-preview", "gpt-4o-audio-preview")
SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech" / "heldout"
MAX_LINES = 12  # lines of text per page (half that in a screenshot's body): OCR recognition time grows with the text


# ------------------------------------------------------------------------------------------------------ corpus
def font_path(bold: bool = False) -> str:
    """DejaVu Sans from matplotlib's own data folder: a TrueType font present wherever mmtok is installed."""
    import matplotlib

    return str(
        Path(matplotlib.get_data_path()) / "fonts" / "ttf" / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
    )


def _sentences() -> list[str]:
    lines = []
    for split in ("train", "heldout"):
        for line in (SPEECH.parent / split / "transcripts.jsonl").read_text().splitlines():
            lines.append(json.loads(line)["text"])
    return lines


def _phrase(rng: random.Random, sentences: list[str]) -> str:
    kind = rng.random()
    if kind < 0.15:
        number, letter, suffix = rng.randint(1000, 9999), rng.choice("ABCDEFGH"), rng.randint(10, 99)
        dollars, cents = rng.randint(10, 9999), rng.randint(0, 99)
        return f"Invoice {number}-{letter}{suffix}: ${dollars:,}.{cents:02d}"
    if kind < 0.25:
        page = rng.choice(["Settings", "Network", "Account", "Billing", "Storage"])
        item = rng.choice(["Proxy", "Keys", "Usage", "Limits"])
        return f"{page} > {item}: {rng.choice(['enabled', 'disabled', 'pending'])}"
    return rng.choice(sentences)


def _wrap(draw: Any, text: str, font: Any, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        trial = f"{line} {word}".strip()
        if draw.textlength(trial, font=font) <= width or not line:
            line = trial
        else:
            lines.append(line)
            line = word
    return [*lines, line] if line else lines


def render_document(rng: random.Random, long_side: int, sentences: list[str]) -> tuple[Any, str]:
    """A page (A4-like portrait or a landscape slide) with a title and paragraphs; returns (image, text)."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    portrait = rng.random() < 0.7
    width, height = (round(long_side / 1.414), long_side) if portrait else (long_side, round(long_side / 1.6))
    page = PIL.Image.new("RGB", (width, height), (255, 255, 255))
    draw = PIL.ImageDraw.Draw(page)
    body_px = max(12, round(width / rng.uniform(38, 60)))
    margin = round(width * rng.uniform(0.08, 0.14))
    title_font = PIL.ImageFont.truetype(font_path(True), round(body_px * 1.6))
    body_font = PIL.ImageFont.truetype(font_path(), body_px)
    y = margin
    title = _wrap(draw, _phrase(rng, sentences).rstrip("."), title_font, width - 2 * margin)[0]
    draw.text((margin, y), title, font=title_font, fill=(20, 20, 20))
    written = [title]
    y += round(body_px * 3)
    while y < height - margin - body_px * 4 and len(written) < MAX_LINES:
        paragraph = " ".join(_phrase(rng, sentences) for _ in range(rng.randint(2, 5)))
        for line in _wrap(draw, paragraph, body_font, width - 2 * margin):
            if y > height - margin - body_px * 1.5:
                break
            draw.text((margin, y), line, font=body_font, fill=(30, 30, 30))
            written.append(line)
            y += round(body_px * 1.45)
        y += body_px
        if rng.random() < 0.35:
            break  # pages that end early: a wide uniform bottom margin
    return page, "\n".join(written)


def render_screenshot(rng: random.Random, long_side: int, sentences: list[str]) -> tuple[Any, str]:
    """An application window: title bar, sidebar of menu items, toolbar buttons, body text; (image, text)."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    aspect = rng.choice([16 / 9, 16 / 10, 3 / 2, 4 / 3])
    width, height = long_side, round(long_side / aspect)
    scale = rng.uniform(1.0, 2.5) * long_side / 2000  # HiDPI screenshots draw the same UI with more pixels
    ui_px = max(11, round(16 * scale))
    shade = rng.choice([(245, 246, 248), (250, 250, 250), (236, 239, 244)])
    shot = PIL.Image.new("RGB", (width, height), shade)
    draw = PIL.ImageDraw.Draw(shot)
    font = PIL.ImageFont.truetype(font_path(), ui_px)
    bold = PIL.ImageFont.truetype(font_path(True), round(ui_px * 1.15))
    bar = round(ui_px * 2.6)
    accent = rng.choice([(32, 84, 160), (60, 60, 70), (0, 120, 90), (140, 40, 60)])
    draw.rectangle((0, 0, width, bar), fill=accent)
    title = _phrase(rng, sentences).rstrip(".")[:60]
    draw.text((round(ui_px * 1.2), round(bar * 0.25)), title, font=bold, fill=(255, 255, 255))
    written = [title]
    side = round(width * rng.uniform(0.16, 0.24))
    draw.rectangle((0, bar, side, height), fill=(225, 228, 233))
    y = bar + ui_px
    for item in rng.sample(
        ["Inbox", "Projects", "Reports", "Billing", "Settings", "Team", "Archive", "Usage", "Keys"], 6
    ):
        draw.text((ui_px, y), item, font=font, fill=(40, 40, 50))
        written.append(item)
        y += round(ui_px * 2.2)
    x = side + ui_px
    y = bar + ui_px
    for label in rng.sample(["Save", "Export", "Share", "Delete", "Refresh", "New item", "Filter"], 3):
        w = round(draw.textlength(label, font=font) + ui_px * 1.6)
        draw.rounded_rectangle(
            (x, y, x + w, y + round(ui_px * 2)),
            radius=round(ui_px / 3),
            fill=(255, 255, 255),
            outline=(170, 170, 180),
            width=max(1, round(scale)),
        )
        draw.text((x + round(ui_px * 0.8), y + round(ui_px * 0.45)), label, font=font, fill=(30, 30, 40))
        written.append(label)
        x += w + ui_px
    y += round(ui_px * 3.5)
    panel_right = width - ui_px * 2
    draw.rectangle((side + ui_px, y - ui_px // 2, panel_right, height - ui_px), fill=(255, 255, 255))
    body = 0
    while y < height - ui_px * 3 and body < MAX_LINES // 2:
        paragraph = " ".join(_phrase(rng, sentences) for _ in range(rng.randint(1, 3)))
        for line in _wrap(draw, paragraph, font, panel_right - side - ui_px * 3):
            if y > height - ui_px * 3:
                break
            draw.text((side + ui_px * 2, y), line, font=font, fill=(35, 35, 45))
            written.append(line)
            body += 1
            y += round(ui_px * 1.5)
        y += ui_px
    return shot, "\n".join(written)


def page_folder(n: int, seed: int = 0) -> Path:
    """``n`` screenshots and documents (half each), long side uniform in [800, 4000] px, PNG, with ``texts.json``."""
    folder = CACHE / f"pages-{n}-{seed}"
    manifest = folder / "texts.json"
    if manifest.is_file() and len(json.loads(manifest.read_text())) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    sentences = _sentences()
    texts = {}
    for i in range(n):
        long_side = rng.randint(800, 4000)
        kind = "screen" if i % 2 == 0 else "doc"
        image, text = (render_screenshot if kind == "screen" else render_document)(rng, long_side, sentences)
        name = f"{kind}_{i:04d}.png"
        image.save(folder / name, compress_level=6)
        texts[name] = text
    manifest.write_text(json.dumps(texts, indent=0))
    return folder


TALL_PAGES = ((1280, 8000, 18), (1080, 6000, 16))  # full-page screenshots: width, height, text px
TALL_FIELDS = (
    "run",
    "input",
    "model",
    "status",
    "action",
    "tokens_before",
    "tokens_after",
    "pieces",
    "measures",
    "time_s",
)


def tall_folder() -> Path:
    """Full-page screenshots (``TALL_PAGES``): paragraphs of known sentences in ordinary-size text down a page a
    model shrinks to a few px (1280x8000 on gpt-4o: 328x2048, 18-px text at ~4.6 px), with ``texts.json``."""
    import PIL.Image
    import PIL.ImageDraw
    import PIL.ImageFont

    folder = CACHE / "tall"
    manifest = folder / "texts.json"
    if manifest.is_file() and len(json.loads(manifest.read_text())) == len(TALL_PAGES):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    sentences = _sentences()
    texts = {}
    for width, height, text_px in TALL_PAGES:
        page = PIL.Image.new("RGB", (width, height), (255, 255, 255))
        draw = PIL.ImageDraw.Draw(page)
        font = PIL.ImageFont.truetype(font_path(), text_px)
        written, y = [], 40
        while y < height - 4 * text_px:
            for line in _wrap(draw, " ".join(_phrase(rng, sentences) for _ in range(3)), font, width - 80):
                if y >= height - 4 * text_px:
                    break
                draw.text((40, y), line, font=font, fill=(30, 30, 30))
                written.append(line)
                y += round(text_px * 1.6)
            y += text_px * 4  # paragraphs apart: fewer lines to read, the page as long
        name = f"tall_{width}x{height}.png"
        page.save(folder / name, compress_level=6)
        texts[name] = "\n".join(written)
    manifest.write_text(json.dumps(texts, indent=0))
    return folder


def tall_rows(path: Path, out: Path) -> list[dict[str, Any]]:
    """A tall page for every model at the default bars, as it is (kept, with the reason) and with --slice."""
    from mmtok.budgets.shrink import make_bars, shrink_models

    rows = []
    for run, sliced in (("default", False), ("default --slice", True)):
        jobs: dict[str, Any] = {}
        start = time.perf_counter()
        results = list(shrink_models(path, IMAGE_MODELS, make_bars(None), out / run.replace(" ", ""), path.stem,
                                     slice=sliced, jobs=jobs))  # fmt: skip
        per_model = (time.perf_counter() - start) / len(IMAGE_MODELS)
        for result in results:
            if isinstance(result, Exception):
                rows.append({"corpus": "tall", "run": run, "input": path.name, "error": str(result)})
            else:
                rows.append({**_row(result, "tall", run, per_model), "pieces": len(result.pieces)})
    return rows


def speech_with_pauses(
    rng: random.Random, sentences: list[tuple[Path, str]], sample_rate_hz: int = 16_000
) -> tuple[np.ndarray, str]:
    """2-4 spoken sentences joined by pauses of 0.4-3 s, with 0.3-2 s of silence before and after and noise at
    -60 dBFS; (mono float32 samples, transcript)."""
    import soundfile as sf

    chosen = rng.sample(sentences, rng.randint(2, 4))
    pieces = [np.zeros(int(rng.uniform(0.3, 2.0) * sample_rate_hz), np.float32)]
    for i, (path, _text) in enumerate(chosen):
        wave, rate = sf.read(path, dtype="float32")
        assert rate == sample_rate_hz, path
        pieces.append(wave if wave.ndim == 1 else wave.mean(axis=1))
        if i < len(chosen) - 1:
            pieces.append(np.zeros(int(rng.uniform(0.4, 3.0) * sample_rate_hz), np.float32))
    pieces.append(np.zeros(int(rng.uniform(0.3, 2.0) * sample_rate_hz), np.float32))
    clip = np.concatenate(pieces)
    clip += np.random.default_rng(rng.randint(0, 2**31)).normal(0, 0.001, clip.shape).astype(np.float32)
    return clip, " ".join(text for _path, text in chosen)


def speech_folder(n: int, seed: int = 0) -> Path:
    import soundfile as sf

    folder = CACHE / f"speech-{n}-{seed}"
    manifest = folder / "texts.json"
    if manifest.is_file() and len(json.loads(manifest.read_text())) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = [json.loads(line) for line in (SPEECH / "transcripts.jsonl").read_text().splitlines()]
    sentences = [(SPEECH / r["path"], r["text"]) for r in rows]
    texts = {}
    for i in range(n):
        clip, text = speech_with_pauses(rng, sentences)
        name = f"clip_{i:03d}.wav"
        sf.write(folder / name, clip, 16_000, subtype="PCM_16")
        texts[name] = text
    manifest.write_text(json.dumps(texts, indent=0))
    return folder


# --------------------------------------------------------------------------------------------------------- runs
IMAGE_RUNS = (("ocr>=0.98", ["ocr>=0.98"], False), ("default", None, False), ("lossless", None, True))
PHOTO_RUNS = IMAGE_RUNS[1:]  # photos: the default bars (OCR reads no text in them) and --lossless
REFERENCE_RUN = "ocr>=0.98 earlier path"  # pages: ocr>=0.98 through the earlier path, for identical decisions
SURE = 0.25  # a photo whose top class has this probability or more: its class agreement means something


def _row(result: Any, corpus: str, run: str, seconds: float) -> dict[str, Any]:
    return {
        "corpus": corpus,
        "run": run,
        "input": result.source.name,
        "model": result.model,
        "status": result.status,
        "action": result.action,
        "detail": result.detail,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "seconds_before": result.seconds_before,
        "seconds_after": result.seconds_after,
        "measures": result.measures,
        "reasons": result.reasons,
        "measured": len([t for t in result.tried if "meets" in t and not _inferred(t)]),
        "time_s": seconds,
    }


def _inferred(tried: dict[str, Any]) -> bool:
    return str((tried.get("reasons") or {}).get("ocr", "")).startswith("not read")


def _shrink_all(path: Path, keep: Any, lossless: bool, out: Path, jobs: dict, reference: bool = False) -> tuple:
    from mmtok.budgets.shrink import make_bars, shrink_models

    start = time.perf_counter()
    results = list(
        shrink_models(
            path, IMAGE_MODELS, make_bars(keep), out, path.stem, lossless=lossless, jobs=jobs, reference=reference
        )
    )
    return results, (time.perf_counter() - start) / len(IMAGE_MODELS)


def image_rows(path: Path, corpus: str, out: Path, truth: str | None) -> list[dict[str, Any]]:
    """Every run of IMAGE_RUNS on one image for every model, sharing one decoded job; pages also through the earlier
    path first (its own job, so nothing it measured is reused)."""
    jobs: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    runs = [(run, keep, lossless, False) for run, keep, lossless in (IMAGE_RUNS if corpus == "pages" else PHOTO_RUNS)]
    if corpus == "pages":
        runs.insert(0, (REFERENCE_RUN, ["ocr>=0.98"], False, True))
    earlier: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []  # its rows and what each tried
    for run, keep, lossless, reference in runs:
        folder = out / run.replace(">=", "-").replace(" ", "-")
        results, per_model = _shrink_all(path, keep, lossless, folder, {} if reference else jobs, reference)
        for result in results:
            if isinstance(result, Exception):
                rows.append({"corpus": corpus, "run": run, "input": path.name, "error": str(result)})
                continue
            row = _row(result, corpus, run, per_model)
            if reference:
                earlier.append((row, result.tried))
            if run == "ocr>=0.98":
                row["ocr_readings"] = _ocr_readings(jobs[str(path)], result.tried)
                for earlier_row, tried in earlier:  # the earlier path's readings, by the same lines' heights
                    earlier_row["ocr_readings"] = _ocr_readings(jobs[str(path)], tried)
                earlier = []
            if corpus == "photos" and run == "default" and result.status == "shrunk":
                row["classes"] = _classes(jobs[str(path)], result)
            rows.append(row)
    if truth is not None and str(path) in jobs:
        from mmtok.budgets.shrink.ocr import agreement

        job = jobs[str(path)]
        rows.append(
            {"corpus": corpus, "run": "engine", "input": path.name, "ocr_vs_truth": agreement(truth, job.truth_text)}
        )
    return rows


def _ocr_readings(job: Any, tried: list[dict[str, Any]]) -> list[list[float]]:
    """[median line height of the original in the rendition's view (px), OCR agreement] of each reading made."""
    base = job.crop[0][2] - job.crop[0][0] if job.crop else job.width
    out = []
    for t in tried:
        if isinstance(t.get("ocr"), float) and t.get("view"):
            view_width = int(t["view"].split("x")[0])
            out.append([round(job.median_line_px * view_width / base, 2), t["ocr"]])
    return out


def _classes(job: Any, result: Any) -> dict[str, Any]:
    """Whether the classifier's top class of the original (as the model sees it) is the rendition's top class, and
    among its top 5: the recog bar's measure checked against what the classifier decides."""
    import PIL.Image

    from mmtok.budgets.pricing import resolve
    from mmtok.budgets.shrink import candidates as C
    from mmtok.budgets.shrink import pictures as P
    from mmtok.budgets.shrink import recognition as R

    model = resolve(result.model)
    view = C.view(model, job.width, job.height, None)
    with PIL.Image.open(result.path) as im:
        output = P.over_white(im.convert("RGBA"))
    box, border = job.crop or (None, None)
    seen_view = C.view(model, output.width, output.height, result.detail)
    seen = P.to_view(output, seen_view.size, view.size, (job.width, job.height), box, border)
    size = R.eval_size(*view.size)
    reference, got = R.look(job.original_view(view.size), size), R.look(seen, size)
    return {
        "top1": got.top1 == reference.top1,
        "top5": reference.top1 in got.top(5),
        "similarity": R.similarity(reference, got),
        "sure": float(reference.probabilities.max()) >= SURE,  # a class the classifier is sure of
    }


def speech_rows(path: Path, out: Path, truth: str) -> list[dict[str, Any]]:
    from mmtok.budgets.shrink import make_bars, shrink_models
    from mmtok.budgets.shrink.audio import _asr

    jobs: dict[str, Any] = {}
    rows = []
    for run, speed in (("trim", 1.0), ("trim, speed 1.25", 1.25)):
        start = time.perf_counter()
        results = list(
            shrink_models(
                path, AUDIO_MODELS, make_bars(None), out / f"speed-{speed:g}", path.stem, speed=speed, jobs=jobs
            )
        )
        seconds = time.perf_counter() - start
        job = jobs[str(path)]
        original = job.transcript("original", job.wave)
        for result in results:
            if isinstance(result, Exception):
                rows.append({"corpus": "speech", "run": run, "input": path.name, "error": str(result)})
                continue
            row = _row(result, "speech", run, seconds / len(AUDIO_MODELS))
            row.update(
                truth=truth,
                original_transcript=original,
                shrunk_transcript=_asr().transcribe(result.path) if result.status == "shrunk" else original,
            )
            rows.append(row)
    return rows


def _run_all(tasks: list[tuple[str, Path, str | None]], out: Path, log: Path) -> list[dict[str, Any]]:
    """Run every (corpus, file, truth) task not already in ``log`` (resumable), appending rows as they come."""
    done = set()
    rows: list[dict[str, Any]] = []
    if log.is_file():
        for row in _merged_rows([log]):
            rows.append(row)
            done.add((row["corpus"], row["input"]))
    with log.open("a") as sink:
        for n, (corpus, path, truth) in enumerate(tasks):
            if (corpus, path.name) in done:
                continue
            if corpus == "speech":
                new = speech_rows(path, out, truth or "")
            elif corpus == "tall":
                new = tall_rows(path, out)
            else:
                new = image_rows(path, corpus, out, truth)
            for row in new:
                sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows += new
            print(f"[{n + 1}/{len(tasks)}] {corpus} {path.name}", flush=True)
    return rows


def _merged_rows(logs: Any) -> list[dict[str, Any]]:
    """Rows of every log, one per (corpus, run, input, model): the first made wins."""
    seen: set[tuple] = set()
    rows: list[dict[str, Any]] = []
    for log in sorted(logs):
        for line in log.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a blank line, or the torn last line of a run that was stopped
            key = (row["corpus"], row["run"], row["input"], row.get("model"))
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------------ summary
def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from mmtok.eval.asr import wer

    ok = [r for r in rows if "error" not in r and r["run"] != "engine"]
    images: dict[str, Any] = {}
    kinds = {"pages": "", "screens": "screen_", "docs": "doc_", "photos": ""}  # screens and docs: the pages, split
    for corpus, prefix in kinds.items():
        source = "photos" if corpus == "photos" else "pages"
        for run, _keep, lossless in (*IMAGE_RUNS, (REFERENCE_RUN, None, False)):
            for model in IMAGE_MODELS:
                sel = [
                    r
                    for r in ok
                    if r["corpus"] == source
                    and r["run"] == run
                    and r["model"] == model
                    and r["input"].startswith(prefix)
                ]
                if not sel:
                    continue
                entry: dict[str, Any] = {
                    "items": len(sel),
                    "token_saving": _mean([1 - r["tokens_after"] / r["tokens_before"] for r in sel]),
                    "shrunk_share": _mean([float(r["status"] == ("lossless" if lossless else "shrunk")) for r in sel]),
                    "time_per_item_s": _mean([r["time_s"] for r in sel]),
                    "median_time_per_item_s": statistics.median(r["time_s"] for r in sel),
                    "measured_per_item": _mean([r["measured"] for r in sel]),
                }
                for metric in ("ssim", "recog", "ocr"):
                    vals = [r["measures"][metric] for r in sel if r["measures"].get(metric) is not None]
                    if vals:
                        entry[f"mean_{metric}"] = _mean(vals)
                if lossless:
                    entry["identical_tokens_share"] = _mean(
                        [float(r["tokens_after"] == r["tokens_before"]) for r in sel]
                    )
                    entry["byte_saving"] = _mean([1 - r["bytes_after"] / r["bytes_before"] for r in sel])
                    entry["byte_saving_total"] = 1 - sum(r["bytes_after"] for r in sel) / sum(
                        r["bytes_before"] for r in sel
                    )
                    entry["pixel_exact_share"] = _mean([float(r["status"] == "lossless") for r in sel])
                    entry["re_encoded_share"] = _mean([float(r["status"] == "re-encoded") for r in sel])
                classes = [r["classes"] for r in sel if r.get("classes")]
                if classes:
                    sure = [c for c in classes if c["sure"]]
                    entry["classes_checked"] = len(classes)
                    entry["top1_kept_share"] = _mean([float(c["top1"]) for c in classes])
                    entry["top5_kept_share"] = _mean([float(c["top5"]) for c in classes])
                    entry["sure_checked"] = len(sure)
                    entry["top1_kept_share_sure"] = _mean([float(c["top1"]) for c in sure])
                    entry["top5_kept_share_sure"] = _mean([float(c["top5"]) for c in sure])
                if corpus != "photos":
                    entry["ocr_not_applicable_share"] = _mean(
                        [float(str(r.get("reasons", {}).get("ocr", "")).startswith("no text found")) for r in sel]
                    )
                images[f"{corpus}|{run}|{model}"] = entry
    speech: dict[str, Any] = {}
    for run in ("trim", "trim, speed 1.25"):
        for model in AUDIO_MODELS:
            sel = [r for r in ok if r["corpus"] == "speech" and r["run"] == run and r["model"] == model]
            if not sel:
                continue
            before = sum(r["seconds_before"] for r in sel)
            after = sum(r["seconds_after"] for r in sel)
            speech[f"{run}|{model}"] = {
                "items": len(sel),
                "billed_seconds_before": before,
                "billed_seconds_after": after,
                "seconds_saving": 1 - after / before,
                "token_saving": _mean([1 - r["tokens_after"] / r["tokens_before"] for r in sel]),
                "shrunk_share": _mean([float(r["status"] == "shrunk") for r in sel]),
                "wer_original": wer([r["truth"] for r in sel], [r["original_transcript"] for r in sel]),
                "wer_shrunk": wer([r["truth"] for r in sel], [r["shrunk_transcript"] for r in sel]),
                "time_per_item_s": _mean([r["time_s"] for r in sel]),
            }
    engine = [r["ocr_vs_truth"] for r in rows if r.get("run") == "engine"]
    side_by_side = compare_paths(ok)
    readings = ocr_by_line_height(ok)
    errors = [r for r in rows if "error" in r]
    counts = {c: len({r["input"] for r in rows if r["corpus"] == c}) for c in ("pages", "photos", "speech", "tall")}
    return {
        "counts": counts,
        "images": images,
        "side_by_side": side_by_side,
        "tall": [{k: r.get(k) for k in TALL_FIELDS} for r in ok if r["corpus"] == "tall"],
        "ocr_by_line_height": readings,
        "speech": speech,
        "ocr_vs_truth": _mean(engine),
        "errors": errors[:20],
        "error_count": len(errors),
    }


def compare_paths(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pages at ocr>=0.98 through the earlier path and the current one: the share of identical decisions (action and
    detail) per model and overall, and the median time per page and model of each, with their ratio."""
    earlier = {(r["input"], r["model"]): r for r in rows if r["corpus"] == "pages" and r["run"] == REFERENCE_RUN}
    current = {(r["input"], r["model"]): r for r in rows if r["corpus"] == "pages" and r["run"] == "ocr>=0.98"}
    both = sorted(set(earlier) & set(current))
    if not both:
        return {}

    def same(key: tuple[str, str]) -> bool:  # the decision: kept or which rung (one per token count) at which level
        a, b = earlier[key], current[key]
        return (a["status"], a["tokens_after"], a.get("detail")) == (b["status"], b["tokens_after"], b.get("detail"))

    def cheaper(key: tuple[str, str]) -> bool:
        return current[key]["tokens_after"] < earlier[key]["tokens_after"]

    out: dict[str, Any] = {"pairs": len(both)}
    for model in (*IMAGE_MODELS, None):
        keys = [k for k in both if model is None or k[1] == model]
        if not keys:
            continue
        t_earlier = statistics.median(earlier[k]["time_s"] for k in keys)
        t_current = statistics.median(current[k]["time_s"] for k in keys)
        differing = [k for k in keys if not same(k)]
        out[model or "all"] = {
            "pairs": len(keys),
            "identical_share": _mean([float(same(k)) for k in keys]),
            "differing": len(differing),
            "cheaper_share_of_differing": _mean([float(cheaper(k)) for k in differing]),
            "median_time_earlier_s": t_earlier,
            "median_time_current_s": t_current,
            "mean_time_earlier_s": _mean([earlier[k]["time_s"] for k in keys]),
            "mean_time_current_s": _mean([current[k]["time_s"] for k in keys]),
            "speedup": t_earlier / t_current if t_current else None,
        }
    out["examples"] = [
        {"input": k[0], "model": k[1], "earlier": earlier[k]["action"], "current": current[k]["action"]}
        for k in both
        if not same(k)
    ][:12]
    return out


LINE_BUCKETS_PX = (4, 5, 6, 7, 8, 9, 10, 12, 16, 24)


def ocr_by_line_height(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every OCR reading at ocr>=0.98, by how tall the original's median line is in the view: the current path's
    (which reads nothing under ``MIN_READ_LINE_PX``) and the earlier path's (which read every rung it probed)."""
    out = []
    for run in ("ocr>=0.98", REFERENCE_RUN):
        readings = [pair for r in rows if r["run"] == run and r.get("ocr_readings") for pair in r["ocr_readings"]]
        out += _buckets(readings, "current" if run == "ocr>=0.98" else "earlier")
    return out


def _buckets(readings: list[list[float]], path: str) -> list[dict[str, Any]]:
    out = []
    for low, high in zip((0, *LINE_BUCKETS_PX), (*LINE_BUCKETS_PX, 10**6), strict=True):
        values = [v for px, v in readings if low <= px < high]
        if values:
            out.append(
                {
                    "path": path,
                    "line_px": f"{low}-{high}" if high < 10**6 else f">={low}",
                    "readings": len(values),
                    "at_least_098_share": _mean([float(v >= 0.98) for v in values]),
                    "median_ocr": statistics.median(values),
                }
            )
    return out


PROVIDERS = {
    "gpt-4o": "OpenAI",
    "gpt-5.4": "OpenAI",
    "claude-opus-4-7": "Anthropic",
    "gemini-3-flash-preview": "Google",
}


def report(summary: dict[str, Any], args: argparse.Namespace, wall_s: float) -> str:
    import os

    from mmtok.eval.bench import machine

    n = summary["counts"]
    lines = [
        f"bench_shrink: {n['pages']} of {args.pages} screenshots/documents (PNG, 800-4000 px, known text), "
        f"{n['photos']} of {args.photos} photos, {n['speech']} of {args.clips} speech clips with pauses, "
        f"{n['tall']} tall pages were run; "
        f"models {', '.join(IMAGE_MODELS)} (images), {', '.join(AUDIO_MODELS)} (speech). {machine()}; "
        f"load average {os.getloadavg()[0]:.1f} at the end (the machine is shared: times per item are under load).",
        f"RapidOCR reading the original pages vs the known text: character agreement {summary['ocr_vs_truth']:.3f}"
        if summary["ocr_vs_truth"] is not None
        else "",
        "",
        "images: mean token saving / share shrunk (a cheaper rendition met every bar) / mean measures / s per item",
    ]
    lines.append(
        f"  {'corpus':7} {'bars':22} {'model':23} {'saving':>7} {'shrunk':>7} {'ssim':>6} {'recog':>6} {'ocr':>6} "
        f"{'s/item':>7} {'measured':>8}"
    )
    nan = float("nan")
    for key, e in summary["images"].items():
        corpus, run, model = key.split("|")
        if run == "lossless":
            continue
        lines.append(
            f"  {corpus:7} {run:22} {model:23} {e['token_saving']:7.1%} {e['shrunk_share']:7.1%} "
            f"{e.get('mean_ssim', nan):6.3f} {e.get('mean_recog', nan):6.3f} {e.get('mean_ocr', nan):6.3f} "
            f"{e['time_per_item_s']:7.2f} {e['measured_per_item']:8.1f}"
        )
    lines += ["", *_side_by_side_lines(summary["side_by_side"]), "", *_readings_lines(summary["ocr_by_line_height"])]
    lines += [
        "",
        "photos at the default bars: the shrunk rendition keeps EfficientNet-Lite0's top class of the original",
    ]
    for model in IMAGE_MODELS:
        e = summary["images"].get(f"photos|default|{model}")
        if e and e.get("classes_checked"):
            lines.append(
                f"  {model:23} {e['classes_checked']:4} shrunk: top-1 kept {e['top1_kept_share']:6.1%}, within the "
                f"top 5 {e['top5_kept_share']:6.1%}; of the {e['sure_checked']} the classifier is sure of (p >= "
                f"{SURE}): {e['top1_kept_share_sure'] or 0:6.1%}, {e['top5_kept_share_sure'] or 0:6.1%}; mean recog "
                f"{e.get('mean_recog', nan):.3f}"
            )
    lines += ["", *_tall_lines(summary["tall"])]
    lines += [
        "",
        "--lossless: share with identical tokens / mean byte saving / total byte saving / written (pixel-exact + "
        "re-encoded lossy sources) / mean SSIM at the view",
    ]
    for key, e in summary["images"].items():
        corpus, run, model = key.split("|")
        if run == "lossless":
            lines.append(
                f"  {corpus:7} {model:23} identical {e['identical_tokens_share']:6.1%}  bytes -{e['byte_saving']:6.1%} "
                f"(total -{e['byte_saving_total']:6.1%})  pixel-exact {e['pixel_exact_share']:6.1%} + re-encoded "
                f"{e['re_encoded_share']:6.1%}  ssim {e.get('mean_ssim', nan):.4f}"
            )
    lines += ["", "speech (default bar wer<=0.05 against the original's transcript): billed seconds, WER vs known text"]
    for key, e in summary["speech"].items():
        run, model = key.split("|")
        lines.append(
            f"  {run:17} {model:22} {e['billed_seconds_before']:7.1f} s -> {e['billed_seconds_after']:7.1f} s "
            f"(-{e['seconds_saving']:.1%}), shrunk {e['shrunk_share']:.0%}, WER {e['wer_original']:.1%} -> "
            f"{e['wer_shrunk']:.1%}, {e['time_per_item_s']:.2f} s/item"
        )
    lines += ["", "targets:"]
    both = summary["side_by_side"].get("all")
    if both:
        ok = both["median_time_current_s"] <= 3.0
        lines.append(
            f"  pages at ocr>=0.98, <= 3 s per page and model: median {both['median_time_current_s']:.2f} s (earlier "
            f"path {both['median_time_earlier_s']:.2f} s in the same run, {both['speedup']:.1f}x), identical decisions "
            f"{both['identical_share']:.1%} -> {'MET' if ok else 'MISSED'}"
        )
    savings = {m: summary["images"].get(f"pages|ocr>=0.98|{m}", {}).get("token_saving") for m in IMAGE_MODELS}
    met = sorted({PROVIDERS[m] for m, s in savings.items() if s is not None and s >= 0.30})
    if any(s is not None for s in savings.values()):  # pages were run
        lines.append(
            "  pages at ocr>=0.98, >= 30% fewer tokens on >= 2 providers: "
            + ", ".join(f"{m} {s:.1%}" for m, s in savings.items() if s is not None)
            + f" -> {'MET' if len(met) >= 2 else 'MISSED'} ({', '.join(met) or 'none'})"
        )
    lines += _top1_targets(summary)
    for key, e in summary["speech"].items():
        run, model = key.split("|")
        ok = e["seconds_saving"] >= 0.20 and e["wer_shrunk"] <= e["wer_original"] + 0.01
        lines.append(
            f"  speech {run}, {model}: -{e['seconds_saving']:.1%} billed seconds (>= 20%), WER +"
            f"{(e['wer_shrunk'] - e['wer_original']) * 100:.2f} points (<= 1) -> {'MET' if ok else 'MISSED'}"
        )
    for corpus in ("pages", "photos"):
        for model in IMAGE_MODELS:
            e = summary["images"].get(f"{corpus}|lossless|{model}")
            if e:
                ok = e["byte_saving"] >= 0.5 and e["identical_tokens_share"] == 1.0
                lines.append(
                    f"  --lossless {corpus} {model}: bytes -{e['byte_saving']:.1%} (>= 50%), identical tokens "
                    f"{e['identical_tokens_share']:.0%} -> {'MET' if ok else 'MISSED'}"
                )
    if summary["error_count"]:
        lines.append(f"\nerrors: {summary['error_count']} (first: {summary['errors'][0]})")
    return "\n".join(line for line in lines if line is not None)


def _side_by_side_lines(side: dict[str, Any]) -> list[str]:
    if not side:
        return []
    lines = [
        f"pages at ocr>=0.98, the earlier path and the current one side by side ({side['pairs']} page-model pairs): "
        "identical decisions, median s per page and model"
    ]
    for model in (*IMAGE_MODELS, "all"):
        e = side.get(model)
        if e:
            lines.append(
                f"  {model:23} identical {e['identical_share']:6.1%} ({e['differing']} differ, "
                f"{e['cheaper_share_of_differing'] or 0:.0%} of them cheaper now)  "
                f"earlier {e['median_time_earlier_s']:6.2f} s  current {e['median_time_current_s']:6.2f} s  "
                f"{e['speedup']:.1f}x"
            )
    for x in side["examples"][:6]:
        lines.append(f"    differs: {x['input']} {x['model']}: {x['earlier']}  |  now {x['current']}")
    return lines


def _tall_lines(tall: list[dict[str, Any]]) -> list[str]:
    if not tall:
        return []
    lines = [
        "tall pages at the default bars: as they are, and with --slice (tokens of the pieces against the one image)"
    ]
    for r in tall:
        ocr = (r.get("measures") or {}).get("ocr")
        shown = f", ocr {ocr:.3f}" if isinstance(ocr, float) else ""
        pieces = f" in {r['pieces']} pieces" if r.get("pieces") else ""
        lines.append(
            f"  {r['input']:20} {r['run']:16} {r['model']:23} {r['status']:7} {r['tokens_before']:>6,} -> "
            f"{r['tokens_after']:>6,}{pieces}{shown}, {r['time_s']:.1f} s per model"
        )
    return lines


def _readings_lines(buckets: list[dict[str, Any]]) -> list[str]:
    lines = ["OCR readings at ocr>=0.98 by the original's median line height in the view: share >= 0.98, median"]
    for b in buckets:
        lines.append(
            f"  {b['path']:8} {b['line_px']:>7} px  {b['readings']:5} readings  "
            f">= 0.98: {b['at_least_098_share']:6.1%}  median {b['median_ocr']:.3f}"
        )
    return lines


def _top1_targets(summary: dict[str, Any]) -> list[str]:
    """Issue 39: photos shrunk at the default bars keep the classifier's top class for >= 90% of them, per model."""
    lines = []
    for model in IMAGE_MODELS:
        e = summary["images"].get(f"photos|default|{model}", {})
        if e.get("top1_kept_share") is not None:
            ok = e["top1_kept_share"] >= 0.90
            lines.append(
                f"  photos at the default bars, {model}: top-1 kept {e['top1_kept_share']:.1%} of "
                f"{e['classes_checked']} shrunk (>= 90%) -> {'MET' if ok else 'MISSED'}"
            )
    return lines


def markdown(summary: dict[str, Any]) -> str:
    """The docs' results tables, every number from ``summary``."""
    pct = lambda v: "" if v is None else f"{v:.1%}"  # noqa: E731
    num = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
    out = [
        "| corpus | bars | model | token saving | shrunk | mean SSIM | mean recog | mean OCR | s / item |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, e in summary["images"].items():
        corpus, run, model = key.split("|")
        if run not in ("lossless", REFERENCE_RUN):
            out.append(
                f"| {corpus} | `{run}` | {model} | {pct(e['token_saving'])} | {pct(e['shrunk_share'])} | "
                f"{num(e.get('mean_ssim'))} | {num(e.get('mean_recog'))} | {num(e.get('mean_ocr'))} | "
                f"{e['time_per_item_s']:.1f} |"
            )
    side = summary["side_by_side"]
    out += [
        "",
        "| pages at `ocr>=0.98` | identical decisions | earlier path, median s | now, median s | speed-up |",
        "|---|---:|---:|---:|---:|",
    ]
    for model in (*IMAGE_MODELS, "all"):
        e = side.get(model)
        if e:
            out.append(
                f"| {model} | {pct(e['identical_share'])} | {e['median_time_earlier_s']:.2f} | "
                f"{e['median_time_current_s']:.2f} | {e['speedup']:.2f}x |"
            )
    out += [
        "",
        "| photos, default bars | model | shrunk | top-1 kept | within top 5 | mean recog |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for model in IMAGE_MODELS:
        e = summary["images"].get(f"photos|default|{model}")
        if e and e.get("classes_checked"):
            out.append(
                f"| photos | {model} | {pct(e['shrunk_share'])} | {pct(e['top1_kept_share'])} | "
                f"{pct(e['top5_kept_share'])} | {pct(e['top1_kept_share_sure'])} | {pct(e['top5_kept_share_sure'])} "
                f"| {num(e.get('mean_recog'))} |"
            )
    out += [
        "",
        "| `--lossless` | model | identical tokens | mean byte saving | total byte saving | pixel-exact | re-encoded |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, e in summary["images"].items():
        corpus, run, model = key.split("|")
        if run == "lossless":
            out.append(
                f"| {corpus} | {model} | {pct(e['identical_tokens_share'])} | {pct(e['byte_saving'])} | "
                f"{pct(e['byte_saving_total'])} | {pct(e['pixel_exact_share'])} | {pct(e['re_encoded_share'])} |"
            )
    out += [
        "",
        "| speech | model | billed seconds | saving | shrunk | WER vs known text | s / item |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, e in summary["speech"].items():
        run, model = key.split("|")
        out.append(
            f"| {run} | {model} | {e['billed_seconds_before']:.1f} -> {e['billed_seconds_after']:.1f} | "
            f"{pct(e['seconds_saving'])} | {pct(e['shrunk_share'])} | {pct(e['wer_original'])} -> "
            f"{pct(e['wer_shrunk'])} | {e['time_per_item_s']:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--txt", type=Path, default=None)
    parser.add_argument("--fresh", action="store_true", help="ignore rows from an earlier, interrupted run")
    parser.add_argument(
        "--only", default="speech,pages,photos,tall", help="corpora to run in this process (comma list)"
    )
    parser.add_argument("--limit", type=int, default=None, help="run only the first N pages and N photos")
    parser.add_argument("--report-only", action="store_true", help="summarise the rows already made, run nothing")
    parser.add_argument("--markdown", action="store_true", help="also print the README's tables")
    args = parser.parse_args()
    only = set(args.only.split(","))

    from mmtok.eval.tools.corpus import folder_files, photo_folder

    start = time.perf_counter()
    pages = page_folder(args.pages)
    page_texts = json.loads((pages / "texts.json").read_text())
    photos = photo_folder(args.photos, folder=CACHE / f"photos-{args.photos}")
    clips = speech_folder(args.clips)
    clip_texts = json.loads((clips / "texts.json").read_text())
    tasks: list[tuple[str, Path, str | None]] = [("speech", clips / n, t) for n, t in sorted(clip_texts.items())]
    in_order = sorted(page_texts.items(), key=lambda kv: kv[0].split("_")[1])  # screenshots and pages alternate
    tasks += [("pages", pages / n, t) for n, t in in_order][: args.limit]
    tasks += [("photos", p, None) for p in folder_files(photos)][: args.limit]
    tall = tall_folder()
    tasks += [("tall", tall / n, t) for n, t in sorted(json.loads((tall / "texts.json").read_text()).items())]
    tasks = [t for t in tasks if t[0] in only]
    stem = f"rows-{args.pages}-{args.photos}-{args.clips}"
    log = CACHE / (
        f"{stem}.jsonl" if only == {"speech", "pages", "photos", "tall"} else f"{stem}-{'-'.join(sorted(only))}.jsonl"
    )
    if args.fresh:
        log.unlink(missing_ok=True)
    if not args.report_only:
        _run_all(tasks, CACHE / "out", log)
    rows = _merged_rows(CACHE.glob(f"{stem}*.jsonl"))  # processes that ran corpora side by side
    summary = summarise(rows)
    text = report(summary, args, time.perf_counter() - start)
    print(text)
    if args.markdown:
        print("\n" + markdown(summary))
    if args.txt:
        args.txt.parent.mkdir(parents=True, exist_ok=True)
        args.txt.write_text(text + "\n")
    if args.json:
        from mmtok.eval.bench import machine

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"summary": summary, "machine": machine(), "args": vars(args)}, indent=2, default=str) + "\n"
        )


if __name__ == "__main__":
    main()
