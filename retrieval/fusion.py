"""Fusion of ranked lists (one query): RRF, min-max convex combination, z-score, and z-score
gated by agreement with an anchor list.

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
  query, by how much its top ``k`` agrees with the anchor's top ``k``:
  ``w'_i = w_i · min(1, max(0, o_i - f) / (τ - f))^p`` with
  ``o_i = |top_k(i) ∩ top_k(anchor)| / k`` and a floor ``f`` < τ (default 0: ``min(1, o_i/τ)^p``;
  the anchor keeps ``w_a``). A list that shares nothing with the anchor's top k for this query —
  noise, e.g. an LLM leg that saw only a truncated document — drops out (weight 0), and the
  fused order falls back to the anchor's; one that shares at least ``τ·k`` of it keeps its full
  weight. This is CombSUM over z-scores (Fox & Shaw, "Combination of Multiple Searches",
  TREC-2 1994) with the overlap-as-evidence idea of Lee, "Analyses of Multiple Evidence
  Combination" (SIGIR 1997: relevant documents are retrieved by more of the systems), used
  here as a per-query reliability weight of each list; ``k``, ``τ`` and
  ``p`` were chosen leave-one-collection-out (benchmarks/fusion_rules.py, issue 17).

Rank order inside each input list uses the same deterministic tie-break (score
descending, doc id ascending), so RRF ranks are well defined.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["AGREE_CHANCE", "AGREE_FLOOR", "AGREE_K", "AGREE_POWER", "AGREE_TAU", "FUSION_METHODS", "AgreeParams", "agree",
           "agree_weights",
           "agreement", "fuse", "fuse_runs", "minmax", "ranked", "rrf", "zscore"]

Ranking = Mapping[str, float]
FUSION_METHODS = ("rrf", "minmax", "zscore", "agree")
#: ``agree`` defaults: top-k compared, agreement at which a list keeps its full weight, power,
#: agreement at or below which it drops out, correct the agreement for chance
AGREE_K, AGREE_TAU, AGREE_POWER, AGREE_FLOOR, AGREE_CHANCE = 10, 0.4, 1.0, 0.0, False


def ranked(scores: Ranking, top: int | None = None) -> list[tuple[str, float]]:
    """(doc_id, score) best first; ties by doc id ascending."""
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
    ids = list(run)
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
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InvalidInputError(f"agreement {name} must be a positive integer, got {v!r}")
    deep = {d for d, _ in ranked(anchor, k if depth is None else depth)}
    return len({d for d, _ in ranked(run, k)} & deep) / k


def _positive_int(name: str, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InvalidInputError(f"agree {name} must be a positive integer, got {v!r}")


def _number(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InvalidInputError(f"agree {name} must be a finite number, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class AgreeParams:
    """The per-query gate of :func:`agree` (validated on creation).

    A list's agreement with the anchor is ``o = |top_k(list) ∩ top_depth(anchor)| / k``
    (``depth`` None: ``k``); ``chance``: corrected for what two random picks from the pooled
    candidates U (the union of the runs) would share, ``c = depth / |U|``:
    ``max(0, (o - c) / (1 - c))``. Its weight is multiplied by
    ``gate(o) = min(1, max(0, o - floor) / (tau - floor))^power``.

    k: top k of the gated list compared. tau: agreement at which it keeps its full weight.
    power: shape of the ramp. floor: agreement at or below which it drops out (< tau).
    chance: correct the agreement for chance. depth: how deep in the anchor's list the
    top k are looked for (>= k; None: k).
    """

    k: int = AGREE_K
    tau: float = AGREE_TAU
    power: float = AGREE_POWER
    floor: float = AGREE_FLOOR
    chance: bool = AGREE_CHANCE
    depth: int | None = None

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
        if not isinstance(self.chance, bool):
            raise InvalidInputError(f"agree chance must be true or false, got {self.chance!r}")

    @property
    def anchor_depth(self) -> int:
        """How deep in the anchor's list the top k are looked for."""
        return self.k if self.depth is None else self.depth

    def gate(self, o: float) -> float:
        """The weight factor of agreement ``o`` (already chance-corrected if asked)."""
        return min(1.0, max(0.0, o - self.floor) / (self.tau - self.floor)) ** self.power

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
) -> list[float]:
    """The per-query weights :func:`agree` gives each run: ``w_i · params.gate(o_i)`` for
    every run but the anchor (``o_i``: its agreement with the anchor, see
    :class:`AgreeParams`), ``w_anchor`` for it. With ``chance``, when ``|U| <= depth``
    nothing can be judged and the weights are returned as given. An empty anchor gates
    nothing (there is nothing to agree with): the weights are returned as given."""
    runs = _check(runs)
    p = _params(params)
    w = _weights(len(runs), weights, None)
    if isinstance(anchor, bool) or not isinstance(anchor, int) or not -len(runs) <= anchor < len(runs):
        raise InvalidInputError(f"anchor {anchor} is not one of the {len(runs)} runs")
    a = anchor % len(runs)
    if not runs[a]:
        return w
    c = min(1.0, p.anchor_depth / len({d for r in runs for d in r})) if p.chance else 0.0
    if c >= 1.0:
        return w

    def gate(run: Ranking) -> float:
        o = agreement(run, runs[a], p.k, p.anchor_depth)
        return p.gate(max(0.0, (o - c) / (1.0 - c)))

    return [wi if i == a else wi * gate(r) for i, (wi, r) in enumerate(zip(w, runs))]


def agree(
    runs: Sequence[Ranking],
    weights: Sequence[float] | None = None,
    anchor: int = -1,
    params: AgreeParams | None = None,
    missing: str = "min",
    top: int | None = None,
) -> dict[str, float]:
    """Z-score fusion with the weights of :func:`agree_weights` (``anchor``: index of the
    anchor run, default the last; ``params``: the gate, default ``AgreeParams()``)."""
    w = agree_weights(runs, weights, anchor, params)
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
