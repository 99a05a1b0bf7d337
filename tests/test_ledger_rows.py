"""A record's nested fields as JSON text: plain values written straight, the rest through the careful path that
flags what a column cannot hold; both give the same text where both apply."""

from __future__ import annotations

from decimal import Decimal

from mmtok.budgets.ledger import Record, row_values
from mmtok.budgets.ledger import records as ledger


def test_plain_nested_values_are_written_as_the_careful_path_writes_them():
    values = {"parts": [{"kind": "image", "w": 1024, "h": 768, "seconds": 1.5, "sha256": "ab" * 32, "ok": True}],
              "settings": {"messages": 2, "output_modalities": ["text"], "none": None}}  # fmt: skip
    for name, value in values.items():
        flags: list[str] = []
        careful = ledger._json_text(ledger._finite(value, name, []))
        assert ledger._column_json(value, name, flags) == careful and not flags


def test_values_a_column_cannot_hold_take_the_careful_path_and_are_flagged():
    record = Record(
        settings={"budget": Decimal("1.5"), "nan": float("nan"), "huge": 10**23, "id": "1234567890123456789012"},
        billed={"input_tokens": 2**70},
    )
    row = row_values(record)
    assert '"budget":"1.5"' in row["settings"] and '"nan":null' in row["settings"]
    assert '"id":"1234567890123456789012"' in row["settings"]  # digits in a string: kept as they are
    assert str(2**70) in row["billed"]
    flags = row["flags"]
    assert "settings.nan" in flags and "settings.huge" in flags and "billed.input_tokens" in flags
    assert "settings.id" not in flags
