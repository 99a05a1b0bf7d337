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
)
from mmtok.files import write_atomic

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
    them ("A: cheapest, meets the bars, best wer"); settings are the same when the table shows them the same
    (``shown_key``). Rows are lettered A, B, C, ... in order, with no gap
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
    rows: dict[tuple[str, ...], tuple[list[str], dict[str, Any]]] = {}  # the setting as shown -> (names, entry)
    for name, also, entry in picks:
        key = shown_key(plan.spec, entry)
        if key in rows:
            rows[key][0].append(also)
        else:
            rows[key] = ([name], entry)
    return [(f"{_letter(i)}: {', '.join(names)}", entry) for i, (names, entry) in enumerate(rows.values())]


def shown_key(spec: Spec, entry: dict[str, Any]) -> tuple[str, ...]:
    """A setting as the report's tables show it: its knob columns, rounded for reading (keep 0.502 and 0.504 are
    both "0.50"). Two front settings with the same key are one row."""
    columns, fixed = knob_columns(spec)
    return tuple(knob_cell(spec, entry["setting"], k) for k in [*columns, *fixed])


def shown_front(plan: Plan) -> list[dict[str, Any]]:
    """The Pareto front with each setting once as the report shows it: of settings that read the same (knobs that
    differ beyond the shown rounding, or not at all where they do not apply), the first in the front's order (the
    cheapest; the better one at equal cost) is kept."""
    kept: dict[tuple[str, ...], dict[str, Any]] = {}
    for entry in plan.front:
        kept.setdefault(shown_key(plan.spec, entry), entry)
    return list(kept.values())


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


def _dollar_tick(value: float, _position: int) -> str:
    """$0.0002, $0.0015, $1.5: a tick label as short as its value allows."""
    if value < 0:
        return ""
    text = dollars(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


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
    from mmtok.budgets.planner.report_figures import figures as draw_figures

    figures = draw_figures(plan, out)
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
    for e in shown_front(plan):
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


def _setting_table(spec: Spec, rows: list[tuple[str, dict[str, Any]]], first: str = "") -> list[str]:
    """A Markdown table of settings, one row per (label, entry): the knob columns, then the objectives and tokens."""
    columns, _ = knob_columns(spec)
    shown_objectives = list(dict.fromkeys([*spec.objectives, "tokens"]))
    lines = [
        f"| {first} | " + " | ".join(KNOB_LABELS[k] for k in columns) + " | " + " | ".join(shown_objectives) + " |",
        "|---|" + "".join("---|" if k == "model" else "---:|" for k in columns) + "---:|" * len(shown_objectives),
    ]
    for label, e in rows:
        lines.append(
            f"| {label} | "
            + " | ".join(knob_cell(spec, e["setting"], k) for k in columns)
            + " | "
            + " | ".join(objective_text(name, e["objectives"].get(name)) for name in shown_objectives)
            + " |"
        )
    if not rows:
        lines.append("| (no feasible setting) |" + " |" * (len(columns) + len(shown_objectives)))
    return lines


def _recommendation_lines(plan: Plan) -> list[str]:
    spec = plan.spec
    _, fixed = knob_columns(spec)
    recs = recommendations(plan)
    lines = ["## Recommended configurations", "", *_setting_table(spec, recs)]
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
    """The front as a table (each setting once, lettered where it is recommended), its files, and the figures."""
    front = shown_front(plan)
    letters = {shown_key(plan.spec, e): label.split(":")[0] for label, e in recommendations(plan)}
    count = f"{len(front)} non-dominated feasible setting{'s' if len(front) != 1 else ''}"
    lines = [
        "",
        "## Pareto front",
        "",
        f"{count}, each listed once, cheapest first; the letters are the recommended ones above. The same as data: "
        "[front.csv](front.csv) (these rows, values unrounded) and [front.json](front.json) (the whole plan).",
        "",
        *_setting_table(plan.spec, [(letters.get(shown_key(plan.spec, e), ""), e) for e in front]),
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


PAGE_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222;"
    "line-height:1.45}table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 6px;"
    "font-size:14px}th{background:#f3f3f3}td:first-child,th:first-child{white-space:nowrap}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%;height:auto}"
    "figure{margin:1em 0}figcaption{font-size:14px;color:#555}code{font-size:13px}"
)


def _markdown_to_html(text: str) -> str:
    """The small subset of Markdown the report uses: headings, tables (a header row, right-aligned numbers), images
    as figures, lists, links, code and paragraphs."""
    import re

    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>mmtok plan</title>"
        f"<link rel='icon' href='data:,'><style>{PAGE_STYLE}</style></head><body>"
    ]
    table: list[list[str]] = []
    in_list = False
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip("|").split("|")])
            continue
        if table:
            out.append(_table_html(table))
            table = []
        if in_list and not line.startswith("- "):
            out.append("</ul>")
            in_list = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line.lstrip('# '))}</h{level}>")
        elif m := re.match(r"!\[(.*)\]\((.*)\)", line):
            alt, src = html.escape(m.group(1)), html.escape(m.group(2))
            out.append(f"<figure><img src='{src}' alt='{alt}'><figcaption>{alt}</figcaption></figure>")
        elif line.startswith("- "):
            out.append(("" if in_list else "<ul>") + f"<li>{_inline(line[2:])}</li>")
            in_list = True
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join([*out, "</body></html>"])


def _table_html(rows: list[list[str]]) -> str:
    """A Markdown table as HTML: its first row as the header, its alignment row read for right-aligned columns."""
    head, rest = rows[0], rows[1:]
    right: set[int] = set()
    if rest and set("".join(rest[0])) <= set("-:"):
        right = {i for i, cell in enumerate(rest[0]) if cell.endswith(":")}
        rest = rest[1:]
    lines = ["<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"]
    for row in rest:
        cells = "".join(f"<td{' class=n' if i in right else ''}>{_inline(c)}</td>" for i, c in enumerate(row))
        lines.append(f"<tr>{cells}</tr>")
    return "\n".join([*lines, "</tbody></table>"])


def _inline(text: str) -> str:
    import re

    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]*)`", r"<code>\1</code>", escaped)
    escaped = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r"<a href='\2'>\1</a>", escaped)
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", escaped)
