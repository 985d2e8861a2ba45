"""GIRCSE training (GIRCSE §3.3, Algorithm 1, App. C).

Queries and documents generate K soft tokens (K=5 in training); per step k the pooled z_k of the
first k generated states enters an InfoNCE over the batch's documents (eq.7, τ=0.02), summed over
k, plus λ times the iterative refinement regulariser (eq.8, λ=1).
"""
from __future__ import annotations

import torch

from alignir.encoders.embedders.gircse import generate_soft_tokens, gircse_input_ids
from alignir.encoders.templates import resolve_instruction
from alignir.encoders.train.base import Method, pair_texts
from alignir.encoders.train.genbase import left_pad, pad_id
from alignir.encoders.train.losses import gircse_loss, stepwise_contrastive

__all__ = ["GircseMethod"]


class GircseMethod(Method):
    name = "gircse"
    STAGES = {"icr": "pairs"}
    DEFAULTS = {"icr": {"K": 5, "tau": 0.02, "lam": 1.0, "instruction": None}}

    def embedder_options(self):
        return {}

    def _G(self, texts, instruction):
        rows = [gircse_input_ids(self.tokenizer, t, instruction, self.max_length) for t in texts]
        ids, mask = left_pad(rows, pad_id(self.tokenizer), self.device)
        return generate_soft_tokens(self.model, ids, mask, int(self.hp["K"]), use_cache=True)

    def loss(self, batch):
        queries, docs, pos = pair_texts(batch)
        Gq = self._G(queries, resolve_instruction(self.hp["instruction"]))
        Gd = self._G(docs, None)
        Lk = stepwise_contrastive(Gq, Gd, torch.tensor(pos), float(self.hp["tau"]))
        total, contrast, reg = gircse_loss(Lk, float(self.hp["lam"]))
        logs = {"loss": float(total.detach()), "contrast": float(contrast.detach()), "reg": float(reg.detach())}
        logs.update({f"L{k + 1}": float(v.detach()) for k, v in enumerate(Lk)})
        return total, logs
