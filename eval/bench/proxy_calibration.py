"""Calibration end to end: does ``mmtok calibrate`` make the proxy's predictions equal what a provider bills?

Run: ``python -m mmtok.eval.bench.proxy_calibration``.

The stand-in provider (:mod:`mmtok.eval.bench.proxy_upstream`) bills images by rules that differ from mmtok's
documented ones (gpt-4o tiles at 100 + 190, gpt-4.1-mini at a 1,536-patch budget, Claude Sonnet 4.5 capped at 1,200
tokens, Gemini 2.5 Pro at a flat 258). Calls in each provider's body shape go through ``mmtok proxy`` (photos of
varied sizes, a few without images, some streamed); ``calibrate`` fits the ledger and writes a sheet; then photos
of sizes not seen before go through two proxies, without and with the sheet, and their predictions are compared
with the bills. Kept in ``eval/results/``: the ledger of the fitting calls (``bench_proxy_ledger.sqlite``, which
the docs' examples read), the sheet (``bench_proxy_calibrated.toml``) and the comparison
(``bench_proxy_calibration.json`` / ``.txt``).
"""

from __future__ import annotations

import argparse
import base64
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import httpx

from mmtok.budgets.calibrate import calibrate, describe_fit, write_sheet
from mmtok.budgets.calibrate.measure import photo
from mmtok.budgets.ledger import open_ledger
from mmtok.budgets.proxy import ProxyConfig, create_app
from mmtok.eval.bench import machine, write_json
from mmtok.eval.bench.proxy_upstream import Upstream, make_app, serve

PROMPT = "Describe this picture in one sentence."
# fmt: off
FITTING = {  # per model: each call's photo sizes; () is a call without images
    "gpt-4o": [((512, 512),), ((800, 600),), ((1024, 1024),), ((1600, 900),), ((640, 1280),), ((2000, 1000),),
               ((300, 200),), ((700, 700), (1200, 400)), (), (), ()],
    "gpt-4.1-mini": [((512, 512),), ((800, 600),), ((1024, 1024),), ((1600, 1200),), ((2000, 1500),),
                     ((1400, 1400),), ((1920, 1080),), ((600, 900), (1700, 1300)), (), (), ()],
    "claude-sonnet-4-5": [((500, 500),), ((800, 600),), ((1000, 1000),), ((1092, 1092),), ((1400, 900),),
                          ((1200, 800),), ((1920, 1080),), ((640, 480), (1300, 1000)), (), (), ()],
    "gemini-2.5-pro": [((300, 300),), ((800, 600),), ((1024, 1024),), ((1600, 900),), ((2000, 2000),),
                       ((640, 480), (900, 1600)), (), ()],
}
UNSEEN = {
    "gpt-4o": [(1500, 1500), (700, 300), (1280, 720), (2400, 1600)],
    "gpt-4.1-mini": [(1800, 1800), (900, 700), (1300, 1300), (2500, 1000)],
    "claude-sonnet-4-5": [(1100, 1100), (1500, 800), (700, 500), (1800, 1200)],
    "gemini-2.5-pro": [(1500, 1500), (700, 300), (1280, 720), (3000, 2000)],
}
# fmt: on


