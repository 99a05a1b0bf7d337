"""The MoE benchmark's page-fault count and its --keep-freed-memory switch (glibc), each in a fresh process so the
allocator setting never reaches the test process."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc"
)

SCRIPT = """
import sys, torch
from mmtok.eval.bench.moe import counting_faults, keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
faults = []
step = counting_faults(lambda: torch.ones(16 * 2**20).sum(), faults)  # 64 MiB, freed after each call
for _ in range(8):
    step()
print(*faults)
"""


def _faults(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.split()]


def test_a_64_mib_tensor_faults_in_fresh_pages_every_time_by_default() -> None:
    faults = _faults("default")
    assert all(n >= 64 * 2**20 // 4096 // 2 for n in faults), faults  # 4 KiB pages; at least half of them


def test_keep_freed_memory_reuses_the_block_without_faults() -> None:
    faults = _faults("keep")
    assert faults[0] >= 64 * 2**20 // 4096 // 2, faults  # the first touch still faults
    reused = [n < 1000 for n in faults[2:]]  # then the freed block is mostly reused (glibc sometimes takes new pages)
    assert sum(reused) >= 4, faults
