"""``truncate``: one sequence's selection by MI (threshold or budget) or a baseline, with the out-of-domain
fallback."""

from __future__ import annotations

from typing import Any

import torch

from mmtok.errors import TruncationError
from mmtok.truncation.domain import (
    _domain_warning,
    _far_from_known,
    _foreign_tokens,
    context_embeddings,
    context_similarity,
)
from mmtok.truncation.grids import _scores_on_grid, mi_scores_on_grids
from mmtok.truncation.methods import _budget, _check_features, _select, token_features, tome_merge
from mmtok.truncation.report import (
    DEFAULT_CRITIC,
    DEFAULT_THRESHOLD_NATS,
    FALLBACK_KEEP_RATIO,
    METHODS,
    OUT_OF_DOMAIN,
    TruncationReport,
)


def truncate(
    seq: Any,
    context: Any = None,
    method: str = "mi",
    threshold: float | None = None,
    keep: int | None = None,
    keep_ratio: float | None = None,
    *,
    features: torch.Tensor | None = None,
    tokenizer: Any = None,
    critic: Any = None,
    seed: int = 0,
    min_keep: int = 1,
    out_of_domain: str = "divprune",
) -> tuple[Any, TruncationReport]:
    """A shorter TokenSequence and a report; see the module docstring."""
    threshold = _checked_call(seq, method, threshold, keep, keep_ratio, out_of_domain, features)
    n = len(seq)
    notes: list[str] = []
    if method == "mi" and critic is None:
        import mmtok

        critic = mmtok.get_model(DEFAULT_CRITIC, kind="critic")
    foreign = method == "mi" and features is None and _foreign_tokens(seq, critic)
    if foreign and out_of_domain != "mi":
        return _out_of_domain(seq, foreign, None, out_of_domain, (keep, keep_ratio), tokenizer, seed)
    if foreign:
        notes.append(f"{foreign}: its scores are not to be trusted (out_of_domain='mi' keeps the critic's choice)")
    # a critic that reads code windows scores from its precomputed window table (no per-token feature vectors)
    on_grid = method == "mi" and features is None and _scores_on_grid(seq, critic)
    if features is None and not on_grid:
        if method == "mi":
            features = critic.token_features(seq, tokenizer) if seq.ids is not None else token_features(seq)
        else:
            features = token_features(seq, tokenizer, normalized=method != "norm")
    if features is not None:
        _check_features(features, n)
    k = None if threshold is not None else _budget(n, keep, keep_ratio)
    if keep is not None and keep >= n:
        notes.append(f"the sequence has {n} tokens, not more than the budget {keep}: all kept")
    if method == "tome":
        return _tome(seq, features, k, notes)
    scores = info = similarity = None
    if method == "mi":
        scores, similarity = _mi_scores(seq, context, critic, None if on_grid else features, tokenizer)
        why = None if similarity is None or out_of_domain == "mi" else _far_from_known(context, similarity, critic)
        if why is not None:
            return _out_of_domain(seq, why, similarity, out_of_domain, (keep, keep_ratio), tokenizer, seed)
        kept, info = _mi_keep(scores, threshold, k, min_keep, notes)
    else:
        kept = _select(features, method, k, seed)
    kept = kept.sort().values
    report = TruncationReport(method, n, len(kept), kept, scores, threshold, info, notes)
    if similarity is not None:
        _attach_domain(report, context, similarity, critic)
    return seq.select(kept, truncation=method), report


def _checked_call(
    seq: Any,
    method: str,
    threshold: float | None,
    keep: int | None,
    keep_ratio: float | None,
    out_of_domain: str,
    features: torch.Tensor | None,
) -> float | None:
    """``truncate``'s arguments checked; the threshold to use (the default one for mi without a budget)."""
    if method not in METHODS:
        raise TruncationError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if out_of_domain not in OUT_OF_DOMAIN:
        raise TruncationError(f"unknown out_of_domain {out_of_domain!r}; choose from {', '.join(OUT_OF_DOMAIN)}")
    given = sum(v is not None for v in (threshold, keep, keep_ratio))
    if given > 1:
        raise TruncationError("give only one of threshold, keep and keep_ratio")
    if method != "mi" and threshold is not None:
        raise TruncationError(f"threshold is for mi truncation; {method} takes keep or keep_ratio")
    if len(seq) == 0:
        raise TruncationError("cannot truncate an empty sequence")
    if method == "mi" and seq.modality != "image" and features is None:
        raise TruncationError(
            f"mi truncation scores image tokens (its critic reads a token's code and its grid neighbours); "
            f"{seq.modality} tokens need a critic trained on them: use divprune, norm, tome, uniform or random"
        )
    return DEFAULT_THRESHOLD_NATS if method == "mi" and given == 0 else threshold


