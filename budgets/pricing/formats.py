"""Which file formats each provider's API takes, per modality (``formats.toml``), and the warning a quote carries
when an input's format is not among them: the request would be refused, or the file must be converted first,
whatever it costs.

A provider's entry applies to the models of its families: fnmatch patterns on the names of the families shipped in
``families.toml`` (a family of your own sheet, say "openai-compatible-vllm", is never matched), unless the model
was asked for under one of ``unless_asked`` (``vertex_ai/...``: Vertex AI's list is not the Gemini API's). A
modality an entry does not list is not checked; self-hosted families have no entry (what they take depends on the
serving stack).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmtok.errors import PriceError
from mmtok.files import read_toml

MODALITIES = ("image", "audio", "video")
KEYS = frozenset({"name", "families", "unless_asked", *MODALITIES})
RULE_KEYS = frozenset({"formats", "source", "read", "quote", "animated_gif"})
ANIMATED_GIF = ("refused", "first frame")  # what the provider's page says of an animated GIF
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
    "audio": "convert it first, e.g. `ffmpeg -i FILE out.wav`",
    "video": "convert it first, e.g. `ffmpeg -i FILE -c copy out.mp4` (or re-encode where the codecs do not fit)",
}


@dataclass(frozen=True)
class Rule:
    """The formats one provider takes for one modality, with the page they come from."""

    formats: frozenset[str]  # mmtok format names
    source: str
    read: dt.date
    quote: str  # the page's own words
    animated_gif: str = ""  # "" (not said) | "refused" (still GIFs only) | "first frame" (only it is read)


@dataclass(frozen=True)
class Accepted:
    """One provider's accepted input formats."""

    name: str
    families: tuple[str, ...]
    unless_asked: tuple[str, ...]
    rules: dict[str, Rule]  # modality -> rule

    def applies_to(self, asked: str, family: str) -> bool:
        return any(fnmatch.fnmatchcase(family, p) for p in self.families) and not any(
            fnmatch.fnmatchcase(asked.lower(), p) for p in self.unless_asked
        )


def format_warning(model: Any, item: Any) -> str:
    """A note when ``model``'s provider does not take ``item``'s file format ("" when it does, or nothing is
    known); a video's sound track travels inside its container, so only the container is checked."""
    modality, fmt = getattr(item, "kind", None), getattr(item, "format", None)
    if modality not in MODALITIES or not fmt or getattr(item, "path", None) is None or model.family is None:
        return ""
    verdict = _verdict(model.asked, model.family.name, modality, fmt)
    if verdict or fmt != "gif":
        return verdict
    found = _applying(model.asked, model.family.name, modality)
    if found is None or not found[1].animated_gif or not _animated(*_file_key(item.path)):
        return ""
    entry, rule = found
    page = f"({rule.source}, read {rule.read})"
    if rule.animated_gif == "first frame":
        return f"{entry.name} reads only the first frame of an animated GIF {page}: the rest is not seen"
    return (
        f"{entry.name} takes GIFs that are not animated {page}, and this one is: send its first frame "
        f"(`mmtok shrink -m {model.asked}` writes it as {_image_written('gif', rule.formats)})"
    )


def animation_refused(model: Any) -> bool:
    """The model's provider takes still GIFs only (an animated one must be sent as its first frame)."""
    found = None if model.family is None else _applying(model.asked, model.family.name, "image")
    return found is not None and found[1].animated_gif == "refused"


def _file_key(path: Any) -> tuple[str, int, int]:
    """A file's path, size and modification time: a file replaced since is read again."""
    try:
        stat = os.stat(path)
    except OSError:
        return str(path), -1, -1
    return str(path), stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=1024)
def _animated(path: str, size: int, mtime_ns: int) -> bool:
    """Whether the GIF at ``path`` (as it was at this size and time) is animated."""
    from mmtok.headers import gif_is_animated

    return bool(gif_is_animated(path))


def taken_formats(model: Any, modality: str) -> frozenset[str] | None:
    """The file formats ``model``'s provider takes for ``modality`` (mmtok names); None when nothing is known
    (self-hosted families, a family of your own sheet, a modality the provider's entry does not list)."""
    found = None if model.family is None else _applying(model.asked, model.family.name, modality)
    return None if found is None else found[1].formats


@functools.lru_cache(maxsize=4096)
def _applying(asked: str, family: str, modality: str) -> tuple[Accepted, Rule] | None:
    """The first entry that applies to the model and lists ``modality``, with its rule."""
    if family not in _shipped_families():
        return None
    for entry in accepted():
        rule = entry.rules.get(modality)
        if rule is not None and entry.applies_to(asked, family):
            return entry, rule
    return None


