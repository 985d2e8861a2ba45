"""TREC run round trips and the Pyserini JsonVectorCollection / query exports."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from alignir.retrieval.runs import (
    pyserini_terms,
    quantize,
    read_trec,
    run_from_topk,
    write_json_vector_collection,
    write_pyserini_queries,
    write_trec,
)


def test_trec_round_trip_exact(tmp_path):
    rng = np.random.default_rng(0)
    run = {f"q{i}": {f"d{j}": float(np.float32(rng.normal())) for j in rng.choice(50, 12, replace=False)}
           for i in range(5)}
    run["q0"]["tie_b"] = run["q0"]["tie_a"] = 7.25
    n = write_trec(run, tmp_path / "r.trec", tag="t1")
    assert n == sum(len(h) for h in run.values())
    assert read_trec(tmp_path / "r.trec") == run
    lines = (tmp_path / "r.trec").read_text().splitlines()
    first = lines[0].split()
    assert first[:4] == ["q0", "Q0", "tie_a", "1"] and first[5] == "t1"  # best first, tie by doc id
    assert lines[1].split()[2:4] == ["tie_b", "2"]
    ranks = [int(ln.split()[3]) for ln in lines if ln.startswith("q1 ")]
    assert ranks == list(range(1, 13))
    write_trec(run, tmp_path / "top.trec", top=3)
    assert all(len(h) == 3 for h in read_trec(tmp_path / "top.trec").values())


def test_trec_write_and_read_errors(tmp_path):
    with pytest.raises(ValueError, match="whitespace"):
        write_trec({"q 1": {"d": 1.0}}, tmp_path / "x")
    with pytest.raises(ValueError, match="non-finite"):
        write_trec({"q": {"d": float("inf")}}, tmp_path / "x")
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 1 t\nq1 Q0 d3 x 0.4 t\nq1 Q0 d1 4 0.3 t\n")
    with pytest.raises(ValueError) as ei:
        read_trec(bad)
    msg = str(ei.value)
    assert "3 malformed line(s)" in msg and "line 2:" in msg and "line 3:" in msg and "line 4:" in msg


def test_run_from_topk_drops_padding():
    docs = np.array([[2, 0, -1], [1, -1, -1]])
    scores = np.array([[3.0, 1.0, -np.inf], [0.5, -np.inf, -np.inf]], dtype=np.float32)
    assert run_from_topk(["a", "b"], ["x", "y", "z"], docs, scores) == {"a": {"z": 3.0, "x": 1.0}, "b": {"y": 0.5}}
    with pytest.raises(ValueError, match="must both be"):
        run_from_topk(["a"], ["x"], docs, scores)


def test_pyserini_terms_safe_unique_deterministic():
    terms = ["Ġthe", "a b", "a\tb", "", "x\n", "ok", "a<U+0020>b"]
    safe = pyserini_terms(terms)
    assert safe == pyserini_terms(terms)
    assert len(set(safe)) == len(safe)
    assert all(s and not any(c.isspace() for c in s) for s in safe)
    assert safe[0] == "Ġthe" and safe[1] == "a<U+0020>b" and safe[2] == "a<U+0009>b" and safe[3] == "<empty>"
    assert safe[6] == "a<U+0020>b#6"  # collision with the escaped form of "a b"


def test_quantize_rounds_and_drops_nonpositive():
    m = sp.csr_matrix(np.array([[0.014, 0.006, -0.2, 1.234], [0.0, 0.5, 0.0, 0.004]], dtype=np.float32))
    q = quantize(m, scale=100)
    assert q.dtype == np.int32
    assert q.toarray().tolist() == [[1, 1, 0, 123], [0, 50, 0, 0]]
    assert q.nnz == 4
    with pytest.raises(ValueError, match="positive finite"):
        quantize(m, scale=0)
    with pytest.raises(ValueError, match="overflows"):
        quantize(m, scale=1e10)


def test_json_vector_collection_and_queries(tmp_path):
    terms = ["Ġcat", "dog", "big fish", "zero"]
    docs = sp.csr_matrix(np.array([[1.5, 0.0, 0.25, 0.001], [0.0, 2.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    info = write_json_vector_collection(tmp_path / "coll", ["d1", "d2", "d3"], docs, terms,
                                        contents=["c1", "c2", "c3"], scale=10, shard_size=2)
    assert info["docs"] == 3 and info["postings"] == 3 and info["dropped_nonpositive"] == 2
    assert info["empty_docs"] == 1 and len(info["files"]) == 2
    recs = [json.loads(ln) for f in info["files"] for ln in open(f, encoding="utf-8")]
    assert recs == [
        {"id": "d1", "contents": "c1", "vector": {"Ġcat": 15, "big<U+0020>fish": 2}},
        {"id": "d2", "contents": "c2", "vector": {"dog": 20}},
        {"id": "d3", "contents": "c3", "vector": {}},
    ]
    qv = sp.csr_matrix(np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]))
    qinfo = write_pyserini_queries(tmp_path / "q.jsonl", tmp_path / "topics.tsv", ["1", "2", "3"],
                                   ["cats  and\tdogs", "fish", "cats and dogs"], qv, terms, scale=1)
    assert qinfo["queries"] == 3
    qrecs = [json.loads(ln) for ln in open(tmp_path / "q.jsonl", encoding="utf-8")]
    assert qrecs == [{"contents": "cats and dogs", "vector": {"Ġcat": 1, "dog": 1}},
                     {"contents": "fish", "vector": {"big<U+0020>fish": 1}}]
    assert (tmp_path / "topics.tsv").read_text() == "1\tcats and dogs\n2\tfish\n3\tcats and dogs\n"
    with pytest.raises(ValueError, match="share the text"):
        write_pyserini_queries(tmp_path / "q.jsonl", tmp_path / "t.tsv", ["1", "2"], ["same", "same"],
                               qv[:2], terms, scale=1)
    with pytest.raises(ValueError, match="4 term strings but the matrix has 3 columns"):
        write_json_vector_collection(tmp_path / "c2", ["d1"], sp.csr_matrix((1, 3)), terms)
    with pytest.raises(ValueError, match="not unique"):
        write_json_vector_collection(tmp_path / "c2", ["d1", "d1", "d2"], docs, terms)
