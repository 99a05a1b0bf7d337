"""The ledger: one row per call through ``mmtok proxy``, predicted against billed, behind one small interface.

The default store is an SQLite file (standard library ``sqlite3``, WAL journal, ``synchronous=NORMAL``: a commit
survives the process being killed; several proxies may share the file on one machine). A PostgreSQL URL
(``postgresql://...``; the ``sql`` extra: SQLAlchemy and psycopg) stores the same tables in one database that
proxies on several machines share (:mod:`mmtok.budgets.ledger.sql` holds both stores).

Rows are keyed by an id drawn when the call arrives (``INSERT ... ON CONFLICT DO NOTHING``): a record written twice
leaves one row. A row holds the call's shape (each part's kind, geometry, settings and content hash), the prediction,
what the provider billed, latency, status, shrink savings, and who made it: a fingerprint of the key (never the
key) and the call's tags; the body only when the proxy runs with ``--store-bodies``.

Writing (:func:`row_values`) never refuses a record: a value a column cannot hold is kept where it can be and
flagged. An integer outside the 64-bit range a database integer holds (a usage figure of 10^23 tokens, a
4,000-digit ``max_tokens``) stays whole in the row's JSON and is left out of its integer column; a NaN or infinite
number is not stored at all (a cost of NaN is no cost). Each such value adds a line to the row's ``flags``, naming
the column, so a report can say which figures were absurd instead of losing the row with them. The spend kept for
SQL sums saturates at the largest integer, more than any budget: a call billed out of range uses up the day.

Reading (:func:`read_row`) checks every column's type and text (a cost must be a finite decimal, JSON must parse
and be of its field's shape, NaN and infinities are refused) and says which column of which row is malformed
(:class:`BadRow`): a reader skips that row, keeps it in ``ledger.skipped`` and reports the rest.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

SCHEMA_VERSION = 2
REACHED = ("ok", "cut", "lost")  # outcomes of calls the provider received: they cost money, billed or not


@dataclass
class Record:
    """One call through the proxy. Token and money fields are ``None`` where unknown, never a silent zero."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"))
    provider: str = ""  # openai | anthropic | gemini
    api: str = ""  # openai-chat, anthropic-messages, gemini-generate, ... (mmtok.budgets.ledger.usage.APIS)
    model: str | None = None
    path: str = ""  # the path asked for, without its query string (which may hold a key)
    stream: bool = False
    status: int = 0  # the HTTP status the client got
    # ok | refused | bad_request | upstream_error | upstream_timeout | upstream_unreachable | cut | lost
    outcome: str = ""
    message: str = ""  # why a call was refused or failed, in words
    latency_ms: float | None = None  # arrival to the last byte sent
    upstream_ms: float | None = None  # sending upstream to its response headers
    parts: list[dict[str, Any]] = field(default_factory=list)  # kind, w, h, detail, seconds, pages, bytes, sha256
    settings: dict[str, Any] = field(default_factory=dict)  # detail, media_resolution, max tokens, service tier
    predicted: dict[str, int] = field(default_factory=dict)  # modality -> tokens (mmtok's quote)
    predicted_input: int | None = None
    predicted_cost: Decimal | None = None  # the quote: an upper bound unless its label says otherwise
    predicted_label: str | None = None  # exact | documented | upper bound | estimate
    billed: dict[str, Any] | None = None  # mmtok.budgets.ledger.usage.Usage.to_dict()
    billed_input: int | None = None
    billed_output: int | None = None
    billed_cost: Decimal | None = None  # the billed tokens at the model's rates
    shrink: dict[str, Any] | None = None  # tokens and cost before and after, what was done
    saved_cost: Decimal | None = None
    body_sha256: str = ""
    body: bytes | None = None  # only with --store-bodies
    instance: str = ""  # the proxy process that wrote the row
    key_fingerprint: str | None = None  # "...abcd-<salted hash>" of the caller's key (mmtok.budgets.proxy.attribution)
    tags: dict[str, str] = field(default_factory=dict)  # team=search, app=bot, user=...: from a header and the body
    flags: list[str] = field(default_factory=list)  # values the row could not hold as given (out of range, NaN)

    @property
    def day(self) -> str:
        return self.time[:10]

    @property
    def spend(self) -> Decimal:
        """What the call cost: the billed tokens priced; for a call the provider received but whose bill never came
        (a stream cut short, a proxy killed mid-call) or is no number (NaN), the prediction: the bound it reserved."""
        if self.billed_cost is not None and self.billed_cost.is_finite():
            return self.billed_cost
        return (self.predicted_cost or Decimal(0)) if self.outcome in REACHED else Decimal(0)

    @property
    def scopes(self) -> list[str]:
        """The budgets the call counts in: all calls, its key, and each of its tags."""
        return ["all", f"key:{self.key_fingerprint or '-'}", *(f"tag:{k}={v}" for k, v in sorted(self.tags.items()))]

    def to_dict(self, with_body: bool = False) -> dict[str, Any]:
        out = asdict(self)
        for key in ("predicted_cost", "billed_cost", "saved_cost"):
            out[key] = None if out[key] is None else str(out[key])
        out["body"] = self.body.decode("utf-8", "replace") if with_body and self.body is not None else None
        if not with_body:
            del out["body"]
        return out


