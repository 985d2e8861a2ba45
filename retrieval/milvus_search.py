"""Search an index served by Milvus with the folder's own query encoder.

    >>> s = MilvusSearcher.open("indexes/adi", uri="adi.db")      # or uri="http://host:19530"
    >>> s.search("computer indexing", k=10, mode="dense+sparse+bm25")

The folder supplies what encodes a query (the LLM, PC1, term map, dense transform, BM25
vocabulary: “A Text is Worth Several Tokens” eq.14-16); only the query vectors go to Milvus,
which scores every leg (retrieval/milvus.py). The backend supplies its legs
(retrieval/milvus_legs.py: the folder's dense, sparse and bm25 legs searched in Milvus) and the
:class:`~alignir.retrieval.searcher.Searcher` runs its fusion plan over them as over the
folder's: hits, modes, options and fusion are the same:

- one leg (``dense``, ``sparse``, ``bm25``): the leg's top k from Milvus, the same ids and scores
  as the folder index (float32 rounding and ties aside);
- a fused leg set: each leg's top ``depth`` from Milvus, fused client-side by the search's
  :class:`~alignir.retrieval.fusion_plan.FusionPlan` exactly as the folder index fuses (min-max,
  z-score and weighted RRF have no Milvus equivalent: its WeightedRanker normalises by arctan,
  not as ours);
- opt-in, ``server_fusion=True``: a plan of plain RRF over a leg set (``fusion="rrf"`` without
  per-leg ``weights``) as one Milvus ``hybrid_search`` with ``RRFRanker(rrf_k)`` over each leg's
  top ``depth`` — one round trip instead of one per leg, but not always the folder's ranking:
  Milvus orders documents tied inside a leg (duplicate texts) its own way, so tied copies get
  other fused ranks, and a leg that finds nothing (a filter, deleted documents) still goes
  through RRF, where the folder returns the other legs' own scores. Its hits carry no per-leg
  scores; queries Milvus cannot take whole (a leg with an empty or signed query vector) are
  fused client-side.

A leg Milvus does not hold (a registered custom leg) is refused when the searcher is opened
(errors.LegNotServedError). An index with passages: Milvus scores passages, which are aggregated
to documents here (the exact document top-k under MaxP, FirstP or sumN, as in the folder; a
search that needs more than Milvus' top-k limit of 16384 passages is refused); BM25 is searched
over the documents' first passages (which carry the document's BM25 weights).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from alignir.errors import InvalidInputError
from alignir.retrieval import fusion as fusion_mod
from alignir.retrieval.milvus import MAX_LIMIT, MilvusCollection, default_collection_name, expected_rows, index_manifest
from alignir.retrieval.milvus_legs import milvus_legs, refuse_unserved
from alignir.retrieval.searcher import Hit, QueryBatch, Searcher, Timings, _check_queries

__all__ = ["MilvusSearcher", "open_collection", "check", "wrap"]


class MilvusSearcher(Searcher):
    """A :class:`Searcher` whose legs are searched in a Milvus collection."""

    milvus: MilvusCollection
    server_fusion: bool = False

    @classmethod
    def open(cls, path: str | Path, *, uri: str, collection: str | None = None,  # type: ignore[override]
             server_fusion: bool = False, **kw: Any) -> "MilvusSearcher":
        """Open the folder ``path`` (its query encoder, checked as :meth:`Searcher.open` does)
        and the collection ``collection`` (default: the name ``alignir export milvus`` gives)
        at ``uri``, which must hold this very index (else CollectionMismatch).
        ``server_fusion``: fuse plain RRF in Milvus (hybrid_search: one round trip, ties inside a
        leg and legs that find nothing aside; see the module docstring) rather than client-side."""
        return cls.from_searcher(Searcher.open(path, **kw), uri=uri, collection=collection,
                                 server_fusion=server_fusion)  # the folder's encoder, checked as always

    @classmethod
    def from_searcher(cls, base: Searcher, *, uri: str | None, collection: str | None = None,
                      server_fusion: bool = False) -> "MilvusSearcher":
        """The same index, query encoder and fusion as an open folder :class:`Searcher` (no
        second model load), each of its legs searched in the collection at ``uri`` (checked as
        in :meth:`open`); a leg Milvus does not hold raises errors.LegNotServedError first."""
        refuse_unserved(base.legs)  # before connecting
        milvus = open_collection(base.index, uri, collection)
        milvus.release()  # reconnected by the first search, after its queries are encoded
        self = cls(base.index, base.embedder, base.sparsifier, base.fusion,
                   legs=milvus_legs(base.legs, milvus, base.index), passage_agg=base.passage_agg)
        self.milvus = milvus
        self.server_fusion = server_fusion
        self.word_forms = base.word_forms  # queries read as the folder searcher reads them
        self._query_encoder = getattr(base, "_query_encoder", None)  # query_encoder: the same loaded model
        return self

    def close(self) -> None:
        """Close the Milvus connection (Milvus Lite keeps a .db open in this process until it exits)."""
        self.milvus.close()

    # ------------------------------------------------------------------ fused search
    def batch_search(self, queries: Sequence[str], k: int = 10, mode: str = "hybrid", *, explain: bool = False,
                     fusion: str | None = None, alpha: float | None = None,
                     weights: Mapping[str, float] | None = None, depth: int | None = None,
                     allowed_ids: Iterable[str] | None = None, threads: int | None = None,
                     timings: Timings | None = None, encoded: QueryBatch | None = None,
                     passage_agg: str | None = None) -> list[list[Hit]]:
        """:meth:`Searcher.batch_search` with the legs in Milvus; plain RRF of a leg set runs
        as one Milvus hybrid search (see the module docstring)."""
        if allowed_ids is not None and not isinstance(allowed_ids, (str, bytes)):
            allowed_ids = list(dict.fromkeys(allowed_ids))  # read once: both paths below use it
        opts = dict(explain=explain, fusion=fusion, alpha=alpha, weights=weights, depth=depth,
                    allowed_ids=allowed_ids, threads=threads, timings=timings, passage_agg=passage_agg)
        plan = self.plan(mode, fusion=fusion, alpha=alpha, weights=weights, depth=depth)
        if (not self.server_fusion or len(plan.legs) < 2 or plan.rule != "rrf" or plan.rrf_weights is not None
                or self.index.passages is not None):  # weighted RRF, other rules, passages: client-side
            return super().batch_search(queries, k, mode, encoded=encoded, **opts)
        legs = plan.legs
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        texts = _check_queries(queries)
        batch = encoded if encoded is not None else self.encode(texts, legs)
        self._complete_batch(texts, batch, legs)
        dense = batch.legs.get("dense")
        vectors = {"dense": None if dense is None else self.index.dense.transform_queries(dense),
                   "sparse": batch.legs.get("sparse"), "bm25": batch.legs.get("bm25")}
        whole = [i for i in range(len(texts)) if all(_usable(vectors[leg], i, leg) for leg in legs)]
        rest = [i for i in range(len(texts)) if i not in set(whole)]
        results: list[list[Hit]] = [[] for _ in texts]
        if rest:
            sub = QueryBatch(legs={leg: _rows(rows, rest) for leg, rows in batch.legs.items()})
            for i, hits in zip(rest, super().batch_search([texts[i] for i in rest], k, mode, encoded=sub, **opts)):
                results[i] = hits
        allowed = self._allowed_numbers(allowed_ids)
        if whole and not (allowed is not None and allowed.size == 0):
            side_k = min(self.index.n_docs, max(k, plan.depth))
            requests = [(leg, [_vector(vectors[leg], i, leg) for i in whole]) for leg in legs]
            t0 = time.perf_counter()
            # the whole fused list (each doc is in some leg's top side_k), so that ties at the
            # k-th place break as ours do (fusion.ranked), not as Milvus happens to cut them
            limit = min(MAX_LIMIT, len(legs) * side_k)
            fused = self.milvus.hybrid_rrf(requests, limit, side_k, plan.rrf_k, allowed)
            if timings is not None:
                timings.encode, timings.fuse = batch.seconds, time.perf_counter() - t0
            explainer = self._explainer(legs) if explain else None
            for i, run in zip(whole, fused):
                results[i] = [Hit(self.index.doc_ids[num], float(score), rank, num)
                              for rank, (num, score) in enumerate(fusion_mod.ranked(run, k), start=1)]
                if explainer is not None:
                    for h in results[i]:
                        h.explanation = self.legs[explainer].explain(batch.legs[explainer][i], h.doc_number)
        return results


def _usable(part: Any, i: int, leg: str) -> bool:
    """Milvus takes the query whole: a non-empty, non-negative sparse vector (dense always)."""
    if leg == "dense":
        return True
    lo, hi = part.indptr[i], part.indptr[i + 1]
    return bool(hi > lo and part.data[lo:hi].min() >= 0)


def _vector(part: Any, i: int, leg: str) -> Any:
    if leg == "dense":
        return np.asarray(part[i], dtype=np.float32).tolist()
    lo, hi = part.indptr[i], part.indptr[i + 1]
    return dict(zip(part.indices[lo:hi].tolist(), part.data[lo:hi].astype(np.float32).tolist()))


def _rows(part: Any, idx: list[int]) -> Any:
    return None if part is None else part[idx]


def open_collection(stored: Any, uri: str | None, collection: str | None = None) -> MilvusCollection:
    """The collection exported from the opened index folder ``stored`` (default name: the one
    ``alignir export milvus`` gives the folder), checked to hold this very index."""
    if not uri:
        raise InvalidInputError("the milvus backend needs a uri: a local .db file (Milvus Lite) or http(s)://host:port")
    name = collection or default_collection_name(stored.path)
    return MilvusCollection.open(uri, name, expect=index_manifest(stored), rows=expected_rows(stored))


def check(searcher: Searcher, uri: str | None, collection: str | None = None) -> None:
    """The backend hook :meth:`Searcher.open` calls before loading the model: Milvus holds every
    leg of the folder ``searcher`` (else errors.LegNotServedError, before connecting), and the
    collection is reachable and holds this index (raises otherwise)."""
    refuse_unserved(searcher.legs)
    open_collection(searcher.index, uri, collection).close()


def wrap(searcher: Searcher, uri: str | None, collection: str | None = None) -> "MilvusSearcher":
    """The backend hook that turns the opened folder searcher into a :class:`MilvusSearcher`."""
    return MilvusSearcher.from_searcher(searcher, uri=uri, collection=collection)
