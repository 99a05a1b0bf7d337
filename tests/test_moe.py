"""MoE layer: every dispatch path equals the per-expert reference (forward and backward), routing rules, balancing
losses, capacity, dynamic k, cold start, expert parallelism (2 processes, gloo) and bad inputs; backbone inputs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mmtok.errors import CheckpointError, ConfigError, TokenError
from mmtok.models.backbone import Backbone, BackboneConfig
from mmtok.models.moe import MoE, MoEConfig, Routing, balancing_loss
from mmtok.tokens import TokenSequence

PATHS = ("segment", "grouped_mm", "loop")


def layer(**kw) -> MoE:
    torch.manual_seed(0)
    return MoE(MoEConfig(**{"dim": 32, "hidden_dim": 48, "num_experts": 6, "top_k": 2, **kw}))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"top_k": 1},
        {"num_experts": 16, "top_k": 4, "hidden_dim": 16},
        {"dynamic_k": "top_p", "max_k": 4},
        {"dynamic_k": "entropy"},
        {"router_mlp": True, "temperature": 0.5},
    ],
)
@pytest.mark.parametrize("tokens", [1, 37, 300])
def test_all_dispatch_paths_match_the_reference_forward_and_backward(kw, tokens):
    moe = layer(**kw).eval()
    x = torch.randn(tokens, 32)
    outputs, grads = {}, {}
    for path in PATHS:
        moe.cfg.dispatch = path
        inp = x.clone().requires_grad_(True)
        y, _ = moe(inp)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outputs[path] = y.detach()
        grads[path] = (
            inp.grad,
            moe.experts.w1_EDF.grad.clone(),
            moe.router.gate.weight.grad.clone() if not kw.get("router_mlp") else moe.router.gate[0].weight.grad.clone(),
        )
        moe.zero_grad()
    for path in ("segment", "grouped_mm"):
        torch.testing.assert_close(outputs[path], outputs["loop"], atol=1e-5, rtol=1e-4)
        for mine, ref in zip(grads[path], grads["loop"], strict=True):
            torch.testing.assert_close(mine, ref, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # inference takes its own per-expert path
        for path in PATHS:
            moe.cfg.dispatch = path
            torch.testing.assert_close(moe(x)[0], outputs["loop"], atol=1e-5, rtol=1e-4)


def test_experts_that_get_no_tokens_are_fine():
    moe = layer(num_experts=8)
    with torch.no_grad():
        moe.router.gate.weight.zero_()
        moe.router.gate.weight[0, 0] = 10.0  # every token prefers experts 0 and then the same runner-up
    moe.eval()
    x = torch.randn(20, 32).abs()
    results = []
    for path in PATHS:
        moe.cfg.dispatch = path
        results.append(moe(x)[0])
    assert int((moe.last_stats["load"] > 0).sum()) <= 2
    torch.testing.assert_close(results[0], results[2])
    torch.testing.assert_close(results[1], results[2])


def test_router_weights_come_from_the_full_softmax_and_sum_to_one():
    moe = layer()
    routing = moe.router(torch.randn(50, 32))
    assert torch.allclose(routing.weights.sum(-1), torch.ones(50))
    assert torch.allclose(routing.probs.sum(-1), torch.ones(50))
    assert routing.logits.dtype == torch.float32


def test_router_logits_stay_fp32_in_a_bf16_model():
    moe = layer().to(torch.bfloat16)
    routing = moe.router(torch.randn(10, 32, dtype=torch.bfloat16))
    assert routing.logits.dtype == torch.float32


def test_balancing_loss_is_larger_for_imbalanced_routing():
    E, T = 4, 400
    probs = torch.full((T, E), 0.25)
    balanced = Routing(torch.arange(T)[:, None] % E, torch.ones(T, 1), probs, probs.log())
    skewed_probs = torch.tensor([[0.7, 0.1, 0.1, 0.1]]).repeat(T, 1)
    skewed = Routing(torch.zeros(T, 1, dtype=torch.long), torch.ones(T, 1), skewed_probs, skewed_probs.log())
    assert float(balancing_loss(balanced, E)) == pytest.approx(1.0)
    assert float(balancing_loss(skewed, E)) == pytest.approx(4 * 0.7)


def test_capacity_drops_lowest_probability_assignments_in_training_only():
    moe = layer(capacity_factor=0.5)
    x = torch.randn(200, 32)
    moe.train()
    moe(x)
    assert moe.last_stats["dropped"] > 0
    moe.eval()
    moe(x)
    assert moe.last_stats["dropped"] == 0


def test_bias_balancing_moves_towards_equal_load():
    moe = layer(bias_balancing=True, bias_update_rate=0.05)
    with torch.no_grad():
        moe.router.gate.weight[0] += 0.5  # a favourite expert
    x = torch.randn(512, 32).abs()
    moe.train()
    moe(x)
    first = moe.last_stats["load"].std()
    for _ in range(40):
        moe(x)
    assert moe.last_stats["load"].std() < first
    assert float(moe.router.selection_bias[0]) < 0


@pytest.mark.parametrize("rule", ["top_p", "entropy"])
def test_dynamic_k_controller_reaches_its_target(rule):
    moe = layer(num_experts=8, dynamic_k=rule, min_k=1, max_k=4, target_k=2.0, target_k_rate=0.05)
    x = torch.randn(1024, 32)
    moe.train()
    for _ in range(200):
        moe(x)
    assert moe.last_stats["average_k"] == pytest.approx(2.0, rel=0.05)


def test_new_experts_are_warmed_in():
    moe = layer(num_experts=4)
    x = torch.randn(300, 32)
    moe.eval()
    before = moe(x)[0]
    moe.add_experts(2)
    assert moe.cfg.num_experts == 6 and moe.experts.w1_EDF.shape[0] == 6
    assert torch.allclose(moe.router.expert_scale, torch.tensor([1, 1, 1, 1, 0.1, 0.1]))
    after = moe(x)[0]
    assert (after - before).abs().mean() < before.abs().mean()  # a small change, not a disruption
    for _ in range(6):
        moe.step()
    assert torch.allclose(moe.router.expert_scale, torch.ones(6))


def test_bad_inputs():
    moe = layer()
    with pytest.raises(TokenError, match="NaN"):
        moe(torch.full((3, 32), float("nan")))
    for bad in (float("inf"), float("-inf"), float("nan")):  # one element of one token is enough
        x = torch.randn(3, 32)
        x[1, 7] = bad
        with pytest.raises(TokenError, match="NaN or infinite"):
            moe(x)
    empty, aux = moe(torch.zeros(0, 32))
    assert empty.shape == (0, 32) and float(aux) == 0
    with pytest.raises(ConfigError, match="k must be in"):
        MoEConfig(num_experts=4, top_k=5)
    with pytest.raises(ConfigError, match="dispatch must be"):
        MoEConfig(dispatch="magic")


@pytest.mark.timeout(300)
def test_expert_parallel_all_to_all_matches_the_single_process_layer(tmp_path):
    script = tmp_path / "ep.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys, torch, torch.distributed as dist
        from mmtok.models.moe import MoE, MoEConfig
        from mmtok.models.expert_parallel import ExpertParallelMoE
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        reference = MoE(MoEConfig(dim=16, hidden_dim=24, num_experts=4, top_k=2)).eval()
        x = torch.randn(40, 16)
        whole = x.clone().requires_grad_(True)
        expected = reference(whole)[0]
        expected.sum().backward()
        parallel = ExpertParallelMoE(reference).eval()
        mine = slice(rank * 20, (rank + 1) * 20)
        inp = x[mine].clone().requires_grad_(True)
        out = parallel(inp)[0]
        torch.testing.assert_close(out, expected[mine].detach(), atol=1e-5, rtol=1e-4)
        out.sum().backward()  # a token's output depends on its own row only: the same gradient rows
        torch.testing.assert_close(inp.grad, whole.grad[mine], atol=1e-5, rtol=1e-4)
        sys.stdout.write(f"rank {rank} ok\\n")  # one write: the two ranks share one pipe
        sys.stdout.flush()
        dist.barrier()  # neither rank tears gloo down while the other is still in a collective
        dist.destroy_process_group()
        # Skip interpreter finalisation: gloo's worker threads can abort the process there (SIGABRT,
        # "terminate called without an active exception") after everything above has passed.
        os._exit(0)
    """)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout


