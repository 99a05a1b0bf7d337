"""The planning report's figures: each pair of objectives as a scatter (every setting evaluated, the Pareto front, the
recommended settings lettered as in the report's table, the bars as dashed lines with the side that misses them
shaded), the front on all its objectives at once (three objectives or more: with two, the scatter is the whole
story), and the hypervolume per generation.

Every figure is a 110-dpi PNG at most 682 px wide (the docs' column at 1,280 px is 688) whose smallest text is 9 pt,
13.75 px at natural size; ``mmtok.figures.save_png`` records that size in the PNG.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from mmtok.budgets.planner import OBJECTIVES, Plan
from mmtok.budgets.planner.report import LABELS, _dollar_tick, objective_text, recommendations, shown_front
from mmtok.files import atomic_path

FONT_PT = 9.0
STYLE = {"font.size": FONT_PT + 1, "axes.titlesize": FONT_PT + 2, "legend.fontsize": FONT_PT,
         "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT}  # fmt: skip
TITLES = {"cost": "cost", "fd": "FD", "wer": "WER", "tokens": "tokens", "accuracy": "QA accuracy", "judge": "judge"}
FRONT_COLOUR, EVALUATED_COLOUR, BAR_COLOUR = "#c0392b", "#bbbbbb", "#555555"
Letters = list[tuple[str, dict[str, Any]]]  # ("A", front entry) of each recommended setting
RECOMMENDED_COLOURS = ("#1f5fa8", "#2e8b57", "#b8860b", "#7b3fa0", "#d2691e", "#008b8b")


def figures(plan: Plan, out: Path) -> list[tuple[str, str]]:
    """Draw the report's figures into ``out``: (title, file name) of each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    letters = [(label.split(":")[0], entry) for label, entry in recommendations(plan)]
    made = []
    with plt.rc_context(STYLE):
        for x_name, y_name in itertools.combinations(plan.spec.objectives, 2):
            made.append(_pair(plan, letters, x_name, y_name, out))
        front = shown_front(plan)
        if len(plan.spec.objectives) >= 3 and len(front) >= 2:
            made.append(_parallel(plan, front, letters, out))
        if plan.history:
            made.append(_hypervolume(plan, out))
    return made


