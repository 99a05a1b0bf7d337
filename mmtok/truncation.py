"""Keep the tokens that carry information about the context, drop the rest: MI truncation and its baselines.

    short, report = mmtok.truncate(seq, context="the digit seven", method="mi")  # threshold -0.15 nats

``method="mi"`` scores each token by its pointwise mutual information with the context, in nats, from a trained
critic (``critic-vq-text`` by default, which reads each token's code with its neighbours' codes), and keeps the
tokens whose score with *any* context item exceeds ``threshold`` (a dynamic count), or the ``keep`` /
``keep_ratio`` best. Baselines behind the same call: ``random``, ``uniform`` (fixed stride over positions), ``norm``
(largest feature norm), ``divprune`` (greedy max-min diversity) and ``tome`` (bipartite soft matching: merges
tokens, so the result carries embeddings, not ids).

The result keeps each token's ``positions`` (and ``times``), so models still know where the tokens were. At least
``min_keep`` tokens (default 1) are always kept; the report says when that floor was used.

**Outside the critic's domain.** A critic only knows the contexts it was trained on: ``critic-vq-text`` saw digit
canvases captioned with the 40 digit captions of :data:`SHIPPED_CRITIC_CONTEXTS` ("a photo of the digit seven",
"a handwritten 7", ...). The measure: the cosine similarity of each context item's teacher text embedding to the
nearest known caption's. Below :data:`DOMAIN_SIMILARITY_MIN` (0.92, calibrated on held-out digit questions and
other questions, see ``tests/test_truncation.py``) the context is out of domain: the selection is made all the
same, and the report carries a warning (``report.domain_warning``, also in ``notes``) that the kept count and the
information-kept estimate are not to be trusted, with the baseline to use instead (``divprune`` at a budget). The
report's ``context_similarity`` is the least-known item's similarity. Contexts must be text (or text tokens, or
tensors in the teacher's text space): an audio or image context is refused with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from mmtok.errors import TruncationError
from mmtok.tokens import check_ids

METHODS = ("mi", "random", "uniform", "norm", "divprune", "tome")
# The default MI threshold, calibrated for critic-vq-text + backbone-tiny on validation canvases (held-out digits and
# photos, canvas seed 2; bench_truncation reports on seed 1): the highest threshold, on a 0.05-nat grid, whose
# accuracy stays >= 98% of the full sequence's, one point of margin over the 97% target (`python -m
# mmtok.eval.tools.truncation_oracle --seed 2`, eval/results/truncation_threshold_validation.json). The design
# seed's 0.18 nats removes more and keeps less (95.7% of full accuracy there): pass threshold=0.18 for it.
DEFAULT_THRESHOLD_NATS = -0.15
DEFAULT_CRITIC = "critic-vq-text"

# What the shipped critic was trained on (models/train_critic.py: caption_bank, i.e. models/data.py's
# DIGIT_TEMPLATES x DIGIT_WORDS), written out here because its checkpoint predates the config's known_contexts
# record and must keep describing those weights if the training data changes. Its digit-free canvases were captioned
# "a photo", "an image", ...: the contrast that says "nothing here", not a context whose tokens it learned to find,
# so those captions are not counted as known.
_SHIPPED_TEMPLATES = (
    "a photo of the digit {word}",
    "a handwritten {digit}",
    "the number {word}",
    "a picture of the number {digit}",
)
_SHIPPED_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SHIPPED_CRITIC_CONTEXTS = {
    DEFAULT_CRITIC: tuple(t.format(word=w, digit=d) for d, w in enumerate(_SHIPPED_WORDS) for t in _SHIPPED_TEMPLATES)
}
DOMAIN_SIMILARITY_MIN = 0.92  # cosine similarity to the nearest known context, in the teacher's text space
OUT_OF_DOMAIN = ("divprune", "mi", "error")  # what mi does with a context below DOMAIN_SIMILARITY_MIN
FALLBACK_KEEP_RATIO = 0.5  # the divprune fallback's budget when the call gave a threshold (no budget)


@dataclass
class TruncationReport:
    method: str
    tokens_in: int
    tokens_out: int
    kept: torch.Tensor  # indices into the input sequence, ascending (for tome: the surviving representatives)
    scores: torch.Tensor | None = None  # per input token (mi: max pmi over the context, nats)
    threshold: float | None = None
    information_kept: float | None = None  # mi: sum of kept positive pmi / sum of all positive pmi
    notes: list[str] = field(default_factory=list)
    context_similarity: float | None = None  # mi: the least-known context item's cosine to the critic's contexts
    domain_warning: str | None = None  # mi: set (and in notes) when the context is outside the critic's domain

    @property
    def kept_ratio(self) -> float:
        return self.tokens_out / self.tokens_in if self.tokens_in else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "kept_ratio": round(self.kept_ratio, 4),
            "threshold": self.threshold,
            "information_kept": None if self.information_kept is None else round(self.information_kept, 4),
            "kept": self.kept.tolist(),
            "notes": self.notes,
            "context_similarity": None if self.context_similarity is None else round(self.context_similarity, 4),
            "in_domain": None
            if self.context_similarity is None and not self.domain_warning
            else not self.domain_warning,
        }


# ---------------------------------------------------------------------------------------------- token features
def token_features(seq: Any, tokenizer: Any = None, normalized: bool = True) -> torch.Tensor:
    """Per-token feature vectors ``[N, D]``: the tokenizer's teacher-aligned features for codebook ids, else the
    sequence's own embeddings."""
    if seq.ids is not None and seq.modality == "image":
        if tokenizer is None:
            from mmtok.registry import get_registered

            tokenizer = get_registered(seq.tokenizer, "tokenizer", "token sequence", TruncationError)
        return tokenizer.features(seq, tokens=True, normalized=normalized)[1].float().cpu()
    if seq.embeddings is not None:
        return seq.embeddings.float()
    raise TruncationError(f"a {seq.modality} sequence without embeddings needs its tokenizer's features")


