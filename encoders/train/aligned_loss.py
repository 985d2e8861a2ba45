"""A training signal for the aligned-token leg: the index's sparse score, made differentiable.

The sparse leg scores a query against a document with the aligned tokens of “A Text is Worth
Several Tokens” §5: the document keeps its top-K tokens of E_g·h_adj (eq.15), the query its
surface tokens ∪ its top-M aligned tokens (eq.16), h_adj = h + λ·u1 (eq.14). Contrastive
training of the dense vector (AutoRegEmbed eq.1) improves those tokens only as a side effect
(the paper, §3.3: after contrastive learning more key tokens align); this module scores a batch
exactly as the index does with alignir's default weighting — log1p(relu(logit)) document
weights, raw-logit query weights, λ = −pc1_remove · mean_i(h_i·u1) — with the token *selection*
(top-K, top-M, surface tokens, u1, λ) held fixed, so the gradient flows through the weights of
the selected tokens. InfoNCE over these scores (:func:`sparse_info_nce`) is alignir's own
auxiliary loss, not a seed paper's. Measured on SmolLM2 at the shipped recipe's scale it lowered
both legs (README "Training recipes"), so it is off by default and not in the shipped recipe.
:func:`sparse_distill_kl` is the softer signal: the model's own dense in-batch score distribution
(detached) as the soft label of its sparse scores, so the aligned tokens learn to rank the batch
as the dense vector does instead of from the hard positive alone.

:func:`flops_penalty` is the FLOPS regulariser of the same weights (:func:`aligned_weights`), which
charges a token for being shared by many texts of the batch.

u1 and λ come from the batch's documents (detached) as the index fits them on the corpus
(retrieval.sparsify.fit_corpus_pc1 / resolve_lambda), uncentred SVD oriented so the documents
project positively (encoders.aligned.fit_pc1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from alignir.checks import int_ids
from alignir.encoders.aligned import token_mask
from alignir.encoders.train.losses import soft_label_kl
from alignir.errors import InvalidInputError

__all__ = ["AlignedScoreConfig", "batch_pc1", "aligned_weights", "aligned_scores", "flops_penalty",
           "matched_temperature", "sparse_info_nce", "sparse_distill_kl"]


@dataclass(frozen=True)
class AlignedScoreConfig:
    """K, M and the PC1 removal of the index's SparseConfig defaults (retrieval.config; a test
    keeps them equal)."""

    doc_k: int = 256
    query_m: int = 50
    pc1_remove: float | None = 0.75

    def __post_init__(self) -> None:
        if int(self.doc_k) < 1 or int(self.query_m) < 0:
            raise InvalidInputError(f"doc_k must be >= 1 and query_m >= 0, got {self.doc_k}, {self.query_m}")
        if self.pc1_remove is not None and not np.isfinite(self.pc1_remove):
            raise InvalidInputError(f"pc1_remove must be finite or None, got {self.pc1_remove}")


def batch_pc1(hd: torch.Tensor) -> torch.Tensor:
    """u1 [d] of the documents ``hd`` [M, d]: top right singular vector of the uncentred matrix
    (“A Text is Worth Several Tokens” eq.9), unit norm, oriented so the mean projection is ≥ 0."""
    X = hd.detach().double()
    _, _, Vh = torch.linalg.svd(X, full_matrices=False)
    u = Vh[0]
    if float((X @ u).mean()) < 0:
        u = -u
    return u.to(hd.dtype if hd.is_floating_point() else torch.float32)


def aligned_weights(hq: torch.Tensor, hd: torch.Tensor, lm_head: torch.Tensor, surface: Sequence[np.ndarray],
                    special_ids: np.ndarray | None = None,
                    config: AlignedScoreConfig = AlignedScoreConfig()) -> tuple[torch.Tensor, torch.Tensor]:
    """The aligned-token weights the index stores and searches with, over the vocabulary: queries
    [B, V] (the raw logit e_tᵀ h_adj,q on T_q ∪ T̂_q^M, eq.16) and documents [M, V]
    (log1p(relu(e_tᵀ h_adj,d)) on the top-K tokens, eq.15), zero elsewhere. ``surface`` holds each
    query's surface token ids (the embedder's ``surface_token_ids``); ``special_ids`` are never
    selected (as the index)."""
    if hq.dim() != 2 or hd.dim() != 2 or hq.shape[1] != hd.shape[1]:
        raise InvalidInputError(f"hq [B, d] and hd [M, d] needed, got {tuple(hq.shape)} and {tuple(hd.shape)}")
    if len(surface) != hq.shape[0]:
        raise InvalidInputError(f"got {len(surface)} surface id arrays for {hq.shape[0]} queries")
    W = lm_head.detach().to(torch.float32)
    V = W.shape[0]
    hq, hd = hq.float(), hd.float()
    if config.pc1_remove is not None and config.pc1_remove != 0:
        u1 = batch_pc1(hd).float()
        lam = -float(config.pc1_remove) * float((hd.detach() @ u1).mean())
        hq, hd = hq + lam * u1, hd + lam * u1
    Ld = hd @ W.T                                   # [M, V]
    Lq = hq @ W.T                                   # [B, V]
    with torch.no_grad():
        masked = token_mask(special_ids, V)  # [V] bool or None: never selected, as in the index
        masked = None if masked is None else masked.to(Ld.device)

        def selectable(L: torch.Tensor) -> torch.Tensor:
            return L if masked is None else L.masked_fill(masked, float("-inf"))

        top_d = selectable(Ld).topk(min(int(config.doc_k), V), dim=1).indices
        keep_d = torch.zeros_like(Ld, dtype=torch.bool).scatter_(1, top_d, True)
        keep_q = torch.zeros_like(Lq, dtype=torch.bool)
        if config.query_m > 0:
            keep_q.scatter_(1, selectable(Lq).topk(min(int(config.query_m), V), dim=1).indices, True)
        for i, ids in enumerate(surface):
            keep_q[i, torch.from_numpy(int_ids(ids, V, f"surface ids of query {i}", "token ids")).to(Lq.device)] = True
        if masked is not None:
            keep_q &= ~masked
    doc_w = torch.where(keep_d, torch.log1p(torch.relu(Ld)), torch.zeros_like(Ld))
    query_w = torch.where(keep_q, Lq, torch.zeros_like(Lq))
    return query_w, doc_w


def aligned_scores(hq: torch.Tensor, hd: torch.Tensor, lm_head: torch.Tensor, surface: Sequence[np.ndarray],
                   special_ids: np.ndarray | None = None,
                   config: AlignedScoreConfig = AlignedScoreConfig()) -> torch.Tensor:
    """Sparse-leg scores [B, M] of queries ``hq`` [B, d] against documents ``hd`` [M, d]:

    score(q, d) = Σ_{t ∈ T_q ∪ T̂_q^M} (e_tᵀ h_adj,q) · log1p(relu(e_tᵀ h_adj,d)) · [t ∈ top-K(d)],
    eq.15-16 with alignir's default weighting, the dot product of :func:`aligned_weights`."""
    query_w, doc_w = aligned_weights(hq, hd, lm_head, surface, special_ids, config)
    return query_w @ doc_w.T


