"""SparseIndex against a brute-force scipy ``Q @ D.T`` top-k (“A Text is Worth Several Tokens” eq.16 scoring)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alignir.index.sparse import SparseIndex


def canon(m) -> sp.csr_matrix:
    c = sp.csr_matrix(m, dtype=np.float32, copy=True)
    c.sum_duplicates()
    c.eliminate_zeros()
    c.sort_indices()
    return c


def brute_force(D, Q, k, allowed=None, live=None):
    """Top-k of Q @ D.T over documents sharing a term with the query, by (score desc,
    doc asc), padded with -1 / -inf; restricted to ``allowed`` and ``live`` doc numbers."""
    D, Q = canon(D), canon(Q)
    S = (Q @ D.T).toarray()
    P = ((Q != 0).astype(np.float32) @ (D != 0).astype(np.float32).T).toarray() > 0
    ok = np.ones(D.shape[0], dtype=bool)
    if allowed is not None:
        mask = np.zeros(D.shape[0], dtype=bool)
        mask[np.asarray(allowed, dtype=np.int64)] = True
        ok &= mask
    if live is not None:
        ok &= live
    docs = np.full((Q.shape[0], k), -1, dtype=np.int64)
    scores = np.full((Q.shape[0], k), -np.inf, dtype=np.float32)
    for i in range(Q.shape[0]):
        cand = np.flatnonzero(P[i] & ok)
        order = np.lexsort((cand, -S[i, cand].astype(np.float64)))[:k]
        top = cand[order]
        docs[i, : len(top)] = top
        scores[i, : len(top)] = S[i, top]
    return docs, scores


def random_csr(rng, n, n_terms, density, sign="pos", integer=False):
    m = sp.random(n, n_terms, density=density, format="csr", dtype=np.float32,
                  random_state=rng)
    if integer:  # small integers: many exact ties
        m.data = rng.integers(1, 4, size=m.nnz).astype(np.float32)
    else:
        m.data = rng.gamma(2.0, 1.0, size=m.nnz).astype(np.float32)
    if sign == "mixed":
        m.data *= rng.choice(np.array([-1.0, 1.0], np.float32), size=m.nnz)
    return m


def assert_same(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])  # bitwise: same float32 sums


@st.composite
def collections(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(0, 80))
    n_terms = draw(st.integers(1, 25))
    sign = draw(st.sampled_from(["pos", "mixed"]))
    integer = draw(st.booleans())
    D = random_csr(rng, n, n_terms, draw(st.sampled_from([0.05, 0.2, 0.6])), sign, integer)
    Q = random_csr(rng, draw(st.integers(1, 6)), n_terms, draw(st.sampled_from([0.1, 0.4])),
                   draw(st.sampled_from(["pos", "mixed"])), draw(st.booleans()))
    if draw(st.booleans()):  # binary query weights (eq.16)
        Q.data[:] = 1.0
    k = draw(st.integers(1, n + 5))
    allowed = None
    if n and draw(st.booleans()):
        allowed = rng.choice(n, size=draw(st.integers(0, n)), replace=False)
    return D, Q, k, allowed


FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FAST
@given(collections(), st.sampled_from([1, 2]))
def test_matches_brute_force(data, threads):
    D, Q, k, allowed = data
    idx = SparseIndex.from_csr(D)
    got = idx.search(Q, k, allowed=allowed, threads=threads)
    assert_same(got, brute_force(D, Q, k, allowed=allowed))


@FAST
@given(collections())
def test_add_delete_merge_equals_fresh_build(data):
    D, Q, k, _ = data
    n = D.shape[0]
    rng = np.random.default_rng(n)
    cut1, cut2 = sorted(rng.integers(0, n + 1, size=2))
    idx = SparseIndex.from_csr(D[:cut1])
    assert idx.add(D[cut1:cut2]).tolist() == list(range(cut1, cut2))
    assert idx.add(D[cut2:]).tolist() == list(range(cut2, n))
    gone = rng.choice(n, size=n // 3, replace=False) if n else np.zeros(0, np.int64)
    idx.delete(gone)
    live = np.ones(n, dtype=bool)
    live[gone] = False
    final = canon(D).tolil()
    final[gone] = 0  # the same final collection, built fresh
    fresh = SparseIndex.from_csr(final.tocsr())
    want = brute_force(D, Q, k, live=live)
    assert_same(idx.search(Q, k), want)
    assert_same(fresh.search(Q, k), want)
    np.testing.assert_array_equal(idx.live_doc_numbers(), np.flatnonzero(live))
    idx.merge()
    assert idx.n_segments == 1
    assert_same(idx.search(Q, k), want)
    np.testing.assert_array_equal(idx.live_doc_numbers(), np.flatnonzero(live))


def test_reuse_deleted_number_is_an_update():
    rng = np.random.default_rng(3)
    D = random_csr(rng, 40, 12, 0.3)
    idx = SparseIndex.from_csr(D)
    new_rows = random_csr(rng, 2, 12, 0.5)
    idx.delete([5, 17])
    assert idx.add(new_rows, doc_numbers=[17, 5]).tolist() == [17, 5]
    final = canon(D).tolil()
    final[17] = new_rows[0].toarray()
    final[5] = new_rows[1].toarray()
    Q = random_csr(rng, 5, 12, 0.4)
    assert_same(idx.search(Q, 50), brute_force(final.tocsr(), Q, 50))
    terms, w = idx.doc_vector(5)
    row = canon(new_rows[1])
    np.testing.assert_array_equal(terms, row.indices)
    np.testing.assert_array_equal(w, row.data)


def test_multiple_blocks_and_segments():
    """> 2**16 docs: postings span several uint16 blocks."""
    rng = np.random.default_rng(0)
    n = 150_000
    D = random_csr(rng, n, 300, 0.01, integer=True)
    Q = random_csr(rng, 12, 300, 0.05)
    Q.data[:] = 1.0
    want = brute_force(D, Q, 25)
    idx = SparseIndex.from_csr(D)
    assert_same(idx.search(Q, 25, threads=2), want)
    split = SparseIndex.from_csr(D[:70_000])
    split.add(D[70_000:])
    assert_same(split.search(Q, 25), want)
    allowed = np.arange(65_530, 65_545)  # across the first block boundary
    assert_same(idx.search(Q, 25, allowed=allowed), brute_force(D, Q, 25, allowed=allowed))
    row = canon(D[123_456])
    terms, w = idx.doc_vector(123_456)
    np.testing.assert_array_equal(terms, row.indices)
    np.testing.assert_array_equal(w, row.data)


def test_threads_one_and_two_equal():
    rng = np.random.default_rng(1)
    D = random_csr(rng, 3000, 200, 0.05, sign="mixed")
    Q = random_csr(rng, 64, 200, 0.1)
    idx = SparseIndex.from_csr(D)
    assert_same(idx.search(Q, 100, threads=1), idx.search(Q, 100, threads=2))


def test_zero_score_match_is_returned_and_nonmatch_is_not():
    D = sp.csr_matrix(np.array([[1.0, -1.0, 0], [0, 0, 2.0], [0.5, 0, 0]], np.float32))
    Q = sp.csr_matrix(np.array([[1.0, 1.0, 0]], np.float32))
    docs, scores = SparseIndex.from_csr(D).search(Q, 3)
    assert docs.tolist() == [[2, 0, -1]]
    assert scores[0, :2].tolist() == [0.5, 0.0] and scores[0, 2] == -np.inf


def test_allowed_never_leaks_when_k_exceeds_it():
    rng = np.random.default_rng(2)
    D = random_csr(rng, 500, 10, 0.9)
    idx = SparseIndex.from_csr(D)
    idx.delete([3])
    Q = random_csr(rng, 4, 10, 0.5)
    allowed = np.array([3, 7, 11, 400])
    docs, scores = idx.search(Q, 100, allowed=allowed)
    got = set(docs[docs >= 0].tolist())
    assert got <= {7, 11, 400}
    assert (docs >= 0).sum(axis=1).max() <= 3
    assert np.all(np.isneginf(scores[docs < 0]))
    empty = idx.search(Q, 5, allowed=np.array([], dtype=np.int64))
    assert np.all(empty[0] == -1)


@pytest.mark.parametrize("quantize,tol_ratio", [("uint8", 0.5), ("uint16", 0.5)])
def test_quantized_is_exact_on_decoded_weights(quantize, tol_ratio):
    rng = np.random.default_rng(4)
    D = random_csr(rng, 400, 40, 0.2, sign="mixed")
    idx = SparseIndex.from_csr(D, quantize=quantize)
    # the decoded matrix, read back through doc_vector
    rows = [idx.doc_vector(i) for i in range(400)]
    indptr = np.cumsum([0] + [len(t) for t, _ in rows])
    dec = sp.csr_matrix((np.concatenate([w for _, w in rows]),
                         np.concatenate([t for t, _ in rows]), indptr), shape=D.shape)
    assert dec.nnz == canon(D).nnz  # same postings, only the weights are coded
    Q = random_csr(rng, 20, 40, 0.2)
    assert_same(idx.search(Q, 30), brute_force(dec, Q, 30))
    # coding error of each weight is at most half a step of its term's scale
    levels = 254 if quantize == "uint8" else 65534
    c = canon(D).tocsc()
    err = np.abs(dec.tocsc().data - c.data)
    span = np.repeat([np.ptp(c.data[a:b]) if b > a else 0
                      for a, b in zip(c.indptr[:-1], c.indptr[1:])], np.diff(c.indptr))
    assert np.all(err <= span / levels * tol_ratio + 1e-6)


def test_bytes_per_posting():
    rng = np.random.default_rng(5)
    D = random_csr(rng, 20_000, 1000, 0.02)
    nnz = canon(D).nnz
    assert SparseIndex.from_csr(D).nbytes() / nnz < 6.2
    assert SparseIndex.from_csr(D, quantize="uint8").nbytes() / nnz < 3.2


def test_save_load_mmap_round_trip(tmp_path):
    rng = np.random.default_rng(6)
    D = random_csr(rng, 300, 30, 0.2, sign="mixed")
    idx = SparseIndex.from_csr(D[:200], quantize="uint16")
    idx.add(D[200:])
    idx.delete([0, 250])
    Q = random_csr(rng, 10, 30, 0.3)
    want = idx.search(Q, 40)
    idx.save(tmp_path / "sp")
    with pytest.raises(ValueError, match="not empty"):  # files a reader may have mapped stay as they are
        idx.save(tmp_path / "sp")
    back = SparseIndex.load(tmp_path / "sp", mmap=True)
    assert isinstance(back._segments[0].docs, np.memmap)
    assert (back.n_docs, back.n_terms, back.n_segments, back.quantize) == (
        300, 30, 2, "uint16")
    assert_same(back.search(Q, 40), want)
    np.testing.assert_array_equal(back.live_doc_numbers(), idx.live_doc_numbers())
    back.delete([1])  # updates work on a mapped index and leave the files alone
    back.add(D[:1])
    back.merge()
    assert_same(SparseIndex.load(tmp_path / "sp", mmap=False).search(Q, 40), want)


def test_damaged_folders_are_refused(tmp_path):
    """A part has no checksums of its own (the index store checksums every file): what it
    checks is that its metadata and files are there and readable."""
    rng = np.random.default_rng(7)
    SparseIndex.from_csr(random_csr(rng, 100, 20, 0.3)).save(tmp_path / "sp")
    assert sorted(p.name for p in (tmp_path / "sp").iterdir())[-1] == "sparse.json"
    (tmp_path / "sp" / "seg0000_docs.npy").unlink()
    with pytest.raises(ValueError, match="missing"):
        SparseIndex.load(tmp_path / "sp")
    (tmp_path / "sp" / "sparse.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt sparse index metadata"):
        SparseIndex.load(tmp_path / "sp")
    with pytest.raises(ValueError, match="no sparse.json"):
        SparseIndex.load(tmp_path / "nowhere")
    m = {"format": "something-else", "version": 1}
    (tmp_path / "sp" / "sparse.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="unsupported format"):
        SparseIndex.load(tmp_path / "sp")


def test_bad_input():
    D = sp.csr_matrix(np.array([[1.0, 0, 2.0], [0, 3.0, 0]], np.float32))
    idx = SparseIndex.from_csr(D)
    Q = sp.csr_matrix(np.array([[1.0, 1.0, 0]], np.float32))
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be"):
            idx.search(Q, k)
    with pytest.raises(ValueError, match="out of range"):
        idx.search(sp.csr_matrix(np.array([[0, 0, 0, 1.0]], np.float32)), 2)
    with pytest.raises(ValueError, match="NaN"):
        idx.search(sp.csr_matrix(np.array([[np.nan, 1.0, 0]], np.float32)), 2)
    with pytest.raises(ValueError, match="NaN"):
        SparseIndex.from_csr(sp.csr_matrix(np.array([[np.inf]], np.float32)))
    with pytest.raises(ValueError, match="scipy.sparse"):
        SparseIndex.from_csr(np.ones((2, 2)))
    with pytest.raises(ValueError, match="quantize"):
        SparseIndex.from_csr(D, quantize="int4")
    with pytest.raises(ValueError, match="threads"):
        idx.search(Q, 1, threads=0)
    with pytest.raises(ValueError, match="allowed doc number"):
        idx.search(Q, 1, allowed=[5])
    with pytest.raises(ValueError, match="duplicate doc numbers"):
        idx.add(D, doc_numbers=[7, 7])
    with pytest.raises(ValueError, match="already live"):
        idx.add(D, doc_numbers=[1, 9])
    with pytest.raises(ValueError, match="not live"):
        idx.delete([1, 42])
    assert idx.live_doc_numbers().tolist() == [0, 1]  # a failed delete changes nothing
    idx.delete([1])
    with pytest.raises(ValueError, match="not a live document"):
        idx.doc_vector(1)
    # k > n_docs and empty queries: documented padding
    docs, scores = idx.search(sp.csr_matrix(np.array([[1.0, 0, 0], [0, 0, 0]], np.float32)), 4)
    assert docs.tolist() == [[0, -1, -1, -1], [-1, -1, -1, -1]]
    assert scores[0, 0] == 1.0 and np.isneginf(scores[0, 1:]).all()
    empty = SparseIndex.from_csr(sp.csr_matrix((0, 3), dtype=np.float32))
    assert empty.n_docs == 0
    assert empty.search(Q, 3)[0].tolist() == [[-1, -1, -1]]


# ---------------------------------------------------------------- dense (term, block) columns
def zipf_csr(rng, n, n_terms, nnz, integer=True):
    """Rows of ~nnz distinct Zipf-distributed terms (p(rank r) ~ 1/r): the first terms are in
    nearly every row, so their lists become dense columns."""
    p = 1.0 / np.arange(1, n_terms + 1)
    draws = rng.choice(n_terms, size=(n, nnz), p=p / p.sum())
    rows = np.repeat(np.arange(n), nnz)
    m = sp.csr_matrix((np.ones(n * nnz, np.float32), (rows, draws.ravel())), shape=(n, n_terms))
    m.sum_duplicates()
    m.data = (rng.integers(1, 6, size=m.nnz) if integer  # few values: many exact ties
              else rng.gamma(2.0, 1.0, size=m.nnz)).astype(np.float32)
    return m


def decoded(idx, n):
    """The weights an index scores with, read back through doc_vector (live docs 0..n-1)."""
    rows = [idx.doc_vector(i) for i in range(n)]
    indptr = np.cumsum([0] + [len(t) for t, _ in rows])
    return sp.csr_matrix((np.concatenate([w for _, w in rows]).astype(np.float32),
                          np.concatenate([t for t, _ in rows]), indptr),
                         shape=(n, idx.n_terms))


@FAST
@given(st.integers(0, 2**31 - 1), st.sampled_from([None, "uint8", "uint16"]),
       st.sampled_from([0.0, 0.3, None]), st.booleans(), st.integers(1, 60))
def test_dense_columns_match_brute_force(seed, quantize, dense_min, integer, k):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    D = zipf_csr(rng, n, 30, 12, integer)
    Q = zipf_csr(rng, 6, 30, 5, integer)
    if rng.random() < 0.5:
        Q.data[:] = 1.0
    if rng.random() < 0.3:  # mixed signs: the seen-marker path of dense columns
        D.data *= rng.choice(np.array([-1.0, 1.0], np.float32), size=D.nnz)
    idx = SparseIndex.from_csr(D, quantize=quantize, dense_min=dense_min)
    sparse_only = SparseIndex.from_csr(D, quantize=quantize, dense_min=2.0)
    if dense_min == 0.0:
        assert idx._segments[0].docs.shape[0] == 0  # every list is a dense column
    assert sparse_only._segments[0].dense.shape[0] == 0
    assert idx.n_postings == sparse_only.n_postings == canon(D).nnz
    dec = decoded(idx, n)
    assert (dec != decoded(sparse_only, n)).nnz == 0  # same codes in either layout
    if quantize is None:
        assert (dec != canon(D)).nnz == 0
    allowed = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False) \
        if rng.random() < 0.4 else None
    want = brute_force(dec, Q, k, allowed=allowed)
    assert_same(idx.search(Q, k, allowed=allowed), want)
    assert_same(sparse_only.search(Q, k, allowed=allowed), want)
    # tombstones, a second segment, then merge
    gone = rng.choice(n, size=n // 4, replace=False)
    idx.delete(gone)
    live = np.ones(n, dtype=bool)
    live[gone] = False
    extra = zipf_csr(rng, 10, 30, 12, integer)
    idx.add(extra)
    both = sp.vstack([dec, decoded(SparseIndex.from_csr(extra, quantize=quantize), 10)]).tocsr()
    want = brute_force(both, Q, k, live=np.concatenate([live, np.ones(10, bool)]))
    assert_same(idx.search(Q, k), want)
    if quantize is None:  # merge re-quantises quantised segments, so only float is exact
        idx.merge()
        assert_same(idx.search(Q, k), want)


def test_dense_columns_across_blocks_with_filters():
    """Dense columns in several 2**16-doc blocks (the last one short), with tombstones and
    an allowed set crossing a block boundary; k larger than the allowed count."""
    rng = np.random.default_rng(11)
    n = 140_000
    D = zipf_csr(rng, n, 400, 20)
    Q = zipf_csr(rng, 8, 400, 6)
    Q.data[:] = 1.0
    idx = SparseIndex.from_csr(D)
    seg = idx._segments[0]
    assert seg.dense_keys.shape[0] >= 3 and seg.nb == 3
    assert set((seg.dense_keys % seg.nb).tolist()) == {0, 1, 2}
    gone = rng.choice(n, size=5000, replace=False)
    idx.delete(gone)
    live = np.ones(n, dtype=bool)
    live[gone] = False
    for k in (10, 1000):
        assert_same(idx.search(Q, k, threads=2), brute_force(D, Q, k, live=live))
    allowed = np.arange(65_500, 65_600)
    assert_same(idx.search(Q, 300, allowed=allowed),
                brute_force(D, Q, 300, allowed=allowed, live=live))


def test_zipf_bytes_per_posting_under_goals():
    """The size goals: <= 6 bytes per posting (float32) and <= 3 (uint8), all arrays counted,
    on a Zipf collection (the dense columns of the frequent terms carry no doc ids)."""
    rng = np.random.default_rng(12)
    D = zipf_csr(rng, 30_000, 3000, 100)
    nnz = canon(D).nnz
    assert SparseIndex.from_csr(D).nbytes() / nnz <= 6.0
    assert SparseIndex.from_csr(D, quantize="uint8").nbytes() / nnz <= 3.0
    assert SparseIndex.from_csr(D, dense_min=2.0).nbytes() / nnz > 6.0  # what dense saves


def test_version1_directory_still_loads(tmp_path):
    """Indexes written before dense columns (format version 1) open and search the same."""
    rng = np.random.default_rng(13)
    D = zipf_csr(rng, 500, 50, 10)
    Q = zipf_csr(rng, 5, 50, 4)
    idx = SparseIndex.from_csr(D, quantize="uint8", dense_min=2.0)
    want = idx.search(Q, 20)
    idx.save(tmp_path / "sp")
    meta = tmp_path / "sp" / "sparse.json"
    m = json.loads(meta.read_text())
    meta.unlink()  # format 1 called its metadata manifest.json
    mf = tmp_path / "sp" / "manifest.json"
    m["version"] = 1
    del m["dense_min"]
    for seg in m["segments"]:
        del seg["n_postings"]
        for a in ("dense_keys", "dense_off", "dense"):
            (tmp_path / "sp" / seg["files"].pop(a)["file"]).unlink()
    mf.write_text(json.dumps(m))
    back = SparseIndex.load(tmp_path / "sp")
    assert back.n_postings == canon(D).nnz
    assert_same(back.search(Q, 20), want)


@pytest.mark.parametrize("k", [64, 300, 2000])
def test_large_k_histogram_floor_with_ties_and_filters(k):
    """k >= kernels.HIST_MIN_K raises each block's admission floor from a score histogram;
    with many exact ties, tombstones and an allowed set the result must stay exact."""
    rng = np.random.default_rng(k)
    D = zipf_csr(rng, 6000, 200, 15)  # weights 1..5: heavy ties at the k-th score
    Q = zipf_csr(rng, 10, 200, 6)
    Q.data[:] = 1.0
    idx = SparseIndex.from_csr(D)
    assert_same(idx.search(Q, k), brute_force(D, Q, k))
    gone = rng.choice(6000, size=900, replace=False)
    idx.delete(gone)
    live = np.ones(6000, dtype=bool)
    live[gone] = False
    allowed = rng.choice(6000, size=4000, replace=False)
    assert_same(idx.search(Q, k, allowed=allowed),
                brute_force(D, Q, k, allowed=allowed, live=live))


@pytest.mark.parametrize("k", [10, 100])
@pytest.mark.parametrize("quantize", [None, "uint8"])
def test_mixed_sign_queries_positive_pass_and_fallback(k, quantize):
    """Aligned-token queries carry negative weights. The kernel first admits only documents
    scoring > 0 (no touched-set); when fewer than k of them exist it rescans with the
    touched-set. Both outcomes must equal brute force, ties, filters and tombstones included."""
    rng = np.random.default_rng(k)
    D = zipf_csr(rng, 5000, 120, 15)  # positive weights 1..5, frequent terms as dense columns
    rare = np.zeros((5000, 1), np.float32)
    rare[rng.choice(5000, size=3, replace=False)] = 1.0  # term 120: in three documents only
    D = sp.hstack([D, sp.csr_matrix(rare)]).tocsr()
    idx = SparseIndex.from_csr(D, quantize=quantize)
    dec = decoded(idx, 5000)
    Q = zipf_csr(rng, 8, 121, 8)
    Q.data *= rng.choice(np.array([-1.0, 1.0], np.float32), size=Q.nnz, p=[0.25, 0.75])
    # every weight negative but a large positive one on term 120: at most 3 documents score > 0
    negative = zipf_csr(rng, 8, 120, 8)
    negative = sp.hstack([-negative, sp.csr_matrix(np.full((8, 1), 100.0, np.float32))]).tocsr()
    gone = rng.choice(5000, size=400, replace=False)
    live = np.ones(5000, dtype=bool)
    live[gone] = False
    allowed = rng.choice(5000, size=3500, replace=False)
    for queries in (Q, negative):
        want = brute_force(dec, queries, k)
        got = idx.search(queries, k)
        assert_same(got, want)
        kth = got[1][:, k - 1]
        if queries is Q:
            assert (kth > 0).all()  # answered by the positive-only pass
        else:
            assert (kth <= 0).all()  # needed the touched-set rescan
    idx.delete(gone)
    for queries in (Q, negative):
        assert_same(idx.search(queries, k, allowed=allowed),
                    brute_force(dec, queries, k, allowed=allowed, live=live))
