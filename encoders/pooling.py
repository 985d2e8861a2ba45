"""Pooling of last hidden states H = f(s) into one text embedding h (“A Text is Worth Several Tokens” §2.1, eq.3).

h = Σ_j α_j h_j with Σ_j α_j = 1:
- last:           α_j = 1 at the last real token, else 0;
- mean:           α_j = 1/L over the pooled positions;
- weighted-mean:  α_j = j / Σ_j j, j counted 1..L inside the pooled positions
                  (position-weighted mean, Muennighoff 2022).

``attention_mask`` marks real (non-pad) tokens and works with left or right padding;
``pool_mask`` (default: the attention mask) selects the positions mean-type pooling reads,
e.g. only the text inside a template, or the second copy in echo embeddings.
All pooling is computed in float32.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch

__all__ = ["POOLINGS", "last_token_index", "pool_last", "pool_mean", "pool_weighted_mean", "pool"]


def _check(hidden: torch.Tensor, mask: torch.Tensor, what: str, validate: bool = True) -> torch.Tensor:
    if hidden.dim() != 3:
        raise InvalidInputError(f"hidden states must be [batch, seq, dim], got shape {tuple(hidden.shape)}")
    if mask.shape != hidden.shape[:2]:
        raise InvalidInputError(f"{what} shape {tuple(mask.shape)} does not match hidden {tuple(hidden.shape[:2])}")
    m = mask.to(device=hidden.device, dtype=torch.bool)
    if not validate:  # the caller checked the rows (reading a GPU mask back would wait for the GPU)
        return m
    empty = (~m.any(dim=1)).nonzero().flatten()
    if empty.numel():
        raise InvalidInputError(f"{what} has no selected token in rows {empty.tolist()[:10]}")
    return m


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real token of each row (left or right padding): int64 [batch]."""
    m = attention_mask.to(torch.bool)
    pos = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return torch.where(m, pos, torch.full_like(pos, -1)).max(dim=1).values


def pool_last(hidden: torch.Tensor, attention_mask: torch.Tensor, validate: bool = True) -> torch.Tensor:
    m = _check(hidden, attention_mask, "attention_mask", validate)
    idx = last_token_index(m)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), idx].float()


def pool_mean(hidden: torch.Tensor, pool_mask: torch.Tensor, validate: bool = True) -> torch.Tensor:
    m = _check(hidden, pool_mask, "pool_mask", validate).float()
    return (hidden.float() * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)


def pool_weighted_mean(hidden: torch.Tensor, pool_mask: torch.Tensor, validate: bool = True) -> torch.Tensor:
    m = _check(hidden, pool_mask, "pool_mask", validate).float()
    w = torch.cumsum(m, dim=1) * m  # j = 1..L inside the pooled positions, 0 elsewhere
    w = w / w.sum(1, keepdim=True)
    return (hidden.float() * w.unsqueeze(-1)).sum(1)


POOLINGS = ("last", "mean", "weighted-mean")


def pool(kind: str, hidden: torch.Tensor, attention_mask: torch.Tensor, pool_mask: torch.Tensor | None = None,
         *, validate: bool = True) -> torch.Tensor:
    """Dispatch by name; ``pool_mask`` defaults to ``attention_mask`` (ignored by ``last``).
    ``validate=False`` skips the check that every row selects a token, for a caller that made
    sure of it (on a GPU the check waits for the GPU to finish)."""
    if kind == "last":
        return pool_last(hidden, attention_mask, validate)
    pm = attention_mask if pool_mask is None else pool_mask
    if kind == "mean":
        return pool_mean(hidden, pm, validate)
    if kind == "weighted-mean":
        return pool_weighted_mean(hidden, pm, validate)
    raise InvalidInputError(f"unknown pooling {kind!r}; use one of {POOLINGS}")
