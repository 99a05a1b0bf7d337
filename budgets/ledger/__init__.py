"""The ledger: what each call through ``mmtok proxy`` (or a provider's batch) was predicted to cost against what it
was billed, and the reports read from it.

- ``records``: one call as a :class:`Record`, how a row is written and read back (bad values flagged, never lost);
- ``sql``: the stores (SQLite by default; ``postgres``: PostgreSQL, the ``sql`` extra), reservations for budgets;
- ``usage``: the usage a provider's response reports, read from OpenAI, Anthropic and Gemini bodies and priced;
- ``batch_results``: a provider's batch output paired with its input, as records;
- ``report``: the ledger as spend, savings and prediction errors (``mmtok ledger``: JSON, CSV, HTML).

What the ledger teaches (fitting each model's real rule from its bills) is :mod:`mmtok.budgets.calibrate`.
"""

from mmtok.budgets.ledger.records import (
    REACHED,
    SCHEMA_VERSION,
    BadRow,
    Ledger,
    Record,
    open_ledger,
    read_row,
    row_values,
    spend_nusd,
    to_nusd,
)

__all__ = [
    "REACHED",
    "SCHEMA_VERSION",
    "BadRow",
    "Ledger",
    "Record",
    "open_ledger",
    "read_row",
    "row_values",
    "spend_nusd",
    "to_nusd",
]
