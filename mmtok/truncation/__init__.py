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

The package's parts: ``report`` (``TruncationReport``, the defaults), ``methods`` (features and the baselines),
``domain`` (the context and the critic's domain), ``grids`` (MI scores on code grids), ``selection``
(``truncate``) and ``many`` (``truncate_many``).
"""

from mmtok.truncation.domain import context_embeddings, context_similarity, critic_teacher, known_contexts
from mmtok.truncation.grids import mi_scores_on_grids
from mmtok.truncation.many import truncate_many
from mmtok.truncation.methods import MAX_PAIRWISE_TOKENS, token_features, tome_merge
from mmtok.truncation.report import (
    DEFAULT_CRITIC,
    DEFAULT_THRESHOLD_NATS,
    DOMAIN_SIMILARITY_MIN,
    FALLBACK_KEEP_RATIO,
    METHODS,
    OUT_OF_DOMAIN,
    SHIPPED_CRITIC_CONTEXTS,
    TruncationReport,
)
from mmtok.truncation.selection import truncate

__all__ = [
    "DEFAULT_CRITIC",
    "DEFAULT_THRESHOLD_NATS",
    "DOMAIN_SIMILARITY_MIN",
    "FALLBACK_KEEP_RATIO",
    "MAX_PAIRWISE_TOKENS",
    "METHODS",
    "OUT_OF_DOMAIN",
    "SHIPPED_CRITIC_CONTEXTS",
    "TruncationReport",
    "context_embeddings",
    "context_similarity",
    "critic_teacher",
    "known_contexts",
    "mi_scores_on_grids",
    "token_features",
    "tome_merge",
    "truncate",
    "truncate_many",
]
