"""TREC runs and Pyserini impact-index exports, as pure functions over plain data.

TREC run line: ``qid Q0 docid rank score tag`` (trec_eval re-sorts by score, so ``rank`` is
informative only). Scores are written with ``repr(float)``, which round-trips exactly.

Pyserini/Anserini impact search: documents go in a JsonVectorCollection,
``{"id", "contents", "vector": {term: int}}``; Anserini stores each weight as a Lucene term
frequency, so weights must be positive integers. Export weight = ``round(w * scale)``
(``DEFAULT_SCALE = 100``: two decimals of the float weight survive); weights that round
to <= 0 cannot be represented and are dropped (:func:`quantize` does exactly what the
export does, so a brute-force check can use the same integers). Impact scoring is then
``score(q, d) = Σ_t q_t · d_t`` over shared terms (“A Text is Worth Several Tokens” eq.16 with integer weights).
Terms must hold no whitespace: :func:`pyserini_terms` maps term strings to safe, unique
tokens. Queries for ``pyserini.search.lucene --impact --encoder FILE`` are
``{"contents": text, "vector": {...}}`` lines, looked up by their text, with a topics tsv
``qid<TAB>text`` beside them.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError
from alignir.io import atomic_write

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DEFAULT_SCALE",
    "pyserini_terms",
    "quantize",
    "read_trec",
    "run_from_topk",
    "write_json_vector_collection",
    "write_pyserini_queries",
    "write_trec",
]

DEFAULT_SCALE = 100.0
Run = Mapping[str, Mapping[str, float]]


def _no_ws(kind: str, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise InvalidInputError(f"{kind} {value!r} is empty or contains whitespace; TREC runs cannot hold it")


def write_trec(
    run: Run, path: str | Path, tag: str = "alignir", top: int | None = None
) -> int:
    """Write ``{qid: {docid: score}}`` as a TREC run (best first, ties by doc id
    ascending); returns the number of lines. Written atomically (temp file + rename)."""
    _no_ws("tag", tag)
    path = Path(path)
    n = 0
    with atomic_write(path, "w") as fh:
        for qid, hits in run.items():
            _no_ws("query id", str(qid))
            items = sorted(((str(d), float(s)) for d, s in hits.items()), key=lambda kv: (-kv[1], kv[0]))
            for rank, (did, score) in enumerate(items[:top] if top else items, start=1):
                _no_ws("doc id", did)
                if not math.isfinite(score):
                    raise InvalidInputError(f"query {qid!r}, doc {did!r}: non-finite score {score}")
                fh.write(f"{qid} Q0 {did} {rank} {score!r} {tag}\n")
                n += 1
    return n


def read_trec(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run -> ``{qid: {docid: score}}``; every malformed line is reported."""
    run: dict[str, dict[str, float]] = {}
    problems = []
    with open(path, "rb") as fh:
        for ln, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                problems.append(f"line {ln}: invalid UTF-8")
                continue
            cols = (text.removeprefix("\ufeff") if ln == 1 else text).split()  # a BOM is not part of the qid
            if not cols:
                continue
            if len(cols) != 6:
                problems.append(f"line {ln}: expected 6 columns (qid Q0 docid rank score tag), got {len(cols)}")
                continue
            qid, _, did, rank, score, _tag = cols
            try:
                int(rank)
                s = float(score)
            except ValueError:
                problems.append(f"line {ln}: rank {rank!r} / score {score!r} not numeric")
                continue
            if not math.isfinite(s):
                problems.append(f"line {ln}: non-finite score {score!r}")
                continue
            hits = run.setdefault(qid, {})
            if did in hits:
                problems.append(f"line {ln}: doc {did!r} listed twice for query {qid!r}")
                continue
            hits[did] = s
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise InvalidInputError(f"{path}: {len(problems)} malformed line(s):\n  " + "\n  ".join(problems[:20]) + more)
    return run


