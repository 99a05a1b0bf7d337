"""Resumable, sharded evaluation runs: ``mmtok eval run SUITE --out runs/NAME [--resume] [--workers N]``.

Items are split over workers (``items[rank::world]``): local processes (``--workers N``) or ``torchrun`` ranks.
Each finished item is appended to ``results.jsonl`` as one line written by a single ``os.write`` on an
``O_APPEND`` descriptor, so a crash (even SIGKILL) loses at most the item in flight and never leaves half a line
that counts. ``--resume`` skips the ids already there; the summary keeps the first result of each id, so nothing is
counted twice. A bad item is recorded with its error and the run goes on. At the end, ``summary.json`` holds the
suite-level metrics with their protocols.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import ConfigError, EvalError, MmtokError
from mmtok.eval.suite import Suite, items, load_suite

RESULTS = "results.jsonl"


# ------------------------------------------------------------------------------------------------ result files
def read_results(out: Path) -> dict[str, dict[str, Any]]:
    """First complete result line of each item id."""
    rows: dict[str, dict[str, Any]] = {}
    path = out / RESULTS
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash: that item is simply done again
        rows.setdefault(row["id"], row)
    return rows


class ResultWriter:
    def __init__(self, out: Path) -> None:
        self.fd = os.open(out / RESULTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(row, default=str) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)


def _features_path(out: Path, item_id: str) -> Path:
    return out / "features" / f"{hashlib.sha1(item_id.encode()).hexdigest()[:16]}.safetensors"


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass
class Context:
    """Models and metric backends, loaded on first use inside each worker."""

    suite: Suite
    out: Path
    _cache: dict[str, Any] | None = None

    def get(self, key: str) -> Any:
        if self._cache is None:
            self._cache = {}
        if key not in self._cache:
            self._cache[key] = self._load(key)
        return self._cache[key]

    def _load(self, key: str) -> Any:
        import mmtok

        p = self.suite.pipeline
        if key == "tokenizer":
            default = {"images": "vq-clip-tiny", "speech": "av-tiny", "qa": "vq-clip-tiny"}[self.suite.kind]
            return mmtok.get_tokenizer(p.get("tokenizer", default)).eval()
        if key == "extractor":
            from mmtok.eval.extractors import get_extractor

            return get_extractor(self.suite.fd_extractor)
        if key == "asr":
            from mmtok.eval.asr import get_asr

            return get_asr(self.suite.asr)
        if key == "judge":
            from mmtok.eval.judge import get_judge

            return get_judge(self.suite.judge)
        if key == "backbone":
            return mmtok.get_model(p.get("backbone", "backbone-tiny"), kind="backbone").eval()
        if key == "photos":
            from mmtok.models.data import heldout_photo_crops

            return heldout_photo_crops(int(p.get("image_size", 64)))
        if key == "digits":
            from mmtok.models.train_backbone import task_tokens

            return task_tokens(self.get("tokenizer"), "heldout", 1000, 128, 1)
        raise KeyError(key)


def evaluate_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    kind = ctx.suite.kind
    if kind == "images":
        return _image_item(item, ctx)
    if kind == "speech":
        return _speech_item(item, ctx)
    return _qa_item(item, ctx)


@torch.no_grad()
def _image_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    from safetensors.torch import save_file

    from mmtok.eval.metrics import psnr, ssim

    tok = ctx.get("tokenizer")
    size = int(ctx.suite.pipeline.get("image_size", tok.config.image_size))
    if item.get("builtin") == "heldout-photos":
        x = ctx.get("photos")[item["index"]][None]
    else:
        x = tok.preprocess(item["path"], size)[0][None]
    codes, ids, _ = tok.quantize(x)
    recon = tok.decoder(codes).clamp(-1, 1)
    metrics: dict[str, Any] = {}
    if "psnr" in ctx.suite.metrics:
        metrics["psnr_db"] = psnr(recon, x)
    if "ssim" in ctx.suite.metrics:
        metrics["ssim"] = ssim(recon, x)
    if "fd" in ctx.suite.metrics:
        extractor = ctx.get("extractor")
        path = _features_path(ctx.out, item["id"])
        path.parent.mkdir(exist_ok=True)
        save_file(
            {
                "original": extractor.features(x)[0].contiguous(),
                "reconstruction": extractor.features(recon)[0].contiguous(),
            },
            str(path),
        )
    return {"metrics": metrics, "tokens": int(ids[0].numel())}


def _speech_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    import jiwer

    import mmtok
    from mmtok.eval.asr import _transform

    p = ctx.suite.pipeline
    tok = ctx.get("tokenizer")
    if "text" not in item:
        raise EvalError(f"{item['id']}: no reference transcript ('text')")
    audio = mmtok.load(item["path"], kind="audio")
    with torch.no_grad():
        seq = tok.encode(
            audio,
            tokens_per_second=p.get("tokens_per_second"),
            quantize=p.get("quantize", True),
            codebook_levels=p.get("codebook_levels"),
        )
        speech = tok.decode(seq)
    hypothesis = ctx.get("asr").transcribe(speech)
    measures = jiwer.process_words(
        item["text"], hypothesis or "<empty>", reference_transform=_transform(), hypothesis_transform=_transform()
    )
    words = sum(len(r) for r in measures.references)
    errors = measures.substitutions + measures.deletions + measures.insertions
    chars = jiwer.process_characters(" ".join(measures.references[0]), " ".join(measures.hypotheses[0]))
    char_errors = chars.substitutions + chars.deletions + chars.insertions
    return {
        "metrics": {
            "wer": errors / words,
            "word_errors": errors,
            "words": words,
            "char_errors": char_errors,
            "chars": len(" ".join(measures.references[0])),
        },
        "tokens": len(seq),
        "hypothesis": hypothesis,
        "reference": item["text"],
    }


def _qa_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    import mmtok
    from mmtok.models.data import DIGIT_WORDS
    from mmtok.models.train_backbone import PROMPT
    from mmtok.tokens import TokenSequence

    tok = ctx.get("tokenizer")
    data = ctx.get("digits")
    model = ctx.get("backbone")
    side = int(len(data["ids"][0]) ** 0.5)
    seq = TokenSequence("image", ids=data["ids"][item["index"]], grid=(side, side), tokenizer=tok.name)
    options = ctx.suite.pipeline.get("truncation")
    if options:
        context = [f"a photo of the digit {w}" for w in DIGIT_WORDS]
        seq, _ = mmtok.truncate(seq, context=context, tokenizer=tok, **options)
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    with torch.no_grad():
        predicted = int(model([[prompt, seq]])["logits"].argmax(-1))
    label = int(data["labels"][item["index"]])
    reference = DIGIT_WORDS[label]
    candidate = f"the digit {DIGIT_WORDS[predicted]}"
    metrics: dict[str, Any] = {}
    row: dict[str, Any] = {"tokens": len(seq), "candidate": candidate, "reference": reference}
    if "accuracy" in ctx.suite.metrics:
        metrics["accuracy"] = float(predicted == label)
    if "judge" in ctx.suite.metrics:
        try:
            result = ctx.get("judge").score(candidate, reference, item["question"])
            metrics["judge"] = result.score
            row["judge"] = result.to_dict()
        except EvalError as e:
            if ctx.suite.on_judge_error != "skip":
                raise
            row["judge"] = {"score": None, "status": "skipped", "reason": str(e)}
            metrics["judge"] = None
    row["metrics"] = metrics
    return row


# ------------------------------------------------------------------------------------------------ workers
def item_error(e: BaseException) -> str:
    """One line for an item's error: mmtok's own errors already name their input; anything else (a bug, a
    library's exception) is prefixed with its type, so ``TypeError: ...`` is not mistaken for a message."""
    text = str(e).strip().replace("\n", " ") or repr(e)
    return text if isinstance(e, MmtokError) else f"{type(e).__name__}: {text}"


def run_shard(suite_path: str, out: str, rank: int, world: int, threads: int) -> None:
    """Evaluate this worker's share of the items not already in results.jsonl."""
    torch.set_num_threads(max(1, threads))
    suite = load_suite(suite_path)
    out_dir = Path(out)
    done = set(read_results(out_dir))
    ctx = Context(suite, out_dir)
    writer = ResultWriter(out_dir)
    try:
        for item in items(suite)[rank::world]:
            if item["id"] in done:
                continue
            started = time.perf_counter()
            try:
                row = evaluate_item(item, ctx)
                error = None
            except Exception as e:  # whatever goes wrong in one item is that item's error
                row, error = {}, item_error(e)
            writer.write(
                {
                    "id": item["id"],
                    **row,
                    "error": error,
                    "worker": rank,
                    "seconds": round(time.perf_counter() - started, 3),
                }
            )
    finally:
        writer.close()


def run(
    suite_spec: str | Path, out: str | Path, *, resume: bool = False, workers: int = 1, progress: Any = None
) -> dict[str, Any]:
    """Run (or resume) a suite; returns the summary (also written to ``summary.json``)."""
    suite = load_suite(suite_spec)
    out_dir = Path(out)
    existing = read_results(out_dir)
    if existing and not resume:
        raise ConfigError(
            f"{out_dir} already holds {len(existing)} results: pass --resume to continue, or choose another --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "suite.json").write_text(json.dumps(suite.to_dict(), indent=2) + "\n")
    total = len(items(suite))
    rank_env, world_env = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    threads = max(1, (os.cpu_count() or 1) // max(workers, world_env))
    if world_env > 1:  # torchrun: this process is one rank
        run_shard(str(suite.path), str(out_dir), rank_env, world_env, threads)
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.barrier()
        dist.destroy_process_group()
        if rank_env != 0:
            return {}
    elif workers <= 1:
        _with_progress(lambda: run_shard(str(suite.path), str(out_dir), 0, 1, threads), out_dir, total, progress)
    else:
        context = mp.get_context("spawn")
        procs = [
            context.Process(target=run_shard, args=(str(suite.path), str(out_dir), r, workers, threads))
            for r in range(workers)
        ]
        for proc in procs:
            proc.start()
        _with_progress(lambda: [proc.join() for proc in procs], out_dir, total, progress)
        failed = [p.exitcode for p in procs if p.exitcode]
        if failed:
            raise EvalError(f"{len(failed)} worker(s) died (exit codes {failed}); rerun with --resume")
    summary = summarize(out_dir, [item["id"] for item in items(suite)])
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _with_progress(work: Any, out_dir: Path, total: int, progress: Any) -> None:
    """Run ``work`` while reporting progress; an exception in ``work`` is raised here, in the caller's thread."""
    if progress is None:
        work()
        return
    import threading

    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as e:  # handed to the main thread below
            failure.append(e)

    thread = threading.Thread(target=target, name="mmtok-eval", daemon=True)
    thread.start()
    while thread.is_alive():
        progress(len(read_results(out_dir)), total)
        thread.join(0.5)
    if failure:
        raise failure[0]
    progress(len(read_results(out_dir)), total)


# ------------------------------------------------------------------------------------------------ summary
def summarize(out_dir: Path, expected: list[str] | None = None) -> dict[str, Any]:
    """Suite-level metrics over the results of the ``expected`` item ids (the suite's items, in suite order).

    ``items`` is the number of items in the suite, ``ok`` + ``failed`` + ``missing`` (not run yet) add up to it.
    """
    from mmtok.eval.suite import Suite

    suite = Suite(**{k: v for k, v in json.loads((out_dir / "suite.json").read_text()).items()})
    rows = read_results(out_dir)
    ids = list(rows) if expected is None else list(expected)
    present = [rows[i] for i in ids if i in rows]
    ok = [r for r in present if not r.get("error")]
    failed = [r for r in present if r.get("error")]
    summary: dict[str, Any] = {
        "suite": suite.name,
        "kind": suite.kind,
        "items": len(ids),
        "ok": len(ok),
        "failed": len(failed),
        "missing": len(ids) - len(present),
        "metrics": {},
        "protocol": {},
        "errors": [{"id": r["id"], "error": r["error"]} for r in failed][:20],
    }
    if ok:
        summary["mean_tokens"] = sum(r.get("tokens", 0) for r in ok) / len(ok)
    m, protocol = summary["metrics"], summary["protocol"]
    if suite.kind == "images" and ok:
        for key in ("psnr_db", "ssim"):
            values = [r["metrics"][key] for r in ok if key in r["metrics"]]
            if values:
                m[key] = sum(values) / len(values)
        protocol["psnr_ssim"] = "torchmetrics on [-1, 1] images, data range 2; SSIM Gaussian 11 / 1.5"
        if "fd" in suite.metrics:
            from safetensors.torch import load_file

            from mmtok.eval.extractors import get_extractor
            from mmtok.eval.metrics import feature_frechet

            feats = [load_file(str(_features_path(out_dir, r["id"]))) for r in ok]
            original = torch.stack([f["original"] for f in feats])
            recon = torch.stack([f["reconstruction"] for f in feats])
            extractor = get_extractor(suite.fd_extractor)
            m[extractor.metric] = feature_frechet(original, recon)
            protocol[extractor.metric] = f"{extractor.protocol}; originals vs reconstructions, N = {len(feats)}"
    if suite.kind == "speech" and ok:
        from mmtok.eval.asr import NORMALISER, get_asr

        words = sum(r["metrics"]["words"] for r in ok)
        chars = sum(r["metrics"]["chars"] for r in ok)
        m["wer"] = sum(r["metrics"]["word_errors"] for r in ok) / words
        m["cer"] = sum(r["metrics"]["char_errors"] for r in ok) / chars
        protocol["wer"] = f"corpus WER over {len(ok)} items, ASR {get_asr(suite.asr).name}, {NORMALISER}"
    if suite.kind == "qa" and ok:
        if "accuracy" in suite.metrics:
            m["accuracy"] = sum(r["metrics"]["accuracy"] for r in ok) / len(ok)
            protocol["accuracy"] = "exact match of the predicted digit"
        if "judge" in suite.metrics:
            scores = [r["metrics"]["judge"] for r in ok if r["metrics"].get("judge") is not None]
            statuses = [r.get("judge", {}).get("status") for r in ok]
            m["judge"] = sum(scores) / len(scores) if scores else None
            m["judge_unparseable"] = statuses.count("unparseable")
            m["judge_skipped"] = statuses.count("skipped")
            judge_name = next((r["judge"]["judge"] for r in ok if r.get("judge", {}).get("judge")), str(suite.judge))
            protocol["judge"] = f"{judge_name}, rubric in mmtok.eval.judge.RUBRIC, mean 1-5 over scored items"
    return summary
