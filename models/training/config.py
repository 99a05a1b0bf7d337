"""Training configs: a TOML file's ``[model]`` and ``[train]`` sections read into dataclasses, every unknown section
or key named; :class:`LoopConfig` holds the ``[train]`` keys every trainer shares."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, TypeVar

from mmtok.errors import ConfigError
from mmtok.files import read_toml

C = TypeVar("C")


def read_toml_config(path: str | os.PathLike[str], sections: dict[str, type]) -> dict[str, Any]:
    """Parse a training config: each ``[section]`` into its dataclass, unknown sections and keys named."""
    path = Path(path)
    data = read_toml(path, "training config")
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; expected {', '.join(sections)}")
    return {name: dataclass_from(cls, data.get(name, {}), f"{path} [{name}]") for name, cls in sections.items()}


def dataclass_from(cls: type[C], values: dict[str, Any], where: str) -> C:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(fields)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


@dataclasses.dataclass
class LoopConfig:
    """The ``[train]`` keys every trainer shares; each trainer's config extends it with its own keys and defaults."""

    steps: int = 1000
    lr: float = 1e-3
    warmup_steps: int = 100
    seed: int = 0
    log_every: int = 25
    checkpoint_every: int = 250  # steps between writes of train_state.safetensors; 0: never
    eval_every: int = 0  # steps between evaluations logged during training (trainers with one); 0: only at the end
    grad_clip: float = 0.0  # largest total gradient norm, per model; 0: no clipping
    out: str = ""
    name: str = ""


def read_train_config(
    path: str | os.PathLike[str], model_cls: type, train_cls: type, *, out: str | None = None, steps: int | None = None
) -> tuple[Any, Any]:
    """A trainer's ``[model]`` and ``[train]`` sections, with the command line's ``--out`` and ``--steps``."""
    cfg = read_toml_config(path, {"model": model_cls, "train": train_cls})
    train = cfg["train"]
    if out:
        train.out = out
    if steps is not None:
        train.steps = steps
    return cfg["model"], train
