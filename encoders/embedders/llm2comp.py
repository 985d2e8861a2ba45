"""LLM2Comp embedder (LLM2Comp §3.1 eq.1/3 and eq.6, App. 2.1).

The causal LLM is switched to bidirectional attention (every token attends to every real token)
and k memory tokens m_1..m_k (default 8, §3.2) are appended after the text; their final hidden
states m̃_i (eq.1) are mean-pooled into z = (1/k) Σ_i m̃_i (eq.6). The memory-token embeddings
are learned (App. 2.1 keeps the embedding layer trainable for them) and stored with the adapter.
``bidirectional=False`` keeps the causal mask (ablation / untouched causal model).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch

from alignir.encoders.templates import INSTRUCTION_SEPARATOR, resolve_instruction
from alignir.encoders.embedders.trained import TrainedEmbedder
from alignir.encoders.embedders.generative import (bidirectional_mask, bos_ids, input_embeddings, left_pad, pad_id, position_ids,
                                    run_backbone, token_ids)

__all__ = ["LLM2CompEmbedder", "memory_input_ids", "memory_states", "memory_states_of_rows", "encoder_states"]


def encoder_states(model, ids: torch.Tensor, mask: torch.Tensor, soft: torch.Tensor | None,
                   bidirectional: bool = True) -> torch.Tensor:
    """Final hidden states [B, L(+k), d] of left-padded ``ids`` with ``soft`` tokens appended."""
    X = input_embeddings(model)(ids)
    if soft is not None:
        M = soft.to(X.dtype).unsqueeze(0).expand(X.shape[0], -1, -1)
        X = torch.cat([X, M], dim=1)
        mask = torch.cat([mask, torch.ones(M.shape[:2], dtype=mask.dtype, device=mask.device)], dim=1)
    attn = bidirectional_mask(mask, X.dtype) if bidirectional else mask
    return run_backbone(model, X, attn, position_ids(mask)).last_hidden_state


def memory_input_ids(tokenizer, text: str, instruction: str | None, max_length: int) -> list[int]:
    """[bos] + instruction and separator (queries of the SCL stage) + text, truncated to ``max_length``."""
    pre = token_ids(tokenizer, instruction + INSTRUCTION_SEPARATOR) if instruction else []
    return bos_ids(tokenizer) + pre + token_ids(tokenizer, text, max_length)


def memory_states(model, tokenizer, texts: list[str], soft: torch.Tensor, max_length: int = 512,
                  bidirectional: bool = True, instruction: str | None = None) -> torch.Tensor:
    """m̃ [B, k, d]: memory-token states of f_θ(n_1..n_a, m_1..m_k) (eq.1)."""
    rows = [memory_input_ids(tokenizer, t, instruction, max_length) for t in texts]
    return memory_states_of_rows(model, rows, pad_id(tokenizer), soft, bidirectional)


def memory_states_of_rows(model, rows: list[list[int]], pad: int, soft: torch.Tensor,
                          bidirectional: bool = True) -> torch.Tensor:
    """:func:`memory_states` of texts already turned into :func:`memory_input_ids` rows."""
    ids, mask = left_pad(rows, pad, soft.device)
    return encoder_states(model, ids, mask, soft, bidirectional)[:, -soft.shape[0]:]


class LLM2CompEmbedder(TrainedEmbedder):
    """``get_embedder("llm2comp", model, k=8, bidirectional=True, adapter=DIR)``; queries may take
    an ``instruction`` (task name or text) in front, as in the SCL stage (App. 2.1, Table 3)."""

    family = "llm2comp"
    soft_key = "memory_tokens"
    OPTIONS = {"k": 8, "bidirectional": True}

    def validate_options(self) -> None:
        if int(self.options["k"]) < 1:
            raise InvalidInputError(f"k (memory tokens) must be >= 1, got {self.options['k']}")

    def embed_batch(self, texts: list[str], role: str) -> torch.Tensor:
        instr = resolve_instruction(self.instruction) if role == "query" else None
        m = memory_states(self.model, self.tokenizer, texts, self.soft, self.max_length,
                          bool(self.options["bidirectional"]), instr)
        return m.float().mean(1)  # eq.6
