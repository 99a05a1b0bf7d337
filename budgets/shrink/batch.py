"""Shrink a batch file: a new batch file of the same format, its requests in the same order with the same ids, each
request's media replaced by its cheapest rendition at the bars, and the saving; resumable after an interruption.

    >>> done = shrink_batch("batch.jsonl", "gpt-4o", out="shrunk/")                      # doctest: +SKIP
    >>> done.output, done.cost_before, done.cost_after                                    # doctest: +SKIP

Each request is read by :mod:`mmtok.request.batch` and shrunk by
:func:`mmtok.budgets.shrink.request.shrink_request`, as a body on its own is; the envelope (``custom_id``,
``method``, ``url``; ``key``; ``metadata``) is kept, and a request that gains nothing, cannot be read or cannot be
shrunk is copied as it stands (and said), so the new file has a request for each of the old's.

Exactly once: requests are appended, one line each, to ``out/.NAME.partial`` (for a JSON document, its requests
one per line, wrapped at the end), and each line's figures to ``out/.NAME.lines``; both are flushed after every
request. A run that is killed leaves them complete up to some request (a torn last line is cut off); the next run
with the same settings (``out/NAME.run.json``: the input's size, time and first MiB's hash, the model and the bars)
goes on from there and writes no request twice. The finished file is ``out/NAME``, renamed into place whole. One
run at a time holds ``out/.NAME.lock``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from mmtok.errors import ConfigError, MmtokError
from mmtok.request import Policy, parse_body
from mmtok.request.batch import BadLine, BatchFile, FirstUse, open_batch, read_item, set_requests

HEAD_HASH_BYTES = 2**20
BODY_KEYS = {"openai": "body", "anthropic": "params", "anthropic-jsonl": "params", "gemini": "request",
             "gemini-inline": "request"}  # fmt: skip


@dataclass
class BatchShrink:
    """What shrinking a batch file did: its output, each request's fate, and the input's cost before and after (at
    batch rates where the model has them; the output bound is the same before and after)."""

    source: str
    output: str
    format: str
    model: str  # "" where each request was shrunk for its own model
    requests: int = 0
    shrunk: int = 0
    copied: int = 0  # requests copied as they stood: nothing cheaper, or they could not be read or shrunk
    problems: list[str] = field(default_factory=list)  # the requests copied because of a problem, named
    resumed_from: int = 0  # requests an earlier, interrupted run had written
    tokens_before: int = 0
    tokens_after: int = 0
    cost_before: Decimal = Decimal(0)
    cost_after: Decimal = Decimal(0)
    bytes_before: int = 0
    bytes_after: int = 0
    complete: bool = False

    @property
    def saved(self) -> float:
        """The share of the input cost saved (0.25: a quarter)."""
        return float((self.cost_before - self.cost_after) / self.cost_before) if self.cost_before else 0.0

    def add(self, record: dict[str, Any]) -> None:
        self.requests += 1
        self.shrunk += record["status"] == "shrunk"
        self.copied += record["status"] != "shrunk"
        if record.get("problem"):
            self.problems.append(f"line {record['n']}" + (f" ({record['id']})" if record.get("id") else "")
                                 + f": {record['problem']}")  # fmt: skip
        self.tokens_before += record.get("tokens_before", 0)
        self.tokens_after += record.get("tokens_after", 0)
        self.cost_before += Decimal(record.get("cost_before", "0"))
        self.cost_after += Decimal(record.get("cost_after", "0"))
        self.bytes_before += record["bytes_before"]
        self.bytes_after += record["bytes_after"]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_before"], out["cost_after"], out["saved"] = str(self.cost_before), str(self.cost_after), self.saved
        return out


@dataclass(frozen=True)
class _Paths:
    output: Path
    partial: Path
    lines: Path
    run: Path
    lock: Path

    @classmethod
    def of(cls, out: Path, name: str) -> _Paths:
        return cls(out / name, out / f".{name}.partial", out / f".{name}.lines", out / f"{name}.run.json",
                   out / f".{name}.lock")  # fmt: skip


def shrink_batch(
    path: str | os.PathLike[str],
    model: str | None = None,
    *,
    out: str | os.PathLike[str],
    keep: Mapping[str, float] | Sequence[str] | None = None,
    lossless: bool = False,
    slice: bool = False,
    prices: Sequence[str | os.PathLike[str]] = (),
    policy: Policy | None = None,
    on_request: Callable[[dict[str, Any]], None] | None = None,
) -> BatchShrink:
    """Shrink every request of the batch file at ``path`` for ``model`` (default: each request's own; a Gemini
    batch names none) into ``out/NAME``, going on from where an interrupted run with the same settings stopped.
    ``keep``, ``lossless`` and ``slice`` as :func:`mmtok.shrink`; ``on_request`` sees each request's record as it
    is written."""
    batch = open_batch(path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = _Paths.of(out, batch.path.name)
    asked = _asked(batch, model, keep, lossless, slice, prices)
    with _Lock(paths.lock):
        done = _resumed(batch, paths, asked)
        if done.complete:
            return done
        shrinker = _Shrinker(batch, model, dict(keep=keep, lossless=lossless, slice=slice, prices=prices),
                             policy or Policy(), prices)  # fmt: skip
        with paths.partial.open("ab") as partial, paths.lines.open("ab") as lines:
            for item in _todo(batch, done.requests):
                written, record = shrinker.one(item)
                _append(partial, written)
                _append(lines, json.dumps(record).encode())
                done.add(record)
                if on_request is not None:
                    on_request(record)
        _finish(batch, paths, done, asked)
    return done


def _asked(batch: BatchFile, model: str | None, keep: Any, lossless: bool, slice_: bool, prices: Sequence) -> dict:
    """What this run is asked to do, and of which input (its size, time and first MiB): a run that goes on from an
    earlier one must have been asked the same."""
    stat = batch.path.stat()
    with batch.path.open("rb") as f:
        head = hashlib.sha256(f.read(HEAD_HASH_BYTES)).hexdigest()
    bars = sorted(keep.items()) if isinstance(keep, Mapping) else sorted(map(str, keep or ()))
    return {"input": str(batch.path.resolve()), "input_bytes": stat.st_size, "input_mtime_ns": stat.st_mtime_ns,
            "input_head_sha256": head, "format": batch.format, "model": model or "", "keep": [list(b) if
            isinstance(b, tuple) else b for b in bars], "lossless": lossless, "slice": slice_,
            "prices": [str(p) for p in prices]}  # fmt: skip


def _resumed(batch: BatchFile, paths: _Paths, asked: dict[str, Any]) -> BatchShrink:
    """The run so far: a finished one as it was, an interrupted one cut to its last whole request, or a new one."""
    done = BatchShrink(str(batch.path), str(paths.output), batch.format, asked["model"])
    if paths.run.exists():
        stored = json.loads(paths.run.read_text(encoding="utf-8"))
        if stored.get("asked") != asked:
            raise ConfigError(f"{paths.run.parent}: holds a shrink of {batch.path.name} asked otherwise (another "
                              "input, model or bars): choose another --out, or remove it to start again")  # fmt: skip
        if stored.get("complete") and paths.output.exists():
            return _restored(stored["summary"])
    else:
        for stale in (paths.partial, paths.lines):
            stale.unlink(missing_ok=True)
        paths.run.write_text(json.dumps({"asked": asked, "complete": False}), encoding="utf-8")
    records = _whole_lines(paths.lines)
    kept = min(len(records), _cut(paths.partial, len(records)))
    _cut(paths.lines, kept)
    for record in records[:kept]:
        done.add(json.loads(record))
    done.resumed_from = kept
    return done


def _restored(summary: dict[str, Any]) -> BatchShrink:
    summary = {k: v for k, v in summary.items() if k != "saved"}
    done = BatchShrink(**{**summary, "cost_before": Decimal(summary["cost_before"]),
                          "cost_after": Decimal(summary["cost_after"])})  # fmt: skip
    return done


def _whole_lines(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines()


def _cut(path: Path, lines: int) -> int:
    """Keep the first ``lines`` whole lines of ``path`` (a torn last line goes too); the whole lines it had."""
    if not path.exists():
        path.touch()
        return 0
    with path.open("r+b") as f:
        end, count = 0, 0
        for line in iter(f.readline, b""):
            if not line.endswith(b"\n") or count == lines:
                break
            end, count = end + len(line), count + 1
        f.truncate(end)
    return count


def _todo(batch: BatchFile, skip: int) -> Any:
    """The requests still to shrink: all but the first ``skip`` (read as raw lines, not parsed)."""
    for n, item in enumerate(batch.raw()):
        if n >= skip:
            yield item


def _append(f: IO[bytes], data: bytes) -> None:
    f.write(data + b"\n")
    f.flush()  # in the kernel's hands: a killed process loses nothing written


def _finish(batch: BatchFile, paths: _Paths, done: BatchShrink, asked: dict[str, Any]) -> None:
    """The new batch file put in place whole, and the run marked finished with its summary."""
    from mmtok.files import atomic_path

    if batch.is_document:
        with atomic_path(paths.output) as target:
            _wrap(batch, paths.partial, target)
        paths.partial.unlink()
    else:
        os.replace(paths.partial, paths.output)
    done.bytes_after = paths.output.stat().st_size
    done.bytes_before = batch.path.stat().st_size
    done.complete = True
    paths.run.write_text(json.dumps({"asked": asked, "complete": True, "summary": done.to_dict()}, default=str),
                         encoding="utf-8")  # fmt: skip
    paths.lines.unlink(missing_ok=True)


def _wrap(batch: BatchFile, partial: Path, target: Path) -> None:
    """A JSON document around the requests in ``partial`` (one per line), with the input document's other fields."""
    from mmtok.request.batch import document_wrapper

    marker = '"__mmtok_requests__"'
    head, _, tail = json.dumps(set_requests(document_wrapper(batch.path, batch.format), batch.format,
                                            ["__mmtok_requests__"]), ensure_ascii=False).partition(marker)  # fmt: skip
    with target.open("wb") as f, partial.open("rb") as requests:
        f.write(head.encode())
        for n, line in enumerate(requests):
            f.write((b"," if n else b"") + line.rstrip(b"\n"))
        f.write(tail.encode() + b"\n")


