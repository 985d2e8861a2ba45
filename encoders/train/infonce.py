"""The InfoNCE LoRA baseline ("fair contrastive baseline", AutoRegEmbed App. A, GIRCSE Table 1).

The model reads texts exactly as the training-free PromptEOL embedder does (its template, its
tokenization, last-token pooling; ``PromptEOLEmbedder.embed_with``) and is fine-tuned with InfoNCE
(AutoRegEmbed eq.1) over in-batch + hard negatives. The embedder that reads the trained adapter is
``alignir.encoders.embedders.infonce.InfoNCEEmbedder`` (re-exported here).

Optional distillation: ``teacher`` names a frozen dense embedder
(encoders.train.teacher, e.g. "all-minilm-l6-v2", "embeddinggemma-300m") and ``distill`` > 0 adds
``distill`` × KL(teacher || student) over the same in-batch candidates (losses.distill_kl, the
teacher's cosines at ``teacher_tau``) to the InfoNCE loss. The teacher reads queries and documents
with its own role prompts, cut at ``teacher_max_length`` tokens (None: the teacher's default);
``teacher_cache`` (a folder) keeps its vectors on disk (teacher.CachedTeacher), so they are computed
once across runs and resumes.

Optional aligned-token term (alignir's own, not a seed paper's): ``sparse`` > 0 adds ``sparse`` ×
InfoNCE over the index's sparse-leg scores of the same batch at ``sparse_tau``
(encoders.train.aligned_loss: eq.14-16 of “A Text is Worth Several Tokens” with the token selection
held fixed), so training also shapes the aligned tokens the sparse leg searches. ``sparse_distill`` > 0 adds
``sparse_distill`` × KL(softmax(cos(q, d)/tau).detach() || softmax(sparse scores/sparse_tau)) over the
same candidates (aligned_loss.sparse_distill_kl): the dense leg's own ranking of the batch teaches
the sparse leg, and no gradient reaches the dense scores through this term. ``sparse_tau`` = "auto"
gives each query the temperature at which its sparse scores spread as widely as its dense logits
(aligned_loss.matched_temperature); at a fixed 10 the sparse softmax is near one-hot and the KL
collapsed the documents' aligned tokens onto punctuation and function words (docs/training.md).
``flops_d`` / ``flops_q`` > 0 add that weight × the FLOPS regulariser of the batch's document / query
aligned-token weights (aligned_loss.flops_penalty: Σ_t (mean_i |w_it|)², SPLADE's sparsity term),
which charges a token for being shared by many texts; two weights, since the queries' raw-logit
weights are an order of magnitude larger than the documents' log1p weights. Measured beside
``sparse_distill``, it did not stop the drift towards shared tokens but sped it up, and at a third
of InfoNCE's gradient norm it wrecked the dense leg (docs/training.md).

``grad_cache`` = N > 0 computes the same gradient with gradient caching (encoders.train.grad_cache,
GradCache): every text embedded without autograd N at a time, the whole loss (every term above:
all depend on the model only through the embeddings) backpropagated to the embeddings, then each
sub-batch embedded again with autograd and its embedding gradient backpropagated. Activations of
N texts are held at once instead of the batch's, so the batch (its in-batch negatives) is bounded
by time, not memory; each text is embedded twice.
"""
from __future__ import annotations

from typing import Any

import torch

from alignir.encoders.embedders.infonce import InfoNCEEmbedder
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.train.aligned_loss import (aligned_weights, flops_penalty, matched_temperature, sparse_distill_kl,
                                                 sparse_info_nce)
from alignir.encoders.train.base import Method, in_batch_candidates, pair_texts
from alignir.encoders.train.grad_cache import cached_backward, check_sub_batch
from alignir.encoders.train.losses import cosine_scores, distill_kl, info_nce
from alignir.errors import InvalidInputError

__all__ = ["InfoNCEMethod", "InfoNCEEmbedder", "prompteol_forward"]


def prompteol_forward(reader: PromptEOLEmbedder, model, texts: list[str], role: str) -> torch.Tensor:
    """Differentiable PromptEOL embedding [B, d] of ``texts`` through ``model`` (e.g. a peft model)."""
    return reader.embed_with(model, list(texts), role)


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