def _check_features(features: torch.Tensor, n: int) -> None:
    if features.ndim != 2 or features.shape[0] != n:
        raise TruncationError(f"features must be [N={n}, D], got {tuple(features.shape)}")
    if not torch.isfinite(features).all():
        raise TruncationError("token features contain NaN or infinite values")


def _budget(n: int, keep: int | None, keep_ratio: float | None) -> int:
    if keep is not None:
        if keep < 1:
            raise TruncationError(f"keep must be at least 1, got {keep}")
        return min(keep, n)
    if keep_ratio is None:
        raise TruncationError("give one of threshold (mi only), keep or keep_ratio")
    if not 0 < keep_ratio <= 1:
        raise TruncationError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    return max(1, min(n, math.ceil(keep_ratio * n)))


# ---------------------------------------------------------------------------------------------- context for mi
def context_embeddings(context: Any, critic: Any) -> torch.Tensor:
    """Context -> ``[C, Dc]``: strings (or text sequences) through the critic's teacher text encoder, tensors and
    embedding sequences as they are."""
    if context is None or (isinstance(context, (list, tuple, str)) and len(context) == 0):
        raise TruncationError("mi truncation needs a non-empty context (text, text tokens or embeddings)")
    if torch.is_tensor(context):
        emb = context if context.ndim == 2 else context[None]
    elif isinstance(context, str) or (isinstance(context, (list, tuple)) and all(isinstance(c, str) for c in context)):
        texts = (context,) if isinstance(context, str) else tuple(context)
        key = (critic.config.teacher, texts)  # the embedding depends on the teacher only
        if key not in _text_contexts:  # a batch job asks the same question of every image: encode it once
            if len(_text_contexts) >= 256:
                _text_contexts.pop(next(iter(_text_contexts)))
            _text_contexts[key] = critic_teacher(critic).encode_text(list(texts)).detach()
        emb = _text_contexts[key]
    elif hasattr(context, "modality"):
        if context.modality != "text":
            raise TruncationError(
                f"{critic.name} scores tokens against text (its teacher's text embeddings); this context is "
                f"{context.modality} tokens, not text: give the question as text (for speech, its transcript)"
            )
        if context.ids is not None:
            from mmtok.registry import get_registered

            tokenizer = get_registered(context.tokenizer or "text-bytes", "tokenizer", "context", TruncationError)
            text = tokenizer.decode(context)
            return context_embeddings(text, critic)
        emb = context.embeddings
    else:
        raise TruncationError(f"cannot use a {type(context).__name__} as context")
    emb = emb.float().cpu()
    if len(emb) == 0:
        raise TruncationError("mi truncation needs a non-empty context")
    if not torch.isfinite(emb).all():
        raise TruncationError("context embeddings contain NaN or infinite values")
    want = critic.config.context_dim
    if emb.shape[1] != want:
        raise TruncationError(f"context embeddings are {emb.shape[1]}-d but the critic takes {want}-d")
    return emb


