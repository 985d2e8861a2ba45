"""The same index searched in its folder and in Milvus (Lite): equality, nDCG@10, size, speed.

    python -m benchmarks.milvus.bench_milvus /work/shared/datasets/adi --index /tmp/adi --uri /tmp/adi.db
    python -m benchmarks.milvus.bench_milvus /work/shared/datasets/adi --index /tmp/adi --engine --name adi-engine

``--engine``: against the Milvus 2.5 C++ engine (retrieval/milvus_engine.py), started for the run
on a free loopback port over a temporary folder, instead of ``--uri``.

Builds the index when ``--index`` does not exist (default model), exports it into a fresh
collection, encodes every query once and, for every mode, searches the same encoded batch in
both backends: one row per dataset × mode (fused modes: default fusion and RRF, which Milvus
fuses server-side here: ``server_fusion=True``; the Searcher fuses client-side unless asked) in ``--out`` (rows of other datasets are kept) with
``dataset``, ``mode``, ``ndcg@10_folder``, ``ndcg@10_milvus``, ``top100_equal_share`` (queries
whose top-100 ids and order are identical), ``top100_equal_share_ties_aside`` (the same, with
the order inside groups of equal scores ignored), ``max_score_diff``, ``qps_folder`` /
``qps_milvus`` (batched search of all queries, encoding excluded), ``p50_ms`` / ``p99_ms`` per
backend (one query at a time), the load average while measuring, and ``command``.

Speed on a shared, busy machine is not a valid ratio: every row records the 1-minute load
average and the CPU count; rerun on a quiet machine before quoting QPS. Equality, nDCG and
sizes do not depend on the load.

Result file: benchmarks/results/milvus.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from alignir.retrieval.beir import load_beir
from alignir.retrieval.evaluation import evaluate_runs
from alignir.retrieval.milvus import export_index
from alignir.retrieval.milvus_search import MilvusSearcher
from alignir.retrieval.searcher import LEGS, QueryBatch, Searcher, modes_for

K = 100


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def component_bytes(stored, n_docs: int) -> dict[str, float]:
    """Bytes per document of each part of the folder (from its manifest's file list); "fixed"
    is what does not grow with the corpus (the vocabulary's term strings, PC1, the BM25 vocab)."""
    out: dict[str, float] = {}
    for rel, meta in stored.manifest["files"].items():
        top = rel.split("/")[0]
        part = "fixed" if top in ("extra", "pc1.npy") or rel.endswith("vocab.json") else top
        out[part] = out.get(part, 0) + meta["bytes"]
    return {k: round(v / n_docs, 1) for k, v in sorted(out.items())}


def equal_ties_aside(a: list, b: list, rtol: float = 1e-5) -> bool:
    """Same length, scores equal rank by rank, and the same ids in every group of equal scores
    (the last, cut group aside: which of the tied documents made the top k is arbitrary)."""
    if len(a) != len(b):
        return False
    sa, sb = np.array([h.score for h in a]), np.array([h.score for h in b])
    if not np.allclose(sa, sb, rtol=rtol, atol=1e-6):
        return False
    groups, start = [], 0
    for i in range(1, len(a) + 1):
        if i == len(a) or not np.isclose(sa[i], sa[start], rtol=rtol, atol=1e-6):
            groups.append((start, i))
            start = i
    for lo, hi in groups[:-1]:
        if {h.id for h in a[lo:hi]} != {h.id for h in b[lo:hi]}:
            return False
    return True


def rows_of(batch: QueryBatch, i: int) -> QueryBatch:
    return QueryBatch(legs={leg: rows[i:i + 1] for leg, rows in batch.legs.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", help="BEIR folder")
    ap.add_argument("--index", required=True, type=Path, help="index folder (built when missing)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--uri", help="Milvus URI (a .db file: Milvus Lite; http://host:port: a server)")
    where.add_argument("--engine", action="store_true", help="the Milvus 2.5 C++ engine, started for this run")
    ap.add_argument("--modes", default="all")
    ap.add_argument("--split", default="test")
    ap.add_argument("--name", default=None, help="the rows' dataset label (default: the dataset's name; "
                    "rows with the same label are replaced)")
    ap.add_argument("--rrf", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure every fused mode with fusion=rrf (Milvus hybrid_search + RRFRanker)")
    ap.add_argument("--latency", action=argparse.BooleanOptionalAction, default=True,
                    help="also time one query at a time (p50/p99)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "milvus.json")
    args = ap.parse_args()
    command = "python -m benchmarks.milvus.bench_milvus " + " ".join(shlex.quote(a) for a in sys.argv[1:])

    data = load_beir(args.dataset, split=args.split)
    label = args.name or data.name
    if not (args.index / "manifest.json").exists():
        from alignir.retrieval.indexer import build_index

        build_index(args.dataset, args.index)
    if args.engine:
        import tempfile

        from alignir.retrieval.milvus_engine import MilvusEngine

        engine = MilvusEngine(tempfile.mkdtemp(prefix="alignir-engine-")).start()
        args.uri = engine.uri
    t0 = time.perf_counter()
    summary = export_index(args.index, args.uri, recreate=True)
    export_s = time.perf_counter() - t0
    folder = Searcher.open(args.index)
    milvus = MilvusSearcher.from_searcher(folder, uri=args.uri, server_fusion=True)
    modes = list(modes_for(folder.index)) if args.modes == "all" else args.modes.split(",")
    qids = list(data.queries)
    texts = [data.queries[q] for q in qids]
    batch = folder.encode(texts)
    n_docs = folder.index.n_docs
    sizes = {"folder_bytes": folder_bytes(args.index), "folder_bytes_per_doc": component_bytes(folder.index, n_docs),
             "milvus_lite_bytes": folder_bytes(Path(args.uri)) if Path(args.uri).exists() else None}

    rows = []
    cases = [(m, None) for m in modes] + [(m, "rrf") for m in modes if args.rrf and m not in LEGS]
    for mode, fusion in cases:
        hits, qps, lat = {}, {}, {}
        for name, s in (("folder", folder), ("milvus", milvus)):
            s.batch_search(texts[:1], k=K, mode=mode, fusion=fusion, encoded=rows_of(batch, 0))  # warm-up
            t0 = time.perf_counter()
            hits[name] = s.batch_search(texts, k=K, mode=mode, fusion=fusion, encoded=batch)
            qps[name] = len(texts) / (time.perf_counter() - t0)
            if args.latency:
                ms = []
                for i in range(len(texts)):
                    t1 = time.perf_counter()
                    s.batch_search(texts[i:i + 1], k=K, mode=mode, fusion=fusion, encoded=rows_of(batch, i))
                    ms.append(1000 * (time.perf_counter() - t1))
                lat[name] = (float(np.percentile(ms, 50)), float(np.percentile(ms, 99)))
        runs = {name: {q: {h.id: h.score for h in hs} for q, hs in zip(qids, hits[name])} for name in hits}
        ndcg = {name: m["ndcg@10"] for name, m in evaluate_runs(data.qrels, runs).items()}
        pairs = list(zip(hits["folder"], hits["milvus"]))
        diffs = [abs(a.score - b.score) for x, y in pairs for a, b in zip(x, y) if a.id == b.id]
        row = {"dataset": label, "backend": "milvus 2.5 engine" if args.engine else "milvus", "mode": mode, "fusion": fusion or "default", "docs": n_docs, "queries": len(qids),
               "ndcg@10_folder": round(ndcg["folder"], 4), "ndcg@10_milvus": round(ndcg["milvus"], 4),
               "top100_equal_share": float(np.mean([[h.id for h in x] == [h.id for h in y] for x, y in pairs])),
               "top100_equal_share_ties_aside": float(np.mean([equal_ties_aside(x, y) for x, y in pairs])),
               "max_score_diff": float(max(diffs, default=0.0)),
               "qps_folder": round(qps["folder"], 1), "qps_milvus": round(qps["milvus"], 1),
               "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "command": command}
        if lat:
            row.update({"p50_ms_folder": round(lat["folder"][0], 2), "p99_ms_folder": round(lat["folder"][1], 2),
                        "p50_ms_milvus": round(lat["milvus"][0], 2), "p99_ms_milvus": round(lat["milvus"][1], 2)})
        rows.append(row)
        print(json.dumps(row), flush=True)
    milvus.close()
    if args.engine:
        engine.stop()

    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    kept = [r for r in old.get("rows", []) if r["dataset"] != label]
    exports = {k: v for k, v in old.get("exports", {}).items() if k != label}
    exports[label] = {"model": folder.index.manifest.get("embedder"), **{k: summary[k] for k in ("documents", "inserted", "count", "lexical")},
                          "export_seconds": round(export_s, 2), **sizes,
                          "command": command}
    import pymilvus

    out = {"note": "Milvus (Lite 3.x embedded in the process; rows with backend 'milvus 2.5 engine': the C++ "
                   "engine as a loopback server) vs the folder index on the same encoded queries. "
                   "QPS / latency were measured on a shared 2-core machine under the recorded load: "
                   "not valid ratios; equality, nDCG and sizes are.",
           "pymilvus": pymilvus.__version__, "rows": kept + rows, "exports": exports}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
