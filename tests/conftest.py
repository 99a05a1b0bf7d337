"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtok.samples import samples_dir


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
