"""Parity of the Milvus 2.5 C++ engine with the folder index: every query, every mode, every fusion.

    python -m benchmarks.milvus.engine_parity /work/shared/datasets/adi --index /tmp/adi-tiny --tiny --name "adi (tiny)"
    python -m benchmarks.milvus.engine_parity /work/shared/datasets/adi --index /tmp/adi-tiny-whole --tiny \
        --passages off --name "adi (tiny, no passages)"
    python -m benchmarks.milvus.engine_parity /work/shared/datasets/scifact --index DIR --name "scifact (v4)"

Builds ``--index`` when it does not exist (``--tiny``: with the seeded 2-layer test model of
alignir.encoders.testing, which also opens it; else the default model), starts the engine
(retrieval/milvus_engine.py) on a free loopback port over a temporary folder, exports the index,
encodes every query of queries.jsonl once (all of them, judged or not) and searches that batch
in the folder ``Searcher`` and in the engine: every mode the index has (``modes_for``); each
fused one with the index's default fusion and each rule fused client-side (minmax, zscore, rrf,
agree, calibrated: those the plan accepts for the leg set), and with RRF fused inside the engine
(``server_fusion``, one hybrid search per query; not for an index with passages, which the
Milvus path fuses client-side).

One row per dataset x mode x fusion x where fused, in benchmarks/results/milvus_parity.json (rows
of other datasets kept): ``queries``, ``k`` (top 100), ``id_mismatches`` (queries whose hits are
not the folder's as alignir.retrieval.ranking_match.hits_mismatch judges them, the rule of the engine tests:
every rank's score within 1e-5 x max(1, top score) of the folder's, and a document at another
rank than the folder's only inside such a near tie, a tie cut differently at the k-th place
included), ``max_score_diff`` (over the documents both lists hold), ``ndcg@10_folder`` /
``ndcg@10_engine`` (the split's judged queries), the command. Float32 sums in another order
move a leg's scores by rounding and may swap two near-tied documents (each leg's own row allows
both); where a fusion magnifies that, the row says how it is judged:

- min-max and the z-score rules (zscore, agree, calibrated): the tolerance adds what each leg's
  actual rounding difference on that query becomes through its normalisation (:func:`carried_rel`;
  the row's ``max_rel_tolerance``, 1e-5 where nothing is carried);
- RRF fused client-side: a swap is another rank, so another fused score: the queries where a
  leg of the engine ranks its documents otherwise (fusion.ranked: by score, equal scores by
  document number) are set aside (``set_aside``; ``set_aside_differing`` of
  them differ), the others must be equal;
- RRF fused in the engine: as the engine tests do, the queries where a leg holds a near tie
  (:func:`near_tie`) are set aside (the engine orders tied documents its own way).

``compared`` counts the queries held to the rule.
``runs`` records per dataset the index, its fingerprint (encoder hash, content digest), the
model, the export and the seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from alignir.errors import InvalidInputError
from alignir.retrieval.ranking_match import hits_mismatch

OUT = Path(__file__).resolve().parents[1] / "results" / "milvus_parity.json"
K = 100
#: hits_mismatch' tolerance: scores within REL x max(1, the top score) of the folder's
REL = 1e-5
#: the rules that normalise each leg's list before a weighted sum (fusion.py)
NORMALISING = ("minmax", "zscore", "agree", "calibrated")
#: the rules a fused mode is also searched with, fused client-side over the engine's leg lists
RULES = ("minmax", "zscore", "rrf", "agree", "calibrated")


def near_tie(lists: dict, legs: Sequence[str], rel: float = 1e-5) -> bool:
    """Whether two documents of a leg's list ({leg: {doc: score}}) score within ``rel`` of each other."""
    for leg in legs:
        scores = sorted(lists[leg].values(), reverse=True)
        if any(a - b <= rel * max(1.0, abs(a)) for a, b in zip(scores, scores[1:])):
            return True
    return False


def mismatch(want: list, got: list, rel: float = REL) -> str | None:
    """Why ``got`` is not ``want``'s ranking (the engine tests' rule), None when it is."""
    return hits_mismatch(want, got, rel=rel)


def carried_rel(plan: Any, ours: dict, theirs: dict, want: list, rel: float = REL) -> float:
    """``rel`` for hits_mismatch on one query fused by a normalising rule (min-max, or z-score
    under zscore, agree and calibrated): the fused scores' own ``rel`` plus what each leg's actual
    difference (the largest |folder - engine| score of a document both lists of the leg hold, which
    the leg's own row bounds) becomes through the normalisation, times the leg's weight: a min-max
    score moves by at most 4 x that / the list's range (the score, its min and its max each move),
    a z-score by (2 + its largest |z|) x that / the list's standard deviation."""
    carried = 0.0
    for leg in plan.legs:
        a, b = ours[leg], theirs[leg]
        delta = max((abs(a[d] - b[d]) for d in a.keys() & b.keys()), default=0.0)
        s = np.fromiter(a.values(), dtype=np.float64)
        if delta == 0 or s.size < 2:
            continue
        spread = float(np.ptp(s)) if plan.rule == "minmax" else float(s.std())
        if spread <= 0:
            continue
        factor = 4.0 if plan.rule == "minmax" else 2.0 + float(np.abs(s - s.mean()).max()) / spread
        weight = max(abs(plan.weights.get(leg, 0.0)), abs(plan.base_weights.get(leg, 0.0)))
        carried += weight * factor * delta / spread
    return rel + carried / max(1.0, max((abs(h.score) for h in want), default=0.0))


