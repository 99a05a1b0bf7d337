"""Expert parallelism (2 processes, gloo) against the single-process model: a MoE layer in training (capacity, bias
balancing, dynamic k) and a tiny Backbone converted by ``expert_parallel``, over two training steps — the loss (task
+ auxiliary), the gradients of the shared parameters (averaged as DDP would) and of each rank's experts, the
router's balancing state and statistics, the gathered state dict and evaluation; and what needs no processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mmtok.errors import ConfigError

CHILD = textwrap.dedent("""
    import copy, os, sys, torch, torch.distributed as dist, torch.nn.functional as F
    from mmtok.errors import CheckpointError
    from mmtok.models.backbone import Backbone, BackboneConfig
    from mmtok.models.moe import MoE, MoEConfig
    from mmtok.models.expert_parallel import (
        ExpertParallelMoE, average_gradients, expert_parallel, gather_state_dict)
    from mmtok.models import checkpoint
    from mmtok.tokens import TokenSequence

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    close = dict(atol=1e-5, rtol=1e-4)

    def check_grads(reference, parallel, label):
        ref = dict(reference.named_parameters())
        for name, p in parallel.named_parameters():
            expected = ref[name].grad
            if name.split(".")[-2] == "experts":  # this rank's slice of the reference's experts
                layer = parallel.get_submodule(name.rsplit("experts.", 1)[0].rstrip("."))
                expected = expected[layer.first_expert : layer.first_expert + layer.per_rank]
            torch.testing.assert_close(p.grad, expected, **close, msg=f"{label}: {name}")

    # ------------------------------------------------------------------ one layer in training, batch split in two
    for kw in ({"capacity_factor": 1.0, "bias_balancing": True, "bias_update_rate": 0.05},
               {"dynamic_k": "top_p", "max_k": 3, "target_k": 1.5, "target_k_rate": 0.1, "capacity_factor": 1.0}):
        torch.manual_seed(0)
        reference = MoE(MoEConfig(dim=16, hidden_dim=24, num_experts=4, top_k=2, **kw)).train()
        parallel = ExpertParallelMoE(copy.deepcopy(reference)).train()
        x = torch.randn(40, 16)
        c = torch.randn(40, 16)
        mine = slice(rank * 20, (rank + 1) * 20)
        y, aux = reference(x)
        ((y * c).sum() / 40 + aux).backward()
        out, out_aux = parallel(x[mine])
        ((out * c[mine]).sum() / 20 + out_aux).backward()
        average_gradients(parallel)
        torch.testing.assert_close(out, y[mine].detach(), **close)
        torch.testing.assert_close(out_aux, aux.detach(), **close)
        assert torch.equal(parallel.last_stats["load"], reference.last_stats["load"]), kw
        for key in ("dropped", "tokens", "average_k"):
            assert parallel.last_stats[key] == reference.last_stats[key], (kw, key)
        assert reference.last_stats["dropped"] > 0, kw  # capacity did drop assignments
        check_grads(reference, parallel, f"layer {kw}")
        for name, buf in reference.router.named_buffers():
            torch.testing.assert_close(dict(parallel.router.named_buffers())[name], buf, msg=f"{kw}: {name}")
        assert float(reference.router.selection_bias.abs().sum() + (reference.router.threshold - 0.5).abs()) > 0

    # ------------------------------------------------------------------ a rank without tokens still takes part
    torch.manual_seed(0)
    reference = MoE(MoEConfig(dim=16, hidden_dim=24, num_experts=4, top_k=2, capacity_factor=1.0)).train()
    parallel = ExpertParallelMoE(copy.deepcopy(reference)).train()
    x = torch.randn(30, 16)
    y, aux = reference(x)
    mine = x if rank == 0 else x[:0]
    out, out_aux = parallel(mine.clone().requires_grad_(True))
    (out.sum() + out_aux).backward()  # the backward's collectives run on both ranks
    torch.testing.assert_close(out, y[: len(mine)].detach(), **close)
    torch.testing.assert_close(out_aux, aux.detach(), **close)
    assert parallel.last_stats["tokens"] == 30 and parallel.last_stats["local_tokens"] == len(mine)
    assert parallel.last_stats["dropped"] == reference.last_stats["dropped"]

    # ------------------------------------------------------------------ a backbone converted in place
    def tiny_backbone():
        torch.manual_seed(0)
        return Backbone(BackboneConfig(
            dim=32, layers=2, heads=2, visual_vocab=64, av_dim=16, num_classes=3,
            moe={"num_experts": 4, "hidden_dim": 32, "top_k": 2, "bias_balancing": True, "bias_update_rate": 0.01}))

    g = torch.Generator().manual_seed(1)
    text = TokenSequence("text", ids=torch.tensor([257, 104, 105, 258]))
    text2 = TokenSequence("text", ids=torch.tensor([257, 99, 100, 101, 102, 258]))
    image = TokenSequence("image", ids=torch.randint(0, 64, (16,), generator=g), grid=(4, 4))
    audio = TokenSequence("audio", embeddings=torch.randn(7, 16, generator=g), times=torch.arange(7) / 16.0)
    # rank 1 has no image and no audio: those adapters get no gradient there
    examples = [[text, image], [audio, image.select(torch.tensor([0, 5, 9]))], [text], [text2]]
    labels = torch.tensor([0, 2, 1, 2])
    mine = slice(rank * 2, rank * 2 + 2)
    reference = tiny_backbone().train()
    parallel = expert_parallel(tiny_backbone()).train()
    assert all(isinstance(b.moe, ExpertParallelMoE) for b in parallel.blocks)
    assert parallel.blocks[0].moe.experts.w1_EDF.shape[0] == 2
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    opt = torch.optim.SGD(parallel.parameters(), lr=0.5)
    for step in range(2):  # the second step routes with the balanced biases and the updated weights
        ref_opt.zero_grad()
        opt.zero_grad()
        result = reference(examples)
        loss = F.cross_entropy(result["logits"], labels) + result["aux_loss"]
        loss.backward()
        got = parallel(examples[mine])
        my_loss = F.cross_entropy(got["logits"], labels[mine]) + got["aux_loss"]
        my_loss.backward()
        average_gradients(parallel)
        mean_loss = my_loss.detach().clone()
        dist.all_reduce(mean_loss)
        torch.testing.assert_close(mean_loss / world, loss.detach(), **close, msg=f"step {step}: loss")
        torch.testing.assert_close(got["aux_loss"], result["aux_loss"].detach(), **close, msg=f"step {step}: aux")
        torch.testing.assert_close(got["logits"], result["logits"][mine].detach(), **close)
        check_grads(reference, parallel, f"backbone step {step}")
        assert parallel.visual_embedding.weight.grad.abs().sum() > 0  # rank 1's zeros averaged with rank 0's
        for ref_block, block in zip(reference.blocks, parallel.blocks):
            torch.testing.assert_close(block.moe.router.selection_bias, ref_block.moe.router.selection_bias)
            assert ref_block.moe.router.selection_bias.abs().sum() > 0
            assert torch.equal(block.moe.last_stats["load"], ref_block.moe.last_stats["load"])
            assert block.moe.last_stats["tokens"] == ref_block.moe.last_stats["tokens"] == result["tokens"]
            assert block.moe.last_stats["local_tokens"] == got["tokens"]
        ref_opt.step()
        opt.step()

    # the full state back: a single-process copy equals the reference; the sliced model refuses to be saved
    state = gather_state_dict(parallel)
    ref_state = reference.state_dict()
    assert state.keys() == ref_state.keys()
    for key, value in ref_state.items():
        torch.testing.assert_close(state[key], value, **close, msg=key)
    single = Backbone(parallel.config)
    single.load_state_dict(state)
    try:
        checkpoint.save_pretrained("/nonexistent", parallel, class_path="x", kind="backbone", config={})
        raise AssertionError("saved a sliced model")
    except CheckpointError:
        pass
    for model in (reference, parallel, single):
        model.eval()
    with torch.no_grad():
        expected = reference(examples)["logits"]
        torch.testing.assert_close(parallel(examples[mine])["logits"], expected[mine], **close)
        torch.testing.assert_close(single(examples)["logits"], expected, **close)

    sys.stdout.write(f"rank {rank} ok\\n")  # one write: the two ranks share one pipe
    sys.stdout.flush()
    dist.barrier()  # neither rank tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    # Skip interpreter finalisation: gloo's worker threads can abort the process there (SIGABRT,
    # "terminate called without an active exception") after everything above has passed.
    os._exit(0)
