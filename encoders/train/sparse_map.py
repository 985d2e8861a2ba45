"""A trained map before the LM head for the aligned-token leg: token logits E_g·A·h_adj.

The aligned tokens of “A Text is Worth Several Tokens” §5 are the top entries of E_g·h_adj
(eq.14-16). With the LM head E_g frozen, a loss on those tokens can only move h, which is also the
dense vector: every aligned-token loss tried that way lowered the sparse leg or the dense one
(docs/training.md). A d×d map A, the identity at the start, gives the aligned-token leg parameters
of its own: the token logits become E_g·(A·h_adj), the dense vector stays h, and the tokens still
come from the model's own vocabulary, so every hit stays explained by them.

Training needs no pass through the LLM: the texts' dense vectors are encoded once (the embedding
cache), u1 and λ (eq.14) are fitted per collection as an index fits them, and A is trained on
those vectors with InfoNCE (AutoRegEmbed eq.1) over the index's own sparse scores
(``aligned_loss.aligned_weights``: top-K document tokens with log1p weights, surface ∪ top-M query
tokens with raw logits), with several positives per query where the qrels have them, hard
negatives from the dense leg's top ranks and random documents of the corpus; title→text pairs of
other corpora (in-batch negatives) can be mixed in. Two penalties hold the map back: ‖A − I‖²
on its parameters, and on its function, the mean over reference texts of other corpora of
‖E_g·(A − I)·h_adj‖², how far it moves those texts' token logits (:func:`logit_shift_penalty`).
The map is saved beside the adapter (``adapters.SPARSE_MAP_FILE``); it is alignir's own method,
not a seed paper's. Measured (docs/training.md): fitted on SciFact's train queries over the
shipped adapter it lifts SciFact's aligned-token leg 0.518 → 0.642 nDCG@10; with the function
penalty the leg holds within −0.012..+0.006 on four collections it never saw, where the parameter
penalty alone lost up to 0.047.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from alignir.encoders.train.aligned_loss import AlignedScoreConfig, aligned_weights
from alignir.errors import InvalidInputError

__all__ = ["SparseMapConfig", "MapExamples", "map_loss", "train_sparse_map", "dense_hard_negatives",
           "logit_shift_penalty"]


@dataclass(frozen=True)
class SparseMapConfig:
    """Hyper-parameters of :func:`train_sparse_map`. ``spread``: the sparse scores are divided by
    std(scores of the query's candidates) / ``spread`` times a learnt scale, so the softmax sees a
    spread of about ``spread`` logits whatever the scores' magnitude (hundreds, for dot products of
    aligned-token weights). ``breadth``: the share of steps on title→text pair collections.
    ``function_weight``: the weight of :func:`logit_shift_penalty` over the reference texts."""

    steps: int = 300
    lr: float = 3e-4
    batch_size: int = 32
    hard_negatives: int = 15
    random_negatives: int = 64
    identity_weight: float = 0.05
    function_weight: float = 0.0
    breadth: float = 0.0
    spread: float = 4.0
    seed: int = 0
    doc_k: int = 256
    query_m: int = 50

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("hard_negatives", "random_negatives", "identity_weight", "function_weight"):
            if getattr(self, name) < 0:
                raise InvalidInputError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0 or not self.spread > 0:
            raise InvalidInputError(f"lr and spread must be > 0, got {self.lr}, {self.spread}")
        if not 0.0 <= self.breadth <= 1.0:
            raise InvalidInputError(f"breadth must be in [0, 1], got {self.breadth}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MapExamples:
    """One collection's training signal on fixed dense vectors: queries and documents as h_adj
    (eq.14, with the collection's own u1 and λ), each query's surface token ids (eq.16), its
    positive documents and its hard negatives (row numbers of ``documents``)."""

    name: str
    queries: torch.Tensor  # [n, d] float32
    documents: torch.Tensor  # [m, d] float32
    surface: list[np.ndarray]
    positives: list[list[int]]
    hard: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        n, m = self.queries.shape[0], self.documents.shape[0]
        if self.queries.dim() != 2 or self.documents.dim() != 2 or self.queries.shape[1] != self.documents.shape[1]:
            raise InvalidInputError(f"{self.name}: queries [n, d] and documents [m, d] needed, got "
                                    f"{tuple(self.queries.shape)} and {tuple(self.documents.shape)}")
        if len(self.surface) != n or len(self.positives) != n or (self.hard and len(self.hard) != n):
            raise InvalidInputError(f"{self.name}: surface ids, positives and hard negatives need one entry per "
                                    f"query ({n})")
        bad = [i for i, p in enumerate(self.positives) if not p or min(p) < 0 or max(p) >= m]
        if bad:
            raise InvalidInputError(f"{self.name}: queries {bad[:5]} have no positive or one outside the "
                                    f"{m} documents")

    @classmethod
    def pairs(cls, name: str, queries: torch.Tensor, documents: torch.Tensor,
              surface: list[np.ndarray]) -> "MapExamples":
        """Query i's positive is document i (title→text pairs); no hard negatives."""
        return cls(name, queries, documents, surface, [[i] for i in range(queries.shape[0])])


def dense_hard_negatives(queries: torch.Tensor, documents: torch.Tensor, positives: Sequence[Sequence[int]],
                         depth: int = 30) -> list[list[int]]:
    """Each query's top-``depth`` documents by cosine that are not its positives (the dense leg's
    near misses)."""
    q, d = F.normalize(queries.float(), dim=1), F.normalize(documents.float(), dim=1)
    out = []
    for s in range(0, q.shape[0], 256):
        top = (q[s:s + 256] @ d.T).topk(min(depth + 16, d.shape[0]), dim=1).indices.tolist()
        for i, row in enumerate(top):
            pos = set(positives[s + i])
            out.append([j for j in row if j not in pos][:depth])
    return out


def _candidates(ex: MapExamples, rows: np.ndarray, cfg: SparseMapConfig,
                rng: np.random.Generator) -> tuple[list[int], torch.Tensor]:
    """The batch's candidate documents (positives, sampled hard negatives, random documents) and
    the positive mask [B, M]."""
    cand: set[int] = set()
    for i in rows:
        cand.update(ex.positives[i])
        hard = ex.hard[i] if ex.hard else []
        if hard and cfg.hard_negatives:
            cand.update(rng.choice(hard, min(cfg.hard_negatives, len(hard)), replace=False).tolist())
    m = ex.documents.shape[0]
    if cfg.random_negatives:
        cand.update(rng.choice(m, min(cfg.random_negatives, m), replace=False).tolist())
    order = sorted(cand)
    col = {j: c for c, j in enumerate(order)}
    mask = torch.zeros(len(rows), len(order), dtype=torch.bool)
    for r, i in enumerate(rows):
        mask[r, [col[j] for j in ex.positives[i]]] = True
    return order, mask


def map_loss(A: torch.Tensor, log_scale: torch.Tensor, ex: MapExamples, rows: np.ndarray, lm_head: torch.Tensor,
             special_ids: np.ndarray | None, cfg: SparseMapConfig, rng: np.random.Generator) -> torch.Tensor:
    """Multi-positive InfoNCE over the sparse scores of queries ``rows`` of ``ex`` read through A:
    mean_q [logsumexp_c s_qc − logsumexp_{c ∈ P(q)} s_qc] with s = score / (τ_q·e^log_scale),
    τ_q = std(score_q over its candidates) / spread (detached)."""
    docs, positive = _candidates(ex, rows, cfg, rng)
    score_cfg = AlignedScoreConfig(doc_k=cfg.doc_k, query_m=cfg.query_m, pc1_remove=None)  # h is h_adj already
    qw, dw = aligned_weights(ex.queries[rows] @ A.T, ex.documents[docs] @ A.T, lm_head,
                             [ex.surface[i] for i in rows], special_ids, score_cfg)
    scores = qw @ dw.T
    with torch.no_grad():
        tau = scores.std(1, keepdim=True).clamp_min(1e-6) / cfg.spread
    logits = scores / (tau * log_scale.exp())
    return (torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~positive, float("-inf")), 1)).mean()


