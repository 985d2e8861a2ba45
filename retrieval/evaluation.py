"""Run a query set through a Searcher and score the runs (the harness behind `alignir eval`).

Queries are encoded once and every requested mode reuses the encoding. On collections whose
query ids are document ids (ArguAna, Quora: ``retrieval.metrics.self_hits_apply``) hits whose
doc id equals the query id are dropped before scoring and before a run is written, as BEIR
and Pyserini do; elsewhere (e.g. the classic collections, which number queries and documents
both from 1) they are real hits and stay.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from alignir.retrieval.metrics import DEFAULT_METRICS, evaluate, self_hits_apply
from alignir.retrieval.searcher import Searcher, Timings

Run = dict[str, dict[str, float]]


def run_queries(searcher: Searcher, queries: Mapping[str, str], modes: Sequence[str] = ("hybrid",),
                k: int = 100, batch_size: int = 32, progress: bool = True,
                drop_self: bool = False, **search_kw: Any) -> tuple[dict[str, Run], dict[str, float]]:
    """Search every query in every mode. Returns ({mode: run}, seconds per stage)."""
    qids = list(queries)
    runs: dict[str, Run] = {m: {} for m in modes}
    spent = {"encode": 0.0, "sparse": 0.0, "dense": 0.0, "bm25": 0.0, "fuse": 0.0}
    bar = tqdm(total=len(qids), desc="queries", unit="q", disable=not progress)
    for start in range(0, len(qids), batch_size):
        ids = qids[start:start + batch_size]
        texts = [queries[q] for q in ids]
        batch = searcher.encode(texts)
        spent["encode"] += batch.seconds
        for mode in modes:
            tm = Timings()
            # one extra hit so that dropping a self-hit still leaves k
            hits = searcher.batch_search(texts, k=k + int(drop_self), mode=mode, encoded=batch,
                                         timings=tm, **search_kw)
            for leg, seconds in tm.legs.items():  # per leg name (built-in or not)
                spent[leg] = spent.get(leg, 0.0) + seconds
            spent["fuse"] += tm.fuse
            for qid, hs in zip(ids, hits):
                kept = [(h.id, h.score) for h in hs if not (drop_self and h.id == qid)][:k]
                runs[mode][qid] = dict(kept)
        bar.update(len(ids))
    bar.close()
    return runs, spent


def evaluate_runs(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run],
                  metrics: Sequence[str] = DEFAULT_METRICS) -> dict[str, dict[str, float]]:
    """{mode: {metric: value}} via pytrec_eval."""
    return {mode: evaluate(qrels, run, metrics) for mode, run in runs.items()}


def timed_eval(searcher: Searcher, dataset: Any, modes: Sequence[str], k: int = 100,
               progress: bool = True, **search_kw: Any) -> dict[str, Any]:
    """Search + score a loaded BEIR dataset; returns metrics, runs and timings."""
    t0 = time.perf_counter()
    runs, spent = run_queries(searcher, dataset.queries, modes, k=k, progress=progress,
                              drop_self=self_hits_apply(dataset.name), **search_kw)
    metrics = evaluate_runs(dataset.qrels, runs)
    return {"metrics": metrics, "runs": runs, "seconds": {**spent, "total": time.perf_counter() - t0}}