def _pair(
    plan: Plan, letters: list[tuple[str, dict[str, Any]]], x_name: str, y_name: str, out: Path
) -> tuple[str, str]:
    """One pair of objectives: evaluated, front, recommended (lettered) and the bars."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 4.4), layout="constrained")
    points = [(e["objectives"][x_name], e["objectives"][y_name]) for e in plan.evaluated]
    ax.scatter(*zip(*points, strict=True), s=14, color=EVALUATED_COLOUR, label=f"evaluated ({len(points)})")
    front = [(e["objectives"][x_name], e["objectives"][y_name]) for e in shown_front(plan)]
    if front:
        ax.scatter(*zip(*front, strict=True), s=30, color=FRONT_COLOUR, label="Pareto front", clip_on=False, zorder=3)
    for i, (letter, entry) in enumerate(letters):
        x, y = entry["objectives"][x_name], entry["objectives"][y_name]
        ax.scatter([x], [y], s=110, facecolors="none", edgecolors="black", linewidths=1.2, clip_on=False, zorder=4,
                   label="recommended (A, B, ...: the table)" if i == 0 else None)  # fmt: skip
        ax.annotate(letter, (x, y), xytext=(7, 5 + 9 * (i % 2)), textcoords="offset points", fontsize=FONT_PT + 2,
                    fontweight="bold", zorder=5)  # fmt: skip
    ax.margins(0.08)
    for name, axis in ((x_name, "x"), (y_name, "y")):
        if name in plan.spec.bars:
            _bar(ax, axis, name, plan.spec.bars[name])
    _axis(ax, "x", x_name)
    _axis(ax, "y", y_name)
    ax.set_title(f"{TITLES.get(y_name, y_name)} against {TITLES.get(x_name, x_name)}")
    ax.legend(loc="best", framealpha=0.9)
    name = f"front-{x_name}-{y_name}.png"
    _save(fig, out / name)
    return f"{y_name} vs {x_name}", name


def _bar(ax: Any, axis: str, name: str, value: float) -> None:
    """The bar on ``name`` as a dashed line, the side that misses it lightly shaded."""
    sign = "≤" if OBJECTIVES[name] == "min" else "≥"
    label = f"bar: {TITLES.get(name, name)} {sign} {objective_text(name, value)}"
    low, high = ax.get_xlim() if axis == "x" else ax.get_ylim()
    pad = 0.04 * (high - low)
    low, high = min(low, value - pad), max(high, value + pad)  # the bar in view even where no setting is near it
    line, span = (ax.axvline, ax.axvspan) if axis == "x" else (ax.axhline, ax.axhspan)
    line(value, color=BAR_COLOUR, linestyle="--", linewidth=1.2, label=label, zorder=2)
    span(*((value, high) if OBJECTIVES[name] == "min" else (low, value)), color=BAR_COLOUR, alpha=0.08, zorder=0,
         linewidth=0)  # fmt: skip
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low, high)


def _parallel(plan: Plan, front: list[dict[str, Any]], letters: Letters, out: Path) -> tuple[str, str]:
    """The front on every objective at once: each axis scaled to the front's range with its best value at the
    bottom, the real best and worst written at its ends; recommended settings drawn in colour and lettered."""
    import matplotlib.pyplot as plt

    names = list(plan.spec.objectives)
    values = {n: [e["objectives"][n] for e in front] for n in names}
    best = {n: (min if OBJECTIVES[n] == "min" else max)(values[n]) for n in names}
    worst = {n: (max if OBJECTIVES[n] == "min" else min)(values[n]) for n in names}

    def scaled(entry: dict[str, Any]) -> list[float]:
        return [abs(entry["objectives"][n] - best[n]) / (abs(worst[n] - best[n]) or 1) for n in names]

    fig, ax = plt.subplots(figsize=(6.2, 4.2), layout="constrained")
    xs = list(range(len(names)))
    for entry in front:
        ax.plot(xs, scaled(entry), color=EVALUATED_COLOUR, linewidth=1.2, zorder=1)
    for i, (letter, entry) in enumerate(letters):
        colour = RECOMMENDED_COLOURS[i % len(RECOMMENDED_COLOURS)]
        ys = scaled(entry)
        ax.plot(xs, ys, color=colour, linewidth=2.4, marker="o", label=letter, zorder=3)
        ax.annotate(letter, (xs[-1], ys[-1]), xytext=(8, -4 + 10 * (i % 2)), textcoords="offset points",
                    color=colour, fontsize=FONT_PT + 2, fontweight="bold")  # fmt: skip
    for x, n in zip(xs, names, strict=True):
        ax.axvline(x, color="#888888", linewidth=0.8, zorder=0)
        for y, word, value, offset in ((0, "best", best[n], -8), (1, "worst", worst[n], 8)):
            ax.annotate(f"{word} {objective_text(n, value)}", (x, y), xytext=(0, offset), textcoords="offset points",
                        ha="center", va="top" if offset < 0 else "bottom", fontsize=FONT_PT,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})  # fmt: skip
    ax.set_xticks(xs, [LABELS.get(n, n) for n in names])
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.4, len(names) - 0.6)
    ax.set_ylim(-0.16, 1.16)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_ylabel("lower is better on every axis")
    ax.set_title(f"The {len(front)} settings of the front on every objective (recommended: in colour)")
    _save(fig, out / "front-parallel.png")
    return "the front on every objective", "front-parallel.png"


def _hypervolume(plan: Plan, out: Path) -> tuple[str, str]:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.4, 3.4), layout="constrained")
    ax.plot([h["generation"] for h in plan.history], [h["hypervolume"] for h in plan.history], marker="o")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("generation")
    ax.set_ylabel("hypervolume of the front")
    ax.set_title("Hypervolume per generation")
    _save(fig, out / "hypervolume.png")
    return "hypervolume per generation", "hypervolume.png"


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


def _save(fig: Any, path: Path) -> None:
    """A PNG written as every report file is: atomically (``atomic_path``), never through a link at ``path``, with
    its smallest text recorded (``mmtok.figures.save_png``); the figure is closed."""
    import matplotlib.pyplot as plt

    from mmtok.figures import save_png

    with atomic_path(path) as partial:
        save_png(fig, partial)
    plt.close(fig)
