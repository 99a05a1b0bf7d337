"""CLIP teachers: any open_clip model, or mmtok's own small CLIP trained offline with open_clip's model and loss.

    teacher = Teacher.from_pretrained("clip-tiny")                      # shipped, trained by `mmtok train clip`
    teacher = Teacher.from_pretrained("open_clip:ViT-B-32/laion2b_s34b_b79k")   # online users: hub weights
    teacher = Teacher.from_pretrained("hf-hub:timm/ViT-B-16-SigLIP")           # online users: HF hub
    teacher = Teacher.from_pretrained("open_clip:ViT-B-32@/path/weights.safetensors")  # a local checkpoint

Images go in as float ``[B, 3, H, W]`` in [-1, 1] and are resized and normalised for the model here. Features come
out l2-normalised; ``tokens=True`` also returns the patch tokens projected into the same embedding space.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.errors import CheckpointError, ConfigError
from mmtok.models import checkpoint

CLASS_PATH = "mmtok.models.teacher:Teacher"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class TeacherConfig:
    embed_dim: int = 128  # joint image-text embedding size
    image_size: int = 64  # input resolution of the vision tower
    patch_size: int = 8  # ViT patch: image_size / patch_size patches per side
    vision_width: int = 128
    vision_layers: int = 4
    vision_head_width: int = 32
    text_context: int = 24  # caption length in BPE tokens
    text_width: int = 128
    text_heads: int = 4
    text_layers: int = 3
    open_clip_model: str = ""  # set for hub / local open_clip models; empty for mmtok's own architecture
    open_clip_pretrained: str = ""


def build_clip(config: TeacherConfig) -> nn.Module:
    """mmtok's small CLIP: open_clip's own ``CLIP`` class with a ViT sized for 64-px inputs."""
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    vision = CLIPVisionCfg(
        image_size=config.image_size,
        patch_size=config.patch_size,
        width=config.vision_width,
        layers=config.vision_layers,
        head_width=config.vision_head_width,
        output_tokens=True,
    )
    text = CLIPTextCfg(
        context_length=config.text_context,
        vocab_size=49408,
        width=config.text_width,
        heads=config.text_heads,
        layers=config.text_layers,
    )
    return open_clip.CLIP(embed_dim=config.embed_dim, vision_cfg=vision, text_cfg=text)


class Teacher(checkpoint.Pretrained, nn.Module):
    kind = "teacher"
    CLASS_PATH = CLASS_PATH
    CONFIG_CLASS = TeacherConfig
    WHAT = "a CLIP teacher"

    def __init__(self, config: TeacherConfig | None = None, clip: nn.Module | None = None, name: str = "") -> None:
        super().__init__()
        self.config = config or TeacherConfig()
        self.clip = clip if clip is not None else build_clip(self.config)
        self.clip.visual.output_tokens = True
        self.name = name or "clip"
        size = self.clip.visual.image_size
        self.input_size = int(size[0] if isinstance(size, tuple | list) else size)
        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)
        self._tokenizer: Any = None

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike[str], device: str | None = None, **options: Any
    ) -> Teacher:
        """A hub spec (``open_clip:...``, ``hf-hub:...``), a registered teacher's name, or a saved folder."""
        spec = str(name_or_path)
        if spec.startswith(("open_clip:", "hf-hub:")):
            teacher = cls._from_open_clip(spec)
            return teacher.to(device) if device else teacher
        path = Path(spec)
        if not path.exists():
            from mmtok.registry import get_entry

            entry = get_entry(spec, kind="teacher")
            if entry.weights is None:
                raise ConfigError(f"{entry.source}: teacher {spec!r} names no weights")
            return cls.from_pretrained(entry.weights, device, **options)
        return super().from_pretrained(path, device, **options)

    def weights_module(self) -> nn.Module:
        return self.clip  # the file is open_clip's own state dict (no "clip." prefix)

    @classmethod
    def _from_open_clip(cls, spec: str) -> Teacher:
        """Hub or local open_clip weights. Local files must be safetensors (open_clip loads them as such)."""
        import open_clip

        if spec.startswith("hf-hub:"):
            model = open_clip.create_model(spec)
            config = TeacherConfig(open_clip_model=spec)
        else:
            arch, pretrained = _open_clip_weights(spec[len("open_clip:") :])
            model = open_clip.create_model(arch, pretrained=pretrained or None)
            config = TeacherConfig(open_clip_model=arch, open_clip_pretrained=pretrained)
        config.embed_dim = int(model.text_projection.shape[1]) if hasattr(model, "text_projection") else 0
        return cls(config, model, name=spec).eval()

    def save_pretrained(self, folder: str | os.PathLike[str], **extra: Any) -> Path:
        if self.config.open_clip_model:
            raise CheckpointError("hub teachers are loaded from their source, not re-saved by mmtok")
        return super().save_pretrained(folder, **extra)

    # ------------------------------------------------------------------------------------------------ features
    @property
    def embed_dim(self) -> int:
        return int(self.clip.visual.proj.shape[1]) if self.clip.visual.proj is not None else self.config.embed_dim

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        x = (images.float() + 1) / 2  # [-1, 1] -> [0, 1]
        if x.shape[-1] != self.input_size or x.shape[-2] != self.input_size:
            x = F.interpolate(
                x, size=(self.input_size, self.input_size), mode="bilinear", antialias=True, align_corners=False
            )
        return (x - self.mean) / self.std

    def encode_image(self, images: torch.Tensor, tokens: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """l2-normalised image features ``[B, D]``; with ``tokens``, also patch tokens ``[B, N, D]``."""
        pooled, patch = self.clip.visual(self._prepare(images))  # pooled (B, D); patch (B, N, width)
        pooled = F.normalize(pooled, dim=-1)
        if not tokens:
            return pooled
        proj = self.clip.visual.proj
        patch = patch @ proj if proj is not None else patch  # (B, N, D)
        return pooled, F.normalize(patch, dim=-1)

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        if self._tokenizer is None:
            import open_clip

            if self.config.open_clip_model:
                self._tokenizer = open_clip.get_tokenizer(self.config.open_clip_model)
            else:
                self._tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=self.config.text_context)
        return self._tokenizer(texts)

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        device = next(self.parameters()).device
        return F.normalize(self.clip.encode_text(self.tokenize(texts).to(device)), dim=-1)

    @torch.no_grad()
    def zero_shot_weights(self, classnames: list[str], templates: tuple[str, ...] = ("a photo of {}",)) -> torch.Tensor:
        """Class embeddings ``[C, D]``: the normalised mean of each class's prompts."""
        weights = []
        for name in classnames:
            prompts = [t.format(name) for t in templates]
            weights.append(F.normalize(self.encode_text(prompts).mean(0), dim=-1))
        return torch.stack(weights)


PRETRAINED_TAG = re.compile(r"[A-Za-z0-9_.-]+")  # open_clip's pretrained tags (laion2b_s34b_b79k, openai, ...)


def _open_clip_weights(rest: str) -> tuple[str, str]:
    """``ARCH``, ``ARCH/TAG`` (open_clip's download by tag) or ``ARCH@/path/weights.safetensors`` -> (arch, what
    open_clip's ``pretrained`` gets). A tag is a tag, never a path: open_clip would ``torch.load`` a path, and pickle
    can run code, so local weights are taken only as safetensors after ``@``."""
    if "@" in rest:
        arch, _, local = rest.partition("@")
        if not local.endswith(".safetensors"):
            raise CheckpointError(f"{local}: only safetensors checkpoints are loaded (pickle can run code)")
        return arch, local
    arch, _, tag = rest.partition("/")
    if tag and not PRETRAINED_TAG.fullmatch(tag):
        raise CheckpointError(
            f"open_clip:{rest}: {tag!r} is not a pretrained tag; local weights are named as "
            "open_clip:ARCH@/path/weights.safetensors (safetensors only: pickle can run code)"
        )
    return arch, tag
