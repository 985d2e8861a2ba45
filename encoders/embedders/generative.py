"""Forward helpers of the generative embedders (AutoRegEmbed, LLM2Comp, GIRCSE): inference side.

Sequences are left-padded so that soft tokens (compress / memory / generated tokens) can be
appended to every row at the same columns; position ids are recomputed from the attention mask
so a padded row gets the same positions (and the same states) as the row alone.
All functions are differentiable: the embedders call them under ``torch.no_grad`` and the
trainers (encoders/train/) call them with gradients.
"""
from __future__ import annotations

from typing import Sequence

import torch

from alignir.errors import InvalidInputError

__all__ = [
    "bos_ids",
    "token_ids",
    "left_pad",
    "pad_id",
    "position_ids",
    "input_embeddings",
    "run_backbone",
    "bidirectional_mask",
    "init_soft_tokens",
]

def bos_ids(tokenizer) -> list[int]:
    """[bos] when the tokenizer itself prepends a BOS token (Gemma), else [] (SmolLM2, Qwen)."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return []
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return [int(bos)] if ids and ids[0] == bos else []


def token_ids(tokenizer, text: str, max_length: int | None = None) -> list[int]:
    """Tokenizer ids of ``text`` without special tokens, truncated to ``max_length``."""
    if not isinstance(text, str):
        raise InvalidInputError(f"texts must be strings, got {type(text).__name__}")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return list(ids[:max_length] if max_length else ids)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad id lists into (ids [B, L] int64, attention mask [B, L] int64)."""
    if not rows:
        raise InvalidInputError("no sequences to pad")
    L = max(len(r) for r in rows)
    if L == 0:
        raise InvalidInputError("all sequences are empty")
    ids = torch.full((len(rows), L), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, L - len(r):] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, L - len(r):] = 1
    return ids.to(device), mask.to(device)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over the real tokens of each row (pads get 0)."""
    return (mask.long().cumsum(1) - 1).clamp(min=0)


def input_embeddings(model) -> torch.nn.Module:
    return model.get_input_embeddings()


def _backbone(model):
    from alignir.encoders.models import backbone

    return backbone(model)


def run_backbone(model, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor,
                 pos: torch.Tensor | None = None, past_key_values=None, use_cache: bool = False):
    """Final-layer hidden states (after the final norm) of ``inputs_embeds``; no LM head.

    ``attention_mask`` is a 2D padding mask (causal attention) or a prepared 4D additive mask.
    """
    kw = dict(inputs_embeds=inputs_embeds, attention_mask=attention_mask, use_cache=use_cache)
    if pos is not None:
        kw["position_ids"] = pos
    if past_key_values is not None:
        kw["past_key_values"] = past_key_values
    return _backbone(model)(**kw)


def bidirectional_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """4D additive mask [B, 1, L, L]: every position attends to every real (non-pad) position.

    This is what turns the causal LM into the bidirectional encoder f_θ of LLM2Comp (LLM2Comp §3.1).
    """
    keep = mask.to(torch.bool)[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
    out = torch.zeros(keep.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~keep, torch.finfo(dtype).min)


def init_soft_tokens(model, k: int) -> torch.Tensor:
    """Initial embeddings [k, d] of k new soft tokens: the mean input-token embedding, for every slot.

    Deterministic (no RNG), so an untrained embedder is reproducible across processes; the slots
    still differ in their states because their positions differ.
    """
    if k < 1:
        raise InvalidInputError(f"number of soft tokens must be >= 1, got {k}")
    E = input_embeddings(model).weight.detach()
    return E.float().mean(0, keepdim=True).repeat(k, 1).to(E.dtype)


def pad_id(tokenizer) -> int:
    p = tokenizer.pad_token_id
    if p is None:
        p = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return int(p)
