"""Pyserini (Lucene impact search) reproduces the exported ranking exactly.

Sparse vectors are built from the real ADI collection (bag of words + word bigrams, whose
term strings hold a space and so exercise the term escaping): documents weighted
1 + ln(tf) (float, quantised by the export at scale 100), queries binary. The exported
JsonVectorCollection, query jsonl and topics tsv go through Pyserini's own CLI
(``pyserini.index.lucene --impact --pretokenized``, ``pyserini.search.lucene --impact
--encoder FILE --min-idf -1``); its run must equal a brute-force scipy ranking of the same
integers (scores equal, top-10 equal up to ties, nDCG@10 equal) and alignir's SparseIndex.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.quality.pyserini_support import _impact_index_job, impact_search, pyserini_missing, run_pyserini_jobs  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.metrics import evaluate  # noqa: E402
from alignir.retrieval.runs import quantize, read_trec, write_json_vector_collection, write_pyserini_queries  # noqa: E402
from conftest import ADI  # noqa: E402

K = 10

pytestmark = [
    pytest.mark.skipif(pyserini_missing() is not None, reason=str(pyserini_missing())),
    pytest.mark.skipif(not ADI.is_dir(), reason="shared ADI collection not present"),
    pytest.mark.slow,  # ~70 s on the shared 2 cores: one JVM start + the pyserini/torch import
    pytest.mark.e2e,  # pyserini runs in a child Python process
]


def _features(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def _vectors(texts: list[str], vocab: dict[str, int], binary: bool) -> sp.csr_matrix:
    rows, cols, vals = [], [], []
    for i, t in enumerate(texts):
        counts: dict[int, int] = {}
        for f in _features(t):
            if f in vocab:
                counts[vocab[f]] = counts.get(vocab[f], 0) + 1
        for j, c in counts.items():
            rows.append(i)
            cols.append(j)
            vals.append(1.0 if binary else 1.0 + math.log(c))
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)), dtype=np.float32)


def _top(scores: np.ndarray, ids: list[str], k: int) -> list[tuple[str, float]]:
    order = sorted((i for i in range(len(ids)) if scores[i] > 0), key=lambda i: (-scores[i], ids[i]))
    return [(ids[i], float(scores[i])) for i in order[:k]]


def _assert_same_up_to_ties(got: list[tuple[str, float]], full: np.ndarray, ids: list[str], qid: str):
    exp = _top(full, ids, K)
    assert [s for _, s in got] == [s for _, s in exp], f"query {qid}: score lists differ"
    index = {d: i for i, d in enumerate(ids)}
    for d, s in got:  # every returned doc carries its brute-force score
        assert full[index[d]] == s, f"query {qid}: doc {d} scored {s}, brute force {full[index[d]]}"
    if exp:
        cut = exp[-1][1]
        must = {d for d, s in exp if s > cut}  # strictly above the last score: no tie ambiguity
        assert must <= {d for d, _ in got}, f"query {qid}: missing {must - {d for d, _ in got}}"


def test_pyserini_impact_search_equals_brute_force(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = load_beir(ADI)
    doc_ids, doc_texts = ds.corpus.ids(), ds.corpus.texts()
    qids = list(ds.queries)
    vocab: dict[str, int] = {}
    for t in doc_texts:
        for f in _features(t):
            vocab.setdefault(f, len(vocab))
    terms = list(vocab)
    D = _vectors(doc_texts, vocab, binary=False)
    Q = _vectors([ds.queries[q] for q in qids], vocab, binary=True)

    # contents left empty ("") here; the benchmark exports real contents
    info = write_json_vector_collection(tmp_path / "coll", doc_ids, D, terms, scale=100)
    write_pyserini_queries(tmp_path / "queries.jsonl", tmp_path / "topics.tsv", qids,
                           [ds.queries[q] for q in qids], Q, terms, scale=1)
    assert info["docs"] == 82 and info["dropped_nonpositive"] == 0
    exported = [json.loads(ln) for ln in open(info["files"][0], encoding="utf-8")]
    assert any("<U+0020>" in t for rec in exported for t in rec["vector"])  # bigrams, escaped
    assert all(isinstance(w, int) and w > 0 for rec in exported for w in rec["vector"].values())

    # Pyserini's own CLI on the exported files, one child process (index, then search).
    index_dir, run_path = tmp_path / "lucene", tmp_path / "pyserini.trec"
    run_pyserini_jobs([
        _impact_index_job(tmp_path / "coll", index_dir, 1),
        ("pyserini.search.lucene", ["--index", index_dir, "--topics", tmp_path / "topics.tsv",
                                    "--encoder", tmp_path / "queries.jsonl", "--impact", "--min-idf", "-1",
                                    "--hits", K, "--output", run_path]),
    ])
    pys = read_trec(run_path)

    Dq, Qq = quantize(D, 100), quantize(Q, 1)
    full = (Qq.astype(np.int64) @ Dq.astype(np.int64).T).toarray()
    answered = [q for q in qids if Qq[qids.index(q)].nnz]
    assert set(pys) == {q for q in answered if full[qids.index(q)].max() > 0}
    for qi, q in enumerate(qids):
        got = sorted(pys.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        _assert_same_up_to_ties(got, full[qi], doc_ids, q)

    brute = {q: dict(_top(full[qi], doc_ids, K)) for qi, q in enumerate(qids)}
    m_pys, m_brute = evaluate(ds.qrels, pys), evaluate(ds.qrels, brute)
    assert m_pys["ndcg@10"] == pytest.approx(m_brute["ndcg@10"], abs=1e-12)
    assert m_brute["ndcg@10"] > 0.2  # real text features retrieve something

    # alignir's own sparse index on the same integers returns the same scores
    try:
        from alignir.index.sparse import SparseIndex
    except ImportError:
        SparseIndex = None
    if SparseIndex is not None:
        docs, scores = SparseIndex.from_csr(Dq.astype(np.float32)).search(Qq.astype(np.float32), K)
        for qi, q in enumerate(qids):
            mine = [(doc_ids[d], float(s)) for d, s in zip(docs[qi], scores[qi]) if d >= 0 and s > 0]
            _assert_same_up_to_ties(mine, full[qi], doc_ids, q)

    # impact_search(): the helper benchmarks use (opaque query aliases, dict query vectors)
    qvecs = {}
    by_text = {json.loads(ln)["contents"]: json.loads(ln)["vector"]
               for ln in open(tmp_path / "queries.jsonl", encoding="utf-8")}
    for q in qids[:5]:
        qvecs["0" + q] = by_text[" ".join(ds.queries[q].split())]  # leading zero must survive
    qvecs["empty"] = {}
    res = impact_search(index_dir, qvecs, k=K)
    assert res["empty"] == []
    for q in qids[:5]:
        _assert_same_up_to_ties(res["0" + q], full[qids.index(q)], doc_ids, q)