COLUMNS = tuple(f.name for f in fields(Record))
NANO = Decimal(10**9)  # spend is also kept as an integer count of nano-dollars, so SUM in SQL stays exact
INT64_MAX = 2**63 - 1
JSON_FIELDS = {  # field -> the JSON type it holds (None allowed where the record allows it)
    "parts": list,
    "settings": dict,
    "predicted": dict,
    "billed": dict,
    "shrink": dict,
    "tags": dict,
    "flags": list,
}
DECIMALS = ("predicted_cost", "billed_cost", "saved_cost")
INTEGERS = ("status", "predicted_input", "billed_input", "billed_output")
FLOATS = ("latency_ms", "upstream_ms")
TEXTS = ("provider", "api", "model", "path", "outcome", "message", "predicted_label", "body_sha256", "instance")
TEXTS += ("key_fingerprint",)
REQUIRED = ("id", "time")  # a row without these is not a call
_FIELDS = {f.name: f for f in fields(Record)}


@dataclass(frozen=True)
class BadRow:
    """A row a reader skipped: which, which column, and what is wrong with it."""

    id: str
    column: str
    problem: str

    def __str__(self) -> str:
        return f"row {self.id}: column {self.column}: {self.problem}; skipped"


class _Malformed(Exception):
    def __init__(self, column: str, problem: str) -> None:
        super().__init__(problem)
        self.column, self.problem = column, problem


# ------------------------------------------------------------------------------------------------------ writing
def _finite(value: Any, path: str, flags: list[str]) -> Any:
    """``value`` (nested JSON data) with every NaN or infinite number replaced by None, each flagged."""
    if isinstance(value, float) and not math.isfinite(value):
        flags.append(f"{path}: {value} refused (not a finite number)")
        return None
    if isinstance(value, Decimal):
        if not value.is_finite():
            flags.append(f"{path}: {value} refused (not a finite number)")
            return None
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX <= value <= INT64_MAX:
        flags.append(f"{path}: {_short(value)} is out of the integer range")
        return value if value.bit_length() < 14000 else f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, dict):
        return {str(k): _finite(v, f"{path}.{k}", flags) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{path}[{n}]", flags) for n, v in enumerate(value)]
    return value


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)  # one, not one per call


def _json_text(value: Any) -> str:
    return _ENCODER.encode(value)


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


_PLAIN = json.JSONEncoder(separators=(",", ":"), default=_refuse, allow_nan=False)
_LONG_DIGITS = re.compile(r"\d{19}")  # an integer that may be past 64 bits (or digits in a string: the slow path)


def _column_json(value: Any, name: str, flags: list[str]) -> str:
    """A nested field as JSON text: written straight where it holds only plain JSON values (the common case: no
    Decimal, NaN or infinity, no integer of 19 digits or more), else through :func:`_finite`, which flags what it
    changes. Both give the same text for plain values (every key mmtok writes is a string)."""
    try:
        text = _PLAIN.encode(value)
    except (TypeError, ValueError):
        return _json_text(_finite(value, name, flags))
    if _LONG_DIGITS.search(text):
        return _json_text(_finite(value, name, flags))
    return text


def row_values(record: Record) -> dict[str, Any]:
    """``record`` as column values: JSON text for nested fields, decimal strings for money, every value a column
    can hold (out-of-range integers and non-finite numbers flagged, see the module's docstring)."""
    flags = list(record.flags)
    values: dict[str, Any] = {name: getattr(record, name) for name in COLUMNS}
    for name in JSON_FIELDS:
        if name != "flags" and values[name] is not None:
            values[name] = _column_json(values[name], name, flags)
    for name in INTEGERS:
        value = values[name]
        if isinstance(value, int) and not -INT64_MAX <= value <= INT64_MAX:
            flags.append(f"{name}: {_short(value)} is out of the integer range; not stored in this column")
            values[name] = None
    for name in TEXTS:
        value = values[name]
        if isinstance(value, str) and "\x00" in value:  # PostgreSQL's text cannot hold NUL
            flags.append(f"{name}: NUL characters written as U+FFFD")
            values[name] = value.replace("\x00", "\ufffd")
    for name in FLOATS:
        value = values[name]
        if isinstance(value, float) and not math.isfinite(value):
            flags.append(f"{name}: {value} refused (not a finite number)")
            values[name] = None
    for name in DECIMALS:
        value = values[name]
        if value is not None and not Decimal(value).is_finite():
            flags.append(f"{name}: {value} refused (not a finite number)")
            values[name] = None
        elif value is not None:
            values[name] = str(value)
    values["stream"] = int(bool(record.stream))
    values["day"] = record.day
    values["spend_nusd"] = spend_nusd(record)
    values["flags"] = _json_text(flags) if flags else None
    return values


