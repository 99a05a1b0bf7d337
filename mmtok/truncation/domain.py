"""MI's context: text through the critic's teacher, and whether it lies inside what the critic was trained on."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mmtok.errors import TruncationError
from mmtok.truncation.report import DOMAIN_SIMILARITY_MIN, SHIPPED_CRITIC_CONTEXTS


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


def critic_teacher(critic: Any) -> Any:
    name = critic.config.teacher
    if name not in _teachers:
        from mmtok.models.teacher import Teacher

        _teachers[name] = Teacher.from_pretrained(name).eval()
    return _teachers[name]
