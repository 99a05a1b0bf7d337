"""What every mmtok training command shares: TOML configs, device and process-group set-up, and one training
skeleton, :class:`Loop`, that runs the learning-rate schedule, gradient clipping, logging, checkpoints and resume,
evaluation hooks and data-parallel training. A trainer (``models/train_*.py``) brings only its model, its loss
(a ``step`` callable that runs the forward and backward passes) and its data.

Multi-process runs use ``torchrun``: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` in the environment turn on
``torch.distributed`` (gloo on CPU, NCCL on CUDA). Every process starts from rank 0's weights and trains on its
own batches (``batch_size`` is per process); after each backward pass the gradients are averaged over the
processes, so every copy takes the same step. Rank 0 logs and writes files; the other ranks' trainers return None.

Checkpoints: every ``checkpoint_every`` steps, ``train_state.safetensors`` in the output folder holds the model,
its optimizer, the step and every random state the run draws from (torch's, and the trainer's own generators and
counters, per rank); ``resume`` continues from it and takes the same steps as a run that was never stopped (with
the same number of processes). A second model trained alongside (the VQ's discriminator) has its own
``<name>_state.safetensors``. Tensors and a JSON header only, never pickle.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from mmtok.errors import CheckpointError, ConfigError
from mmtok.files import read_toml

C = TypeVar("C")
STATE_FILE = "train_state.safetensors"
_HEADER = "mmtok_training_state"


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


def select_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but no CUDA device is available")
    return device


@dataclasses.dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_mean(self, value: float, device: torch.device) -> float:
        if not self.enabled:
            return value
        t = torch.tensor([value], device=device, dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item()) / self.world_size

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (it fills a cache), then the other ranks (they read it)."""
        if self.enabled and not self.is_main:
            dist.barrier()
        try:
            yield
        finally:
            if self.enabled and self.is_main:
                dist.barrier()


@contextmanager
def distributed(device_request: str = "auto") -> Iterator[tuple[Distributed, torch.device]]:
    """Set up ``torch.distributed`` when launched by torchrun; yields (context, device). A process group the
    caller has already set up is used, and left to it to close."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ctx = Distributed(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    device = select_device(device_request)
    created = False
    if ctx.enabled:
        if device.type == "cuda":
            device = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            created = True
    try:
        yield ctx, device
        if created:
            dist.barrier()  # every rank is done (rank 0 has saved) before any closes the group
    finally:
        if created:
            dist.destroy_process_group()


def cosine_lr(step: int, total: int, warmup: int, base: float, final_fraction: float = 0.05) -> float:
    """Linear warm-up, then cosine decay to ``final_fraction`` of the base rate."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))


