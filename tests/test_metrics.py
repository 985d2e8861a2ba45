"""Metrics vs hand-computed values on a tiny qrels/run."""
from __future__ import annotations

import math

import pytest

from alignir.retrieval.metrics import drop_self_hits, evaluate, trec_order

L2 = math.log2
QRELS = {"q1": {"d1": 2, "d2": 1, "d3": 1, "dz": 0}, "q2": {"d5": 1}}
RUN = {"q1": {"dA": 0.9, "d1": 0.8, "d2": 0.7, "dz": 0.1}, "qX": {"d1": 1.0}}  # q2 unanswered


def test_hand_computed_single_query():
    dcg = 2 / L2(3) + 1 / L2(4)  # d1 at rank 2, d2 at rank 3 (gain = relevance)
    idcg = 2 / L2(2) + 1 / L2(3) + 1 / L2(4)
    r = evaluate({"q1": QRELS["q1"]}, RUN, metrics=["ndcg@10", "recall@100", "mrr@10", "map", "p@2", "ndcg@2"])
    assert r["ndcg@10"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert r["ndcg@2"] == pytest.approx((2 / L2(3)) / (2 + 1 / L2(3)), abs=1e-12)
    assert r["recall@100"] == pytest.approx(2 / 3)
    assert r["mrr@10"] == pytest.approx(1 / 2)
    assert r["map"] == pytest.approx((1 / 2 + 2 / 3) / 3)
    assert r["p@2"] == pytest.approx(1 / 2)
    assert r["n_queries"] == 1


def test_unanswered_judged_query_counts_as_zero_and_unjudged_ignored():
    r = evaluate(QRELS, RUN, per_query=True)
    one = evaluate({"q1": QRELS["q1"]}, RUN)
    assert r["n_queries"] == 2
    for m in ("ndcg@10", "recall@100", "mrr@10", "map"):
        assert r[m] == pytest.approx(one[m] / 2)
        assert r["per_query"]["q2"][m] == 0.0
    assert set(r["per_query"]) == {"q1", "q2"}


def test_mrr_cutoff_truncates_in_trec_eval_order():
    # dA (non-relevant) is ranked first, so MRR@1 = 0 while MRR@2 = 1/2
    assert evaluate(QRELS, RUN, metrics=["mrr@1"])["mrr@1"] == 0.0
    assert evaluate({"q1": QRELS["q1"]}, RUN, metrics=["mrr@2"])["mrr@2"] == pytest.approx(0.5)
    # tie: trec_eval ranks equal scores by doc id descending -> "y" before "x"
    qrels = {"q": {"y": 1}}
    run = {"q": {"x": 1.0, "y": 1.0}}
    assert trec_order(run["q"])[0][0] == "y"
    assert evaluate(qrels, run, metrics=["mrr@1", "mrr"]) == {"mrr@1": 1.0, "mrr": 1.0, "n_queries": 1}
    qrels = {"q": {"x": 1}}
    assert evaluate(qrels, run, metrics=["mrr@1", "mrr"]) == {"mrr@1": 0.0, "mrr": 0.5, "n_queries": 1}


def test_self_hits():
    run = {"1": {"1": 9.0, "2": 1.0}, "2": {"3": 2.0}}
    assert drop_self_hits(run) == {"1": {"2": 1.0}, "2": {"3": 2.0}}
    qrels = {"1": {"2": 1}}
    assert evaluate(qrels, run, metrics=["mrr@10"])["mrr@10"] == 0.5
    assert evaluate(qrels, run, metrics=["mrr@10"], ignore_self_hits=True)["mrr@10"] == 1.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate(QRELS, RUN, metrics=["bleu"])
    with pytest.raises(ValueError, match="needs a cutoff"):
        evaluate(QRELS, RUN, metrics=["recall"])
    with pytest.raises(ValueError, match="NaN"):
        evaluate(QRELS, {"q1": {"d1": float("nan")}})
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate({}, RUN)


def test_bm25_scores_match_lucene_formula():
    """bm25s with method="lucene": idf = ln(1 + (N - df + .5)/(df + .5)), tf part
    tf / (tf + k1 (1 - b + b dl/avgdl)) (Lucene >= 8 drops the constant (k1 + 1))."""
    from alignir.retrieval.bm25 import BM25

    texts = ["apple banana apple", "banana cherry", "cherry cherry cherry date", "elder"]
    ids = ["d0", "d1", "d2", "d3"]
    k1, b = 0.9, 0.4
    bm = BM25(k1=k1, b=b, stem=False, stopwords=None).index(ids, texts, show_progress=False)
    run = bm.search({"q": "banana cherry", "none": "zebra"}, k=10, show_progress=False)
    toks = [t.split() for t in texts]
    avgdl = sum(map(len, toks)) / len(toks)

    def score(doc, q_terms):
        s = 0.0
        for t in q_terms:
            df = sum(t in d for d in toks)
            tf = doc.count(t)
            if tf:
                idf = math.log(1 + (len(toks) - df + 0.5) / (df + 0.5))
                s += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        return s

    expect = {i: score(d, ["banana", "cherry"]) for i, d in zip(ids, toks) if score(d, ["banana", "cherry"]) > 0}
    assert run["q"] == pytest.approx(expect, rel=1e-5)
    assert run["none"] == {}
    assert evaluate({"q": {"d1": 1}}, run, metrics=["mrr@10"])["mrr@10"] == 1.0


def test_self_hit_policy_only_for_shared_id_collections():
    from alignir.retrieval.metrics import self_hits_apply

    assert self_hits_apply("arguana") and self_hits_apply("/data/beir/quora/")
    assert not self_hits_apply("adi") and not self_hits_apply("scifact")
