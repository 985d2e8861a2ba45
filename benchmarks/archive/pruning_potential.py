"""How much could *any* safe dynamic pruning skip on a collection? An oracle bound (why the
pruned kernel barely beats the exhaustive one on our workloads).

Both oracles know each query's final k-th score ``theta`` in advance (a real pruner only reaches
it gradually), so what they cannot skip, no safe pruner of that family can:

- **block-max** (Mallia, Suel, Tonellotto, "Faster Learned Sparse Retrieval with Block-Max
  Pruning", SIGIR 2024): documents in sub-blocks of ``b`` consecutive ids, the exact maximum of
  every (term, sub-block) pair; a sub-block survives when ``sum_t q_t * max(t, block) >= theta``.
  Reported per ``b``: the surviving share of sub-blocks and of the query terms' postings (the
  scoring work left), and the (term, sub-block) pairs the bounds need relative to the postings
  (the metadata a query reads to compute its bounds).
- **MaxScore** (Turtle & Flood 1995): a term is *non-essential* when the upper bounds
  ``q_t * max_t`` of it and of all smaller-bound terms sum below ``theta``; only the essential
  terms' lists must be traversed. Reported: the essential share of the postings and the number
  of candidates (documents of the essential lists whose partial score plus the non-essential
  bounds reaches ``theta``), each of which needs a lookup in every non-essential list.

Documents of the synthetic collections (benchmarks/speed/workload.py, bench_sparse_index.py) draw their
terms independently: no topical clustering in id order, which is what block-max bounds need to be
tight (the BMP paper reorders documents first). Rows go to benchmarks/results/pruning_potential.json.

    nice -n 10 .venv/bin/python -m benchmarks.archive.pruning_potential --collections zipf-1m,aligned@med-1m,bm25@med-1m
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]
from benchmarks.speed.bench_pruning import load_collection  # noqa: E402


def kth_scores(DT: sp.csr_matrix, Q: sp.csr_matrix, ks: list[int]) -> dict[int, np.ndarray]:
    """Each query's k-th best exact score (0 when fewer than k documents share a term);
    ``DT``: the (terms x documents) postings."""
    S = (Q @ DT).toarray()
    S.sort(axis=1)
    return {k: S[:, -k] for k in ks}


def block_maxima(D: sp.csr_matrix, size: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(sub-blocks x terms) exact maximum weight and posting count of every (sub-block, term)
    pair with a posting, of the documents of ``D`` (ids in order, sub-blocks of ``size``)."""
    C = D.tocoo()
    key = (C.row // size).astype(np.int64) * D.shape[1] + C.col
    order = np.argsort(key, kind="stable")
    key, vals = key[order], C.data[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    uk = key[starts]
    where = (uk // D.shape[1], uk % D.shape[1])
    shape = (-(-D.shape[0] // size), D.shape[1])
    counts = np.diff(np.r_[starts, len(key)]).astype(np.float32)
    return (sp.csr_matrix((np.maximum.reduceat(vals, starts), where), shape=shape),
            sp.csr_matrix((counts, where), shape=shape))


def blockmax_oracle(D, Q, theta: dict[int, np.ndarray], size: int, chunk: int = 1 << 16) -> dict:
    """Share of sub-blocks / postings whose bound reaches theta (medians and p90 over queries);
    the maxima are computed ``chunk`` documents at a time (memory)."""
    Qb = (Q != 0).astype(np.float32)
    bounds, postings, pairs, n_pairs = [], [], [], 0
    step = max(size, chunk // size * size)
    for lo in range(0, D.shape[0], step):
        M, cnt = block_maxima(D[lo:lo + step], size)
        n_pairs += M.nnz
        bounds.append((Q @ M.T.tocsr()).toarray())
        postings.append((Qb @ cnt.T.tocsr()).toarray())
        pairs.append((Qb @ (M != 0).astype(np.float32).T.tocsr()).toarray())
    bounds, postings, pairs = (np.hstack(x) for x in (bounds, postings, pairs))
    out = {"sub_block": size, "pairs_per_posting": round(n_pairs / D.nnz, 4),
           "query_pairs_per_posting": round(float(np.median(pairs.sum(1) / np.maximum(postings.sum(1), 1))), 4)}
    for k, t in theta.items():
        alive = bounds >= t[:, None]
        work = (postings * alive).sum(1) / np.maximum(postings.sum(1), 1)
        out[f"k{k}_blocks_alive"] = round(float(np.median(alive.mean(1))), 4)
        out[f"k{k}_postings_p50"] = round(float(np.median(work)), 4)
        out[f"k{k}_postings_p90"] = round(float(np.quantile(work, 0.9)), 4)
    return out


def maxscore_oracle(DT, Q, theta: dict[int, np.ndarray]) -> dict:
    """Essential-list share of the postings and the candidates needing lookups (median, p90);
    ``DT``: the (terms x documents) postings."""
    lens = np.diff(DT.indptr)
    tmax = np.zeros(DT.shape[0], np.float32)
    nz = lens > 0
    tmax[nz] = np.maximum.reduceat(DT.data, DT.indptr[:-1][nz])
    out = {}
    for k, t in theta.items():
        share, cands = [], []
        for i in range(Q.shape[0]):
            lo, hi = Q.indptr[i], Q.indptr[i + 1]
            terms, qw = Q.indices[lo:hi], Q.data[lo:hi]
            ub = qw * tmax[terms]
            order = np.argsort(ub, kind="stable")
            cum = np.cumsum(ub[order])
            n_non = int(np.searchsorted(cum, t[i], side="left"))
            ess = terms[order[n_non:]]
            share.append(lens[ess].sum() / max(lens[terms].sum(), 1))
            rest = float(cum[n_non - 1]) if n_non else 0.0
            part = (sp.csr_matrix((qw[order[n_non:]], (np.zeros(len(ess), int), ess)), shape=(1, DT.shape[0]))
                    @ DT).toarray().ravel()
            hit = np.asarray((DT[ess] != 0).sum(0)).ravel() > 0
            cands.append(int((hit & (part + rest >= t[i])).sum()))
        out[f"k{k}_essential_postings_p50"] = round(float(np.median(share)), 4)
        out[f"k{k}_essential_postings_p90"] = round(float(np.quantile(share, 0.9)), 4)
        out[f"k{k}_candidates_p50"] = int(np.median(cands))
        out[f"k{k}_candidates_p90"] = int(np.quantile(cands, 0.9))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", default="zipf-1m,aligned@med-1m,bm25@med-1m")
    ap.add_argument("--ks", default="10,100,1000")
    ap.add_argument("--sub-blocks", default="8,16,32,64,128")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--stats", default=str(ROOT / "benchmarks/results/workload_stats_med.json"))
    ap.add_argument("--work", default="/tmp/alignir_bench_pruning",
                    help="bench_pruning.py's cache of generated collections")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/pruning_potential.json"))
    a = ap.parse_args(argv)
    command = "nice -n 10 .venv/bin/python -m benchmarks.archive.pruning_potential " + " ".join(
        sys.argv[1:] if argv is None else argv)
    ks = [int(x) for x in a.ks.split(",")]
    out = Path(a.out)
    for name in a.collections.split(","):
        D, Q, kind = load_collection(name, Path(a.work) / "cache", Path(a.stats), a.queries)
        D, Q = D.astype(np.float32, copy=False), Q.astype(np.float32)
        DT = D.T.tocsr()
        theta = kth_scores(DT, Q, ks)
        row = {"collection": name, "workload": kind, "docs": D.shape[0], "postings": int(D.nnz),
               "queries": Q.shape[0], "query_terms_mean": round(Q.nnz / Q.shape[0], 1),
               "maxscore": maxscore_oracle(DT, Q, theta),
               "blockmax": [blockmax_oracle(D, Q, theta, int(b)) for b in a.sub_blocks.split(",")],
               "command": command}
        print(json.dumps(row), flush=True)
        old = json.loads(out.read_text()) if out.exists() else []
        out.write_text(json.dumps([r for r in old if r["collection"] != name] + [row], indent=1) + "\n")


if __name__ == "__main__":
    main()
