"""Benchmark: one MoE layer's dispatch against the HF-style per-expert loop and the dense FFN of equal active FLOPs.

Run: ``python -m mmtok.eval.bench.moe [--device cpu|cuda] [--tokens 8192] [--repeats 7]``.

Two shapes, as in the issue: E = 8, D = 512, F = 1024, top-2; and fine-grained E = 64, D = 512, F = 256, top-8.
For each, forward and forward+backward tokens/s of (a) mmtok's dispatch (``auto``: segment loop on CPU, grouped_mm
for bf16 on CUDA; both paths are also shown), (b) the per-expert gather/index_add_ loop (HF Mixtral's), and (c) a
dense SwiGLU FFN with hidden size K x F, i.e. the same active FLOPs per token — the limit an MoE layer cannot beat in
FLOPs. (c) as written makes T x K F intermediates (64 MB each at the default size); (c') runs the same dense FFN over
1,024-token chunks, so its working set is what one MoE expert's is: the compute limit without (c)'s memory traffic.
All run in the same process, interleaved; medians of ``--repeats``. CUDA runs use bf16. The JSON records torch,
the thread count, the load average before and after (the machine may be shared), and each path's minor page faults
per step (median): glibc hands blocks of more than 32 MiB back to the kernel when they are freed, so a step whose
tensors are that large pays fresh page faults every time (the dense FFN's T x K F intermediates are 64 MB at the
default size, and the E64 layer's weight gradients 32 MiB each). ``--keep-freed-memory`` (glibc only) raises
glibc's mmap and trim thresholds for the whole run, so freed memory is reused without faults: the ratios without
the allocator's part. Rows (d) and (e) time the matrix products alone, on operands of each layer's shapes (the
experts' rows as routed): their ratio is the part of (a) / (c) that the smaller expert products cost by their shape,
before any gathering, scattering or elementwise work.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mmtok.eval.bench import machine, print_table, time_interleaved, write_json
from mmtok.models.moe import MoE, MoEConfig
from mmtok.models.training import select_device

SHAPES = {
    "E8-top2": dict(num_experts=8, hidden_dim=1024, top_k=2),
    "E64-top8": dict(num_experts=64, hidden_dim=256, top_k=8),
}


class DenseSwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ChunkedDense(nn.Module):
    """The same dense FFN over runs of ``rows`` tokens."""

    def __init__(self, dense: DenseSwiGLU, rows: int = 1024) -> None:
        super().__init__()
        self.dense, self.rows = dense, rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.dense(chunk) for chunk in x.split(self.rows)])


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, glibc's malloc.h


def keep_freed_memory() -> None:
    """Make glibc keep freed memory for reuse instead of unmapping it (thresholds of 1 and 2 GiB), for this process."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError as exc:
        raise SystemExit(f"bench_moe: --keep-freed-memory needs glibc ({exc})") from None
    if not (libc.mallopt(M_MMAP_THRESHOLD, 2**30) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        raise SystemExit("bench_moe: glibc refused mallopt (--keep-freed-memory)")


def counting_faults(fn: Callable[[], None], faults: list[int]) -> Callable[[], None]:
    """``fn`` that appends the minor page faults of each call to ``faults``."""

    def run() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fn()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    return run


def gemm_cases(moe: MoE, dense: DenseSwiGLU, x: torch.Tensor, backward: bool) -> dict[str, Callable[[], None]]:
    """The matrix products alone, on operands of the layer's shapes: each expert's (its routed rows of this ``x``)
    and the dense FFN's, forward (x W1, x W3, h W2) and, with ``backward``, the five products of the segments'
    backward (the output gradient through W2, W2's, W1's and W3's weight gradients, the input gradient through W1
    and W3). Their time ratio is what the shapes alone cost against dense, whatever the dispatch around them."""
    counts = torch.bincount(moe.router(x).experts.flatten(), minlength=moe.cfg.num_experts).tolist()
    w = moe.experts
    kw = {"device": x.device, "dtype": x.dtype}

    def operands(rows: int, d: int, f: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(*shape, **kw) for shape in ((rows, d), (rows, f), (rows, d)))

    experts = [(e, *operands(n, w.w1_EDF.shape[1], w.w1_EDF.shape[2])) for e, n in enumerate(counts) if n]
    W1, W3, W2 = (layer.weight.detach().T for layer in (dense.w1, dense.w3, dense.w2))
    whole = operands(x.shape[0], W1.shape[0], W1.shape[1])

    def products(x_ND, h_NF, g_ND, w1, w3, w2) -> None:
        x_ND @ w1, x_ND @ w3, h_NF @ w2
        if backward:
            grad_h = g_ND @ w2.T
            h_NF.T @ g_ND, x_ND.T @ grad_h, x_ND.T @ grad_h, (grad_h @ w1.T).addmm_(grad_h, w3.T)

    def expert_products() -> None:
        with torch.no_grad():
            for e, *ops in experts:
                products(*ops, w.w1_EDF[e], w.w3_EDF[e], w.w2_EFD[e])

    def dense_products() -> None:
        with torch.no_grad():
            products(*whole, W1, W3, W2)

    return {EXPERT_PRODUCTS: expert_products, DENSE_PRODUCTS: dense_products}


EXPERT_PRODUCTS, DENSE_PRODUCTS = "(d) the experts' matrix products alone", "(e) the dense FFN's products alone"


def product_floors(results: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per shape and mode: the experts' products' time over the dense FFN's (the floor of (a) / (c))."""
    return {key: rates[DENSE_PRODUCTS] / rates[EXPERT_PRODUCTS] for key, rates in results.items()}


def ratios(results: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per shape and mode, each path's time over the dense FFN's and its speed over the HF loop's."""
    out = {}
    for key, rates in results.items():
        dense, loop = rates["(c) dense FFN, same active FLOPs"], rates["(b) per-expert loop (HF)"]
        out[key] = {name.strip(): {"time / dense": dense / r, "speed / loop": r / loop} for name, r in rates.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep-freed-memory", action="store_true", help="glibc keeps freed memory (no refaults)")
    args = parser.parse_args()
    if args.keep_freed_memory:
        keep_freed_memory()
    device = select_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    results = {}
    faults: dict[str, dict[str, float]] = {}
    loads: list[float] = []
    for shape, kw in SHAPES.items():
        moe = MoE(MoEConfig(dim=args.dim, **kw)).to(device, dtype).eval()
        dense = DenseSwiGLU(args.dim, kw["top_k"] * kw["hidden_dim"]).to(device, dtype)
        x = torch.randn(args.tokens, args.dim, device=device, dtype=dtype)
        paths = {
            "(a) mmtok dispatch (auto)": "auto",
            "    fused per-expert segments": "segment",
            "    grouped_mm": "grouped_mm",
            "(b) per-expert loop (HF)": "loop",
        }

        def moe_run(path: str, backward: bool, moe: MoE = moe, x: torch.Tensor = x):
            def run() -> None:
                moe.cfg.dispatch = path
                inp = x.detach().requires_grad_(backward)
                with torch.set_grad_enabled(backward):
                    y, _ = moe(inp)
                    if backward:
                        y.float().pow(2).mean().backward()
                if device.type == "cuda":
                    torch.cuda.synchronize()

            return run

        def dense_run(backward: bool, dense: nn.Module = dense, x: torch.Tensor = x):
            def run() -> None:
                inp = x.detach().requires_grad_(backward)
                with torch.set_grad_enabled(backward):
                    y = dense(inp)
                    if backward:
                        y.float().pow(2).mean().backward()
                if device.type == "cuda":
                    torch.cuda.synchronize()

            return run

        for mode, backward in (("forward", False), ("forward+backward", True)):
            cases = {name: moe_run(path, backward) for name, path in paths.items()}
            cases["(c) dense FFN, same active FLOPs"] = dense_run(backward)
            cases["(c') dense FFN in 1,024-token chunks"] = dense_run(backward, ChunkedDense(dense))
            cases.update(gemm_cases(moe, dense, x, backward))
            for fn in cases.values():
                fn()  # warm-up (kernels, allocator)
            step_faults: dict[str, list[int]] = {name: [] for name in cases}
            cases = {name: counting_faults(fn, step_faults[name]) for name, fn in cases.items()}
            loads.append(os.getloadavg()[0])
            seconds = time_interleaved(cases, args.repeats)
            loads.append(os.getloadavg()[0])
            results[f"{shape} {mode}"] = {name: args.tokens / s for name, s in seconds.items()}
            faults[f"{shape} {mode}"] = {name: statistics.median(f) for name, f in step_faults.items()}
    print(
        f"bench_moe: {args.tokens} tokens, D={args.dim}, device {device} ({dtype}), median of {args.repeats}. "
        f"{machine()}"
        + (f"; {torch.cuda.get_device_name()}" if device.type == "cuda" else "")
        + f"; torch {torch.__version__}, {torch.get_num_threads()} threads; load average {min(loads):.2f}-"
        f"{max(loads):.2f}"
    )
    for key, rates in results.items():
        dense_rate = rates["(c) dense FFN, same active FLOPs"]
        chunked_rate = rates["(c') dense FFN in 1,024-token chunks"]
        loop_rate = rates["(b) per-expert loop (HF)"]
        rows = [
            [name, rate, dense_rate / rate, chunked_rate / rate, rate / loop_rate, faults[key][name]]
            for name, rate in rates.items()
        ]
        print_table(key, ["path", "tokens/s", "time / (c)", "time / (c')", "speed / loop", "page faults / step"], rows)
        floor = product_floors(results)[key]
        print(f"  the expert shapes' products alone take {floor:.3g}x the dense FFN's: the floor of (a) / (c) here")
    write_json(
        args.json,
        {
            "device": str(device),
            "dtype": str(dtype),
            "tokens": args.tokens,
            "repeats": args.repeats,
            "results": results,
            "ratios": ratios(results),
            "products_alone_expert_over_dense": product_floors(results),
            "machine": machine(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda if device.type == "cuda" else None,
            "threads": torch.get_num_threads(),
            "load_average_range": [min(loads), max(loads)],
            "minor_page_faults_per_step": faults,
            "allocator": "glibc, freed memory kept (--keep-freed-memory)" if args.keep_freed_memory else "default",
        },
    )


if __name__ == "__main__":
    main()
