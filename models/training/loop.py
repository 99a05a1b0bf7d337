"""The training skeleton every ``mmtok train`` command runs: :class:`Loop` steps the schedule, averages and clips
gradients, logs, checkpoints and resumes; a trainer brings its models (:class:`Part`) and a ``step`` callable."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mmtok.errors import CheckpointError
from mmtok.models.training.config import LoopConfig
from mmtok.models.training.log import TrainLog, cut_log
from mmtok.models.training.optim import cosine_lr
from mmtok.models.training.processes import Distributed
from mmtok.models.training.state import (
    STATE_FILE,
    RandomSource,
    load_module_state,
    module_state,
    random_state,
    read_state,
    set_random_state,
    write_state,
)


@dataclasses.dataclass
class Part:
    """One model the loop trains and checkpoints, with its optimizer."""

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduled: bool = True  # the rate follows the config's warm-up and cosine; False: the optimizer's own, fixed


@dataclasses.dataclass
class LoopResult:
    """What a finished loop hands back on rank 0."""

    start: int  # the step this run started at (0, or where it resumed)
    last: dict[str, float]  # the last step's metrics (this process's)
    evaluation: dict[str, Any]  # the final evaluation's result ({} without an evaluation hook)


Metrics = Mapping[str, float | torch.Tensor]


class Loop:
    """The training skeleton. ``parts`` are the models trained (``"model"``, the one the trainer saves, first),
    ``rngs`` the generators the trainer draws its data from and ``state`` tensors it keeps across steps (counters,
    running sums): both are checkpointed per rank, so that a resumed run draws what an uninterrupted one would.

    Per step: every scheduled optimizer's rate is set (:func:`cosine_lr`), gradients zeroed, ``step(index)``
    called (the trainer's forward and backward passes; it returns its metrics, floats or 0-d tensors), the
    gradients averaged over the processes and clipped to ``grad_clip``, the optimizers stepped and
    ``after_step(index)`` called. Every ``log_every`` steps the metrics (and ``log_extra()``'s) are averaged over
    the processes and logged; every ``checkpoint_every`` steps the state is saved.
    """

    def __init__(
        self,
        config: LoopConfig,
        parts: Part | Mapping[str, Part],
        *,
        ctx: Distributed,
        device: torch.device,
        title: str,
        resume: bool = False,
        meta: dict[str, Any] | None = None,
        rngs: Mapping[str, RandomSource] | None = None,
        state: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.config = config
        self.parts = {"model": parts} if isinstance(parts, Part) else dict(parts)
        if "model" not in self.parts:
            raise ValueError("Loop: the trained model is the part named 'model'")
        self.ctx, self.device, self.title = ctx, device, title
        self.meta = meta or {}
        self.rngs, self.state = dict(rngs or {}), dict(state or {})
        self.out = Path(config.out)
        self.start, self.elapsed, self._started = 0, 0.0, time.perf_counter()
        self.last: dict[str, float] = {}
        fresh = True
        if resume and (self.out / STATE_FILE).is_file():
            fresh = self._load()
        if fresh and ctx.rank:  # ranks draw their own random numbers from here on (rank 0 as a single process)
            torch.manual_seed(config.seed + ctx.rank)
        if ctx.enabled:
            for part in self.parts.values():  # every rank starts from rank 0's weights
                for tensor in part.module.state_dict().values():
                    dist.broadcast(tensor, 0)

    @property
    def model(self) -> torch.nn.Module:
        return self.parts["model"].module

    def _state_path(self, name: str) -> Path:
        return self.out / (STATE_FILE if name == "model" else f"{name}_state.safetensors")

    # ------------------------------------------------------------------------------------------- checkpoints
    def save(self, step: int) -> None:
        """Write the training state at ``step`` (every rank calls this; rank 0 writes)."""
        own = random_state(self.rngs, self.state, self.device)
        gathered = dict(own)
        if self.ctx.enabled:
            for key in sorted(own):
                tensor = own[key].to(self.device)
                copies = [torch.empty_like(tensor) for _ in range(self.ctx.world_size)]
                dist.all_gather(copies, tensor)
                gathered.update({f"rank{r}/{key}": copies[r].cpu() for r in range(1, self.ctx.world_size)})
        if not self.ctx.is_main:
            return
        for name, part in sorted(self.parts.items(), key=lambda item: item[0] == "model"):  # the model's last
            tensors, header = module_state(part.module, part.optimizer)
            header = {"step": step, **header, "meta": self.meta if name == "model" else {}}
            if name == "model":
                tensors.update(gathered)
                header.update(
                    world_size=self.ctx.world_size,
                    seconds=round(self.elapsed + time.perf_counter() - self._started, 2),
                    last_metrics=_floats(self.last),
                )
            else:
                tensors["rng/torch"] = own["rng/torch"]
            write_state(self._state_path(name), tensors, header)

    def _load(self) -> bool:
        """Restore the training state; True when it held no random state for this rank (it starts afresh)."""
        path = self._state_path("model")
        header, tensors = read_state(path)
        self.start = int(header["step"])
        for name, part in self.parts.items():
            part_path = self._state_path(name)
            if name == "model":
                part_header, part_tensors = header, tensors
            elif part_path.is_file():
                part_header, part_tensors = read_state(part_path)
                if int(part_header["step"]) != self.start:
                    raise CheckpointError(
                        f"{part_path}: saved at step {part_header['step']}, but {path} at step {self.start}"
                    )
            else:  # trained from a later step on (or added since): starts afresh
                continue
            load_module_state(part_path, part.module, part.optimizer, part_header, part_tensors)
        prefix = f"rank{self.ctx.rank}/" if self.ctx.rank else ""
        mine = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        absent = set_random_state(mine, self.rngs, self.state, self.device)
        self.last = dict(header.get("last_metrics", {}))
        self.elapsed = float(header.get("seconds", 0.0))
        saved_world = int(header.get("world_size", 1))
        reasons = [f"it holds no {', '.join(absent)} (an older mmtok's, or another trainer's)"] if absent else []
        if saved_world != self.ctx.world_size:
            reasons.append(f"it was saved by {saved_world} process(es), this run has {self.ctx.world_size}")
        if self.ctx.is_main and reasons:
            print(f"note: {path}: {'; '.join(reasons)}: the run goes on, but not as an uninterrupted one would")
        if self.ctx.is_main:
            cut_log(self.out / "train_log.jsonl", self.start)
        return "rng/torch" in absent

    # ------------------------------------------------------------------------------------------- the steps
    def _average_gradients(self) -> None:
        world = self.ctx.world_size
        for part in self.parts.values():
            params = [p for p in part.module.parameters() if p.requires_grad]
            present = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self.device)
            dist.all_reduce(present)  # a gradient any rank has (an expert only its batch used) is zero elsewhere
            params = [p for p, n in zip(params, present.tolist(), strict=True) if n > 0]
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            for dtype in sorted({p.grad.dtype for p in params}, key=str):
                grads = [p.grad for p in params if p.grad.dtype == dtype]
                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat)
                flat /= world
                offset = 0
                for g in grads:
                    g.copy_(flat[offset : offset + g.numel()].view_as(g))
                    offset += g.numel()

    def _mean(self, metrics: Metrics) -> dict[str, float]:
        values = _floats(metrics)
        if not self.ctx.enabled or not values:
            return values
        t = torch.tensor(list(values.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return dict(zip(values, (t / self.ctx.world_size).tolist(), strict=True))

    def _evaluate(self, evaluate: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run an evaluation hook without touching the run: random states forked, training modes restored."""
        modes = {name: part.module.training for name, part in self.parts.items()}
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            result = evaluate()
        for name, part in self.parts.items():
            part.module.train(modes[name])
        return result

    def run(
        self,
        step: Callable[[int], Metrics],
        *,
        after_step: Callable[[int], None] | None = None,
        log_extra: Callable[[], Metrics] | None = None,
        evaluate: Callable[[], dict[str, Any]] | None = None,
        log_evaluation: bool = False,
    ) -> LoopResult | None:
        """Train from the start (or the resumed step) to ``config.steps``. ``evaluate`` runs on rank 0 every
        ``eval_every`` steps (logged) and once at the end (logged with ``log_evaluation``); returns None on the
        other ranks."""
        cfg, ctx = self.config, self.ctx
        self._started = time.perf_counter()
        log = TrainLog(self.out, cfg.steps, self.start, ctx.is_main, self.title, elapsed=self.elapsed)
        last: Metrics = {}
        try:
            for index in range(self.start, cfg.steps):
                rate = cosine_lr(index, cfg.steps, cfg.warmup_steps, cfg.lr)
                for part in self.parts.values():
                    if part.scheduled:
                        for group in part.optimizer.param_groups:
                            group["lr"] = rate
                    part.optimizer.zero_grad(set_to_none=True)
                last = dict(step(index))
                if ctx.enabled:
                    self._average_gradients()
                if cfg.grad_clip > 0:
                    for name, part in self.parts.items():
                        norm = torch.nn.utils.clip_grad_norm_(part.module.parameters(), cfg.grad_clip)
                        last["grad_norm" if name == "model" else f"{name}_grad_norm"] = norm
                for part in self.parts.values():
                    part.optimizer.step()
                if after_step is not None:
                    after_step(index)
                self.last = last  # type: ignore[assignment]
                done = index + 1
                if cfg.log_every > 0 and done % cfg.log_every == 0:
                    log.step(done, self._mean({**last, **(log_extra() if log_extra else {})}))
                else:
                    log.step(done)
                if cfg.checkpoint_every > 0 and done % cfg.checkpoint_every == 0:
                    self.save(done)
                periodic = evaluate is not None and cfg.eval_every > 0 and done % cfg.eval_every == 0
                if periodic and done < cfg.steps and ctx.is_main:
                    log.step(done, self._evaluate(evaluate))
            self.last = _floats(self.last)
            if not ctx.is_main:
                return None
            evaluation = self._evaluate(evaluate) if evaluate is not None else {}
            if evaluation and log_evaluation:
                log.step(cfg.steps, evaluation)
            return LoopResult(self.start, self.last, evaluation)
        finally:
            log.close()


def _floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Metrics as Python numbers (0-d tensors read out; ints stay ints, as trainers logged them)."""
    return {k: v.item() if torch.is_tensor(v) else v for k, v in metrics.items()}
