"""The ledger as a report: spend per day and model, shrink savings, and mmtok's predictions against the bills per
model and modality (error distribution and worst cases); as a dict (``--json``), CSV rows (``--csv``), or an HTML
page with figures (``--html DIR``).

Errors are ``billed - predicted`` (positive: the bill was higher) and relative to the bill. Input tokens are
compared on every call whose response reported usage; a modality only where the provider itemises it (Gemini's
``promptTokensDetails``, OpenAI's audio tokens).

Spend is also grouped by key (its fingerprint), model, day or a tag's value (:func:`groups`, ``ledger --by``).

CSV cells are made safe to open: control and bidirectional-override characters and line ends are written as
visible escapes (``\x1b``, ``\u202e``, ``\n``), and a text cell that starts with ``=``, ``+``, ``-`` or ``@`` gets a
leading ``'`` so that a spreadsheet shows it as text instead of running it as a formula (OWASP, CSV Injection,
https://owasp.org/www-community/attacks/CSV_Injection, and ASVS 5.0 requirement 1.2.10; read 2026-12-05).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets.ledger.records import Record

CSV_FIELDS = (
    "id",
    "time",
    "provider",
    "api",
    "model",
    "status",
    "outcome",
    "stream",
    "latency_ms",
    "upstream_ms",
    "images",
    "predicted_input",
    "billed_input",
    "billed_output",
    "predicted_cost",
    "billed_cost",
    "saved_cost",
    "predicted_label",
    "key_fingerprint",
    "tags",
    "flags",
    "message",
)
WORST_CASES = 5
FORMULA_START = ("=", "+", "-", "@")
GROUPINGS = ("key", "model", "day")  # and tag:NAME
_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def _images(record: Record) -> str:
    return ";".join(f"{p['w']}x{p['h']}" for p in record.parts if p.get("kind") == "image" and "w" in p)


def visible(text: str) -> str:
    """``text`` with control, bidirectional-override and zero-width characters, and line ends, as escapes."""
    return _INVISIBLE.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def csv_cell(value: Any) -> Any:
    """A cell safe to open in a spreadsheet (see the module's docstring); numbers pass as they are."""
    if not isinstance(value, str):
        return value
    text = visible(unicodedata.normalize("NFC", value))
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_row(record: Record) -> dict[str, Any]:
    row = {name: getattr(record, name, None) for name in CSV_FIELDS if name != "images"}
    row["images"] = _images(record)
    row["tags"] = ";".join(f"{k}={v}" for k, v in record.tags.items())
    row["flags"] = "; ".join(record.flags)
    for name in ("latency_ms", "upstream_ms"):
        row[name] = None if row[name] is None else round(row[name], 2)
    for name in ("predicted_cost", "billed_cost", "saved_cost"):
        row[name] = None if row[name] is None else str(row[name])  # a decimal amount, never a formula
    return {k: v if k in ("predicted_cost", "billed_cost", "saved_cost") else csv_cell(v) for k, v in row.items()}


def write_csv(records: Iterable[Record], out: Any) -> int:
    writer = csv.DictWriter(out, list(CSV_FIELDS), extrasaction="ignore")
    writer.writeheader()
    count = 0
    for record in records:
        writer.writerow(csv_row(record))
        count += 1
    return count


def write_rows_csv(rows: Sequence[dict[str, Any]], fields: Sequence[str], out: Any) -> None:
    """Plain dicts (a grouping's rows) as safe CSV."""
    writer = csv.DictWriter(out, list(fields), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(v) for k, v in row.items()})


def group_of(record: Record, by: str) -> str | None:
    """The group ``record`` falls in when grouped ``by`` key, model, day or tag:NAME (None: it has no such tag)."""
    if by == "key":
        return record.key_fingerprint or "(no key)"
    if by == "model":
        return record.model or "?"
    if by == "day":
        return record.day
    return record.tags.get(by[4:], "(untagged)")


def check_grouping(by: str) -> str:
    """``by`` if it names a grouping, else a ValueError saying which do."""
    if by in GROUPINGS or (by.startswith("tag:") and len(by) > 4):
        return by
    raise ValueError(f"expected key, model, day or tag:NAME, got {by!r}")


def _zero_counts() -> dict[str, Any]:
    return {"calls": 0, "refused": 0, "spend": Decimal(0), "billed": Decimal(0), "predicted": Decimal(0),
            "saved": Decimal(0)}  # fmt: skip


