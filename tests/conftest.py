"""Shared fixtures, and the tests of the core install.

The tests in :data:`CORE_TESTS` test what ``pip install mmtok`` gives without extras: they are marked ``core`` here.
``make test`` runs them in ``.venv-core`` (mmtok with no extras, plus the test tools: no torch), where a core
command that imports torch or any extra fails, then the rest in ``.venv``. On such an install only those files are
collected (the others import torch and the extras at their top).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mmtok.samples import samples_dir

CORE_ONLY = importlib.util.find_spec("torch") is None  # this interpreter has the core alone

# The test files (every test in them) or single tests (file::name) that run on the core install: pricing, request
# bodies, inspect, the proxy, ledger, calibrate, mcp, hook and shrink with the pixel bars. A test added to one of
# these files is a core test: it must need no extra.
CORE_TESTS = frozenset(
    {
        "test_core_install.py",
    }
)


def _is_core(nodeid: str) -> bool:
    path, _, name = nodeid.partition("::")
    file = Path(path).name
    return file in CORE_TESTS or f"{file}::{name.split('[')[0]}" in CORE_TESTS


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """On the core install, a test file with no core test is not imported."""
    if CORE_ONLY and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        name = collection_path.name
        return not any(entry == name or entry.startswith(f"{name}::") for entry in CORE_TESTS)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_core(item.nodeid):
            item.add_marker(pytest.mark.core)


@pytest.fixture(scope="session")
def samples() -> Path:
    return samples_dir()


@pytest.fixture(autouse=True)
def pillow_pixel_limit():
    """`--max-pixels` above Pillow's own limit raises Pillow's (a process-wide setting, as a CLI run should);
    the CLI tests run in this process, so each test gets Pillow's limit back."""
    import PIL.Image

    limit = PIL.Image.MAX_IMAGE_PIXELS
    yield
    PIL.Image.MAX_IMAGE_PIXELS = limit
