"""Pruned vs exhaustive sparse kernel, bm25s and Lucene anchors, on the Zipf and the
realistic (aligned-token / BM25 statistics of a real index) collections; single-query
latency and concurrent serving.

Rows go to benchmarks/results/sparse_index.json (one per collection x kernel x k x threads,
keyed by those four), with the fields of bench_sparse_index.py plus ``kernel``
(pruned|exhaustive), ``workload`` (zipf|aligned|bm25), ``auto_prunes`` (whether
prune="auto" takes the pruned kernel there), ``load`` (uptime at the start) and ``command``.

- QPS: a batch of queries through ``SparseIndex.search`` (threads=1: GIL-free per-query
  kernel on the calling thread; threads=2: numba's pool), best of ``--repeats``.
- p50/p99: single queries, one thread (same numbers on both thread rows).
- concurrent (threads=2 rows): two Python threads share the index and search single queries;
  ``concurrent_scaling`` = their QPS / one thread's single-query QPS; results compared with
  the serial ones (``concurrent_equal``).
- exactness: ``alignir_exact`` = ids and float32 scores equal to scipy brute force on the
  checked queries; ``equal_to_exhaustive`` = the whole batch equals the exhaustive kernel.
- bm25s is fed the same postings with unit query weights (it has no query weights): on the
  weighted realistic queries it ranks differently and only its speed is comparable.

    nice -n 10 .venv/bin/python -m benchmarks.speed.bench_pruning --collections zipf-50k,zipf-1m,aligned-1m
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.speed import bench_sparse_index as base  # noqa: E402
from benchmarks.speed import workload  # noqa: E402
from alignir.index import blockmax  # noqa: E402
from alignir.index.sparse import SparseIndex  # noqa: E402

KERNELS = {"pruned": "on", "exhaustive": "off"}


SIZES = {"10k": 10_000, "50k": 50_000, "200k": 200_000, "1m": 1_000_000, "10m": 10_000_000}


def parse_collection(name: str, stats_path: Path) -> tuple[str, int, Path | None]:
    """``zipf-SIZE`` | ``LEG-SIZE`` (statistics from ``stats_path``) | ``LEG@DATA-SIZE``
    (statistics from benchmarks/results/workload_stats_DATA.json), LEG aligned or bm25 ->
    (leg or "zipf", n docs, statistics file or None)."""
    kind, _, size = name.rpartition("-")
    leg, _, data = kind.partition("@")
    if size not in SIZES or leg not in ("zipf",) + workload.LEGS or (leg == "zipf" and data):
        raise SystemExit(f"bad collection {name!r}: zipf-SIZE, LEG-SIZE or LEG@DATA-SIZE with LEG in "
                         f"{workload.LEGS} and SIZE in {sorted(SIZES)}")
    if leg == "zipf":
        if f"synthetic-{size}" not in base.COLLECTIONS:
            raise SystemExit(f"no Zipf collection of size {size}")
        return leg, SIZES[size], None
    return leg, SIZES[size], (ROOT / f"benchmarks/results/workload_stats_{data}.json" if data else stats_path)


def load_collection(name: str, cache: Path, stats_path: Path, n_queries: int):
    """(D, Q, workload) of a named collection, cached as .npz under ``cache``."""
    kind, n, stats_file = parse_collection(name, stats_path)
    d = cache / name
    if (d / "docs.npz").exists():
        D, Q = sp.load_npz(d / "docs.npz"), sp.load_npz(d / "queries.npz")
    else:
        if kind == "zipf":
            size = name.rpartition("-")[2]
            _, nnz, vocab = base.COLLECTIONS[f"synthetic-{size}"]
            D = base.zipf_csr(n, nnz, vocab, seed=1)
            Q = base.zipf_csr(base.N_QUERIES, base.QUERY_TOKENS, vocab, seed=2, binary=True)
        else:
            stats = json.loads(stats_file.read_text())
            D, Q = workload.generate(stats, kind, n, base.N_QUERIES, seed=1)
        d.mkdir(parents=True, exist_ok=True)
        sp.save_npz(d / "docs.npz", D, compressed=False)
        sp.save_npz(d / "queries.npz", Q, compressed=False)
    return D.tocsr(), Q.tocsr()[:n_queries], kind


def exact_topk(D, Q, k, batch=20):
    """Brute-force scipy top-k over documents sharing a term (score desc, doc asc)."""
    docs = np.full((Q.shape[0], k), -1, np.int64)
    scores = np.full((Q.shape[0], k), -np.inf, np.float32)
    DT = D.T.tocsr()
    B = (D != 0).astype(np.float32).T.tocsr()
    for s in range(0, Q.shape[0], batch):
        S = (Q[s:s + batch] @ DT).toarray()
        P = ((Q[s:s + batch] != 0).astype(np.float32) @ B).toarray() > 0
        for i in range(S.shape[0]):
            cand = np.flatnonzero(P[i])
            top = cand[np.lexsort((cand, -S[i, cand].astype(np.float64)))[:k]]
            docs[s + i, :len(top)] = top
            scores[s + i, :len(top)] = S[i, top]
    return docs, scores


def timed_batch(idx, Q, k, threads, prune, repeats):
    idx.search(Q[:4], k, threads=threads, prune=prune)
    best, _, out = base.best_time(lambda: idx.search(Q, k, threads=threads, prune=prune),
                                  repeats)
    return Q.shape[0] / best, out


def latencies(idx, Q, k, prune):
    rows = [Q[i] for i in range(Q.shape[0])]
    idx.search(rows[0], k, prune=prune)
    lat = []
    for q in rows:
        t = time.perf_counter()
        idx.search(q, k, prune=prune)
        lat.append(time.perf_counter() - t)
    lat = np.array(lat) * 1000
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), len(rows) / (
        lat.sum() / 1000)


def concurrent(idx, Q, k, prune, n_threads=2):
    """QPS of n Python threads searching single queries on one shared index, and whether
    every result equals the serial one."""
    rows = [Q[i] for i in range(Q.shape[0])]
    want = idx.search(Q, k, threads=1, prune=prune)
    got = [None] * len(rows)

    def work(t):
        for i in range(t, len(rows), n_threads):
            got[i] = idx.search(rows[i], k, prune=prune)

    work_threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    t0 = time.perf_counter()
    for t in work_threads:
        t.start()
    for t in work_threads:
        t.join()
    dt = time.perf_counter() - t0
    equal = all(np.array_equal(g[0][0], want[0][i]) and
                np.array_equal(g[1][0].view(np.uint32), want[1][i].view(np.uint32))
                for i, g in enumerate(got))
    return len(rows) / dt, equal


def merge_exact(a_d, a_s, b_d, b_s, k):
    """Two exact top-k lists [nq, k] (global doc numbers, -1 / -inf padded) -> the top-k of both
    by (score desc, doc asc)."""
    if a_d is None:
        return b_d, b_s
    d = np.concatenate([a_d, b_d], axis=1)
    s = np.concatenate([a_s, b_s], axis=1)
    out_d = np.full((d.shape[0], k), -1, np.int64)
    out_s = np.full((d.shape[0], k), -np.inf, np.float32)
    for i in range(d.shape[0]):
        ok = np.flatnonzero(d[i] >= 0)
        top = ok[np.lexsort((d[i, ok], -s[i, ok].astype(np.float64)))[:k]]
        out_d[i, :len(top)] = d[i, top]
        out_s[i, :len(top)] = s[i, top]
    return out_d, out_s


#: documents per shard of a sharded collection (one generated CSR, one index segment)
SHARD = 1_000_000


def build_sharded(name, stats_path, n_queries, n_check, kmax, quantize, log):
    """A collection too large for one CSR in memory (10M): generated shard by shard (1M documents,
    its own seed, appended to the index as its own segment), the queries of the first shard, and
    the brute-force top-k of each shard (on the weights the index decoded) merged across shards.
    Returns (index, queries, exact docs, exact scores, kind, build seconds)."""
    kind, n, stats_file = parse_collection(name, stats_path)
    stats = json.loads(stats_file.read_text())
    idx = Q = ex_d = ex_s = None
    build_s = 0.0
    for shard in range(n // SHARD):
        D, Qs = workload.generate(stats, kind, SHARD, base.N_QUERIES, seed=1 + shard)
        D = D.tocsr()
        Q = Qs.tocsr()[:n_queries] if Q is None else Q
        t = time.perf_counter()
        if idx is None:
            idx = SparseIndex.from_csr(D, quantize=quantize)
        else:
            idx.add(D)
        build_s += time.perf_counter() - t
        del D
        dec = idx._segments[-1].decoded(Q.shape[1])
        d, sc = exact_topk(dec, Q[:n_check], kmax)
        del dec
        d[d >= 0] += shard * SHARD
        ex_d, ex_s = merge_exact(ex_d, ex_s, d, sc, kmax)
        log(f"{name}: shard {shard + 1}/{n // SHARD} indexed and brute-forced")
    return idx, Q, ex_d, ex_s, kind, build_s


def bench(name, ks, threads_list, engines, repeats, work, stats_path, n_queries, n_check,
          log, quantize=None):
    if parse_collection(name, stats_path)[1] > SHARD:
        idx, Q, exact_d, exact_s, kind, build_s = build_sharded(
            name, stats_path, n_queries, n_check, max(ks), quantize, log)
        D = None
        engines = []  # bm25s's and Lucene's own indexes would not fit beside ours
    else:
        D, Q, kind = load_collection(name, work / "cache", stats_path, n_queries)
        exact_d, exact_s = exact_topk(D, Q[:n_check], max(ks))
        t = time.perf_counter()
        idx = SparseIndex.from_csr(D, quantize=quantize)
        build_s = time.perf_counter() - t
    log(f"{name}: {idx.n_docs} docs, {idx.n_postings} postings, {Q.shape[0]} queries, "
        f"{Q.nnz / Q.shape[0]:.1f} terms/query; brute force done")
    Qc = Q[:n_check]
    t = time.perf_counter()
    bms = [s.block_maxima(blockmax.SUB_BITS) for s in idx._segments]
    derive_s = time.perf_counter() - t
    cap_ratio = max(bm.cap_ratio for bm in bms)
    auto = cap_ratio <= blockmax.AUTO_MAX_CAP_RATIO
    q_pos = bool(Q.nnz and Q.data.min() > 0)
    bm25 = base.bm25s_scores(D) if D is not None else None
    qtok = [Q.indices[Q.indptr[i]:Q.indptr[i + 1]].astype(np.int32) for i in range(Q.shape[0])]
    lucene = None
    info = {"build_s": build_s, "blockmax_derive_s": derive_s,
            "blockmax_bytes_per_posting": sum(bm.nbytes for bm in bms) / idx.n_postings,
            "bytes_per_posting": idx.nbytes() / idx.n_postings, "cap_ratio": cap_ratio,
            "query_weights_positive": q_pos, "n_docs": idx.n_docs, "n_postings": int(idx.n_postings),
            "n_segments": idx.n_segments, "quantize": quantize,
            "n_queries": Q.shape[0], "recall_queries": Qc.shape[0],
            "query_terms_mean": Q.nnz / Q.shape[0]}
    if "pyserini" in engines:
        ldir, s = base.pyserini_build(D, work / f"{name}-pyserini", threads=max(threads_list))
        info["pyserini_build_s"] = s
        lucene = base.Lucene(ldir)
        jq = lucene.queries(Q)
        log(f"{name}: Lucene built in {s:.0f}s")
    rows = []
    for k in ks:
        anchors = {}
        for th in threads_list:
            anchors[th] = {"bm25s_qps": None, "pyserini_qps": None}
            if bm25 is not None:
                anchors[th]["bm25s_qps"] = base.run_bm25s(bm25, qtok, k, th, repeats)[0]
            if lucene is not None:
                lq, _, _ = lucene.run(jq, Q.shape[0], k, th, max(1, repeats - 1))
                anchors[th]["pyserini_qps"] = lq
        ref = idx.search(Q, k, threads=1, prune="off")
        for kernel, prune in KERNELS.items():
            p50, p99, sq_qps = latencies(idx, Q, k, prune)
            for th in threads_list:
                qps, (docs, scores) = timed_batch(idx, Q, k, th, prune, repeats)
                r = {"collection": name, "workload": kind, "kernel": kernel, "k": k,
                     "threads": th, "alignir_qps": qps, **anchors[th],
                     "p50_ms": p50, "p99_ms": p99, "single_query_qps": sq_qps,
                     "auto_prunes": bool(auto and q_pos)}
                r["alignir_exact"] = bool(
                    np.array_equal(docs[:n_check], exact_d[:, :k])
                    and np.array_equal(scores[:n_check].view(np.uint32),
                                       exact_s[:, :k].view(np.uint32)))
                r["equal_to_exhaustive"] = bool(
                    np.array_equal(docs, ref[0])
                    and np.array_equal(scores.view(np.uint32), ref[1].view(np.uint32)))
                r["alignir_recall"] = base.recall(docs[:n_check], exact_d, exact_s, D, Qc, k) \
                    if q_pos and D is not None else float(r["alignir_exact"])
                if r["bm25s_qps"]:
                    r["ratio_vs_bm25s"] = qps / r["bm25s_qps"]
                if r["pyserini_qps"]:
                    r["ratio_vs_pyserini"] = qps / r["pyserini_qps"]
                if th > 1:
                    cq, eq = concurrent(idx, Q, k, prune, th)
                    r.update(concurrent_qps=cq, concurrent_equal=eq,
                             concurrent_scaling=cq / sq_qps)
                r.update(info)
                log(json.dumps({x: (round(v, 3) if isinstance(v, float) else v)
                                for x, v in r.items()}))
                rows.append(r)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", default="zipf-50k,zipf-1m,aligned-1m")
    ap.add_argument("--ks", default="10,100,1000")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--engines", default="bm25s,pyserini",
                    help="anchors on collections under 100k docs (bm25s always runs)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queries", type=int, default=1000, help="queries under 100k docs")
    ap.add_argument("--queries-1m", type=int, default=300)
    ap.add_argument("--check-1m", type=int, default=100,
                    help="queries checked against brute force on large collections")
    ap.add_argument("--stats", default=str(ROOT / "benchmarks/results/workload_stats_med.json"))
    ap.add_argument("--work", default="/tmp/alignir_bench_pruning")
    ap.add_argument("--quantize", default=None, choices=["uint8", "uint16"],
                    help="quantised postings (a 10M aligned-token collection fits in memory with uint8)")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/sparse_index.json"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    command = "nice -n 10 .venv/bin/python -m benchmarks.speed.bench_pruning " + " ".join(
        sys.argv[1:] if argv is None else argv)

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    out = Path(a.out)
    for name in a.collections.split(","):
        big = parse_collection(name, Path(a.stats))[1] > 100_000
        engines = ["bm25s"] if big else a.engines.split(",")
        rows = bench(name, [int(x) for x in a.ks.split(",")],
                     [int(x) for x in a.threads.split(",")], engines,
                     1 if big else a.repeats, work, Path(a.stats),
                     a.queries_1m if big else a.queries, a.check_1m if big else a.queries, log,
                     quantize=a.quantize)
        for r in rows:
            r.update(command=command, load=load)
            if a.note:
                r["note"] = a.note
        old = json.loads(out.read_text()) if out.exists() else []
        key = lambda r: (r["collection"], r.get("kernel"), r["k"], r["threads"],  # noqa: E731
                         r.get("quantize"))
        done = {key(r) for r in rows}
        out.write_text(json.dumps([r for r in old if key(r) not in done] + rows, indent=1)
                       + "\n")
        log(f"wrote {len(rows)} rows for {name} to {out}")


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    main()