def _count(row: dict[str, Any], r: Record) -> None:
    """``r`` added to a group's counts: a refused call's prediction is not counted (it was never sent)."""
    row["calls"] += 1
    row["refused"] += r.outcome == "refused"
    row["spend"] += r.spend
    row["billed"] += r.billed_cost or 0
    if r.outcome != "refused":
        row["predicted"] += r.predicted_cost or 0
    row["saved"] += r.saved_cost or 0


def groups(records: Sequence[Record], by: str) -> list[dict[str, Any]]:
    """Calls, refusals, spend, billed and predicted cost and savings per group (most spent first)."""
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        name = group_of(r, by)
        _count(table.setdefault(name, {"group": name, **_zero_counts()}), r)
    ordered = sorted(table.values(), key=lambda row: (-row["spend"], row["group"]))
    return [{k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()} for row in ordered]


def _comparisons(record: Record) -> list[tuple[str, int, int]]:
    """(modality, predicted, billed) pairs a call allows."""
    if record.billed_input is None or record.predicted_input is None:
        return []
    pairs = [("input", record.predicted_input, record.billed_input)]
    itemised = (record.billed or {}).get("input_by_modality") or {}
    for modality, billed in itemised.items():
        predicted = record.predicted.get(modality, 0)
        if modality == "text":
            predicted += record.predicted.get("overhead", 0)
        if predicted or billed:
            pairs.append((modality, predicted, billed))
    return pairs