_teachers: dict[str, Any] = {}
_text_contexts: dict[tuple[str, tuple[str, ...]], torch.Tensor] = {}
_known_embeddings: dict[tuple[str, tuple[str, ...]], torch.Tensor] = {}


def known_contexts(critic: Any) -> tuple[str, ...]:
    """The context texts ``critic`` was trained on: its config's record, else the shipped critic's list (empty
    when neither is known: no domain check)."""
    recorded = tuple(getattr(critic.config, "known_contexts", ()) or ())
    return recorded or SHIPPED_CRITIC_CONTEXTS.get(getattr(critic, "name", ""), ())


def context_similarity(context: torch.Tensor, critic: Any) -> torch.Tensor | None:
    """Per context item ``[C]``: cosine similarity to the nearest of the critic's known contexts, in the teacher's
    text space (None when the critic records none)."""
    known = known_contexts(critic)
    if not known:
        return None
    key = (critic.config.teacher, known)
    if key not in _known_embeddings:
        _known_embeddings[key] = critic_teacher(critic).encode_text(list(known)).detach().float().cpu()
    return (F.normalize(context, dim=1) @ F.normalize(_known_embeddings[key], dim=1).T).max(dim=1).values


def _far_from_known(context: Any, similarity: torch.Tensor, critic: Any) -> str | None:
    """Why the context is out of the critic's domain, or None when it is in it."""
    worst = int(similarity.argmin())
    if float(similarity[worst]) >= DOMAIN_SIMILARITY_MIN:
        return None
    texts = [context] if isinstance(context, str) else context if isinstance(context, (list, tuple)) else None
    what = f"the context {texts[worst]!r:.80}" if texts and isinstance(texts[worst], str) else "the context"
    return (
        f"{what} is far from what {critic.name} was trained on (cosine similarity {float(similarity[worst]):.2f} "
        f"to its nearest of {len(known_contexts(critic))} known contexts, below {DOMAIN_SIMILARITY_MIN})"
    )


def _domain_warning(context: Any, similarity: torch.Tensor, critic: Any, kept: int, n: int) -> str | None:
    """The warning when the critic's own selection is kept for an unknown context (``out_of_domain="mi"``)."""
    far = _far_from_known(context, similarity, critic)
    if far is None:
        return None
    return (
        f"{far}; the {kept} of {n} tokens kept and the information-kept estimate are not to be trusted "
        "(out_of_domain='divprune', the default, chooses by diversity instead)"
    )


def _foreign_tokens(seq: Any, critic: Any) -> str | None:
    """Why the critic cannot read these tokens' codes (another image tokenizer's), or None."""
    trained_on = getattr(critic.config, "image_tokenizer", None)
    if seq.modality != "image" or not seq.tokenizer or not trained_on or seq.tokenizer == trained_on:
        return None
    return f"these are {seq.tokenizer} tokens and {critic.name} was trained on {trained_on} tokens"


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


def critic_teacher(critic: Any) -> Any:
    name = critic.config.teacher
    if name not in _teachers:
        from mmtok.models.teacher import Teacher

        _teachers[name] = Teacher.from_pretrained(name).eval()
    return _teachers[name]


# ---------------------------------------------------------------------------------------------- methods
def _select(features: torch.Tensor, method: str, k: int, seed: int) -> torch.Tensor:
    n = len(features)
    if method == "random":
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k]
    if method == "uniform":
        return torch.linspace(0, n - 1, k).round().long().unique()
    if method == "norm":
        return features.norm(dim=1).topk(k).indices
    if method == "divprune":
        if n > MAX_PAIRWISE_TOKENS:
            raise TruncationError(
                f"divprune on {n:,} tokens: at most {MAX_PAIRWISE_TOKENS:,} (each kept token is compared with all)"
            )
        unit = F.normalize(features, dim=1)
        chosen = [int(features.norm(dim=1).argmax())]
        distance = 1 - unit @ unit[chosen[0]]
        distance[chosen[0]] = -1
        for _ in range(k - 1):
            nxt = int(distance.argmax())
            chosen.append(nxt)
            torch.minimum(distance, 1 - unit @ unit[nxt], out=distance)  # a chosen token's -1 stays
            distance[nxt] = -1
        return torch.tensor(chosen)
    raise TruncationError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


