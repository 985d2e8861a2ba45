"""The fixed prompt prefix computed once: its key/value cache reused by every text (it
lowers the floor of single-query encoding).

A prompt template such as PromptEOL (“A Text is Worth Several Tokens” §2.2: ``This sentence:
"[text]" means in one word: "``), with a task instruction in front of it (App. C.2, Table 7),
starts with the same tokens for every text. In a causal LM the keys and values of those tokens
depend on them alone, so they are computed once and each text runs only its own tokens and the
template's suffix, attending to the cached prefix. The vectors equal the full forward's up to
float rounding (different matmul shapes), which tests/test_prefix_cache.py checks.

A prompt uses the cache only when its token ids really start with the prefix's ids (a BPE
merge across the template boundary, e.g. ``"`` followed by punctuation, changes them) and every
pooled position lies after the prefix; other prompts run the full forward.
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Sequence

import torch

__all__ = ["PrefixCache"]


def _cache_arg(backbone: torch.nn.Module) -> str:
    """The name of the decoder's KV-cache argument: ``cache`` in recent transformers,
    ``past_key_values`` before (still accepted there, with a deprecation warning)."""
    return "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"


class PrefixCache:
    """The KV cache of ``prefix_ids`` through ``backbone`` (computed at construction)."""

    def __init__(self, backbone: torch.nn.Module, prefix_ids: Sequence[int], device: torch.device) -> None:
        self.ids = tuple(int(i) for i in prefix_ids)
        self.n = len(self.ids)
        self.device = device
        self.kv: Any = None
        self.arg = _cache_arg(backbone)
        if self.n:
            ids = torch.tensor([self.ids], dtype=torch.long, device=device)
            out = backbone(input_ids=ids, attention_mask=torch.ones_like(ids),
                           position_ids=torch.arange(self.n, device=device).unsqueeze(0), use_cache=True)
            self.kv = getattr(out, "cache", None) or out.past_key_values

    def covers(self, ids: Sequence[int], pooled: Sequence[int]) -> bool:
        """Whether a prompt of token ``ids`` pooled at ``pooled`` can run on the cache."""
        return (self.n > 0 and len(ids) > self.n and tuple(ids[: self.n]) == self.ids
                and (not pooled or min(pooled) >= self.n))

    def forward(self, backbone: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden states [B, L, d] of the prompts' tokens after the prefix (``input_ids``,
        ``attention_mask``: [B, L], either padding side), attending to the cached prefix."""
        b = input_ids.shape[0]
        kv = copy.deepcopy(self.kv)
        if b > 1:
            kv.batch_repeat_interleave(b)
        dev = self.device
        full = torch.cat([torch.ones((b, self.n), dtype=attention_mask.dtype), attention_mask], dim=1).to(dev)
        position_ids = (full.cumsum(1) - 1).clamp(min=0)[:, self.n:]
        out = backbone(input_ids=input_ids.to(dev), attention_mask=full, position_ids=position_ids,
                       use_cache=True, **{self.arg: kv})
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
