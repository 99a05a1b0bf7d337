"""The MoE benchmark's page-fault count and its --keep-freed-memory switch (glibc), each in a fresh process so the
allocator setting never reaches the test process. The blocks are malloc'd through ctypes: what glibc does with a
freed 64 MiB block, without torch's threads in between."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc"
)

SCRIPT = """
import ctypes, sys
from mmtok.eval.bench.moe import counting_faults, keep_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
if sys.argv[1] == "keep":
    keep_freed_memory()

def step():  # a 64 MiB block written and freed, as a step's intermediates are
    block = libc.malloc(64 << 20)
    libc.memset(block, 1, 64 << 20)
    libc.free(block)

faults = []
run = counting_faults(step, faults)
for _ in range(6):
    run()
print(*faults)
"""
PAGES = 64 * 2**20 // 4096


def _faults(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.split()]


def test_a_freed_64_mib_block_faults_in_fresh_pages_every_time_by_default() -> None:
    faults = _faults("default")
    assert all(n >= PAGES // 2 for n in faults), faults  # glibc unmapped it: every step touches new pages


def test_keep_freed_memory_reuses_the_block_without_faults() -> None:
    faults = _faults("keep")
    assert faults[0] >= PAGES // 2, faults  # the first touch still faults
    assert max(faults[1:]) < 1000, faults  # then the freed block is reused


def test_the_products_alone_run_on_the_layers_shapes_and_give_a_floor() -> None:
    import torch

    from mmtok.eval.bench.moe import DENSE_PRODUCTS, EXPERT_PRODUCTS, DenseSwiGLU, gemm_cases, product_floors
    from mmtok.models.moe import MoE, MoEConfig

    torch.manual_seed(0)
    moe = MoE(MoEConfig(dim=32, hidden_dim=16, num_experts=8, top_k=2)).eval()
    cases = gemm_cases(moe, DenseSwiGLU(32, 32), torch.randn(64, 32), backward=True)
    assert set(cases) == {EXPERT_PRODUCTS, DENSE_PRODUCTS}
    for run in cases.values():
        run()
    floors = product_floors({"E8 fwd": {EXPERT_PRODUCTS: 100.0, DENSE_PRODUCTS: 125.0}})
    assert floors == {"E8 fwd": 1.25}  # rates: the experts' products at 100 tokens/s take 1.25x the dense 125