# ToMe scores every pair across its two halves ((N/2)^2 similarities, 256 MiB here); DivPrune compares each token
# it keeps with every token (N x k).
MAX_PAIRWISE_TOKENS = 16384


def tome_merge(features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bipartite soft matching (Bolya et al. 2023) until ``k`` tokens remain.

    Returns merged features ``[k, D]`` (size-weighted means), the index of each survivor in the input, and sizes.
    """
    if len(features) > MAX_PAIRWISE_TOKENS:
        raise TruncationError(
            f"tome on {len(features):,} tokens: at most {MAX_PAIRWISE_TOKENS:,} (it compares every pair)"
        )
    feats = features.clone()
    index = torch.arange(len(features))
    size = torch.ones(len(features))
    while len(feats) > k:
        a, b = feats[0::2], feats[1::2]
        if len(b) == 0:
            break
        r = min(len(feats) - k, len(a))
        sim = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T  # (|A|, |B|)
        best, target = sim.max(dim=1)
        merge = best.argsort(descending=True)[:r]  # the r most similar A tokens merge into their B match
        keep_a = torch.ones(len(a), dtype=torch.bool)
        keep_a[merge] = False
        a_size, b_size = size[0::2], size[1::2].clone()
        b = b * b_size[:, None]
        b.index_add_(0, target[merge], a[merge] * a_size[merge, None])
        b_size.index_add_(0, target[merge], a_size[merge])
        b = b / b_size[:, None]
        feats = torch.cat([a[keep_a], b])
        size = torch.cat([a_size[keep_a], b_size])
        index = torch.cat([index[0::2][keep_a], index[1::2]])
    order = index.argsort()
    return feats[order], index[order], size[order]


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


# ---------------------------------------------------------------------------------------------- many at once
_code_tables: dict[str, torch.Tensor] = {}


def _scores_on_grid(seq: Any, critic: Any) -> bool:
    return (
        seq.modality == "image"
        and seq.ids is not None
        and seq.ids.ndim == 1
        and seq.grid is not None
        and getattr(critic.config, "token_features", "") == "local"
        and hasattr(critic, "pmi_on_grids")
    )


def _code_table(seq: Any, tokenizer: Any, critic: Any) -> torch.Tensor:
    """The image tokenizer's code vectors ``[V, c]`` (cached by tokenizer name)."""
    if tokenizer is None:
        from mmtok.registry import get_registered

        name = seq.tokenizer or critic.config.image_tokenizer
        tokenizer = get_registered(name, "tokenizer", "token sequence", TruncationError)
    if tokenizer.name not in _code_tables:
        with torch.no_grad():
            ids = torch.arange(tokenizer.codebook_size)
            _code_tables[tokenizer.name] = tokenizer.codes_from_ids(ids[None, :, None])[0, :, :, 0].T.float().cpu()
    return _code_tables[tokenizer.name]


def mi_scores_on_grids(
    seqs: list[Any], critic: Any, context_emb: torch.Tensor, tokenizer: Any = None
) -> list[torch.Tensor]:
    """Each image sequence's per-token relevance (max pmi over the context items, nats) in one critic pass per
    grid size: the sequences' ids laid on their grids (absent sites marked), every window scored from the critic's
    window table."""
    codes = _code_table(seqs[0], tokenizer, critic)
    vocab = len(codes)
    by_grid: dict[tuple[int, int], list[int]] = {}
    for i, seq in enumerate(seqs):
        by_grid.setdefault(tuple(seq.grid), []).append(i)
    out: list[torch.Tensor] = [torch.empty(0)] * len(seqs)
    for (h, w), members in by_grid.items():
        whole = all(seqs[i].positions is None and len(seqs[i]) == h * w for i in members)
        if whole:  # every site present: the ids are the grids
            grids = torch.stack([seqs[i].ids for i in members]).cpu()
            check_ids(grids, vocab, error=TruncationError)
        else:
            grids = torch.full((len(members), h * w), vocab, dtype=torch.long)  # vocab: no token at this site
            for row, i in enumerate(members):
                check_ids(seqs[i].ids, vocab, error=TruncationError)
                grids[row, seqs[i].token_positions] = seqs[i].ids.cpu()
        scores = critic.pmi_on_grids(grids.view(-1, h, w), codes, context_emb).amax(dim=-1)  # (b, h*w)
        for row, i in enumerate(members):
            out[i] = scores[row] if whole else scores[row, seqs[i].token_positions]
    return out


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
