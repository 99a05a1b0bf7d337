"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtok.samples import samples_dir


@pytest.fixture(scope="session")
def samples() -> Path:
    return samples_dir()
