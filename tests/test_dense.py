"""DenseIndex: exact scores vs numpy brute force, the allowed filter, whitening, files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from alignir.index.dense import DenseIndex, Transform

RNG = np.random.default_rng(7)
N, D = 600, 24
X = (RNG.standard_normal((N, D)) * np.linspace(3.0, 0.2, D) + 1.5).astype(np.float32)  # anisotropic
Q = RNG.standard_normal((9, D)).astype(np.float32)


def brute(q: np.ndarray, x: np.ndarray, k: int, cand: np.ndarray | None = None):
    """Reference top-k: score desc, doc number asc; padded with -1 / -inf."""
    cand = np.arange(len(x)) if cand is None else np.sort(np.asarray(cand))
    s = q.astype(np.float64) @ x[cand].astype(np.float64).T
    docs = np.full((len(q), k), -1, dtype=np.int64)
    scores = np.full((len(q), k), -np.inf, dtype=np.float64)
    for i in range(len(q)):
        order = np.lexsort((cand, -s[i]))[:k]
        docs[i, :len(order)] = cand[order]
        scores[i, :len(order)] = s[i, order]
    return docs, scores


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("normalize", [False, True])
def test_flat_matches_brute_force(normalize):
    idx = DenseIndex.build(X, normalize=normalize)
    docs, scores = idx.search(Q, 10)
    ref_x, ref_q = (unit(X), unit(Q)) if normalize else (X, Q)
    rd, rs = brute(ref_q, ref_x, 10)
    assert docs.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(docs, rd)
    np.testing.assert_allclose(scores, rs, rtol=1e-5, atol=1e-4)


def test_centering_subtracts_the_corpus_mean_from_docs_and_queries():
    idx = DenseIndex.build(X, center=True)
    mu = X.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(idx.transform.mean, mu, rtol=1e-6, atol=1e-6)
    docs, scores = idx.search(Q, 7)
    rd, rs = brute(Q - mu, X - mu, 7)
    np.testing.assert_array_equal(docs, rd)
    np.testing.assert_allclose(scores, rs, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("whiten", ["zca", "pca"])
def test_whitening_gives_identity_covariance_and_same_map_for_queries(whiten):
    idx = DenseIndex.build(X, whiten=whiten, whiten_eps=0.0)
    xt = Transform.apply(idx.transform, X).astype(np.float64)
    cov = np.cov(xt, rowvar=False)
    np.testing.assert_allclose(cov, np.eye(cov.shape[0]), atol=1e-3)
    # queries go through exactly (q - mean) @ W; documents were indexed the same way
    qt = idx.transform_queries(Q)
    np.testing.assert_allclose(qt, (Q - idx.transform.mean) @ idx.transform.matrix, rtol=1e-5, atol=1e-5)
    docs, scores = idx.search(Q, 8)
    rd, rs = brute(qt, xt, 8)
    np.testing.assert_array_equal(docs, rd)
    np.testing.assert_allclose(scores, rs, rtol=1e-4, atol=1e-3)


def test_zca_and_full_rank_pca_whitening_agree_and_pca_dim_truncates():
    zca = DenseIndex.build(X, whiten="zca")
    pca = DenseIndex.build(X, whiten="pca")
    assert zca.dim == D and pca.dim == D
    dz, sz = zca.search(Q, 10)
    dp, sp_ = pca.search(Q, 10)
    np.testing.assert_array_equal(dz, dp)
    np.testing.assert_allclose(sz, sp_, rtol=1e-4, atol=1e-4)
    small = DenseIndex.build(X, whiten="pca", whiten_dim=5)
    assert small.dim == 5 and small.transform_queries(Q).shape == (len(Q), 5)


def test_whitening_drops_the_null_space_when_docs_are_fewer_than_dims():
    few = X[:10]
    idx = DenseIndex.build(few, whiten="pca")
    assert idx.dim == 9  # rank of 10 centred points
    assert np.isfinite(idx.search(Q, 3)[1]).all()


@pytest.mark.parametrize("kind,opts", [("flat", {}), ("hnsw", {"hnsw_m": 8, "ef_search": 16}),
                                        ("ivfpq", {"nlist": 8, "pq_m": 4, "pq_nbits": 6, "nprobe": 2})])
@pytest.mark.parametrize("exact_below", [0, 10_000])
def test_allowed_filter_is_exact(kind, opts, exact_below):
    idx = DenseIndex.build(X, kind=kind, exact_below=exact_below, **opts)
    allowed = np.sort(RNG.choice(N, 40, replace=False))
    docs, scores = idx.search(Q, 60, allowed=allowed)  # k > |allowed|
    for row_d, row_s in zip(docs, scores):
        got = row_d[row_d >= 0]
        assert set(got) <= set(allowed.tolist())
        assert len(got) == len(allowed)  # every allowed doc comes back once
        assert len(set(got)) == len(got)
        assert (row_d[40:] == -1).all() and np.isneginf(row_s[40:]).all()
        assert np.all(np.diff(row_s[:40]) <= 1e-6)
    if kind != "ivfpq":  # exact vectors stored: scores are the true inner products
        rd, rs = brute(Q, X, 60, allowed)
        np.testing.assert_array_equal(docs, rd)
        np.testing.assert_allclose(scores, rs, rtol=1e-5, atol=1e-4)


def test_hnsw_filtered_search_refills_when_the_graph_misses_allowed_docs():
    idx = DenseIndex.build(X, kind="hnsw", hnsw_m=4, ef_construction=8, ef_search=1, exact_below=0)
    allowed = np.arange(0, N, 3)
    docs, scores = idx.search(Q, 150, allowed=allowed)
    rd, rs = brute(Q, X, 150, allowed)
    np.testing.assert_array_equal(docs, rd)
    np.testing.assert_allclose(scores, rs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kind,opts", [("ivfpq", {"nlist": 16, "pq_m": 4, "pq_nbits": 6, "nprobe": 1}),
                                        ("hnsw", {"hnsw_m": 4, "ef_construction": 8, "ef_search": 1})])
def test_unfiltered_approximate_search_returns_k_hits_when_the_probe_holds_fewer(kind, opts):
    """nprobe 1 of 16 IVF lists holds ~N/16 documents, fewer than k: the result must still hold k
    documents (the exact refill a filtered search already had), the same as with every doc allowed."""
    idx = DenseIndex.build(X, kind=kind, exact_below=0, **opts)
    k = N // 4
    docs, scores = idx.search(Q, k)
    assert (docs >= 0).all() and np.isfinite(scores).all()
    assert all(len(set(row)) == k for row in docs.tolist())
    every = idx.search(Q, k, allowed=np.arange(N))
    np.testing.assert_array_equal(docs, every[0])


def test_empty_allowed_and_small_collections_pad():
    idx = DenseIndex.build(X[:3])
    d, s = idx.search(Q[:2], 5)
    assert (d[:, 3:] == -1).all() and np.isneginf(s[:, 3:]).all() and (d[:, :3] >= 0).all()
    d, s = idx.search(Q[:2], 5, allowed=[])
    assert (d == -1).all() and np.isneginf(s).all()


def test_remove_is_a_tombstone_and_add_keeps_numbering():
    idx = DenseIndex.build(X[:100])
    top = idx.search(Q, 5)[0]
    gone = np.unique(top[:, 0])
    idx.remove(gone)
    assert idx.n_docs == 100 and idx.n_live == 100 - len(gone)
    keep = np.setdiff1d(np.arange(100), gone)
    d, s = idx.search(Q, 20)
    np.testing.assert_array_equal(d, brute(Q, X[:100], 20, keep)[0])
    # appended docs are numbered after the last row, as in SparseIndex.add
    new = idx.add(X[100:110])
    np.testing.assert_array_equal(new, np.arange(100, 110))
    d, _ = idx.search(Q, 20)
    np.testing.assert_array_equal(d, brute(Q, X[:110], 20, np.r_[keep, np.arange(100, 110)])[0])


def test_add_with_explicit_numbers_gaps_and_flat_update():
    idx = DenseIndex.build(X[:50])
    nums = idx.add(X[50:52], doc_numbers=[55, 53])
    np.testing.assert_array_equal(nums, [55, 53])
    assert idx.n_docs == 56 and idx.n_live == 52  # 50, 51, 52, 54 are tombstoned placeholders
    d, _ = idx.search(Q, 56)
    assert set(d[d >= 0]) == set(range(50)) | {53, 55}
    np.testing.assert_allclose(idx._reconstruct(np.array([55, 53])), X[50:52])
    with pytest.raises(ValueError, match="already live"):
        idx.add(X[:1], doc_numbers=[3])
    idx.remove([3])
    idx.add(X[200:201], doc_numbers=[3])  # update of a removed number (flat only)
    d, s = idx.search(X[200:201], 1)
    assert d[0, 0] == 3
    h = DenseIndex.build(X[:50], kind="hnsw")
    h.remove([3])
    with pytest.raises(ValueError, match="kind='flat'"):
        h.add(X[:1], doc_numbers=[3])


@pytest.mark.parametrize("kind,opts", [("flat", {"whiten": "pca", "whiten_dim": 10, "normalize": True}),
                                        ("hnsw", {"center": True}),
                                        ("ivfpq", {"nlist": 4, "pq_nbits": 5})])
def test_save_load_round_trip_without_pickle(tmp_path, kind, opts):
    idx = DenseIndex.build(X, kind=kind, **opts)
    idx.remove([1, 2, 3])
    before = idx.search(Q, 10, allowed=np.arange(0, N, 2))
    idx.save(tmp_path / "d")
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert "index.faiss" in files and "dense.json" in files and "deleted.npy" in files
    for f in files:
        if f.endswith(".npy"):
            np.load(tmp_path / "d" / f, allow_pickle=False)
    meta = json.loads((tmp_path / "d" / "dense.json").read_text())
    assert meta["params"]["kind"] == kind and meta["n_docs"] == N
    back = DenseIndex.load(tmp_path / "d")
    after = back.search(Q, 10, allowed=np.arange(0, N, 2))
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(back.deleted, idx.deleted)
    np.testing.assert_array_equal(back.transform_queries(Q), idx.transform_queries(Q))


def test_load_rejects_non_index_and_newer_format(tmp_path):
    with pytest.raises(ValueError, match="no dense.json"):
        DenseIndex.load(tmp_path)
    DenseIndex.build(X[:20]).save(tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "dense.json").read_text())
    meta["format_version"] = 99
    (tmp_path / "d" / "dense.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="newer"):
        DenseIndex.load(tmp_path / "d")
    (tmp_path / "d" / "dense.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        DenseIndex.load(tmp_path / "d")


def test_bad_inputs_raise_clear_errors():
    idx = DenseIndex.build(X[:30])
    with pytest.raises(ValueError, match="dimension 5"):
        idx.search(Q[:, :5], 3)
    with pytest.raises(ValueError, match="positive integer"):
        idx.search(Q, 0)
    with pytest.raises(ValueError, match="outside"):
        idx.search(Q, 3, allowed=[0, 30])
    with pytest.raises(ValueError, match="NaN"):
        idx.search(np.full((1, D), np.nan, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="kind"):
        DenseIndex.build(X, kind="lsh")
    with pytest.raises(ValueError, match="center"):
        DenseIndex.build(X, whiten="zca", center=False)
    with pytest.raises(ValueError, match="unknown dense index option"):
        DenseIndex.build(X, efsearch=3)
    with pytest.raises(ValueError, match="0 vectors"):
        DenseIndex.build(np.zeros((0, D), dtype=np.float32))
    with pytest.raises(ValueError, match="at least 256"):
        DenseIndex.build(X[:100], kind="ivfpq", nlist=2)


def test_concurrent_searches_return_what_serial_ones_do():
    from concurrent.futures import ThreadPoolExecutor

    idx = DenseIndex.build(X, kind="ivfpq", nlist=8, pq_m=4, pq_nbits=6, exact_below=100)
    allowed = [np.sort(RNG.choice(N, n, replace=False)) for n in (20, 50, 300, 500)] * 4
    serial = [idx.search(Q, 30, allowed=a) for a in allowed]
    # a second, identical index whose lazy direct map is first built by concurrent threads
    idx2 = DenseIndex.build(X, kind="ivfpq", nlist=8, pq_m=4, pq_nbits=6, exact_below=100)
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda a: idx2.search(Q, 30, allowed=a), allowed))
    for (d1, s1), (d2, s2) in zip(serial, parallel):
        np.testing.assert_array_equal(d1, d2)
        np.testing.assert_array_equal(s1, s2)


def test_mmap_load_searches_the_same_and_refuses_writes(tmp_path):
    idx = DenseIndex.build(X, center=True)
    idx.save(tmp_path / "d")
    m = DenseIndex.load(tmp_path / "d", mmap=True)
    np.testing.assert_array_equal(m.search(Q, 5)[0], idx.search(Q, 5)[0])
    with pytest.raises(ValueError, match="read-only"):
        m.add(X[:1])
    m.remove([0])  # tombstones live outside the mapping
    assert 0 not in m.search(X[:1], 3)[0]
