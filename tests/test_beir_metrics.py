"""Our metrics equal the `beir` package's `EvaluateRetrieval.evaluate` on the same run and qrels.

The runs are real BM25 runs (the index's BM25 leg formula, bm25s) over real collections, so no
model is needed. Two documented differences are tested too:

* beir averages over the judged queries that appear in the run; alignir (like trec_eval -c and
  Pyserini) counts a judged query with no hits as 0;
* beir drops hits whose doc id equals the query id by default; the classic collections number
  queries and documents both from 1, so that would delete real hits: alignir drops them only for
  ArguAna/Quora (``retrieval.metrics.self_hits_apply``), and beir is called with
  ``ignore_identical_ids=False`` here.
"""
from __future__ import annotations

import pytest

from alignir.retrieval.beir import load_beir
from alignir.retrieval.bm25 import bm25_run
from alignir.retrieval.metrics import evaluate

from conftest import DATASETS

beir_evaluation = pytest.importorskip("beir.retrieval.evaluation")

K_VALUES = [1, 5, 10, 100]


def _dataset(name: str):
    folder = DATASETS / name
    if not folder.exists():
        pytest.skip(f"{folder} not found (set ALIGNIR_SHARED)")
    return load_beir(folder)


@pytest.fixture(scope="module", params=["adi", "med"])
def bm25_case(request):
    data = _dataset(request.param)
    run = bm25_run(data.corpus, data.queries, k=100, show_progress=False)
    return data, run


def _ours(qrels, run) -> dict[str, float]:
    names = [f"{m}@{k}" for m in ("ndcg", "recall", "p", "map") for k in K_VALUES]
    return evaluate(qrels, run, metrics=names)


def test_ndcg_recall_precision_map_equal_beir(bm25_case):
    data, run = bm25_case
    judged_run = {q: hits for q, hits in run.items() if q in data.qrels}
    assert set(judged_run) == set(data.qrels), "every judged query must have hits for this comparison"
    ndcg, _map, recall, precision = beir_evaluation.EvaluateRetrieval.evaluate(
        data.qrels, {q: dict(h) for q, h in run.items()}, K_VALUES, ignore_identical_ids=False)
    ours = _ours(data.qrels, run)
    for k in K_VALUES:
        # beir rounds each mean to 5 decimals
        assert ours[f"ndcg@{k}"] == pytest.approx(ndcg[f"NDCG@{k}"], abs=6e-6)
        assert ours[f"recall@{k}"] == pytest.approx(recall[f"Recall@{k}"], abs=6e-6)
        assert ours[f"p@{k}"] == pytest.approx(precision[f"P@{k}"], abs=6e-6)
        assert ours[f"map@{k}"] == pytest.approx(_map[f"MAP@{k}"], abs=6e-6)


def test_a_judged_query_without_hits_counts_zero_for_us_and_is_skipped_by_beir(bm25_case):
    data, run = bm25_case
    dropped = sorted(data.qrels)[0]
    partial = {q: dict(h) for q, h in run.items() if q != dropped}
    ndcg, *_ = beir_evaluation.EvaluateRetrieval.evaluate(data.qrels, partial, [10], ignore_identical_ids=False)
    ours_partial = evaluate(data.qrels, partial, metrics=["ndcg@10"], per_query=True)
    n = len(data.qrels)
    assert ours_partial["per_query"][dropped]["ndcg@10"] == 0.0
    # ours = sum over the other queries / n ; beir = the same sum / (n - 1)
    assert ours_partial["ndcg@10"] * n / (n - 1) == pytest.approx(ndcg["NDCG@10"], abs=6e-6)