""")


@pytest.mark.timeout(300)
def test_expert_parallel_backbone_trains_like_the_single_process_one(tmp_path):
    script = tmp_path / "ep_backbone.py"
    script.write_text(CHILD)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout


def test_expert_parallel_needs_an_initialised_process_group():
    from mmtok.models.expert_parallel import ExpertParallelMoE
    from mmtok.models.moe import MoE, MoEConfig

    with pytest.raises(ConfigError, match="initialised"):
        ExpertParallelMoE(MoE(MoEConfig(dim=8, hidden_dim=8, num_experts=2, top_k=1)))


def test_route_is_the_layers_routing_step():
    """MoE.forward's statistics and losses come from ``route``: the same numbers as the standalone losses."""
    from mmtok.models.moe import MoE, MoEConfig, balancing_loss, route, z_loss

    torch.manual_seed(0)
    moe = MoE(MoEConfig(dim=16, hidden_dim=16, num_experts=4, top_k=2)).train()
    x = torch.randn(50, 16)
    routing, aux, stats = route(moe.router, x, training=True)
    cfg = moe.cfg
    expected = cfg.aux_loss_weight * balancing_loss(routing, 4) + cfg.z_loss_weight * z_loss(routing)
    torch.testing.assert_close(aux, expected)
    assert stats["tokens"] == 50 and stats["average_k"] == 2.0 and int(stats["load"].sum()) == 100
    _, layer_aux = moe(x)
    torch.testing.assert_close(layer_aux, expected)
    assert torch.equal(moe.last_stats["load"], stats["load"])
