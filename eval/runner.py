"""Resumable, sharded evaluation runs: ``mmtok eval run SUITE --out runs/NAME [--resume] [--workers N]``.

A run folder holds ``results.jsonl`` (one row per evaluated item), ``suite.json`` (the suite's settings),
``fingerprint.json`` (those settings and each item's content hash), ``summary.json`` and ``.lock``.

- Exactly once: each finished item is appended as one line written by a single ``os.write`` on an ``O_APPEND``
  descriptor; a crash (even SIGKILL) loses at most the item in flight. A torn last line (no newline) is cut off
  when the run is resumed and its item done again; a malformed line before it is an error naming the line. Every
  row carries the hash of what it was computed from (item content + pipeline and metrics settings); the summary
  takes the last row of each of the suite's items whose hash is current, so nothing is counted twice or mixed.
- ``--resume`` skips items with a current row (failed ones too, unless ``--retry-errors``). A suite that changed
  is refused, naming what changed, unless ``--rerun-changed``: then only the affected items run again.
- One run per folder: the parent holds an ``flock`` on ``.lock`` for the whole run; workers die with it.
- Items to do are split over workers (``todo[rank::world]``): local processes (``--workers N``) or ``torchrun``
  ranks (rank 0 locks, checks and repairs the folder and tells every rank what to do).
- Anything that goes wrong in an item is recorded as its error and the run goes on; the summary counts ok,
  failed and missing items against the suite.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import multiprocessing as mp
import os
import signal
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import ConfigError, EvalError, MmtokError
from mmtok.eval.suite import (
    Suite,
    config_hash,
    describe_changes,
    expected_rows,
    fingerprint,
    item_hash,
    items,
    load_suite,
    row_hash,
)
from mmtok.files import read_json, write_atomic

RESULTS = "results.jsonl"
SUITE = "suite.json"  # the suite's settings (to_dict), as shown in reports
FINGERPRINT = "fingerprint.json"  # the suite's settings and each item's content hash
LOCK = ".lock"  # flock'ed by the run's parent for the whole run
PR_SET_PDEATHSIG = 1  # linux/prctl.h


# ------------------------------------------------------------------------------------------------ result files
def read_results(out: Path) -> dict[str, dict[str, Any]]:
    """The last result row of each item id (a re-run item appends a newer row). A last line without its newline
    (a write cut by a crash, or one in progress) does not count; a malformed line before it is an error."""
    rows: dict[str, dict[str, Any]] = {}
    for row in _rows(Path(out) / RESULTS):
        rows[row["id"]] = row
    return rows


def _rows(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete row of a results file. ``repair`` (only under the run's lock: no one is writing) cuts a torn
    last line off the file, so that the next row does not get glued onto it; its item is then done again."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(info.st_mode):
        raise EvalError(f"{path}: not a regular file")
    with open(path, "r+b" if repair else "rb") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            if repair:
                f.truncate(end)
            data = data[:end]
    rows = []
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not _well_typed(row):
            raise EvalError(
                f"{path}:{n}: not a result row (a JSON object with a string 'id', whole-number tokens and finite "
                "numbers for metrics); remove or fix that line, then resume (its item is done again)"
            )
        rows.append(row)
    return rows


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _well_typed(row: dict[str, Any]) -> bool:
    """The fields the summary and the report compute with are of the kind a run writes."""
    tokens, metrics, seconds = row.get("tokens"), row.get("metrics", {}), row.get("seconds")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        return False
    if seconds is not None and not _finite(seconds):
        return False
    if not isinstance(metrics, dict):
        return False
    return all(v is None or _finite(v) for v in metrics.values())


class ResultWriter:
    """Appends rows to results.jsonl, each as one ``os.write`` of a whole line on an ``O_APPEND`` descriptor."""

    def __init__(self, out: Path) -> None:
        self.fd = os.open(out / RESULTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row, default=str) + "\n").encode()
        written = os.write(self.fd, line)
        if written != len(line):  # a full disk: the torn line is cut off on resume
            raise EvalError(f"results.jsonl: only {written} of {len(line)} bytes of a row were written (disk full?)")

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
            from mmtok.eval.judge import judge_from_file

            return judge_from_file(self.suite.judge, str(self.suite.path or self.suite.name))
        if key == "backbone":
            return mmtok.get_model(p.get("backbone", "backbone-tiny"), kind="backbone").eval()
        if key == "photos":
            from mmtok.models.data import heldout_photo_crops

            return heldout_photo_crops(int(p.get("image_size", 64)))
        if key == "digits":
            from mmtok.models.digits_qa import task_tokens

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
    from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT
    from mmtok.tokens import TokenSequence

    tok = ctx.get("tokenizer")
    data = ctx.get("digits")
    model = ctx.get("backbone")
    side = int(len(data["ids"][0]) ** 0.5)
    seq = TokenSequence("image", ids=data["ids"][item["index"]], grid=(side, side), tokenizer=tok.name)
    options = ctx.suite.pipeline.get("truncation")
    if options:
        seq, _ = mmtok.truncate(seq, context=CONTEXT_PROMPTS, tokenizer=tok, **options)
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


def die_with_parent(parent_pid: int) -> None:
    """Make this worker process end when ``parent_pid`` (the run that holds the lock) does: on Linux the kernel
    sends SIGKILL when the parent goes (``PR_SET_PDEATHSIG``); then (and elsewhere) the parent is checked, which
    covers a parent that died before the call."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the check below and the one before each item still hold
    if os.getppid() != parent_pid:
        os._exit(1)