class _Lock:
    """An exclusive ``flock`` on the run's lock file: a second run on the same output is refused."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> _Lock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"{self.path.parent}: another mmtok shrink is writing this batch's output; wait for "
                              "it to end, or choose another --out") from None  # fmt: skip
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ------------------------------------------------------------------------------------------------- one request
class _Shrinker:
    """Shrinks one request at a time: (the line to write, its record)."""

    def __init__(self, batch: BatchFile, model: str | None, options: dict, policy: Policy, prices: Sequence) -> None:
        self.batch, self.model, self.options, self.policy, self.prices = batch, model, options, policy, prices
        self.ids = FirstUse(batch.limits.provider)
        self.cards: dict[str, Any] = {}

    def one(self, item: tuple[int, Any] | BadLine) -> tuple[bytes, dict[str, Any]]:
        if isinstance(item, BadLine):  # too long to read: written as a placeholder would lose it; said instead
            raise ConfigError(f"{self.batch.path}: {item}: a request this long cannot be copied; fix the input")
        number, raw = item
        original = raw if isinstance(raw, bytes) else json.dumps(raw, ensure_ascii=False).encode()
        original = original.rstrip(b"\r\n")
        record: dict[str, Any] = {"n": number, "bytes_before": len(original)}
        line = self.ids.check(read_item(raw, number, self.batch.format))
        if isinstance(line, BadLine):
            return self._copied(original, record, line.problem, line.custom_id)
        record["id"] = line.custom_id
        if line.unpriced:
            return self._copied(original, record, line.unpriced, line.custom_id)
        try:
            return self._shrunk(line, raw, original, record)
        except MmtokError as e:
            return self._copied(original, record, str(e), line.custom_id)
        except Exception as e:  # one request must not stop the file
            problem = f"mmtok failed to shrink this request ({type(e).__name__}: {e}): please report it"
            return self._copied(original, record, problem, line.custom_id)

    def _copied(self, original: bytes, record: dict, problem: str, custom_id: str | None) -> tuple[bytes, dict]:
        record.update(status="copied", problem=problem, bytes_after=len(original))
        if custom_id:
            record["id"] = custom_id
        return original, record

    def _shrunk(self, line: Any, raw: Any, original: bytes, record: dict) -> tuple[bytes, dict]:
        from mmtok.budgets.shrink.request import shrink_request

        name = self.model or line.model
        if not name:
            raise ConfigError("the request names no model (a Gemini batch's model is in its URL): give one with -m")
        request = parse_body(line.body, api=line.api, source=f"line {line.number}")
        done = shrink_request(request, name, policy=self.policy, source=f"line {line.number}", **self.options)
        before, after = self._batch_cost(name, done.before), self._batch_cost(name, done.after)
        record.update(tokens_before=done.before.input_tokens, tokens_after=done.after.input_tokens,
                      cost_before=str(before), cost_after=str(after), model=name)  # fmt: skip
        if not done.replaced:
            record.update(status="kept", bytes_after=len(original))
            return original, record
        envelope = json.loads(raw) if isinstance(raw, bytes) else dict(raw)
        envelope[BODY_KEYS[self.batch.format]] = done.body
        written = json.dumps(envelope, ensure_ascii=False).encode()
        record.update(status="shrunk", bytes_after=len(written), parts=done.replaced)
        return written, record

    def _batch_cost(self, name: str, quote: Any) -> Decimal:
        """A quote's input cost at the model's batch rates (the quote is at standard ones); standard where the
        price data has no batch rates."""
        from mmtok.budgets.pricing import rate_card, resolve
        from mmtok.budgets.pricing.batch import cost_at

        if name not in self.cards:
            model = resolve(name, self.prices)
            try:
                self.cards[name] = (rate_card(model, quote.as_of, "standard"), rate_card(model, quote.as_of, "batch"))
            except MmtokError:
                self.cards[name] = None
        cards = self.cards[name]
        inputs = dataclasses.replace(quote, lines=quote.input_lines)
        found = None if cards is None else cost_at(inputs, *cards)
        return inputs.total_cost if found is None else found
