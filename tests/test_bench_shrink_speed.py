"""The speed bench's rounds: an input's times are the medians of its rounds', and the ratios round by round are kept
beside the combined ones (``mmtok.eval.bench.shrink_speed``)."""

from __future__ import annotations

import pytest

from mmtok.eval.bench.shrink_speed import _by_round, combined


def _round(anchor: float, hook: float, peak: float) -> dict:
    return {"input": "a.png", "kind": "screenshot", "anchor_s": anchor, "hook_s": hook, "hook_peak_mb": peak,
            "hook_rewrote": True}  # fmt: skip


def test_an_inputs_times_are_the_medians_of_its_rounds_and_its_peak_the_largest():
    row = combined([_round(4.4, 5.0, 500.0), _round(2.3, 4.9, 560.0), _round(2.2, 5.1, 510.0)])
    assert row["anchor_s"] == 2.3 and row["hook_s"] == 5.0 and row["hook_peak_mb"] == 560.0
    assert row["anchor_s_rounds"] == [4.4, 2.3, 2.2] and row["hook_s_rounds"] == [5.0, 4.9, 5.1]
    assert row["hook_rewrote"] is True and row["input"] == "a.png"


def test_each_round_alone_gives_its_own_median_ratio():
    first = combined([_round(1.0, 2.0, 1.0), _round(2.0, 2.0, 1.0)])
    second = combined([_round(1.0, 3.0, 1.0), _round(1.0, 1.0, 1.0)])
    third = combined([_round(2.0, 4.0, 1.0), _round(4.0, 4.0, 1.0)])
    assert _by_round([first, second, third], "hook") == pytest.approx([2.0, 1.0])
    assert _by_round([first], "slice") == []
