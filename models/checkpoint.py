"""Weights on disk: safetensors only, never pickle.

A pretrained folder holds ``config.json`` (the model class, its kind, its dataclass config, and how it was trained)
and ``model.safetensors`` (the state dict). Loading checks every tensor name and shape against the model built from
the config, so a folder whose config and weights disagree fails with a message that says which tensors differ.
Model classes get ``save_pretrained`` / ``from_pretrained`` from :class:`Pretrained` and declare only what differs.

Training state (for ``--resume``) is one safetensors file too: model and optimizer tensors plus a JSON header with
the step, the optimizer's hyper-parameters and the config.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from mmtok.errors import CheckpointError, ConfigError
from mmtok.files import read_json

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl")


def save_pretrained(
    folder: str | os.PathLike[str],
    model: nn.Module,
    *,
    class_path: str,
    kind: str,
    config: Any,
    extra: dict[str, Any] | None = None,
    storage_dtype: torch.dtype | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``folder``.

    ``storage_dtype`` (e.g. ``torch.float16``) halves the file for shipping; loading casts back to the model's dtype.
    """
    from safetensors.torch import save_file

    if any(getattr(m, "expert_parallel", False) for m in model.modules()):
        raise CheckpointError(
            "this model holds only this process's slice of its experts (expert parallelism): save a single-process "
            "copy loaded from mmtok.models.expert_parallel.gather_state_dict(model)"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if storage_dtype is not None:
        state = {k: v.to(storage_dtype) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    payload = {"class": class_path, "kind": kind, "config": _config_dict(config), **(extra or {})}
    (folder / CONFIG_FILE).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return folder


def _config_dict(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    raise CheckpointError(f"config must be a dataclass or dict, got {type(config).__name__}")


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``config.json`` of a pretrained folder; refuses pickle checkpoints with a clear message."""
    folder = Path(folder)
    if folder.is_file():
        if folder.suffix in _PICKLE_SUFFIXES:
            raise CheckpointError(
                f"{folder}: pickle checkpoints are not loaded (they can run code); convert the weights to safetensors"
            )
        raise CheckpointError(f"{folder}: expected a pretrained folder with {CONFIG_FILE} and {WEIGHTS_FILE}")
    path = folder / CONFIG_FILE
    if not path.is_file():
        pickles = [p.name for p in folder.glob("*") if p.suffix in _PICKLE_SUFFIXES] if folder.is_dir() else []
        if pickles:
            raise CheckpointError(
                f"{folder}: holds only pickle checkpoints ({', '.join(pickles)}), which are not "
                "loaded (they can run code); convert the weights to safetensors"
            )
        raise CheckpointError(f"{folder}: not a pretrained model folder (no {CONFIG_FILE})")
    data = read_json(path, "model config", CheckpointError, max_bytes=1 << 20)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: a model config must be a JSON object")
    return data


def config_from_dict(cls: type, data: Any, where: str) -> Any:
    """Build a dataclass config, naming unknown fields and values of the wrong type instead of failing deep inside
    the model (``codebook_size = 1e9`` is a float, refused here; a huge int is caught by :func:`build_checked`)."""
    if not isinstance(data, dict):
        raise CheckpointError(f"{where}: 'config' must be a JSON object")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise CheckpointError(f"{where}: unknown config field(s) {', '.join(unknown)} for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if not _fits(value, hints.get(name, Any)):
            raise CheckpointError(f"{where}: config field {name} = {value!r:.60} is not a {_type_name(hints[name])}")
    return cls(**data)


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list) or hint in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return isinstance(value, (list, tuple)) and all(any(_fits(v, a) for a in args) or not args for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type this check does not model: left to the constructor


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def weight_shapes(folder: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of ``model.safetensors``, read from its header alone (no tensor data)."""
    from safetensors import SafetensorError, safe_open

    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder}: no {WEIGHTS_FILE}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file: {e}") from None


def weights_fingerprint(model: nn.Module) -> str:
    """A short hash of a model's weights (the first values of every tensor), so caches follow retraining."""
    import hashlib

    digest = hashlib.sha1()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().flatten()[:256].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:10]


def check_ranges(config: Any, limits: dict[str, tuple[int, int]]) -> None:
    """Each named field of ``config`` an integer (or a list of integers) within its (low, high): a config file
    cannot ask for a billion layers (building even an empty skeleton of them takes minutes) or a size that
    overflows. A ``ConfigError`` names the field."""
    for name, (low, high) in limits.items():
        value = getattr(config, name)
        values = value if isinstance(value, list) else [value]
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in values):
            what = "a list of integers" if isinstance(value, list) else "an integer"
            raise ConfigError(f"{name} must be {what} from {low} to {high}, got {value!r}")


def build_checked(
    folder: str | os.PathLike[str], build: Callable[[], nn.Module], part: Callable[[nn.Module], nn.Module] = lambda m: m
) -> nn.Module:
    """``build()`` once on the meta device (which allocates nothing) and compare its tensors with the weight file's
    header, then build it for real: a config that asks for a 32 GB model next to a small file fails before any
    memory is taken. ``part`` picks the module the weights belong to."""
    expected = weight_shapes(folder)
    try:
        with torch.device("meta"):
            skeleton = part(build())
    except (TypeError, ValueError, RuntimeError, AssertionError, ZeroDivisionError, IndexError, KeyError) as e:
        raise CheckpointError(f"{folder}: its config does not describe a model: {e}") from None
    check_shapes({k: tuple(v.shape) for k, v in skeleton.state_dict().items()}, expected, str(folder))
    return build()