def _tome(seq: Any, features: torch.Tensor, k: int, notes: list[str]) -> tuple[Any, TruncationReport]:
    """ToMe: the k tokens left after bipartite merging, each carrying the mean embedding of what merged into it."""
    merged, survivors, size = tome_merge(features, k)
    out = seq.select(survivors, truncation="tome")
    out = type(seq)(
        out.modality,
        ids=None,
        embeddings=merged,
        times=out.times,
        positions=out.positions,
        grid=out.grid,
        tokenizer=out.tokenizer,
        meta={**out.meta, "merged_sizes": size.tolist()},
    )
    return out, TruncationReport("tome", len(seq), len(survivors), survivors, notes=notes)


def _mi_scores(
    seq: Any, context: Any, critic: Any, features: torch.Tensor | None, tokenizer: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each token's relevance (max pmi over the context items, nats) and the context's similarity to the critic's
    known contexts; from the critic's window table when ``features`` is None."""
    with torch.no_grad():
        context_emb = context_embeddings(context, critic)
        if features is None:
            scores = mi_scores_on_grids([seq], critic, context_emb, tokenizer)[0]
        else:
            if features.shape[1] != critic.config.token_dim:
                raise TruncationError(
                    f"token features are {features.shape[1]}-d but the critic takes {critic.config.token_dim}-d"
                )
            scores = critic.pmi(features, context_emb).max(dim=1).values
        return scores, context_similarity(context_emb, critic)


def _attach_domain(report: TruncationReport, context: Any, similarity: torch.Tensor, critic: Any) -> None:
    report.context_similarity = float(similarity.min())
    report.domain_warning = _domain_warning(context, similarity, critic, report.tokens_out, report.tokens_in)
    if report.domain_warning:
        report.notes.append(report.domain_warning)


def _mi_keep(
    scores: torch.Tensor, threshold: float | None, k: int | None, min_keep: int, notes: list[str]
) -> tuple[torch.Tensor, float]:
    """The kept indices (unsorted) for a threshold or a count, and the share of positive pmi they keep."""
    if not torch.isfinite(scores).all():
        raise TruncationError("relevance scores are not finite")
    n = len(scores)
    if threshold is not None:
        kept = (scores > threshold).nonzero().flatten()
        if len(kept) < min(min_keep, n):
            kept = scores.topk(min(min_keep, n)).indices
            notes.append(
                f"every score was at or below the threshold {threshold}: kept the {len(kept)} highest "
                f"(min_keep={min_keep})"
            )
    else:
        kept = scores.topk(k).indices
    positive = scores.clamp(min=0)
    total = float(positive.sum())
    return kept, float(positive[kept].sum()) / total if total > 0 else 1.0


def _out_of_domain(
    seq: Any,
    why: str,
    similarity: torch.Tensor | None,
    policy: str,
    budget: tuple[int | None, float | None],
    tokenizer: Any,
    seed: int,
) -> tuple[Any, TruncationReport]:
    """The documented fallback for a context the critic does not know: DivPrune at the call's budget (or
    ``FALLBACK_KEEP_RATIO`` when it gave a threshold), or a refusal (``out_of_domain="error"``)."""
    if policy == "error":
        raise TruncationError(f"{why}: refused (out_of_domain='error'; 'divprune' falls back to diversity)")
    keep, keep_ratio = budget
    if keep is None and keep_ratio is None:
        keep_ratio = FALLBACK_KEEP_RATIO
    out, report = truncate(seq, method="divprune", keep=keep, keep_ratio=keep_ratio, tokenizer=tokenizer, seed=seed)
    shown = f"keep={keep}" if keep is not None else f"keep_ratio={keep_ratio:g}"
    report.domain_warning = (
        f"{why}: its scores are not to be trusted, so divprune chose the tokens ({shown}; "
        "out_of_domain='mi' keeps the critic's choice)"
    )
    report.notes.append(report.domain_warning)
    report.context_similarity = None if similarity is None else float(similarity.min())
    return out, report
