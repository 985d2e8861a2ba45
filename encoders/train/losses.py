"""Training losses of the four methods, on plain tensors (no model inside).

- ``info_nce``: contrastive InfoNCE with in-batch + hard negatives (AutoRegEmbed eq.1; the "fair
  baseline" of AutoRegEmbed App. A and 003 Table 1), cosine similarity / τ.
- ``cda_loss`` / ``cda_divergence_loss``: AutoRegEmbed conditional distribution alignment (AutoRegEmbed
  eq.2, S1 and S2 with τ, β; App. B log-sigmoid / KL / JS variants; App. C tanh).
- ``sequence_nll``: IC (AutoRegEmbed §3.2) and LLM2Comp RC / CT-NLL (LLM2Comp eq.2, eq.4).
- ``ctkd_kl``: the KL of LLM2Comp eq.5 (frozen LLM on the full context vs on the memory tokens).
- ``simcse_loss``: LLM2Comp UCL (LLM2Comp eq.8) over the 2B dropout views.
- ``stepwise_contrastive`` + ``icr_regulariser`` + ``gircse_loss``: GIRCSE eq.7, eq.8, L_total.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch
import torch.nn.functional as F

__all__ = [
    "info_nce",
    "own_candidates",
    "distill_kl",
    "soft_label_kl",
    "cosine_scores",
    "cda_loss",
    "cda_divergence_loss",
    "token_divergence",
    "sequence_nll",
    "ctkd_kl",
    "simcse_loss",
    "stepwise_contrastive",
    "icr_regulariser",
    "gircse_loss",
    "SQUASH",
]


def cosine_scores(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cos(a_i, b_j) [n, m] of ``a`` [n, d] and ``b`` [m, d], in float32."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


_cos = cosine_scores


def info_nce(q: torch.Tensor, docs: torch.Tensor, pos: torch.Tensor, tau: float = 0.05,
             candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of -log exp(cos(q,d+)/τ) / Σ_{d ∈ C(q)} exp(cos(q,d)/τ)  (AutoRegEmbed eq.1,
    with f(·) L2-normalised: the paper's "cosine distance").

    ``docs`` [M, d] holds every document of the batch (all positives and hard negatives); ``pos``
    [B] is each query's positive row. ``candidates`` [B, M] (bool) is C(q): None = every document,
    so the other queries' positives and negatives act as in-batch negatives; eq.1 exactly is the
    positive and the query's own hard negatives d_i^- only (:func:`own_candidates`).
    """
    if q.dim() != 2 or docs.dim() != 2 or q.shape[1] != docs.shape[1]:
        raise InvalidInputError(f"q [B, d] and docs [M, d] needed, got {tuple(q.shape)} and {tuple(docs.shape)}")
    if tau <= 0:
        raise InvalidInputError(f"temperature tau must be > 0, got {tau}")
    logits = _cos(q, docs) / tau
    pos = pos.to(q.device).long()
    if candidates is not None:
        cand = candidates.to(q.device).bool()
        if cand.shape != logits.shape:
            raise InvalidInputError(f"candidates must be [B, M] = {tuple(logits.shape)}, got {tuple(cand.shape)}")
        if not bool(cand.gather(1, pos.unsqueeze(1)).all()):
            raise InvalidInputError("every query's positive must be among its candidates")
        logits = logits.masked_fill(~cand, float("-inf"))
    return F.cross_entropy(logits, pos)


def soft_label_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                  candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows of KL(softmax(teacher_logits) || softmax(student_logits)), both [B, M], each
    softmax over the row's candidate columns (``candidates`` [B, M] bool; None: every column). The
    teacher side is taken as given (detach it when it must not learn)."""
    if student_logits.shape != teacher_logits.shape:
        raise InvalidInputError(f"student and teacher scores must have one shape, got "
                                f"{tuple(student_logits.shape)} and {tuple(teacher_logits.shape)}")
    s, t = student_logits.float(), teacher_logits.float().to(student_logits.device)
    if candidates is not None:
        cand = candidates.to(s.device).bool()
        if cand.shape != s.shape:
            raise InvalidInputError(f"candidates must be [B, M] = {tuple(s.shape)}, got {tuple(cand.shape)}")
        s, t = s.masked_fill(~cand, float("-inf")), t.masked_fill(~cand, float("-inf"))
    log_s, log_t = torch.log_softmax(s, dim=1), torch.log_softmax(t, dim=1)
    terms = log_t.exp() * (log_t - log_s)
    return torch.where(torch.isfinite(log_t), terms, torch.zeros_like(terms)).sum(1).mean()


def distill_kl(q: torch.Tensor, docs: torch.Tensor, teacher_q: torch.Tensor, teacher_docs: torch.Tensor,
               tau: float = 0.05, teacher_tau: float = 0.05, candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of KL(P_T(·|q) || P_S(·|q)), P = softmax over the query's candidate
    documents of cos(q, d) / τ (student: ``q`` [B, d], ``docs`` [M, d] at ``tau``; teacher: its own
    vectors at ``teacher_tau``) — distillation from a retrieval-trained teacher's in-batch and
    hard-negative scores as soft labels (the KL variant; margin-MSE is the other common choice).
    ``candidates`` [B, M] (bool): as in :func:`info_nce` (None: every document)."""
    if q.shape[0] != teacher_q.shape[0] or docs.shape[0] != teacher_docs.shape[0]:
        raise InvalidInputError(f"student and teacher must score the same batch: {q.shape[0]}x{docs.shape[0]} "
                                f"vs {teacher_q.shape[0]}x{teacher_docs.shape[0]}")
    if tau <= 0 or teacher_tau <= 0:
        raise InvalidInputError(f"temperatures must be > 0, got tau={tau}, teacher_tau={teacher_tau}")
    return soft_label_kl(_cos(q, docs) / tau, _cos(teacher_q, teacher_docs) / teacher_tau, candidates)


