"""Models by name: ``models/configs/*.toml`` is the registry.

Each config file names one model and the class that builds it::

    name = "vq-clip-tiny"
    kind = "tokenizer"                      # tokenizer | teacher | backbone | critic
    modality = "image"
    class = "mmtok.models.vq:VQTokenizer"   # imported only when the model is asked for
    weights = "../weights/vq-clip-tiny"     # optional: a save_pretrained() folder, relative to this file
    description = "..."
    [options]                               # optional keyword arguments for the class

Config folders are searched in order: the shipped ``models/configs``, then each folder in ``MMTOK_CONFIG_PATH``
(``os.pathsep``-separated), then folders added with :func:`add_config_dir`; a later definition of a name wins.
Reading the registry imports no model code, so ``list_tokenizers()`` is instant.

Trust boundary: a file never chooses code. ``class`` must be one of :data:`MODEL_CLASSES` (mmtok's own model
classes); Python code that wants a class of its own registers it with :func:`register_class` first. Names read
from data files (a token file's ``tokenizer``, a checkpoint's ``image_tokenizer``) go through
:func:`get_registered`, which takes registry names only, never a path.
"""

from __future__ import annotations

import difflib
import importlib
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError, MmtokError
from mmtok.files import read_json, read_toml

KINDS = ("tokenizer", "teacher", "backbone", "critic")
# The only classes a config file or a checkpoint's config.json may name, with the kind each one is.
MODEL_CLASSES: dict[str, str] = {
    "mmtok.models.vq:VQTokenizer": "tokenizer",
    "mmtok.models.av:AVTokenizer": "tokenizer",
    "mmtok.models.text:ByteTokenizer": "tokenizer",
    "mmtok.models.text:TiktokenTokenizer": "tokenizer",
    "mmtok.models.teacher:Teacher": "teacher",
    "mmtok.models.backbone:Backbone": "backbone",
    "mmtok.models.critics:TokenCritic": "critic",
}
_extra_dirs: list[Path] = []


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    kind: str
    class_path: str  # "package.module:ClassName"
    source: Path  # the config file
    modality: str | None = None
    weights: Path | None = None
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def load_class(self) -> type:
        return import_class(self.class_path, where=str(self.source))

    def build(self, **options: Any) -> Any:
        """Instantiate: ``from_pretrained(weights)`` when the entry has weights, else the class's constructor."""
        cls = self.load_class()
        merged = {**self.options, **options}
        if self.weights is not None:
            if not self.weights.exists():
                raise ConfigError(f"{self.source}: weights folder {self.weights} does not exist")
            return cls.from_pretrained(self.weights, **merged)
        return cls(**merged)


