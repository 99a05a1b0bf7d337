"""Training the backbone for shorter inputs: the truncators' orders are the library's selections, and the
examples training sees are truncated at the configured keep ratios with their positions kept."""

from __future__ import annotations

import torch

from mmtok.models.train_backbone import BackboneTrainConfig, divprune_orders, shortened
from mmtok.tokens import TokenSequence
from mmtok.truncation import truncate


def test_the_batched_divprune_order_is_the_librarys_selection_at_every_count():
    torch.manual_seed(0)
    features = torch.randn(3, 40, 6)
    orders = divprune_orders(features)
    seq = TokenSequence("image", ids=torch.arange(40), grid=(5, 8))
    for b in range(3):
        assert sorted(orders[b].tolist()) == list(range(40))  # every token once
        for k in (1, 7, 25):
            _, report = truncate(seq, method="divprune", keep=k, features=features[b])
            assert sorted(orders[b, :k].tolist()) == report.kept.tolist()


def test_training_examples_are_truncated_at_the_drawn_ratios_positions_kept():
    prompt = TokenSequence("text", ids=torch.tensor([1, 2, 3]))
    image = TokenSequence("image", ids=torch.arange(100) % 7, grid=(10, 10))
    train = BackboneTrainConfig(
        steps=10, drop_fraction=0.5, keep_ratio_min=0.2, truncators_from=0.5, drop_methods={"mi": 1.0}
    )
    orders = {"mi": torch.arange(100).flip(0)[None]}  # the critic's order: the last tokens first
    generator = torch.Generator().manual_seed(0)
    early = [shortened([prompt, image], 0, 0, train, orders, generator) for _ in range(200)]
    late = [shortened([prompt, image], 0, 9, train, orders, generator) for _ in range(200)]
    cut = [ex[1] for ex in early + late if len(ex[1]) < 100]
    assert 150 < len(cut) < 250  # about half of the examples are truncated
    assert all(20 <= len(s) <= 100 and s.grid == (10, 10) for s in cut)
    assert all(torch.equal(s.ids, image.ids[s.positions]) for s in cut)  # positions kept
    early_cut = [ex[1] for ex in early if len(ex[1]) < 100]
    assert all(s.meta["truncation"] == "random" for s in early_cut)  # the truncators join later
    late_cut = [ex[1] for ex in late if len(ex[1]) < 100]
    assert all(
        s.meta["truncation"] == "mi" and s.positions.tolist() == list(range(100 - len(s), 100)) for s in late_cut
    )
    assert shortened([prompt, image], 0, 0, BackboneTrainConfig(), {}, generator)[1] is image  # no dropping
