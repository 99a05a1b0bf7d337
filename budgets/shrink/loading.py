"""The measures' networks loaded in a background thread while the image is decoded and the model's price looked up.

A first call in a process (the hook, a CLI run, an MCP server's first shrink) pays for building RapidOCR's
onnxruntime sessions (detector, recogniser, classifier) and the recognition network's before it can measure
anything: about a second on a busy 2-core machine, on top of the imports. onnxruntime builds a session in C++
without holding Python's lock, so that work overlaps what the calling thread does meanwhile (decoding the image,
finding its border, importing and reading the price data): measured while this was written, loading both networks
beside the price data's import took 0.48 s where one after the other took 1.07 s. Each network is still built
once (``ocr.ocr_engine``, ``recognition.session`` wait for a build under way); a failure here is left for the
measure that needs the network to report, with its own message.

An image under ``MIN_PIXELS`` (an icon) does not start it: such an image is often already as cheap as it gets,
nothing is measured, and the process would only wait at its exit for networks it never used (the hook on a 32x24
favicon). Where it is measured, its networks load when first asked for, as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

MIN_PIXELS = 256 * 256
_started: set[str] = set()
_lock = threading.Lock()
_threads: list[threading.Thread] = []


def start(metrics: Iterable[str], pixels: int) -> None:
    """Begin loading, once per process, the networks the bars named in ``metrics`` need (``ocr``: RapidOCR's
    engine; ``recog``: the recognition network) for an image of ``pixels``, in a thread the process waits for at
    exit."""
    if pixels < MIN_PIXELS:
        return
    wanted = [m for m in ("ocr", "recog") if m in set(metrics)]
    with _lock:
        wanted = [m for m in wanted if m not in _started]
        _started.update(wanted)
    if wanted:
        thread = threading.Thread(target=_load, args=(wanted,), name="mmtok-loading")
        _threads.append(thread)
        thread.start()


def wait() -> None:
    """Wait until what this process started loading is loaded (or failed): a process that ends without the
    interpreter's finalisation (the hook: ``cli/main.py``'s ``ENDS_AT_ONCE``) must not cut short the first write of
    the recognition network's weights into the cache."""
    for thread in list(_threads):
        thread.join()


def _load(metrics: list[str]) -> None:
    from mmtok.budgets.shrink import ocr as O
    from mmtok.budgets.shrink import recognition as R

    for metric in metrics:
        with contextlib.suppress(Exception):  # e.g. the extra not installed: the measure says so when it runs
            O.ocr_engine() if metric == "ocr" else R.session()