def add_config_dir(path: str | os.PathLike[str]) -> None:
    """Make the ``*.toml`` configs in ``path`` part of the registry for this process."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: config folder does not exist")
    if folder not in _extra_dirs:
        _extra_dirs.append(folder)


def config_dirs() -> list[Path]:
    builtin = Path(str(resources.files("mmtok.models") / "configs"))
    env = [Path(p) for p in os.environ.get("MMTOK_CONFIG_PATH", "").split(os.pathsep) if p]
    return [builtin, *env, *_extra_dirs]


def read_config(path: str | os.PathLike[str]) -> RegistryEntry:
    """Parse one registry config file, with errors that name the file and the field."""
    path = Path(path)
    data = read_toml(path, "config")
    known = {"name", "kind", "class", "modality", "weights", "description", "options"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    for key in ("name", "kind", "class"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ConfigError(f"{path}: '{key}' is required and must be a non-empty string")
    if data["kind"] not in KINDS:
        raise ConfigError(f"{path}: kind must be one of {', '.join(KINDS)}, got {data['kind']!r}")
    check_class(data["class"], data["kind"], str(path))
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{path}: [options] must be a table")
    weights = (path.parent / data["weights"]).resolve() if data.get("weights") else None
    return RegistryEntry(
        name=data["name"],
        kind=data["kind"],
        class_path=data["class"],
        source=path,
        modality=data.get("modality"),
        weights=weights,
        description=data.get("description", ""),
        options=options,
    )


def entries() -> dict[str, RegistryEntry]:
    """All registered models by name (later config folders override earlier ones)."""
    found: dict[str, RegistryEntry] = {}
    for folder in config_dirs():
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                entry = read_config(path)
                found[entry.name] = entry
    return found


def list_models(kind: str | None = None, modality: str | None = None) -> list[RegistryEntry]:
    return [
        e
        for e in sorted(entries().values(), key=lambda e: e.name)
        if (kind is None or e.kind == kind) and (modality is None or e.modality == modality)
    ]


def list_tokenizers(modality: str | None = None) -> list[str]:
    """Names of the registered tokenizers (optionally of one modality)."""
    return [e.name for e in list_models("tokenizer", modality)]


def get_entry(name: str, kind: str | None = None) -> RegistryEntry:
    known = entries()
    candidates = {n: e for n, e in known.items() if kind is None or e.kind == kind}
    if name in candidates:
        return candidates[name]
    what = kind or "model"
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    available = ", ".join(sorted(candidates)) or "none registered"
    raise ConfigError(f"unknown {what} {name!r}{hint} (available: {available})")


def get_model(name_or_path: str | os.PathLike[str], kind: str | None = None, **options: Any) -> Any:
    """A model by registry name, by ``.toml`` config path, or by ``save_pretrained()`` folder."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        entry = read_config(path)
        _check_kind(entry.kind, kind, str(path))
        return entry.build(**options)
    if path.is_dir():
        return _from_folder(path, kind, **options)
    entry = get_entry(str(name_or_path), kind)
    return entry.build(**options)


def get_tokenizer(name_or_path: str | os.PathLike[str], **options: Any) -> Any:
    """A tokenizer by registry name (``mmtok.list_tokenizers()``), config path or pretrained folder."""
    return get_model(name_or_path, kind="tokenizer", **options)


def _from_folder(path: Path, kind: str | None, **options: Any) -> Any:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{path}: not a pretrained model folder (no config.json)")
    config = read_json(config_file, "model config")
    class_path = config.get("class") if isinstance(config, dict) else None
    if not isinstance(class_path, str):
        raise ConfigError(f"{config_file}: missing 'class' (which model class wrote this folder?)")
    check_class(class_path, None, str(config_file))
    _check_kind(MODEL_CLASSES[class_path], kind, str(config_file))
    return import_class(class_path, where=str(config_file)).from_pretrained(path, **options)


def _check_kind(actual: str | None, wanted: str | None, where: str) -> None:
    if wanted is not None and actual is not None and actual != wanted:
        raise ConfigError(f"{where}: is a {actual}, not a {wanted}")


def register_class(class_path: str, kind: str) -> None:
    """Allow configs to name ``class_path`` ("package.module:ClassName", a class of ``kind``). Call it from your
    own Python code: that is where the choice to run a class belongs, never in a file mmtok reads."""
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if class_path.count(":") != 1 or not all(class_path.partition(":")[::2]):
        raise ConfigError(f"class must look like 'package.module:ClassName', got {class_path!r}")
    MODEL_CLASSES[class_path] = kind


def check_class(class_path: str, kind: str | None, where: str) -> None:
    """Refuse any class that is not an mmtok model class (or one registered from Python) of ``kind``."""
    if class_path not in MODEL_CLASSES:
        raise ConfigError(
            f"{where}: class {class_path!r} is not an mmtok model class (allowed: {', '.join(sorted(MODEL_CLASSES))}); "
            "a class of your own must be registered from Python with mmtok.registry.register_class"
        )
    if kind is not None and MODEL_CLASSES[class_path] != kind:
        raise ConfigError(f"{where}: {class_path} is a {MODEL_CLASSES[class_path]}, not a {kind}")


