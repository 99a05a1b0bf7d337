"""Evaluation suites: a TOML file naming a dataset, a pipeline and metrics; parsed strictly (unknown keys named).

    name = "images-heldout"
    [dataset]
    kind = "images"                  # images | speech | qa
    source = "builtin:heldout-photos"  # or a folder or .jsonl manifest ({"id", "path", ...}), relative to this file
    limit = 0                        # 0: every item
    [pipeline]
    tokenizer = "vq-clip-tiny"
    image_size = 64
    truncation = { method = "mi", threshold = -0.15 }
    [metrics]
    names = ["psnr", "ssim", "fd"]
    fd_extractor = "efficientnet-lite0"

Items are built here: every item has a stable ``id`` (the key results are stored under) and what its metrics need.
Every setting is type-checked when the suite is loaded (a wrong one is the suite's error, exit 2, before any item
runs); a suite holds at most :data:`MAX_SUITE_ITEMS` items, and each item's file is hashed through the same checked
open as ``load()`` (a FIFO or device is that item's error at once) and within :data:`MAX_ITEM_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, EvalError
from mmtok.files import UnreadableFile, open_regular, parse_json, read_text, read_toml, text_lines

MAX_SUITE_ITEMS = 100_000  # items in a suite (its manifest lines or folder files); the shipped suites hold <= 1,000
MAX_ITEM_BYTES = 4 << 30  # an item's file, hashed (and evaluated) whole: larger is that item's error

KINDS = {"images": {"psnr", "ssim", "fd"}, "speech": {"wer", "cer"}, "qa": {"judge", "accuracy"}}
SECTIONS = {
    "dataset": {"kind", "source", "limit"},
    "pipeline": {
        "tokenizer",
        "image_size",
        "truncation",
        "tokens_per_second",
        "quantize",
        "codebook_levels",
        "backbone",
    },
    "metrics": {"names", "fd_extractor", "asr", "judge", "on_judge_error"},
}


# The type of every setting, checked at load: (type or types, what to say); None allows a key to be left out.
SETTING_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a string"),
    "description": ((str,), "a string"),
    "pipeline.tokenizer": ((str,), "a tokenizer name"),
    "pipeline.image_size": ((int,), "an integer (px)"),
    "pipeline.truncation": ((dict,), 'a table, e.g. { method = "mi", threshold = -0.15 }'),
    "pipeline.tokens_per_second": ((int, float), "a number"),
    "pipeline.quantize": ((bool,), "true or false"),
    "pipeline.codebook_levels": ((int,), "an integer"),
    "pipeline.backbone": ((str,), "a backbone name"),
    "metrics.fd_extractor": ((str,), "an extractor name"),
    "metrics.asr": ((str,), "an ASR backend name"),
    "metrics.judge": ((str, dict), "a judge name or a table"),
}
TRUNCATION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {  # [pipeline] truncation = { ... }
    "method": ((str,), "a method name"),
    "threshold": ((int, float), "a number of nats"),
    "keep": ((int,), "a whole number of tokens"),
    "keep_ratio": ((int, float), "a number in (0, 1]"),
    "out_of_domain": ((str,), "divprune, mi or error"),
    "seed": ((int,), "an integer"),
    "min_keep": ((int,), "a whole number of tokens"),
}


@dataclass
class Suite:
    name: str
    kind: str
    source: str
    limit: int = 0
    pipeline: dict[str, Any] = field(default_factory=dict)
    metrics: list[str] = field(default_factory=list)
    fd_extractor: str = "efficientnet-lite0"
    asr: str = "whisper"
    judge: Any = "local"
    on_judge_error: str = "error"  # error | skip
    description: str = ""
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "limit": self.limit,
            "pipeline": self.pipeline,
            "metrics": self.metrics,
            "fd_extractor": self.fd_extractor,
            "asr": self.asr,
            "judge": self.judge,
            "on_judge_error": self.on_judge_error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Suite:
        """The suite stored in a run folder (``to_dict``'s keys; anything else is ignored)."""
        known = set(cls.__dataclass_fields__) - {"path"}
        return cls(**{k: v for k, v in data.items() if k in known})


def shipped_suites() -> dict[str, Path]:
    folder = Path(str(resources.files("mmtok.eval") / "suites"))
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def load_suite(spec: str | Path) -> Suite:
    path = Path(spec)
    if not path.is_file():
        shipped = shipped_suites()
        if str(spec) in shipped:
            path = shipped[str(spec)]
        else:
            raise ConfigError(f"{spec}: no such suite file (shipped suites: {', '.join(shipped)})")
    data = read_toml(path, "suite")
    unknown = sorted(set(data) - {"name", "description", *SECTIONS})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}")
    for section, allowed in SECTIONS.items():
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        extra = sorted(set(data.get(section, {})) - allowed)
        if extra:
            raise ConfigError(
                f"{path}: unknown key(s) in [{section}]: {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}"
            )
    _check_types(path, data)
    dataset, metrics = data.get("dataset", {}), data.get("metrics", {})
    kind = dataset.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError(f"{path}: [dataset] kind must be one of {', '.join(KINDS)}, got {kind!r}")
    names = metrics.get("names", sorted(KINDS[kind]))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{path}: [metrics] names must be a list of metric names")
    wrong = sorted(set(names) - KINDS[kind])
    if wrong:
        raise ConfigError(f"{path}: metric(s) {', '.join(wrong)} do not apply to {kind}; use {sorted(KINDS[kind])}")
    if metrics.get("on_judge_error", "error") not in ("error", "skip"):
        raise ConfigError(f"{path}: on_judge_error must be error or skip")
    if not dataset.get("source") or not isinstance(dataset["source"], str):
        raise ConfigError(f"{path}: [dataset] source is required (a string)")
    limit = dataset.get("limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_SUITE_ITEMS:
        raise ConfigError(
            f"{path}: [dataset] limit must be a whole number from 0 (every item) to {MAX_SUITE_ITEMS:,}, got {limit!r}"
        )
    source = dataset["source"]
    if not source.startswith("builtin:") and not Path(source).expanduser().is_absolute():
        source = str(path.parent / source)  # relative to the suite file, as plan specs are to theirs
    return Suite(
        name=data.get("name", path.stem),
        kind=kind,
        source=source,
        limit=limit,
        pipeline=data.get("pipeline", {}),
        metrics=list(names),
        fd_extractor=metrics.get("fd_extractor", "efficientnet-lite0"),
        asr=metrics.get("asr", "whisper"),
        judge=metrics.get("judge", "local"),
        on_judge_error=metrics.get("on_judge_error", "error"),
        description=data.get("description", ""),
        path=path,
    )


def _check_types(path: Path, data: dict[str, Any]) -> None:
    """Every setting of the kind it must be (``name = 5``, ``truncation = "mi"``, ``quantize = "yes"`` refused)."""
    for dotted, (types, what) in SETTING_TYPES.items():
        section, _, key = dotted.rpartition(".")
        value = (data.get(section, {}) if section else data).get(key)
        if value is not None and ((isinstance(value, bool) and bool not in types) or not isinstance(value, types)):
            shown = f"[{section}] {key}" if section else key
            raise ConfigError(f"{path}: {shown} must be {what}, got {_short(value)}")
    truncation = data.get("pipeline", {}).get("truncation")
    if truncation is None:
        return
    unknown = sorted(set(truncation) - set(TRUNCATION_TYPES))
    if unknown:
        allowed = ", ".join(TRUNCATION_TYPES)
        raise ConfigError(f"{path}: [pipeline] truncation: unknown key(s) {', '.join(unknown)}; allowed: {allowed}")
    for key, value in truncation.items():
        types, what = TRUNCATION_TYPES[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ConfigError(f"{path}: [pipeline] truncation {key} must be {what}, got {_short(value)}")
    _check_truncation(path, truncation)


def _check_truncation(path: Path, options: dict[str, Any]) -> None:
    """A truncation table ``mmtok.truncate`` takes: a known method, one budget, values in range."""
    from mmtok.truncation import METHODS, OUT_OF_DOMAIN

    where = f"{path}: [pipeline] truncation"
    method = options.get("method", "mi")
    if method not in METHODS:
        raise ConfigError(f"{where} method must be one of {', '.join(METHODS)}, got {_short(method)}")
    if sum(k in options for k in ("threshold", "keep", "keep_ratio")) > 1:
        raise ConfigError(f"{where}: give only one of threshold, keep and keep_ratio")
    if method != "mi" and not {"keep", "keep_ratio"} & set(options):
        raise ConfigError(f"{where}: {method} keeps a budget: give keep or keep_ratio")
    if method != "mi" and "threshold" in options:
        raise ConfigError(f"{where}: threshold is for mi; {method} takes keep or keep_ratio")
    if not 0 < options.get("keep_ratio", 1) <= 1 or options.get("keep", 1) < 1 or options.get("min_keep", 1) < 1:
        raise ConfigError(f"{where}: keep_ratio must be in (0, 1], keep and min_keep at least 1")
    if options.get("out_of_domain", "divprune") not in OUT_OF_DOMAIN:
        raise ConfigError(f"{where} out_of_domain must be one of {', '.join(OUT_OF_DOMAIN)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------------------------------- items
def items(suite: Suite) -> list[dict[str, Any]]:
    """The suite's items, each with a stable ``id``."""
    source = suite.source
    if source.startswith("builtin:"):
        found = _builtin(source.split(":", 1)[1], suite)
    else:
        found = _manifest(Path(source), suite)
    if len(found) > MAX_SUITE_ITEMS:
        raise ConfigError(f"{source}: {len(found):,} items, over the limit of {MAX_SUITE_ITEMS:,} per suite")
    return found[: suite.limit] if suite.limit else found


def _builtin(name: str, suite: Suite) -> list[dict[str, Any]]:
    if name == "heldout-photos":  # the crop size is the pipeline's image_size, not part of the item
        return [{"id": f"photo-{i:04d}", "builtin": name, "index": i} for i in range(256)]
    if name == "heldout-speech":
        folder = Path(str(resources.files("mmtok.eval") / "data" / "speech" / "heldout"))
        return _manifest(folder / "transcripts.jsonl", suite)
    if name == "digits-qa":
        return [
            {"id": f"digit-{i:04d}", "builtin": name, "index": i, "question": "which digit is written in the picture?"}
            for i in range(1000)
        ]
    raise ConfigError(f"unknown builtin dataset {name!r}: heldout-photos, heldout-speech, digits-qa")


def _manifest(path: Path, suite: Suite) -> list[dict[str, Any]]:
    if path.is_dir():
        import itertools

        import mmtok

        files = (p for p in mmtok.iter_files([path]) if not isinstance(p, mmtok.MediaError))
        return [{"id": str(p.relative_to(path)), "path": str(p)} for p in itertools.islice(files, MAX_SUITE_ITEMS + 1)]
    if not path.is_file():
        raise ConfigError(f"{path}: dataset source not found")
    found = []
    first_line: dict[str, int] = {}
    for n, line in enumerate(text_lines(read_text(path, "dataset manifest")), 1):
        if not line.strip():
            continue
        if len(found) == MAX_SUITE_ITEMS:
            raise ConfigError(f"{path}: more than {MAX_SUITE_ITEMS:,} items, the limit per suite")
        row = parse_json(line, f"{path}:{n}")
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: each item must be a JSON object, got {type(row).__name__}")
        if not isinstance(row.get("path"), str) or not row["path"]:
            raise ConfigError(f"{path}:{n}: each item needs a 'path' (a string)")
        item_id = row.get("id", row["path"])
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
            raise ConfigError(f"{path}:{n}: 'id' must be a string or an integer, got {type(item_id).__name__}")
        item_id = str(item_id)  # results are keyed by string ids: 7 and "7" are the same item
        if item_id in first_line:
            raise ConfigError(f"{path}:{n}: duplicate id {item_id!r} (first on line {first_line[item_id]})")
        first_line[item_id] = n
        row["id"] = item_id
        row["path"] = str((path.parent / row["path"]).resolve())
        found.append(row)
    return found


# ----------------------------------------------------------------------------------------------- fingerprints
# A run folder stores the fingerprint of the suite it holds results of: the suite's settings and a hash of each
# item's content. Each result row stores the hash of what it was computed from (its item's content and the
# pipeline + metrics settings), so a resume can tell, item by item, which results still hold.
FINGERPRINT_VERSION = 1
# to_dict's keys as they are written in the suite's TOML, to name what changed
_TOML_NAMES = {
    "name": "name",
    "kind": "dataset.kind",
    "source": "dataset.source",
    "limit": "dataset.limit",
    "pipeline": "pipeline",
    "metrics": "metrics.names",
    "fd_extractor": "metrics.fd_extractor",
    "asr": "metrics.asr",
    "judge": "metrics.judge",
    "on_judge_error": "metrics.on_judge_error",
}
# what an item's result depends on besides the item itself (name, source and limit only choose the items)
_CONFIG_KEYS = ("kind", "pipeline", "metrics", "fd_extractor", "asr", "judge", "on_judge_error")


def _digest(*parts: str | bytes, size: int = 32) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:size]


def config_hash(suite: Suite | dict[str, Any]) -> str:
    """Hash of the pipeline and metrics settings an item's result is computed with."""
    data = suite.to_dict() if isinstance(suite, Suite) else suite
    return _digest(json.dumps({k: data.get(k) for k in _CONFIG_KEYS}, sort_keys=True, default=str))


def item_hash(item: dict[str, Any]) -> str:
    """Hash of an item: its fields and, for a file, the file's bytes, read through the checked open within
    :data:`MAX_ITEM_BYTES` (a file that cannot be read so hashes as its problem: the item then fails with it)."""
    h = hashlib.sha256(json.dumps(item, sort_keys=True, default=str).encode())
    if isinstance(item.get("path"), str):
        try:
            _hash_file(item["path"], h)
        except EvalError as e:
            h.update(f"\0unreadable: {e}".encode())
    return h.hexdigest()[:32]


def check_item_file(path: str) -> None:
    """An item's file is one an item may name: a regular file (never a FIFO or a device: refused without waiting)
    of at most :data:`MAX_ITEM_BYTES`; else an EvalError, that item's error."""
    fd = _open_item(path)
    os.close(fd)


def _open_item(path: str) -> int:
    try:
        fd, info = open_regular(path)
    except UnreadableFile as e:
        raise EvalError(f"{path}: {e.reason}") from None
    if info.st_size > MAX_ITEM_BYTES:
        os.close(fd)
        raise EvalError(f"{path}: {info.st_size:,} bytes, over the {MAX_ITEM_BYTES:,}-byte limit of an item")
    return fd


def _hash_file(path: str, h: Any) -> None:
    fd = _open_item(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            left = MAX_ITEM_BYTES + 1
            while left > 0 and (chunk := f.read(min(1 << 20, left))):
                h.update(chunk)
                left -= len(chunk)
    except OSError as e:
        raise EvalError(f"{path}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    if left <= 0:
        raise EvalError(f"{path}: grew past the {MAX_ITEM_BYTES:,}-byte limit of an item while being read")


def row_hash(config: str, item: str) -> str:
    """What a result row was computed from: the item's hash and the suite's config hash."""
    return _digest(config, item, size=24)


def fingerprint(suite: Suite, suite_items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": FINGERPRINT_VERSION,
        "suite": suite.to_dict(),
        "config": config_hash(suite),
        "items": {item["id"]: item_hash(item) for item in suite_items},
    }


def expected_rows(fp: dict[str, Any]) -> dict[str, str]:
    """Each item id of a fingerprint, in suite order, with the row hash its current result must carry."""
    return {item_id: row_hash(fp["config"], h) for item_id, h in fp["items"].items()}


_UNSET = object()


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):  # pipeline.truncation.threshold, metrics.judge.base_url, ...
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}", out)
    else:
        out[prefix] = value


def _show(value: Any) -> str:
    return "(unset)" if value is _UNSET else json.dumps(value, default=str)


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, named as in the suite file: ``pipeline.image_size: 64 -> 32``,
    ``dataset.limit: 40 -> 60``, ``20 items added (digit-0040, ...)``. Empty when nothing changed."""
    flat_old: dict[str, Any] = {}
    flat_new: dict[str, Any] = {}
    for key, name in _TOML_NAMES.items():
        _flatten(old["suite"].get(key, _UNSET), name, flat_old)
        _flatten(new["suite"].get(key, _UNSET), name, flat_new)
    changes = [
        f"{key}: {_show(flat_old.get(key, _UNSET))} -> {_show(flat_new.get(key, _UNSET))}"
        for key in [*flat_old, *(k for k in flat_new if k not in flat_old)]
        if flat_old.get(key, _UNSET) != flat_new.get(key, _UNSET)
    ]
    old_items, new_items = old["items"], new["items"]
    changed = [i for i in new_items if i in old_items and old_items[i] != new_items[i]]
    added = [i for i in new_items if i not in old_items]
    removed = [i for i in old_items if i not in new_items]
    for ids, what in ((changed, "changed"), (added, "added"), (removed, "removed")):
        if ids:
            changes.append(f"{len(ids)} item{'s' if len(ids) > 1 else ''} {what} ({_ids(ids)})")
    return changes
