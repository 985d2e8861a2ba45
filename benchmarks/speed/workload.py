"""Realistic sparse workloads: statistics of a real alignir index, and
collections of any size sampled from them.

``extract`` reads an index built by ``alignir build-index`` (aligned-token leg after the
default PC1 removal, and the BM25 leg) and encodes the dataset's queries once with the
index's own encoder; it keeps, per leg: the document-frequency spectrum (how many terms have
each df), document lengths (terms per document), the weight distribution per df-fraction
bucket (quantiles), and the query shapes (terms per query, the df-fraction bucket of each
query term, query weights). The result is a small JSON (``benchmarks/results/
workload_stats_*.json``), so ``generate`` needs no LLM.

``generate`` draws a collection of n documents: each term keeps its document fraction df/N
as its sampling weight, each document draws its length from the real lengths and that many
distinct terms (numba, like the Zipf generator of bench_sparse_index), each posting a weight
from its term's bucket, and each query its length, its terms' buckets and its weights.
Terms are independent across documents (no topical clustering), which is the main way it
differs from a real collection.

    .venv/bin/python -m benchmarks.speed.workload extract --index /work/idx/med \\
        --dataset ../shared/datasets/med --out benchmarks/results/workload_stats_med.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import njit

ROOT = Path(__file__).resolve().parents[2]


LEVELS = np.linspace(0.0, 1.0, 101)
LEGS = ("aligned", "bm25")


def _bucket(frac: np.ndarray) -> np.ndarray:
    """Bucket of a document fraction: floor(log2(df/N)), from -30 (rare) to 0 (every doc)."""
    return np.clip(np.floor(np.log2(np.maximum(frac, 2.0 ** -30))), -30, 0).astype(int)


def leg_stats(D: sp.csr_matrix, Q: sp.csr_matrix) -> dict:
    """Statistics of one leg: documents D [n, V] and encoded queries Q [nq, V]."""
    n = D.shape[0]
    df = np.asarray((D != 0).sum(axis=0)).ravel()
    used = np.flatnonzero(df)
    vals, counts = np.unique(df[used], return_counts=True)
    bucket_of = _bucket(df / n)
    cols = D.tocoo().col
    w_b = bucket_of[cols]
    weights = {}
    for b in np.unique(w_b):
        w = D.data[w_b == b]
        weights[str(int(b))] = np.quantile(w, LEVELS).astype(float).round(6).tolist()
    q_terms = Q.indices
    q_b = bucket_of[q_terms]
    qb_vals, qb_counts = np.unique(q_b, return_counts=True)
    return {
        "n_docs": int(n), "n_terms_used": int(used.size), "n_postings": int(D.nnz),
        "df_counts": [[int(v), int(c)] for v, c in zip(vals, counts)],
        "doc_len_quantiles": np.quantile(np.diff(D.indptr), LEVELS).astype(float).tolist(),
        "weight_quantiles_by_bucket": weights,
        "query_len": np.diff(Q.indptr).astype(int).tolist(),
        "query_term_buckets": [[int(b), int(c)] for b, c in zip(qb_vals, qb_counts)],
        "query_term_unknown": int((df[q_terms] == 0).sum()),
        "query_weight_quantiles": np.quantile(Q.data, LEVELS).astype(float).round(6).tolist(),
        "query_weight_min": float(Q.data.min()) if Q.nnz else None,
    }


def extract(index_dir: str, dataset: str, out: str, split: str = "test") -> dict:
    """Statistics of both legs of an index (encodes the dataset's queries once)."""
    from alignir.index.sparse import kernels  # noqa: F401  (numba warm import)
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.searcher import Searcher

    s = Searcher.open(index_dir)
    data = load_beir(dataset, split=split)
    texts = list(data.queries.values())
    batch = s.encode(texts)
    out_d = {"source": {"index": str(index_dir), "dataset": str(dataset), "split": split,
                        "params": s.index.manifest.get("params"),
                        "n_queries": len(texts)},
             "command": "python -m benchmarks.speed.workload " + " ".join(sys.argv[1:])}
    legs = {"aligned": (s.index.sparse, batch.legs["sparse"])}
    if s.index.lexical is not None:
        legs["bm25"] = (s.index.lexical.index, batch.legs["bm25"])
    for name, (idx, Q) in legs.items():
        D = _index_to_csr(idx)
        out_d[name] = leg_stats(D, sp.csr_matrix(Q, dtype=np.float32))
    Path(out).write_text(json.dumps(out_d, indent=1) + "\n")
    return out_d


def _index_to_csr(idx) -> sp.csr_matrix:
    """The live documents of a SparseIndex as decoded float32 CSR rows."""
    from alignir.index import kernels
    parts = []
    for s in idx._segments:
        keep = (s.deleted == 0).astype(np.uint8)
        ip, ix, dt = kernels.postings_to_csr(*s.kernel_arrays(), s.n_terms, s.nb, s.n, keep)
        parts.append(sp.csr_matrix((dt, ix, ip), shape=(int(keep.sum()), idx.n_terms)))
    return sp.vstack(parts, format="csr")


def _sample_quantiles(rng, q: list[float], size: int) -> np.ndarray:
    return np.interp(rng.random(size), LEVELS, np.asarray(q, dtype=np.float64))


def generate(stats: dict, leg: str, n_docs: int, n_queries: int, seed: int = 0,
             chunk: int = 100_000) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """A collection of ``n_docs`` documents and ``n_queries`` queries with the leg's
    statistics (see the module docstring). Returns float32 CSR (docs, queries)."""
    st = stats[leg]
    rng = np.random.default_rng(seed)
    n0 = st["n_docs"]
    df = np.repeat([d for d, _ in st["df_counts"]], [c for _, c in st["df_counts"]])
    vocab = df.shape[0]
    frac = df / n0
    p = frac / frac.sum()
    cdf = np.cumsum(p)
    bucket = _bucket(frac)
    wq = {int(b): v for b, v in st["weight_quantiles_by_bucket"].items()}
    ptrs, idxs = [np.zeros(1, np.int64)], []
    base = 0
    lens_q = st["doc_len_quantiles"]
    for s0 in range(0, n_docs, chunk):
        m = min(chunk, n_docs - s0)
        lens = np.maximum(1, np.rint(_sample_quantiles(rng, lens_q, m))).astype(np.int64)
        width = int(lens.max() * 1.6) + 16
        u = rng.random((m, width))
        draws = np.minimum(np.searchsorted(cdf, u), vocab - 1).astype(np.int32)
        ip, ix = _ragged_distinct(draws, lens, vocab)
        ptrs.append(ip[1:] + base)
        idxs.append(ix)
        base += ix.shape[0]
    indptr = np.concatenate(ptrs)
    indices = np.concatenate(idxs)
    data = np.empty(indices.shape[0], np.float32)
    tb = bucket[indices]
    for b in np.unique(tb):
        sel = np.flatnonzero(tb == b)
        q = wq.get(int(b)) or wq[min(wq, key=lambda x: abs(x - int(b)))]
        data[sel] = _sample_quantiles(rng, q, sel.size)
    data = np.maximum(data, np.float32(1e-6))
    D = sp.csr_matrix((data, indices, indptr), shape=(n_docs, vocab))
    D.sort_indices()
    # queries: length, each term's df bucket, weights
    qb = np.array([b for b, _ in st["query_term_buckets"]])
    qc = np.array([c for _, c in st["query_term_buckets"]], dtype=np.float64)
    by_bucket = {int(b): np.flatnonzero(bucket == b) for b in np.unique(bucket)}
    rows, cols = [], []
    for i in range(n_queries):
        L = int(rng.choice(st["query_len"]))
        bs = rng.choice(qb, size=L, p=qc / qc.sum())
        terms = set()
        for b in bs:
            pool = by_bucket.get(int(b))
            if pool is None:
                pool = by_bucket[min(by_bucket, key=lambda x: abs(x - int(b)))]
            terms.add(int(rng.choice(pool)))
        cols.extend(sorted(terms))
        rows.extend([i] * len(terms))
    qw = _sample_quantiles(rng, st["query_weight_quantiles"], len(cols)).astype(np.float32)
    if st.get("query_weight_min") is not None and st["query_weight_min"] > 0:
        qw = np.maximum(qw, np.float32(st["query_weight_min"]))
    Q = sp.csr_matrix((qw, (np.array(rows, np.int64), np.array(cols, np.int64))),
                      shape=(n_queries, vocab), dtype=np.float32)
    Q.sort_indices()
    return D, Q


@njit  # no cache: the module is imported both as `workload` (script) and `benchmarks.speed.workload`
def _ragged_distinct(draws, lens, vocab):
    """First lens[i] distinct ids of each row of draws (fewer if the row runs out)."""
    n = draws.shape[0]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(int(lens.sum()), dtype=np.int32)
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
                if m - start == lens[i]:
                    break
        for j in range(start, m):
            seen[indices[j]] = 0
        indptr[i + 1] = m
    return indptr, indices[:m].copy()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="statistics of a built index -> JSON")
    e.add_argument("--index", required=True)
    e.add_argument("--dataset", required=True)
    e.add_argument("--split", default="test")
    e.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "extract":
        st = extract(a.index, a.dataset, a.out, a.split)
        for leg in LEGS:
            if leg in st:
                s = st[leg]
                print(leg, {k: s[k] for k in ("n_docs", "n_terms_used", "n_postings")},
                      "mean query len", np.mean(s["query_len"]))


if __name__ == "__main__":
    main()
