"""Planning reports: ``report.md`` + ``report.html`` with Pareto-front figures, the recommended configurations, the
exact settings to reproduce each, and the front as CSV and JSON.

Tables show the settings that matter: a knob that does not apply to the request (no audio knobs, trim_silence
included, without audio, no image knobs without images) is left out, one fixed for the whole run is stated once
under the table, and a knob of the mmtok tokenizers shows "—" for a provider model. Image sizes are pixels, each
model's own with ``image_size = "breakpoints"`` (always a column then). Values are rounded for reading (front.csv
and front.json keep them whole).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

from mmtok.budgets.planner import (
    OBJECTIVES,
    SELF_HOSTED,
    SELF_HOSTED_KNOBS,
    Plan,
    Spec,
    applicable_setting,
    calibration_sets,
    candidate_models,
    domains,
    knob_applies,
    meets_bars,
    per_model_sizes,
    setting_key,
)
from mmtok.files import atomic_path, write_atomic

LABELS = {
    "cost": "cost (USD / request)",
    "fd": "FD (lower is better)",
    "wer": "WER",
    "tokens": "tokens / request",
    "accuracy": "QA accuracy",
    "judge": "judge score (1-5)",
}
KNOB_LABELS = {
    "model": "model",
    "image_size": "image px",
    "keep_ratio": "keep",
    "audio_tokens_per_second": "audio tok/s",
    "codebook_levels": "levels",
    "trim_silence": "trim silence",
}


def dollars(value: float) -> str:
    """Three significant figures (at least cents), never in E notation: $0.000266, $0.0123, $1.50, $1,234.00."""
    if value == 0:
        return "$0"
    decimals = max(2, 2 - math.floor(math.log10(abs(value))))
    return f"${value:,.{decimals}f}"


def objective_text(name: str, value: Any) -> str:
    """An objective's value rounded for reading; "—" when it was not measured (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if name == "cost":
        return dollars(value)
    if name in ("wer", "accuracy"):
        return f"{value:.1%}"
    if name == "tokens":
        return f"{value:,.0f}"
    if name == "fd":
        return significant(value)  # its scale is the extractor's: 288 on efficientnet-lite0, 0.289 on clip-tiny
    return f"{value:.2f}"  # judge, on 1-5


