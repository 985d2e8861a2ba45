"""The legs a Milvus collection serves: the folder's dense, sparse and bm25 legs searched in Milvus.

Each one is a :class:`retrieval.legs.Leg`: it encodes and explains as the folder's leg it stands
for (the folder keeps the model, the term map, the dense transform and the BM25 vocabulary;
explanations read the folder's postings) and searches the collection's field of the same
name (retrieval/milvus.py: ``dense`` by inner product of the transformed query, ``sparse`` /
``bm25`` exactly, signed queries included). The searcher runs its fusion plan over them as over
the folder's legs. In a passage collection the dense and sparse legs score passages in Milvus
and aggregate them to documents here (:class:`MilvusPassageLeg`, index.passages.search_documents:
the exact document top-k under MaxP, FirstP or sumN); bm25 is searched over the documents' first
passages, which carry the document's BM25 weights.

:func:`milvus_legs` refuses a leg Milvus does not hold (a registered custom leg, or a built-in
one replaced by another class) with :class:`errors.LegNotServedError`, before any query.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from alignir.errors import InvalidInputError, LegNotServedError
from alignir.index.passages import parse_aggregation, search_documents
from alignir.retrieval.legs import BM25Leg, DenseLeg, Leg, QueryContext, SparseLeg
from alignir.retrieval.milvus import MAX_LIMIT
from alignir.retrieval.passage_leg import PassageLeg

__all__ = ["MilvusLeg", "MilvusDenseLeg", "MilvusSparseLeg", "MilvusBM25Leg", "MilvusPassageLeg", "milvus_legs",
           "refuse_unserved"]

BACKEND = "milvus"


class MilvusLeg:
    """A folder leg (``local``) whose search runs in the Milvus ``collection`` of the opened
    index ``stored``; subclasses say how (:meth:`found`)."""

    def __init__(self, local: Leg, collection: Any, stored: Any) -> None:
        self.local = local
        self.collection = collection
        self.stored = stored
        self.name = local.name
        self.needs_model = local.needs_model
        self.explains = local.explains

    def encode(self, ctx: QueryContext) -> Any:
        return self.local.encode(ctx)

    def explain(self, query_row: Any, doc_number: int) -> Any:
        return self.local.explain(query_row, doc_number)

    def search(self, encoded: Any, k: int, allowed: np.ndarray | None = None,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` documents per query from Milvus (scores float64, as Milvus returns them)."""
        n = encoded.shape[0]
        if allowed is not None and allowed.size == 0:
            return _padded([{}] * n, k)
        return _padded(self.found(self.prepare(encoded), k, allowed), k)

    def prepare(self, encoded: Any) -> Any:
        """The query rows as Milvus searches them (the dense leg transforms them)."""
        return encoded

    def found(self, prepared: Any, k: int, allowed: np.ndarray | None,
              first_only: bool = False) -> list[dict[int, float]]:
        """{entity key: score} per row of :meth:`prepare`'s output: documents, or rows of a
        passage collection (``first_only``: only documents' first passages)."""
        raise NotImplementedError


class MilvusDenseLeg(MilvusLeg):
    """The dense leg: the query vector h, transformed as the folder's FAISS part does (centring,
    normalisation, whitening), searched by inner product."""

    def prepare(self, encoded: Any) -> Any:
        return self.stored.dense.transform_queries(encoded)

    def found(self, prepared: Any, k: int, allowed: np.ndarray | None,
              first_only: bool = False) -> list[dict[int, float]]:
        return self.collection.search_dense(prepared, k, allowed, first_only=first_only)


class MilvusSparseLeg(MilvusLeg):
    """The aligned-token leg: the eq.16 query vector against the ``sparse`` field."""

    def found(self, prepared: Any, k: int, allowed: np.ndarray | None,
              first_only: bool = False) -> list[dict[int, float]]:
        return self.collection.search_sparse(prepared, k, allowed, field="sparse", first_only=first_only)


