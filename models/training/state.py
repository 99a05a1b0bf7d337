"""A run's training state on disk: ``train_state.safetensors`` holds the model, its optimizer, the step and every
random state the run draws from (per rank); tensors and a JSON header only, never pickle, written atomically."""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import CheckpointError

STATE_FILE = "train_state.safetensors"
_HEADER = "mmtok_training_state"
RandomSource = torch.Generator | random.Random


def module_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
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


def load_module_state(
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


def random_state(
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


def set_random_state(
    saved: Mapping[str, torch.Tensor],
    rngs: Mapping[str, RandomSource],
    state: Mapping[str, torch.Tensor],
    device: torch.device,
) -> list[str]:
    """Restore what :func:`random_state` saved; returns the names the file did not hold (left as they are)."""
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
