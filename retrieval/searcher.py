"""Searcher: sparse | dense | bm25 | hybrid | fused leg sets over an index folder, with explanations.

    >>> from alignir import Searcher
    >>> s = Searcher.open("indexes/med")
    >>> for hit in s.search("cancer in children", k=5, mode="hybrid", explain=True):
    ...     print(hit.rank, hit.id, round(hit.score, 3), [c.string for c in hit.explanation[:5]])

One query encoder pass yields both representations (“A Text is Worth Several Tokens” §5): the dense vector h goes to
FAISS, and the query's surface tokens ∪ its top-M aligned tokens (eq.16) go to the inverted
index. Hybrid search fuses the two ranked lists (retrieval/fusion.py).

Legs: "dense" (FAISS), "sparse" (aligned tokens, eq.16) and "bm25" (the index's lexical leg:
BM25 word-term weights scored by the same sparse kernel, retrieval/bm25.py; no model pass).
A mode is one leg, "hybrid" (dense + sparse, ``alpha`` weighs dense: unchanged from before the
lexical leg existed) or a '+'-joined leg set such as "dense+sparse+bm25", fused with the
configured method (minmax / zscore: convex combination with per-leg weights; rrf: reciprocal
ranks, weighted only when weights are given). Leg sets with BM25 default to z-score fusion
with BM25 at 0.6 (LEG_SET_DEFAULTS, chosen on held-out collections); others weigh legs
equally. Pyserini's BEIR hybrid runs fuse a learned representation with BM25 the same way.

An open Searcher may be shared across threads: encoding is serialised by a lock (tokenizers
and torch modules are not re-entrant); sparse searches run concurrently (SparseIndex runs a
single query on the calling thread without the GIL, and serialises only numba-pool batches);
FAISS searches only read.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.encoders.aligned import TermContribution, explain as explain_terms
from alignir.index.store import StoredIndex, open_index
from alignir.retrieval import fusion as fusion_mod
from alignir.retrieval.config import FusionConfig, SparseConfig
from alignir.retrieval.manifest import check_encoder, embedder_spec, term_map_from_arrays
from alignir.retrieval.sparsify import Sparsifier

LEGS = ("dense", "sparse", "bm25")
#: the modes "all" means for an index with its lexical leg (without it: the first three)
MODES = ("hybrid", "sparse", "dense", "bm25", "dense+bm25", "sparse+bm25", "dense+sparse+bm25")
BASE_MODES = MODES[:3]
#: Default fusion of the leg sets with the BM25 leg (used when a call gives no fusion, alpha or
#: weights): z-score fusion with the weights chosen leave-one-collection-out on ADI, MED,
#: Cranfield and CISI (benchmarks/fusion_transfer.py; every held-out choice was z-score with
#: BM25 at 0.6, except sparse+bm25 on ADI at 0.7). Held out, dense+sparse+bm25 beat BM25 on all
#: four (e.g. MED 0.736 vs 0.667, Cranfield 0.366 vs 0.352); equal min-max weights did not.
LEG_SET_DEFAULTS: dict[tuple[str, ...], tuple[str, dict[str, float]]] = {
    ("dense", "bm25"): ("zscore", {"dense": 0.4, "bm25": 0.6}),
    ("sparse", "bm25"): ("zscore", {"sparse": 0.4, "bm25": 0.6}),
    ("dense", "sparse", "bm25"): ("zscore", {"dense": 0.2, "sparse": 0.2, "bm25": 0.6}),
}
LEXICAL_HINT = ("rebuild it with `alignir build-index --lexical` (the default) or add the leg with "
                "`alignir add-lexical --index DIR`")


def parse_mode(mode: str) -> tuple[str, ...]:
    """The legs of a mode, in LEGS order: "hybrid" -> (dense, sparse); "bm25" -> (bm25,);
    "bm25+dense" -> (dense, bm25)."""
    if not isinstance(mode, str):
        raise InvalidInputError(f"mode must be a string, got {type(mode).__name__}")
    if mode == "hybrid":
        return ("dense", "sparse")
    parts = [p.strip() for p in mode.split("+")]
    if not all(p in LEGS for p in parts) or len(set(parts)) != len(parts):
        raise InvalidInputError(f"mode must be one of {MODES} or a '+'-joined set of the legs "
                         f"{LEGS}, got {mode!r}")
    return tuple(leg for leg in LEGS if leg in parts)


def modes_for(stored: StoredIndex) -> tuple[str, ...]:
    """The modes "all" means for this index (the bm25 ones only when it has the lexical leg)."""
    return MODES if stored.lexical is not None else BASE_MODES


@dataclass
class Hit:
    """One search result. ``sparse_score`` / ``dense_score`` / ``bm25_score`` are the raw
    scores of each leg (None when the document was not in that leg's list or the leg was not
    searched); ``explanation`` lists the shared terms and their contributions to the sparse
    score — to the BM25 score when the mode has a bm25 leg and no sparse one (with
    ``explain=True``)."""

    id: str
    score: float
    rank: int
    doc_number: int
    sparse_score: float | None = None
    dense_score: float | None = None
    bm25_score: float | None = None
    explanation: list[TermContribution] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.explanation is None:
            d.pop("explanation")
        return d


@dataclass
class QueryBatch:
    """Encoded queries, row i = query i: dense vectors, aligned-token sparse vectors and BM25
    term counts (``lexical``). A part is None when it was not computed (the model parts
    for a bm25-only search; ``lexical`` for an index without the lexical leg)."""

    dense: np.ndarray | None
    sparse: sp.csr_matrix | None
    seconds: float = 0.0
    lexical: sp.csr_matrix | None = None


@dataclass
class Timings:
    """Seconds spent per stage by the last batch (filled when passed to batch_search)."""

    encode: float = 0.0
    sparse: float = 0.0
    dense: float = 0.0
    bm25: float = 0.0
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
        self._numbers = {d: i for i, d in enumerate(stored.doc_ids)}
        self._vectorizer: tuple[Any, Any] | None = None  # (leg, QueryVectorizer)

    @property
    def has_lexical(self) -> bool:
        return self.index.lexical is not None

    def _lexical(self):
        """The lexical leg and its query vectoriser (raises when the index has no leg)."""
        leg = self.index.lexical
        if leg is None:
            raise InvalidInputError(f"{self.index.path}: this index has no lexical (BM25) leg, so the "
                             f"bm25 modes are not available; {LEXICAL_HINT}")
        if self._vectorizer is None or self._vectorizer[0] is not leg:
            from alignir.retrieval.bm25 import QueryVectorizer

            self._vectorizer = (leg, QueryVectorizer(leg.vocab, leg.params))
        return self._vectorizer

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, *, model: str | None = None, loaded: Any = None,
             instruction: str | None = None, device: str = "auto",
             fusion: FusionConfig | None = None, verify: bool = True, precision: str | None = None,
             allow_precision_mismatch: bool = False) -> "Searcher":
        """Open ``path`` and load its query encoder.

        ``model`` overrides the model spec recorded in the index (e.g. another copy of the
        same weights); ``loaded`` passes an already loaded model. Either way the encoder's
        fingerprint must equal the index's, or :class:`index.store.FingerprintMismatch` is
        raised naming the fields that differ. ``instruction`` is the query-side task
        instruction (“A Text is Worth Several Tokens” Table 7: a task name such as ``"scifact"`` or a literal string).
        ``precision``: the query encoder's ("fp32" | "int8"; default: the index's);
        ``allow_precision_mismatch``: accept one that differs from the index's in precision only.
        """
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model

        stored = open_index(path, verify=verify)
        if stored.sparse is None or stored.dense is None:
            raise InvalidInputError(f"{path}: the index lacks its sparse or dense part; rebuild it")
        spec = embedder_spec(stored.manifest, path)
        if loaded is None:
            from alignir.encoders.shipped import SHIPPED

            model = SHIPPED[model].base_model if model in SHIPPED else model
            loaded = load_model(model or spec["model"], device=device)
        options = dict(spec.get("options", {}))
        if instruction is not None:
            options["instruction"] = instruction
        if precision is not None:
            options["precision"] = precision
        embedder = get_embedder(spec["family"], loaded, progress=False, **options)
        check_encoder(stored, embedder, allow_precision_mismatch)
        params = stored.params
        config = SparseConfig.from_dict(params.get("sparse", {}))
        term_map = term_map_from_arrays(stored.extra, params.get("term_map", "identity"))
        sparsifier = Sparsifier.for_model(loaded, config, pc1=stored.pc1, term_map=term_map)
        return cls(stored, embedder, sparsifier, fusion or FusionConfig())

    # ------------------------------------------------------------------ encoding
    def encode(self, queries: Sequence[str], legs: Iterable[str] | None = None) -> QueryBatch:
        """Dense vectors and eq.16 sparse vectors of ``queries`` (one encoder pass), and
        their BM25 term counts when the index has the lexical leg. ``legs``: encode only what
        these legs need (no model pass for ("bm25",))."""
        texts = _check_queries(queries)
        legs = set(LEGS if legs is None else legs)
        t0 = time.perf_counter()
        H = Q = L = None
        if legs & {"dense", "sparse"}:
            with self._encode_lock:
                H = self.embedder.encode_queries(texts)
                surface = self.embedder.surface_token_ids(texts)
            Q = self.sparsifier.queries(H, surface)
        if "bm25" in legs and self.has_lexical:
            L = self._lexical()[1](texts)
        return QueryBatch(H, Q, time.perf_counter() - t0, L)

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        k: int = 10,
        mode: str = "hybrid",
        *,
        explain: bool = False,
        fusion: str | None = None,
        alpha: float | None = None,
        weights: Mapping[str, float] | None = None,
        depth: int | None = None,
        allowed_ids: Iterable[str] | None = None,
        threads: int | None = None,
        timings: Timings | None = None,
        encoded: QueryBatch | None = None,
    ) -> list[Hit]:
        """Top-``k`` hits of one query; the options are :meth:`batch_search`'s."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        return self.batch_search([query], k=k, mode=mode, explain=explain, fusion=fusion, alpha=alpha,
                                 weights=weights, depth=depth, allowed_ids=allowed_ids, threads=threads,
                                 timings=timings, encoded=encoded)[0]

    def batch_search(
        self,
        queries: Sequence[str],
        k: int = 10,
        mode: str = "hybrid",
        *,
        explain: bool = False,
        fusion: str | None = None,
        alpha: float | None = None,
        weights: Mapping[str, float] | None = None,
        depth: int | None = None,
        allowed_ids: Iterable[str] | None = None,
        threads: int | None = None,
        timings: Timings | None = None,
        encoded: QueryBatch | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first.

        ``mode``: "hybrid" (fuse dense and sparse), "sparse" (aligned tokens, eq.16), "dense",
        "bm25" (the lexical leg) or a '+'-joined leg set ("dense+bm25", "sparse+bm25",
        "dense+sparse+bm25"...; see :func:`parse_mode`). ``fusion`` / ``alpha`` / ``depth``
        override the searcher's FusionConfig for this call. ``alpha`` weighs the dense leg:
        in "hybrid" α·dense + (1-α)·sparse as always; in a leg set (only when given in this
        call) the other legs share 1-α equally. ``weights`` ({leg: weight}, relative: convex
        fusions divide by their sum; rrf uses them as given) set every leg's weight of a
        '+'-joined leg set instead (legs not in the mode are ignored; "hybrid" keeps α).
        Leg sets with the BM25 leg default to :data:`LEG_SET_DEFAULTS` (z-score, BM25 at 0.6)
        when none of ``fusion``, ``alpha``, ``weights`` is given; others weigh legs equally. ``allowed_ids``: restrict results to these document
        ids (others never come back, even when k exceeds their number). ``explain``: attach
        the shared terms and their contributions to each hit. ``encoded``: reuse a
        :class:`QueryBatch` from :meth:`encode` (e.g. to sweep fusion settings).
        """
        legs = parse_mode(mode)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        if "bm25" in legs:
            self._lexical()  # a clear error before any work when the index lacks the leg
        if fusion is None and alpha is None and weights is None and legs in LEG_SET_DEFAULTS:
            fusion, weights = LEG_SET_DEFAULTS[legs]
        fcfg = FusionConfig(method=fusion or self.fusion.method,
                            alpha=self.fusion.alpha if alpha is None else alpha,
                            depth=depth or self.fusion.depth, rrf_k=self.fusion.rrf_k)
        leg_w, rrf_w = _leg_weights(mode, legs, fcfg.alpha, alpha is not None, weights)
        tm = timings if timings is not None else Timings()
        batch = encoded if encoded is not None else self.encode(queries, legs)
        side_k = min(self.index.n_docs, max(k, fcfg.depth) if len(legs) > 1 else k)
        lists = self._leg_lists(queries, batch, legs, side_k, allowed_ids, threads, tm)

        t0 = time.perf_counter()
        results = []
        for i in range(len(queries)):
            per_leg = [lists[leg][i] for leg in legs]
            ranking = per_leg[0] if len(legs) == 1 else fuse_legs(per_leg, leg_w, fcfg, rrf_w)
            hits = []
            for rank, (num, score) in enumerate(fusion_mod.ranked(ranking, k), start=1):
                leg_score = {leg: lists[leg][i].get(num) if leg in lists else None for leg in LEGS}
                hits.append(Hit(self.index.doc_ids[num], float(score), rank, num,
                                leg_score["sparse"], leg_score["dense"], leg_score["bm25"]))
            results.append(hits)
        tm.fuse = time.perf_counter() - t0
        if explain:
            lexical = "bm25" in legs and "sparse" not in legs
            for i, hits in enumerate(results):
                for h in hits:
                    h.explanation = (self.explain_bm25(batch.lexical[i], h.doc_number) if lexical
                                     else self.explain(batch.sparse[i], h.doc_number))
        return results

    def leg_lists(self, queries: Sequence[str], legs: Sequence[str] = LEGS, k: int = 100, *,
                  allowed_ids: Iterable[str] | None = None, encoded: QueryBatch | None = None,
                  threads: int | None = None) -> dict[str, list[dict[int, float]]]:
        """Each leg's top-``k`` as {doc number: raw score} per query — what the fused modes
        fuse (with :func:`fuse_legs`); for sweeping fusion settings without searching again."""
        legs = parse_mode("+".join(legs))
        batch = encoded if encoded is not None else self.encode(queries, legs)
        return self._leg_lists(queries, batch, legs, min(self.index.n_docs, k), allowed_ids,
                               threads, Timings())

    def _leg_lists(self, queries, batch: QueryBatch, legs, side_k: int, allowed_ids, threads,
                   tm: Timings) -> dict[str, list[dict[int, float]]]:
        n = len(queries)
        for leg, part in (("dense", batch.dense), ("sparse", batch.sparse)):
            if leg in legs and (part is None or part.shape[0] != n):
                raise InvalidInputError(f"encoded batch lacks the {leg} vectors of {n} queries")
        if batch.lexical is None and "bm25" in legs:
            batch.lexical = self._lexical()[1](_check_queries(queries))
        if batch.lexical is not None and "bm25" in legs and batch.lexical.shape[0] != n:
            raise InvalidInputError("encoded batch and queries differ in length")
        allowed = self._allowed_numbers(allowed_ids)
        tm.encode = batch.seconds
        lists: dict[str, list[dict[int, float]]] = {}
        if "sparse" in legs:
            t0 = time.perf_counter()
            docs, scores = self.index.sparse.search(batch.sparse, side_k, allowed=allowed,
                                                    threads=threads)
            lists["sparse"] = _to_lists(docs, scores)
            tm.sparse = time.perf_counter() - t0
        if "dense" in legs:
            t0 = time.perf_counter()
            docs, scores = self.index.dense.search(batch.dense, side_k, allowed=allowed)
            lists["dense"] = _to_lists(docs, scores)
            tm.dense = time.perf_counter() - t0
        if "bm25" in legs:
            t0 = time.perf_counter()
            docs, scores = self.index.lexical.index.search(batch.lexical, side_k,
                                                           allowed=allowed, threads=threads)
            lists["bm25"] = _to_lists(docs, scores)
            tm.bm25 = time.perf_counter() - t0
        return lists

    def explain(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        """Shared terms of a query's sparse vector and a document, with contributions
        (their sum is the document's sparse score)."""
        terms, weights = self.index.sparse.doc_vector(int(doc_number))
        n_terms = self.index.sparse.n_terms
        doc_row = sp.csr_matrix((weights, terms, [0, len(terms)]), shape=(1, n_terms))
        return explain_terms(query_row, doc_row, self.sparsifier.term_map)

    def explain_bm25(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        """Shared words of a query's BM25 term counts and a document, with contributions
        (count · BM25 weight; their sum is the document's bm25 score)."""
        leg = self._lexical()[0]
        terms, weights = leg.index.doc_vector(int(doc_number))
        doc_row = sp.csr_matrix((weights, terms, [0, len(terms)]), shape=(1, leg.n_terms))
        return [replace(c, string=leg.vocab[c.term]) for c in explain_terms(query_row, doc_row)]

    def _allowed_numbers(self, allowed_ids: Iterable[str] | None) -> np.ndarray | None:
        if allowed_ids is None:
            return None
        if isinstance(allowed_ids, (str, bytes)):
            raise InvalidInputError(f"allowed_ids must be a collection of document ids, not the single string "
                                    f"{allowed_ids!r} (write [{allowed_ids!r}] for one id)")
        ids = list(allowed_ids)
        unknown = [d for d in ids if d not in self._numbers]
        if unknown:
            raise InvalidInputError(f"{len(unknown)} allowed ids are not in the index, e.g. {unknown[:5]}")
        return np.array(sorted(self._numbers[d] for d in ids), dtype=np.int64)


def _check_queries(queries: Sequence[str]) -> list[str]:
    if isinstance(queries, str):
        raise InvalidInputError("queries must be a list of strings, not a single string")
    texts = list(queries)
    for i, q in enumerate(texts):
        if not isinstance(q, str):
            raise InvalidInputError(f"queries[{i}] is {type(q).__name__}, expected str")
        if not q.strip():
            raise InvalidInputError(f"queries[{i}] is empty: nothing to search for")
        try:
            q.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: an undecodable byte of the input (surrogateescape)
            raise InvalidInputError(f"queries[{i}] is not valid text: character {e.start} is an undecodable byte "
                                    f"or a lone surrogate; give the query as UTF-8") from None
    return texts


def _to_lists(docs: np.ndarray, scores: np.ndarray) -> list[dict[int, float]]:
    """Padded (docs, scores) rows -> one {doc number: score} dict per query."""
    out = []
    for drow, srow in zip(docs, scores):
        keep = drow >= 0
        out.append(dict(zip(drow[keep].tolist(), srow[keep].astype(float).tolist())))
    return out


def _leg_weights(mode: str, legs: Sequence[str], alpha: float, alpha_given: bool,
                 weights: Mapping[str, float] | None) -> tuple[list[float], list[float] | None]:
    """(convex weights summing to 1, rrf weights or None) of the legs of ``mode``. "hybrid"
    keeps its α (``weights`` apply to '+'-joined leg sets); one leg needs none."""
    if len(legs) == 1:
        return [1.0], None
    if weights is not None and mode != "hybrid":
        unknown = sorted(set(weights) - set(LEGS))
        missing = [leg for leg in legs if leg not in weights]
        if unknown or missing:
            raise InvalidInputError(f"weights must name the legs of mode {mode!r} ({', '.join(legs)}); "
                             f"unknown {unknown}, missing {missing}")
        w = [float(weights[leg]) for leg in legs]
        if any(not np.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise InvalidInputError(f"weights must be finite, >= 0 and not all 0, got {dict(weights)}")
        return [x / sum(w) for x in w], w
    if mode == "hybrid" or (alpha_given and "dense" in legs and len(legs) > 1):
        rest = (1.0 - alpha) / (len(legs) - 1)
        return [alpha if leg == "dense" else rest for leg in legs], None
    return [1.0 / len(legs)] * len(legs), None


def fuse_legs(lists: Sequence[Mapping[int, float]], weights: Sequence[float], cfg: FusionConfig,
              rrf_weights: Sequence[float] | None = None) -> dict:
    """Fuse one query's leg lists (doc number -> raw score). Convex fusions weigh leg i by
    ``weights[i]``; rrf by ``rrf_weights`` (None: plain RRF). Empty lists (e.g. a query
    with no word in the BM25 vocabulary) drop out and the others keep their weights; one
    non-empty list is returned as it is. With two lists [dense, sparse] and weights
    [α, 1-α] this is the hybrid fusion."""
    keep = [i for i, run in enumerate(lists) if run]
    if len(keep) <= 1:
        return dict(lists[keep[0]]) if keep else {}
    runs = [lists[i] for i in keep]
    if cfg.method == "rrf":
        rw = None if rrf_weights is None else [rrf_weights[i] for i in keep]
        return fusion_mod.rrf(runs, k=cfg.rrf_k, weights=rw)
    return fusion_mod.fuse(runs, method=cfg.method, weights=[weights[i] for i in keep])