# ----------------------------------------------------------------------------------------------------- backbone
def tiny_backbone(**moe) -> Backbone:
    torch.manual_seed(0)
    return Backbone(
        BackboneConfig(
            dim=32,
            layers=2,
            heads=2,
            visual_vocab=64,
            av_dim=16,
            num_classes=3,
            moe={"num_experts": 4, "hidden_dim": 32, "top_k": 2, **moe},
        )
    )


def test_backbone_takes_mixed_modalities_and_lengths():
    model = tiny_backbone().eval()
    text = TokenSequence("text", ids=torch.tensor([257, 104, 105, 258]))
    image = TokenSequence("image", ids=torch.randint(0, 64, (16,)), grid=(4, 4))
    audio = TokenSequence("audio", embeddings=torch.randn(7, 16), times=torch.arange(7) / 16.0)
    out = model([[text, image], [audio], [text, image.select(torch.tensor([0, 5, 9])), audio]])
    assert out["logits"].shape == (3, 3)
    assert out["tokens"] == (1 + 4 + 16) + (1 + 7) + (1 + 4 + 3 + 7)
    assert len(out["router"]) == 2 and out["router"][0]["load"].sum() == out["tokens"] * 2
    # padding does not change an example's result
    alone = model([[audio]])["logits"][0]
    torch.testing.assert_close(out["logits"][1], alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("readout", ["cls", "mean", "max"])
def test_backbone_reads_code_vectors_on_their_grid(readout, tmp_path):
    from mmtok.errors import ConfigError

    torch.manual_seed(0)
    cfg = BackboneConfig(
        dim=32, layers=1, heads=2, visual_vocab=64, code_dim=4, visual_input="codes", readout=readout,
        stem_width=8, num_classes=3, moe={"num_experts": 4, "hidden_dim": 32, "top_k": 2},
    )  # fmt: skip
    model = Backbone(cfg).eval()

    class Codes:  # a tokenizer's code table: 64 ids -> 4-d vectors
        name = "fake-vq"
        table = torch.randn(64, 4)

        def codes_from_ids(self, ids):
            return self.table[ids].permute(0, 3, 1, 2)

    model.set_visual_codes(Codes())
    torch.testing.assert_close(model.visual_codes, Codes.table)
    image = TokenSequence("image", ids=torch.randint(0, 64, (16,)), grid=(4, 4))
    short = image.select(torch.tensor([0, 5, 9]))
    out = model([[image], [short]])
    assert out["logits"].shape == (2, 3) and torch.isfinite(out["logits"]).all()
    # a kept token's row sees only the neighbours that are still there: truncation changes its row
    full_rows = model.visual_rows(image.ids, image.token_positions, image.grid)
    short_rows = model.visual_rows(short.ids, short.token_positions, short.grid)
    assert short_rows.shape == (3, 32) and not torch.allclose(full_rows[[0, 5, 9]], short_rows)
    # the code table is saved with the weights (stored as float16)
    model.save_pretrained(tmp_path / "bb")
    torch.testing.assert_close(Backbone.from_pretrained(tmp_path / "bb").visual_codes, Codes.table, atol=2e-3, rtol=0)
    with pytest.raises(ConfigError, match="readout"):
        Backbone(BackboneConfig(readout="first"))


def test_backbone_bad_inputs(tmp_path):
    model = tiny_backbone()
    with pytest.raises(TokenError, match="empty batch"):
        model([])
    with pytest.raises(TokenError, match="ids must be"):
        model([[TokenSequence("image", ids=torch.tensor([70]), grid=(1, 1))]])
    with pytest.raises(TokenError, match="NaN"):
        model([[TokenSequence("audio", embeddings=torch.full((2, 16), float("nan")))]])
    with pytest.raises(TokenError, match="16-d"):
        model([[TokenSequence("audio", embeddings=torch.randn(2, 8))]])
    model.save_pretrained(tmp_path / "bb")
    import json

    config = json.loads((tmp_path / "bb" / "config.json").read_text())
    config["config"]["moe"]["num_experts"] = 6
    (tmp_path / "bb" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="the config says 6 experts"):
        Backbone.from_pretrained(tmp_path / "bb")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tokens", [1, 300, 4096])
@pytest.mark.parametrize("experts", [(8, 2, 64), (64, 8, 32)])
def test_bf16_grouped_mm_on_gpu_matches_the_reference(tokens, experts):
    """On CUDA in bf16, "auto" takes grouped GEMMs; they match the per-expert loop forward and backward (bf16
    tolerance), with some experts empty at one token."""
    num_experts, top_k, hidden = experts
    moe = layer(num_experts=num_experts, top_k=top_k, hidden_dim=hidden, dim=64).cuda().to(torch.bfloat16).eval()
    x = torch.randn(tokens, 64, device="cuda", dtype=torch.bfloat16)
    assert moe.dispatch_path(x) == "grouped_mm"
    outputs, grads = {}, {}
    for path in ("grouped_mm", "loop"):
        moe.cfg.dispatch = path
        inp = x.clone().requires_grad_(True)
        y, _ = moe(inp)
        y.float().pow(2).mean().backward()
        outputs[path], grads[path] = y.float(), (inp.grad.float(), moe.experts.w1_EDF.grad.float().clone())
        moe.zero_grad()
    pairs = [(outputs["grouped_mm"], outputs["loop"]), *zip(grads["grouped_mm"], grads["loop"], strict=True)]
    for mine, ref in pairs:
        assert float(ref.norm()) > 0
        assert float((mine - ref).norm() / ref.norm()) < 2e-2  # bf16 has 8 bits of mantissa