def run_from_topk(
    query_ids: Sequence[str], doc_ids: Sequence[str], docs: np.ndarray, scores: np.ndarray
) -> dict[str, dict[str, float]]:
    """Searcher output -> run. ``docs`` int [nq, k] row numbers into ``doc_ids`` (-1 = padding),
    ``scores`` [nq, k]; padded / -inf entries are dropped."""
    docs = np.asarray(docs)
    scores = np.asarray(scores)
    if docs.shape != scores.shape or docs.ndim != 2 or docs.shape[0] != len(query_ids):
        raise InvalidInputError(f"docs {docs.shape} and scores {scores.shape} must both be [{len(query_ids)}, k]")
    run = {}
    for qid, drow, srow in zip(query_ids, docs, scores):
        keep = (drow >= 0) & np.isfinite(srow)
        run[str(qid)] = {doc_ids[int(d)]: float(s) for d, s in zip(drow[keep], srow[keep])}
    return run


# --------------------------------------------------------------------------- Pyserini export

_WS = re.compile(r"\s")


def pyserini_terms(term_strings: Sequence[str]) -> list[str]:
    """Map term strings to whitespace-free, non-empty, unique Lucene tokens.

    Whitespace/control characters become ``<U+XXXX>``; an empty term becomes ``<empty>``;
    a term whose safe form collides with an earlier one gets ``#<term index>`` appended.
    Deterministic, so document and query exports agree."""
    out, seen = [], set()
    for i, t in enumerate(term_strings):
        s = "".join(f"<U+{ord(c):04X}>" if (c.isspace() or not c.isprintable()) else c for c in str(t))
        s = s or "<empty>"
        if s in seen:
            s = f"{s}#{i}"
        while s in seen:  # pathological: a literal "x#i" term existed already
            s = f"{s}#"
        seen.add(s)
        out.append(s)
    return out


def quantize(csr: sp.spmatrix, scale: float = DEFAULT_SCALE) -> sp.csr_matrix:
    """``round(w * scale)`` as int32 CSR, entries <= 0 removed (what the export writes)."""
    if not (scale > 0 and math.isfinite(scale)):
        raise InvalidInputError(f"scale must be a positive finite number, got {scale}")
    m = sp.csr_matrix(csr, copy=True)
    if m.nnz and not np.all(np.isfinite(m.data)):
        raise InvalidInputError("sparse weights contain NaN or inf")
    q = np.rint(m.data.astype(np.float64) * scale)
    if q.size and q.max() > np.iinfo(np.int32).max:
        raise InvalidInputError(f"weight {q.max():.0f} overflows a Java int; use a smaller scale")
    m.data = q.astype(np.int32)
    m.eliminate_zeros()
    m.data[m.data < 0] = 0
    m.eliminate_zeros()
    m.sort_indices()
    return m


def _vectors(csr: sp.csr_matrix, terms: Sequence[str]) -> Iterable[dict[str, int]]:
    for i in range(csr.shape[0]):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        yield {terms[j]: int(w) for j, w in zip(csr.indices[lo:hi], csr.data[lo:hi])}


def _check_shapes(n_rows: int, ids: Sequence[str], csr: sp.spmatrix, terms: Sequence[str], what: str):
    if csr.shape[0] != len(ids):
        raise InvalidInputError(f"{len(ids)} {what} ids but the matrix has {csr.shape[0]} rows")
    if csr.shape[1] != len(terms):
        raise InvalidInputError(f"{len(terms)} term strings but the matrix has {csr.shape[1]} columns")


