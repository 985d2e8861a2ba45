"""The realistic workload: statistics of a real index's legs, collections
sampled from them, and the pruned kernel exact on them (against scipy brute force)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from alignir.index.sparse import SparseIndex
from benchmarks.speed import bench_pruning
from benchmarks.speed import workload

ROOT = Path(__file__).resolve().parents[1]
STATS = ROOT / "benchmarks" / "results" / "workload_stats_adi.json"


def _toy_leg(seed: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    D = sp.random(300, 500, density=0.03, format="csr", random_state=rng, dtype=np.float32)
    D.data = rng.gamma(2.0, 1.0, D.nnz).astype(np.float32) + 0.01
    Q = sp.random(20, 500, density=0.02, format="csr", random_state=rng, dtype=np.float32)
    Q.data = np.abs(Q.data) + 0.1
    return D, Q


def test_leg_stats_count_what_is_there():
    D, Q = _toy_leg()
    st = workload.leg_stats(D, Q)
    df = np.asarray((D != 0).sum(0)).ravel()
    assert st["n_docs"] == 300 and st["n_postings"] == D.nnz and st["n_terms_used"] == int((df > 0).sum())
    assert sum(c for _, c in st["df_counts"]) == st["n_terms_used"]
    assert sum(v * c for v, c in st["df_counts"]) == D.nnz
    lens = np.diff(D.indptr)
    assert st["doc_len_quantiles"][0] == lens.min() and st["doc_len_quantiles"][-1] == lens.max()
    assert st["query_len"] == np.diff(Q.indptr).tolist()
    assert st["query_weight_quantiles"][0] == pytest.approx(Q.data.min(), rel=1e-5)


def test_generated_collection_follows_the_statistics():
    D0, Q0 = _toy_leg()
    st = {"aligned": workload.leg_stats(D0, Q0)}
    D, Q = workload.generate(st, "aligned", 3000, 40, seed=1)
    assert D.shape == (3000, st["aligned"]["n_terms_used"]) and Q.shape[0] == 40
    lens = np.diff(D.indptr)
    q = st["aligned"]["doc_len_quantiles"]
    assert lens.min() >= max(1, np.floor(q[0])) and lens.max() <= np.ceil(q[-1])
    assert abs(lens.mean() - np.diff(D0.indptr).mean()) < 0.1 * np.diff(D0.indptr).mean()
    # each term keeps its document fraction (the most frequent ones, where sampling noise is small)
    frac0 = np.sort(np.asarray((D0 != 0).sum(0)).ravel())[::-1][:10] / 300
    frac = np.sort(np.asarray((D != 0).sum(0)).ravel())[::-1][:10] / 3000
    np.testing.assert_allclose(frac, frac0, rtol=0.35)
    # weights inside the real range; rows of distinct, sorted terms
    assert D.data.min() >= min(D0.data.min(), 1e-6) - 1e-6 and D.data.max() <= D0.data.max() + 1e-4
    assert all(np.all(np.diff(D.indices[D.indptr[i]:D.indptr[i + 1]]) > 0) for i in range(100))
    assert set(np.diff(Q.indptr)) <= set(range(1, max(st["aligned"]["query_len"]) + 1))


@pytest.mark.skipif(not STATS.exists(), reason="no committed workload statistics")
@pytest.mark.parametrize("leg", workload.LEGS)
def test_pruned_kernel_is_exact_on_the_realistic_workload(leg):
    stats = json.loads(STATS.read_text())
    D, Q = workload.generate(stats, leg, 4000, 30, seed=3)
    want_d, want_s = bench_pruning.exact_topk(D, Q, 10)
    idx = SparseIndex.from_csr(D)
    for prune in ("on", "off"):
        docs, scores = idx.search(Q, 10, threads=1, prune=prune)
        assert np.array_equal(docs, want_d), prune
        assert np.array_equal(scores.view(np.uint32), want_s.view(np.uint32)), prune


def test_collection_names():
    stats = Path("/some/stats.json")
    assert bench_pruning.parse_collection("zipf-50k", stats) == ("zipf", 50_000, None)
    assert bench_pruning.parse_collection("aligned-1m", stats) == ("aligned", 1_000_000, stats)
    leg, n, path = bench_pruning.parse_collection("bm25@scifact-10k", stats)
    assert (leg, n, path.name) == ("bm25", 10_000, "workload_stats_scifact.json")
    for bad in ("dense-1m", "aligned-3m", "zipf@med-1m", "zipf-10k"):
        with pytest.raises(SystemExit):
            bench_pruning.parse_collection(bad, stats)


@pytest.mark.skipif(not STATS.exists(), reason="no committed workload statistics")
@pytest.mark.parametrize("quantize", [None, "uint8"])
def test_sharded_collection_equals_one_built_at_once(monkeypatch, quantize):
    """The 10M benchmark builds its collection shard by shard (one segment each) and merges the
    shards' brute-force top-k: on 4 shards of 500 documents (a 2k size and 60 generated queries
    for the test) that must equal the index and the brute force of the same documents stacked."""
    monkeypatch.setattr(bench_pruning, "SHARD", 500)
    monkeypatch.setitem(bench_pruning.SIZES, "2k", 2_000)
    monkeypatch.setattr(bench_pruning.base, "N_QUERIES", 60)
    idx, Q, ex_d, ex_s, kind, _ = bench_pruning.build_sharded(
        "aligned@adi-2k", STATS.parent / "unused.json", 30, 30, 20, quantize, lambda msg: None)
    assert kind == "aligned" and idx.n_segments == 4 and idx.n_docs == 2_000
    stats = json.loads(STATS.read_text())
    nq = bench_pruning.base.N_QUERIES
    shards = [workload.generate(stats, "aligned", 500, nq, seed=1 + s) for s in range(4)]
    assert (shards[0][1][:30] != Q).nnz == 0
    if quantize is None:
        D = sp.vstack([docs for docs, _ in shards]).tocsr()
        want_d, want_s = bench_pruning.exact_topk(D, Q, 20)
        assert np.array_equal(ex_d, want_d)
        assert np.array_equal(ex_s.view(np.uint32), want_s.view(np.uint32))
    docs, scores = idx.search(Q, 20, threads=1, prune="off")
    assert np.array_equal(docs, ex_d)
    assert np.array_equal(scores.view(np.uint32), ex_s.view(np.uint32))