def _worker(
    suite: Suite, out: str, todo: list[tuple[dict[str, Any], str]], rank: int, world: int, threads: int, parent: int
) -> None:
    die_with_parent(parent)
    run_shard(suite, out, todo, rank, world, threads, parent_pid=parent)


def run_shard(
    suite: Suite,
    out: str,
    todo: list[tuple[dict[str, Any], str]],
    rank: int,
    world: int,
    threads: int,
    parent_pid: int | None = None,
    ctx: Context | None = None,
) -> None:
    """Evaluate this worker's share (``todo[rank::world]``) of the items to do; ``todo`` pairs each item with the
    hash its row records (what it is computed from). A worker whose parent (``parent_pid``) is gone stops before
    its next item: the folder's lock is no longer held, so it must not write. ``ctx``: models already loaded in
    this process (by :func:`check_pipeline`)."""
    torch.set_num_threads(max(1, threads))
    out_dir = Path(out)
    ctx = ctx or Context(suite, out_dir)
    writer = ResultWriter(out_dir)
    try:
        for item, computed_from in todo[rank::world]:
            if parent_pid is not None and os.getppid() != parent_pid:
                return
            started = time.perf_counter()
            try:
                row = evaluate_item(item, ctx)
                json.dumps(row, default=str)  # a row that cannot be written is this item's error too
                error = None
            except Exception as e:  # whatever goes wrong in one item is that item's error
                row, error = {}, item_error(e)
            writer.write(
                {
                    "id": item["id"],
                    **row,
                    "error": error,
                    "hash": computed_from,
                    "worker": rank,
                    "seconds": round(time.perf_counter() - started, 3),
                }
            )
    finally:
        writer.close()


