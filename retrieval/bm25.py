"""BM25: the bm25s baseline (runs for the metrics harness) and the in-index lexical leg.

Defaults follow the Anserini/Pyserini BEIR "flat" BM25 anchor: k1 = 0.9, b = 0.4, Lucene
IDF ``log(1 + (N - df + 0.5) / (df + 0.5))`` (bm25s ``method="lucene"``), English stopwords
and Porter stemming (nltk's PorterStemmer standing in for Lucene's EnglishAnalyzer).
Documents matching no query term (score 0) are not returned.

The lexical leg (:func:`bm25_weights`, :func:`lexical_leg`, :class:`QueryVectorizer`) stores
the document side of the same BM25 as a sparse matrix, so that the numba kernel of
index/sparse.py scores it: with ``q[t]`` = how often term t occurs in the analysed query
(bm25s sums a repeated query token once per occurrence) and

    w[d, t] = idf(t) · tf / (tf + k1 · (1 - b + b · dl / avgdl))

(bm25s ``method="lucene"``: Lucene ≥ 8 dropped the constant (k1 + 1) numerator, so there
is none here either; dl = analysed length, no Lucene doc-length quantisation), ``q · w[d]``
equals bm25s's score of d. The document weights are computed in float64 and rounded to
float32 as bm25s does, so they are bitwise equal to its score matrix.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["Analyzer", "BM25", "LexicalBuilder", "QueryVectorizer", "bm25_from_counts", "bm25_run", "bm25_weights",
           "lexical_leg"]


def _porter():
    from nltk.stem.porter import PorterStemmer

    stem = lru_cache(maxsize=1 << 18)(PorterStemmer().stem)
    return lambda words: [stem(w) for w in words]


class Analyzer:
    """Words of a text as BM25 sees them: ``bm25s.tokenize`` (lower case, ``\\w\\w+``),
    stopwords removed, Porter-stemmed. The one analyser of both the bm25s baseline and the
    lexical leg."""

    def __init__(self, stopwords: str | None = "en", stem: bool = True):
        self.stopwords, self.stem = stopwords, bool(stem)
        self._stemmer = _porter() if stem else None

    def ids(self, texts: Sequence[str], show_progress: bool = False):
        """``bm25s.tokenization.Tokenized`` (per-text term ids + vocab dict)."""
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, stemmer=self._stemmer,
                              show_progress=show_progress, return_ids=True)

    def words(self, texts: Sequence[str]) -> list[list[str]]:
        """Analysed words per text, in order, repeats kept."""
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, stemmer=self._stemmer,
                              show_progress=False, return_ids=False)

    def to_dict(self) -> dict[str, Any]:
        return {"tokenizer": "bm25s", "stopwords": self.stopwords,
                "stemmer": "porter (nltk)" if self.stem else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Analyzer":
        stemmer = d.get("stemmer")
        if d.get("tokenizer", "bm25s") != "bm25s" or stemmer not in (None, "porter (nltk)"):
            raise InvalidInputError(f"unknown lexical analyser {dict(d)!r}: this alignir knows the bm25s "
                             "tokenizer with the nltk Porter stemmer or none")
        return cls(stopwords=d.get("stopwords"), stem=stemmer is not None)


class BM25:
    """``BM25(k1, b).index(doc_ids, texts)``, then ``search(queries, k)`` -> run dict."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, stem: bool = True, stopwords: str | None = "en",
                 method: str = "lucene"):
        _check_kb(k1, b)
        self.k1, self.b, self.method = k1, b, method
        self.stopwords = stopwords
        self.analyzer = Analyzer(stopwords, stem)
        self._model = None
        self.doc_ids: list[str] = []

    def _tokenize(self, texts: Sequence[str], show_progress=False):
        return self.analyzer.ids(texts, show_progress=show_progress)

    def index(self, doc_ids: Sequence[str], texts: Sequence[str], show_progress: bool = True) -> "BM25":
        import bm25s

        if len(doc_ids) != len(texts):
            raise InvalidInputError(f"{len(doc_ids)} doc ids for {len(texts)} texts")
        if not doc_ids:
            raise InvalidInputError("cannot index an empty corpus")
        self.doc_ids = [str(d) for d in doc_ids]
        self._model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        self._model.index(self._tokenize(texts, show_progress=show_progress), show_progress=show_progress)
        return self

    def search(self, queries: Mapping[str, str], k: int = 1000, show_progress: bool = True) -> dict[str, dict[str, float]]:
        """Top-``k`` BM25 hits per query ``{qid: {doc_id: score}}``."""
        if self._model is None:
            raise InvalidInputError("BM25.search called before index()")
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        qids = list(queries)
        if not qids:
            return {}
        k = min(k, len(self.doc_ids))
        # Query words unseen in the corpus contribute nothing (bm25s ignores them).
        q_tokens = self.analyzer.words([queries[q] for q in qids])
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


