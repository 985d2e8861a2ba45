"""Searcher: sparse | dense | hybrid search over an index folder, with explanations.

    >>> from retrieval.searcher import Searcher
    >>> s = Searcher.open("indexes/med")
    >>> for hit in s.search("cancer in children", k=5, mode="hybrid", explain=True):
    ...     print(hit.rank, hit.id, round(hit.score, 3), [c.string for c in hit.explanation[:5]])

One query encoder pass yields both representations (seed 004 §5): the dense vector h goes to
FAISS, and the query's surface tokens ∪ its top-M aligned tokens (eq.16) go to the inverted
index. Hybrid search fuses the two ranked lists (retrieval/fusion.py).

An open Searcher may be shared across threads: encoding is serialised by a lock (tokenizers
and torch modules are not re-entrant), and so are sparse searches (numba's parallel kernels
must not be entered from two Python threads at once with every threading layer); FAISS
searches only read.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from encoders.aligned import TermContribution, explain as explain_terms
from index.store import StoredIndex, open_index
from retrieval import fusion as fusion_mod
from retrieval.config import FusionConfig, SparseConfig
from retrieval.indexer import check_encoder, term_map_from_arrays
from retrieval.sparsify import Sparsifier

MODES = ("hybrid", "sparse", "dense")


@dataclass
class Hit:
    """One search result. ``sparse_score`` / ``dense_score`` are the raw scores of each side
    (None when the document was not in that side's list); ``explanation`` lists the shared
    terms and their contributions to the sparse score (with ``explain=True``)."""

    id: str
    score: float
    rank: int
    doc_number: int
    sparse_score: float | None = None
    dense_score: float | None = None
    explanation: list[TermContribution] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.explanation is None:
            d.pop("explanation")
        return d


@dataclass
class QueryBatch:
    """Encoded queries: dense vectors and sparse term vectors, row i = query i."""

    dense: np.ndarray
    sparse: sp.csr_matrix
    seconds: float = 0.0


@dataclass
class Timings:
    """Seconds spent per stage by the last batch (filled when passed to batch_search)."""

    encode: float = 0.0
    sparse: float = 0.0
    dense: float = 0.0
    fuse: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class Searcher:
    """Search an alignir index folder. Build one with :meth:`open`."""

    def __init__(self, stored: StoredIndex, embedder: Any, sparsifier: Sparsifier,
                 fusion: FusionConfig = FusionConfig()) -> None:
        self.index = stored
        self.embedder = embedder
        self.sparsifier = sparsifier
        self.fusion = fusion
        self._encode_lock = threading.Lock()
        self._sparse_lock = threading.Lock()
        self._numbers = {d: i for i, d in enumerate(stored.doc_ids)}

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, *, model: str | None = None, loaded: Any = None,
             instruction: str | None = None, device: str = "auto",
             fusion: FusionConfig | None = None, verify: bool = True) -> "Searcher":
        """Open ``path`` and load its query encoder.

        ``model`` overrides the model spec recorded in the index (e.g. another copy of the
        same weights); ``loaded`` passes an already loaded model. Either way the encoder's
        fingerprint must equal the index's, or :class:`index.store.FingerprintMismatch` is
        raised naming the fields that differ. ``instruction`` is the query-side task
        instruction (seed 004 Table 7: a task name such as ``"scifact"`` or a literal string).
        """
        from encoders.embedders import get_embedder
        from encoders.models import load_model

        stored = open_index(path, verify=verify)
        if stored.sparse is None or stored.dense is None:
            raise ValueError(f"{path}: the index lacks its sparse or dense part; rebuild it")
        spec = stored.manifest.get("embedder")
        if not spec:
            raise ValueError(f"{path}: the manifest does not say which encoder built it")
        if loaded is None:
            loaded = load_model(model or spec["model"], device=device)
        options = dict(spec.get("options", {}))
        if instruction is not None:
            options["instruction"] = instruction
        embedder = get_embedder(spec["family"], loaded, progress=False, **options)
        check_encoder(stored, embedder)
        params = stored.params
        config = SparseConfig.from_dict(params.get("sparse", {}))
        term_map = term_map_from_arrays(stored.extra, params.get("term_map", "identity"))
        sparsifier = Sparsifier.for_model(loaded, config, pc1=stored.pc1, term_map=term_map)
        return cls(stored, embedder, sparsifier, fusion or FusionConfig())

    # ------------------------------------------------------------------ encoding
    def encode(self, queries: Sequence[str]) -> QueryBatch:
        """Dense vectors and eq.16 sparse vectors of ``queries`` (one encoder pass)."""
        texts = _check_queries(queries)
        t0 = time.perf_counter()
        with self._encode_lock:
            H = self.embedder.encode_queries(texts)
            surface = self.embedder.surface_token_ids(texts)
        Q = self.sparsifier.queries(H, surface)
        return QueryBatch(H, Q, time.perf_counter() - t0)

    # ------------------------------------------------------------------ search
    def search(self, query: str, k: int = 10, mode: str = "hybrid", **kw: Any) -> list[Hit]:
        """Top-``k`` hits of one query. See :meth:`batch_search` for the options."""
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        return self.batch_search([query], k=k, mode=mode, **kw)[0]

    def batch_search(
        self,
        queries: Sequence[str],
        k: int = 10,
        mode: str = "hybrid",
        *,
        explain: bool = False,
        fusion: str | None = None,
        alpha: float | None = None,
        depth: int | None = None,
        allowed_ids: Iterable[str] | None = None,
        threads: int | None = None,
        timings: Timings | None = None,
        encoded: QueryBatch | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first.

        ``mode``: "hybrid" (fuse both sides), "sparse" (aligned tokens, eq.16) or "dense".
        ``fusion`` / ``alpha`` / ``depth`` override the searcher's FusionConfig for this call
        (alpha weighs the dense side). ``allowed_ids``: restrict results to these document
        ids (others never come back, even when k exceeds their number). ``explain``: attach
        the shared terms and their contributions to each hit. ``encoded``: reuse a
        :class:`QueryBatch` from :meth:`encode` (e.g. to sweep fusion settings).
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        fcfg = FusionConfig(method=fusion or self.fusion.method,
                            alpha=self.fusion.alpha if alpha is None else alpha,
                            depth=depth or self.fusion.depth, rrf_k=self.fusion.rrf_k)
        batch = encoded if encoded is not None else self.encode(queries)
        if batch.dense.shape[0] != len(queries):
            raise ValueError("encoded batch and queries differ in length")
        allowed = self._allowed_numbers(allowed_ids)
        tm = timings if timings is not None else Timings()
        tm.encode = batch.seconds
        n_docs = self.index.n_docs
        side_k = min(n_docs, max(k, fcfg.depth) if mode == "hybrid" else k)

        sparse_lists = dense_lists = None
        if mode in ("hybrid", "sparse"):
            t0 = time.perf_counter()
            with self._sparse_lock:
                docs, scores = self.index.sparse.search(batch.sparse, side_k, allowed=allowed,
                                                        threads=threads)
            sparse_lists = _to_lists(docs, scores)
            tm.sparse = time.perf_counter() - t0
        if mode in ("hybrid", "dense"):
            t0 = time.perf_counter()
            docs, scores = self.index.dense.search(batch.dense, side_k, allowed=allowed)
            dense_lists = _to_lists(docs, scores)
            tm.dense = time.perf_counter() - t0

        t0 = time.perf_counter()
        results = []
        for i in range(len(queries)):
            s = sparse_lists[i] if sparse_lists is not None else {}
            d = dense_lists[i] if dense_lists is not None else {}
            if mode == "sparse":
                ranking = s
            elif mode == "dense":
                ranking = d
            else:
                ranking = _fuse(s, d, fcfg)
            hits = []
            for rank, (num, score) in enumerate(fusion_mod.ranked(ranking, k), start=1):
                hits.append(Hit(self.index.doc_ids[num], float(score), rank, num,
                                s.get(num), d.get(num)))
            results.append(hits)
        tm.fuse = time.perf_counter() - t0
        if explain:
            for i, hits in enumerate(results):
                for h in hits:
                    h.explanation = self.explain(batch.sparse[i], h.doc_number)
        return results

    def explain(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        """Shared terms of a query's sparse vector and a document, with contributions
        (their sum is the document's sparse score)."""
        terms, weights = self.index.sparse.doc_vector(int(doc_number))
        n_terms = self.index.sparse.n_terms
        doc_row = sp.csr_matrix((weights, terms, [0, len(terms)]), shape=(1, n_terms))
        return explain_terms(query_row, doc_row, self.sparsifier.term_map)

    def _allowed_numbers(self, allowed_ids: Iterable[str] | None) -> np.ndarray | None:
        if allowed_ids is None:
            return None
        ids = list(allowed_ids)
        unknown = [d for d in ids if d not in self._numbers]
        if unknown:
            raise ValueError(f"{len(unknown)} allowed ids are not in the index, e.g. {unknown[:5]}")
        return np.array(sorted(self._numbers[d] for d in ids), dtype=np.int64)


def _check_queries(queries: Sequence[str]) -> list[str]:
    if isinstance(queries, str):
        raise ValueError("queries must be a list of strings, not a single string")
    texts = list(queries)
    for i, q in enumerate(texts):
        if not isinstance(q, str):
            raise ValueError(f"queries[{i}] is {type(q).__name__}, expected str")
        if not q.strip():
            raise ValueError(f"queries[{i}] is empty: nothing to search for")
    return texts


def _to_lists(docs: np.ndarray, scores: np.ndarray) -> list[dict[int, float]]:
    """Padded (docs, scores) rows -> one {doc number: score} dict per query."""
    out = []
    for drow, srow in zip(docs, scores):
        keep = drow >= 0
        out.append(dict(zip(drow[keep].tolist(), srow[keep].astype(float).tolist())))
    return out


def _fuse(sparse: Mapping[int, float], dense: Mapping[int, float], cfg: FusionConfig) -> dict:
    """Fuse one query's lists; alpha weighs the dense side. Doc numbers are ints here: the
    fusion functions are generic over hashable, orderable ids."""
    if not sparse or not dense:
        return dict(dense or sparse)
    if cfg.method == "rrf":
        return fusion_mod.rrf([dense, sparse], k=cfg.rrf_k)
    return fusion_mod.fuse([dense, sparse], method=cfg.method, alpha=cfg.alpha)
