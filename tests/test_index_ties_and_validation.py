"""index/ on ties and malformed input: sum-of-k passage aggregation with negative scores and ties
at the bound, dense ties by doc number on every path, deletes and CSR / saved arrays that do not
fit together refused clearly."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from alignir.index.passages import PassageMap, aggregate, search_documents
from alignir.index.sparse import SparseIndex


def _sumk_case(counts: list[int], weights: list[list[float]], k: int, sum_k: int
               ) -> tuple[list[int], list[int]]:
    """(search_documents' docs, the docs of aggregate over every row the leg returns) for a
    one-term query over a sparse row index."""
    pmap = PassageMap.from_counts(counts)
    idx = SparseIndex.from_csr(sp.csr_matrix(np.array(weights, np.float32)))
    q = sp.csr_matrix(np.array([[1.0, 0.0]], np.float32))
    got = search_documents(lambda pos, depth, allowed: idx.search(q[pos], depth, allowed=allowed),
                           1, pmap, k, "sumk", sum_k)
    rows, scores = idx.search(q, pmap.n_rows)
    agg = aggregate({int(r): float(s) for r, s in zip(rows[0], scores[0]) if r >= 0}, pmap, "sumk", sum_k)
    return list(got[0]), sorted(agg, key=lambda d: (-agg[d][0], d))[:k]


def test_sumk_with_negative_row_scores_counts_unmatched_passages_as_nothing():
    # doc 0: passages 5.0 and one that shares no term with the query (never returned); the
    # fetched rows end at -2.0, which is no bound on what that passage adds (nothing)
    got, want = _sumk_case([2] + [1] * 8, [[5, 0], [0, 1], [4, 0]] + [[-2, 0]] * 7, 1, 2)
    assert want == [0]
    assert got == want


def test_sumk_tie_at_the_bound_goes_to_the_lower_doc_number():
    # doc 1 = 3.0 + 1.0 (its 1.0 passage is just past the fetched rows), doc 2 = 2.0 + 2.0
    w = [[1, 0], [3, 0], [1, 0], [2, 0], [2, 0], [1.5, 0], [1.5, 0], [1.5, 0], [1.5, 0]]
    got, want = _sumk_case([1, 2, 2, 2, 2], w, 1, 2)
    assert want == [1]
    assert got == want


def test_delete_refuses_a_boolean_mask_or_float_numbers():
    idx = SparseIndex.from_csr(sp.csr_matrix(np.eye(3, dtype=np.float32)))
    for bad in (np.array([True, False, True]), [1.7]):  # used to delete docs 0 and 1, and doc 1
        with pytest.raises(ValueError, match="integers"):
            idx.delete(bad)
    assert idx.live_doc_numbers().tolist() == [0, 1, 2]
    idx.delete(np.array([2], np.int32))
    idx.delete([])
    assert idx.live_doc_numbers().tolist() == [0, 1]


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_dense_ties_come_back_by_doc_number_on_every_path(kind):
    from alignir.index.dense import DenseIndex

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    dup = np.sort(rng.choice(np.arange(1, 300), 20, replace=False))
    x[dup] = x[0]  # 21 identical documents: tied scores
    d = DenseIndex.build(x, kind=kind, normalize=True)
    want = np.r_[0, dup][:5]
    rows = [d.search(np.repeat(x[:1], nq, 0), 5)[0] for nq in (1, 25)]  # faiss's sequential / BLAS paths
    rows.append(d.search(x[:1], 5, allowed=np.arange(300))[0])  # exact path
    d.params.exact_below = 0
    rows.append(d.search(x[:1], 5, allowed=np.arange(300))[0])  # faiss's selector
    for r in rows:
        if kind == "flat":
            assert np.array_equal(r, np.tile(want, (len(r), 1)))
        else:  # HNSW may reach other tied documents, but lists them in order
            assert np.isin(r, np.r_[0, dup]).all() and (np.diff(r, axis=1) > 0).all()


@pytest.mark.parametrize("damage", ["truncate", "dtype", "scale", "scalar"])
def test_sparse_load_refuses_arrays_that_do_not_fit_together(tmp_path, damage):
    rng = np.random.default_rng(0)
    m = sp.random(500, 40, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    SparseIndex.from_csr(m, quantize="uint8", dense_min=2.0).save(tmp_path / "s")
    name = {"truncate": "docs", "dtype": "weights", "scale": "scale", "scalar": "deleted"}[damage]
    f = tmp_path / "s" / f"seg0000_{name}.npy"
    a = np.load(f)
    # a shorter list of postings (reads past its end in numba: garbage or a crash), another
    # dtype, a scale array of another vocabulary, a 0-d array
    np.save(f, {"truncate": a[:10], "dtype": a.astype(np.float32), "scale": a[:5],
                "scalar": a[0]}[damage])
    with pytest.raises(ValueError, match="do not match"):
        SparseIndex.load(tmp_path / "s")


def test_flat_dense_ties_at_the_kth_place_keep_the_lower_doc_numbers():
    from alignir.index.dense import DenseIndex

    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, size=(200, 4)).astype(np.float32)  # small integers: many ties
    q = rng.integers(-2, 3, size=(30, 4)).astype(np.float32)
    d = DenseIndex.build(x)
    s = q @ x.T
    for k in (1, 7, 25, 60):
        want = np.lexsort((np.broadcast_to(np.arange(200), s.shape), -s), axis=1)[:, :k]
        for nq in (1, 30):  # faiss's sequential and BLAS paths
            assert np.array_equal(d.search(q[:nq], k)[0], want[:nq])
        assert np.array_equal(d.search(q, k, allowed=np.arange(200))[0], want)


def _raw_csr(indices: list[int], indptr: list[int], n_cols: int) -> sp.csr_matrix:
    """A CSR matrix as scipy builds it from raw arrays: no check of the column ids."""
    return sp.csr_matrix((np.ones(len(indices), np.float32), np.array(indices), np.array(indptr)),
                         shape=(len(indptr) - 1, n_cols))


@pytest.mark.parametrize("indices, indptr", [([1, 400000, 2], [0, 2, 3]), ([-1, 2], [0, 2, 2])])
def test_a_csr_with_column_ids_outside_its_shape_is_a_clear_error(indices, indptr):
    # building from it wrote outside the posting arrays (a segfault), searching with it read
    # outside them (term -1 silently scored as the last term)
    bad = _raw_csr(indices, indptr, 4)
    with pytest.raises(ValueError, match="outside the matrix's 4 columns"):
        SparseIndex.from_csr(bad)
    idx = SparseIndex.from_csr(sp.csr_matrix(np.eye(4, dtype=np.float32)))
    with pytest.raises(ValueError, match="outside the matrix's 4 columns"):
        idx.search(bad, 2)
    with pytest.raises(ValueError, match="outside the matrix's 4 columns"):
        idx.add(bad)


def test_passage_rows_of_refuses_a_boolean_mask():
    pmap = PassageMap.from_counts([2, 1, 3])
    with pytest.raises(ValueError, match="integers"):  # was read as documents 0 and 1
        pmap.rows_of(np.array([False, False, True]))
    with pytest.raises(ValueError, match="integers"):
        search_documents(lambda *a: None, 1, pmap, 1, allowed=np.array([False, False, True]))
    assert pmap.rows_of(np.array([2])).tolist() == [3, 4, 5] and pmap.rows_of([]).tolist() == []
