"""Fusion of ranked lists (one query): RRF, min-max convex combination, z-score, and z-score
gated by chance-corrected agreement with an anchor list.

Each input is a ``{doc_id: score}`` mapping (higher is better). Outputs are
``{doc_id: fused score}`` dicts *ordered* best first; ties are broken by doc id ascending
so the order is deterministic (use :func:`ranked` to get the list).

- RRF (Cormack, Clarke & Büttcher, SIGIR 2009): ``s(d) = Σ_i w_i / (k + rank_i(d))``,
  rank 1-based, k = 60. A document missing from list i contributes 0 from it.
- Min-max: ``n_i(d) = (s_i(d) - min_i) / (max_i - min_i)``; fused ``Σ_i w_i · n_i(d)``
  (two lists with ``alpha``: ``α·n_1 + (1-α)·n_2``).
- Z-score: ``n_i(d) = (s_i(d) - mean_i) / std_i`` (population std); fused ``Σ_i w_i · n_i(d)``.

Missing documents (min-max and z-score): a document absent from list i gets that list's
**minimum normalised score** (``missing="min"``, default: 0 for min-max, min z for z-score)
— it was not retrieved, so it scored at most as the worst retrieved one. ``missing="zero"``
gives it 0 instead (for z-score that is the list's mean, i.e. an average document).
A list whose scores are all equal carries no ranking information: every normalised score
in it (and the missing value) is 0, so it does not move the fused order.

- Agreement-gated z-score (``agree``, the default of the leg sets with BM25): z-score fusion
  where every list other than the *anchor* (the BM25 leg in search) has its weight scaled, per
  query, by how much it agrees with the anchor beyond chance: ``w'_i = w_i · gate(o_i)``, with
  ``o_i`` the share of list i's top k found in the anchor's top ``depth`` (and, ``symmetric``,
  of the anchor's top k in list i's top ``depth``, averaged), each corrected for what a random
  top k would share in a collection of ``n_docs`` documents, ``(o - c) / (1 - c)``, and
  ``gate(o) = min(1, max(0, o - floor) / (τ - floor))^p`` (:class:`AgreeParams`). A list that
  agrees with the anchor no more than chance for this query — noise, e.g. an LLM leg that saw
  only a truncated document — drops out and the fused order falls back to the anchor's; one
  that agrees clearly keeps its full weight (the default: τ 0.5, half of the way from chance
  to full agreement). The chance correction is what makes one gate fit
  collections of 82 and of 5,000 documents (two random top 10s of ADI's 82 documents already
  share 1.2). This is CombSUM over z-scores (Fox & Shaw, "Combination of Multiple Searches",
  TREC-2 1994) with the overlap-as-evidence idea of Lee, "Analyses of Multiple Evidence
  Combination" (SIGIR 1997: relevant documents are retrieved by more of the systems), used
  here as a per-query reliability weight of each list; the gate's form and parameters were
  chosen on dumped leg lists, leave-one-collection-out, also with the LLM legs deliberately
  degraded (benchmarks/defaults/fusion_rules.py).

Rank order inside each input list uses the same deterministic tie-break (score
descending, doc id ascending), so RRF ranks are well defined.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["AGREE_CHANCES", "AGREE_TOP10", "FUSION_METHODS", "AgreeParams", "agree", "agree_weights",
           "agreement", "fuse", "fuse_runs", "minmax", "ranked", "rrf", "zscore"]

Ranking = Mapping[str, float]
FUSION_METHODS = ("rrf", "minmax", "zscore", "agree")


def ranked(scores: Ranking, top: int | None = None) -> list[tuple[str, float]]:
    """(doc_id, score) best first; ties by doc id ascending. ``top``: keep the first ``top``
    (a fusion's ``top`` or ``depth``; a negative one is an error, not a slice from the end)."""
    if top is not None and (isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 0):
        raise InvalidInputError(f"top / depth must be a non-negative integer or None, got {top!r}")
    items = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    return items if top is None else items[:top]


def _weights(n: int, weights: Sequence[float] | None, alpha: float | None) -> list[float]:
    if alpha is not None:
        if weights is not None:
            raise InvalidInputError("give either weights or alpha, not both")
        if n != 2:
            raise InvalidInputError(f"alpha needs exactly two runs, got {n}")
        if not 0.0 <= alpha <= 1.0:
            raise InvalidInputError(f"alpha must be in [0, 1], got {alpha}")
        return [alpha, 1.0 - alpha]
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise InvalidInputError(f"{len(weights)} weights for {n} runs")
    if any(not math.isfinite(w) for w in weights):
        raise InvalidInputError(f"weights must be finite, got {list(weights)}")
    return [float(w) for w in weights]


def _check(runs: Sequence[Ranking]) -> list[Ranking]:
    if isinstance(runs, Mapping):
        raise InvalidInputError("pass a sequence of runs ([run_a, run_b]), not a single run")
    runs = list(runs)
    if not runs:
        raise InvalidInputError("no runs to fuse")
    for i, r in enumerate(runs):
        for d, s in r.items():
            if not math.isfinite(float(s)):
                raise InvalidInputError(f"run {i}: doc {d!r} has non-finite score {s}")
    return runs


def _finish(fused: dict[str, float], top: int | None) -> dict[str, float]:
    return dict(ranked(fused, top))


def rrf(
    runs: Sequence[Ranking],
    k: float = 60.0,
    weights: Sequence[float] | None = None,
    depth: int | None = None,
    top: int | None = None,
) -> dict[str, float]:
    """Reciprocal rank fusion: ``Σ_i w_i / (k + rank_i(d))`` over the first ``depth`` hits of each list."""
    runs = _check(runs)
    if k < 0:
        raise InvalidInputError(f"RRF k must be >= 0, got {k}")
    w = _weights(len(runs), weights, None)
    fused: dict[str, float] = {}
    for wi, run in zip(w, runs):
        for rank, (d, _) in enumerate(ranked(run, depth), start=1):
            fused[d] = fused.get(d, 0.0) + wi / (k + rank)
    return _finish(fused, top)


def _normalised(run: Ranking, how: str) -> tuple[dict[str, float], float]:
    """Normalised scores of one list and its minimum (the 'missing' value for 'min')."""
    if not run:
        return {}, 0.0
    ids = sorted(run)  # a fixed summation order: the statistics never depend on insertion order
    s = np.array([float(run[d]) for d in ids], dtype=np.float64)
    if how == "minmax":
        lo, span = s.min(), s.max() - s.min()
        n = (s - lo) / span if span > 0 else np.zeros_like(s)
    else:
        std = s.std()
        n = (s - s.mean()) / std if std > 0 else np.zeros_like(s)
    return dict(zip(ids, n.tolist())), float(n.min())


def _convex(runs, how, weights, alpha, missing, top) -> dict[str, float]:
    runs = _check(runs)
    if missing not in ("min", "zero"):
        raise InvalidInputError(f"missing must be 'min' or 'zero', got {missing!r}")
    w = _weights(len(runs), weights, alpha)
    normed = [_normalised(r, how) for r in runs]
    docs = {d for r in runs for d in r}
    fused = {}
    for d in docs:
        total = 0.0
        for wi, (n, lo) in zip(w, normed):
            total += wi * n.get(d, lo if missing == "min" else 0.0)
        fused[d] = total
    return _finish(fused, top)


def minmax(
    runs: Sequence[Ranking],
    weights: Sequence[float] | None = None,
    alpha: float | None = None,
    missing: str = "min",
    top: int | None = None,
) -> dict[str, float]:
    """Min-max normalised convex combination; ``alpha`` weights the first of two runs."""
    return _convex(runs, "minmax", weights, alpha, missing, top)


def zscore(
    runs: Sequence[Ranking],
    weights: Sequence[float] | None = None,
    alpha: float | None = None,
    missing: str = "min",
    top: int | None = None,
) -> dict[str, float]:
    """Z-score normalised combination; ``alpha`` weights the first of two runs."""
    return _convex(runs, "zscore", weights, alpha, missing, top)


def agreement(run: Ranking, anchor: Ranking, k: int, depth: int | None = None) -> float:
    """``|top_k(run) ∩ top_depth(anchor)| / k`` (top lists by :func:`ranked` order; ``depth``
    None: ``k``)."""
    for name, v in (("k", k), ("depth", k if depth is None else depth)):
        _positive_int(name, v, "agreement")
    deep = {d for d, _ in ranked(anchor, k if depth is None else depth)}
    return len({d for d, _ in ranked(run, k)} & deep) / k


def _positive_int(name: str, v: object, what: str = "agree") -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InvalidInputError(f"{what} {name} must be a positive integer, got {v!r}")


def _number(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InvalidInputError(f"agree {name} must be a finite number, got {v!r}")
    return float(v)


#: how :class:`AgreeParams` corrects an agreement for chance
AGREE_CHANCES = ("none", "pool", "corpus")


@dataclass(frozen=True)
class AgreeParams:
    """The per-query gate of :func:`agree` (validated on creation; the defaults are the
    dense+sparse+bm25 gate chosen in benchmarks/defaults/fusion_rules.py).

    A list's agreement with the anchor is ``A = |top_k(list) ∩ top_depth(anchor)| / k`` (its
    top k found among the anchor's top ``depth``); with ``symmetric`` also
    ``B = |top_k(anchor) ∩ top_depth(list)| / k``, the two averaged (``o``). It is corrected
    for what a random top k would share, ``max(0, (o - c) / (1 - c))``, with ``c`` the chance
    that a random document is in the other list's top ``depth``, ``min(depth, |that list|) / n``
    (averaged over the two directions like ``o``), ``n`` the collection size
    (``chance="corpus"``; the ``n_docs`` given to :func:`agree`, the union of the runs when
    none is given) or the union of the runs (``"pool"``); ``"none"``: ``c = 0``. With
    ``c >= 1`` nothing can be judged: full agreement. The
    list's weight is multiplied by ``gate(o) = min(1, max(0, o - floor) / (tau - floor))^power``.

    k: top k of each list compared. tau: (corrected) agreement at which a list keeps its full
    weight. power: shape of the ramp. floor: agreement at or below which it drops out (< tau).
    chance: "none" | "pool" | "corpus". depth: how deep in the other list the top k are looked
    for (>= k; None: k). symmetric: also look for the anchor's top k in the list's top depth.
    """

    k: int = 10
    tau: float = 0.5
    power: float = 1.0
    floor: float = 0.0
    chance: str = "corpus"
    depth: int | None = 50
    symmetric: bool = True

    def __post_init__(self) -> None:
        _positive_int("k", self.k)
        if self.depth is not None:
            _positive_int("depth", self.depth)
            if self.depth < self.k:
                raise InvalidInputError(f"agree depth must be >= k={self.k} (or None), got {self.depth}")
        if not _number("tau", self.tau) > 0:
            raise InvalidInputError(f"agree tau must be > 0, got {self.tau}")
        if not _number("power", self.power) > 0:
            raise InvalidInputError(f"agree power must be > 0, got {self.power}")
        if not 0 <= _number("floor", self.floor) < self.tau:
            raise InvalidInputError(f"agree floor must be in [0, tau={self.tau}), got {self.floor}")
        if self.chance not in AGREE_CHANCES:
            raise InvalidInputError(f"agree chance must be one of {AGREE_CHANCES}, got {self.chance!r}")
        if not isinstance(self.symmetric, bool):
            raise InvalidInputError(f"agree symmetric must be true or false, got {self.symmetric!r}")

    @property
    def anchor_depth(self) -> int:
        """How deep in the other list the top k are looked for."""
        return self.k if self.depth is None else self.depth

    def gate(self, o: float) -> float:
        """The weight factor of (chance-corrected) agreement ``o``."""
        return min(1.0, max(0.0, o - self.floor) / (self.tau - self.floor)) ** self.power

    def agreement(self, run: Ranking, anchor: Ranking, population: int) -> float:
        """The chance-corrected agreement of ``run`` with ``anchor`` (``population``: the
        number of documents a random pick comes from; unused with ``chance="none"``):
        ``max(0, (o - c) / (1 - c))`` with ``o`` the overlap (symmetric: the mean of both
        directions) and ``c`` its chance value (the mean of both directions' ``c``)."""
        pairs = [(run, anchor), (anchor, run)] if self.symmetric else [(run, anchor)]
        o = sum(agreement(a, b, self.k, self.anchor_depth) for a, b in pairs) / len(pairs)
        if self.chance == "none":
            return o
        c = sum(min(self.anchor_depth, len(b)) / max(1, population) for _, b in pairs) / len(pairs)
        return 1.0 if c >= 1.0 else max(0.0, (o - c) / (1.0 - c))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AgreeParams":
        """From a dict (e.g. a results row); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInputError(f"AgreeParams has no setting(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


#: the plain overlap gate, the simplest form of :func:`agree` (dense+sparse+bm25, weights
#: 0.3 / 0.3 / 0.6): top-10 overlap with BM25's top 10, full weight at 0.4
AGREE_TOP10 = AgreeParams(k=10, tau=0.4, power=1.0, floor=0.0, chance="none", depth=None, symmetric=False)


def _params(params: AgreeParams | None) -> AgreeParams:
    if params is None:
        return AgreeParams()
    if not isinstance(params, AgreeParams):
        raise InvalidInputError(f"agree params must be an AgreeParams, got {type(params).__name__}")
    return params


def agree_weights(
    runs: Sequence[Ranking],
    weights: Sequence[float] | None = None,
    anchor: int = -1,
    params: AgreeParams | None = None,
    n_docs: int | None = None,
) -> list[float]:
    """The per-query weights :func:`agree` gives each run: ``w_i · params.gate(o_i)`` for
    every run but the anchor (``o_i``: its chance-corrected agreement with the anchor,
    :meth:`AgreeParams.agreement`), ``w_anchor`` for it. ``n_docs``: the collection size
    (for ``chance="corpus"``; None: the union of the runs). An empty anchor gates nothing
    (there is nothing to agree with): the weights are returned as given."""
    runs = _check(runs)
    p = _params(params)
    w = _weights(len(runs), weights, None)
    if isinstance(anchor, bool) or not isinstance(anchor, int) or not -len(runs) <= anchor < len(runs):
        raise InvalidInputError(f"anchor {anchor} is not one of the {len(runs)} runs")
    if n_docs is not None and (isinstance(n_docs, bool) or not isinstance(n_docs, int) or n_docs <= 0):
        raise InvalidInputError(f"n_docs must be a positive integer or None, got {n_docs!r}")
    a = anchor % len(runs)
    if not runs[a]:
        return w
    pool = len({d for r in runs for d in r})
    population = n_docs if (p.chance == "corpus" and n_docs is not None) else pool
    return [wi if i == a else wi * p.gate(p.agreement(r, runs[a], population))
            for i, (wi, r) in enumerate(zip(w, runs))]


def agree(
    runs: Sequence[Ranking],
    weights: Sequence[float] | None = None,
    anchor: int = -1,
    params: AgreeParams | None = None,
    n_docs: int | None = None,
    missing: str = "min",
    top: int | None = None,
) -> dict[str, float]:
    """Z-score fusion with the weights of :func:`agree_weights` (``anchor``: index of the
    anchor run, default the last; ``params``: the gate, default ``AgreeParams()``;
    ``n_docs``: the collection size, for the chance correction)."""
    w = agree_weights(runs, weights, anchor, params, n_docs)
    return _convex(runs, "zscore", w, None, missing, top)


def fuse(runs: Sequence[Ranking], method: str = "rrf", **kw) -> dict[str, float]:
    """Dispatch by name: ``"rrf"``, ``"minmax"``, ``"zscore"`` or ``"agree"``."""
    fn = {"rrf": rrf, "minmax": minmax, "zscore": zscore, "agree": agree}.get(method)
    if fn is None:
        raise InvalidInputError(f"unknown fusion method {method!r}; choose from {', '.join(FUSION_METHODS)}")
    return fn(runs, **kw)


def fuse_runs(
    runs: Sequence[Mapping[str, Ranking]], method: str = "rrf", **kw
) -> dict[str, dict[str, float]]:
    """Fuse whole runs ``{qid: {doc_id: score}}`` query by query (union of query ids)."""
    runs = list(runs)
    qids = list(dict.fromkeys(q for r in runs for q in r))
    return {q: fuse([r.get(q, {}) for r in runs], method, **kw) for q in qids}
