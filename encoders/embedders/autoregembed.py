"""AutoRegEmbed embedder (AutoRegEmbed §3.2, App. A, App. D Table 5).

Input: text q, then instruction t, then k compress tokens c (the combined (q, t, c) of §3.2);
e_c = (e_{c_1}, ..., e_{c_k}) are the compress tokens' final hidden states. Queries use I_next,
documents I_self (Table 5). For inner-product retrieval the k states are mean-pooled into one
vector (the paper does not name the pooling; ``pooling="last"`` takes e_{c_k} instead).
k = 5 (App. A). Compress-token embeddings are learned and stored with the adapter.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch

from alignir.encoders.templates import I_NEXT, I_SELF, INSTRUCTION_SEPARATOR
from alignir.encoders.embedders.trained import TrainedEmbedder
from alignir.encoders.embedders.generative import (bos_ids, input_embeddings, left_pad, pad_id, position_ids, run_backbone,
                                    token_ids)

__all__ = ["AutoRegEmbedEmbedder", "compress", "compress_rows", "pool_compress", "autoreg_input_ids", "role_instruction"]


def role_instruction(role: str, task: str = "retrieval") -> str:
    """I_next for queries, I_self for documents (AutoRegEmbed Table 5)."""
    if task not in I_NEXT:
        raise InvalidInputError(f"unknown AutoRegEmbed task {task!r}; use one of {sorted(I_NEXT)}")
    if role == "query":
        return I_NEXT[task]
    if role == "document":
        return I_SELF[task]
    raise InvalidInputError(f"role must be 'query' or 'document', got {role!r}")


def autoreg_input_ids(tokenizer, text: str, instruction: str, max_length: int) -> list[int]:
    """[bos] + text (truncated to max_length) + separator + instruction."""
    return bos_ids(tokenizer) + token_ids(tokenizer, text, max_length) + token_ids(
        tokenizer, INSTRUCTION_SEPARATOR + instruction)


def compress(model, tokenizer, texts: list[str], instruction: str, soft: torch.Tensor, max_length: int = 512) -> torch.Tensor:
    """e_c [B, k, d]: final hidden states of the k compress tokens appended after (q, t) (§3.2)."""
    rows = [autoreg_input_ids(tokenizer, t, instruction, max_length) for t in texts]
    return compress_rows(model, rows, pad_id(tokenizer), soft)


def compress_rows(model, rows: list[list[int]], pad: int, soft: torch.Tensor) -> torch.Tensor:
    """:func:`compress` of texts already turned into :func:`autoreg_input_ids` rows."""
    dev = soft.device
    ids, mask = left_pad(rows, pad, dev)
    X = input_embeddings(model)(ids)
    C = soft.to(X.dtype).unsqueeze(0).expand(X.shape[0], -1, -1)
    embeds = torch.cat([X, C], dim=1)
    mask = torch.cat([mask, torch.ones(C.shape[:2], dtype=mask.dtype, device=dev)], dim=1)
    H = run_backbone(model, embeds, mask, position_ids(mask)).last_hidden_state
    return H[:, -soft.shape[0]:]


def pool_compress(e_c: torch.Tensor, pooling: str = "mean") -> torch.Tensor:
    """One vector [B, d] from e_c [B, k, d]: the mean of the k states, or the last one."""
    if pooling == "mean":
        return e_c.float().mean(1)
    if pooling == "last":
        return e_c[:, -1].float()
    raise InvalidInputError(f"unknown AutoRegEmbed pooling {pooling!r}; use 'mean' or 'last'")


class AutoRegEmbedEmbedder(TrainedEmbedder):
    """``get_embedder("autoregembed", model, k=5, task="retrieval", pooling="mean", adapter=DIR)``."""

    family = "autoregembed"
    soft_key = "compress_tokens"
    OPTIONS = {"k": 5, "task": "retrieval", "pooling": "mean"}

    def validate_options(self) -> None:
        if int(self.options["k"]) < 1:
            raise InvalidInputError(f"k (compress tokens) must be >= 1, got {self.options['k']}")
        role_instruction("query", self.options["task"])
        pool_compress(torch.zeros(1, 1, 1), self.options["pooling"])

    def embed_batch(self, texts: list[str], role: str) -> torch.Tensor:
        instr = role_instruction(role, self.options["task"])
        e_c = compress(self.model, self.tokenizer, texts, instr, self.soft, self.max_length)
        return pool_compress(e_c, self.options["pooling"])