def _check_kb(k1: float, b: float) -> None:
    if not k1 >= 0 or not 0 <= b <= 1:
        raise InvalidInputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")


def bm25_weights(token_ids: Sequence[Sequence[int]], n_terms: int, k1: float = 0.9,
                 b: float = 0.4) -> sp.csr_matrix:
    """Document-side BM25 weights of a tokenised corpus: CSR [n_docs, n_terms] float32 with
    ``w[d, t] = idf(t) · tf / (tf + k1 · (1 - b + b · dl / avgdl))``, Lucene
    ``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))`` (bm25s ``method="lucene"``).
    ``token_ids[d]``: the term ids of document d in order, repeats kept (dl = its length)."""
    _check_kb(k1, b)
    n = len(token_ids)
    lengths = np.fromiter((len(t) for t in token_ids), dtype=np.int64, count=n)
    flat = (np.concatenate([np.asarray(t, dtype=np.int64) for t in token_ids])
            if lengths.sum() else np.zeros(0, dtype=np.int64))
    if flat.size and (flat.min() < 0 or flat.max() >= n_terms):
        raise InvalidInputError(f"token ids must lie in [0, {n_terms})")
    return bm25_from_counts(_term_counts(flat, lengths, n_terms), lengths, k1, b)


def _term_counts(flat: np.ndarray, lengths: np.ndarray, n_terms: int) -> sp.csr_matrix:
    """CSR [docs, n_terms] float64 of term counts from the documents' concatenated term ids."""
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    tf = sp.csr_matrix((np.ones(flat.size, dtype=np.float64), (rows, flat)), shape=(len(lengths), n_terms))
    tf.sum_duplicates()
    tf.sort_indices()
    return tf


def bm25_from_counts(tf: sp.csr_matrix, lengths: np.ndarray, k1: float = 0.9, b: float = 0.4) -> sp.csr_matrix:
    """:func:`bm25_weights` from the term counts ``tf`` (CSR [n_docs, n_terms], float64,
    indices sorted per row) and the documents' analysed lengths: N, df and avgdl are those of
    these documents."""
    _check_kb(k1, b)
    n, n_terms = tf.shape
    if tf.nnz == 0:
        return sp.csr_matrix((n, n_terms), dtype=np.float32)
    df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
    avgdl = np.asarray(lengths, dtype=np.int64).mean()  # float64, as bm25s
    # bm25s stores idf as float32 and multiplies it into the float64 tf component
    idf = np.zeros(n_terms, dtype=np.float32)
    used = df > 0
    idf[used] = np.log(1.0 + (n - df[used] + 0.5) / (df[used] + 0.5))
    dl = np.repeat(np.asarray(lengths, dtype=np.float64), np.diff(tf.indptr))
    tfc = tf.data / (k1 * ((1.0 - b) + b * dl / avgdl) + tf.data)
    data = (idf[tf.indices].astype(np.float64) * tfc).astype(np.float32)
    return sp.csr_matrix((data, tf.indices.astype(np.int32), tf.indptr), shape=(n, n_terms))


def lexical_leg(texts: Sequence[str], k1: float = 0.9, b: float = 0.4, stem: bool = True,
                stopwords: str | None = "en", show_progress: bool = False):
    """The BM25 lexical leg of ``texts`` (row i = doc number i) as an
    :class:`index.lexical.LexicalLeg`: sorted vocabulary, float32 postings, parameters."""
    if not len(texts):
        raise InvalidInputError("cannot build a lexical leg over an empty corpus")
    builder = LexicalBuilder(k1=k1, b=b, stem=stem, stopwords=stopwords)
    builder.add(texts, show_progress=show_progress)
    return builder.finish()