class InfoNCEMethod(Method):
    name = "infonce"
    STAGES = {"contrastive": "pairs"}
    DEFAULTS = {"contrastive": {"tau": 0.05, "instruction": None, "teacher": None, "distill": 0.0,
                                "teacher_tau": 0.05, "sparse": 0.0, "sparse_tau": 10.0,
                                "sparse_distill": 0.0, "flops_d": 0.0, "flops_q": 0.0, "teacher_cache": None,
                                "teacher_max_length": None, "grad_cache": 0}}

    def setup(self, extra):
        self.sub_batch = check_sub_batch(self.hp["grad_cache"])
        self.reader = PromptEOLEmbedder(self.loaded, instruction=self.hp["instruction"],
                                        max_length=self.max_length, progress=False)
        self.teacher = None
        weight = float(self.hp["distill"])
        if weight < 0 or (weight > 0) != (self.hp["teacher"] is not None):
            raise InvalidInputError("distillation needs both a teacher and a weight distill > 0 "
                                    f"(got teacher={self.hp['teacher']!r}, distill={weight})")
        tau = self.hp["sparse_tau"]
        term_weights = {k: self.hp[k] for k in ("sparse", "sparse_distill", "flops_d", "flops_q")}
        if min(float(v) for v in term_weights.values()) < 0 or not (tau == "auto" or _positive(tau)):
            raise InvalidInputError("the aligned-token terms need sparse, sparse_distill, flops_d and flops_q >= 0 and "
                                    f"sparse_tau > 0 or 'auto' (got {term_weights}, sparse_tau={tau!r})")
        if weight > 0:
            from alignir.encoders.train.teacher import CachedTeacher, make_teacher

            length = self.hp["teacher_max_length"]
            # the teacher runs where the student trains: on a GPU its forward costs little
            self.teacher = make_teacher(str(self.hp["teacher"]), None if length is None else int(length),
                                        device=str(self.device))
            if self.hp["teacher_cache"]:
                self.teacher = CachedTeacher(self.teacher, str(self.hp["teacher_cache"]))

    def embedder_options(self) -> dict[str, Any]:
        return {"instruction": self.hp["instruction"]}

    def loss(self, batch):
        queries, docs, _ = pair_texts(batch)
        return self.objective(batch, self.embed(queries, "query"), self.embed(docs, "document"))

    def embed(self, texts: list[str], role: str) -> torch.Tensor:
        """Embeddings [n, d] of ``texts``; without autograd and with ``grad_cache`` on, ``grad_cache``
        texts at a time (the held-out loss of a batch that only fits in memory that way)."""
        if self.sub_batch and not torch.is_grad_enabled():
            n = self.sub_batch
            return torch.cat([self.reader.embed_with(self.model, texts[i:i + n], role) for i in range(0, len(texts), n)])
        return self.reader.embed_with(self.model, texts, role)

    def backward(self, batch, scale: float = 1.0) -> dict[str, float]:
        """The batch's gradient, through the gradient cache when ``grad_cache`` > 0."""
        if not self.sub_batch:
            return super().backward(batch, scale)
        queries, docs, _ = pair_texts(batch)
        roles = ("query", "document")
        return cached_backward([queries, docs], lambda texts, g: self.reader.embed_with(self.model, texts, roles[g]),
                               lambda emb: self.objective(batch, emb[0], emb[1]), self.sub_batch, scale, self.device)

    def objective(self, batch, q: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss and its parts from the embeddings of the batch's queries ``q`` [B, d] and
        documents ``d`` [M, d] (:func:`pair_texts`' order)."""
        queries, docs, pos = pair_texts(batch)
        pos_t = torch.tensor(pos)
        cand = in_batch_candidates(batch, docs)  # no document judged relevant to a query is its negative
        loss = info_nce(q, d, pos_t, self.hp["tau"], cand)
        total, parts = loss, {"infonce": float(loss.detach())}
        if self.teacher is not None:
            kl = distill_kl(q, d, self.teacher.embed(queries, "query"), self.teacher.embed(docs, "document"), self.hp["tau"],
                            self.hp["teacher_tau"], cand)
            total, parts["distill"] = total + float(self.hp["distill"]) * kl, float(kl.detach())
        w_sparse, w_sdist, w_fd, w_fq = (float(self.hp[k]) for k in ("sparse", "sparse_distill", "flops_d", "flops_q"))
        if w_sparse > 0 or w_sdist > 0 or w_fd > 0 or w_fq > 0:
            query_w, doc_w = aligned_weights(q, d, self.loaded.lm_head, self.reader.surface_token_ids(queries),
                                             self.loaded.special_ids)
            if w_sparse > 0 or w_sdist > 0:  # the score terms; the FLOPS terms need only the weights
                scores = query_w @ doc_w.T
                dense_logits = cosine_scores(q, d).detach() / float(self.hp["tau"])
                stau = (matched_temperature(scores, dense_logits, cand) if self.hp["sparse_tau"] == "auto"
                        else float(self.hp["sparse_tau"]))
                if w_sparse > 0:
                    sparse = sparse_info_nce(scores, pos_t, stau, cand)
                    total, parts["sparse"] = total + w_sparse * sparse, float(sparse.detach())
                if w_sdist > 0:
                    sdist = sparse_distill_kl(dense_logits, scores, stau, cand)
                    total, parts["sparse_distill"] = total + w_sdist * sdist, float(sdist.detach())
            for key, w, side_w in (("flops_d", w_fd, doc_w), ("flops_q", w_fq, query_w)):
                if w > 0:
                    flops = flops_penalty(side_w)
                    total, parts[key] = total + w * flops, float(flops.detach())
        if len(parts) == 1:
            return total, {"loss": float(total.detach())}
        return total, {"loss": float(total.detach()), **parts}
