"""A calibration as a price sheet (``[[family]]`` tables ``--prices`` takes) and in words for people: what the bills
showed against the documented rule, what was fitted, whether the sheet holds it, and what to send to settle it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmtok.budgets.calibrate.fit import Calibration, Fit, ModelCalibration


def write_sheet(calibration: Calibration, path: str | Path, today: dt.date | None = None) -> Path:
    """The fitted rules as a price sheet of ``[[family]]`` tables (``--prices`` takes it). Models whose rule
    could not be fitted are left out; the rest of each model's rules (text, audio, video) are copied from its
    documented family, so only the image rule changes."""
    import tomli_w

    today = today or dt.date.today()
    families = []
    for m in calibration.models:
        if m.fitted is None or (not m.changed and not m.new_family):
            continue
        image = {**m.fitted.params, "label": "exact" if m.fitted.all_exact else "estimate"}
        family = {"name": f"calibrated-{m.model}", "match": [m.model], "text": m.text_rule}
        family |= {k: v for k, v in m.formulas.items() if k != "image"}
        if m.overhead is not None and (m.overhead.per_request or m.overhead.per_message):
            family["overhead"] = {"per_request": m.overhead.per_request, "per_message": m.overhead.per_message}
        family |= {
            "image": image,
            "source": f"mmtok calibrate: {m.calls} billed calls in {calibration.source}",
            "read": today,
            "notes": describe_fit(m),
        }
        families.append(family)
    sheet = {
        "provider": "calibration",
        "currency": "USD",
        "description": f"Media rules fitted by mmtok calibrate on {today} to the bills in {calibration.source}",
        "family": families,
    }
    out = Path(path)
    header = (
        f"# Written by `mmtok calibrate` on {today} from {calibration.source}.\n"
        "# Each [[family]] replaces the image rule of the models it matches; money still comes from genai-prices.\n"
        "# Use it with --prices (mmtok price, shrink, proxy).\n"
    )
    out.write_text(header + tomli_w.dumps(sheet), encoding="utf-8")
    return out


def describe_fit(m: ModelCalibration) -> str:
    """A few sentences for people: what the bills showed against the documented rule, what was fitted, and whether
    the sheet holds it (if not: why, and which sizes to send to settle it)."""
    from mmtok.budgets.calibrate.fit import flat

    if m.candidate is None or m.documented is None:
        return "; ".join(m.notes) or "not fitted"
    doc, candidate = m.documented, m.candidate
    parts = [
        f"documented {doc.params['formula']}: {doc.exact}/{doc.total} calls exact, mean error "
        f"{doc.mean_abs_error:.1f} tokens"
    ]
    if not m.proposed:
        parts.append("no other rule reproduces more of the bills")
    else:
        if _is_new(doc, candidate):
            values = ", ".join(f"{k} {v}" for k, v in flat(candidate.params).items() if k != "formula")
            rule = f"a new rule, {candidate.params['formula']} ({values})"
        else:
            rule = _change_text(m.proposed)
        parts.append(f"best fit: {rule}, {candidate.exact}/{candidate.total} exact on the calls it saw")
    verdict = m.verdict
    if verdict is not None and verdict.held_out is not None and verdict.accepted:
        held = verdict.held_out
        parts.append(
            f"on calls left out of the fit: {held.exact}/{len(held.errors)} exact, mean error "
            f"{held.mean_abs_error:.1f} tokens"
        )
    if m.fitted is not candidate and m.changed:
        parts.append(f"the sheet holds the documented family refitted: {_change_text(m.changed)}")
    elif m.kept:
        parts.append("kept the documented rule: " + "; ".join(verdict.reasons))  # type: ignore[union-attr]
        parts.append(settle_text(m))
    elif m.changed:
        parts.append("the sheet holds it")
    if m.overhead is not None and (m.overhead.per_request or m.overhead.per_message) and m.changed:
        parts.append(
            f"bills carry {m.overhead.per_request} tokens per request and {m.overhead.per_message} per message "
            "beyond mmtok's prediction (the sheet's overhead)"
        )
    return "; ".join(parts)


def _is_new(documented: Fit, fit: Fit) -> bool:
    return fit.params["formula"] != documented.params["formula"]


def _change_text(changes: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, a, b in changes if k != "formula")


def settle_text(m: ModelCalibration) -> str:
    """What to send to settle a kept rule, in words."""
    sizes = ", ".join(f"{w}x{h}" for w, h in m.send_sizes)
    needed = m.verdict.calls_needed if m.verdict else 0
    more = f"send calls with one image each of {sizes}" if sizes else "send more calls with images"
    plain = f" and {m.send_text_only} text-only calls (they measure the overhead apart)" if m.send_text_only else ""
    measure = f" (--measure {m.model} --sizes with these sizes counts them for free)" if sizes else ""
    return f"to settle it, {more}{plain}, {needed} calls with images in all{measure}"
