"""Search legs: one small interface for every way the searcher can rank documents.

A leg turns a batch of query texts into its own query representation (or reads them from the
one query-encoder pass the model legs share), searches its index part for the top-k documents
(only among ``allowed`` doc numbers when given) and, when it can, explains a hit term by term.
:class:`retrieval.searcher.Searcher` holds a dict of legs by name and fuses any set of them;
it knows no leg by name (apart from the "hybrid" alias and the default fusion weights).

Built-in legs (“A Text is Worth Several Tokens”):

* ``dense`` — the encoder's vector h searched in FAISS (§5);
* ``sparse`` — the query's surface tokens ∪ its top-M aligned tokens (eq.16) scored against the
  documents' top-K aligned tokens (eq.15) by the exact inverted index;
* ``bm25`` — BM25 word-term weights (the index's lexical part) scored by the same kernel; no
  model pass.

A new leg is added without editing the searcher: :func:`register_leg` a factory
``(stored index, sparsifier) -> Leg | None`` (None: this index cannot serve the leg), or pass
``legs=`` to the :class:`Searcher` constructor.

Passages: a leg whose class sets ``over_rows = True`` (dense, sparse) scores the index's
encoder rows; when the index splits documents into passages (its ``passages`` part),
:func:`legs_for` wraps it in a :class:`retrieval.passage_leg.PassageLeg`, which returns
documents (passage scores aggregated, MaxP by default). The BM25 leg scores whole documents.

Backends: the searcher runs the same way over any dict of legs. A backend other than the
folder supplies its own legs for the ones it serves (retrieval/milvus_legs.py: the dense,
sparse and bm25 legs searched in Milvus, encoding and explaining as the folder's) and refuses
the others before any query (errors.LegNotServedError).
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np
import scipy.sparse as sp

from alignir.encoders.terms import TermContribution, explain as explain_terms, token_text
from alignir.encoders.text_form import WordForm
from alignir.errors import InvalidInputError

__all__ = ["LEGS", "Leg", "QueryContext", "DenseLeg", "SparseLeg", "BM25Leg", "register_leg", "unregister_leg",
           "leg_factories", "legs_for"]


#: the built-in legs, in the order a mode lists them (registered in this order, at the end)
LEGS = ("dense", "sparse", "bm25")


class QueryContext:
    """The texts of one query batch and the query-encoder pass that the model legs share,
    run at most once (lazily, under the searcher's encode lock: tokenizers and torch modules
    are not re-entrant). ``word_form``: how the encoder reads a word of a query's run of
    capitals (the index's encoders.word_forms.WordForms.form; None: the fold alone)."""

    def __init__(self, texts: Sequence[str], embedder: Any, lock: threading.Lock | None = None,
                 word_form: WordForm | None = None) -> None:
        self.texts = list(texts)
        self._embedder = embedder
        self._lock = lock or threading.Lock()
        self._word_form = word_form
        self._pass: tuple[np.ndarray, list[np.ndarray]] | None = None

    def model_pass(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """(dense vectors h [n, d], surface token ids per query) from one encoder pass."""
        if self._pass is None:
            kw = {} if self._word_form is None else {"word_form": self._word_form}
            with self._lock:
                H = self._embedder.encode_queries(self.texts, **kw)
                surface = self._embedder.surface_token_ids(self.texts, **kw)
            self._pass = (H, surface)
        return self._pass


@runtime_checkable
class Leg(Protocol):
    """One way of ranking documents (see the module docstring).

    ``name``: its key in ``Searcher.legs``, in mode strings ("dense+name") and in
    ``Hit.leg_scores``; ``needs_model``: whether :meth:`encode` runs the query encoder
    (a batch can then not be encoded later from the texts alone); ``explains``: whether
    :meth:`explain` returns term contributions."""

    name: str
    needs_model: bool
    explains: bool

    def encode(self, ctx: QueryContext) -> Any:
        """This leg's representation of ``ctx.texts``; row i = query i (``.shape[0]`` rows)."""
        ...

    def search(self, encoded: Any, k: int, allowed: np.ndarray | None = None,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (doc numbers int64 [n, k], scores [n, k]: float32 for the folder's legs)
        per query, padded with -1 / -inf; only doc numbers in the sorted ``allowed`` array when
        given."""
        ...

    def explain(self, query_row: Any, doc_number: int) -> list[TermContribution]:
        """The terms one query (row ``query_row`` of :meth:`encode`'s output) shares with a
        document, with their contributions (summing to the leg's score)."""
        ...


class DenseLeg:
    """The FAISS part searched with the query's dense vector h."""

    name = "dense"
    needs_model = True
    explains = False
    over_rows = True

    def __init__(self, index: Any) -> None:
        self.index = index

    def encode(self, ctx: QueryContext) -> np.ndarray:
        return ctx.model_pass()[0]

    def search(self, encoded: np.ndarray, k: int, allowed: np.ndarray | None = None,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(encoded, k, allowed=allowed)

    def explain(self, query_row: Any, doc_number: int) -> list[TermContribution]:
        raise InvalidInputError("the dense leg cannot explain a hit term by term")


class SparseLeg:
    """The aligned-token postings searched with the eq.16 query vector (surface ∪ top-M)."""

    name = "sparse"
    needs_model = True
    explains = True
    over_rows = True

    def __init__(self, index: Any, sparsifier: Any) -> None:
        self.index = index
        self.sparsifier = sparsifier

    def encode(self, ctx: QueryContext) -> sp.csr_matrix:
        H, surface = ctx.model_pass()
        return self.sparsifier.queries(H, surface)

    def search(self, encoded: sp.csr_matrix, k: int, allowed: np.ndarray | None = None,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(encoded, k, allowed=allowed, threads=threads)

    def explain(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        terms, weights = self.index.doc_vector(int(doc_number))
        doc_row = sp.csr_matrix((weights, terms, [0, len(terms)]), shape=(1, self.index.n_terms))
        found = explain_terms(query_row, doc_row, self.sparsifier.term_map)
        tokenizer = getattr(self.sparsifier, "tokenizer", None)
        if tokenizer is None:
            return found
        first = self._first_tokens()
        return [replace(c, token=int(first[c.term]), text=token_text(tokenizer, int(first[c.term])))
                if first[c.term] >= 0 else c for c in found]

    def _first_tokens(self) -> np.ndarray:
        """Term id -> the first token id mapped to it (-1: none), computed once."""
        first = getattr(self, "_first", None)
        if first is None:
            t2t = np.asarray(self.sparsifier.term_map.token_to_term)
            terms, idx = np.unique(t2t, return_index=True)
            first = np.full(self.sparsifier.term_map.n_terms, -1, dtype=np.int64)
            first[terms] = idx
            self._first = first
        return first


class BM25Leg:
    """The lexical part (BM25 word-term weights) searched with the query's term counts."""

    name = "bm25"
    needs_model = False
    explains = True

    def __init__(self, lexical: Any) -> None:
        self.lexical = lexical
        self._vectorizer: Any = None

    @property
    def vectorizer(self) -> Any:
        """The query analyser (retrieval/bm25.py), built on first use (it loads nltk)."""
        if self._vectorizer is None:
            from alignir.retrieval.bm25 import QueryVectorizer

            self._vectorizer = QueryVectorizer(self.lexical.vocab, self.lexical.params)
        return self._vectorizer

    def encode(self, ctx: QueryContext) -> sp.csr_matrix:
        return self.vectorizer(ctx.texts)

    def search(self, encoded: sp.csr_matrix, k: int, allowed: np.ndarray | None = None,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.lexical.index.search(encoded, k, allowed=allowed, threads=threads)

    def explain(self, query_row: sp.csr_matrix, doc_number: int) -> list[TermContribution]:
        """Shared words, each with count · BM25 weight (their sum is the bm25 score)."""
        terms, weights = self.lexical.index.doc_vector(int(doc_number))
        doc_row = sp.csr_matrix((weights, terms, [0, len(terms)]), shape=(1, self.lexical.n_terms))
        return [replace(c, string=self.lexical.vocab[c.term]) for c in explain_terms(query_row, doc_row)]


#: name -> factory(stored index, sparsifier) -> Leg, or None when the index cannot serve it
LegFactory = Callable[[Any, Any], "Leg | None"]
_FACTORIES: dict[str, LegFactory] = {}


def register_leg(name: str, factory: LegFactory, replace: bool = False) -> None:
    """Make :meth:`Searcher.open` build the leg ``name`` with ``factory(stored, sparsifier)``
    for every index (the factory returns None for an index that lacks what the leg needs).
    Legs are kept in registration order, which is also the order of a mode's legs."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum() or name == "hybrid":
        raise InvalidInputError(f"invalid leg name {name!r}: use letters, digits, '_' and '-' (not 'hybrid')")
    if name in _FACTORIES and not replace:
        raise InvalidInputError(f"a leg named {name!r} is already registered")
    _FACTORIES[name] = factory


def unregister_leg(name: str) -> None:
    """Remove a registered leg (tests, plugins)."""
    _FACTORIES.pop(name, None)


def leg_factories() -> dict[str, LegFactory]:
    """The registered leg factories by name, in order (a copy)."""
    return dict(_FACTORIES)


def legs_for(stored: Any, sparsifier: Any, aggregate: str = "maxp") -> dict[str, Leg]:
    """Every registered leg this index can serve, by name, in registration order; legs over
    encoder rows become document legs (``aggregate``: MaxP, FirstP or sumN) when the index has
    passages."""
    pmap = getattr(stored, "passages", None)
    out: dict[str, Leg] = {}
    for name, factory in _FACTORIES.items():
        leg = factory(stored, sparsifier)
        if leg is not None:
            if leg.name != name:
                raise InvalidInputError(f"the leg factory registered as {name!r} built a leg named {leg.name!r}")
            if pmap is not None and getattr(leg, "over_rows", False):
                from alignir.retrieval.passage_leg import PassageLeg

                leg = PassageLeg(leg, pmap, aggregate)
            out[name] = leg
    return out


register_leg("dense", lambda stored, sparsifier: DenseLeg(stored.dense) if stored.dense is not None else None)
register_leg("sparse", lambda stored, sparsifier: (SparseLeg(stored.sparse, sparsifier)
                                                   if stored.sparse is not None else None))
register_leg("bm25", lambda stored, sparsifier: BM25Leg(stored.lexical) if stored.lexical is not None else None)