def write_json_vector_collection(
    out_dir: str | Path,
    doc_ids: Sequence[str],
    csr: sp.spmatrix,
    term_strings: Sequence[str],
    contents: Sequence[str] | None = None,
    scale: float = DEFAULT_SCALE,
    shard_size: int = 1_000_000,
) -> dict:
    """Write ``out_dir/docs-NNNNN.jsonl`` for ``pyserini.index.lucene --collection
    JsonVectorCollection --impact --pretokenized``. Returns a summary (docs, postings,
    dropped non-positive weights, scale, files). ``contents`` defaults to ``""``. The shards of
    an earlier export in ``out_dir`` are replaced; an interrupted export leaves them as they were."""
    _check_shapes(csr.shape[0], doc_ids, csr, term_strings, "doc")
    if contents is not None and len(contents) != len(doc_ids):
        raise InvalidInputError(f"{len(contents)} contents for {len(doc_ids)} docs")
    for d in doc_ids:
        _no_ws("doc id", str(d))
    if len(set(doc_ids)) != len(doc_ids):
        raise InvalidInputError("doc ids are not unique")
    src = sp.csr_matrix(csr)
    q = quantize(src, scale)
    terms = pyserini_terms(term_strings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the shards are written beside OUT and moved in when all are complete: an interrupted export
    # leaves OUT as it was, and no shard of an earlier, larger export stays behind to be indexed
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        names: list[str] = []
        fh = None
        try:
            for i, vec in enumerate(_vectors(q, terms)):
                if i % shard_size == 0:
                    if fh:
                        fh.close()
                    names.append(f"docs-{i // shard_size:05d}.jsonl")
                    fh = open(tmp / names[-1], "w", encoding="utf-8")
                rec = {"id": str(doc_ids[i]), "contents": contents[i] if contents is not None else "", "vector": vec}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        finally:
            if fh:
                fh.close()
        for old in out.glob("docs-*.jsonl"):
            old.unlink()
        for name in names:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = [out / name for name in names]
    return {
        "docs": len(doc_ids),
        "postings": int(q.nnz),
        "dropped_nonpositive": int(src.nnz - q.nnz),
        "empty_docs": int(np.sum(np.diff(q.indptr) == 0)),
        "scale": scale,
        "files": [str(f) for f in files],
    }


def _clean_text(t: str) -> str:
    return " ".join(str(t).split())


def write_pyserini_queries(
    jsonl_path: str | Path,
    topics_path: str | Path,
    query_ids: Sequence[str],
    texts: Sequence[str],
    csr: sp.spmatrix,
    term_strings: Sequence[str],
    scale: float = DEFAULT_SCALE,
) -> dict:
    """Write the query vectors for ``pyserini.search.lucene --impact --encoder JSONL
    --topics TSV``. Pyserini's cached encoder looks vectors up by query text, so texts are
    whitespace-normalised identically in both files and two queries with the same text
    must have the same vector. Note: Pyserini turns all-digit query ids into ints
    ("007" -> "7"). Use ``scale=1`` for binary query weights."""
    _check_shapes(csr.shape[0], query_ids, csr, term_strings, "query")
    if len(texts) != len(query_ids):
        raise InvalidInputError(f"{len(texts)} texts for {len(query_ids)} queries")
    q = quantize(csr, scale)
    terms = pyserini_terms(term_strings)
    by_text: dict[str, dict[str, int]] = {}
    lines_t = []
    for qid, text, vec in zip(query_ids, texts, _vectors(q, terms)):
        _no_ws("query id", str(qid))
        t = _clean_text(text)
        if not t:
            raise InvalidInputError(f"query {qid!r} has empty text; Pyserini looks vectors up by text")
        if t in by_text and by_text[t] != vec:
            raise InvalidInputError(f"two queries share the text {t!r} but have different vectors")
        by_text[t] = vec
        lines_t.append(f"{qid}\t{t}\n")
    Path(jsonl_path).parent.mkdir(parents=True, exist_ok=True)
    Path(topics_path).parent.mkdir(parents=True, exist_ok=True)
    with open(jsonl_path, "w", encoding="utf-8") as fh:
        for t, vec in by_text.items():
            fh.write(json.dumps({"contents": t, "vector": vec}, ensure_ascii=False) + "\n")
    with open(topics_path, "w", encoding="utf-8") as fh:
        fh.writelines(lines_t)
    return {"queries": len(query_ids), "postings": int(q.nnz), "dropped_nonpositive": int(sp.csr_matrix(csr).nnz - q.nnz), "scale": scale}
