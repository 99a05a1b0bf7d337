"""Planning reports: ``report.md`` + ``report.html`` with Pareto-front figures, the recommended configurations, the
exact settings to reproduce each, and the front as CSV and JSON."""

from __future__ import annotations

import csv
import html
import itertools
import json
from pathlib import Path
from typing import Any

from mmtok.budgets.planner import KNOBS, OBJECTIVES, Plan, calibration_sets, meets_bars

LABELS = {
    "cost": "cost (USD / request)",
    "fd": "FD (lower is better)",
    "wer": "WER",
    "tokens": "tokens / request",
    "accuracy": "QA accuracy",
    "judge": "judge score (1-5)",
}


def _fmt(name: str, value: Any) -> str:
    if value is None:
        return "—"
    if name == "cost":
        return f"${value:.6f}"
    if name in ("wer", "accuracy"):
        return f"{value:.1%}"
    if name == "tokens":
        return f"{value:,.0f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _fmt_reference(name: str, value: float) -> str:
    """A reference-point coordinate; maximised objectives are negated for pymoo, shown here as they are."""
    return _fmt(name, -value if OBJECTIVES[name] == "max" else value)


def recommendations(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """Like the design seed's A/B/C: the cheapest front point, the knee, the cheapest meeting the bars, the best
    quality point."""
    rows: list[tuple[str, dict[str, Any]]] = []
    if not plan.front:
        return rows
    rows.append(("A: cheapest", plan.front[0]))
    if plan.knee is not None:
        rows.append(("B: knee (balanced)", plan.knee))
    if plan.cheapest_meeting_bars is not None:
        rows.append(("C: cheapest meeting the bars", plan.cheapest_meeting_bars))
    quality = [o for o in plan.spec.objectives if o not in ("cost", "tokens")]
    if quality:
        first = quality[0]
        best = (min if OBJECTIVES[first] == "min" else max)(plan.front, key=lambda e: e["objectives"][first])
        rows.append((f"D: best {first}", best))
    unique, seen = [], set()
    for label, entry in rows:
        key = json.dumps(entry["setting"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append((label, entry))
    return unique


def command_for(entry: dict[str, Any]) -> str:
    s = entry["setting"]
    if s["model"] == "mmtok-semantic":
        return (
            f"mmtok tokenize IMAGES --image-size {s['image_size']} --truncate mi --keep-ratio "
            f'{float(s["keep_ratio"]):.2f} --context "<question>"; mmtok tokenize AUDIO --tokens-per-second '
            f"{s['audio_tokens_per_second']} --codebook-levels {s['codebook_levels']}"
        )
    return (
        f"resize images to {s['image_size']}x{s['image_size']} px; mmtok price IMAGES AUDIO -m {s['model']} "
        "--detail high"
    )


def _figures(plan: Plan, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = plan.spec
    objectives = spec.objectives
    evaluated = plan.evaluated
    figures = []
    for x_name, y_name in itertools.combinations(objectives, 2):
        fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
        xs = [e["objectives"][x_name] for e in evaluated]
        ys = [e["objectives"][y_name] for e in evaluated]
        ax.scatter(xs, ys, s=12, color="#bbbbbb", label="evaluated")
        fx = [e["objectives"][x_name] for e in plan.front]
        fy = [e["objectives"][y_name] for e in plan.front]
        ax.scatter(fx, fy, s=22, color="#c0392b", label="Pareto front")
        if plan.knee:
            ax.scatter(
                [plan.knee["objectives"][x_name]],
                [plan.knee["objectives"][y_name]],
                s=90,
                facecolors="none",
                edgecolors="black",
                label="knee",
            )
        ax.set_xlabel(LABELS.get(x_name, x_name))
        ax.set_ylabel(LABELS.get(y_name, y_name))
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"front-{x_name}-{y_name}.png"
        fig.savefig(out / name)
        plt.close(fig)
        figures.append((f"{y_name} vs {x_name}", name))
    if len(plan.front) >= 2:  # parallel coordinates of the front, each objective scaled to [0, 1]
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110)
        columns = list(objectives)
        values = [[e["objectives"][c] for c in columns] for e in plan.front]
        lows = [min(v[i] for v in values) for i in range(len(columns))]
        highs = [max(v[i] for v in values) for i in range(len(columns))]
        for v in values:
            scaled = [(v[i] - lows[i]) / (highs[i] - lows[i] or 1) for i in range(len(columns))]
            ax.plot(range(len(columns)), scaled, color="#3b6ea8", alpha=0.5)
        ax.set_xticks(range(len(columns)), [LABELS.get(c, c) for c in columns], fontsize=7, rotation=15)
        ax.set_ylabel("scaled to the front's range")
        fig.tight_layout()
        fig.savefig(out / "front-parallel.png")
        plt.close(fig)
        figures.append(("parallel coordinates of the front", "front-parallel.png"))
    if plan.history:
        fig, ax = plt.subplots(figsize=(5, 3), dpi=110)
        ax.plot([h["generation"] for h in plan.history], [h["hypervolume"] for h in plan.history], marker="o")
        ax.set_xlabel("generation")
        ax.set_ylabel("hypervolume of the front")
        fig.tight_layout()
        fig.savefig(out / "hypervolume.png")
        plt.close(fig)
        figures.append(("hypervolume per generation", "hypervolume.png"))
    return figures


def write_report(plan: Plan, out: str | Path) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = plan.spec
    figures = _figures(plan, out)
    columns = [*KNOBS, *spec.objectives, "tokens", "meets_bars"]
    with (out / "front.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for e in plan.front:
            writer.writerow(
                {
                    **e["setting"],
                    **{o: e["objectives"][o] for o in [*spec.objectives, "tokens"]},
                    "meets_bars": meets_bars(spec, e["objectives"]),
                }
            )
    (out / "front.json").write_text(json.dumps(plan.to_dict(), indent=2, default=str) + "\n")
    recs = recommendations(plan)
    lines = [
        f"# Token budget plan: {spec.name}",
        "",
        f"Request: {spec.images} image(s), {spec.audio_seconds:g} s of speech, {spec.text_tokens} text tokens "
        f"in and {spec.output_tokens} out; budget {spec.budget_tokens:,} tokens. NSGA-II (pymoo), "
        f"population {spec.population}, {len(plan.history)} generations, {plan.evaluations} settings evaluated "
        f"({plan.measurements} new measurements, the rest from the cache).",
        "",
        "Objectives: "
        + ", ".join(f"{o} ({'min' if o in spec.minimize else 'max'})" for o in spec.objectives)
        + (
            ". Bars: " + ", ".join(f"{k} {'<=' if OBJECTIVES[k] == 'min' else '>='} {v}" for k, v in spec.bars.items())
            if spec.bars
            else ""
        )
        + ".",
        "",
    ]
    if plan.shortfall:
        lines += [f"**Note:** {plan.shortfall}", ""]
    lines += [
        "## Recommended configurations",
        "",
        "| | model | image px | keep | audio tok/s | levels | " + " | ".join(spec.objectives) + " | tokens |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(spec.objectives) + "---:|",
    ]
    for label, e in recs:
        s, o = e["setting"], e["objectives"]
        lines.append(
            f"| {label} | {s['model']} | {s['image_size']} | {float(s['keep_ratio']):.2f} | "
            f"{s['audio_tokens_per_second']} | {s['codebook_levels']} | "
            + " | ".join(_fmt(name, o.get(name)) for name in spec.objectives)
            + f" | {_fmt('tokens', o['tokens'])} |"
        )
    lines += ["", "To reproduce each:", ""] + [f"- {label}: `{command_for(e)}`" for label, e in recs]
    lines += [
        "",
        "## Pareto front",
        "",
        f"{len(plan.front)} non-dominated feasible settings: front.csv, front.json.",
        "",
    ]
    for title, name in figures:
        lines += [f"![{title}]({name})", ""]
    if plan.reference_point is not None:
        point = ", ".join(
            f"{o} {_fmt_reference(o, v)}" for o, v in zip(spec.objectives, plan.reference_point, strict=True)
        )
        lines += [
            f"Hypervolume per generation is measured against one reference point for the whole run ({point}), "
            "fixed after the first generation at 10% of the range beyond the worst value of each objective among "
            "the settings evaluated so far; a point beyond it adds nothing.",
            "",
        ]
    fid_or_not = "FID" if "inception" in spec.fd_extractor else "FD, not FID"
    sets = calibration_sets(spec)
    lines += [
        "## How the objectives were measured",
        "",
        "- cost: `mmtok.price` on the shipped price sheets (dated, sourced)"
        + (f" and yours ({', '.join(str(p) for p in spec.prices)}: its rows override)" if spec.prices else "")
        + ", per request;",
        f"- fd: Fréchet distance on {spec.fd_extractor} features ({fid_or_not}) between {sets['photos']} and "
        "what the model receives (mmtok: the VQ reconstruction at the image size; providers: the photo resized to "
        "it), both resized to 256 px;",
        f"- wer: corpus WER of {sets['speech']} by {spec.asr}, on the speech the model receives (mmtok: "
        "reconstructed from tokens; providers: the original);",
        f"- accuracy / judge: the MoE backbone answering which digit is written, on {spec.calibration_qa} "
        "held-out digits-on-photos drawn at the setting's image size ((size / 8)^2 tokens), from MI-truncated "
        "visual tokens; judge = mmtok's offline LLM judge.",
        "",
    ]
    md = out / "report.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    body = "\n".join(lines)
    page = out / "report.html"
    page.write_text(_markdown_to_html(body), encoding="utf-8")
    return {"md": md, "html": page, "csv": out / "front.csv", "json": out / "front.json"}


def _markdown_to_html(text: str) -> str:
    """The small subset of Markdown the report uses: headings, tables, images, lists, code and paragraphs."""
    import re

    out = [
        "<!doctype html><meta charset='utf-8'><title>mmtok plan</title><style>body{font-family:sans-serif;"
        "max-width:1000px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px}"
        "</style>"
    ]
    in_table = False
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-:"):
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
            out.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line.lstrip('# '))}</h{level}>")
        elif m := re.match(r"!\[(.*)\]\((.*)\)", line):
            out.append(f"<p><img src='{html.escape(m.group(2))}' alt='{html.escape(m.group(1))}'></p>")
        elif line.startswith("- "):
            out.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out)


def _inline(text: str) -> str:
    import re

    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]*)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", escaped)