class MilvusBM25Leg(MilvusLeg):
    """The lexical leg: query term counts against the ``bm25`` field (in a passage collection:
    the first passages, keyed by row, returned as their documents)."""

    def found(self, prepared: Any, k: int, allowed: np.ndarray | None,
              first_only: bool = False) -> list[dict[int, float]]:
        pmap = self.stored.passages
        if pmap is None:
            return self.collection.search_sparse(prepared, k, allowed, field="bm25")
        hits = self.collection.search_sparse(prepared, k, allowed, field="bm25", first_only=True)
        return [{int(pmap.doc[r]): s for r, s in h.items()} for h in hits]


class MilvusPassageLeg(PassageLeg):
    """A passage leg (dense or sparse) whose passages are scored in Milvus and aggregated to
    documents here; its best passages and explanations come from the folder's leg."""

    def __init__(self, local: PassageLeg, rows: MilvusLeg) -> None:
        super().__init__(local.inner, local.pmap)
        self.aggregate = local.aggregate
        self.rows = rows

    def search(self, encoded: Any, k: int, allowed: np.ndarray | None = None, threads: int | None = None,
               aggregate: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        n = encoded.shape[0]
        if allowed is not None and allowed.size == 0:
            return _padded([{}] * n, k)
        how, sum_k = self.aggregate if aggregate is None else parse_aggregation(aggregate)
        prepared = self.rows.prepare(encoded)

        def rows(which: np.ndarray, depth: int, _allowed_rows: Any) -> tuple[np.ndarray, np.ndarray]:
            # the allowed rows are the allowed documents' (first, for FirstP) passages: Milvus filters
            # on the document number and the ordinal instead of a list of rows
            if int(depth) > MAX_LIMIT:  # a shorter list would read as "no more passages"
                raise InvalidInputError(
                    f"this search needs the top {int(depth)} passages of the {self.name} leg, more than Milvus "
                    f"returns in one search ({MAX_LIMIT}): lower k (or use --passage-agg maxp), or search "
                    f"the index folder")
            hits = self.rows.found(prepared[which], depth, allowed, first_only=how == "firstp")
            ranked = [dict(sorted(h.items(), key=lambda rs: (-rs[1], rs[0]))[:depth]) for h in hits]
            return _padded(ranked, depth)

        found = search_documents(rows, n, self.pmap, k, how, sum_k, allowed)
        return _padded([{d: s for d, (s, _) in hits.items()} for hits in found], k)


#: the folder legs Milvus holds (the fields retrieval/milvus.py exports), by class
_SERVED: dict[type, type[MilvusLeg]] = {DenseLeg: MilvusDenseLeg, SparseLeg: MilvusSparseLeg, BM25Leg: MilvusBM25Leg}


def _local(leg: Any) -> Any:
    return leg.inner if isinstance(leg, PassageLeg) else leg


def refuse_unserved(legs: Mapping[str, Leg]) -> None:
    """Raise :class:`errors.LegNotServedError` for the first of ``legs`` (a searcher's, by
    name) that Milvus does not hold: it holds the built-in dense, sparse and bm25 legs only."""
    for name, leg in legs.items():
        if type(_local(leg)) not in _SERVED:
            raise LegNotServedError(name, BACKEND, served=("dense", "sparse", "bm25"))


def milvus_legs(legs: Mapping[str, Leg], collection: Any, stored: Any) -> dict[str, Leg]:
    """The Milvus legs standing for the folder's ``legs`` (same names and order), searched in
    ``collection`` (a retrieval.milvus.MilvusCollection of the opened index ``stored``)."""
    refuse_unserved(legs)
    out: dict[str, Leg] = {}
    for name, leg in legs.items():
        local = _local(leg)
        remote = _SERVED[type(local)](local, collection, stored)
        out[name] = MilvusPassageLeg(leg, remote) if isinstance(leg, PassageLeg) else remote
    return out


def _padded(found: list[dict[int, float]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """{key: score} per query (in Milvus' order) -> (keys int64 [n, k], scores float64 [n, k]),
    padded with -1 / -inf."""
    width = max([k, *(len(h) for h in found)])
    keys = np.full((len(found), width), -1, dtype=np.int64)
    scores = np.full((len(found), width), -np.inf, dtype=np.float64)
    for i, h in enumerate(found):
        keys[i, :len(h)] = list(h.keys())
        scores[i, :len(h)] = list(h.values())
    return keys, scores
