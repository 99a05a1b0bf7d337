"""The fused per-expert dispatch (``ExpertSegments``): its hand-written backward equals autograd through the HF loop
for every parameter and the input (training with capacity drops, empty experts, frozen experts), passes gradcheck
in float64, and inference keeps nothing for backward."""

from __future__ import annotations

import pytest
import torch

from mmtok.models.moe import ExpertSegments, MoE, MoEConfig


def layer(**kw) -> MoE:
    torch.manual_seed(0)
    return MoE(MoEConfig(**{"dim": 32, "hidden_dim": 48, "num_experts": 8, "top_k": 2, **kw}))


def gradients(moe: MoE, x: torch.Tensor, path: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    moe.cfg.dispatch = path
    moe.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # capacity and routing are deterministic; this pins anything random
    inp = x.clone().requires_grad_(True)
    y, aux = moe(inp)
    ((y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum() + aux).backward()
    grads = {name: p.grad.clone() for name, p in moe.named_parameters() if p.grad is not None}
    return y.detach(), {"input": inp.grad, **grads}


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"num_experts": 64, "top_k": 8, "hidden_dim": 16},
        {"capacity_factor": 0.5},  # training drops assignments: some tokens keep one expert or none
        {"dynamic_k": "top_p", "max_k": 4},
    ],
)
@pytest.mark.parametrize("training", [False, True])
def test_every_gradient_equals_autograd_through_the_loop(kw, training):
    moe = layer(**kw).train(training)
    x = torch.randn(200, 32)
    y_loop, g_loop = gradients(moe, x, "loop")
    y_seg, g_seg = gradients(moe, x, "segment")
    torch.testing.assert_close(y_seg, y_loop, atol=1e-5, rtol=1e-4)
    assert set(g_seg) == set(g_loop) >= {"input", "experts.w1_EDF", "experts.w3_EDF", "experts.w2_EFD"}
    for name, ref in g_loop.items():
        torch.testing.assert_close(g_seg[name], ref, atol=1e-5, rtol=1e-4, msg=name)


def test_experts_run_in_pieces_give_the_same_outputs_and_gradients(monkeypatch):
    """An expert's rows go through in pieces (a few MB each); its weight gradients accumulate over them."""
    import mmtok.models.moe as moe_module

    monkeypatch.setattr(moe_module, "_rows_per_piece", lambda hidden_dim: 16)
    moe = layer(num_experts=3).train()
    x = torch.randn(300, 32)  # ~200 rows per expert: 13 pieces each
    y_loop, g_loop = gradients(moe, x, "loop")
    y_seg, g_seg = gradients(moe, x, "segment")
    torch.testing.assert_close(y_seg, y_loop, atol=1e-5, rtol=1e-4)
    for name, ref in g_loop.items():
        torch.testing.assert_close(g_seg[name], ref, atol=1e-5, rtol=1e-4, msg=name)


def test_experts_without_tokens_get_zero_gradients():
    moe = layer(num_experts=8)
    with torch.no_grad():
        moe.router.gate.weight.zero_()
        moe.router.gate.weight[:2, 0] = 10.0  # every token picks experts 0 and 1
    x = torch.randn(30, 32).abs()
    _, g = gradients(moe, x, "segment")
    _, g_loop = gradients(moe, x, "loop")
    for name in ("experts.w1_EDF", "experts.w3_EDF", "experts.w2_EFD"):
        assert torch.count_nonzero(g[name][2:]) == 0 and torch.count_nonzero(g[name][:2]) > 0
        torch.testing.assert_close(g[name], g_loop[name], atol=1e-5, rtol=1e-4)


def test_frozen_experts_still_pass_gradients_to_the_input_and_router():
    moe = layer()
    moe.experts.requires_grad_(False)
    _, g = gradients(moe, torch.randn(50, 32), "segment")
    assert "experts.w1_EDF" not in g and g["input"] is not None and "router.gate.weight" in g


def test_hand_written_backward_passes_gradcheck():
    torch.manual_seed(0)
    E, D, F, T, K = 4, 6, 5, 9, 2
    x = torch.randn(T, D, dtype=torch.float64, requires_grad=True)
    experts = torch.stack([torch.randperm(E)[:K] for _ in range(T)])  # (T, K) distinct experts per token
    token_A = torch.arange(T)[:, None].expand(T, K).reshape(-1)
    expert_A = experts.reshape(-1)
    order = torch.argsort(expert_A, stable=True)
    token_A, expert_A = token_A[order], expert_A[order]
    counts = torch.bincount(expert_A, minlength=E).tolist()
    weight = torch.rand(T * K, dtype=torch.float64, requires_grad=True)
    w1, w3 = (torch.randn(E, D, F, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w2 = torch.randn(E, F, D, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *a: ExpertSegments.apply(*a, token_A, counts), (x, weight, w1, w3, w2), eps=1e-6, atol=1e-6
    )


def test_inference_keeps_nothing_for_backward():
    moe = layer().eval()
    with torch.no_grad():
        y, _ = moe(torch.randn(40, 32))
    assert y.grad_fn is None