class RunLock:
    """An exclusive ``flock`` on ``.lock`` in the run folder, held by the run's parent process for the whole run
    (workers do not inherit it): a second run on the same folder is refused rather than writing every id twice.
    The kernel drops the lock when the holder ends, however it ends, so a stale lock never needs cleaning up; the
    file stays (it names the last holder's pid)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no lock (mmtok runs on Linux and macOS)
            return self
        fd = os.open(self.out_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"{self.out_dir}: another `mmtok eval run` (process {holder}) is writing to this run folder; "
                "wait for it to end, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


def _prepare(
    suite: Suite, out_dir: Path, *, resume: bool, rerun_changed: bool, retry_errors: bool
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """Check the run folder against the suite, repair a torn last line, store the suite's fingerprint; the items
    still to do. Called with the folder's lock held."""
    suite_items = items(suite)
    new = fingerprint(suite, suite_items)
    results = out_dir / RESULTS
    has_results = results.is_file() and results.stat().st_size > 0
    if has_results and not resume:
        raise ConfigError(
            f"{out_dir} already holds {len(read_results(out_dir))} results: pass --resume to continue, "
            "or choose another --out"
        )
    old = _stored_fingerprint(out_dir) if has_results else None
    rows = {row["id"]: row for row in _rows(results, repair=True)}  # the last row of each id
    if old is not None:
        changes = describe_changes(old, new)
        if changes and not rerun_changed:
            raise ConfigError(
                f"{out_dir}: the suite changed since these results were computed: {'; '.join(changes)}. "
                "Pass --rerun-changed to re-run the items it affects, or choose another --out"
            )
        if any("hash" not in row for row in rows.values()):
            rows = _stamp_legacy_rows(out_dir, old)
    expected = expected_rows(new)
    todo = []
    for item in suite_items:
        row = rows.get(item["id"], {})
        if row.get("hash") != expected[item["id"]] or (retry_errors and row.get("error")):
            todo.append((item, expected[item["id"]]))
    write_atomic(out_dir / SUITE, json.dumps(new["suite"], indent=2, default=str) + "\n")
    write_atomic(out_dir / FINGERPRINT, json.dumps(new, indent=1, default=str) + "\n")
    return new, todo


def _stored_fingerprint(out_dir: Path) -> dict[str, Any]:
    """The fingerprint of the suite the folder's results belong to. A folder written before fingerprints existed
    has only suite.json: its items are taken to be the current ones (their content was not recorded)."""
    if (out_dir / FINGERPRINT).is_file():
        fp = read_json(out_dir / FINGERPRINT, "run fingerprint", EvalError)
        if (
            not isinstance(fp, dict)
            or not isinstance(fp.get("suite"), dict)
            or not isinstance(fp.get("config"), str)
            or not isinstance(fp.get("items"), dict)
            or not all(isinstance(h, str) for h in fp["items"].values())
        ):
            raise EvalError(f"{out_dir / FINGERPRINT}: not a run fingerprint (remove it to rebuild it from {SUITE})")
        return fp
    if not (out_dir / SUITE).is_file():
        raise ConfigError(f"{out_dir}: holds {RESULTS} but no {SUITE}: cannot tell which suite its results belong to")
    stored = read_json(out_dir / SUITE, "run suite", EvalError)
    if not isinstance(stored, dict):
        raise EvalError(f"{out_dir / SUITE}: not a suite")
    old = Suite.from_dict(stored)
    return {"suite": stored, "config": config_hash(old), "items": {i["id"]: item_hash(i) for i in _items_or_none(old)}}


def _items_or_none(suite: Suite) -> list[dict[str, Any]]:
    try:
        return items(suite)
    except MmtokError:
        return []


