"""``mmtok eval report runs/NAME``: a run's summary and per-item distributions as Markdown and HTML (+ PNG figures)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from mmtok.errors import EvalError
from mmtok.eval.runner import current_rows, summarize
from mmtok.files import read_json, write_atomic

PER_ITEM = {"images": ["psnr_db", "ssim"], "speech": ["wer"], "qa": ["judge", "accuracy"]}


def _figure(values: list[float], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
    ax.hist(values, bins=min(30, max(5, len(set(values)))), color="#3b6ea8", edgecolor="white")
    ax.set_title(title)
    ax.set_ylabel("items")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def write_report(out_dir: str | Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    if not (out_dir / "suite.json").is_file():
        raise EvalError(f"{out_dir}: not an evaluation run (no suite.json)")
    summary = summarize(out_dir)
    counts = (
        f"{summary['items']} items, {summary['ok']} evaluated, {summary['failed']} failed, "
        f"{summary.get('missing', 0)} not run."
    )
    rows = [r for r in current_rows(out_dir)[1] if not r.get("error")]
    figures = []
    for key in PER_ITEM.get(summary["kind"], []):
        values = [r["metrics"][key] for r in rows if r.get("metrics", {}).get(key) is not None]
        if values:
            path = out_dir / f"hist-{key}.png"
            _figure(values, f"{key} per item ({len(values)} items)", path)
            figures.append((key, path.name))
    lines = [
        f"# Evaluation run: {summary['suite']}",
        "",
        counts,
        "",
        "| metric | value | protocol |",
        "|---|---:|---|",
    ]
    for key, value in summary["metrics"].items():
        protocol = summary["protocol"].get(key) or summary["protocol"].get(key.split("_")[0], "")
        lines.append(f"| {key} | {_fmt(value)} | {protocol} |")
    if "mean_tokens" in summary:
        lines.append(f"| tokens per item | {_fmt(summary['mean_tokens'])} | |")
    for key, name in figures:
        lines += ["", f"![{key}]({name})"]
    if summary["errors"]:
        lines += ["", "## Failed items", ""] + [f"- `{e['id']}`: {e['error']}" for e in summary["errors"]]
    suite = read_json(out_dir / "suite.json", "run suite", EvalError)
    lines += ["", "## Suite", "", "```json", json.dumps(suite, indent=2), "```", ""]
    md = out_dir / "report.md"
    write_atomic(md, "\n".join(lines))
    body = [
        "<h1>Evaluation run: " + html.escape(summary["suite"]) + "</h1>",
        f"<p>{counts}</p>",
        "<table border='1' cellpadding='4'><tr><th>metric</th><th>value</th><th>protocol</th></tr>",
    ]
    for key, value in summary["metrics"].items():
        protocol = summary["protocol"].get(key) or summary["protocol"].get(key.split("_")[0], "")
        body.append(f"<tr><td>{html.escape(key)}</td><td>{_fmt(value)}</td><td>{html.escape(protocol)}</td></tr>")
    body.append("</table>")
    body += [f"<h3>{html.escape(key)}</h3><img src='{name}'>" for key, name in figures]
    body.append("<pre>" + html.escape(json.dumps(suite, indent=2)) + "</pre>")
    page = out_dir / "report.html"
    write_atomic(page, "<!doctype html><meta charset='utf-8'><title>mmtok eval</title>" + "\n".join(body))
    return md, page
