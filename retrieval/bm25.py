"""BM25 baseline through bm25s, returning runs for the same metrics harness.

Defaults follow the Anserini/Pyserini BEIR "flat" BM25 anchor: k1 = 0.9, b = 0.4, Lucene
IDF ``log(1 + (N - df + 0.5) / (df + 0.5))`` (bm25s ``method="lucene"``), English stopwords
and Porter stemming (nltk's PorterStemmer standing in for Lucene's EnglishAnalyzer).
Documents matching no query term (score 0) are not returned.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

__all__ = ["BM25", "bm25_run"]


def _porter():
    from nltk.stem.porter import PorterStemmer

    stem = lru_cache(maxsize=1 << 18)(PorterStemmer().stem)
    return lambda words: [stem(w) for w in words]


class BM25:
    """``BM25(k1, b).index(doc_ids, texts)``, then ``search(queries, k)`` -> run dict."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, stem: bool = True, stopwords: str | None = "en",
                 method: str = "lucene"):
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b, self.method = k1, b, method
        self.stopwords = stopwords
        self._stemmer = _porter() if stem else None
        self._model = None
        self.doc_ids: list[str] = []

    def _tokenize(self, texts: Sequence[str], show_progress=False):
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, stemmer=self._stemmer,
                              show_progress=show_progress, return_ids=True)

    def index(self, doc_ids: Sequence[str], texts: Sequence[str], show_progress: bool = True) -> "BM25":
        import bm25s

        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids for {len(texts)} texts")
        if not doc_ids:
            raise ValueError("cannot index an empty corpus")
        self.doc_ids = [str(d) for d in doc_ids]
        self._model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        self._model.index(self._tokenize(texts, show_progress=show_progress), show_progress=show_progress)
        return self

    def search(self, queries: Mapping[str, str], k: int = 1000, show_progress: bool = True) -> dict[str, dict[str, float]]:
        """Top-``k`` BM25 hits per query ``{qid: {doc_id: score}}``."""
        if self._model is None:
            raise ValueError("BM25.search called before index()")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        qids = list(queries)
        if not qids:
            return {}
        k = min(k, len(self.doc_ids))
        import bm25s

        # Query words unseen in the corpus contribute nothing (bm25s ignores them).
        q_tokens = bm25s.tokenize([queries[q] for q in qids], stopwords=self.stopwords,
                                  stemmer=self._stemmer, show_progress=False, return_ids=False)
        run: dict[str, dict[str, float]] = {}
        docs, scores = self._model.retrieve(q_tokens, k=k, show_progress=show_progress, n_threads=1)
        for qid, drow, srow in zip(qids, np.asarray(docs), np.asarray(scores)):
            run[qid] = {self.doc_ids[int(d)]: float(s) for d, s in zip(drow, srow) if s > 0}
        return run


def bm25_run(
    corpus: Mapping[str, object],
    queries: Mapping[str, str],
    k: int = 1000,
    k1: float = 0.9,
    b: float = 0.4,
    stem: bool = True,
    show_progress: bool = True,
) -> dict[str, dict[str, float]]:
    """BM25 run over ``corpus`` (``{id: text}`` or a :class:`retrieval.beir.Corpus` of Documents)."""
    ids = list(corpus)
    texts = [getattr(v, "contents", v) for v in corpus.values()]
    return BM25(k1=k1, b=b, stem=stem).index(ids, texts, show_progress=show_progress).search(
        queries, k=k, show_progress=show_progress)
