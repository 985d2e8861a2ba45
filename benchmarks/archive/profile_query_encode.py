"""Where a single query's encoding spends its time: why fp32 query encoding stays
above the FLOP floor.

Encodes MED queries one at a time with PromptEOL and the prefix KV cache (the product's query
path), under torch.profiler, and reports each aten op's share of the CPU time; then times a fp32
GEMM of the model's own Linear shapes at the query's row count (its tokens after the cached
prefix) and at 512 rows, in the same run: the rate at the query's shape is the floor a
per-call-overhead cut cannot beat.

    nice -n 10 .venv/bin/python -m benchmarks.archive.profile_query_encode --dataset ../shared/datasets/med

Writes benchmarks/results/query_encode_profile.json (one row per model and thread count).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.common import replace_rows  # noqa: E402


def gemm_rate(shapes: list[tuple[int, int]], rows: int, repeats: int = 20) -> float:
    """GFLOP/s of x[rows, in] @ W[in, out] over the given (in, out) Linear shapes (best of repeats)."""
    mats = [(torch.randn(rows, i), torch.randn(o, i)) for i, o in shapes]
    flops = sum(2 * rows * i * o for i, o in shapes)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for x, w in mats:
            torch.nn.functional.linear(x, w)
        best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def main(argv: list[str] | None = None) -> None:
    from torch.profiler import ProfilerActivity, profile

    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model
    from alignir.retrieval.beir import load_beir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--models", default="smollm2-135m")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/query_encode_profile.json"))
    a = ap.parse_args(argv)
    command = "nice -n 10 .venv/bin/python -m benchmarks.archive.profile_query_encode " + " ".join(
        sys.argv[1:] if argv is None else argv)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    queries = list(load_beir(a.dataset, split="test").queries.values())[: a.queries]
    rows = []
    for name in a.models.split(","):
        loaded = load_model(name, device="cpu")
        enc = get_embedder("prompteol", loaded, progress=False, prefix_cache=True)
        shapes = [(m.in_features, m.out_features) for m in loaded.model.modules()
                  if isinstance(m, torch.nn.Linear) and m.out_features != loaded.lm_head.shape[0]]
        for threads in (int(t) for t in a.threads.split(",")):
            torch.set_num_threads(threads)
            for q in queries[:3]:
                enc.encode_queries([q])
            times, n_rows = [], []
            for q in queries:
                t0 = time.perf_counter()
                enc.encode_queries([q])
                times.append(time.perf_counter() - t0)
                n_rows.append(enc.last_stats["n_tokens"])  # tokens run (after the cached prefix)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for q in queries:
                    enc.encode_queries([q])
            ops = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in ops)
            top = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:8]
            suffix = int(np.median(n_rows))
            row = {"model": name, "threads": threads, "queries": len(queries),
                   "encode_p50_ms": round(float(np.median(times)) * 1000, 2),
                   "op_share": {e.key: round(e.self_cpu_time_total / total, 4) for e in top},
                   "gemm_rows_query": suffix,
                   "gemm_gflops_at_query_rows": round(gemm_rate(shapes, suffix), 1),
                   "gemm_gflops_at_512_rows": round(gemm_rate(shapes, 512, repeats=5), 1),
                   "load": load, "command": command}
            rows.append(row)
            print(json.dumps(row), flush=True)
    replace_rows(a.out, rows, ("model", "threads"))


if __name__ == "__main__":
    main()