def flops_penalty(weights: torch.Tensor) -> torch.Tensor:
    """Σ_t (mean_i |w_it|)² over a batch's aligned-token weights [n, V] (:func:`aligned_weights`):
    the FLOPS regulariser (Paria et al., “Minimizing FLOPs to Learn Efficient Sparse
    Representations”, ICLR 2020, §3; SPLADE's sparsity term). It grows with the square of how many
    texts of the batch carry a token, so it falls fastest by lowering the tokens most texts share,
    which an in-batch ranking loss does not charge for (they add about the same to every
    candidate) and which blur a corpus-wide ranking (the sparse leg has no inverse document
    frequency). In training beside ``sparse_distill_kl`` it did not do that (docs/training.md):
    with the LM head frozen, the weights fall only by moving the embedding itself."""
    if weights.dim() != 2 or weights.shape[0] == 0:
        raise InvalidInputError(f"weights [n, V] with n >= 1 needed, got {tuple(weights.shape)}")
    return (weights.abs().mean(0) ** 2).sum()


def matched_temperature(scores: torch.Tensor, reference: torch.Tensor, candidates: torch.Tensor | None = None,
                        eps: float = 1e-6) -> torch.Tensor:
    """Per-query temperature τ_q [B, 1] = std(scores_q) / std(reference_q) over the query's
    candidates (detached), so that scores / τ_q spread as widely as the ``reference`` logits.

    The sparse scores are dot products of aligned-token weights, hundreds apart within a batch,
    while the dense logits cos(q, d)/τ are a few apart: at a fixed τ (say 10) the sparse
    softmax is close to one-hot, and the KL to the dense distribution falls most by shrinking the
    sparse scores' spread, which documents can do by sharing the same generic tokens. At the
    matched τ_q only the shape of the ranking is asked for, never its scale (the index fuses the
    sparse leg by z-score, which ignores scale too); measured, this slows that drift but does not
    stop it (docs/training.md)."""
    if scores.shape != reference.shape or scores.dim() != 2:
        raise InvalidInputError(f"scores and reference must both be [B, M], got {tuple(scores.shape)} and "
                                f"{tuple(reference.shape)}")
    x, r = scores.detach().float(), reference.detach().float().to(scores.device)
    m = torch.ones_like(x, dtype=torch.bool) if candidates is None else candidates.to(x.device).bool()
    if m.shape != x.shape:
        raise InvalidInputError(f"candidates must be [B, M] = {tuple(x.shape)}, got {tuple(m.shape)}")
    w = m.float()
    n = w.sum(1, keepdim=True).clamp_min(1.0)

    def std(v: torch.Tensor) -> torch.Tensor:
        v = torch.where(m, v, torch.zeros_like(v))
        mean = v.sum(1, keepdim=True) / n
        return ((((v - mean) ** 2) * w).sum(1, keepdim=True) / n).sqrt()

    return (std(x) / std(r).clamp_min(eps)).clamp_min(eps)


