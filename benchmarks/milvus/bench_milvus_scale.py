"""Milvus Lite 3.x and the Milvus 2.5 C++ engine vs the folder's own legs on a synthetic collection
larger than the test sets (no LLM).

    python -m benchmarks.milvus.bench_milvus_scale --docs 20000 --out benchmarks/results/milvus_scale.json

Writes an index folder through the public store API (index.store.write_index): dense vectors
h [n, 576] (Gaussian around a common direction, as LLM embeddings are: centred + cosine, the
default), aligned-token sparse vectors with K terms per document drawn Zipf-like from a
49,152-token vocabulary (log1p-like positive weights), no BM25 leg. Exports it with
``export_index`` (timed, batch 512) into each of ``--backends``: ``lite`` (Milvus Lite 3.x, a
local ``.db``) and ``engine`` (the Milvus 2.5 C++ engine of retrieval/milvus_engine.py, a loopback
server), then for ``--queries`` random queries compares each leg's top-``--k`` there with the
folder's kernel (SparseIndex / FAISS flat): share of queries with identical ids in order (and
identical up to float32 near-ties), max score difference, QPS of one batch and p50/p99 per query,
one row per leg and backend (the folder's too); the backends take turns query by query, so their
ratios share the load. Also the bytes of the folder's parts and of each backend's storage. Sparse queries are non-negative
(``--signed`` adds negative weights, the raw query weighting's case).

Timings on a shared machine are noise: the JSON records the load average next to them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from alignir.index.dense import DenseIndex
from alignir.index.sparse import SparseIndex
from alignir.index.store import open_index, write_index
from alignir.retrieval.milvus import MilvusCollection, default_collection_name, export_index, index_manifest
from alignir.retrieval.milvus_engine import MilvusEngine

VOCAB = 49152
DIM = 576


def synthetic(n: int, k: int, nq: int, q_terms: int, signed: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    common = rng.normal(size=DIM).astype(np.float32) * 3
    H = (rng.normal(size=(n, DIM)).astype(np.float32) + common)
    Hq = (rng.normal(size=(nq, DIM)).astype(np.float32) + common)
    p = 1.0 / np.arange(1, VOCAB + 1) ** 0.9
    p /= p.sum()
    perm = rng.permutation(VOCAB)

    def rows(m: int, terms: int, neg: bool) -> sp.csr_matrix:
        idx = np.empty((m, terms), dtype=np.int64)
        for i in range(m):
            idx[i] = perm[rng.choice(VOCAB, size=terms, replace=False, p=p)]
        w = np.log1p(rng.gamma(2.0, 1.5, size=(m, terms))).astype(np.float32) + np.float32(1e-3)
        if neg:
            w[:, : terms // 4] *= -1
        indptr = np.arange(0, m * terms + 1, terms)
        out = sp.csr_matrix((w.ravel(), idx.ravel(), indptr), shape=(m, VOCAB))
        out.sort_indices()
        return out

    return H, Hq, rows(n, k, False), rows(nq, q_terms, signed)


def size(path: Path) -> int:
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def equal_within_tolerance(a: dict, b: dict, rtol: float = 1e-5, atol: float = 1e-5) -> bool:
    """Same top list up to float32 summation order: the scores agree rank by rank and per
    document, and the documents in only one list score (within tolerance) the cut-off score —
    a near-tie at the k-th place that float32 rounding decided differently."""
    sa, sb = np.array(list(a.values())), np.array(list(b.values()))
    if len(sa) != len(sb) or not np.allclose(sa, sb, rtol=rtol, atol=atol):
        return False
    if any(not np.isclose(a[d], b[d], rtol=rtol, atol=atol) for d in a if d in b):
        return False
    cut = sa[-1] if len(sa) else 0.0
    return all(np.isclose(x[d], cut, rtol=rtol, atol=atol) for x, y in ((a, b), (b, a)) for d in x if d not in y)


def compare(folder_lists, milvus_lists) -> dict:
    pairs = list(zip(folder_lists, milvus_lists))
    diffs = [abs(a[d] - b[d]) for a, b in pairs for d in a if d in b]
    return {"top_equal_share": float(np.mean([list(a) == list(b) for a, b in pairs])),
            "top_equal_share_within_float32": float(np.mean([equal_within_tolerance(a, b) for a, b in pairs])),
            "max_score_diff": float(max(diffs, default=0.0))}


def timed(fns: dict, queries: list) -> dict:
    """{name: (results, qps of one batch call, p50 ms, p99 ms of one query at a time)}; the
    functions take turns: each batch in turn, then query by query."""
    out, qps, ms = {}, {}, {name: [] for name in fns}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        out[name] = fn(queries)
        qps[name] = len(queries) / (time.perf_counter() - t0)
    for q in queries:
        for name, fn in fns.items():
            t1 = time.perf_counter()
            fn([q])
            ms[name].append(1000 * (time.perf_counter() - t1))
    return {name: (out[name], qps[name], float(np.percentile(ms[name], 50)), float(np.percentile(ms[name], 99)))
            for name in fns}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--doc-k", type=int, default=128, help="aligned tokens per document")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--query-terms", type=int, default=60)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--signed", action="store_true", help="a quarter of each query's weights negative")
    ap.add_argument("--backends", default="lite,engine", help="comma list of lite (Milvus Lite 3.x), engine "
                                                              "(the Milvus 2.5 C++ engine)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/alignir-milvus-scale"))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "milvus_scale.json")
    args = ap.parse_args()
    command = "python -m benchmarks.milvus.bench_milvus_scale " + " ".join(sys.argv[1:])

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    H, Hq, D, Q = synthetic(args.docs, args.doc_k, args.queries, args.query_terms, args.signed)
    folder = args.work / "synthetic"
    manifest = {"encoder": {"synthetic": True, "dim": DIM, "vocab": VOCAB},
                "params": {"sparse": {"doc_k": args.doc_k, "doc_weighting": "log1p"}}}
    write_index(folder, manifest, [f"doc{i}" for i in range(args.docs)], H,
                parts={"sparse": SparseIndex.from_csr(D), "dense": DenseIndex.build(H, normalize=True, center=True)},
                fsync=False)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    engine = MilvusEngine(args.work / "engine").start() if "engine" in backends else None
    uris = {"lite": str(args.work / "synthetic.db"), **({"engine": engine.uri} if engine else {})}
    stored = open_index(folder)
    exports, colls = {}, {}
    try:
        for b in backends:
            t0 = time.perf_counter()
            summary = export_index(folder, uris[b], batch_size=512)
            export_s = time.perf_counter() - t0
            exports[b] = {"seconds": round(export_s, 1), "docs_per_second": round(args.docs / export_s, 1),
                          "count": summary["count"], "load_avg_1m": round(os.getloadavg()[0], 2)}
            colls[b] = MilvusCollection.open(uris[b], default_collection_name(folder), expect=index_manifest(stored))
        rows = measure(stored, colls, Q, Hq, args)
        for c in colls.values():
            c.close()
    finally:
        if engine is not None:
            engine.stop()
    parts = {p: size(folder / p) for p in ("sparse", "faiss", "dense.npy")}
    stores = {"lite": size(Path(uris["lite"])), "engine": size(args.work / "engine")}
    out = {"note": "synthetic collection (no LLM): the folder's kernels, Milvus Lite 3.x and the Milvus 2.5 C++ "
                   "engine (a loopback server), one client process taking turns query by query, on a shared "
                   "2-core machine (see load_avg_1m)",
           "config": {"docs": args.docs, "doc_k": args.doc_k, "dim": DIM, "vocab": VOCAB,
                      "query_terms": args.query_terms, "signed": args.signed},
           "export": exports,
           "bytes_per_doc": {**{k2: round(v / args.docs, 1) for k2, v in parts.items()},
                             **{b: round(stores[b] / args.docs, 1) for b in backends}},
           "rows": rows, "command": command}
    print(json.dumps(out["export"]), json.dumps(out["bytes_per_doc"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


def measure(stored, colls: dict, Q: sp.csr_matrix, Hq: np.ndarray, args: argparse.Namespace) -> list[dict]:
    """One row per leg and backend (the folder first): its top-k against the folder's, its speed."""
    k = args.k

    def folder_sparse(rows):
        docs, scores = stored.sparse.search(sp.vstack(rows).tocsr(), k)
        return [dict((int(d), float(s)) for d, s in zip(dr, sr) if d >= 0) for dr, sr in zip(docs, scores)]

    def folder_dense(rows):
        docs, scores = stored.dense.search(np.vstack(rows), k)
        return [dict((int(d), float(s)) for d, s in zip(dr, sr) if d >= 0) for dr, sr in zip(docs, scores)]

    sparse = {b: (lambda rows, c=c: c.search_sparse(sp.vstack(rows).tocsr(), k)) for b, c in colls.items()}
    dense = {b: (lambda rows, c=c: c.search_dense(stored.dense.transform_queries(np.vstack(rows)), k))
             for b, c in colls.items()}
    legs = {"sparse": ({"folder": folder_sparse, **sparse}, [Q[i] for i in range(Q.shape[0])]),
            "dense": ({"folder": folder_dense, **dense}, [Hq[i:i + 1] for i in range(len(Hq))])}
    rows = []
    for leg, (fns, qs) in legs.items():
        got = timed(fns, qs)
        for name, (out, qps, p50, p99) in got.items():
            row = {"leg": leg, "backend": name, "docs": args.docs, "queries": args.queries, "k": k,
                   **({} if name == "folder" else compare(got["folder"][0], out)),
                   "qps": round(qps, 1), "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                   "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