@functools.lru_cache(maxsize=4096)
def _verdict(asked: str, family: str, modality: str, fmt: str) -> str:
    """``format_warning``'s note for one model name, family, modality and format (a folder repeats them)."""
    found = _applying(asked, family, modality)
    if found is None or fmt in found[1].formats:
        return ""
    entry, rule = found
    listed = ", ".join(sorted(NAMES[f] for f in rule.formats))
    return (
        f"{entry.name} takes {modality} as {listed}, not {NAMES.get(fmt, fmt)} ({rule.source}, read {rule.read}): "
        f"the request would be refused; {_conversion(asked, modality, fmt, rule.formats)}"
    )


def _conversion(asked: str, modality: str, fmt: str, taken: frozenset[str]) -> str:
    """How to get a file the provider takes: ``mmtok shrink`` writes images and recordings in a format the model's
    provider takes (converting them when nothing cheaper is found); a video's container is named."""
    if modality == "image" and taken & {"jpeg", "png", "webp"}:
        return f"`mmtok shrink -m {asked}` writes it as {_image_written(fmt, taken)}"
    if modality == "audio" and taken & {"wav", "flac", "ogg", "aiff"}:
        from mmtok.budgets.shrink.audio import output_format  # imported only when a warning is written

        return f"`mmtok shrink -m {asked}` writes it as {NAMES[output_format(fmt, taken)[2]]}"
    return CONVERT.get(modality, "convert it first")


def _image_written(fmt: str, taken: frozenset[str]) -> str:
    from mmtok.budgets.shrink.pictures import output_format, written_name  # imported only when a warning is written

    opaque, clear = (NAMES[written_name(output_format(fmt, alpha, taken)[1])] for alpha in (False, True))
    which = "it has transparency or is lossless" if fmt == "webp" else "it has transparency"
    text = opaque if opaque == clear else f"{opaque} ({clear} if {which})"
    return text + (" or lossless WebP when smaller" if opaque == "PNG" and "webp" in taken else "")


@functools.cache
def accepted(path: Path | None = None) -> tuple[Accepted, ...]:
    """The entries of ``formats.toml`` (shipped beside this module), checked."""
    path = path or Path(__file__).resolve().parent / "formats.toml"
    data = read_toml(path, "accepted-formats table", PriceError)
    entries = data.get("provider", [])
    if not isinstance(entries, list):
        raise PriceError(f"{path}: 'provider' must be an array of tables ([[provider]])")
    return tuple(_entry(e, f"{path} provider {i}") for i, e in enumerate(entries))


@functools.cache
def _shipped_families() -> frozenset[str]:
    from mmtok.budgets.pricing.sheets import families

    return frozenset(f.name for f in families())


def _entry(entry: Any, where: str) -> Accepted:
    if not isinstance(entry, dict) or set(entry) - KEYS or not isinstance(entry.get("name"), str):
        raise PriceError(f"{where}: a table with a 'name' and keys among {', '.join(sorted(KEYS))}")
    names = {key: entry.get(key, []) for key in ("families", "unless_asked")}
    if not all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in names.values()):
        raise PriceError(f"{where}: 'families' and 'unless_asked' must be lists of strings")
    rules = {m: _rule(entry[m], f"{where} {m}") for m in MODALITIES if m in entry}
    return Accepted(entry["name"], tuple(names["families"]), tuple(names["unless_asked"]), rules)


def _rule(table: Any, where: str) -> Rule:
    if not isinstance(table, dict) or set(table) - RULE_KEYS:
        raise PriceError(f"{where}: a table with keys among {', '.join(sorted(RULE_KEYS))}")
    formats = table.get("formats")
    if not isinstance(formats, list) or not formats or not all(f in NAMES for f in formats):
        raise PriceError(f"{where}: 'formats' must list format names among {', '.join(sorted(NAMES))}")
    if not isinstance(table.get("read"), dt.date) or not isinstance(table.get("source"), str):
        raise PriceError(f"{where}: 'source' (the provider's page) and 'read' (the date it was read) are required")
    animated = table.get("animated_gif", "")
    if animated and (animated not in ANIMATED_GIF or "gif" not in formats):
        raise PriceError(f"{where}: 'animated_gif' is one of {', '.join(ANIMATED_GIF)}, for a list that takes GIF")
    return Rule(frozenset(formats), table["source"], table["read"], str(table.get("quote", "")), animated)
