"""Which file formats each provider's API takes, per modality (``formats.toml``), and the warning a quote carries
when an input's format is not among them: the request would be refused, or the file must be converted first,
whatever it costs.

A provider's entry applies to the models of its families (fnmatch on the family name, as in ``families.toml``) or
of its provider name. A modality an entry does not list is not checked; self-hosted families have no entry (what
they take depends on the serving stack).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmtok.errors import PriceError
from mmtok.files import read_toml

MODALITIES = ("image", "audio", "video")
KEYS = frozenset({"name", "providers", "families", *MODALITIES})
RULE_KEYS = frozenset({"formats", "source", "read", "quote"})
NAMES = {  # mmtok's format names as a reader of a warning knows them
    "jpeg": "JPEG",
    "png": "PNG",
    "webp": "WebP",
    "gif": "GIF",
    "bmp": "BMP",
    "tiff": "TIFF",
    "avif": "AVIF",
    "heif": "HEIF/HEIC",
    "wav": "WAV",
    "mp3": "MP3",
    "flac": "FLAC",
    "aac": "AAC",
    "ogg": "Ogg",
    "aiff": "AIFF",
    "m4a": "M4A",
    "mp4": "MP4",
    "mov": "MOV",
    "webm": "WebM",
    "matroska": "Matroska (MKV)",
    "avi": "AVI",
}
CONVERT = {
    "image": "`mmtok shrink` writes it as PNG, JPEG or WebP",
    "audio": "convert it first, e.g. `ffmpeg -i FILE out.mp3`",
    "video": "convert it first, e.g. `ffmpeg -i FILE -c copy out.mp4` (or re-encode where the codecs do not fit)",
}


@dataclass(frozen=True)
class Rule:
    """The formats one provider takes for one modality, with the page they come from."""

    formats: frozenset[str]  # mmtok format names
    source: str
    read: dt.date
    quote: str  # the page's own words


@dataclass(frozen=True)
class Accepted:
    """One provider's accepted input formats."""

    name: str
    providers: tuple[str, ...]
    families: tuple[str, ...]
    rules: dict[str, Rule]  # modality -> rule

    def applies_to(self, provider: str, family: str | None) -> bool:
        return provider in self.providers or bool(family and any(fnmatch.fnmatchcase(family, p) for p in self.families))


def format_warning(model: Any, item: Any) -> str:
    """A note when ``model``'s provider does not take ``item``'s file format ("" when it does, or nothing is
    known); a video's sound track travels inside its container, so only the container is checked."""
    modality, fmt = getattr(item, "kind", None), getattr(item, "format", None)
    if modality not in MODALITIES or not fmt or getattr(item, "path", None) is None:
        return ""
    family = model.family.name if model.family else None
    for entry in accepted():
        rule = entry.rules.get(modality)
        if rule is None or not entry.applies_to(model.provider, family):
            continue
        if fmt in rule.formats:
            return ""
        listed = ", ".join(sorted(NAMES[f] for f in rule.formats))
        return (
            f"{entry.name} takes {modality} as {listed}, not {NAMES.get(fmt, fmt)} ({rule.source}, read {rule.read}): "
            f"the request would be refused; {CONVERT[modality]}"
        )
    return ""


@functools.cache
def accepted(path: Path | None = None) -> tuple[Accepted, ...]:
    """The entries of ``formats.toml`` (shipped beside this module), checked."""
    path = path or Path(__file__).resolve().parent / "formats.toml"
    data = read_toml(path, "accepted-formats table", PriceError)
    entries = data.get("provider", [])
    if not isinstance(entries, list):
        raise PriceError(f"{path}: 'provider' must be an array of tables ([[provider]])")
    return tuple(_entry(e, f"{path} provider {i}") for i, e in enumerate(entries))


def _entry(entry: Any, where: str) -> Accepted:
    if not isinstance(entry, dict) or set(entry) - KEYS or not isinstance(entry.get("name"), str):
        raise PriceError(f"{where}: a table with a 'name' and keys among {', '.join(sorted(KEYS))}")
    names = {key: entry.get(key, []) for key in ("providers", "families")}
    if not all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in names.values()):
        raise PriceError(f"{where}: 'providers' and 'families' must be lists of strings")
    rules = {m: _rule(entry[m], f"{where} {m}") for m in MODALITIES if m in entry}
    return Accepted(entry["name"], tuple(names["providers"]), tuple(names["families"]), rules)


def _rule(table: Any, where: str) -> Rule:
    if not isinstance(table, dict) or set(table) - RULE_KEYS:
        raise PriceError(f"{where}: a table with keys among {', '.join(sorted(RULE_KEYS))}")
    formats = table.get("formats")
    if not isinstance(formats, list) or not formats or not all(f in NAMES for f in formats):
        raise PriceError(f"{where}: 'formats' must list format names among {', '.join(sorted(NAMES))}")
    if not isinstance(table.get("read"), dt.date) or not isinstance(table.get("source"), str):
        raise PriceError(f"{where}: 'source' (the provider's page) and 'read' (the date it was read) are required")
    return Rule(frozenset(formats), table["source"], table["read"], str(table.get("quote", "")))
