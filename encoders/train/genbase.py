"""Shared machinery of the trained generative embedders (AutoRegEmbed, LLM2Comp, GIRCSE).

Sequences are left-padded so that soft tokens (compress / memory / generated tokens) can be
appended to every row at the same columns; position ids are recomputed from the attention mask
so a padded row gets the same positions (and the same states) as the row alone.
All functions are differentiable: the embedders call them under ``torch.no_grad`` and the
trainers call them with gradients.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

from typing import Sequence

import torch

__all__ = [
    "bos_ids",
    "token_ids",
    "left_pad",
    "position_ids",
    "input_embeddings",
    "run_backbone",
    "bidirectional_mask",
    "init_soft_tokens",
    "decoder_logits",
    "token_logprobs",
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


def pad_id(tokenizer) -> int:
    p = tokenizer.pad_token_id
    if p is None:
        p = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return int(p)
