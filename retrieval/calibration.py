"""Collection-level fusion calibration: how far each LLM leg agrees with the BM25 leg on this
collection, measured once on pseudo-queries cut from the corpus.

The per-query agreement gate (fusion.agree) judges a leg on one query's lists, so it also
silences a good leg on the queries where it disagrees with BM25 *and is right* — it kept only
69-85 % of the fixed z-score fusion's gain over BM25. The legs' usefulness is mostly a property
of the (model, collection) pair — a truncated long document or a model unfit for the domain
makes a leg noise on every query — so the calibrated fusion measures it once per index:

1. ``n`` pseudo-queries: independent random crops of ``words`` words from ``n`` sampled
   documents (the cropping of Izacard et al., "Unsupervised Dense Information Retrieval with
   Contrastive Learning", TMLR 2022, §3.2, used here as label-free queries);
2. every leg's top lists for them (the index's own legs, as searched);
3. per LLM leg, the mean over the pseudo-queries of its chance-corrected agreement with the
   BM25 list (:meth:`fusion.AgreeParams.agreement`: top 10 against the other's top 50, both
   directions, corrected by the collection size).

A search then weighs leg i by ``w_i · gate(ā_i)`` for *every* query (z-score fusion): legs
that agree with BM25 on the collection keep the fixed z-score weights (all of its gain), a
leg that is noise on the collection drops out (:data:`alignir.retrieval.fusion_plan.LEG_SET_CALIBRATED`
holds the gate; chosen leave-one-collection-out in benchmarks/defaults/fusion_rules.py). No qrels and
no user queries are involved; the result is stored in the index manifest
(``params.fusion_calibration``) by build-index / resparsify / add-lexical and
``alignir calibrate``.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from alignir.errors import InvalidInputError
from alignir.retrieval.fusion import AgreeParams

__all__ = ["FusionCalibration", "MEASURE", "calibrate", "mean_agreement", "pseudo_queries"]

#: how agreement is measured (the gate's tau is the searcher's, LEG_SET_CALIBRATED)
MEASURE = AgreeParams(k=10, depth=50, symmetric=True, chance="corpus")
#: pseudo-queries per index, and their length in words
QUERIES = 64
WORDS = 12
ANCHOR = "bm25"


def pseudo_queries(texts: Sequence[str], n: int = QUERIES, words: int = WORDS, seed: int = 0) -> list[str]:
    """``n`` crops of ``words`` consecutive words, one from each of ``n`` documents drawn
    without replacement (fewer when fewer documents have at least 3 words; the crop is the
    whole text when it is shorter). Deterministic for a given ``seed``. ``texts`` is read once in
    order, then only the sampled documents by index (a sequence that reads from disk will do)."""
    for name, v in (("n", n), ("words", words)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InvalidInputError(f"pseudo-query {name} must be a positive integer, got {v!r}")
    usable = [i for i, t in enumerate(texts) if len(t.split()) >= 3]  # one pass; only the sample is kept
    rng = random.Random(seed)
    out = []
    for i in rng.sample(usable, min(n, len(usable))):
        w = texts[i].split()
        start = rng.randrange(max(1, len(w) - words + 1))
        out.append(" ".join(w[start:start + words]))
    return out


def mean_agreement(lists: Mapping[str, Sequence[Mapping[Any, float]]], n_docs: int,
                   anchor: str = ANCHOR, params: AgreeParams = MEASURE) -> dict[str, float]:
    """Each non-anchor leg's mean chance-corrected agreement with the anchor's list over the
    queries whose anchor list is non-empty (``lists``: {leg: [one {doc: score} per query]};
    ``n_docs``: the collection size, for the chance correction). A leg with no such query
    gets 0."""
    if anchor not in lists:
        raise InvalidInputError(f"calibration needs the {anchor} leg's lists")
    base = lists[anchor]
    out = {}
    for leg, runs in lists.items():
        if leg == anchor:
            continue
        if len(runs) != len(base):
            raise InvalidInputError(f"leg {leg} has {len(runs)} lists for {len(base)} queries")
        vals = [params.agreement(r, a, n_docs) if r else 0.0 for r, a in zip(runs, base) if a]
        out[leg] = round(float(np.mean(vals)), 6) if vals else 0.0
    return out


def _measure_dict(params: AgreeParams) -> dict[str, Any]:
    """The settings of ``params`` that define the measurement (not its gate)."""
    return {k: getattr(params, k) for k in ("k", "depth", "symmetric", "chance")}


@dataclass(frozen=True)
class FusionCalibration:
    """The stored result: ``agreement`` {leg: mean agreement with BM25}, over ``queries``
    pseudo-queries of ``words`` words (``seed``), measured with ``measure`` (AgreeParams)."""

    agreement: dict[str, float]
    queries: int
    words: int = WORDS
    seed: int = 0
    measure: dict[str, Any] = field(default_factory=lambda: _measure_dict(MEASURE))

    def gate(self, leg: str, params: AgreeParams) -> float:
        """The weight factor of ``leg`` (1 for the anchor and for legs not calibrated)."""
        a = self.agreement.get(leg)
        return 1.0 if a is None else params.gate(a)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "FusionCalibration | None":
        """From the manifest's ``params.fusion_calibration`` (None when absent)."""
        if not data:
            return None
        return cls(agreement={k: float(v) for k, v in data["agreement"].items()}, queries=int(data["queries"]),
                   words=int(data.get("words", WORDS)), seed=int(data.get("seed", 0)),
                   measure=dict(data.get("measure", _measure_dict(MEASURE))))


def calibrate(searcher: Any, texts: Sequence[str], n: int = QUERIES, words: int = WORDS,
              seed: int = 0) -> FusionCalibration | None:
    """Measure the calibration of ``searcher``'s index from its corpus ``texts`` (see the
    module docstring). None when the searcher has no BM25 leg or no other leg to calibrate,
    or the corpus yields no pseudo-query."""
    legs = tuple(searcher.legs)
    if ANCHOR not in legs or len(legs) < 2:
        return None
    queries = pseudo_queries(texts, n, words, seed)
    if not queries:
        return None
    lists = searcher.leg_lists(queries, legs, k=MEASURE.anchor_depth)
    agreement = mean_agreement(lists, searcher.index.n_docs)
    return FusionCalibration(agreement=agreement, queries=len(queries), words=words, seed=seed)
