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
ranks, weighted only when weights are given; agree: z-score with each LLM leg's weight gated
per query by its agreement with the BM25 leg; calibrated: the same gate measured once per
collection on pseudo-queries, retrieval/calibration.py). Which rule, weights and gate a search
uses, and why, is its :class:`~alignir.retrieval.fusion_plan.FusionPlan`
(:meth:`Searcher.plan`; the precedence is retrieval/fusion_plan.py's): leg sets with BM25
default to calibrated (agree on an uncalibrated index). Pyserini's BEIR hybrid runs fuse a
learned representation with BM25 the same way. The searcher runs the plan over whichever
legs it holds: the folder's, or a backend's (retrieval/milvus_legs.py).

Long documents split into passages at build time (``build-index --passages``): the dense and
sparse legs score passages and aggregate them to documents before fusion (MaxP by default;
FirstP or the sum of the N best with ``passage_agg``: Dai & Callan, "Deeper Text Understanding
for IR with Contextual Neural Language Modeling", SIGIR 2019, §3; retrieval/passage_leg.py);
hits are documents, and ``explain`` names the passage that matched (``Hit.passages``).

An open Searcher may be shared across threads: encoding is serialised by a lock (tokenizers
and torch modules are not re-entrant); sparse searches run concurrently (SparseIndex runs a
single query on the calling thread without the GIL, and serialises only numba-pool batches);
FAISS searches only read.
"""
from __future__ import annotations

from alignir.checks import check_texts
from alignir.errors import DocumentNotFoundError, InvalidInputError

import importlib
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.encoders.shipped import SHIPPED, shipped_name
from alignir.encoders.terms import TermContribution
from alignir.encoders.word_forms import WordForms
from alignir.index.reader import StoredIndex, open_index
from alignir.retrieval import fusion as fusion_mod
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.config import FusionConfig, IndexConfig
from alignir.retrieval.fusion_plan import INDEX, USER, FusionPlan, resolve_plan
from alignir.index.passages import parse_aggregation
from alignir.retrieval.legs import LEGS, Leg, QueryContext, leg_factories, legs_for
from alignir.retrieval.passage_leg import PassageLeg
from alignir.retrieval.manifest import embedder_spec
from alignir.retrieval.preflight import check_before_loading

if TYPE_CHECKING:
    from alignir.retrieval.sparsify import Sparsifier

#: the modes "all" means for an index with its lexical leg (without it: the first three)
MODES = ("hybrid", "sparse", "dense", "bm25", "dense+bm25", "sparse+bm25", "dense+sparse+bm25")
BASE_MODES = MODES[:3]
#: where the legs are searched: the index folder itself, or a collection exported from it to
#: another engine — name -> the module serving it, which provides ``check(searcher, uri,
#: collection)`` (refuse the searcher's legs it cannot serve, reach and check the collection:
#: before the model loads) and ``wrap(searcher, uri, collection)`` (the searcher with the
#: backend's legs); imported by name, only when used
BACKENDS: dict[str, str | None] = {"folder": None, "milvus": "alignir.retrieval.milvus_search"}
LEXICAL_HINT = ("rebuild it with `alignir build-index --lexical` (the default) or add the leg with "
                "`alignir add-lexical --index DIR`")


def parse_mode(mode: str, legs: Sequence[str] | None = None) -> tuple[str, ...]:
    """The legs of a mode, in the order of ``legs``: "hybrid" -> (dense, sparse); "bm25" ->
    (bm25,); "bm25+dense" -> (dense, bm25). ``legs``: the leg names that may appear (None:
    the registered legs, retrieval.legs.register_leg: the built-in ones first)."""
    if legs is None:
        legs = parse_mode_legs()
    if not isinstance(mode, str):
        raise InvalidInputError(f"mode must be a string, got {type(mode).__name__}")
    if mode == "hybrid":
        return ("dense", "sparse")
    parts = [p.strip() for p in mode.split("+")]
    if not all(p in legs for p in parts) or len(set(parts)) != len(parts):
        shown = MODES if tuple(legs) == LEGS else ("hybrid", *legs)
        raise InvalidInputError(f"mode must be one of {shown} or a '+'-joined set of the legs "
                                f"{tuple(legs)}, got {mode!r}")
    return tuple(leg for leg in legs if leg in parts)


def parse_mode_legs() -> tuple[str, ...]:
    """The leg names a mode may use when no searcher is at hand: the registered legs, the
    built-in ones first."""
    return (*LEGS, *(name for name in leg_factories() if name not in LEGS))


def modes_for(stored: StoredIndex) -> tuple[str, ...]:
    """The modes "all" means for this index: those of :data:`MODES` whose legs it has (the
    bm25 ones only with its lexical leg, only those without a model)."""
    has = {"dense": stored.dense is not None, "sparse": stored.sparse is not None,
           "bm25": stored.lexical is not None}
    return tuple(mode for mode in MODES if all(has[leg] for leg in parse_mode(mode, LEGS)))


@dataclass
class Hit:
    """One search result. ``leg_scores``: the raw score of each leg of the mode ({leg name:
    score}, None when the document was not in that leg's list); ``sparse_score`` /
    ``dense_score`` / ``bm25_score`` read it (None also when the leg was not searched).
    ``explanation`` lists the shared terms and their contributions to the score of the first
    leg of the mode that explains (sparse before bm25; with ``explain=True``). ``passages``:
    in an index with passages, with ``explain=True``, the best passage of the document in each
    passage leg of the mode ({leg name: PassageMatch}; the explanation is its terms)."""

    id: str
    score: float
    rank: int
    doc_number: int
    leg_scores: dict[str, float | None] = field(default_factory=dict)
    explanation: list[TermContribution] | None = None
    passages: dict[str, Any] | None = None

    @property
    def sparse_score(self) -> float | None:
        return self.leg_scores.get("sparse")

    @property
    def dense_score(self) -> float | None:
        return self.leg_scores.get("dense")

    @property
    def bm25_score(self) -> float | None:
        return self.leg_scores.get("bm25")

    def to_dict(self) -> dict[str, Any]:
        """id, score, rank, doc_number, ``LEG_score`` for the built-in legs (None when not
        searched) and any other leg of the mode, and the explanation when there is one."""
        d: dict[str, Any] = {"id": self.id, "score": self.score, "rank": self.rank, "doc_number": self.doc_number}
        for leg in ("sparse", "dense", "bm25", *(k for k in self.leg_scores if k not in LEGS)):
            d[f"{leg}_score"] = self.leg_scores.get(leg)
        if self.explanation is not None:
            d["explanation"] = [asdict(c) for c in self.explanation]
        if self.passages is not None:
            d["passages"] = {leg: asdict(m) for leg, m in self.passages.items()}
        return d


class QueryBatch:
    """Encoded queries: one representation per leg (``legs``: {leg name: rows}, row i =
    query i) and the seconds the encoding took."""

    def __init__(self, *, legs: Mapping[str, Any] | None = None, seconds: float = 0.0) -> None:
        self.legs: dict[str, Any] = dict(legs or {})
        self.seconds = seconds

    def __repr__(self) -> str:
        shapes = {k: getattr(v, "shape", None) for k, v in self.legs.items()}
        return f"QueryBatch(legs={shapes}, seconds={self.seconds:.3f})"


@dataclass
class Timings:
    """Seconds spent per stage by the last batch (filled when passed to batch_search):
    ``encode``, ``legs`` ({leg name: seconds of its search}) and ``fuse``."""

    encode: float = 0.0
    fuse: float = 0.0
    legs: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)


class Searcher:
    """Search an alignir index folder with its legs (retrieval/legs.py). Build one with
    :meth:`open`; ``legs`` ({name: Leg}, default: every registered leg the index can serve)."""

    def __init__(self, stored: StoredIndex, embedder: Any, sparsifier: Sparsifier,
                 fusion: FusionConfig = FusionConfig(), legs: Mapping[str, Leg] | None = None,
                 passage_agg: str | None = None) -> None:

        self.index = stored
        self.embedder = embedder
        self.sparsifier = sparsifier
        self.fusion = fusion
        saved = IndexConfig.from_manifest(stored.manifest)
        self.passage_agg = passage_agg or saved.passages.aggregate
        parse_aggregation(self.passage_agg)
        self.legs: dict[str, Leg] = (dict(legs) if legs is not None
                                     else legs_for(stored, sparsifier, self.passage_agg))
        self._encode_lock = threading.Lock()
        self._numbers = {d: i for i, d in enumerate(stored.doc_ids)}
        #: how the corpus writes its words (encoders.word_forms): the model legs read a query's
        #: runs of capitals through it (None: an index without them, or set to None to read
        #: them by the fold alone)
        self.word_forms: WordForms | None = WordForms.from_arrays(stored.extra)
        #: the index's collection-level fusion calibration (None: not calibrated)
        self.calibration = FusionCalibration.from_dict(stored.manifest.get("params", {}).get("fusion_calibration"))
        # the index's saved fusion (the shipped model's own, when the index was built with one): a
        # plan names the config's choices "index config" when ``self.fusion`` is this one
        self._saved_fusion = saved.fusion
        spec = stored.manifest.get("embedder")  # checked when the encoder loads (manifest.embedder_spec)
        options = spec.get("options") if isinstance(spec, dict) else None
        name = shipped_name(options.get("adapter")) if isinstance(options, dict) else None
        self._model = None if name is None else SHIPPED[name]

    def plan(self, mode: str = "hybrid", *, fusion: str | None = None, alpha: float | None = None,
             weights: Mapping[str, float] | None = None, depth: int | None = None) -> FusionPlan:
        """The :class:`~alignir.retrieval.fusion_plan.FusionPlan` a search of ``mode`` with these
        options runs: its legs, rule, weights, gate and where each came from (the call, the
        index's saved fusion and leg-set defaults, its model's, its calibration, the fallback).
        Raises what the search would for options it refuses."""
        return resolve_plan(mode, self.parse_mode(mode), fusion=fusion, alpha=alpha, weights=weights, depth=depth,
                            config=self.fusion, config_source=INDEX if self.fusion == self._saved_fusion else USER,
                            calibration=self.calibration, model=self._model, known=tuple(self.legs))

    @property
    def has_lexical(self) -> bool:
        return "bm25" in self.legs

    def _leg(self, name: str) -> Leg:
        """The leg ``name`` (a clear error when this index cannot serve it)."""
        leg = self.legs.get(name)
        if leg is None:
            if name == "bm25":
                raise InvalidInputError(f"{self.index.path}: this index has no lexical (BM25) leg, so the "
                                        f"bm25 modes are not available; {LEXICAL_HINT}")
            if name in LEGS:
                raise InvalidInputError(f"{self.index.path}: this index was built without the {name} leg "
                                        f"(build-index --legs); its legs: {', '.join(self.legs)}")
            raise InvalidInputError(f"{self.index.path}: this searcher has no leg {name!r} "
                                    f"(its legs: {', '.join(self.legs)})")
        return leg

    def _names(self) -> tuple[str, ...]:
        """Leg names a mode may use, in mode order: the searcher's legs, then the built-in
        ones this index lacks (so that naming them gives the clear error of :meth:`_leg`)."""
        return (*self.legs, *(leg for leg in LEGS if leg not in self.legs))

    def parse_mode(self, mode: str) -> tuple[str, ...]:
        """The legs of ``mode`` for this searcher (see :func:`parse_mode`); each must exist."""
        legs = parse_mode(mode, self._names())
        for leg in legs:
            self._leg(leg)
        return legs

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, *, model: str | None = None, loaded: Any = None,
             instruction: str | None = None, device: str = "auto",
             fusion: FusionConfig | None = None, verify: bool = True, backend: str = "folder",
             uri: str | None = None, collection: str | None = None, precision: str | None = None,
             allow_precision_mismatch: bool = False, passage_agg: str | None = None,
             runtime: str | None = None, encoder: Any = None) -> "Searcher":
        """Open ``path`` and load its query encoder.

        ``backend="milvus"``: the legs are searched in the Milvus collection ``collection``
        (default: the name ``alignir export milvus`` gives the folder) at ``uri`` (a local
        ``.db`` file = Milvus Lite, or ``http(s)://host:port``), which must hold this very index;
        the folder still encodes the queries (a :class:`retrieval.milvus_search.MilvusSearcher`).

        ``model`` overrides the model spec recorded in the index (e.g. another copy of the
        same weights); ``loaded`` passes an already loaded model. Either way the encoder's
        fingerprint must equal the index's, or :class:`errors.FingerprintMismatch` is
        raised naming the fields that differ. ``instruction`` is the query-side task
        instruction (“A Text is Worth Several Tokens” Table 7: a task name such as ``"scifact"`` or a literal string).
        ``fusion``: the default fusion of fused modes (default: the one saved in the index's
        :class:`IndexConfig`).
        ``precision``: the query encoder's ("fp32" | "int8"; default: the index's);
        ``allow_precision_mismatch``: accept one that differs from the index's in precision only.
        ``passage_agg``: how an index with passages scores a document by them by default
        ("maxp" | "firstp" | "sumN"; default: the index's, MaxP).
        ``runtime``: what runs the query encoder's transformer: "auto" (default, or
        ``$ALIGNIR_RUNTIME``: ONNX Runtime fp32 where it applies, else torch), "torch" or "onnx"
        (encoders.onnx_runtime; the vectors are the same within float rounding).
        ``encoder``: the loaded query encoder of another searcher of this index
        (:attr:`query_encoder`, e.g. of its previous version) to use instead of loading the
        model again: its model and runtime session are shared, the sparse part is this
        version's; it must pass the same fingerprint check.
        """
        from alignir.encoders.runtimes import check_runtime

        runtime = check_runtime(runtime)  # a bad value fails before anything loads
        if backend not in BACKENDS:
            raise InvalidInputError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
        if backend == "folder" and (uri is not None or collection is not None):
            raise InvalidInputError("uri / collection are options of backend='milvus'")
        if passage_agg is not None:
            parse_aggregation(passage_agg)  # before the model loads
        from alignir.retrieval.encoder import Encoder

        stored = open_index(path, verify=verify)
        if not any(leg in stored.parts for leg in ("sparse", "dense", "lexical")):
            raise InvalidInputError(f"{path}: the index has no leg to search (no sparse, dense or lexical part); "
                                    f"rebuild it")
        remote = None if BACKENDS[backend] is None else importlib.import_module(BACKENDS[backend])

        def load() -> Encoder:
            # what can be checked without the model is checked before it loads (or converts)
            check_before_loading(stored.manifest, embedder_spec(stored.manifest, path),
                                 model if loaded is None else None, precision)
            if encoder is not None:
                return Encoder.for_stored(stored, path, allow_precision_mismatch=allow_precision_mismatch,
                                          reuse=encoder)
            return Encoder.for_stored(stored, path, model=model, loaded=loaded, instruction=instruction,
                                      precision=precision, device=device,
                                      allow_precision_mismatch=allow_precision_mismatch, runtime=runtime)

        # the query encoder loads on the first query that needs it (a bm25 search needs none);
        # a model given by the caller (or another precision) is checked against the index now
        encoder_holder = _LazyEncoder(load)
        searcher = cls(stored, _Deferred(encoder_holder, "embedder"), _Deferred(encoder_holder, "sparsifier"),
                       fusion or IndexConfig.from_manifest(stored.manifest).fusion, passage_agg=passage_agg)
        searcher._query_encoder = encoder_holder
        if remote is not None:  # the backend serves these legs, its collection is this index: before the model
            remote.check(searcher, uri, collection)
        if loaded is not None or model is not None or precision is not None or encoder is not None:
            encoder_holder.get()
        if stored.dense is not None:
            stored.dense.use_gpu(dense_on_gpu(device))
        return searcher if remote is None else remote.wrap(searcher, uri, collection)

    @property
    def query_encoder(self) -> Any:
        """The loaded query encoder (retrieval.encoder.Encoder) of a searcher made by :meth:`open`,
        to pass as ``Searcher.open(encoder=...)``; None before it has loaded."""
        holder = getattr(self, "_query_encoder", None)
        return holder.get() if holder is not None and holder.loaded else None

    def close(self) -> None:
        """Release what the searcher holds beyond the mmapped folder (the Milvus connection of a
        ``backend="milvus"`` searcher; nothing for the folder), so code can close either."""

    def __enter__(self) -> "Searcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def doc(self, doc_id: str) -> dict[str, str]:
        """The stored document ``doc_id`` as ``{"_id", "title", "text"}`` (an index built with
        ``store_text=True`` / ``--store-text``; others raise InvalidInputError)."""
        texts = self.index.parts.get("texts")
        if texts is None:
            raise InvalidInputError(f"{self.index.path}: this index does not store its texts; rebuild it with "
                                    f"--store-text (build_index(store_text=True)) or read the corpus")
        number = self._numbers.get(doc_id) if isinstance(doc_id, str) else None
        if number is None:
            raise DocumentNotFoundError(f"no document {doc_id!r} in {self.index.path}")
        title, text = texts.get(number)
        return {"_id": doc_id, "title": title, "text": text}

    # ------------------------------------------------------------------ encoding
    def encode(self, queries: Sequence[str], legs: Iterable[str] | None = None) -> QueryBatch:
        """Each leg's representation of ``queries`` (the model legs share one encoder pass:
        dense vectors and eq.16 sparse vectors; BM25 term counts need none). ``legs``: encode
        only these (None: every leg of this searcher; a built-in leg the index lacks is
        skipped)."""
        texts = _check_queries(queries)
        if legs is None:
            names = list(self.legs)
        else:
            wanted = set(legs)
            names = [n for n in self._names() if n in wanted and (n in self.legs or n not in LEGS)]
            unknown = sorted(wanted - set(self._names()))
            if unknown:
                raise InvalidInputError(f"unknown leg(s) {unknown}; this searcher's legs: {', '.join(self.legs)}")
        t0 = time.perf_counter()
        ctx = QueryContext(texts, self.embedder, self._encode_lock,
                           None if self.word_forms is None else self.word_forms.form)
        encoded = {name: self._leg(name).encode(ctx) for name in names}
        return QueryBatch(legs=encoded, seconds=time.perf_counter() - t0)

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
        passage_agg: str | None = None,
    ) -> list[Hit]:
        """Top-``k`` hits of one query; the options are :meth:`batch_search`'s."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        return self.batch_search([query], k=k, mode=mode, explain=explain, fusion=fusion, alpha=alpha,
                                 weights=weights, depth=depth, allowed_ids=allowed_ids, threads=threads,
                                 timings=timings, encoded=encoded, passage_agg=passage_agg)[0]

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
        passage_agg: str | None = None,
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first.

        ``mode``: "hybrid" (fuse dense and sparse), "sparse" (aligned tokens, eq.16), "dense",
        "bm25" (the lexical leg), any other leg of this searcher or a '+'-joined leg set ("dense+bm25", "sparse+bm25",
        "dense+sparse+bm25"...; see :func:`parse_mode`). ``fusion`` / ``alpha`` / ``depth``
        override the searcher's FusionConfig for this call. ``alpha`` weighs the dense leg:
        in "hybrid" α·dense + (1-α)·sparse as always; in a leg set (only when given in this
        call) the other legs share 1-α equally. ``weights`` ({leg: weight}, relative: convex
        fusions divide by their sum; rrf uses them as given) set every leg's weight of a
        '+'-joined leg set instead (legs not in the mode are ignored; "hybrid" keeps α).
        Leg sets with the BM25 leg default to "calibrated" (z-score with each LLM leg gated by
        its agreement with BM25 on the index's pseudo-queries; "agree", the same gate per query,
        on an index without a calibration) when none of ``fusion``, ``alpha``, ``weights`` is
        given; the index's own leg-set defaults (``FusionConfig.leg_sets``, which a shipped
        model brings) replace alignir's under "calibrated". :meth:`plan` returns what a call
        runs and why (the precedence: retrieval/fusion_plan.py). "agree" and "calibrated" need
        the bm25 leg. ``allowed_ids``: restrict results to these document
        ids (others never come back, even when k exceeds their number; "agree" then corrects
        for chance among them, not the whole collection). ``explain``: attach
        the shared terms and their contributions to each hit (from the first leg of the mode that
        explains; for a mode without one, the first such leg sharing its encoder pass).
        ``threads``: threads of the sparse kernels. ``timings``: a :class:`Timings` filled with
        the seconds per stage. ``encoded``: reuse a
        :class:`QueryBatch` from :meth:`encode` (e.g. to sweep fusion settings).
        ``passage_agg``: in an index with passages, how the dense and sparse legs score a
        document by its passages before fusion: "maxp" (its best passage; the searcher's
        default), "firstp" (its first) or "sumN" (its N best summed); the top k is exact.
        With ``explain`` each hit names its best passage per leg (``Hit.passages``).
        """
        legs = self.parse_mode(mode)
        if passage_agg is not None:
            parse_aggregation(passage_agg)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        if "bm25" in legs:
            self._leg("bm25")  # a clear error before any work when the index lacks the leg
        n_docs = self.index.n_docs  # what a random top list is drawn from ("agree"'s chance correction)
        if allowed_ids is not None and not isinstance(allowed_ids, (str, bytes)):
            allowed_ids = list(dict.fromkeys(allowed_ids))  # read once (it may be an iterator)
            n_docs = max(1, len(allowed_ids))  # a filtered search draws from the allowed documents
        plan = self.plan(mode, fusion=fusion, alpha=alpha, weights=weights, depth=depth)
        explainer = self._explainer(legs) if explain else None
        tm = timings if timings is not None else Timings()
        needed = legs + ((explainer,) if explainer is not None and explainer not in legs else ())
        batch = encoded if encoded is not None else self.encode(queries, needed)
        side_k = min(self.index.n_docs, max(k, plan.depth) if len(legs) > 1 else k)
        lists = self._leg_lists(queries, batch, needed if explain else legs, side_k, allowed_ids, threads, tm,
                                search=legs, passage_agg=passage_agg)

        t0 = time.perf_counter()
        results = []
        for i in range(len(queries)):
            ranking = plan.fuse([lists[leg][i] for leg in legs], n_docs)
            hits = []
            for rank, (num, score) in enumerate(fusion_mod.ranked(ranking, k), start=1):
                hits.append(Hit(self.index.doc_ids[num], float(score), rank, num,
                                {leg: lists[leg][i].get(num) for leg in legs}))
            results.append(hits)
        tm.fuse = time.perf_counter() - t0
        if explainer is not None:
            leg, rows = self.legs[explainer], batch.legs[explainer]
            for i, hits in enumerate(results):
                for h in hits:
                    h.explanation = leg.explain(rows[i], h.doc_number)
        if explain:
            self._name_passages(results, batch, needed)
        return results

    def _name_passages(self, results: list[list[Hit]], batch: QueryBatch, legs: Sequence[str]) -> None:
        """``Hit.passages``: each passage leg's best passage of every hit (indexes with passages)."""
        named = [name for name in legs if isinstance(self.legs.get(name), PassageLeg)]
        if not named:
            return
        for i, hits in enumerate(results):
            for h in hits:
                h.passages = {}
                for name in named:
                    leg = self.legs[name]
                    match = leg.best_passage(batch.legs[name][i], h.doc_number, self.index.doc_ids)  # type: ignore[attr-defined]
                    if match is not None:
                        h.passages[name] = match

    def _explainer(self, legs: Sequence[str]) -> str | None:
        """The leg that explains the hits of a mode with ``legs``: the first of them that
        explains, else the first explaining leg that shares their encoder pass (the sparse
        leg for "dense"), else None."""
        for name in legs:
            if self.legs[name].explains:
                return name
        if any(self.legs[name].needs_model for name in legs):
            for name, leg in self.legs.items():
                if leg.explains and leg.needs_model:
                    return name
        return None

    def leg_lists(self, queries: Sequence[str], legs: Sequence[str] | None = None, k: int = 100, *,
                  allowed_ids: Iterable[str] | None = None, encoded: QueryBatch | None = None,
                  threads: int | None = None, passage_agg: str | None = None) -> dict[str, list[dict[int, float]]]:
        """Each leg's top-``k`` as {doc number: raw score} per query — what the fused modes
        fuse (with :func:`fuse_legs`); for sweeping fusion settings without searching again.
        ``legs``: None = every leg of this searcher. ``passage_agg``: as in :meth:`batch_search`."""
        legs = self.parse_mode("+".join(self.legs if legs is None else legs))
        batch = encoded if encoded is not None else self.encode(queries, legs)
        return self._leg_lists(queries, batch, legs, min(self.index.n_docs, k), allowed_ids,
                               threads, Timings(), passage_agg=passage_agg)

    def _complete_batch(self, queries, batch: QueryBatch, legs: Sequence[str]) -> None:
        """Check that ``batch`` holds one row per query for each of ``legs``, first encoding the
        legs that need no model pass (e.g. BM25 term counts, made from the texts)."""
        n = len(queries)
        for name in legs:
            leg = self._leg(name)
            rows = batch.legs.get(name)
            if rows is None and not leg.needs_model:
                rows = batch.legs[name] = leg.encode(QueryContext(_check_queries(queries), None))
            if rows is None or rows.shape[0] != n:
                raise InvalidInputError(f"encoded batch lacks the {name} vectors of {n} queries")

    def _leg_lists(self, queries, batch: QueryBatch, legs: Sequence[str], side_k: int, allowed_ids,
                   threads, tm: Timings, search: Sequence[str] | None = None,
                   passage_agg: str | None = None) -> dict[str, list[dict[int, float]]]:
        """Check (and complete, for legs without a model pass) ``batch`` for ``legs``, then
        search the legs in ``search`` (default: ``legs``); passage legs aggregate by
        ``passage_agg`` (None: the searcher's)."""
        self._complete_batch(queries, batch, legs)
        allowed = self._allowed_numbers(allowed_ids)
        tm.encode = batch.seconds
        lists: dict[str, list[dict[int, float]]] = {}
        for name in (legs if search is None else search):
            t0 = time.perf_counter()
            leg = self.legs[name]
            if isinstance(leg, PassageLeg):
                docs, scores = leg.search(batch.legs[name], side_k, allowed=allowed, threads=threads,
                                          aggregate=passage_agg or self.passage_agg)
            else:
                docs, scores = leg.search(batch.legs[name], side_k, allowed=allowed, threads=threads)
            lists[name] = _to_lists(docs, scores)
            tm.legs[name] = time.perf_counter() - t0
        return lists

    def explain(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        """Shared terms of a query's sparse vector and a document, with contributions
        (their sum is the document's sparse score)."""
        return self._leg("sparse").explain(query_row, doc_number)

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


class _LazyEncoder:
    """A query encoder (retrieval.encoder.Encoder) made on first use, once (thread-safe)."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load, self._value, self._lock = load, None, threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def get(self) -> Any:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._load()
        return self._value


class _Deferred:
    """Stands for ``getattr(encoder, attr)`` (the embedder or the sparsifier) and loads the
    encoder when first used, so that opening a searcher loads no model."""

    def __init__(self, encoder: _LazyEncoder, attr: str) -> None:
        object.__setattr__(self, "_encoder", encoder)
        object.__setattr__(self, "_attr", attr)

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(self._encoder.get(), self._attr), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(getattr(self._encoder.get(), self._attr), name, value)

    def __repr__(self) -> str:
        state = "loaded" if self._encoder.loaded else "not loaded yet"
        return f"<{self._attr} of the index's query encoder, {state}>"


def check_search_options(mode: str, *, fusion: str | None = None, alpha: float | None = None,
                         weights: Mapping[str, float] | None = None, precision: str | None = None,
                         passage_agg: str | None = None) -> tuple[str, ...]:
    """The legs of ``mode``; an InvalidInputError for any option a search would refuse after
    loading the model (an unknown mode or fusion, alpha outside [0, 1], weights that do not name
    the mode's legs, an unknown precision or passage aggregation)."""
    from alignir.index.passages import parse_aggregation

    legs = parse_mode(mode)
    resolve_plan(mode, legs, fusion=fusion, alpha=alpha, weights=weights, known=parse_mode_legs())
    if precision is not None:
        from alignir.encoders.quantize import check_precision  # imports torch: only when asked

        check_precision(precision)
    if passage_agg is not None:
        parse_aggregation(passage_agg)
    return legs


def dense_on_gpu(device: str) -> bool:
    """Whether the dense (FAISS) leg searches on the GPU for a ``device`` option: yes for
    "cuda" / "cuda:N", no for "cpu", and for "auto" when faiss sees a GPU (faiss-gpu, the
    ``[gpu]`` extra). Untested on the CPU-only machines alignir is developed on."""
    if device == "auto":
        import faiss

        return faiss.get_num_gpus() > 0
    return str(device).startswith("cuda")


def _check_queries(queries: Sequence[str]) -> list[str]:
    """``check_texts`` plus what a query needs besides: something to search for, valid text."""
    texts = check_texts(queries, "queries")
    for i, q in enumerate(texts):
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
