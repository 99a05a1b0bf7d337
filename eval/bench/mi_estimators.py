"""Benchmark: MI estimator accuracy on correlated Gaussians (the SMILE benchmark, Song & Ermon 2020).

Run: ``python -m mmtok.eval.bench.mi_estimators [--seeds 3] [--steps-per-level 1000] [--critic separable]``.

x ~ N(0, I_20); y = rho x + sqrt(1 - rho^2) e, with rho set so that the true MI is 2, 4, 6, 8, 10 nats; the
"cubic" rows use y^3 (same MI). One critic per estimator and seed is trained through the levels in turn
(``steps-per-level`` Adam steps at 5e-4, batch 64); the estimate of a level is the mean of its last 100 batches.
Table: estimate vs truth, mean ± std over seeds. InfoNCE can never exceed log(batch) = 4.16 nats. Then KSG
(non-parametric) on low-dimensional pairs: d = 1 and 2, N = 5,000, true MI 1 nat.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import numpy as np
import torch

from mmtok import mi
from mmtok.eval.bench import machine, write_json
from mmtok.models.critics import ConcatCritic, SeparableCritic, fit_critic

LEVELS = (2.0, 4.0, 6.0, 8.0, 10.0)
DIM = 20


def sampler(true_mi: float, cubic: bool, generator: torch.Generator):
    rho = mi.rho_for_mi(true_mi, DIM)

    def sample(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, DIM, generator=generator)
        y = rho * x + math.sqrt(1 - rho**2) * torch.randn(batch, DIM, generator=generator)
        return x, y**3 if cubic else y

    return sample


def run(estimator: str, cubic: bool, seed: int, steps: int, batch: int, critic_kind: str) -> list[float]:
    torch.manual_seed(seed)
    critic = SeparableCritic(DIM, DIM, 256, 32) if critic_kind == "separable" else ConcatCritic(DIM, DIM, 256)
    generator = torch.Generator().manual_seed(seed)
    estimates = []
    for level in LEVELS:  # the same critic carries on through the staircase of MI levels
        history = fit_critic(critic, sampler(level, cubic, generator), estimator, steps, batch)
        estimates.append(statistics.fmean(history[-100:]))
    return estimates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps-per-level", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--critic", choices=["separable", "concat"], default="separable")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    results: dict[str, dict[str, list[list[float]]]] = {}
    for cubic in (False, True):
        for estimator in mi.ESTIMATORS:
            runs = [
                run(estimator, cubic, seed, args.steps_per_level, args.batch, args.critic) for seed in range(args.seeds)
            ]
            results.setdefault("cubic" if cubic else "gaussian", {})[estimator] = runs
    log_batch = math.log(args.batch)
    print(
        f"bench_mi_estimators: d={DIM} correlated Gaussians, {args.critic} critic (hidden 256), batch "
        f"{args.batch}, {args.steps_per_level} steps per MI level, {args.seeds} seeds (mean ± std). {machine()}"
    )
    header = "  transform  estimator   " + "  ".join(f"true {t:>4.0f}    " for t in LEVELS)
    print(header)
    infonce_ok = True
    for transform, by_est in results.items():
        for estimator, runs in by_est.items():
            cells = []
            for i in range(len(LEVELS)):
                values = [r[i] for r in runs]
                finite = [v for v in values if math.isfinite(v)]  # NWJ's exp term can overflow on hard levels
                if not finite:
                    cells.append(f"{'diverged':>12}")
                    continue
                mean = statistics.fmean(finite)
                std = statistics.pstdev(finite) if len(finite) > 1 else 0.0
                mark = "" if len(finite) == len(values) else f" ({len(values) - len(finite)} diverged)"
                cells.append(f"{mean:5.2f} ± {std:4.2f}{mark}")
                if estimator == "infonce" and max(finite) > log_batch + 1e-6:
                    infonce_ok = False
            print(f"  {transform:<9}  {estimator:<8}    " + "  ".join(cells))
    print(f"InfoNCE never above log(batch) = {log_batch:.3f}: {infonce_ok}")
    rng = np.random.default_rng(0)
    ksg_rows = []
    for d in (1, 2):
        rho = mi.rho_for_mi(1.0, d)
        x = rng.standard_normal((5000, d))
        y = rho * x + math.sqrt(1 - rho**2) * rng.standard_normal((5000, d))
        estimate, _ = mi.ksg(x, y, k=3)
        ksg_rows.append({"d": d, "true": 1.0, "ksg": estimate})
        print(f"KSG (k=3), d={d}, N=5000: {estimate:.3f} nats vs true 1.000 (error {abs(estimate - 1):.3f})")
    write_json(
        args.json,
        {
            "levels": LEVELS,
            "results": results,
            "ksg": ksg_rows,
            "infonce_below_log_batch": infonce_ok,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
