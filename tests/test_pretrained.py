"""Every registered model class that holds weights saves and loads through one base, ``checkpoint.Pretrained``:
``config.json`` + ``model.safetensors`` round-trip to the same state dict, config and name, with the class checks
and the device argument shared."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mmtok.errors import CheckpointError
from mmtok.models import checkpoint
from mmtok.registry import MODEL_CLASSES, import_class
from tests.makers import tiny_teacher_config


def tiny(class_path: str) -> nn.Module:
    """A small instance of each weight-holding registered class (a new class needs an entry here)."""
    from mmtok.models.av import AVConfig, AVTokenizer
    from mmtok.models.backbone import Backbone, BackboneConfig
    from mmtok.models.critics import TokenCritic, TokenCriticConfig
    from mmtok.models.teacher import Teacher
    from mmtok.models.vq import VQConfig, VQTokenizer

    makers = {
        "mmtok.models.vq:VQTokenizer": lambda: VQTokenizer(
            VQConfig(image_size=32, channels=16, channel_mult=[1, 2, 2], codebook_size=64, teacher_dim=32,
                     align_width=32, align_heads=2),
            name="vq-t",
        ),
        "mmtok.models.av:AVTokenizer": lambda: AVTokenizer(
            AVConfig(d_model=32, codebook_size=16, num_quantizers=2, decoder_hidden=32, max_positions=16), name="av-t"
        ),
        "mmtok.models.critics:TokenCritic": lambda: TokenCritic(
            TokenCriticConfig(token_dim=8, context_dim=8, hidden=64, embed=16), name="critic-t"
        ),
        "mmtok.models.backbone:Backbone": lambda: Backbone(
            BackboneConfig(dim=32, layers=1, heads=2, moe={"num_experts": 4, "hidden_dim": 32, "top_k": 2},
                           visual_vocab=64, av_dim=16, max_text=16),
            name="bb-t",
        ),
        "mmtok.models.teacher:Teacher": lambda: Teacher(
            tiny_teacher_config(),
            name="clip-t",
        ),
    }  # fmt: skip
    assert class_path in makers, f"{class_path} holds weights: add a tiny instance of it to tests/test_pretrained.py"
    torch.manual_seed(0)
    return makers[class_path]()


WEIGHTED = [path for path in MODEL_CLASSES if issubclass(import_class(path, "test"), nn.Module)]


def test_every_registered_model_with_weights_uses_the_base():
    for path in MODEL_CLASSES:
        cls = import_class(path, "test")
        if path in WEIGHTED:
            assert issubclass(cls, checkpoint.Pretrained), f"{path} saves weights without checkpoint.Pretrained"
            assert path == cls.CLASS_PATH and cls.kind == MODEL_CLASSES[path]
        else:  # the text tokenizers: rules, no weights
            assert not hasattr(cls, "save_pretrained"), path
    assert len(WEIGHTED) == 5


@pytest.mark.parametrize("class_path", WEIGHTED)
def test_save_and_load_round_trip(class_path, tmp_path):
    model = tiny(class_path).eval()
    cls = type(model)
    folder = model.save_pretrained(tmp_path / "m", trained_by="test", training={"steps": 3})
    data = json.loads((folder / "config.json").read_text())
    assert (data["class"], data["kind"], data["name"], data["trained_by"]) == (
        class_path,
        MODEL_CLASSES[class_path],
        model.name,
        "test",
    )
    assert data["training"] == {"steps": 3}
    again = cls.from_pretrained(folder, device="cpu")
    assert type(again) is cls and not again.training
    assert again.config == model.config and again.name == model.name
    before, after = model.state_dict(), again.state_dict()
    assert list(before) == list(after)
    stored = cls.STORAGE_DTYPE
    for key, value in before.items():
        expected = value.to(stored).to(value.dtype) if stored is not None and value.is_floating_point() else value
        assert after[key].dtype == value.dtype and torch.equal(after[key], expected), key
    # the weight file holds the weights module's tensors, in the stored dtype
    shapes = checkpoint.weight_shapes(folder)
    assert shapes == {k: tuple(v.shape) for k, v in model.weights_module().state_dict().items()}


@pytest.mark.parametrize("class_path", WEIGHTED)
def test_a_folder_of_another_class_is_refused_by_name(class_path, tmp_path):
    other = next(p for p in WEIGHTED if p != class_path)
    folder = tiny(other).save_pretrained(tmp_path / "other")
    cls = import_class(class_path, "test")
    with pytest.raises(CheckpointError, match=f"holds a {other}, not {cls.WHAT}"):
        cls.from_pretrained(folder)


def test_long_class_names_are_cut_in_the_error(tmp_path):
    folder = tiny("mmtok.models.backbone:Backbone").save_pretrained(tmp_path / "bb")
    data = json.loads((folder / "config.json").read_text())
    data["class"] = "x" * 500
    (folder / "config.json").write_text(json.dumps(data))
    cls = import_class("mmtok.models.backbone:Backbone", "test")
    with pytest.raises(CheckpointError, match=r"holds a x{80}, not a backbone$"):
        cls.from_pretrained(folder)


def test_a_backbone_moe_table_that_describes_no_moe_is_a_checkpoint_error(tmp_path):
    folder = tiny("mmtok.models.backbone:Backbone").save_pretrained(tmp_path / "bb")
    data = json.loads((folder / "config.json").read_text())
    data["config"]["moe"]["colour"] = 1
    (folder / "config.json").write_text(json.dumps(data))
    cls = import_class("mmtok.models.backbone:Backbone", "test")
    with pytest.raises(CheckpointError, match="its config does not describe a model"):
        cls.from_pretrained(folder)
