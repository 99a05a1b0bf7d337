"""``mmtok shrink`` on a batch file: a new batch file of the same format in --out, its requests in the same order
with the same ids, each one's media at its cheapest rendition that meets the bars; a progress bar, the saving, and
each request copied as it stood named; an interrupted run goes on where it stopped (``budgets/shrink/batch.py``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from mmtok.cli.common import console, print_error, print_json_line, print_note, progress_bar, say
from mmtok.errors import MmtokError

PROBLEMS_SHOWN = 20


def is_batch_file(path: Path) -> bool:
    """A batch file named on the command line (never a FIFO or device, which could block)."""
    from mmtok.request import looks_like_body
    from mmtok.request.batch import looks_like_batch

    try:
        if not path.is_file():
            return False
        with path.open("rb") as f:
            return looks_like_body(f.read(4096)) and looks_like_batch(path)
    except OSError:
        return False


def shrink_batches(batches: list[Path], models: list[str], out: Path, json_out: bool, **options: Any) -> bool:
    """Shrink each batch file for the one model given (none: each request's own); True where every request was
    written and none had a problem."""
    from mmtok.budgets.shrink.batch import shrink_batch
    from mmtok.request.batch import open_batch

    if len(models) > 1:
        print_error("a batch file goes to one provider: shrink it for one model (-m once)")
        return False
    ok = True
    for path in batches:
        try:
            total = open_batch(path).survey().requests
            with progress_bar(total, f"shrinking {path.name}", min_items=1) as advance:
                done = shrink_batch(path, models[0] if models else None, out=out, on_request=lambda _: advance(1),
                                    **options)  # fmt: skip
        except MmtokError as e:
            print_error(e)
            ok = False
            continue
        ok = ok and not done.problems
        _report(done, json_out)
    return ok


def _report(done: Any, json_out: bool) -> None:
    from mmtok.cli.quotes import money

    for problem in done.problems[:PROBLEMS_SHOWN]:
        print_error(f"{done.source}: {problem} (copied as it stood)")
    if len(done.problems) > PROBLEMS_SHOWN:
        print_error(f"{done.source}: {len(done.problems) - PROBLEMS_SHOWN:,} more request(s) copied with a problem")
    if json_out:
        print_json_line({"input": done.source, "kind": "batch", **json.loads(json.dumps(done.to_dict(), default=str))})
        return
    if done.resumed_from:
        print_note(f"{done.source}: went on from request {done.resumed_from + 1} (an earlier run wrote the first "
                   f"{done.resumed_from:,})")  # fmt: skip
    text = (f"{done.source} -> {done.output}: {done.requests:,} request(s), {done.shrunk:,} shrunk, {done.copied:,} "
            f"copied as they stood; input {done.tokens_before:,} -> {done.tokens_after:,} tokens, "
            f"${money(done.cost_before)} -> ${money(done.cost_after)} at batch rates ({done.saved:.1%} saved); "
            f"{done.bytes_before:,} -> {done.bytes_after:,} bytes")  # fmt: skip
    for line in textwrap.wrap(text, console().width, break_long_words=False, break_on_hyphens=False):
        say(line)
