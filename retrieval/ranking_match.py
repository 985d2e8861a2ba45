"""Whether two ranked lists are the same ranking up to float rounding — the rule by which the
Milvus engine's hits are held to the folder's (tests and benchmarks/milvus/engine_parity.py).

Two engines that sum float32 scores in another order may trade documents inside a near tie;
anything else is a different ranking.
"""
from __future__ import annotations

from typing import Any, Iterable

__all__ = ["ranking_mismatch", "hits_mismatch"]


def ranking_mismatch(got: Iterable[tuple[Any, float]], want: Iterable[tuple[Any, float]], *, rtol: float,
                     min_scale: float = 1e-6) -> str | None:
    """Why ``got`` is not ``want``'s ranking, None when it is (lists of ``(id, score)``, best first).

    The tolerance is ``rtol * max(min_scale, largest |score| of want)``. Every rank's score must
    agree within it, and a document may stand at another rank than in ``want`` only inside a near
    tie: its score in ``want`` (or ``want``'s last score, for a document new to the list, i.e. a
    tie cut differently at the k-th place) is within the tolerance of the score at its new rank.
    """
    got, want = [(d, float(s)) for d, s in got], [(d, float(s)) for d, s in want]
    if len(got) != len(want):
        return f"{len(got)} hits, expected {len(want)}"
    if not want:
        return None
    tol = rtol * max(min_scale, max(abs(s) for _, s in want))
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if abs(g[1] - w[1]) > tol]
    if bad:
        worst = max(abs(g[1] - w[1]) for g, w in zip(got, want))
        return f"scores differ at ranks {bad[:5]}, max |diff| {worst:.3g} > {tol:.3g}"
    want_score = dict(want)
    for rank, (doc, score) in enumerate(got):
        if doc == want[rank][0]:
            continue
        ref = want_score.get(doc, want[-1][1])
        if abs(ref - score) > tol:
            return (f"rank {rank + 1}: {doc} (reference score {ref}) replaces {want[rank][0]} "
                    f"({want[rank][1]}), not a near tie")
    return None


def hits_mismatch(want: Iterable[Any], got: Iterable[Any], rel: float = 1e-5) -> str | None:
    """:func:`ranking_mismatch` of two lists of hits (``.id``, ``.score``), within ``rel`` of
    max(1, top score): Milvus sums float32 in another order than the folder."""
    return ranking_mismatch([(h.id, h.score) for h in got], [(h.id, h.score) for h in want], rtol=rel,
                            min_scale=1.0)