def logit_shift_penalty(A: torch.Tensor, gram: torch.Tensor, second_moment: torch.Tensor) -> torch.Tensor:
    """mean_i ‖E_g·(A − I)·h_i‖² = tr(G·D·C·Dᵀ), D = A − I, G = E_gᵀE_g (``gram``), C = mean_i h_i·h_iᵀ
    (``second_moment``, of the reference texts' h_adj): how far the map moves the token logits of
    texts it was not trained on, in one d×d product instead of a pass over the vocabulary."""
    D = A - torch.eye(A.shape[0], dtype=A.dtype)
    return torch.trace(gram @ D @ second_moment @ D.T)


def train_sparse_map(supervised: Sequence[MapExamples], lm_head: torch.Tensor, special_ids: np.ndarray | None,
                     cfg: SparseMapConfig = SparseMapConfig(), breadth: Sequence[MapExamples] = (),
                     evaluate: Callable[[torch.Tensor], float] | None = None, eval_every: int = 100,
                     progress: bool = False, reference: torch.Tensor | None = None) -> tuple[torch.Tensor, list[dict]]:
    """Train A [d, d] from the identity; returns (A, log rows). A step draws its batch from a
    breadth collection with probability ``cfg.breadth`` (one of ``breadth``, uniformly), else from a
    supervised collection. ``evaluate(A)`` (e.g. held-out nDCG@10 of the sparse leg) is logged
    every ``eval_every`` steps and at the end. ``reference`` [n, d]: h_adj of texts from other
    corpora, for ``cfg.function_weight``."""
    from tqdm.auto import tqdm

    if not supervised and not breadth:
        raise InvalidInputError("train_sparse_map needs at least one collection of examples")
    if breadth and not supervised and cfg.breadth < 1.0:
        raise InvalidInputError("only pair collections given: set breadth=1.0")
    dim = int(lm_head.shape[1])
    for ex in (*supervised, *breadth):
        if ex.queries.shape[1] != dim:
            raise InvalidInputError(f"{ex.name}: vectors of dimension {ex.queries.shape[1]}, the LM head's is {dim}")
    if cfg.function_weight and (reference is None or reference.shape[0] == 0):
        raise InvalidInputError("function_weight > 0 needs reference texts (h_adj of other corpora)")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    W = lm_head.detach().float()
    if cfg.function_weight:
        ref = reference.detach().float()
        gram, moment = W.T @ W, ref.T @ ref / ref.shape[0]
    eye = torch.eye(dim)
    A = torch.nn.Parameter(eye.clone())
    log_scale = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.Adam([A, log_scale], lr=cfg.lr)
    pair_cfg = replace(cfg, hard_negatives=0)
    log: list[dict] = []
    if evaluate is not None:
        log.append({"step": 0, "eval": float(evaluate(A.detach().clone()))})
    for step in tqdm(range(1, cfg.steps + 1), desc="train sparse map", disable=not progress):
        use_breadth = bool(breadth) and (not supervised or rng.random() < cfg.breadth)
        pool = breadth if use_breadth else supervised
        ex = pool[int(rng.integers(len(pool)))]
        rows = rng.choice(ex.queries.shape[0], min(cfg.batch_size, ex.queries.shape[0]), replace=False)
        if use_breadth:  # in-batch negatives: the other pairs' texts, plus random texts of the corpus
            loss = map_loss(A, log_scale, ex, rows, W, special_ids, pair_cfg, rng)
        else:
            loss = map_loss(A, log_scale, ex, rows, W, special_ids, cfg, rng)
        total = loss + cfg.identity_weight * ((A - eye) ** 2).sum() if cfg.identity_weight else loss
        if cfg.function_weight:
            total = total + cfg.function_weight * logit_shift_penalty(A, gram, moment)
        opt.zero_grad()
        total.backward()
        opt.step()
        row = {"step": step, "loss": round(float(loss.detach()), 6), "collection": ex.name}
        if evaluate is not None and (step % eval_every == 0 or step == cfg.steps):
            row["eval"] = float(evaluate(A.detach().clone()))
        log.append(row)
    return A.detach().clone(), log

