"""A run: the suite's settings checked before any item, the folder locked and prepared, the items spread over
local workers or ``torchrun`` ranks, progress reported, and the summary written."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, EvalError, MmtokError
from mmtok.eval.runner.folder import RunLock, _prepare
from mmtok.eval.runner.items import Context, item_error
from mmtok.eval.runner.results import RESULTS, ResultTail
from mmtok.eval.runner.summary import summarize
from mmtok.eval.runner.workers import Shard, _worker, run_shard
from mmtok.eval.suite import Suite, expected_rows, load_suite
from mmtok.files import make_folder, write_atomic


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
    make_folder(out_dir, "run")
    with RunLock(out_dir):
        fp, todo = _prepare(suite, out_dir, **flags)
        expected = expected_rows(fp)
        if not todo:
            pass  # every item's result is there: nothing to start
        elif workers <= 1:
            stop = threading.Event()  # Ctrl-C: the item in flight ends, then the shard
            _with_progress(
                lambda: run_shard(Shard(suite, str(out_dir), todo, 0, 1, threads), ctx=checked, stop=stop),
                out_dir,
                expected,
                progress,
                on_interrupt=stop.set,
            )
        else:
            _run_workers(suite, out_dir, todo, workers, threads, expected, progress)
        return _write_summary(out_dir)


def _run_workers(
    suite: Suite,
    out_dir: Path,
    todo: list[tuple[dict[str, Any], str]],
    workers: int,
    threads: int,
    expected: dict[str, str],
    progress: Any,
) -> None:
    """``todo`` over ``workers`` local processes. They ignore Ctrl-C (the run ends them: one line, not a traceback
    per worker), and a worker that fails (a full disk) reports one line through its pipe and exits."""
    context = mp.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(workers)]  # a worker's one line on failure (no semaphores)
    shards = [Shard(suite, str(out_dir), todo, r, workers, threads) for r in range(workers)]
    procs = [context.Process(target=_worker, args=(shard, os.getpid(), pipes[shard.rank][1])) for shard in shards]
    with _interrupts_ignored():  # inherited through exec: a worker's Python then installs no KeyboardInterrupt
        for proc in procs:
            proc.start()

    def end_workers() -> None:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join()

    try:
        _with_progress(lambda: [proc.join() for proc in procs], out_dir, expected, progress, end_workers)
    except BaseException:  # Ctrl-C (or anything else) in the run: its workers end with it
        end_workers()
        raise
    failed = [p.exitcode for p in procs if p.exitcode]
    if failed:
        reasons = [reader.recv() for reader, _ in pipes if reader.poll()]
        with contextlib.suppress(OSError):  # the summary of what was done, if the disk still takes it
            _write_summary(out_dir)
        why = reasons[0] if reasons else f"exit codes {failed}"
        raise EvalError(f"{len(failed)} of {workers} workers stopped ({why}); rerun with --resume")


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT ignored while worker processes start (in the main thread; elsewhere signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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
    wanted, made = SUITE_MODALITY[suite.kind], getattr(tok, "modality", None)
    if made != wanted:
        name = getattr(tok, "name", p.get("tokenizer"))
        raise ConfigError(
            f"{where} tokenizer: {name} is {_article(made)} tokenizer; {_article(suite.kind)} suite needs "
            f"{_article(wanted)} one"
        )
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


SUITE_MODALITY = {"images": "image", "qa": "image", "speech": "audio"}  # what each kind's tokenizer must make


def _article(word: str | None) -> str:
    return f"{'an' if (word or 'x')[0] in 'aeiou' else 'a'} {word}"


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
                make_folder(out_dir, "run")
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
            run_shard(Shard(suite, str(out_dir), message[1], rank, world, threads), parent_pid=os.getppid(), ctx=ctx)
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


def _with_progress(work: Any, out_dir: Path, expected: dict[str, str], progress: Any, on_interrupt: Any = None) -> None:
    """Run ``work`` while reporting progress every half second (counting only the rows appended since:
    ``ResultTail``); an exception in ``work`` is raised here, in the caller's thread. On Ctrl-C, ``on_interrupt``
    asks the work to stop and its thread is waited for before KeyboardInterrupt goes on, so no model code is still
    running when the process ends (it aborted, exit 134, when it was)."""
    if progress is None:
        work()
        return
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as e:  # handed to the main thread below
            failure.append(e)

    tail = ResultTail(out_dir / RESULTS, expected)
    thread = threading.Thread(target=target, name="mmtok-eval", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            progress(tail.done(), len(expected))
            thread.join(0.5)
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt()
        thread.join()
        raise
    if failure:
        raise failure[0]
    progress(tail.done(), len(expected))