class LexicalBuilder:
    """The BM25 lexical leg of documents fed in batches (:meth:`add`, in doc-number order).

    Each batch is analysed as it comes and only its term counts are kept (words numbered as
    first seen); :meth:`finish` sorts the vocabulary and computes the weights with N, document
    frequencies and average length of all the documents, so the leg equals
    :func:`lexical_leg` over the same texts at once, bit for bit."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, stem: bool = True, stopwords: str | None = "en") -> None:
        _check_kb(k1, b)
        self.k1, self.b = float(k1), float(b)
        self.analyzer = Analyzer(stopwords, stem)
        self._words: dict[str, int] = {}
        self._lengths: list[np.ndarray] = []
        self._nnz: list[np.ndarray] = []
        self._terms: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []

    @property
    def n_docs(self) -> int:
        return int(sum(len(x) for x in self._lengths))

    def add(self, texts: Sequence[str], show_progress: bool = False) -> None:
        """Analyse the next documents."""
        if not len(texts):
            return
        tok = self.analyzer.ids(texts, show_progress=show_progress)
        remap = np.empty(len(tok.vocab), dtype=np.int64)
        for word, i in tok.vocab.items():
            remap[i] = self._words.setdefault(word, len(self._words))
        lengths = np.fromiter((len(t) for t in tok.ids), dtype=np.int64, count=len(tok.ids))
        flat = (remap[np.concatenate([np.asarray(t, dtype=np.int64) for t in tok.ids])]
                if lengths.sum() else np.zeros(0, dtype=np.int64))
        tf = _term_counts(flat, lengths, max(1, len(self._words)))
        self._lengths.append(lengths)
        self._nnz.append(np.diff(tf.indptr))
        self._terms.append(tf.indices.astype(np.int32))
        self._counts.append(tf.data.astype(np.int32))

    def finish(self, show_progress: bool = False):
        """The :class:`index.lexical.LexicalLeg` of every document added."""
        from alignir.index.lexical import LexicalLeg
        from alignir.index.sparse import SparseIndex

        if not self.n_docs:
            raise InvalidInputError("cannot build a lexical leg over an empty corpus")
        vocab = sorted(self._words)  # words are numbered as first seen: sort for a stable file
        order = np.empty(len(self._words), dtype=np.int32)
        for new, word in enumerate(vocab):
            order[self._words[word]] = new
        lengths = np.concatenate(self._lengths)
        indptr = np.concatenate([[0], np.cumsum(np.concatenate(self._nnz))]).astype(np.int64)
        terms = order[np.concatenate(self._terms)] if len(vocab) else np.zeros(0, dtype=np.int32)
        tf = sp.csr_matrix((np.concatenate(self._counts).astype(np.float64), terms, indptr),
                           shape=(len(lengths), len(vocab)))
        tf.sort_indices()
        W = bm25_from_counts(tf, lengths, k1=self.k1, b=self.b)
        params = {"model": "bm25", "k1": self.k1, "b": self.b, "idf": "lucene",
                  "tf": "tf/(tf+k1(1-b+b dl/avgdl)) (bm25s lucene)", **self.analyzer.to_dict(),
                  "query_weights": "term counts", "n_docs": int(len(lengths)),
                  "avgdl": float(lengths.mean())}
        return LexicalLeg(SparseIndex.from_csr(W), vocab, params)


class QueryVectorizer:
    """Query texts -> CSR [n_queries, n_terms] of analysed-term counts against a stored
    vocabulary (words not in it are ignored, as bm25s does)."""

    def __init__(self, vocab: Sequence[str], params: Mapping[str, Any]):
        self.analyzer = Analyzer.from_dict(params)
        self.n_terms = len(vocab)
        self._ids = {t: i for i, t in enumerate(vocab)}

    def __call__(self, texts: Sequence[str]) -> sp.csr_matrix:
        indptr, indices = [0], []
        for words in self.analyzer.words(texts):
            indices.extend(i for i in (self._ids.get(w) for w in words) if i is not None)
            indptr.append(len(indices))
        Q = sp.csr_matrix((np.ones(len(indices), dtype=np.float32),
                           np.asarray(indices, dtype=np.int32), np.asarray(indptr, dtype=np.int64)),
                          shape=(len(texts), self.n_terms))
        Q.sum_duplicates()
        return Q