def spend_nusd(record: Record) -> int:
    """The call's spend in nano-dollars (see :func:`to_nusd`)."""
    return to_nusd(record.spend)


def to_nusd(amount: Decimal) -> int:
    """``amount`` USD in nano-dollars, saturated at the largest 64-bit integer (a non-finite amount counts 0)."""
    if not amount.is_finite():
        return 0
    return max(-INT64_MAX, min(INT64_MAX, int((amount * NANO).to_integral_value())))


def _short(value: int) -> str:
    """A large integer in a few words (Python will not write one of over 4,300 digits as text)."""
    if value.bit_length() >= 14000:
        return f"an integer of {value.bit_length():,} bits"
    text = str(abs(value))
    return str(value) if len(text) <= 30 else f"an integer of {len(text):,} digits"


# ------------------------------------------------------------------------------------------------------ reading
def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _parse_json(text: Any, column: str, kind: type) -> Any:
    if not isinstance(text, str):
        raise _Malformed(column, f"expected JSON text, found {type(text).__name__}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as e:
        raise _Malformed(column, f"bad JSON ({e})") from None
    if not isinstance(value, kind):
        raise _Malformed(column, f"expected a JSON {kind.__name__}, found {type(value).__name__}")
    return value


def _decimal(text: Any, column: str) -> Decimal:
    if not isinstance(text, (str, int)) or isinstance(text, bool):
        raise _Malformed(column, f"expected a decimal amount, found {type(text).__name__}")
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise _Malformed(column, f"{str(text)[:40]!r} is not a decimal amount") from None
    if not value.is_finite():
        raise _Malformed(column, f"{text} is not a finite amount")
    return value


def _integer(value: Any, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Malformed(column, f"expected an integer, found {type(value).__name__} {str(value)[:40]!r}")
    return value


def _float(value: Any, column: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(column, f"expected a number, found {type(value).__name__} {str(value)[:40]!r}")
    if not math.isfinite(value):
        raise _Malformed(column, f"{value} is not a finite number")
    return float(value)


def _time(value: Any) -> str:
    if not isinstance(value, str):
        raise _Malformed("time", f"expected an ISO time, found {type(value).__name__}")
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Malformed("time", f"{value[:40]!r} is not an ISO time") from None
    return value


def _values(row: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in COLUMNS:
        value = row.get(name)
        if value is None:
            if name in REQUIRED:
                raise _Malformed(name, "missing")
            values[name] = _default(name)
            continue
        if name in JSON_FIELDS:
            values[name] = _parse_json(value, name, JSON_FIELDS[name])
        elif name in DECIMALS:
            values[name] = _decimal(value, name)
        elif name in INTEGERS:
            values[name] = _integer(value, name)
        elif name in FLOATS:
            values[name] = _float(value, name)
        elif name == "stream":
            values[name] = bool(_integer(value, name))
        elif name == "time":
            values[name] = _time(value)
        elif name == "body":
            values[name] = value.encode() if isinstance(value, str) else bytes(value)
        elif not isinstance(value, str):
            raise _Malformed(name, f"expected text, found {type(value).__name__}")
        else:
            values[name] = value
    return values


def _default(name: str) -> Any:
    """A field's default, for a column that is NULL (a row from an older schema, or one the database left empty)."""
    found = _FIELDS[name]
    return found.default_factory() if callable(found.default_factory) else found.default


def read_row(row: dict[str, Any]) -> Record | BadRow:
    """The record a row holds, or what is wrong with it."""
    try:
        return Record(**_values(row))
    except _Malformed as e:
        return BadRow(_row_id(row), e.column, e.problem)


def _row_id(row: dict[str, Any]) -> str:
    value = row.get("id")
    return value[:64] if isinstance(value, str) and value else f"(no id: {str(value)[:20]})"


# ------------------------------------------------------------------------------------------------------ interface
class Ledger(Protocol):
    """Where records go (:mod:`mmtok.budgets.ledger.sql`: SQLite and PostgreSQL)."""

    where: str  # for people: a path, or a URL with its password hidden
    salt: str  # for key fingerprints: one per ledger, so every proxy on it names a key alike
    skipped: list[BadRow]  # the malformed rows the last ``records`` passed over

    def write(self, records: Sequence[Record]) -> list[tuple[Record, str]]:
        """Write ``records`` (idempotent by id; each also settles its reservation); the ones that could not be
        written, each with why. One bad record never keeps another out."""
        ...

    def records(self, since: str | None = None) -> Iterator[Record]: ...

    def spend_on(self, day: str, scope: str = "all") -> Decimal: ...

    def close(self) -> None: ...


def open_ledger(target: str | os.PathLike[str], read_only: bool = False) -> Any:
    """A ledger at ``target``: a file path (SQLite, standard library; ``sqlite:///path`` names one too) or a
    PostgreSQL URL. ``read_only``: an SQLite file is opened for reading only (reports, calibration) and nothing is
    written to it (SQLite still keeps its -shm and -wal files beside a file in WAL mode)."""
    from mmtok.budgets.ledger.sql import open_store

    return open_store(os.fspath(target), read_only)