def significant(value: float, figures: int = 3) -> str:
    """``figures`` significant figures, never in E notation: 288, 68.9, 0.512, 1,234."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def knob_text(knob: str, value: Any) -> str:
    if value is None:
        return "—"
    if knob == "trim_silence":
        return "yes" if value else "no"
    if knob == "keep_ratio":
        return f"{float(value):.2f}"
    if knob == "audio_tokens_per_second":
        return f"{float(value):g}"
    return str(value)


def knob_columns(spec: Spec) -> tuple[list[str], dict[str, Any]]:
    """The knobs worth a column (the model, and those that apply to the request and vary in the spec), and those
    that apply but are fixed for the whole run, with their value."""
    columns, fixed = ["model"], {}
    for knob, variable in domains(spec).items():
        if knob == "model" or not knob_applies(spec, knob):
            continue
        options = getattr(variable, "options", None)
        if knob == "image_size" and per_model_sizes(spec):  # each model's own sizes: ranks, never one value
            columns.append(knob)
        elif options is not None and len(options) == 1:
            value = options[0].item() if hasattr(options[0], "item") else options[0]
            unmade = (knob == "keep_ratio" and value == 1.0) or (knob == "trim_silence" and not value)
            if not unmade:  # keeping every token, or the audio as it is, is no setting to make
                fixed[knob] = value
        else:
            columns.append(knob)
    return columns, fixed


def knob_cell(spec: Spec, setting: dict[str, Any], knob: str) -> str:
    """A knob's value in a row; "—" where it does not apply to the row's model."""
    if knob != "model" and not knob_applies(spec, knob, setting["model"]):
        return "—"
    return knob_text(knob, setting.get(knob))


def fixed_text(spec: Spec, fixed: dict[str, Any]) -> str:
    """ "Same in every setting: image px 128, keep 1.00 (mmtok-semantic)." """
    providers = any(m != SELF_HOSTED for m in candidate_models(spec))

    def part(knob: str, value: Any) -> str:
        only = f" ({SELF_HOSTED})" if providers and knob in SELF_HOSTED_KNOBS else ""
        return f"{KNOB_LABELS[knob]} {knob_text(knob, value)}{only}"

    return "Same in every setting: " + ", ".join(part(k, v) for k, v in fixed.items()) + "." if fixed else ""


def recommendations(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """Like the design seed's A/B/C: the cheapest front point, the knee, the cheapest meeting the bars, and the
    best point on each quality objective. A setting that is several of these is one row whose label says all of
    them ("A: cheapest, meets the bars, best wer"); settings are the same when their knobs that apply are (keep
    ratios to 3 decimals, as ``setting_key`` compares them). Rows are lettered A, B, C, ... in order, with no gap
    where a role has no setting (no bars met, no knee)."""
    if not plan.front:
        return []
    picks: list[tuple[str, str, dict[str, Any]]] = [("cheapest", "cheapest", plan.front[0])]
    if plan.knee is not None:
        picks.append(("knee (balanced)", "knee", plan.knee))
    if plan.cheapest_meeting_bars is not None:
        picks.append(("cheapest meeting the bars", "meets the bars", plan.cheapest_meeting_bars))
    for name in (o for o in plan.spec.objectives if o not in ("cost", "tokens")):  # the best on each quality objective
        best = (min if OBJECTIVES[name] == "min" else max)(plan.front, key=lambda e: e["objectives"][name])
        picks.append((f"best {name}", f"best {name}", best))
    rows: dict[str, tuple[list[str], dict[str, Any]]] = {}  # setting key -> (names, entry)
    for name, also, entry in picks:
        key = setting_key(applicable_setting(plan.spec, entry["setting"]))
        if key in rows:
            rows[key][0].append(also)
        else:
            rows[key] = ([name], entry)
    return [(f"{_letter(i)}: {', '.join(names)}", entry) for i, (names, entry) in enumerate(rows.values())]


def _letter(index: int) -> str:
    """A, B, ..., Z, then AA, AB, ... (a spec may have many quality objectives)."""
    return chr(ord("A") + index) if index < 26 else _letter(index // 26 - 1) + chr(ord("A") + index % 26)


def command_for(spec: Spec, entry: dict[str, Any]) -> str:
    """What to run for a setting, for the media the request sends only."""
    s = entry["setting"]
    prices = "".join(f" --prices {p}" for p in spec.prices)
    trim = bool(spec.audio_seconds and s.get("trim_silence"))
    audio = "TRIMMED" if trim else "AUDIO"
    cut = ""
    if trim:  # no WER bar (wer<=1): the cut is always taken, as the plan measured it
        silence = f" --min-silence {spec.min_silence_s:g}" if spec.min_silence_s is not None else ""
        cut = f'mmtok shrink AUDIO -m {s["model"]} --keep "wer<=1"{silence} --out TRIMMED{prices}; '
    if s["model"] == SELF_HOSTED:
        steps = []
        if spec.images:
            keep = float(s["keep_ratio"])
            truncate = f' --truncate mi --keep-ratio {keep:.2f} --context "<question>"' if keep < 1 else ""
            steps.append(f"mmtok tokenize IMAGES --image-size {s['image_size']}{truncate}")
        if spec.audio_seconds:
            rate = knob_text("audio_tokens_per_second", s["audio_tokens_per_second"])
            steps.append(
                f"{cut}mmtok tokenize {audio} --tokens-per-second {rate} --codebook-levels {s['codebook_levels']}"
            )
        return "; ".join(steps) or f"mmtok price TEXT -m {SELF_HOSTED}{prices}"
    media = " ".join(name for name, sent in (("IMAGES", spec.images), (audio, spec.audio_seconds)) if sent)
    resize = f"resize images to {s['image_size']}x{s['image_size']} px; " if spec.images else ""
    return f"{resize}{cut}mmtok price {media or 'TEXT'} -m {s['model']} --detail high{prices}"


def _axis(ax: Any, which: str, name: str) -> None:
    """Label an axis, dollars for cost, at most 5 ticks, rotated on x so that the labels never overlap."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_label_text(LABELS.get(name, name))
    axis.set_major_locator(MaxNLocator(nbins=5))
    if name == "cost":
        axis.set_major_formatter(FuncFormatter(_dollar_tick))
    elif name in ("wer", "accuracy"):
        axis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
    if which == "x":
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")