def own_candidates(n_negatives: list[int]) -> torch.Tensor:
    """C(q) of eq.1 for the document layout of ``pair_texts`` (all B positives, then each query's
    negatives in query order): row i is True at its positive i and at its own negatives only."""
    B = len(n_negatives)
    M = B + sum(n_negatives)
    mask = torch.zeros(B, M, dtype=torch.bool)
    start = B
    for i, n in enumerate(n_negatives):
        mask[i, i] = True
        mask[i, start:start + n] = True
        start += n
    return mask


def _squash(name: str):
    if name == "sigmoid":
        return torch.sigmoid
    if name == "logsigmoid":
        return F.logsigmoid
    if name == "tanh":
        return torch.tanh
    raise InvalidInputError(f"unknown CDA squashing {name!r}; use one of {SQUASH}")


SQUASH = ("sigmoid", "logsigmoid", "tanh")


def cda_loss(lp_q_pos: torch.Tensor, lp_d_pos: torch.Tensor, ref_q_pos: torch.Tensor,
             lp_q_neg: torch.Tensor, ref_q_neg: torch.Tensor, tau: float = 0.05, beta: float = 0.1,
             squash: str = "sigmoid") -> torch.Tensor:
    """AutoRegEmbed CDA loss, AutoRegEmbed eq.2 (``squash``: eq.2 sigmoid, App. B logsigmoid, App. C tanh).

    Arguments are sequence log-likelihoods log p(d | e) (sums over the tokens of d):
    ``lp_q_pos`` [B] = log p_θ(d+ | e_{q,I_next}), ``lp_d_pos`` [B] = log p_θ(d+ | e_{d+,I_self}),
    ``ref_q_pos`` [B] = log p_ref(d+ | e_{q,I_next}), ``lp_q_neg`` / ``ref_q_neg`` [B, n] the same
    for each negative d_i^-.

    S1 = -σ(β |lp_q_pos - lp_d_pos|),  S2_i = -σ(β (lp_q_pos - ref_q_pos) - β (lp_q_neg_i - ref_q_neg_i)),
    L = mean_B -log e^{S1/τ} / (e^{S1/τ} + Σ_i e^{S2_i/τ}).
    """
    if tau <= 0:
        raise InvalidInputError(f"temperature tau must be > 0, got {tau}")
    f = _squash(squash)
    s1 = -f(beta * (lp_q_pos - lp_d_pos).abs())
    s2 = -f(beta * (lp_q_pos - ref_q_pos).unsqueeze(1) - beta * (lp_q_neg - ref_q_neg))
    logits = torch.cat([s1.unsqueeze(1), s2], dim=1) / tau
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


def cda_divergence_loss(div_pos: torch.Tensor, div_neg: torch.Tensor, tau: float = 0.05,
                        squash: str = "sigmoid") -> torch.Tensor:
    """App. B KL / JS variants of eq.2: S1 = -σ(div_pos), S2_i = -σ(div_neg_i), same InfoNCE shape.

    ``div_pos`` [B] = (1/T) Σ_t D(p(·|d+_<t, e_{d+,I_self}), p(·|d+_<t, e_{q,I_next})),
    ``div_neg`` [B, n] = (1/T) Σ_t D(p(·|d-_<t, e_{d-,I_self}), p(·|d+_<t, e_{q,I_next})).
    """
    f = _squash(squash)
    logits = torch.cat([-f(div_pos).unsqueeze(1), -f(div_neg)], dim=1) / tau
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


