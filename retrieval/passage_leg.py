"""A leg over passage rows that ranks documents: passage scores aggregated per document.

An index whose long documents were split into passages (retrieval/passages.py) stores one
dense and one aligned-token row per passage; :class:`PassageLeg` wraps such a row leg
(retrieval/legs.py: ``DenseLeg``, ``SparseLeg``) so that the searcher sees documents, as it does
for an index without passages: ``search`` returns the exact top-k documents under MaxP
(default), FirstP or sum of the top-k passages (index.passages.search_documents; Dai & Callan,
"Deeper Text Understanding for IR with Contextual Neural Language Modeling", SIGIR 2019, §3),
``allowed`` names documents (all their passages are searched), and ``explain`` explains the
document's best passage, which :meth:`PassageLeg.best_passage` names. The aggregation happens
per leg, before fusion with the BM25 leg (which scores whole documents).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from alignir.encoders.terms import TermContribution
from alignir.index.passages import PassageMap, parse_aggregation, search_documents

__all__ = ["PassageLeg", "PassageMatch"]


@dataclass(frozen=True)
class PassageMatch:
    """The passage of a document that scored best for a query in one leg: its id
    (``doc_id#ordinal``, as Pyserini names passages), ordinal, row, score and character span
    [start, end) (None when the index keeps no spans). The span counts characters (Python str
    indices, end excluded) of the text that was encoded, ``f"{title} {text}".strip()`` (BEIR's
    contents, retrieval.beir.Document.contents), not of the ``text`` field alone: with a non-empty
    title (no surrounding spaces), offsets into ``text`` are ``start - len(title) - 1``."""

    id: str
    ordinal: int
    row: int
    score: float
    start: int | None = None
    end: int | None = None


class PassageLeg:
    """``inner`` (a leg over passage rows) seen as a leg over documents through ``pmap``."""

    def __init__(self, inner: Any, pmap: PassageMap, aggregate: str = "maxp") -> None:
        self.inner = inner
        self.pmap = pmap
        self.name = inner.name
        self.needs_model = inner.needs_model
        self.explains = inner.explains
        self.aggregate = parse_aggregation(aggregate)

    def encode(self, ctx: Any) -> Any:
        return self.inner.encode(ctx)

    def search(self, encoded: Any, k: int, allowed: np.ndarray | None = None, threads: int | None = None,
               aggregate: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` documents (doc numbers int64 [n, k], scores float32 [n, k], padded with
        -1 / -inf); ``allowed``: document numbers; ``aggregate``: "maxp" | "firstp" | "sumN"
        (default: this leg's)."""
        how, sum_k = self.aggregate if aggregate is None else parse_aggregation(aggregate)
        n = encoded.shape[0]

        def rows(which: np.ndarray, depth: int, allowed_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            part = encoded if len(which) == n else encoded[which]
            return self.inner.search(part, depth, allowed=allowed_rows, threads=threads)

        found = search_documents(rows, n, self.pmap, int(k), how, sum_k, allowed)
        docs = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        for i, hits in enumerate(found):
            ranked = sorted(hits.items(), key=lambda kv: (-kv[1][0], kv[0]))
            for j, (d, (s, _)) in enumerate(ranked):
                docs[i, j], scores[i, j] = d, s
        return docs, scores

    def best_passage(self, query_row: Any, doc_number: int, doc_ids: Any) -> PassageMatch | None:
        """The best-scoring passage of a document for one query (None: no passage of it
        matches, e.g. no aligned token shared)."""
        rows = self.pmap.rows_of([int(doc_number)])
        q = np.atleast_2d(query_row) if isinstance(query_row, np.ndarray) else query_row
        if sp.issparse(q) and q.shape[0] != 1:
            q = q[:1]
        got, scores = self.inner.search(q, len(rows), allowed=rows)
        keep = got[0] >= 0
        if not keep.any():
            return None
        order = sorted(zip(got[0][keep].tolist(), scores[0][keep].tolist()), key=lambda rs: (-rs[1], rs[0]))
        row, score = order[0]
        span = self.pmap.span(row)
        return PassageMatch(self.pmap.passage_id(row, doc_ids), int(self.pmap.ordinal[row]), int(row),
                            float(score), *(span or (None, None)))

    def explain(self, query_row: Any, doc_number: int) -> list[TermContribution]:
        """The terms the query shares with the document's best passage (their contributions
        sum to that passage's score: the document's MaxP score)."""
        match = self.best_passage(query_row, doc_number, _Numbers())
        if match is None:
            return []
        return self.inner.explain(query_row, match.row)


class _Numbers:
    """Doc ids that are the doc numbers themselves (when only the row is needed)."""

    def __getitem__(self, i: int) -> str:
        return str(i)
