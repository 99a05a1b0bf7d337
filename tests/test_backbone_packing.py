"""The backbone's batches cost what their tokens cost: examples packed end to end (never padded to the longest),
attention per bucket of similar lengths, and a conv stem that can run at the kept sites only — each equal to the
plain computation it replaces."""

from __future__ import annotations

import pytest
import torch

from mmtok.models import backbone as bb
from mmtok.models.backbone import Backbone, BackboneConfig, Packed, packed_attention
from mmtok.tokens import TokenSequence


def code_backbone(readout: str = "max", stem_sites: str = "kept") -> Backbone:
    torch.manual_seed(0)
    model = Backbone(
        BackboneConfig(
            dim=32,
            layers=2,
            heads=2,
            visual_vocab=64,
            code_dim=4,
            visual_input="codes",
            readout=readout,
            stem_width=8,
            stem_sites=stem_sites,
            num_classes=3,
            moe={"num_experts": 4, "hidden_dim": 32, "top_k": 2},
        )
    ).eval()
    with torch.no_grad():
        model.visual_codes.copy_(torch.randn(64, 4))
    return model


def images(count: int, seed: int = 0) -> list[TokenSequence]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        full = TokenSequence("image", ids=torch.randint(0, 64, (36,), generator=g), grid=(6, 6))
        keep = int(torch.randint(1, 37, (1,), generator=g))
        out.append(full.select(torch.randperm(36, generator=g)[:keep].sort().values))
    return out


def test_buckets_pad_at_most_an_eighth_and_equal_lengths_share_one_bucket():
    lengths = [297] * 5 + [40, 170, 168, 150, 151, 90, 12, 297]
    packed = Packed.plan(lengths)
    assert packed.lengths == sorted(lengths, reverse=True) and packed.rows == sum(lengths)
    assert [lengths[i] for i in packed.order.tolist()] == packed.lengths
    assert packed.buckets[0] == (0, 6)  # the six full-length examples: one unmasked call
    covered = [i for a, b in packed.buckets for i in range(a, b)]
    assert covered == list(range(len(lengths)))
    for a, b in packed.buckets:
        padded = (b - a) * packed.lengths[a]
        assert padded - sum(packed.lengths[a:b]) <= bb.MAX_BUCKET_PADDING * padded


@pytest.mark.parametrize("padding", [0.0, 0.125])  # the default (equal lengths only) and masked buckets
def test_packed_attention_equals_attention_within_each_example_alone(monkeypatch, padding):
    monkeypatch.setattr(bb, "MAX_BUCKET_PADDING", padding)
    torch.manual_seed(0)
    lengths = [7, 30, 29, 30, 1, 12, 11]
    packed = Packed.plan(lengths)
    masked = [packed.lengths[a] != packed.lengths[b - 1] for a, b in packed.buckets]
    assert any(masked) == (padding > 0)
    qkv = torch.randn(sum(lengths), 3 * 8)
    out = packed_attention(qkv, packed, heads=2)
    for i, n in enumerate(packed.lengths):
        rows = qkv[packed.offsets[i] : packed.offsets[i] + n].view(n, 3, 2, 4).permute(1, 2, 0, 3)  # (3, h, n, hd)
        alone = torch.nn.functional.scaled_dot_product_attention(*rows).transpose(0, 1).reshape(n, 8)
        torch.testing.assert_close(out[packed.offsets[i] : packed.offsets[i] + n], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("readout", ["cls", "mean", "max"])
@pytest.mark.parametrize("stem_sites", ["grid", "kept"])
def test_a_packed_batch_gives_each_example_its_result_alone_in_the_callers_order(readout, stem_sites):
    model = code_backbone(readout, stem_sites)
    prompt = TokenSequence("text", ids=torch.tensor([1, 5, 9, 2]))
    batch = [[prompt, s] for s in images(9)]
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model([example])["logits"] for example in batch])
    torch.testing.assert_close(together["logits"], alone, atol=1e-5, rtol=1e-4)
    assert together["tokens"] == sum(1 + 4 + len(s) for _, s in batch)


def test_the_kept_site_stem_reads_only_kept_neighbours_and_equals_the_masked_dense_stem(monkeypatch):
    model = code_backbone()
    seqs = images(12, seed=1)
    pairs = [(s.ids, s.token_positions) for s in seqs]
    with torch.no_grad():
        monkeypatch.setattr(bb, "KEPT_SITES_GATHER_BELOW", 1.0)  # always gather the kept sites' windows
        gathered = model._stem(pairs, (6, 6))
        monkeypatch.setattr(bb, "KEPT_SITES_GATHER_BELOW", 0.0)  # always the dense grid, absent sites zeroed
        dense = model._stem(pairs, (6, 6))
    torch.testing.assert_close(gathered, dense, atol=1e-5, rtol=1e-5)
    # by hand for one image: a 3x3 convolution, absent sites set to zero after every convolution
    first = seqs[0]
    grid = torch.zeros(1, 4, 6, 6)
    grid.view(4, 36)[:, first.token_positions] = model.visual_codes[first.ids].T
    present = torch.zeros(36)
    present[first.token_positions] = 1
    with torch.no_grad():
        x = grid
        for layer in model.visual_stem:
            x = layer(x)
            if isinstance(layer, torch.nn.Conv2d):
                x = x * present.view(1, 1, 6, 6)
        by_hand = model.visual_norm(x.view(32, 36)[:, first.token_positions].T)
    torch.testing.assert_close(gathered[: len(first)], by_hand, atol=1e-5, rtol=1e-5)


def test_on_the_full_grid_the_kept_site_stem_is_the_grid_stem(monkeypatch):
    kept, grid = code_backbone(stem_sites="kept"), code_backbone(stem_sites="grid")
    g = torch.Generator().manual_seed(2)
    pairs = [(torch.randint(0, 64, (36,), generator=g), torch.arange(36)) for _ in range(3)]
    monkeypatch.setattr(bb, "KEPT_SITES_GATHER_BELOW", 1.0)
    with torch.no_grad():
        torch.testing.assert_close(kept._stem(pairs, (6, 6)), grid._stem(pairs, (6, 6)), atol=1e-5, rtol=1e-5)


def test_the_kept_site_stem_trains_through_the_gathered_windows(monkeypatch):
    model = code_backbone().train()
    monkeypatch.setattr(bb, "KEPT_SITES_GATHER_BELOW", 1.0)
    out = model([[s] for s in images(4, seed=3)])
    out["logits"].sum().backward()
    grads = [layer.weight.grad for layer in model.visual_stem if isinstance(layer, torch.nn.Conv2d)]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


def test_an_unknown_stem_site_mode_is_a_config_error():
    from mmtok.errors import ConfigError

    with pytest.raises(ConfigError, match="stem_sites"):
        Backbone(BackboneConfig(stem_sites="sparse"))


def test_a_prompt_shared_by_the_examples_is_embedded_once_with_the_same_result(monkeypatch):
    model = code_backbone()
    prompt = TokenSequence("text", ids=torch.tensor([3, 5, 8, 13]))
    seqs = images(6)
    copies = [[TokenSequence("text", ids=prompt.ids.clone()), s] for s in seqs]
    calls = []
    embed = model.embed
    monkeypatch.setattr(model, "embed", lambda seq, rows=None: (calls.append(seq.modality), embed(seq, rows))[1])
    with torch.no_grad():
        shared = model([[prompt, s] for s in seqs])["logits"]
        assert calls.count("text") == 1
        separate = model(copies)["logits"]
        assert calls.count("text") == 1 + len(seqs)
    assert torch.equal(shared, separate)
