"""LLM2Comp training (LLM2Comp §3.1, §5.1, App. 2.1).

Pretext stages on raw text, encoder f_θ = LLM + LoRA with bidirectional attention and k memory
tokens, decoder g_φ = the frozen LLM (adapter disabled):
- ``rc``   reconstruction (eq.1-2): NLL of the text given m̃_1..m̃_k;
- ``nll``  continuation (eq.3-4): the text is split into prefix n_1..n_a (encoded) and
  continuation n_{a+1}.. (predicted), NLL of the continuation;
- ``ctkd`` continuation + KL (eq.5): ``kd_weight`` · KL(g_φ(·|n_1..n_{j-1}) ‖ g_φ(·|m̃, n_{a+1}..n_{j-1}))
  + ``nll_weight`` · NLL. Eq.5 (and the authors' code) is the KL alone, so ``nll_weight`` defaults
  to 0: with 1 the stage would be CT-NLL plus a KL term and CTKD vs NLL would not compare the two
  objectives of the paper.
Contrastive post-training (§5.1): ``ucl`` SimCSE with dropout views (eq.8, dropout 0.2, in-batch
negatives) on raw texts and ``scl`` the same InfoNCE with in-batch + hard negatives on pairs
(labelled pairs, or the unsupervised title/crop pairs of ``--data-mix``), queries under
``instruction`` (App. Table 3 style). The recipe is ``--stages ctkd,ucl,scl``, each stage from the
previous adapter; App. 2.1's settings: lr 1e-4 / 3e-5 / 1e-4 (DEFAULT_LR) and weight decay 1e-5 /
1e-3 / 3e-4 (``--stage-option ucl.weight_decay=1e-3 --stage-option scl.weight_decay=3e-4``).

Attention (``bidirectional``, every stage, recorded for the embedder): True is §3's bidirectional
encoder; False keeps the LLM's causal mask with the memory tokens after the text (App. 3, Fig. 11:
bidirectional is better for retrieval, causal for STS / classification; untrained, the causal readout
keeps more of the LLM's zero-shot quality — our own 16-query check, not a paper claim).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch

from alignir.encoders.batching import in_length_groups
from alignir.encoders.embedders.llm2comp import memory_input_ids, memory_states_of_rows
from alignir.encoders.templates import resolve_instruction
from alignir.encoders.train.adapter import frozen
from alignir.encoders.train.base import Method, in_batch_candidates, pair_texts
from alignir.encoders.embedders.generative import bos_ids, init_soft_tokens, input_embeddings, left_pad, pad_id, token_ids
from alignir.encoders.train.genbase import decoder_logits, right_pad, token_logprobs
from alignir.encoders.train.losses import ctkd_kl, info_nce, sequence_nll, simcse_loss

__all__ = ["LLM2CompMethod", "set_dropout"]


def set_dropout(model, p: float) -> int:
    """Set attention dropout of every attention module (SimCSE positives, §5.2); returns count."""
    n = 0
    for m in model.modules():
        if hasattr(m, "attention_dropout") and isinstance(getattr(m, "attention_dropout"), float):
            m.attention_dropout = float(p)
            n += 1
    return n


class LLM2CompMethod(Method):
    name = "llm2comp"
    soft_key = "memory_tokens"
    STAGES = {"rc": "texts", "nll": "texts", "ctkd": "texts", "ucl": "texts", "scl": "pairs"}
    _common = {"k": 8, "bidirectional": True}
    DEFAULTS = {
        "rc": dict(_common),
        "nll": {**_common, "prefix_ratio": 0.5},
        "ctkd": {**_common, "prefix_ratio": 0.5, "kd_weight": 1.0, "nll_weight": 0.0},
        "ucl": {**_common, "tau": 0.05, "dropout": 0.2},
        "scl": {**_common, "tau": 0.05, "instruction": None},
    }

    def setup(self, extra):
        k = int(self.hp["k"])
        init = extra.get(self.soft_key)
        if init is not None and init.shape[0] != k:
            raise InvalidInputError(f"the initial adapter has {init.shape[0]} memory tokens, k={k} requested")
        base = init if init is not None else init_soft_tokens(self.model, k)
        self.soft = torch.nn.Parameter(base.detach().float().clone().to(self.device))
        if self.stage == "ucl":
            if not 0.0 <= float(self.hp["dropout"]) < 1.0:
                raise InvalidInputError(f"dropout must be in [0, 1), got {self.hp['dropout']}")
            if set_dropout(self.model, float(self.hp["dropout"])) == 0:
                raise InvalidInputError("the model has no attention dropout to create SimCSE views with")

    def embedder_options(self):
        return {"k": int(self.hp["k"]), "bidirectional": bool(self.hp["bidirectional"])}

    def _mem(self, rows):
        """m̃ [B, k, d] of token-id rows (eq.1), forwarded in groups of similar length."""
        pad, bidirectional = pad_id(self.tokenizer), bool(self.hp["bidirectional"])
        return in_length_groups([len(r) for r in rows], self.soft.device, lambda group: memory_states_of_rows(
            self.model, [rows[i] for i in group], pad, self.soft, bidirectional))

    def _embed(self, texts, instruction=None):
        rows = [memory_input_ids(self.tokenizer, t, instruction, self.max_length) for t in texts]
        return self._mem(rows).float().mean(1)  # eq.6

    def loss(self, batch):
        st = self.stage
        if st == "ucl":
            self.model.train()  # dropout on: two passes give two views
            loss = simcse_loss(self._embed(batch), self._embed(batch), float(self.hp["tau"]))
            return loss, {"loss": float(loss.detach())}
        if st == "scl":
            queries, docs, pos = pair_texts(batch)
            q = self._embed(queries, resolve_instruction(self.hp["instruction"]))
            d = self._embed(docs)
            loss = info_nce(q, d, torch.tensor(pos), float(self.hp["tau"]), in_batch_candidates(batch, docs))
            return loss, {"loss": float(loss.detach())}
        tok = self.tokenizer
        pid = pad_id(tok)
        bos = bos_ids(tok)
        if st == "rc":
            rows = [token_ids(tok, t, self.max_length) for t in batch]
            m = self._mem([bos + r for r in rows])
            tgt = right_pad(rows, pid, self.device)
            with frozen(self.model):
                lg = decoder_logits(self.model, m, *tgt)
            loss = sequence_nll(token_logprobs(lg, *tgt), tgt[1])
            return loss, {"loss": float(loss.detach())}
        # continuation tasks: split each text into prefix / continuation
        pre, cont = [], []
        for t in batch:
            r = token_ids(tok, t, self.max_length + self.target_length)
            if len(r) < 2:
                continue
            a = min(max(1, int(round(len(r) * float(self.hp["prefix_ratio"])))), len(r) - 1, self.max_length)
            pre.append(r[:a])
            cont.append(r[a:a + self.target_length])
        if not pre:
            raise InvalidInputError("continuation tasks need texts of at least 2 tokens")
        m = self._mem([bos + r for r in pre])
        tgt = right_pad(cont, pid, self.device)
        with frozen(self.model):
            lg = decoder_logits(self.model, m, *tgt)
        nll = sequence_nll(token_logprobs(lg, *tgt), tgt[1])
        if st == "nll":
            return nll, {"loss": float(nll.detach())}
        with torch.no_grad(), frozen(self.model):  # teacher: g_φ on the original context
            ids, mask = left_pad([bos + r for r in pre], pid, self.device)
            teacher = decoder_logits(self.model, input_embeddings(self.model)(ids), *tgt, prefix_mask=mask)
        kl = ctkd_kl(teacher, lg, tgt[1])
        loss = float(self.hp["kd_weight"]) * kl + float(self.hp["nll_weight"]) * nll
        return loss, {"loss": float(loss.detach()), "nll": float(nll.detach()), "kl": float(kl.detach())}
