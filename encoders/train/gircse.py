"""GIRCSE training (GIRCSE §3.3, Algorithm 1, §4.1, App. C).

Queries and documents generate K soft tokens (K=5 in training, App. C); per step k the pooled z_k of
the first k generated states enters an InfoNCE over the batch's documents (eq.7), plus λ times the
iterative refinement regulariser (eq.8, λ=1). τ=0.02 and lr 1e-5 are App. C's values (the paper
itself raises lr to 1e-4 for Llama-3B, which did not converge at 1e-5; LoRA r=64, α=32 there).

Input format (``prompt``, as the embedder reads it): ``instruct`` (default) is §4.1's
``Instruct: {task}\\nQuery: {q}`` for queries, raw documents; ``prompteol`` wraps texts in the
PromptEOL template; ``plain`` is the instruction line + raw text. Give the task with
``instruction`` (a task name of encoders/templates.py, e.g. ``scifact``, or a literal sentence).

Loss scale (``reduction``): eq.7 defines L_contrast = Σ_k L_k, a *sum* over the K steps, and eq.8's
L_reg is already a mean over the K-1 step pairs; ``sum`` (default) is the paper's objective. With
AdamW the update is invariant to a constant factor on the loss (up to ε), so ``mean`` (Σ_k L_k / K)
differs only in that it (a) multiplies λ's relative weight by K and (b) lets gradient clipping
(``max_grad_norm``) bite K times later. The logged ``loss`` is the optimised objective; ``contrast``
is always the eq.7 sum and ``L{k}`` each step's InfoNCE.
"""
from __future__ import annotations

import torch

from alignir.encoders.batching import in_length_groups
from alignir.encoders.embedders.gircse import PROMPTS, generate_soft_tokens, gircse_input_ids
from alignir.encoders.embedders.generative import left_pad, pad_id
from alignir.encoders.templates import resolve_instruction
from alignir.encoders.train.base import Method, in_batch_candidates, pair_texts
from alignir.encoders.train.losses import gircse_loss, stepwise_contrastive
from alignir.errors import InvalidInputError

__all__ = ["GircseMethod"]


class GircseMethod(Method):
    name = "gircse"
    STAGES = {"icr": "pairs"}
    DEFAULTS = {"icr": {"K": 5, "tau": 0.02, "lam": 1.0, "instruction": None, "prompt": "instruct", "reduction": "sum"}}

    def setup(self, extra):
        if self.hp["prompt"] not in PROMPTS:
            raise InvalidInputError(f"unknown GIRCSE prompt {self.hp['prompt']!r}; use one of {PROMPTS}")
        if self.hp["reduction"] not in ("sum", "mean"):
            raise InvalidInputError(f"reduction must be 'sum' (eq.7) or 'mean', got {self.hp['reduction']!r}")

    def embedder_options(self):
        # K too, so the adapter reads at its training K by default: at our scale quality falls beyond
        # the training K, unlike GIRCSE §5.1 / Fig. 2 (the test-time K sweep in docs/models.md)
        return {"prompt": self.hp["prompt"], "K": int(self.hp["K"])}

    def _G(self, texts, instruction):
        rows = [gircse_input_ids(self.tokenizer, t, instruction, self.max_length, self.hp["prompt"]) for t in texts]
        K, pad = int(self.hp["K"]), pad_id(self.tokenizer)
        # in groups of similar length; each group's generation is a prefill and K steps
        return in_length_groups([len(r) for r in rows], self.device, lambda group: generate_soft_tokens(
            self.model, *left_pad([rows[i] for i in group], pad, self.device), K, use_cache=True), forwards_per_group=K + 1)

    def loss(self, batch):
        queries, docs, pos = pair_texts(batch)
        Gq = self._G(queries, resolve_instruction(self.hp["instruction"]))
        Gd = self._G(docs, None)
        Lk = stepwise_contrastive(Gq, Gd, torch.tensor(pos), float(self.hp["tau"]), in_batch_candidates(batch, docs))
        total, contrast, reg = gircse_loss(Lk, float(self.hp["lam"]), self.hp["reduction"])
        logs = {"loss": float(total.detach()), "contrast": float(contrast.detach()), "reg": float(reg.detach())}
        logs.update({f"L{k + 1}": float(v.detach()) for k, v in enumerate(Lk)})
        return total, logs
