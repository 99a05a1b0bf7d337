"""What truncation returns (``TruncationReport``) and the constants of its methods: the default MI threshold and
critic, the shipped critic's known contexts, and the out-of-domain policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

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
