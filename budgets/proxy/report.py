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
import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmtok.budgets.ledger import Record

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


def groups(records: Sequence[Record], by: str) -> list[dict[str, Any]]:
    """Calls, refusals, spend, billed and predicted cost and savings per group (most spent first)."""
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        name = group_of(r, by)
        row = table.setdefault(name, {"group": name, "calls": 0, "refused": 0, "spend": Decimal(0),
                                      "billed": Decimal(0), "predicted": Decimal(0), "saved": Decimal(0)})  # fmt: skip
        row["calls"] += 1
        row["refused"] += r.outcome == "refused"
        row["spend"] += r.spend
        row["billed"] += r.billed_cost or 0
        if r.outcome != "refused":
            row["predicted"] += r.predicted_cost or 0
        row["saved"] += r.saved_cost or 0
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
        row = table.setdefault(
            (r.day, r.model or "?"),
            {
                "day": r.day,
                "model": r.model or "?",
                "calls": 0,
                "refused": 0,
                "spend": Decimal(0),
                "billed": Decimal(0),
                "predicted": Decimal(0),
                "saved": Decimal(0),
            },
        )
        row["calls"] += 1
        row["refused"] += r.outcome == "refused"
        row["spend"] += r.spend
        row["billed"] += r.billed_cost or 0
        if r.outcome != "refused":
            row["predicted"] += r.predicted_cost or 0
        row["saved"] += r.saved_cost or 0
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
def write_html(records: Iterable[Record], out: str | Path, where: str = "", skipped: Sequence[Any] = ()) -> Path:
    """``index.html`` with figures (spend per day, predicted against billed) and spend by key and by each tag the
    calls carry, plus ``calls.csv`` and ``summary.json`` beside it, in the folder ``out``."""
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


def _figures(rows: Sequence[Record], folder: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    days: dict[str, dict[str, float]] = {}
    for r in rows:
        days.setdefault(r.day, {}).setdefault(r.model or "?", 0.0)
        days[r.day][r.model or "?"] += float(r.spend)
    if days:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        models = sorted({m for d in days.values() for m in d})
        bottom = [0.0] * len(days)
        for model in models:
            values = [days[d].get(model, 0.0) for d in sorted(days)]
            ax.bar(sorted(days), values, bottom=bottom, label=model)
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
        ax.set_ylabel("USD")
        _save(fig, ax, "Spend per day (UTC)", folder / "spend.png")
        made.append(("spend.png", "Spend per day and model"))
    pairs = [(r.model or "?", p, b) for r in rows for m, p, b in _comparisons(r) if m == "input"]
    if pairs:
        fig, ax = plt.subplots(figsize=(5, 5))
        for model in sorted({m for m, _, _ in pairs}):
            ax.scatter(
                [p for m, p, _ in pairs if m == model], [b for m, _, b in pairs if m == model], s=12, label=model
            )
        top = max(max(p, b) for _, p, b in pairs) or 1
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
        ax.set_xlabel("predicted input tokens")
        ax.set_ylabel("billed input tokens")
        _save(fig, ax, "Predicted against billed", folder / "accuracy.png")
        made.append(("accuracy.png", "Predicted against billed input tokens, one point per call"))
    return made


def _save(fig: Any, ax: Any, title: str, path: Path) -> None:
    """A figure finished as every report figure is (its title, a small legend, a tight layout), written as a
    110-dpi PNG at ``path`` and closed."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(row.get(c, '')))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(summary: dict[str, Any], figures: list[tuple[str, str]]) -> str:
    out = io.StringIO()
    out.write(
        "<!doctype html><html><head><meta charset='utf-8'><title>mmtok ledger</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:2px 6px;font-size:13px}</style></head><body>"
    )
    out.write(
        f"<h1>mmtok ledger</h1><p>{html.escape(summary['ledger'])}: {summary['calls']} calls, "
        f"{html.escape(summary['first'] or '')} to {html.escape(summary['last'] or '')}; spend "
        f"${html.escape(summary['spend_usd'])}, saved by shrink ${html.escape(summary['saved_usd'])}.</p>"
    )
    for name, caption in figures:
        out.write(
            f"<figure><img src='{name}' alt='{html.escape(caption)}'><figcaption>{html.escape(caption)}"
            "</figcaption></figure>"
        )
    out.write("<h2>Spend per day and model</h2>")
    out.write(_table(summary["spend"], ("day", "model", "calls", "refused", "spend", "predicted", "saved")))
    for name, found in summary["by"].items():
        out.write(f"<h2>Spend by {html.escape(name)}</h2>")
        out.write(_table(found, ("group", "calls", "refused", "spend", "predicted", "saved")))
    out.write("<h2>Predicted against billed</h2>")
    columns = (
        "model",
        "modality",
        "calls",
        "exact",
        "predicted",
        "billed",
        "mean_error",
        "median_relative_error",
        "max_abs_relative_error",
    )
    out.write(_table(summary["accuracy"], columns))
    worst = [{**w, "model": a["model"], "modality": a["modality"]} for a in summary["accuracy"] for w in a["worst"]]
    if worst:
        out.write("<h2>Worst cases</h2>")
        out.write(_table(worst, ("model", "modality", "time", "images", "predicted", "billed", "id")))
    out.write("<p>Data: <a href='calls.csv'>calls.csv</a>, <a href='summary.json'>summary.json</a>.</p></body></html>")
    return out.getvalue()