def load_weights(folder: str | os.PathLike[str], model: nn.Module) -> None:
    """Load ``model.safetensors`` into ``model``, strictly: names and shapes must match the config's model."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder}: no {WEIGHTS_FILE}")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file: {e}") from None
    check_state(model, state, str(path))
    model.load_state_dict(state, strict=True)


def load_pretrained(
    cls: type,
    folder: str | os.PathLike[str],
    *,
    class_path: str,
    config_class: type,
    what: str,
    part: Callable[[nn.Module], nn.Module] = lambda m: m,
    hint: Callable[[Any], str] | None = None,
) -> Any:
    """Rebuild a model saved by ``save_pretrained``: check its class, build it from its config (sizes checked
    against the weight file first), load the weights; returned in eval mode. ``what`` names the expected model in
    the error ("a VQ tokenizer"); ``part`` picks the module the weights belong to; ``hint(config)`` is added to an
    error where the config and the weights disagree."""
    data = read_config(folder)
    if data.get("class") != class_path:
        raise CheckpointError(f"{folder}: holds a {str(data.get('class'))[:80]}, not {what}")
    config = config_from_dict(config_class, data.get("config", {}), str(folder))
    name = data.get("name", Path(folder).name)
    try:
        model = build_checked(folder, lambda: cls(config, name=str(name)), part)
        load_weights(folder, part(model))
    except CheckpointError as e:
        note = hint(config) if hint is not None else ""
        if not note:
            raise
        raise CheckpointError(f"{e} {note}") from None
    return model.eval()


_P = TypeVar("_P", bound="Pretrained")


class Pretrained:
    """``save_pretrained`` / ``from_pretrained`` for mmtok's model classes (mixed in before ``nn.Module``), through
    :func:`save_pretrained` and :func:`load_pretrained` with all their checks. A class declares what differs:

    - ``CLASS_PATH``: "mmtok.models.vq:VQTokenizer", written as the folder's ``class`` and required on load
    - ``kind``: "tokenizer", "teacher", "backbone" or "critic" (the registry's kind), written as ``kind``
    - ``CONFIG_CLASS``: the dataclass in ``self.config``, rebuilt on load with its field names and types checked
    - ``WHAT``: the model in the error for a folder of another class ("a VQ tokenizer")
    - ``STORAGE_DTYPE``: the floats' dtype on disk (``torch.float16`` halves the file; ``None``: as they are)
    - ``weights_module()``: the module whose state dict is the weight file (the model itself unless overridden)
    - ``load_hint(config)``: text added to the error when the config and the weights disagree ("" for none)

    The constructor takes ``(config, name=...)``; ``self.name`` is saved in ``config.json`` with the ``extra``
    fields of :meth:`save_pretrained` (``trained_by``, ``training``, ...)."""

    CLASS_PATH: ClassVar[str]
    CONFIG_CLASS: ClassVar[type]
    WHAT: ClassVar[str]
    STORAGE_DTYPE: ClassVar[torch.dtype | None] = torch.float16
    kind: ClassVar[str]
    config: Any
    name: str

    def weights_module(self) -> nn.Module:
        return typing.cast(nn.Module, self)

    @classmethod
    def load_hint(cls, config: Any) -> str:
        return ""

    def save_pretrained(self, folder: str | os.PathLike[str], **extra: Any) -> Path:
        """Write ``config.json`` (class, kind, config, name, ``extra``) and ``model.safetensors`` into ``folder``."""
        return save_pretrained(
            folder,
            self.weights_module(),
            class_path=self.CLASS_PATH,
            kind=self.kind,
            config=self.config,
            extra={"name": self.name, **extra},
            storage_dtype=self.STORAGE_DTYPE,
        )

    @classmethod
    def from_pretrained(cls: type[_P], folder: str | os.PathLike[str], device: str | None = None, **_: Any) -> _P:
        """The model ``save_pretrained`` wrote to ``folder``, in eval mode (on ``device`` when given)."""
        model = load_pretrained(
            cls,
            folder,
            class_path=cls.CLASS_PATH,
            config_class=cls.CONFIG_CLASS,
            what=cls.WHAT,
            part=lambda m: m.weights_module(),
            hint=cls.load_hint,
        )
        return model.to(device) if device else model


def check_state(model: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    check_shapes(
        {k: tuple(v.shape) for k, v in model.state_dict().items()}, {k: tuple(v.shape) for k, v in state.items()}, where
    )


def check_shapes(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], where: str) -> None:
    """Names and shapes the model has (``expected``) against those in the file (``found``)."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = [f"{k}: file {found[k]} vs config {v}" for k, v in expected.items() if k in found and found[k] != v]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s) e.g. {', '.join(missing[:3])}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s) e.g. {', '.join(unexpected[:3])}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es) e.g. {'; '.join(shapes[:3])}")
    if problems:
        raise CheckpointError(f"{where}: weights do not match the config: {'; '.join(problems)}")
