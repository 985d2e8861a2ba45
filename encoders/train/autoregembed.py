"""AutoRegEmbed training (AutoRegEmbed §3.2-3.3, App. A-C).

Stage ``ic`` (information compression, §3.2): the frozen decoder D (the LLM without the adapter)
must generate the target d from the compress-token states e_c only: L_IC = -log P(d | e_c).
With pairs the target is d+ from e_{q,I_next}; ``ic_self`` adds d+ from e_{d+,I_self} (the
pairing S1 later compares). With raw text the target is the text from its own e_{d,I_self}.

Stage ``cda`` (conditional distribution alignment, eq.2): S1, S2 from sequence log-likelihoods
of the frozen decoder given the current encoder's embeddings and a frozen reference encoder
(the model when CDA starts: p_ref); τ=0.05, β=0.1 (App. A). ``squash``: sigmoid (eq.2),
logsigmoid (App. B), tanh (App. C); ``divergence``: logratio (eq.2), kl / js (App. B).
Hard negatives come with the pairs; rows lacking them borrow other rows' positives.

Stage ``contrastive`` (§4.1 "Training": for retrieval the paper adds an epoch of contrastive
fine-tuning after IC/CDA, "to better align with the evaluation process", with mined hard
negatives): InfoNCE (eq.1) between the mean-pooled compress states of the query (I_next) and of
every document of the batch (I_self: positives, in-batch negatives, hard negatives) — exactly the
vectors the embedder retrieves with. ``in_batch=False`` is eq.1 to the letter: each query's
denominator holds its positive and its own hard negatives d_i^- only (the paper draws 7 from NV-Embed's
ranks 30-210; here ``--negatives N`` from BM25's top 30). τ=0.05 is the paper's temperature (App. A, also
its InfoNCE baselines'); lr 1e-4 the best of its InfoNCE baselines (App. A), as §4.1 gives none for
this epoch. The stage starts from the CDA (or IC) adapter: ``--stages ic,cda,contrastive``.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import copy

import torch

from alignir.encoders.batching import in_length_groups
from alignir.encoders.embedders.autoregembed import autoreg_input_ids, compress_rows, pool_compress, role_instruction
from alignir.encoders.train.adapter import frozen
from alignir.encoders.train.base import Method, in_batch_candidates, pair_texts
from alignir.encoders.embedders.generative import init_soft_tokens, pad_id, token_ids
from alignir.encoders.train.genbase import decoder_logits, right_pad, token_logprobs
from alignir.encoders.train.losses import (SQUASH, cda_divergence_loss, cda_loss, info_nce, own_candidates, sequence_nll,
                                          token_divergence)

__all__ = ["AutoRegEmbedMethod"]


class AutoRegEmbedMethod(Method):
    name = "autoregembed"
    soft_key = "compress_tokens"
    STAGES = {"ic": "pairs", "ic-text": "texts", "cda": "pairs", "contrastive": "pairs"}
    DEFAULTS = {
        "ic": {"k": 5, "task": "retrieval", "ic_self": True},
        "ic-text": {"k": 5, "task": "retrieval"},
        "cda": {"k": 5, "task": "retrieval", "tau": 0.05, "beta": 0.1, "squash": "sigmoid", "divergence": "logratio"},
        "contrastive": {"k": 5, "task": "retrieval", "tau": 0.05, "in_batch": True},
    }

    def setup(self, extra):
        k = int(self.hp["k"])
        init = extra.get(self.soft_key)
        if init is not None and init.shape[0] != k:
            raise InvalidInputError(f"the initial adapter has {init.shape[0]} compress tokens, k={k} requested")
        base = init if init is not None else init_soft_tokens(self.model, k)
        self.soft = torch.nn.Parameter(base.detach().float().clone().to(self.device))
        self.i_next = role_instruction("query", self.hp["task"])
        self.i_self = role_instruction("document", self.hp["task"])
        self.ref = None
        if self.stage == "cda":
            if self.hp["squash"] not in SQUASH:
                raise InvalidInputError(f"squash must be one of {SQUASH}, got {self.hp['squash']!r}")
            if self.hp["divergence"] not in ("logratio", "kl", "js"):
                raise InvalidInputError(f"divergence must be logratio, kl or js, got {self.hp['divergence']!r}")
            # p_ref: the encoder as it is when CDA starts (after IC), frozen
            self.ref = copy.deepcopy(self.model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            self.ref_soft = self.soft.detach().clone()

    def embedder_options(self):
        return {"k": int(self.hp["k"]), "task": self.hp["task"]}

    # -- pieces
    def _enc(self, texts, instr, model=None, soft=None):
        """e_c of ``texts`` (embedders.autoregembed.compress), forwarded in groups of similar length."""
        rows = [autoreg_input_ids(self.tokenizer, t, instr, self.max_length) for t in texts]
        model, soft, pad = model or self.model, self.soft if soft is None else soft, pad_id(self.tokenizer)
        return in_length_groups([len(r) for r in rows], soft.device,
                                lambda group: compress_rows(model, [rows[i] for i in group], pad, soft))

    def _targets(self, texts):
        rows = [token_ids(self.tokenizer, t, self.target_length) or [pad_id(self.tokenizer)] for t in texts]
        return right_pad(rows, pad_id(self.tokenizer), self.device)

    def _logits(self, e_c, tgt, model=None):
        with frozen(model or self.model):  # the frozen decoder D
            return decoder_logits(model or self.model, e_c, *tgt)

    def _seq_lp(self, e_c, tgt, model=None):
        return token_logprobs(self._logits(e_c, tgt, model), *tgt).sum(1)

    # -- losses
    def loss(self, batch):
        if self.stage == "ic-text":
            tgt = self._targets(batch)
            loss = sequence_nll(token_logprobs(self._logits(self._enc(batch, self.i_self), tgt), *tgt), tgt[1])
            return loss, {"loss": float(loss.detach())}
        if self.stage == "ic":
            pos = [p.positive for p in batch]
            tgt = self._targets(pos)
            loss = sequence_nll(token_logprobs(self._logits(self._enc([p.query for p in batch], self.i_next), tgt), *tgt), tgt[1])
            logs = {"nll_next": float(loss.detach())}
            if self.hp["ic_self"]:
                l_self = sequence_nll(token_logprobs(self._logits(self._enc(pos, self.i_self), tgt), *tgt), tgt[1])
                logs["nll_self"] = float(l_self.detach())
                loss = 0.5 * (loss + l_self)
            logs["loss"] = float(loss.detach())
            return loss, logs
        if self.stage == "contrastive":
            queries, docs, pos = pair_texts(batch)
            q = pool_compress(self._enc(queries, self.i_next), "mean")
            d = pool_compress(self._enc(docs, self.i_self), "mean")
            cand = in_batch_candidates(batch, docs)  # no document judged relevant to a query is its negative
            if not self.hp["in_batch"]:
                own = own_candidates([len(p.negatives) for p in batch])
                cand = own if cand is None else own & cand
            loss = info_nce(q, d, torch.tensor(pos), float(self.hp["tau"]), cand)
            return loss, {"loss": float(loss.detach())}
        return self._cda(batch)

    def _negatives(self, batch) -> list[list[str]]:
        n = max(1, max(len(p.negatives) for p in batch))
        out = []
        for i, p in enumerate(batch):
            negs = list(p.negatives[:n])
            others = [batch[j].positive for j in range(len(batch)) if j != i]
            while len(negs) < n and others:
                negs.append(others[len(negs) % len(others)])
            if len(negs) < n:
                raise InvalidInputError("CDA needs hard negatives or a batch of at least 2 pairs")
            out.append(negs)
        return out

    def _cda(self, batch):
        B = len(batch)
        queries = [p.query for p in batch]
        pos = [p.positive for p in batch]
        negs = self._negatives(batch)
        n = len(negs[0])
        flat_negs = [negs[i][j] for i in range(B) for j in range(n)]
        e_q = self._enc(queries, self.i_next)
        e_d = self._enc(pos, self.i_self)
        tp = self._targets(pos)
        tn = self._targets(flat_negs)
        e_q_rep = e_q.repeat_interleave(n, 0)
        tau, beta = float(self.hp["tau"]), float(self.hp["beta"])
        if self.hp["divergence"] == "logratio":
            lp_q_pos = self._seq_lp(e_q, tp)
            lp_d_pos = self._seq_lp(e_d, tp)
            lp_q_neg = self._seq_lp(e_q_rep, tn).view(B, n)
            with torch.no_grad():
                r_q = self._enc(queries, self.i_next, self.ref, self.ref_soft)
                ref_pos = self._seq_lp(r_q, tp, self.ref)
                ref_neg = self._seq_lp(r_q.repeat_interleave(n, 0), tn, self.ref).view(B, n)
            loss = cda_loss(lp_q_pos, lp_d_pos, ref_pos, lp_q_neg, ref_neg, tau, beta, self.hp["squash"])
            logs = {"loss": float(loss.detach()), "lp_q_pos": float(lp_q_pos.mean().detach()), "lp_q_neg": float(lp_q_neg.mean().detach()),
                    "ratio_pos": float((lp_q_pos - ref_pos).mean().detach())}
            return loss, logs
        # App. B: KL / JS between next-token distributions
        kind = self.hp["divergence"]
        lg_q = self._logits(e_q, tp)
        lg_d = self._logits(e_d, tp)
        div_pos = token_divergence(lg_d, lg_q, tp[1], kind)
        e_n = self._enc(flat_negs, self.i_self)
        lg_n = self._logits(e_n, tn)
        T = min(lg_n.shape[1], lg_q.shape[1])
        m = tn[1][:, :T] * tp[1].repeat_interleave(n, 0)[:, :T]
        div_neg = token_divergence(lg_n[:, :T], lg_q.repeat_interleave(n, 0)[:, :T], m, kind).view(B, n)
        loss = cda_divergence_loss(div_pos, div_neg, tau, self.hp["squash"])
        return loss, {"loss": float(loss.detach()), "div_pos": float(div_pos.mean().detach()), "div_neg": float(div_neg.mean().detach())}