def _stamp_legacy_rows(out_dir: Path, old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rows written before rows carried their hash get the hash of the suite they were computed with (rewritten
    once, atomically, under the run's lock)."""
    rows = _rows(out_dir / RESULTS)
    for row in rows:
        if "hash" not in row and row["id"] in old["items"]:
            row["hash"] = row_hash(old["config"], old["items"][row["id"]])
    write_atomic(out_dir / RESULTS, "".join(json.dumps(row, default=str) + "\n" for row in rows))
    return read_results(out_dir)


def run(
    suite_spec: str | Path,
    out: str | Path,
    *,
    resume: bool = False,
    rerun_changed: bool = False,
    retry_errors: bool = False,
    workers: int = 1,
    progress: Any = None,
) -> dict[str, Any]:
    """Run (or resume) a suite; returns the summary (also written to ``summary.json``).

    ``resume``: skip the items whose result is there (computed from the same item and settings); failed items
    count as done unless ``retry_errors``. A suite that changed since is refused, naming what changed, unless
    ``rerun_changed``: then only the items whose content or pipeline/metrics settings changed are run again, items
    no longer in the suite drop out of the summary, and the stored suite becomes this one. Both imply ``resume``.
    A second run on the same folder is refused (a lock). Under ``torchrun`` each process is one rank.
    """
    resume = resume or rerun_changed or retry_errors
    flags = {"resume": resume, "rerun_changed": rerun_changed, "retry_errors": retry_errors}
    suite = load_suite(suite_spec)
    out_dir = Path(out)
    checked = check_pipeline(suite, out_dir)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    threads = max(1, (os.cpu_count() or 1) // max(workers, world))
    if world > 1:
        return _run_distributed(suite, out_dir, rank, world, threads, flags, checked)
    _make_folder(out_dir)
    with RunLock(out_dir):
        fp, todo = _prepare(suite, out_dir, **flags)
        expected = expected_rows(fp)
        if not todo:
            pass  # every item's result is there: nothing to start
        elif workers <= 1:
            _with_progress(
                lambda: run_shard(suite, str(out_dir), todo, 0, 1, threads, ctx=checked), out_dir, expected, progress
            )
        else:
            context = mp.get_context("spawn")
            procs = [
                context.Process(target=_worker, args=(suite, str(out_dir), todo, r, workers, threads, os.getpid()))
                for r in range(workers)
            ]
            for proc in procs:
                proc.start()
            _with_progress(lambda: [proc.join() for proc in procs], out_dir, expected, progress)
            failed = [p.exitcode for p in procs if p.exitcode]
            if failed:
                _write_summary(out_dir)
                raise EvalError(f"{len(failed)} worker(s) died (exit codes {failed}); rerun with --resume")
        return _write_summary(out_dir)


def _make_folder(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: --out must be a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{out_dir}: cannot create the run folder: {e.strerror or e}") from None


def check_pipeline(suite: Suite, out_dir: Path) -> Context:
    """A suite's settings that cannot work for any item are the suite's error (exit 2), found before any item
    runs: a judge a file may not set up (see ``judge_from_file``), an unknown tokenizer, an image size its
    tokenizer cannot take, a token rate or codebook level count the audio tokenizer cannot give. Returns the
    context holding the tokenizer it loaded, for a run into ``out_dir`` in this process to use."""
    p = suite.pipeline
    if "judge" in suite.metrics:
        from mmtok.eval.judge import judge_from_file

        try:
            judge_from_file(suite.judge, f"{suite.path or suite.name}: [metrics] judge")
        except MmtokError as e:
            raise ConfigError(str(e)) from None
    spec = suite.fd_extractor.split(":", 1)[-1] if "fd" in suite.metrics else ""
    if spec.startswith("open_clip:"):  # a weights tag or a safetensors file, never a pickle path
        from mmtok.models.teacher import _open_clip_weights

        try:
            _open_clip_weights(spec[len("open_clip:") :])
        except MmtokError as e:
            raise ConfigError(f"{suite.path or suite.name}: [metrics] fd_extractor: {e}") from None
    where = f"{suite.path or suite.name}: [pipeline]"
    ctx = Context(suite, out_dir)
    try:
        tok = ctx.get("tokenizer")
    except MmtokError as e:
        raise ConfigError(f"{where} tokenizer: {e}") from None
    size = p.get("image_size")
    if size is not None:
        from mmtok.models.vq import VQ_LIMITS

        step, largest = getattr(getattr(tok, "config", None), "downsample", None), VQ_LIMITS["image_size"][1]
        bad = isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size > largest
        if bad or (step and size % step):
            raise ConfigError(
                f"{where} image_size must be a positive multiple of {step or 1}, at most {largest}, got {size!r}"
            )
    if suite.kind == "speech":
        from mmtok.models.av import MelSpec

        rate, levels = p.get("tokens_per_second"), p.get("codebook_levels")
        try:
            if rate is not None:
                MelSpec.for_rate(tok.config, float(rate))
            if levels is not None and not 1 <= int(levels) <= tok.config.num_quantizers:
                raise ConfigError(f"codebook_levels must be 1 to {tok.config.num_quantizers}, got {levels!r}")
        except (MmtokError, TypeError, ValueError) as e:
            raise ConfigError(f"{where} {e}") from None
    return ctx


def _run_distributed(
    suite: Suite, out_dir: Path, rank: int, world: int, threads: int, flags: dict[str, bool], ctx: Context
) -> dict[str, Any]:
    """One ``torchrun`` rank. Rank 0 takes the lock, checks and repairs the folder and stores the fingerprint; it
    sends the items to do (or its refusal) to every rank; each rank runs ``todo[rank::world]``; rank 0 waits for
    all and writes the summary. Other ranks return ``{}``."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    lock = RunLock(out_dir)
    try:
        message: list[Any] = [None, None]
        refusal: Exception | None = None
        if rank == 0:
            try:
                _make_folder(out_dir)
                lock.__enter__()
                message = [None, _prepare(suite, out_dir, **flags)[1]]
            except Exception as e:  # every rank must hear of it, or they would wait for rank 0 forever
                message = [(isinstance(e, ConfigError), item_error(e)), None]
                refusal = e
        dist.broadcast_object_list(message, src=0)
        if message[0] is not None:
            if refusal is not None:
                raise refusal
            is_config, text = message[0]
            raise (ConfigError if is_config else EvalError)(text)
        failure = None
        try:
            run_shard(suite, str(out_dir), message[1], rank, world, threads, parent_pid=os.getppid(), ctx=ctx)
        except Exception as e:  # reported by rank 0 once every rank is done
            failure = f"rank {rank}: {item_error(e)}"
        failures: list[Any] = [None] * world
        dist.all_gather_object(failures, failure)
        if rank != 0:
            return {}
        summary = _write_summary(out_dir)
        bad = [f for f in failures if f]
        if bad:
            raise EvalError(f"{len(bad)} rank(s) failed ({'; '.join(bad)}); rerun with --resume")
        return summary
    finally:
        dist.barrier()  # no rank tears gloo down while another is still in a collective
        dist.destroy_process_group()
        lock.__exit__()


def _write_summary(out_dir: Path) -> dict[str, Any]:
    summary = summarize(out_dir)
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _done(out_dir: Path, expected: dict[str, str]) -> int:
    rows = read_results(out_dir)
    return sum(1 for item_id, h in expected.items() if rows.get(item_id, {}).get("hash") == h)


def _with_progress(work: Any, out_dir: Path, expected: dict[str, str], progress: Any) -> None:
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
        progress(_done(out_dir, expected), len(expected))
        thread.join(0.5)
    if failure:
        raise failure[0]
    progress(_done(out_dir, expected), len(expected))


# ------------------------------------------------------------------------------------------------ summary
def current_rows(out_dir: Path) -> tuple[Suite, list[dict[str, Any]], int]:
    """The run's suite, the current row of each of its items that has one (in suite order: the last row of the id,
    computed from the item's current content and settings), and the number of items in the suite."""
    out_dir = Path(out_dir)
    rows = read_results(out_dir)
    if (out_dir / FINGERPRINT).is_file():
        fp = _stored_fingerprint(out_dir)
        expected = expected_rows(fp)
        present = [rows[i] for i, h in expected.items() if i in rows and rows[i].get("hash") == h]
        return Suite.from_dict(fp["suite"]), present, len(expected)
    # a folder written before fingerprints: its rows are all there is to count
    stored = read_json(out_dir / SUITE, "run suite", EvalError)
    if not isinstance(stored, dict):
        raise EvalError(f"{out_dir / SUITE}: not a suite")
    return Suite.from_dict(stored), list(rows.values()), len(rows)


def summarize(out_dir: Path) -> dict[str, Any]:
    """Suite-level metrics over the current result of each of the suite's items, in suite order.

    ``items`` is the number of items in the suite; ``ok`` + ``failed`` + ``missing`` (not run yet, or run with other
    settings or content) add up to it. Rows of items no longer in the suite are left out.
    """
    suite, present, total = current_rows(out_dir)
    ok = [r for r in present if not r.get("error")]
    failed = [r for r in present if r.get("error")]
    summary: dict[str, Any] = {
        "suite": suite.name,
        "kind": suite.kind,
        "items": total,
        "ok": len(ok),
        "failed": len(failed),
        "missing": total - len(present),
        "metrics": {},
        "protocol": {},
        "errors": [{"id": r["id"], "error": r["error"]} for r in failed][:20],
    }
    if ok:
        summary["mean_tokens"] = sum(r.get("tokens", 0) for r in ok) / len(ok)
    suite_metrics = SUITE_METRICS.get(suite.kind)
    if ok and suite_metrics is not None:
        suite_metrics(suite, ok, out_dir, summary["metrics"], summary["protocol"])
    return summary


def _image_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    for key in ("psnr_db", "ssim"):
        values = [r["metrics"][key] for r in ok if key in r["metrics"]]
        if values:
            m[key] = sum(values) / len(values)
    protocol["psnr_ssim"] = "torchmetrics on [-1, 1] images, data range 2; SSIM Gaussian 11 / 1.5"
    if "fd" not in suite.metrics:
        return
    from mmtok.eval.extractors import get_extractor
    from mmtok.eval.metrics import feature_frechet

    feats = [_stored_features(out_dir, r["id"]) for r in ok]
    original = torch.stack([f["original"] for f in feats])
    recon = torch.stack([f["reconstruction"] for f in feats])
    extractor = get_extractor(suite.fd_extractor)
    m[extractor.metric] = feature_frechet(original, recon)
    protocol[extractor.metric] = f"{extractor.protocol}; originals vs reconstructions, N = {len(feats)}"


def _stored_features(out_dir: Path, item_id: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = _features_path(out_dir, item_id)
    try:
        return load_file(str(path))
    except Exception as e:  # a features file deleted or damaged since: its item must be redone
        raise EvalError(
            f"{path}: features of item {item_id!r} cannot be read ({item_error(e)}); delete its row from "
            f"{RESULTS} and resume"
        ) from None


def _speech_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    from mmtok.eval.asr import NORMALISER, get_asr

    words = sum(r["metrics"]["words"] for r in ok)
    chars = sum(r["metrics"]["chars"] for r in ok)
    m["wer"] = sum(r["metrics"]["word_errors"] for r in ok) / words
    m["cer"] = sum(r["metrics"]["char_errors"] for r in ok) / chars
    protocol["wer"] = f"corpus WER over {len(ok)} items, ASR {get_asr(suite.asr).name}, {NORMALISER}"


def _qa_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    if "accuracy" in suite.metrics:
        m["accuracy"] = sum(r["metrics"]["accuracy"] for r in ok) / len(ok)
        protocol["accuracy"] = "exact match of the predicted digit"
    if "judge" in suite.metrics:
        scores = [r["metrics"]["judge"] for r in ok if r["metrics"].get("judge") is not None]
        statuses = [r.get("judge", {}).get("status") for r in ok]
        m["judge"] = sum(scores) / len(scores) if scores else None
        m["judge_unparseable"] = statuses.count("unparseable")
        m["judge_skipped"] = statuses.count("skipped")
        if "accuracy" in suite.metrics:  # whether the judge tells right answers from wrong ones
            for name, right in (("judge_when_right", 1), ("judge_when_wrong", 0)):
                part = [r["metrics"]["judge"] for r in ok if r["metrics"].get("judge") is not None
                        and r["metrics"]["accuracy"] == right]  # fmt: skip
                m[name] = sum(part) / len(part) if part else None
        judge_name = next((r["judge"]["judge"] for r in ok if r.get("judge", {}).get("judge")), str(suite.judge))
        protocol["judge"] = f"{judge_name}, rubric in mmtok.eval.judge.RUBRIC, mean 1-5 over scored items"


SUITE_METRICS = {"images": _image_metrics, "speech": _speech_metrics, "qa": _qa_metrics}  # by Suite.kind
