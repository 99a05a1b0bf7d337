"""``truncate_many``: one context, many sequences; for MI on code grids the context is encoded once and every
image scored in one pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmtok.errors import TruncationError
from mmtok.truncation.domain import _far_from_known, _foreign_tokens, context_embeddings, context_similarity
from mmtok.truncation.grids import _scores_on_grid, mi_scores_on_grids
from mmtok.truncation.methods import _budget
from mmtok.truncation.report import DEFAULT_CRITIC, DEFAULT_THRESHOLD_NATS, TruncationReport
from mmtok.truncation.selection import _attach_domain, _mi_keep, truncate


def _mi_keep_rows(
    scores: list[torch.Tensor], threshold: float | None, ks: list[int | None], min_keep: int, notes: list[list[str]]
) -> list[tuple[torch.Tensor, float]]:
    """``_mi_keep`` for many sequences: one tensor operation for all when they have one length (and, for a
    budget, one budget); the same kept sets (sorted) and shares, up to the rounding of the sums."""
    n = len(scores[0])
    same_length = all(len(row) == n for row in scores)
    if not same_length or (threshold is None and len(set(ks)) > 1):
        return [
            (kept.sort().values, info)
            for kept, info in (
                _mi_keep(row, threshold, k, min_keep, note) for row, k, note in zip(scores, ks, notes, strict=True)
            )
        ]
    scores_BN = torch.stack(scores)
    if not torch.isfinite(scores_BN).all():
        raise TruncationError("relevance scores are not finite")
    positive_BN = scores_BN.clamp(min=0)
    total_B = positive_BN.sum(1)
    if threshold is None:
        kept_BK = scores_BN.topk(ks[0], dim=1).indices.sort(dim=1).values
        rows = list(kept_BK)
        kept_sum_B = positive_BN.gather(1, kept_BK).sum(1)
    else:
        mask_BN = scores_BN > threshold
        counts = mask_BN.sum(1).tolist()
        rows = list(mask_BN.nonzero()[:, 1].split(counts))
        kept_sum_B = (positive_BN * mask_BN).sum(1)
    out = []
    for b, (kept, total, kept_sum) in enumerate(zip(rows, total_B.tolist(), kept_sum_B.tolist(), strict=True)):
        if threshold is not None and len(kept) < min(min_keep, n):  # the minimum, with its note
            kept, info = _mi_keep(scores[b], threshold, None, min_keep, notes[b])
            out.append((kept.sort().values, info))
        else:
            out.append((kept, kept_sum / total if total > 0 else 1.0))
    return out


def truncate_many(
    seqs: list[Any],
    context: Any = None,
    method: str = "mi",
    threshold: float | None = None,
    keep: int | list[int] | None = None,
    keep_ratio: float | None = None,
    *,
    critic: Any = None,
    tokenizer: Any = None,
    seed: int = 0,
    min_keep: int = 1,
    out_of_domain: str = "divprune",
) -> list[tuple[Any, TruncationReport]]:
    """``truncate`` over many sequences that share one context (a batch job, a server's batch): for ``mi`` with a
    critic that reads code windows, the context is encoded once and every image's tokens are scored in one pass
    (the same selections as ``truncate``, one by one); ``keep`` may give each sequence its own count. Other methods
    call ``truncate`` per sequence (``seed + i`` for the i-th)."""
    counts = keep if isinstance(keep, list) else [keep] * len(seqs)
    if len(counts) != len(seqs):
        raise TruncationError(f"keep gives {len(counts)} counts for {len(seqs)} sequences")
    if method == "mi" and critic is None:
        import mmtok

        critic = mmtok.get_model(DEFAULT_CRITIC, kind="critic")

    def one_by_one(threshold: float | None, **kwargs: Any) -> list[tuple[Any, TruncationReport]]:
        return [
            truncate(s, context, method, threshold, k, keep_ratio, tokenizer=tokenizer, seed=seed + i,
                     min_keep=min_keep, **kwargs)
            for i, (s, k) in enumerate(zip(seqs, counts, strict=True))
        ]  # fmt: skip

    batched = (
        method == "mi" and seqs and all(_scores_on_grid(s, critic) and not _foreign_tokens(s, critic) for s in seqs)
    )
    if not batched:
        return one_by_one(threshold, **({"critic": critic, "out_of_domain": out_of_domain} if method == "mi" else {}))
    if sum(v is not None for v in (threshold, keep, keep_ratio)) > 1:
        raise TruncationError("give only one of threshold, keep and keep_ratio")
    if threshold is None and keep is None and keep_ratio is None:
        threshold = DEFAULT_THRESHOLD_NATS
    with torch.no_grad():
        context_emb = context_embeddings(context, critic)
        similarity = context_similarity(context_emb, critic)
        far = None if similarity is None else _far_from_known(context, similarity, critic)
        if far and out_of_domain != "mi":  # every sequence takes the fallback (truncate's own path, one by one)
            return one_by_one(threshold, critic=critic, out_of_domain=out_of_domain)
        all_scores = mi_scores_on_grids(seqs, critic, context_emb, tokenizer)
    domain = _Domain(context, similarity, far, critic)
    return _mi_selections(seqs, counts, all_scores, threshold, keep_ratio, min_keep, domain)


@dataclass
class _Domain:
    """What ``truncate_many`` learnt of its context: its similarity to the critic's known contexts, and whether it
    is far from them."""

    context: Any
    similarity: torch.Tensor | None
    far: Any
    critic: Any

    def annotate(self, report: TruncationReport) -> None:
        if self.similarity is not None and self.far is None:  # in domain: nothing to say
            report.context_similarity = float(self.similarity.min())
        elif self.similarity is not None:  # out of domain, and out_of_domain="mi" keeps the critic's choice
            _attach_domain(report, self.context, self.similarity, self.critic)


def _mi_selections(
    seqs: list[Any],
    counts: list[int | None],
    all_scores: list[torch.Tensor],
    threshold: float | None,
    keep_ratio: float | None,
    min_keep: int,
    domain: _Domain,
) -> list[tuple[Any, TruncationReport]]:
    """Each sequence's MI selection from its scores, by the threshold or its budget."""
    notes: list[list[str]] = [[] for _ in seqs]
    ks = [
        None if threshold is not None else _budget(len(seq), count, keep_ratio)
        for seq, count in zip(seqs, counts, strict=True)
    ]
    for seq, count, note in zip(seqs, counts, notes, strict=True):
        if count is not None and count >= len(seq):
            note.append(f"the sequence has {len(seq)} tokens, not more than the budget {count}: all kept")
    results = []
    kept_rows = _mi_keep_rows(all_scores, threshold, ks, min_keep, notes)
    for seq, scores, (kept, info), note in zip(seqs, all_scores, kept_rows, notes, strict=True):
        report = TruncationReport("mi", len(seq), len(kept), kept, scores, threshold, info, note)
        domain.annotate(report)
        results.append((seq.select(kept, truncation="mi"), report))
    return results
