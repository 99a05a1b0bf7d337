"""Small sample media shipped with mmtok, made by real encoders from real data (see eval/tools/make_samples.py)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from mmtok.errors import MediaError

_DIR = Path(str(resources.files(__name__) / "media"))
MANIFEST = "manifest.json"  # what each sample is: data about the samples, not one of them


def samples_dir() -> Path:
    return _DIR


def requests_dir() -> Path:
    """The sample API request bodies (made by each provider's SDK: ``python -m mmtok.eval.tools.sdk_bodies``)."""
    return _DIR.parent / "requests"


def batches_dir() -> Path:
    """The sample batch files (made with each provider's SDK: ``python -m mmtok.eval.tools.sdk_batches``)."""
    return _DIR.parent / "batches"


def list_samples() -> list[str]:
    """File names of the shipped samples."""
    return sorted(p.name for p in _DIR.iterdir() if p.is_file() and not p.name.startswith("."))


def sample_path(name: str) -> Path:
    """Path of one shipped sample, e.g. ``sample_path("astronaut.png")``."""
    path = _DIR / name
    if not path.is_file():
        raise MediaError(name, f"no such sample; available: {', '.join(list_samples())}")
    return path


def manifest() -> dict[str, dict]:
    """What each sample is and how it was made; speech has its ``transcript``, videos their ``events_s``."""
    return json.loads((_DIR / MANIFEST).read_text(encoding="utf-8"))
