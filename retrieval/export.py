"""Export an index for Pyserini/Anserini impact search (JsonVectorCollection + query jsonl).

The document vectors are read back from the stored sparse index (exactly the weights alignir
scores with), quantised as ``round(w · scale)`` by :func:`retrieval.runs.quantize`; the query
vectors come from the index's own query encoder (surface ∪ top-M aligned terms, eq.16).

An index with passages (``build-index --passages``) is exported one passage per line, with
the id ``docid#N`` (N = the passage's number in the document, from 0) that Pyserini's MaxP
runs use: search the Lucene index for passages and keep each document's best one
(``pyserini.search.lucene --max-passage --max-passage-hits K``; delimiter ``#``, or, when a doc
id holds ``#``, the first of :data:`PASSAGE_DELIMITERS` that none holds: the summary's
``passage_delimiter``, to pass as ``--max-passage-delimiter``). Deleted documents are left out.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.errors import InvalidInputError
from alignir.index.reader import open_index
from alignir.retrieval.runs import DEFAULT_SCALE, write_json_vector_collection, write_pyserini_queries

log = logging.getLogger(__name__)


def stored_doc_matrix(sparse_index: Any) -> sp.csr_matrix:
    """The live documents' sparse vectors as csr [n_docs, n_terms] (deleted rows empty)."""
    n, n_terms = sparse_index.n_docs, sparse_index.n_terms
    live = set(np.asarray(sparse_index.live_doc_numbers()).tolist())
    indptr, indices, data = [0], [], []
    for d in range(n):
        if d in live:
            terms, weights = sparse_index.doc_vector(d)
            indices.append(np.asarray(terms, dtype=np.int64))
            data.append(np.asarray(weights, dtype=np.float32))
            indptr.append(indptr[-1] + len(terms))
        else:
            indptr.append(indptr[-1])
    def cat(xs, dt):
        return (np.concatenate(xs) if xs else np.zeros(0, dt))
    return sp.csr_matrix((cat(data, np.float32), cat(indices, np.int64), np.array(indptr)),
                         shape=(n, n_terms))


def export_documents(index_dir: str | Path, out_dir: str | Path, scale: float = DEFAULT_SCALE,
                     contents: Mapping[str, str] | None = None) -> dict:
    """Write ``out_dir/docs-*.jsonl`` for ``pyserini.index.lucene --collection
    JsonVectorCollection --impact --pretokenized``; returns the export summary. Deleted
    documents (``alignir delete``) are left out. ``contents`` (doc id -> text) fills the
    ``contents`` field: a corpus with none of the ids is an error, one lacking some is reported
    (``missing_contents``, a warning) and those stay empty."""
    stored = open_index(index_dir, parts=("sparse",))
    term_strings = [str(s) for s in stored.extra["term_strings"]]
    live = np.asarray(stored.sparse.live_doc_numbers(), dtype=np.int64)  # rows (passages) not deleted
    matrix = stored_doc_matrix(stored.sparse)[live]
    pmap = stored.passages
    live_docs = live if pmap is None else np.unique(pmap.doc[live])
    texts, report = None, {}
    if contents is not None:
        report = {"missing_contents": missing_contents(stored.doc_ids, live_docs, contents, "contents")}
        texts = [contents.get(d) or "" for d in stored.doc_ids]
    if pmap is None:
        summary = write_json_vector_collection(out_dir, [stored.doc_ids[r] for r in live], matrix, term_strings,
                                               contents=None if texts is None else [texts[r] for r in live],
                                               scale=scale)
        return {**summary, **report}
    delimiter = passage_delimiter(stored.doc_ids)
    ids = [f"{stored.doc_ids[int(pmap.doc[r])]}{delimiter}{int(pmap.ordinal[r])}" for r in live]
    if texts is not None:
        texts = [_passage_text(texts[int(pmap.doc[r])], pmap.span(int(r))) for r in live]
    summary = write_json_vector_collection(out_dir, ids, matrix, term_strings, contents=texts, scale=scale)
    return {**summary, "passages": summary["docs"], "docs": len(live_docs), "passage_delimiter": delimiter,
            **report}


def missing_contents(doc_ids: Sequence[str], docs: np.ndarray, contents: Mapping[str, Any], what: str) -> int:
    """How many of the documents ``docs`` (doc numbers into ``doc_ids``) the corpus ``contents``
    lacks: their ``what`` is exported empty, with a warning; a corpus lacking all of them is not
    the one the index was built from (InvalidInputError)."""
    lacking = [doc_ids[d] for d in np.asarray(docs).tolist() if doc_ids[d] not in contents]
    if lacking and len(lacking) == len(docs):
        raise InvalidInputError(f"the corpus given for the {what} holds none of the index's {len(lacking)} doc ids "
                                f"(e.g. {lacking[0]!r}): is it the corpus the index was built from?")
    if lacking:
        log.warning("the corpus given for the %s lacks %d of the index's %d documents (e.g. %r): exported empty",
                    what, len(lacking), len(docs), lacking[0])
    return len(lacking)


#: the passage id delimiters tried, in order ("#": Pyserini's --max-passage-delimiter default)
PASSAGE_DELIMITERS = ("#", "|", "~", "^", "@", "%", "+")


def passage_delimiter(doc_ids: Sequence[str]) -> str:
    """The first of :data:`PASSAGE_DELIMITERS` in no doc id: Pyserini's MaxP keeps
    ``passage_id.split(delimiter)[0]``, so a delimiter inside a doc id would cut it."""
    for delimiter in PASSAGE_DELIMITERS:
        if not any(delimiter in d for d in doc_ids):
            return delimiter
    raise InvalidInputError(f"every passage delimiter {PASSAGE_DELIMITERS} occurs in some doc id: "
                            "Pyserini's --max-passage could not tell passages of a document apart")


def _passage_text(text: str, span: tuple[int, int] | None) -> str:
    """A passage's text: its span of the document's text (the whole text when no span is kept)."""
    return text if span is None else text[span[0]:span[1]]


def export_queries(searcher: Any, queries: Mapping[str, str], out_dir: str | Path,
                   scale: float | None = None) -> dict:
    """Write ``out_dir/queries.jsonl`` (for ``--impact --encoder``) and ``out_dir/topics.tsv``.
    ``scale`` defaults to 1 for binary query weights (eq.16) and to the document scale else."""
    qids = list(queries)
    texts = [queries[q] for q in qids]
    Q = searcher.encode(texts).legs["sparse"]
    if scale is None:
        scale = 1.0 if searcher.sparsifier.config.query_weighting == "binary" else DEFAULT_SCALE
    out = Path(out_dir)
    return write_pyserini_queries(out / "queries.jsonl", out / "topics.tsv", qids, texts, Q,
                                  list(searcher.sparsifier.term_map.term_strings), scale=scale)