def split_decay(model: torch.nn.Module) -> list[dict[str, Any]]:
    """AdamW parameter groups: no weight decay on biases, norms, embeddings and scalars."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "embedding" in name or "norm" in name or "ln_" in name else decay).append(p)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


# ------------------------------------------------------------------------------------------------ data order
class ShuffledBatches:
    """Endless batches of a map-style dataset in the order ``DataLoader(shuffle=True, drop_last=True,
    generator=torch.Generator().manual_seed(seed))`` gives epoch after epoch, or with ``world_size > 1`` in
    ``DistributedSampler(shuffle=True, seed=seed)``'s order for this rank (``set_epoch`` each epoch), that can start
    at any batch: ``taken`` (a tensor the loop checkpoints) counts the batches handed out, and a resumed run's
    first batch is the one an uninterrupted run would have drawn next."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        seed: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
    ) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.collate_fn, self.num_workers = collate_fn, num_workers
        self.taken = torch.zeros((), dtype=torch.int64)
        self._batches: Iterator[Any] | None = None
        size = len(dataset)
        per_rank = math.ceil(size / world_size) if world_size > 1 else size
        if per_rank < batch_size:
            where = f" on each of {world_size} processes" if world_size > 1 else ""
            raise ConfigError(f"{size} training samples are too few for one batch of {batch_size}{where}")

    def _index_batches(self, start: int) -> Iterator[list[int]]:
        size, b = len(self.dataset), self.batch_size
        if self.world_size > 1:  # DistributedSampler: a permutation per epoch, padded, then every world-th index
            total = math.ceil(size / self.world_size) * self.world_size
            per_epoch = (total // self.world_size) // b
            epoch, offset = divmod(start, per_epoch)
            while True:
                order = torch.randperm(size, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
                order = (order * math.ceil(total / size))[:total][self.rank : total : self.world_size]
                for i in range(offset, per_epoch):
                    yield order[i * b : (i + 1) * b]
                epoch, offset = epoch + 1, 0
        # DataLoader(shuffle=True, generator=g), re-iterated each epoch, draws from g: a base seed for its workers,
        # the epoch's permutation, and one more permutation when the sampler runs out (RandomSampler's tail)
        generator = torch.Generator().manual_seed(self.seed)
        epoch, offset = divmod(start, size // b)
        for _ in range(epoch):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            torch.randperm(size, generator=generator)
            torch.randperm(size, generator=generator)
        while True:
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            order = torch.randperm(size, generator=generator).tolist()
            for i in range(offset, size // b):
                yield order[i * b : (i + 1) * b]
            torch.randperm(size, generator=generator)
            offset = 0

    def __iter__(self) -> ShuffledBatches:
        return self

    def __next__(self) -> Any:
        if self._batches is None:  # started on first use, after a resume has restored ``taken``
            from torch.utils.data import DataLoader

            loader = DataLoader(
                self.dataset,
                batch_sampler=self._index_batches(int(self.taken)),
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                generator=torch.Generator(),  # the workers' base seed; never torch's global generator
            )
            self._batches = iter(loader)
        batch = next(self._batches)
        self.taken += 1
        return batch


# ------------------------------------------------------------------------------------------------ train state
RandomSource = torch.Generator | random.Random


def _module_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """``model/<name>`` and ``optim/<param index>/<key>`` tensors, and the optimizer's JSON part."""
    tensors = {f"model/{k}": v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    opt = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for index, state in opt["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                tensors[f"optim/{index}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": opt["param_groups"], "scalars": scalars}


def write_state(path: Path, tensors: dict[str, torch.Tensor], header: dict[str, Any]) -> None:
    """One safetensors file, written atomically (a crash never leaves half a file)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file(tensors, str(partial), metadata={_HEADER: json.dumps(header)})
    os.replace(partial, path)


def read_state(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as f:
            header = json.loads((f.metadata() or {})[_HEADER])
        return header, load_file(str(path))
    except Exception as e:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: not an mmtok training state: {e}") from None


def _load_module_state(
    path: Path,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    header: dict[str, Any],
    tensors: dict[str, torch.Tensor],
) -> None:
    weights = {k[len("model/") :]: v for k, v in tensors.items() if k.startswith("model/")}
    own = module.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in weights and weights[k].shape != v.shape
    ]
    problems = [
        f"{len(names)} {what} tensor(s) e.g. {', '.join(names[:3])}"
        for what, names in (("missing", missing), ("unexpected", unexpected), ("mismatched", shapes))
        if names
    ]
    if problems:
        raise CheckpointError(f"{path}: the training state does not match the model: {'; '.join(problems)}")
    module.load_state_dict(weights)
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optim/"):
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
    for index, values in header["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    try:
        optimizer.load_state_dict({"state": state, "param_groups": header["param_groups"]})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: the optimizer state does not fit: {e}") from None


def _random_state(
    rngs: Mapping[str, RandomSource], state: Mapping[str, torch.Tensor], device: torch.device
) -> dict[str, torch.Tensor]:
    """This process's random states and counters as tensors (``rng/...``, ``state/...``)."""
    out = {"rng/torch": torch.get_rng_state()}
    if device.type == "cuda":
        out["rng/cuda"] = torch.cuda.get_rng_state(device)
    for name, source in rngs.items():
        if isinstance(source, random.Random):
            version, words, gauss = source.getstate()
            out[f"rng/{name}"] = torch.tensor(words, dtype=torch.int64)
            extra = [version, math.nan if gauss is None else gauss]
            out[f"rng/{name}.python"] = torch.tensor(extra, dtype=torch.float64)
        else:
            out[f"rng/{name}"] = source.get_state()
    for name, tensor in state.items():
        out[f"state/{name}"] = tensor.detach().cpu().clone()
    return out


def _set_random_state(
    saved: Mapping[str, torch.Tensor],
    rngs: Mapping[str, RandomSource],
    state: Mapping[str, torch.Tensor],
    device: torch.device,
) -> list[str]:
    """Restore what :func:`_random_state` saved; returns the names the file did not hold (left as they are)."""
    absent = []
    if "rng/torch" in saved:
        torch.set_rng_state(saved["rng/torch"])
    else:
        absent.append("rng/torch")
    if device.type == "cuda" and "rng/cuda" in saved:
        torch.cuda.set_rng_state(saved["rng/cuda"], device)
    for name, source in rngs.items():
        key = f"rng/{name}"
        if key not in saved:
            absent.append(key)
        elif isinstance(source, random.Random):
            version, gauss = saved[f"{key}.python"].tolist()
            words = tuple(int(w) for w in saved[key].tolist())
            source.setstate((int(version), words, None if math.isnan(gauss) else gauss))
        else:
            source.set_state(saved[key])
    for name, tensor in state.items():
        key = f"state/{name}"
        if key not in saved:
            absent.append(key)
        else:
            tensor.copy_(saved[key])
    return absent


# ------------------------------------------------------------------------------------------------ the loop
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
        own = _random_state(self.rngs, self.state, self.device)
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
            tensors, header = _module_state(part.module, part.optimizer)
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
            _load_module_state(part_path, part.module, part.optimizer, part_header, part_tensors)
        prefix = f"rank{self.ctx.rank}/" if self.ctx.rank else ""
        mine = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        absent = _set_random_state(mine, self.rngs, self.state, self.device)
        self.last = dict(header.get("last_metrics", {}))
        self.elapsed = float(header.get("seconds", 0.0))
        saved_world = int(header.get("world_size", 1))
        reasons = [f"it holds no {', '.join(absent)} (an older mmtok's, or another trainer's)"] if absent else []
        if saved_world != self.ctx.world_size:
            reasons.append(f"it was saved by {saved_world} process(es), this run has {self.ctx.world_size}")
        if self.ctx.is_main and reasons:
            print(f"note: {path}: {'; '.join(reasons)}: the run goes on, but not as an uninterrupted one would")
        if self.ctx.is_main:
            _cut_log(self.out / "train_log.jsonl", self.start)
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


def _cut_log(path: Path, step: int) -> None:
    """Drop the records a stopped run logged after its last checkpoint (a resumed run logs those steps again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if _logged_at(line) <= step]
    partial = path.with_suffix(".partial")
    partial.write_text("".join(kept), encoding="utf-8")
    os.replace(partial, path)


def _logged_at(line: str) -> float:
    try:
        return float(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return math.inf  # a torn last line


class TrainLog:
    """Progress bar with live metrics on rank 0, plus ``train_log.jsonl`` in the output folder."""

    def __init__(
        self, out: Path, total_steps: int, start_step: int, enabled: bool, title: str, elapsed: float = 0.0
    ) -> None:
        self.enabled = enabled
        self.out = out
        self.started = time.perf_counter() - elapsed  # a resumed run's seconds go on from the checkpoint's
        self.bar = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        # a resumed run goes on with its log (cut back to its checkpoint); a run from step 0 starts a new one, so
        # the log of an earlier run in the same folder is never mixed into this one's
        self.log = (out / "train_log.jsonl").open("a" if start_step > 0 else "w", encoding="utf-8")
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn(title),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task(title, total=total_steps, completed=start_step, metrics="")

    def step(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        if not self.enabled:
            return
        if metrics:
            text = "  ".join(f"{k} {v:.4g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in metrics.items())
            self.bar.update(self.task, completed=step, metrics=text)
            record = {"step": step, "seconds": round(time.perf_counter() - self.started, 2), **metrics}
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        else:
            self.bar.update(self.task, completed=step)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
            self.log.close()
