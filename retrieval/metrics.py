"""Retrieval metrics through pytrec_eval (trec_eval semantics, as BEIR and Pyserini use).

A run is ``{query_id: {doc_id: score}}``; qrels are ``{query_id: {doc_id: relevance}}``.
nDCG@10 is the headline (BEIR); gains are the graded relevance values (trec_eval's
``ndcg_cut``: gain = rel, discount = log2(rank + 1)).

Averaging: every query in qrels counts; a query the run does not answer scores 0
(trec_eval ``-c``). BEIR's own script averages over answered queries only, which can only
flatter a system that fails on some queries.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import math
import re
from typing import Iterable, Mapping

import pytrec_eval

__all__ = ["DEFAULT_METRICS", "HEADLINE", "SELF_HIT_DATASETS", "drop_self_hits", "evaluate",
           "self_hits_apply", "trec_order"]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

HEADLINE = "ndcg@10"
DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10", "map")

_NAME = re.compile(r"^(ndcg|recall|p|map|mrr)(?:@(\d+))?$")


def _measure(name: str) -> tuple[str, str, int | None]:
    """metric name -> (pytrec_eval measure, result key, run cutoff applied before eval)."""
    m = _NAME.match(name.lower())
    if not m:
        raise InvalidInputError(f"unknown metric {name!r}: use ndcg@k, recall@k, p@k, map, map@k, mrr, mrr@k")
    kind, k = m.group(1), m.group(2)
    k = int(k) if k is not None else None
    if k is not None and k < 1:
        raise InvalidInputError(f"metric {name!r}: cutoff must be >= 1")
    if kind == "ndcg":
        return ("ndcg_cut." + str(k), f"ndcg_cut_{k}", None) if k else ("ndcg", "ndcg", None)
    if kind == "recall":
        if not k:
            raise InvalidInputError("recall needs a cutoff, e.g. recall@100")
        return "recall." + str(k), f"recall_{k}", None
    if kind == "p":
        if not k:
            raise InvalidInputError("precision needs a cutoff, e.g. p@10")
        return "P." + str(k), f"P_{k}", None
    if kind == "map":
        return ("map_cut." + str(k), f"map_cut_{k}", None) if k else ("map", "map", None)
    # mrr@k: trec_eval's recip_rank has no cutoff, so the run is truncated to k first.
    return "recip_rank", "recip_rank", k


def trec_order(ranking: Mapping[str, float]) -> list[tuple[str, float]]:
    """Order hits as trec_eval does: score descending, ties by doc id descending."""
    return sorted(ranking.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)


def _check_run(run: Run) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for qid, hits in run.items():
        row = {}
        for did, s in hits.items():
            s = float(s)
            if math.isnan(s):
                raise InvalidInputError(f"run: query {qid!r}, doc {did!r} has a NaN score")
            row[str(did)] = s
        out[str(qid)] = row
    return out


def evaluate(
    qrels: Qrels,
    run: Run,
    metrics: Iterable[str] = DEFAULT_METRICS,
    per_query: bool = False,
    ignore_self_hits: bool = False,
) -> dict:
    """Score ``run`` against ``qrels``.

    Returns ``{metric: mean, ..., "n_queries": int}`` (keys as given, e.g. ``"ndcg@10"``);
    with ``per_query=True`` also ``"per_query": {qid: {metric: value}}`` for every judged
    query. ``ignore_self_hits`` first applies :func:`drop_self_hits`.
    """
    metrics = list(metrics)
    if not metrics:
        raise InvalidInputError("no metrics requested")
    if not qrels:
        raise InvalidInputError("qrels are empty")
    qrels = {str(q): {str(d): int(r) for d, r in j.items()} for q, j in qrels.items()}
    run = _check_run(run)
    if ignore_self_hits:
        run = drop_self_hits(run)
    run = {q: hits for q, hits in run.items() if q in qrels and hits}

    parsed = {name: _measure(name) for name in metrics}
    per_q: dict[str, dict[str, float]] = {q: {} for q in qrels}
    groups: dict[int | None, list[str]] = {}
    for name, (_, _, cut) in parsed.items():
        groups.setdefault(cut, []).append(name)
    for cut, names in groups.items():
        sub = run if cut is None else {q: dict(trec_order(h)[:cut]) for q, h in run.items()}
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {parsed[n][0] for n in names})
        res = evaluator.evaluate(sub) if sub else {}
        for q in qrels:
            for n in names:
                per_q[q][n] = float(res[q][parsed[n][1]]) if q in res else 0.0

    out: dict = {n: sum(v[n] for v in per_q.values()) / len(per_q) for n in metrics}
    out["n_queries"] = len(per_q)
    if per_query:
        out["per_query"] = per_q
    return out


#: Collections whose queries are themselves corpus documents (same id space), so a query
#: finding itself is trivial: Pyserini's BEIR regressions pass ``--remove-query`` for these.
SELF_HIT_DATASETS = frozenset({"arguana", "quora"})


def self_hits_apply(dataset_name: str) -> bool:
    """Whether to drop self-hits for a collection. Only where query ids are document ids:
    the classic collections (ADI, MED, CRAN, CISI) number queries and documents both from 1,
    so query 5 and document 5 are unrelated and dropping would delete real hits."""
    return dataset_name.lower().strip("/").split("/")[-1] in SELF_HIT_DATASETS


def drop_self_hits(run: Run) -> dict[str, dict[str, float]]:
    """Remove hits whose doc id equals the query id (ArguAna/Quora, see :func:`self_hits_apply`)."""
    return {q: {d: s for d, s in hits.items() if d != q} for q, hits in run.items()}