def _dollar_tick(value: float, _position: int) -> str:
    """$0.0002, $0.0015, $1.5: a tick label as short as its value allows."""
    if value < 0:
        return ""
    text = dollars(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _save_figure(fig: Any, path: Path) -> None:
    """A PNG written as every report file is: atomically (``atomic_path``), never through a link at ``path``."""
    with atomic_path(path) as partial:
        fig.savefig(partial, format="png")


def _figures(plan: Plan, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = plan.spec
    objectives = spec.objectives
    evaluated = plan.evaluated
    figures = []
    for x_name, y_name in itertools.combinations(objectives, 2):
        fig, ax = plt.subplots(figsize=(5.2, 3.8), dpi=110, layout="constrained")
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
        _axis(ax, "x", x_name)
        _axis(ax, "y", y_name)
        ax.legend(fontsize=7)
        name = f"front-{x_name}-{y_name}.png"
        _save_figure(fig, out / name)
        plt.close(fig)
        figures.append((f"{y_name} vs {x_name}", name))
    if len(plan.front) >= 2:  # parallel coordinates of the front, each objective scaled to [0, 1]
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=110, layout="constrained")
        columns = list(objectives)
        values = [[e["objectives"][c] for c in columns] for e in plan.front]
        lows = [min(v[i] for v in values) for i in range(len(columns))]
        highs = [max(v[i] for v in values) for i in range(len(columns))]
        for v in values:
            scaled = [(v[i] - lows[i]) / (highs[i] - lows[i] or 1) for i in range(len(columns))]
            ax.plot(range(len(columns)), scaled, color="#3b6ea8", alpha=0.5)
        ax.set_xticks(range(len(columns)), [LABELS.get(c, c) for c in columns], fontsize=8)
        ax.set_ylabel("scaled to the front's range")
        _save_figure(fig, out / "front-parallel.png")
        plt.close(fig)
        figures.append(("parallel coordinates of the front", "front-parallel.png"))
    if plan.history:
        from matplotlib.ticker import MaxNLocator

        fig, ax = plt.subplots(figsize=(5, 3), dpi=110, layout="constrained")
        ax.plot([h["generation"] for h in plan.history], [h["hypervolume"] for h in plan.history], marker="o")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("generation")
        ax.set_ylabel("hypervolume of the front")
        _save_figure(fig, out / "hypervolume.png")
        plt.close(fig)
        figures.append(("hypervolume per generation", "hypervolume.png"))
    return figures


def request_text(spec: Spec) -> str:
    """ "2 images, 20 s of speech, 200 text tokens in and 200 out" (what is not sent is not mentioned)."""
    parts = []
    if spec.images:
        parts.append(f"{spec.images} image{'s' if spec.images > 1 else ''}")
    if spec.audio_seconds:
        parts.append(f"{spec.audio_seconds:g} s of speech")
    parts.append(f"{spec.text_tokens} text tokens in and {spec.output_tokens} out")
    return ", ".join(parts)


def bars_text(spec: Spec) -> str:
    return ", ".join(f"{k} {'<=' if OBJECTIVES[k] == 'min' else '>='} {v:g}" for k, v in spec.bars.items())


def write_report(plan: Plan, out: str | Path) -> dict[str, Path]:
    """report.md and report.html (with their figures), front.csv and front.json in ``out``, each written
    atomically (a full disk leaves the old file or none, never a 0-byte one; a link at a name is replaced, never
    written through)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = _figures(plan, out)
    _write_front_csv(plan, out / "front.csv")
    write_atomic(out / "front.json", json.dumps(plan.to_dict(), indent=2, default=str) + "\n")
    lines = [
        *_summary_lines(plan),
        *_recommendation_lines(plan),
        *_failure_lines(plan),
        *_front_lines(plan, figures),
        "## How the objectives were measured",
        "",
        *_measured(plan.spec, plan.silence_trim),
        "",
    ]
    md = write_atomic(out / "report.md", "\n".join(lines))
    page = write_atomic(out / "report.html", _markdown_to_html("\n".join(lines)))
    return {"md": md, "html": page, "csv": out / "front.csv", "json": out / "front.json"}


def _write_front_csv(plan: Plan, path: Path) -> None:
    spec = plan.spec
    columns, fixed = knob_columns(spec)
    knobs = [*columns, *fixed]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, list(dict.fromkeys([*knobs, *spec.objectives, "tokens", "meets_bars"])))
    writer.writeheader()
    for e in plan.front:
        shown = applicable_setting(spec, e["setting"])
        writer.writerow(
            {
                **{k: shown.get(k, "") for k in knobs},
                **{o: e["objectives"].get(o) for o in [*spec.objectives, "tokens"]},
                "meets_bars": meets_bars(spec, e["objectives"]),
            }
        )
    write_atomic(path, text.getvalue())


def _summary_lines(plan: Plan) -> list[str]:
    spec = plan.spec
    lines = [
        f"# Token budget plan: {spec.name}",
        "",
        f"Request: {request_text(spec)}; budget {spec.budget_tokens:,} tokens. NSGA-II (pymoo), population "
        f"{plan.population} × {plan.generations} generation{'s' if plan.generations != 1 else ''}, "
        f"{plan.evaluations} settings evaluated ({plan.measurements} new measurements, the rest from the cache).",
        "",
        "Objectives: "
        + ", ".join(f"{o} ({'min' if o in spec.minimize else 'max'})" for o in spec.objectives)
        + (f". Bars: {bars_text(spec)}" if spec.bars else "")
        + ".",
        "",
    ]
    return lines + ([f"**Note:** {plan.shortfall}", ""] if plan.shortfall else [])


def _recommendation_lines(plan: Plan) -> list[str]:
    spec = plan.spec
    columns, fixed = knob_columns(spec)
    recs = recommendations(plan)
    shown_objectives = list(dict.fromkeys([*spec.objectives, "tokens"]))
    lines = [
        "## Recommended configurations",
        "",
        "| | " + " | ".join(KNOB_LABELS[k] for k in columns) + " | " + " | ".join(shown_objectives) + " |",
        "|---|" + "".join("---|" if k == "model" else "---:|" for k in columns) + "---:|" * len(shown_objectives),
    ]
    for label, e in recs:
        lines.append(
            f"| {label} | "
            + " | ".join(knob_cell(spec, e["setting"], k) for k in columns)
            + " | "
            + " | ".join(objective_text(name, e["objectives"].get(name)) for name in shown_objectives)
            + " |"
        )
    if not recs:
        lines.append("| (no feasible setting) |" + " |" * (len(columns) + len(shown_objectives)))
    if fixed:
        lines += ["", fixed_text(spec, fixed)]
    return lines + ["", "To reproduce each:", ""] + [f"- {label}: `{command_for(spec, e)}`" for label, e in recs]


def _failure_lines(plan: Plan) -> list[str]:
    if not plan.failed:
        return []
    by_error: dict[str, int] = {}
    for failure in plan.failed:
        by_error[failure["error"]] = by_error.get(failure["error"], 0) + 1
    lines = ["", "## Settings that could not be measured", ""]
    lines += [f"- {count} setting{'s' if count > 1 else ''}: {error}" for error, count in by_error.items()]
    return [*lines, "", "They are listed in front.json (`failed`) and were left out of the search."]


def _front_lines(plan: Plan, figures: list[tuple[str, str]]) -> list[str]:
    lines = [
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
            f"{o} {_reference_text(o, v)}" for o, v in zip(plan.spec.objectives, plan.reference_point, strict=True)
        )
        lines += [
            f"Hypervolume per generation is measured against one reference point for the whole run ({point}), "
            "fixed after the first generation at 10% of the range beyond the worst value of each objective among "
            "the settings evaluated so far; a point beyond it adds nothing.",
            "",
        ]
    return lines


def _reference_text(name: str, value: float) -> str:
    """A reference-point coordinate; maximised objectives are negated for pymoo, shown here as they are."""
    return objective_text(name, -value if OBJECTIVES[name] == "max" else value)


def _measured(spec: Spec, silence_trim: dict[str, Any] | None = None) -> list[str]:
    """How each objective of this spec was measured (and only those), and the silence cut where it was tried."""
    wanted = set(spec.objectives) | set(spec.bars)
    trims = knob_applies(spec, "trim_silence") and True in (
        v.item() if hasattr(v, "item") else v for v in domains(spec)["trim_silence"].options
    )
    sheets = f" and yours ({', '.join(str(p) for p in spec.prices)}: its rows override)" if spec.prices else ""
    lines = [f"- cost and tokens: `mmtok.price` on the shipped price sheets (dated, sourced){sheets}, per request;"]
    sets = calibration_sets(spec)
    if "fd" in wanted:
        fid_or_not = "FID" if "inception" in spec.fd_extractor else "FD, not FID"
        lines.append(
            f"- fd: Fréchet distance on {spec.fd_extractor} features ({fid_or_not}) between {sets['photos']} and "
            "what the model receives (mmtok: the VQ reconstruction at the image size; providers: the photo resized "
            "to it), both resized to 256 px;"
        )
    if "wer" in wanted:
        from mmtok.eval.asr import get_asr

        lines.append(
            f"- wer: corpus WER of {sets['speech']} by {get_asr(spec.asr).name}, on the speech the model receives "
            "(mmtok: reconstructed from tokens; providers: the original"
            + ("; with trim silence, of the speech after the silence cut" if trims else "")
            + ");"
        )
    if trims:
        kept = ""
        if silence_trim is not None:
            kept = (
                f": on {sets['speech']} it kept {silence_trim['seconds_after']:.1f} of "
                f"{silence_trim['seconds_before']:.1f} s ({silence_trim['kept']:.1%})"
            )
        cut = silence_trim["cut"] if silence_trim else "its default cut"
        lines.append(
            f"- trim silence: mmtok shrink's silence cut (Silero VAD; {cut}){kept}; a trimmed setting bills the "
            f"request's {spec.audio_seconds:g} s of audio times the fraction kept;"
        )
    if {"accuracy", "judge"} & wanted:
        lines.append(
            f"- accuracy{' / judge' if 'judge' in wanted else ''}: the MoE backbone answering which digit is written, "
            f"on {spec.calibration_qa} held-out digits-on-photos drawn at the setting's image size ((size / 8)^2 "
            "tokens), from MI-truncated visual tokens"
            + ("; judge = mmtok's offline LLM judge." if "judge" in wanted else ".")
        )
    return lines


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