def body(model: str, sizes: tuple[tuple[int, int], ...], stream: bool) -> tuple[str, dict[str, Any]]:
    """(proxy path, body) of a call in the model's provider's shape, as the official SDKs write them."""
    data = [base64.b64encode(photo(w, h)).decode() for w, h in sizes]
    if model == "gpt-4o":
        parts = [{"type": "text", "text": PROMPT}]
        parts += [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{d}", "detail": "high"}}
                  for d in data]  # fmt: skip
        extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": parts}], **extra}
    if model.startswith("gpt-"):
        parts = [{"type": "input_text", "text": PROMPT}]
        parts += [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{d}", "detail": "high"} for d in data]
        return "/v1/responses", {"model": model, "input": [{"role": "user", "content": parts}], "stream": stream}
    if model.startswith("claude"):
        blocks: list[dict[str, Any]] = [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": d}} for d in data
        ]
        blocks.append({"type": "text", "text": PROMPT})
        message = {"model": model, "max_tokens": 64, "stream": stream}
        return "/anthropic/v1/messages", {**message, "messages": [{"role": "user", "content": blocks}]}
    parts = [{"text": PROMPT}] + [{"inlineData": {"mimeType": "image/jpeg", "data": d}} for d in data]
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/gemini/v1beta/models/{model}:{method}", {"contents": [{"role": "user", "parts": parts}]}


def run_calls(upstream: str, ledger: Path, calls: list[tuple[str, tuple, bool]], prices: tuple = ()) -> None:
    upstreams = {"openai": upstream + "/v1", "anthropic": upstream, "gemini": upstream}
    config = ProxyConfig(ledger=str(ledger), upstreams=upstreams, prices=prices, sync_ledger=True)
    with serve(create_app(config)) as proxy, httpx.Client(timeout=120) as client:
        for model, sizes, stream in calls:
            path, payload = body(model, sizes, stream)
            answer = client.post(proxy + path, json=payload, headers={"authorization": "Bearer sk-bench"})
            answer.raise_for_status()


def accuracy(ledger: Path) -> dict[str, dict[str, Any]]:
    """Per model: calls, exact predictions, mean |billed - predicted| input tokens."""
    found: dict[str, list[int]] = {}
    for r in open_ledger(ledger, read_only=True).records():
        found.setdefault(r.model or "?", []).append((r.billed_input or 0) - (r.predicted_input or 0))
    return {m: {"calls": len(e), "exact": sum(x == 0 for x in e), "mean_abs_error": statistics.fmean(map(abs, e))}
            for m, e in found.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("eval/results"))
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    ledger, sheet = out / "bench_proxy_ledger.sqlite", out / "bench_proxy_calibrated.toml"
    for path in (ledger, *ledger.parent.glob(ledger.name + "-*")):
        path.unlink(missing_ok=True)
    fitting = [(m, sizes, n % 3 == 1) for m, calls in FITTING.items() for n, sizes in enumerate(calls)]
    unseen = [(m, (size,), n == 1) for m, sizes in UNSEEN.items() for n, size in enumerate(sizes)]
    scratch = out / ".bench_proxy_scratch"
    scratch.mkdir(exist_ok=True)
    with serve(make_app(Upstream())) as upstream:
        run_calls(upstream, ledger, fitting)
        fitted = calibrate(open_ledger(ledger, read_only=True).records(), source=ledger.as_posix())
        write_sheet(fitted, sheet)
        run_calls(upstream, scratch / "documented.sqlite", unseen)
        run_calls(upstream, scratch / "calibrated.sqlite", unseen, prices=(sheet,))
    before, after = accuracy(scratch / "documented.sqlite"), accuracy(scratch / "calibrated.sqlite")
    for path in scratch.iterdir():
        path.unlink()
    scratch.rmdir()
    with sqlite3.connect(ledger) as conn:  # out of WAL mode: reading it (the docs' examples) writes nothing
        conn.execute("PRAGMA journal_mode=DELETE")
    result = {
        "machine": machine(),
        "fitting_calls": len(fitting),
        "unseen_calls": len(unseen),
        "fits": [m.to_dict() for m in fitted.models],
        "unseen": {m: {"documented": before[m], "calibrated": after[m]} for m in UNSEEN},
    }
    lines = [f"bench_proxy_calibration: {len(fitting)} calls to fit, {len(unseen)} calls of unseen sizes. "
             f"{result['machine']}", "", "model               documented rule on the bills"]  # fmt: skip
    lines += [f"{m.model:<19} {describe_fit(m)}" for m in fitted.models]
    lines += ["", "unseen sizes        calls  exact before  exact after  mean |error| before  after"]
    for model, row in result["unseen"].items():
        b, a = row["documented"], row["calibrated"]
        lines.append(f"{model:<19} {b['calls']:5}  {b['exact']:12}  {a['exact']:11}  {b['mean_abs_error']:19.1f}"
                     f"  {a['mean_abs_error']:5.1f}")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    write_json(out / "bench_proxy_calibration.json", result)
    (out / "bench_proxy_calibration.txt").write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
