"""Training-side forward helpers: a frozen decoder reading soft prefixes, token log-probs, targets.

The inference helpers (padding, positions, soft tokens, backbone) live in
``alignir.encoders.embedders.generative``; import them from there.
"""
from __future__ import annotations

from typing import Sequence

import torch

from alignir.encoders.embedders.generative import input_embeddings, position_ids

__all__ = ["decoder_logits", "token_logprobs", "right_pad"]


def decoder_logits(decoder, prefix: torch.Tensor, target_ids: torch.Tensor, target_mask: torch.Tensor,
                   prefix_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [B, T, V] of a causal decoder predicting ``target_ids`` (right-padded) after ``prefix``.

    ``prefix`` [B, P, d] are input embeddings (compressed / memory states, or embedded context
    tokens, left-padded with ``prefix_mask``); row t of the output predicts target token t.
    """
    B, P, _ = prefix.shape
    if prefix_mask is None:
        prefix_mask = torch.ones((B, P), dtype=torch.long, device=prefix.device)
    tgt = input_embeddings(decoder)(target_ids).to(prefix.dtype)
    embeds = torch.cat([prefix, tgt], dim=1)
    mask = torch.cat([prefix_mask.long(), target_mask.long()], dim=1)
    out = decoder(inputs_embeds=embeds, attention_mask=mask, position_ids=position_ids(mask), use_cache=False)
    return out.logits[:, P - 1:P - 1 + target_ids.shape[1]].float()


def token_logprobs(logits: torch.Tensor, target_ids: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """log p(target_t | ...) [B, T], zero at padded target positions."""
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, target_ids.unsqueeze(-1)).squeeze(-1)
    return lp * target_mask.to(lp.dtype)


def right_pad(rows: Sequence[Sequence[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists (decoder targets) into (ids [B, T], mask [B, T])."""
    T = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), T), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, :len(r)] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, :len(r)] = 1
    return ids.to(device), mask.to(device)