def rank_order(run: dict) -> list:
    """A leg's documents in the order RRF ranks them (fusion.ranked: equal scores by doc number)."""
    from alignir.retrieval.fusion import ranked

    return [doc for doc, _ in ranked(run)]


def max_diff(want: list, got: list) -> float:
    scores = {h.id: h.score for h in got}
    return max((abs(h.score - scores[h.id]) for h in want if h.id in scores), default=0.0)


def cases(folder: Any) -> Iterator[tuple[str, str | None, bool]]:
    """(mode, fusion, fused in the engine) for every mode of the index and rule its plan accepts;
    RRF fused in the engine where the engine fuses it (an index without passages)."""
    from alignir.retrieval.searcher import modes_for

    for mode in modes_for(folder.index):
        yield mode, None, False
        if len(folder.parse_mode(mode)) < 2:
            continue
        for rule in RULES:
            try:
                folder.plan(mode, fusion=rule)
            except InvalidInputError:
                continue
            yield mode, rule, False
        if folder.index.passages is None:  # a passage index is fused client-side (milvus_search)
            yield mode, "rrf", True


def compare(folder: Any, uri: str, texts: Sequence[str], k: int = K, *, qids: Sequence[str] | None = None,
            qrels: dict | None = None, batch: Any = None,
            on_row: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """One row per case of :func:`cases`: the folder's hits for ``texts`` against the engine's at ``uri``
    (the index exported there), with ``first_mismatch`` naming the first query that differs;
    ``on_row`` is called with each row as it is made."""
    from alignir.retrieval.evaluation import evaluate_runs
    from alignir.retrieval.milvus_search import MilvusSearcher

    batch = folder.encode(list(texts)) if batch is None else batch
    engines = {False: MilvusSearcher.from_searcher(folder, uri=uri),
               True: MilvusSearcher.from_searcher(folder, uri=uri, server_fusion=True)}
    cached: dict[tuple, dict] = {}

    def legs_of(searcher: Any, legs: Sequence[str], depth: int) -> dict[str, list[dict[int, float]]]:
        """Each leg's list per query from ``searcher`` (the folder or the engine), once per depth."""
        key = (searcher is folder, depth)
        if key not in cached:
            cached[key] = searcher.leg_lists(texts, legs=list(folder.legs), k=depth, encoded=batch)
        return {leg: cached[key][leg] for leg in legs}

    rows = []
    try:
        for mode, fusion, in_engine in cases(folder):
            want = folder.batch_search(texts, k=k, mode=mode, fusion=fusion, encoded=batch)
            got = engines[in_engine].batch_search(texts, k=k, mode=mode, fusion=fusion, encoded=batch)
            plan = folder.plan(mode, fusion=fusion)
            tied: set[int] = set()
            rels = [REL] * len(texts)
            if len(plan.legs) > 1:
                lists = legs_of(folder, plan.legs, plan.depth)
                if in_engine:  # the ADI test's rule: any near tie in a leg
                    tied = {i for i in range(len(texts)) if near_tie({leg: lists[leg][i] for leg in plan.legs},
                                                                      plan.legs)}
                elif plan.rule == "rrf":  # legs the engine ranked otherwise (swapped near ties)
                    theirs = legs_of(engines[False], plan.legs, plan.depth)
                    tied = {i for i in range(len(texts))
                            if any(rank_order(lists[leg][i]) != rank_order(theirs[leg][i]) for leg in plan.legs)}
                elif plan.rule in NORMALISING:
                    theirs = legs_of(engines[False], plan.legs, plan.depth)
                    rels = [carried_rel(plan, {leg: lists[leg][i] for leg in plan.legs},
                                        {leg: theirs[leg][i] for leg in plan.legs}, want[i])
                            for i in range(len(texts))]
            why = {i: mismatch(a, b, rels[i]) for i, (a, b) in enumerate(zip(want, got))}
            bad = [i for i, w in why.items() if w and i not in tied]
            row = {"mode": mode, "fusion": fusion or "default", "plan": plan.rule,
                   "fused_in": "engine" if in_engine else "client", "queries": len(texts), "k": k,
                   "compared": len(texts) - len(tied), "id_mismatches": len(bad),
                   "max_score_diff": max((max_diff(a, b) for i, (a, b) in enumerate(zip(want, got))
                                          if i not in tied), default=0.0)}
            if plan.rule in NORMALISING and len(plan.legs) > 1:
                row["max_rel_tolerance"] = max(rels)
            if tied or in_engine or (plan.rule == "rrf" and len(plan.legs) > 1):
                row.update(set_aside=len(tied), set_aside_differing=sum(1 for i in tied if why[i]))
            if qrels is not None and qids is not None:
                runs = {side: {q: {h.id: h.score for h in hits} for q, hits in zip(qids, side_hits) if q in qrels}
                        for side, side_hits in (("folder", want), ("engine", got))}
                ndcg = evaluate_runs(qrels, runs, ("ndcg@10",))
                row.update({"ndcg@10_folder": round(ndcg["folder"]["ndcg@10"], 4),
                            "ndcg@10_engine": round(ndcg["engine"]["ndcg@10"], 4)})
            if bad:
                row["first_mismatch"] = f"query {qids[bad[0]] if qids else bad[0]}: {why[bad[0]]}"[:400]
            rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        for engine in engines.values():
            engine.close()
    return rows


def tiny_model() -> Any:
    """The seeded tiny test model (alignir.encoders.testing; deterministic: the same weights every call)."""
    from alignir.encoders.testing import tiny_model as build

    return build()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path, help="BEIR folder")
    ap.add_argument("--index", required=True, type=Path, help="index folder (built when missing)")
    ap.add_argument("--tiny", action="store_true", help="the tiny test model builds and opens the index")
    ap.add_argument("--passages", default=None, help="build only: how long documents are split (auto, on, off; "
                    "default: build_index's)")
    ap.add_argument("--name", default=None, help="the rows' dataset label (default: the dataset's folder name)")
    ap.add_argument("--split", default="test", help="the qrels nDCG@10 is scored on")
    ap.add_argument("--k", type=int, default=K)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    command = "python -m benchmarks.milvus.engine_parity " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))

    from alignir.retrieval.beir import read_qrels, read_queries
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.milvus import export_index, index_manifest
    from alignir.retrieval.milvus_engine import MilvusEngine
    from alignir.retrieval.searcher import Searcher

    from benchmarks.common import merged_rows

    label = args.name or args.dataset.name
    loaded = tiny_model() if args.tiny else None
    load_before, t0 = load(), time.perf_counter()
    build_s = None
    if not (args.index / "manifest.json").exists():
        options = {"model": "tiny", "loaded": loaded} if args.tiny else {}
        if args.passages is not None:
            options["passages"] = args.passages
        build_index(args.dataset, args.index, cache_dir=args.index.parent / f"{args.index.name}-cache",
                    progress=False, **options)
        build_s = round(time.perf_counter() - t0, 1)
    queries = read_queries(args.dataset / "queries.jsonl")
    qids = sorted(queries)
    texts = [queries[q] for q in qids]
    qrels = read_qrels(args.dataset, args.split)
    folder = Searcher.open(args.index, loaded=loaded)
    t1 = time.perf_counter()
    batch = folder.encode(texts)
    encode_s = time.perf_counter() - t1
    with tempfile.TemporaryDirectory(prefix="alignir-parity-") as data, MilvusEngine(data) as engine:
        t2 = time.perf_counter()
        summary = export_index(args.index, engine.uri, recreate=True, progress=False)
        export_s = time.perf_counter() - t2
        t3 = time.perf_counter()
        rows = compare(folder, engine.uri, texts, args.k, qids=qids, qrels=qrels, batch=batch,
                       on_row=lambda row: print(json.dumps(row), flush=True))
        compare_s = time.perf_counter() - t3
    rows = [{"dataset": label, **row, "command": command} for row in rows]
    manifest = index_manifest(folder.index)
    run = {"index": str(args.index), "model": folder.index.manifest.get("embedder"),
           **({"model_weights": "the seeded 2-layer test model of tests/conftest.py"} if args.tiny else {}),
           "encoder_hash": manifest["encoder_hash"], "content_sha256": manifest["content_sha256"],
           "docs": folder.index.n_docs, "rows": int(folder.index.n_rows), "passages": folder.index.passages is not None,
           "queries": len(texts), "judged_queries": sum(q in qrels for q in qids),
           "export": {k: summary[k] for k in ("collection", "documents", "inserted", "count", "lexical")},
           "seconds": {"build": build_s, "build_encode": folder.index.manifest.get("build", {}).get("encode_seconds"),
                       "encode_queries": round(encode_s, 1), "export": round(export_s, 1),
                       "compare": round(compare_s, 1)},
           "load_avg_before": load_before, "load_avg_after": load(), "cpus": os.cpu_count(),
           "id_mismatches": sum(r["id_mismatches"] for r in rows), "command": command}
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    from alignir.io import atomic_write_json

    atomic_write_json(args.out, {
        "note": "The Milvus 2.5 C++ engine (PyPI milvus-lite 2.5.1's server, on loopback) against the folder "
                "index on the same encoded queries: every query, mode and fusion; id_mismatches must be 0.",
        "rows": merged_rows(old.get("rows", []), rows, lambda r: r["dataset"]),
        "runs": {**{k: v for k, v in old.get("runs", {}).items() if k != label}, label: run}},
        indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
