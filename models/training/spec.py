"""One trainer for every model (torchtitan's ``TrainSpec``): a trainer module registers its parts in a
:class:`TrainSpec` (its two config sections, and a ``build`` that makes its models, optimizers, data and step),
and calling the spec runs it the one way every ``mmtok train`` command runs: read the config, set up the
processes, seed, build, train in a :class:`~mmtok.models.training.loop.Loop`, and on rank 0 save the model with
its training record (``steps``, the ``[train]`` section, and what the trainer adds)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import ConfigError
from mmtok.models.training.config import LoopConfig, read_train_config
from mmtok.models.training.loop import Loop, LoopResult, Metrics, Part
from mmtok.models.training.processes import Distributed, distributed
from mmtok.models.training.state import RandomSource


@dataclasses.dataclass
class Setup:
    """What a spec's ``build`` starts from."""

    model: Any  # the config's [model] section, a TrainSpec.model_config
    train: Any  # its [train] section, a TrainSpec.train_config
    ctx: Distributed
    device: torch.device
    config_path: str | os.PathLike[str]


@dataclasses.dataclass
class Job:
    """What ``build`` hands the loop: the models it trains (``"model"``, the one saved, first), the step, the
    loop's hooks (see :meth:`Loop.run`), and the entries the trainer adds to the saved model's training record."""

    parts: Part | dict[str, Part]
    step: Callable[[int], Metrics]
    record: Callable[[LoopResult], dict[str, Any]]  # the finished run's entries for config.json's "training"
    rngs: dict[str, RandomSource] = dataclasses.field(default_factory=dict)  # generators the data comes from
    state: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # tensors kept across steps
    after_step: Callable[[int], None] | None = None
    log_extra: Callable[[], Metrics] | None = None
    evaluate: Callable[[], dict[str, Any]] | None = None
    log_evaluation: bool = False  # the final evaluation is also a line of train_log.jsonl


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """A trainer: ``mmtok train <kind>``'s config sections and the ``build`` that makes its parts. Calling it
    trains (see :meth:`__call__`); every trainer module's ``train_<kind>`` is its spec."""

    kind: str  # the command: mmtok train <kind>
    model_config: type  # the [model] section's dataclass
    train_config: type[LoopConfig]  # the [train] section's
    build: Callable[[Setup], Job]
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)  # option -> "model"/"train": its key
    device: str = ""  # the one device it trains on (the critic: "cpu"); empty: the caller's
    seed_per_rank: bool = False  # torch is seeded with seed + rank; False: seed (same initial weights everywhere)

    def __call__(
        self,
        config_path: str | os.PathLike[str],
        *,
        out: str | None = None,
        steps: int | None = None,
        resume: bool = False,
        device: str = "auto",
        command: str = "",
        **options: str | None,
    ) -> Path | None:
        """Train from the config at ``config_path`` (``out`` and ``steps`` override its ``[train]`` keys, an
        option of ``options`` the key it names when given) and save the model into ``[train] out``; returns that
        folder, or None on the ranks other than 0 under torchrun. ``resume`` continues from the folder's
        checkpoint; ``command`` is recorded as the model's ``trained_by``."""
        if self.device and device not in ("auto", self.device):
            raise ConfigError(f"train {self.kind} trains on the {self.device} only, not {device!r}")
        model_cfg, train = read_train_config(config_path, self.model_config, self.train_config, out=out, steps=steps)
        self._override({"model": model_cfg, "train": train}, options)
        with distributed(self.device or device) as (ctx, dev):
            torch.manual_seed(train.seed + ctx.rank if self.seed_per_rank else train.seed)
            job = self.build(Setup(model_cfg, train, ctx, dev, config_path))
            loop = Loop(
                train,
                job.parts,
                ctx=ctx,
                device=dev,
                title=f"train {self.kind}",
                resume=resume,
                meta={"config": str(config_path)},
                rngs=job.rngs,
                state=job.state,
            )
            hooks = {"after_step": job.after_step, "log_extra": job.log_extra, "evaluate": job.evaluate}
            result = loop.run(job.step, **hooks, log_evaluation=job.log_evaluation)
            if result is None:
                return None
            record = {"steps": train.steps, "train": dataclasses.asdict(train), **job.record(result)}
            out_dir = Path(train.out)
            trained_by = command or f"mmtok train {self.kind} {config_path}"
            loop.model.eval().cpu().save_pretrained(out_dir, trained_by=trained_by, training=record)
            return out_dir

    def _override(self, sections: dict[str, Any], options: Mapping[str, str | None]) -> None:
        """Each option given (not None or empty) replaces its config key, as ``--teacher`` does the [model]'s."""
        for name, value in options.items():
            if name not in self.options:
                raise TypeError(f"train_{self.kind}() got an unexpected keyword argument {name!r}")
            if value:
                setattr(sections[self.options[name]], name, value)