def accuracy(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Predicted against billed tokens, per model and modality."""
    groups: dict[tuple[str, str], list[tuple[Record, int, int]]] = {}
    for record in records:
        for modality, predicted, billed in _comparisons(record):
            groups.setdefault((record.model or "?", modality), []).append((record, predicted, billed))
    rows = []
    for (model, modality), items in sorted(groups.items()):
        errors = [billed - predicted for _, predicted, billed in items]
        relative = [(b - p) / b for _, p, b in items if b]
        worst = sorted(items, key=lambda item: -abs(item[2] - item[1]))[:WORST_CASES]
        rows.append(
            {
                "model": model,
                "modality": modality,
                "calls": len(items),
                "predicted": sum(p for _, p, _ in items),
                "billed": sum(b for _, _, b in items),
                "exact": sum(e == 0 for e in errors),
                "mean_error": round(statistics.fmean(errors), 2),
                "median_relative_error": round(statistics.median(relative), 4) if relative else None,
                "max_abs_relative_error": round(max(abs(r) for r in relative), 4) if relative else None,
                "worst": [
                    {"id": r.id, "time": r.time, "images": _images(r), "predicted": p, "billed": b}
                    for r, p, b in worst
                    if b != p
                ],
            }
        )
    return rows


def spend(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Calls, billed and predicted cost and shrink savings per UTC day and model."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        model = r.model or "?"
        _count(table.setdefault((r.day, model), {"day": r.day, "model": model, **_zero_counts()}), r)
    return [{k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()} for _, row in sorted(table.items())]


def summarise(
    records: Iterable[Record], where: str = "", skipped: Sequence[Any] = (), by: Sequence[str] = ()
) -> dict[str, Any]:
    """The whole report as plain data: ``skipped`` the malformed rows passed over (:class:`BadRow`), ``by`` the
    groupings to add (key, model, day, tag:NAME; the HTML report adds key and each tag found)."""
    rows = list(records)
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    latencies = sorted(r.latency_ms for r in rows if r.latency_ms is not None)
    return {
        "ledger": where,
        "calls": len(rows),
        "outcomes": outcomes,
        "first": rows[0].time if rows else None,
        "last": rows[-1].time if rows else None,
        "spend_usd": str(sum((r.spend for r in rows), Decimal(0))),
        "saved_usd": str(sum((r.saved_cost or Decimal(0) for r in rows), Decimal(0))),
        "shrunk_calls": sum(r.shrink is not None for r in rows),
        "latency_ms_median": round(statistics.median(latencies), 2) if latencies else None,
        "spend": spend(rows),
        "accuracy": accuracy(rows),
        "by": {name: groups(rows, name) for name in by},
        "flagged": [{"id": r.id, "flags": r.flags} for r in rows if r.flags],
        "skipped": [{"id": b.id, "column": b.column, "problem": b.problem} for b in skipped],
    }


# ------------------------------------------------------------------------------------------------------ html
# The page and its figures. Charts follow what the ledger holds: spend per day as stacked bars only over two days or
# more (one day: spend per model), predicted against billed with the parity line named, and each call's error in
# percent of its bill. Every figure is a 110-dpi PNG whose smallest text is 9 pt (13.75 px at natural size).
FIGURE_FONT_PT = 9.0
PAGE_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;padding:0 1em;color:#222;"
    "line-height:1.45}table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;"
    "padding:3px 6px;font-size:14px}th{background:#f3f3f3;text-align:left}td.n{text-align:right;"
    "font-variant-numeric:tabular-nums}td:first-child{white-space:nowrap}figure{margin:1em 0}"
    "figcaption{font-size:14px;color:#555}img{max-width:100%;height:auto}td.id{font:12px monospace}"
    "td.t{white-space:nowrap}"
)


def write_html(records: Iterable[Record], out: str | Path, where: str = "", skipped: Sequence[Any] = ()) -> Path:
    """``index.html`` with figures (spend, predicted against billed, each call's error) and spend by key and by each
    tag the calls carry, plus ``calls.csv`` and ``summary.json`` beside it, in the folder ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    rows = list(records)
    tag_names = sorted({name for r in rows for name in r.tags})
    summary = summarise(rows, where, skipped, by=("key", *(f"tag:{name}" for name in tag_names)))
    (folder / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    with open(folder / "calls.csv", "w", newline="", encoding="utf-8") as f:
        write_csv(rows, f)
    figures = _figures(rows, folder)
    page = folder / "index.html"
    page.write_text(_page(summary, figures), encoding="utf-8")
    return page


def _figures(rows: Sequence[Record], folder: Path) -> dict[str, tuple[str, str]]:
    """The figures the data allows, by section ("spend", "accuracy", "errors"): (file name, caption)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = {}
    with plt.rc_context({"font.size": FIGURE_FONT_PT + 1, "legend.fontsize": FIGURE_FONT_PT,
                         "xtick.labelsize": FIGURE_FONT_PT, "ytick.labelsize": FIGURE_FONT_PT}):  # fmt: skip
        spend_by_day: dict[str, dict[str, float]] = {}
        for r in rows:
            day = spend_by_day.setdefault(r.day, {})
            day[r.model or "?"] = day.get(r.model or "?", 0.0) + float(r.spend)
        if any(v for day in spend_by_day.values() for v in day.values()):
            made["spend"] = _spend_figure(spend_by_day, folder)
        pairs = [(r.model or "?", p, b) for r in rows for m, p, b in _comparisons(r) if m == "input"]
        if pairs:
            made["accuracy"] = _parity_figure(pairs, folder)
            if any(b for _, _, b in pairs):
                made["errors"] = _error_figure(pairs, folder)
    return made


def _spend_figure(spend_by_day: dict[str, dict[str, float]], folder: Path) -> tuple[str, str]:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    days = sorted(spend_by_day)
    models = sorted({m for day in spend_by_day.values() for m in day})
    dollars = FuncFormatter(lambda v, _: f"${v:,.4g}")
    if len(days) == 1:  # one day: one bar per model, no day axis
        totals = sorted(((spend_by_day[days[0]].get(m, 0.0), m) for m in models), reverse=True)
        fig, ax = plt.subplots(figsize=(7, 0.9 + 0.45 * len(models)))
        bars = ax.barh([m for _, m in totals], [v for v, _ in totals], color="#3b6ea8")
        ax.bar_label(bars, labels=[_usd_text(v) for v, _ in totals], padding=4)
        ax.invert_yaxis()
        ax.set_xlim(0, max(v for v, _ in totals) * 1.25)
        ax.xaxis.set_major_formatter(dollars)
        ax.set_xlabel("spend (USD)")
        title, caption = f"Spend by model on {days[0]} (UTC)", f"Spend by model on {days[0]}, the ledger's one day"
    else:  # stacked bars per day, a colour per model, the legend beside the plot
        fig, ax = plt.subplots(figsize=(8, 3.8))
        bottom = [0.0] * len(days)
        for model in models:
            values = [spend_by_day[d].get(model, 0.0) for d in days]
            ax.bar(days, values, bottom=bottom, label=model)
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
        ax.yaxis.set_major_formatter(dollars)
        ax.set_ylabel("spend (USD)")
        ax.set_xlabel("day (UTC)")
        ax.tick_params(axis="x", labelrotation=30 if len(days) > 4 else 0)
        ax.legend(title="model", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
        title, caption = "Spend per day (UTC), by model", "Spend per day, stacked by model"
    return _save(fig, ax, title, folder / "spend.png"), caption


def _parity_figure(pairs: list[tuple[str, int, int]], folder: Path) -> tuple[str, str]:
    """Billed against predicted input tokens, a point per call and a colour per model, with the line where they
    are equal; on log axes when the calls span more than two orders of magnitude."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 5))
    for model in sorted({m for m, _, _ in pairs}):
        ax.scatter([p for m, p, _ in pairs if m == model], [b for m, _, b in pairs if m == model], s=22,
                   alpha=0.8, label=model)  # fmt: skip
    values = [v for _, p, b in pairs for v in (p, b)]
    low, top = min(values), max(values) or 1
    if low > 0 and top / low > 100:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ends = [low / 1.5, top * 1.5]
    else:
        ends = [0, top * 1.05]
    ax.plot(ends, ends, color="grey", linewidth=1, linestyle="--", label="billed = predicted", zorder=0)
    ax.set_xlim(*ends)
    ax.set_ylim(*ends)
    ax.set_xlabel("predicted input tokens")
    ax.set_ylabel("billed input tokens")
    ax.legend(title="model", loc="upper left")
    caption = "Billed against predicted input tokens, one point per call: above the dashed line the bill was higher"
    return _save(fig, ax, "Predicted against billed input tokens", folder / "accuracy.png"), caption


def _error_figure(pairs: list[tuple[str, int, int]], folder: Path) -> tuple[str, str]:
    """Each call's error in percent of its bill, a row per model, with the line of an exact prediction."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    models = sorted({m for m, _, b in pairs if b})
    fig, ax = plt.subplots(figsize=(7, 1.3 + 0.5 * len(models)))
    for row, model in enumerate(models):
        errors = [100 * (b - p) / b for m, p, b in pairs if m == model and b]
        offsets = [row + 0.25 * ((i % 5) - 2) / 2 for i in range(len(errors))]  # spread equal values apart
        ax.scatter(errors, offsets, s=22, alpha=0.7, color=f"C{row}")
    ax.axvline(0, color="grey", linewidth=1, linestyle="--", label="exact (billed = predicted)")
    ax.legend(loc="lower left")
    ax.set_yticks(range(len(models)), models)
    ax.set_ylim(len(models) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(PercentFormatter(decimals=0))
    ax.set_xlabel("error: (billed - predicted) / billed, per call")
    caption = "Each call's error in percent of its bill: right of the line the bill was higher than predicted"
    return _save(fig, ax, "Error of the prediction per call", folder / "errors.png"), caption


def _save(fig: Any, ax: Any, title: str, path: Path) -> str:
    """A figure finished as every report figure is (its title, a tight layout), written as a 110-dpi PNG that
    records its smallest text (mmtok.figures.save_png) and closed; its file name."""
    import matplotlib.pyplot as plt

    from mmtok.figures import save_png

    ax.set_title(title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return path.name


def _usd_text(value: float | Decimal | str | None) -> str:
    """Dollars to three significant figures, at least cents: $0.0570, $0.00316, $1.50, $0."""
    if value is None or value == "":
        return ""
    amount = float(value)
    if amount == 0:
        return "$0"
    decimals = max(2, 2 - math.floor(math.log10(abs(amount))))
    return f"${amount:,.{decimals}f}"


def _time_text(stamp: str | None) -> str:
    """An ISO time as a person reads it, to the second: 2026-12-02 06:56:41."""
    return (stamp or "")[:19].replace("T", " ")


def _percent_text(value: float | None) -> str:
    """A fraction as a signed percent, as the command line shows it: -275.0%, +10.8%."""
    return "" if value is None else f"{value:+.1%}"


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], classes: dict[str, str]) -> str:
    """An HTML table of ``rows`` under plain headings: ``columns`` are (key, heading) pairs, ``classes`` a cell class
    by key (n: a number, right-aligned; t: a time, never broken; id: an id in a small monospace)."""
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    cells = [(key, f" class={classes[key]}" if key in classes else "") for key, _ in columns]
    body = "".join(
        "<tr>" + "".join(f"<td{c}>{html.escape(str(row.get(key, '')))}</td>" for key, c in cells) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure_html(figure: tuple[str, str] | None) -> str:
    if figure is None:
        return ""
    name, caption = figure
    escaped = html.escape(caption)
    return f"<figure><img src='{name}' alt='{escaped}'><figcaption>{escaped}</figcaption></figure>"


def _money_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with their amounts (spend, predicted, saved) in dollars to three significant figures."""
    return [{**r, **{k: _usd_text(r[k]) for k in ("spend", "predicted", "saved")}} for r in rows]


def _spend_rows(summary: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The spend table's rows and columns; the day column only when the ledger holds more than one day."""
    rows = _money_rows(summary["spend"])
    columns = [("model", "model"), ("calls", "calls"), ("refused", "refused"), ("spend", "spend"),
               ("predicted", "predicted cost"), ("saved", "saved by shrink")]  # fmt: skip
    if len({s["day"] for s in summary["spend"]}) > 1:
        columns.insert(0, ("day", "day (UTC)"))
    return rows, columns


def _accuracy_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **a,
            "predicted": f"{a['predicted']:,}",
            "billed": f"{a['billed']:,}",
            "mean_error": f"{a['mean_error']:+,.1f}",
            "median_relative_error": _percent_text(a["median_relative_error"]),
            "max_abs_relative_error": ""
            if a["max_abs_relative_error"] is None
            else f"{a['max_abs_relative_error']:.1%}",
        }
        for a in summary["accuracy"]
    ]


def _worst_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every model's worst calls, each with its error in tokens and in percent of its bill; the time of day only
    when the whole ledger is one day (the page names it)."""
    one_day = len({s["day"] for s in summary["spend"]}) == 1
    rows = []
    for a in summary["accuracy"]:
        for w in a["worst"]:
            error = w["billed"] - w["predicted"]
            relative = _percent_text(error / w["billed"]) if w["billed"] else ""
            rows.append({**w, "model": a["model"], "modality": a["modality"], "error": f"{error:+,}",
                         "relative": relative, "time": _time_text(w["time"])[11 if one_day else 0 :],
                         "predicted": f"{w['predicted']:,}", "billed": f"{w['billed']:,}"})  # fmt: skip
    return rows


ACCURACY_COLUMNS = (
    ("model", "model"),
    ("modality", "tokens"),
    ("calls", "calls"),
    ("exact", "exact"),
    ("predicted", "predicted"),
    ("billed", "billed"),
    ("mean_error", "mean error (tokens)"),
    ("median_relative_error", "median error"),
    ("max_abs_relative_error", "largest error"),
)
WORST_COLUMNS = (
    ("model", "model"),
    ("modality", "tokens"),
    ("time", "time (UTC)"),
    ("images", "images (px)"),
    ("predicted", "predicted"),
    ("billed", "billed"),
    ("error", "error (tokens)"),
    ("relative", "error"),
    ("id", "call id"),
)


def _page(summary: dict[str, Any], figures: dict[str, tuple[str, str]]) -> str:
    out = io.StringIO()
    out.write(f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>mmtok ledger</title>"
              f"<link rel='icon' href='data:,'><style>{PAGE_STYLE}</style></head><body>")  # fmt: skip
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(summary["outcomes"].items())) or "none"
    span = f"{_time_text(summary['first'])} to {_time_text(summary['last'])} UTC"
    out.write(
        f"<h1>mmtok ledger</h1><p>{html.escape(summary['ledger'])}: {summary['calls']} calls ({html.escape(outcomes)}),"
        f" {html.escape(span)}. Spend {_usd_text(summary['spend_usd'])}, saved by shrink "
        f"{_usd_text(summary['saved_usd'])}. Data: <a href='calls.csv'>calls.csv</a> (one row per call), "
        "<a href='summary.json'>summary.json</a> (this page as data).</p>"
    )
    out.write("<h2>Spend</h2>" + _figure_html(figures.get("spend")))
    rows, columns = _spend_rows(summary)
    money = {k: "n" for k in ("calls", "refused", "spend", "predicted", "saved")}
    out.write(_table(rows, columns, money))
    for name, found in summary["by"].items():
        title = "key (fingerprint)" if name == "key" else f"tag {name[4:]}"
        out.write(f"<h3>Spend by {html.escape(title)}</h3>")
        out.write(_table(_money_rows(found), [("group", title), *columns[-5:]], money))
    out.write(
        "<h2>Predicted against billed</h2><p>Error is billed minus predicted tokens: positive when the bill was "
        "higher. Median and largest error are in percent of the bill, per call (the largest by its size, either "
        "way); <i>exact</i> counts the calls predicted to the token. Input tokens are compared on every call that "
        "reported usage, a modality only where the provider itemises it.</p>"
    )
    out.write(_figure_html(figures.get("accuracy")) + _figure_html(figures.get("errors")))
    numbers = {key: "n" for key, _ in ACCURACY_COLUMNS[2:]}
    out.write(_table(_accuracy_rows(summary), ACCURACY_COLUMNS, numbers))
    worst = _worst_rows(summary)
    if worst:
        out.write(f"<h2>Worst cases</h2><p>Up to {WORST_CASES} calls per model and kind of token, largest error "
                  "first.</p>")  # fmt: skip
        classes = {"time": "t", "id": "id", **{k: "n" for k in ("predicted", "billed", "error", "relative")}}
        out.write(_table(worst, WORST_COLUMNS, classes))
    out.write("</body></html>")
    return out.getvalue()
