"""End-to-end single-query latency (encode + search + fuse) per mode, broken down by stage.

    python -m benchmarks.speed.bench_latency --index /work/indexes/adi-smollm2 --dataset ../shared/datasets/adi

Each query is searched alone (batch of one), as an interactive user would; every mode reuses
nothing from another (the query is re-encoded per mode), so each row is a real end-to-end
latency. Rows are merged into benchmarks/results/latency.json by (collection, mode).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.common import replace_rows  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.searcher import MODES, Searcher, Timings  # noqa: E402

STAGES = ("encode", "sparse", "dense", "fuse")


def measure(searcher: Searcher, queries: list[str], mode: str, k: int) -> dict:
    totals, per_stage = [], {s: [] for s in STAGES}
    searcher.search(queries[0], k=k, mode=mode)  # warm-up (numba compile, caches)
    for q in queries:
        tm = Timings()
        t0 = time.perf_counter()
        searcher.batch_search([q], k=k, mode=mode, timings=tm)
        totals.append(time.perf_counter() - t0)
        for s in STAGES:
            per_stage[s].append(getattr(tm, s) if s in ("encode", "fuse") else tm.legs.get(s, 0.0))
    t = np.array(totals) * 1000
    total_time = float(np.sum(totals))
    return {
        "mode": mode,
        "queries": len(queries),
        "p50_ms": round(float(np.percentile(t, 50)), 2),
        "p99_ms": round(float(np.percentile(t, 99)), 2),
        "mean_ms": round(float(t.mean()), 2),
        "stage_p50_ms": {s: round(float(np.percentile(np.array(v) * 1000, 50)), 3) for s, v in per_stage.items()},
        "stage_share": {s: round(float(np.sum(v)) / total_time, 4) for s, v in per_stage.items()},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-queries", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latency.json"))
    args = ap.parse_args(argv)
    command = "python -m benchmarks.speed.bench_latency " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    data = load_beir(args.dataset)
    queries = list(data.queries.values())[: args.max_queries]
    searcher = Searcher.open(args.index)
    rows = []
    for mode in MODES:
        r = {"collection": data.name, "docs": searcher.index.n_docs,
             "model": searcher.index.manifest["embedder"]["model"], **measure(searcher, queries, mode, args.k),
             "k": args.k, "command": command}
        print(json.dumps(r), file=sys.stderr)
        rows.append(r)
    replace_rows(args.out, rows, ("collection", "mode"))


if __name__ == "__main__":
    main()
