"""What every mmtok training command shares: TOML configs, device and process-group set-up, and one training
skeleton, :class:`Loop`, that runs the learning-rate schedule, gradient clipping, logging, checkpoints and resume,
evaluation hooks and data-parallel training, and :class:`TrainSpec`, which runs a trainer the one way every
``mmtok train`` command runs (config, processes, seed, loop, save). A trainer (``models/train_*.py``) is only its
spec: its config sections and a ``build`` that makes its model, its loss (a ``step`` callable that runs the forward
and backward passes) and its data.

Multi-process runs use ``torchrun``: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` in the environment turn on
``torch.distributed`` (gloo on CPU, NCCL on CUDA). Every process starts from rank 0's weights and trains on its
own batches (``batch_size`` is per process); after each backward pass the gradients are averaged over the
processes, so every copy takes the same step. Rank 0 logs and writes files; the other ranks' trainers return None.

Checkpoints: every ``checkpoint_every`` steps, ``train_state.safetensors`` in the output folder holds the model,
its optimizer, the step and every random state the run draws from (torch's, and the trainer's own generators and
counters, per rank); ``resume`` continues from it and takes the same steps as a run that was never stopped (with
the same number of processes). A second model trained alongside (the VQ's discriminator) has its own
``<name>_state.safetensors``. Tensors and a JSON header only, never pickle.

The parts: :mod:`.config` (TOML configs, ``LoopConfig``), :mod:`.processes` (device and ``torch.distributed``),
:mod:`.optim` (schedule, weight-decay groups), :mod:`.batches` (resumable shuffled batches), :mod:`.state`
(checkpoint files), :mod:`.loop` (the skeleton), :mod:`.log` (progress bar and ``train_log.jsonl``) and
:mod:`.spec` (a trainer's parts, and the run every trainer shares).
"""

from mmtok.models.training.batches import ShuffledBatches
from mmtok.models.training.config import LoopConfig, dataclass_from, read_toml_config, read_train_config
from mmtok.models.training.log import TrainLog
from mmtok.models.training.loop import Loop, LoopResult, Metrics, Part
from mmtok.models.training.optim import cosine_lr, split_decay
from mmtok.models.training.processes import Distributed, distributed, select_device
from mmtok.models.training.spec import Job, Setup, TrainSpec
from mmtok.models.training.state import STATE_FILE, RandomSource, read_state, write_state

__all__ = [
    "STATE_FILE",
    "Distributed",
    "Job",
    "Loop",
    "LoopConfig",
    "LoopResult",
    "Metrics",
    "Part",
    "RandomSource",
    "Setup",
    "ShuffledBatches",
    "TrainLog",
    "TrainSpec",
    "cosine_lr",
    "dataclass_from",
    "distributed",
    "read_state",
    "read_toml_config",
    "read_train_config",
    "select_device",
    "split_decay",
    "write_state",
]
