"""MI scores from the critic's window table: each image's ids laid on its grid, every window scored in one pass
per grid size."""

from __future__ import annotations

from typing import Any

import torch

from mmtok.errors import TruncationError
from mmtok.tokens import check_ids

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