def get_registered(name: Any, kind: str, where: str, error: type[MmtokError] = ConfigError) -> Any:
    """A model by registry name only: for names that come from data files, where a path must never be followed."""
    if not isinstance(name, str) or not name:
        raise error(f"{where}: names no {kind} (got {name!r}); choose one explicitly")
    if name not in {e.name for e in list_models(kind)}:
        available = ", ".join(list_tokenizers() if kind == "tokenizer" else [e.name for e in list_models(kind)])
        raise error(
            f"{where}: names {kind} {name!r}, which is not a registered {kind} (registered: {available}); "
            f"a file can only name registered models, so choose yours explicitly"
        )
    return get_entry(name, kind).build()


@dataclass(frozen=True)
class TokenLimits:
    """What a tokenizer's sequences can hold, read from its config without building it (token files are checked
    against it before any tensor is read): the modalities it makes, the ids' range (``vocab``, None: not known
    without loading it), codebook levels per token, and the embedding widths it writes."""

    name: str
    modalities: tuple[str, ...]
    vocab: int | None
    levels: int  # ids are [N] when 1, else [N] or [N, C] with C <= levels
    embedding_dims: tuple[int, ...]


# The published encodings' n_vocab (tiktoken's Encoding.n_vocab; tests/test_registry.py checks them against it).
TIKTOKEN_VOCAB = {"cl100k_base": 100_277, "o200k_base": 200_019}
BYTE_TOKENIZER_VOCAB = 259  # 256 bytes + BOS/EOS/PAD (mmtok.models.text.ByteTokenizer.vocab_size)


def token_limits(name: str) -> TokenLimits | None:
    """The :class:`TokenLimits` of the registered tokenizer ``name`` (None when it is not one): from its config
    file and its weights' ``config.json``, with no model code imported, so ``inspect`` and ``price`` stay light."""
    entry = {e.name: e for e in list_models("tokenizer")}.get(name)
    if entry is None:
        return None
    config: dict[str, Any] = {}
    if entry.weights is not None and (entry.weights / "config.json").is_file():
        stored = read_json(entry.weights / "config.json", "model config")
        config = stored.get("config", {}) if isinstance(stored, dict) else {}
        config = config if isinstance(config, dict) else {}
    config = {**entry.options, **config}
    return _class_limits(entry.class_path, name, config)


def _class_limits(class_path: str, name: str, config: dict[str, Any]) -> TokenLimits | None:
    """Each tokenizer class's sequences, from its config values (the classes' own defaults where one is absent)."""

    def value(key: str, default: int) -> int:
        got = config.get(key, default)
        return got if isinstance(got, int) and not isinstance(got, bool) and got > 0 else default

    if class_path == "mmtok.models.vq:VQTokenizer":
        quantizer = config.get("quantizer", "vq")
        levels = config.get("fsq_levels", [8, 5, 5, 5])
        fsq = isinstance(levels, list) and all(isinstance(v, int) and v > 0 for v in levels)
        vocab = math.prod(levels) if quantizer == "fsq" and fsq else value("codebook_size", 1024)
        codebooks = value("num_quantizers", 2) if quantizer == "rvq" else 1
        return TokenLimits(name, ("image",), vocab, codebooks, (value("teacher_dim", 128),))
    if class_path == "mmtok.models.av:AVTokenizer":
        return TokenLimits(
            name, ("audio", "video"), value("codebook_size", 1024), value("num_quantizers", 8), (value("d_model", 256),)
        )
    if class_path == "mmtok.models.text:ByteTokenizer":
        return TokenLimits(name, ("text",), BYTE_TOKENIZER_VOCAB, 1, ())
    if class_path == "mmtok.models.text:TiktokenTokenizer":
        return TokenLimits(name, ("text",), TIKTOKEN_VOCAB.get(str(config.get("encoding", "o200k_base"))), 1, ())
    return None  # a class registered from Python: the generic caps only


def import_class(class_path: str, where: str) -> type:
    check_class(class_path, None, where)
    module_name, _, attr = class_path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{where}: cannot import {module_name!r} for class {class_path!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{where}: module {module_name!r} has no {attr!r}") from None