def _check_tau(tau: float | torch.Tensor) -> None:
    if (torch.as_tensor(tau) <= 0).any():
        raise InvalidInputError(f"temperature tau must be > 0, got {tau}")


def sparse_info_nce(scores: torch.Tensor, pos: torch.Tensor, tau: float | torch.Tensor = 1.0,
                    candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of −log softmax(scores / τ)[positive]: AutoRegEmbed eq.1's InfoNCE over
    the aligned-token scores of :func:`aligned_scores` (dot products, not cosines, because the
    index ranks by the dot product) with every in-batch document a candidate, or those of
    ``candidates`` [B, M] (bool; as in ``losses.info_nce``). ``tau``: a number, or one per
    query [B, 1] (:func:`matched_temperature`)."""
    _check_tau(tau)
    logits = scores / tau
    if candidates is not None:
        logits = logits.masked_fill(~candidates.to(logits.device).bool(), float("-inf"))
    return F.cross_entropy(logits, pos.to(scores.device).long())


def sparse_distill_kl(dense_logits: torch.Tensor, scores: torch.Tensor, tau: float | torch.Tensor = 10.0,
                      candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of KL(softmax(dense_logits).detach() || softmax(scores / τ)): the model's
    own dense in-batch scores (e.g. cos(q, d) / τ_dense, [B, M]) as the soft label of its
    aligned-token scores ``scores`` [B, M] (:func:`aligned_scores`), over the query's candidates
    (``candidates`` [B, M] bool, as in ``losses.info_nce``; None: every document). Only the sparse
    side receives a gradient. ``tau``: a number, or one per query [B, 1]
    (:func:`matched_temperature`)."""
    _check_tau(tau)
    return soft_label_kl(scores / tau, dense_logits.detach(), candidates)