def token_divergence(logits_p: torch.Tensor, logits_q: torch.Tensor, mask: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """(1/T) Σ_t D(p_t, q_t) per row [B] over the masked positions; D = KL(p‖q) or JS(p, q)."""
    lp = torch.log_softmax(logits_p.float(), -1)
    lq = torch.log_softmax(logits_q.float(), -1)
    if kind == "kl":
        d = (lp.exp() * (lp - lq)).sum(-1)
    elif kind == "js":
        lm = torch.logsumexp(torch.stack([lp, lq]), 0) - torch.log(torch.tensor(2.0))
        d = 0.5 * (lp.exp() * (lp - lm)).sum(-1) + 0.5 * (lq.exp() * (lq - lm)).sum(-1)
    else:
        raise InvalidInputError(f"unknown divergence {kind!r}; use 'kl' or 'js'")
    m = mask.float()
    return (d * m).sum(1) / m.sum(1).clamp(min=1)


def sequence_nll(token_lp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood per target token over the batch (IC, RC, CT-NLL)."""
    m = mask.float()
    return -(token_lp * m).sum() / m.sum().clamp(min=1)


def ctkd_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """“Learning to Compress” (LLM2Comp) eq.5 in expectation: mean over continuation tokens of
    KL(g_φ(·|n_1..n_{j-1}) ‖ g_φ(·|m̃_1..m̃_k, n_{a+1}..n_{j-1})) (teacher = full context)."""
    lt = torch.log_softmax(teacher_logits.float(), -1)
    ls = torch.log_softmax(student_logits.float(), -1)
    kl = (lt.exp() * (lt - ls)).sum(-1)
    m = mask.float()
    return (kl * m).sum() / m.sum().clamp(min=1)


def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """UCL, LLM2Comp eq.8: z_i, z_j two dropout views; the denominator runs over the 2B views
    except z_i itself (the 1[k≠i] of SimCLR's NT-Xent, which eq.8's Σ_{k=1}^{2B} leaves implicit:
    the self term cos=1 would be a constant e^{1/τ})."""
    if z1.shape != z2.shape:
        raise InvalidInputError(f"the two views must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    B = z1.shape[0]
    z = torch.cat([z1, z2], 0)
    sim = _cos(z, z) / tau
    sim = sim.masked_fill(torch.eye(2 * B, dtype=torch.bool, device=sim.device), float("-inf"))
    target = torch.cat([torch.arange(B, 2 * B), torch.arange(0, B)]).to(sim.device)
    return F.cross_entropy(sim, target)


def stepwise_contrastive(Gq: torch.Tensor, Gd: torch.Tensor, pos: torch.Tensor, tau: float = 0.02,
                         candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Per-step losses L_k [K] of GIRCSE eq.7: z_k = mean of the first k generated states
    (eq.4 on G_{1:k}); L_k = InfoNCE(z_k^q, z_k^d over the batch's documents B, or those of
    ``candidates`` as in :func:`info_nce`)."""
    if Gq.dim() != 3 or Gd.dim() != 3 or Gq.shape[1:] != Gd.shape[1:]:
        raise InvalidInputError(f"Gq [B, K, d] and Gd [M, K, d] needed, got {tuple(Gq.shape)}, {tuple(Gd.shape)}")
    K = Gq.shape[1]
    steps = torch.arange(1, K + 1, device=Gq.device, dtype=torch.float32).view(1, K, 1)
    zq = Gq.float().cumsum(1) / steps
    zd = Gd.float().cumsum(1) / steps
    return torch.stack([info_nce(zq[:, k], zd[:, k], pos, tau, candidates) for k in range(K)])


def icr_regulariser(Lk: torch.Tensor) -> torch.Tensor:
    """GIRCSE (“Let LLMs Speak Embedding Languages”) eq.8: (1/(K-1)) Σ_{k=1}^{K-1} max(log L_{k+1} - log L_k, 0); 0 when K = 1."""
    if Lk.numel() < 2:
        return Lk.sum() * 0.0
    logs = torch.log(Lk)
    return torch.clamp(logs[1:] - logs[:-1], min=0).mean()


def gircse_loss(Lk: torch.Tensor, lam: float = 1.0, reduction: str = "sum") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """L_total = L_contrast + λ L_reg with L_contrast = Σ_k L_k (GIRCSE eq.7, eq.8); ``reduction="mean"``
    optimises Σ_k L_k / K + λ L_reg instead. Returns (total, contrast = Σ_k L_k, reg)."""
    if reduction not in ("sum", "mean"):
        raise InvalidInputError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    contrast = Lk.sum()
    reg = icr_regulariser(Lk)
    scaled = contrast if reduction == "sum" else contrast / Lk.numel()
    return scaled + lam * reg, contrast, reg
