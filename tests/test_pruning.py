"""Block-max pruned search (index/blockmax.py) == exhaustive kernel == scipy brute force:
ids, float32 score bits and tie order, for float and quantised postings, dense columns,
filters, tombstones, several segments and several 2**16-document blocks; and concurrent
searches from Python threads equal serial ones."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alignir.index import blockmax
from alignir.index.sparse import SparseIndex
from test_sparse_index import assert_same, brute_force, decoded

FAST = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextmanager
def knobs(bits: int, cap_q: float = blockmax.CAP_QUANTILE, few_cost: float = 0.0):
    """Smaller sub-blocks than the default (tiny collections then have many), any cap
    quantile, and few_cost 0: the sub-block-by-sub-block pass runs whenever the caps allow
    it instead of falling back to the exhaustive pass on small collections."""
    old = blockmax.SUB_BITS, blockmax.CAP_QUANTILE, blockmax.FEW_COST
    blockmax.SUB_BITS, blockmax.CAP_QUANTILE, blockmax.FEW_COST = bits, cap_q, few_cost
    try:
        yield
    finally:
        blockmax.SUB_BITS, blockmax.CAP_QUANTILE, blockmax.FEW_COST = old


def skewed_csr(rng, n, n_terms, nnz, weights):
    """Zipf-distributed terms with skewed (learned-sparse-like), tied or mixed-sign weights."""
    p = 1.0 / np.arange(1, n_terms + 1)
    draws = rng.choice(n_terms, size=(n, nnz), p=p / p.sum())
    m = sp.csr_matrix((np.ones(n * nnz, np.float32), (np.repeat(np.arange(n), nnz),
                                                        draws.ravel())), shape=(n, n_terms))
    m.sum_duplicates()
    if weights == "ties":  # few values: many exact ties at the k-th score
        m.data = rng.integers(1, 4, size=m.nnz).astype(np.float32)
    else:
        m.data = rng.lognormal(0.0, 1.2, size=m.nnz).astype(np.float32)
    if weights == "mixed":  # negative products: the exhaustive fallback
        m.data *= rng.choice(np.array([-1.0, 1.0], np.float32), size=m.nnz)
    return m


def all_modes(idx, Q, k, **kw):
    """The pruned result, after checking it equals the exhaustive one in every mode."""
    want = idx.search(Q, k, prune="off", **kw)
    for prune in ("on", "auto"):
        for threads in (1, 2):
            assert_same(idx.search(Q, k, prune=prune, threads=threads, **kw), want)
    return want


@FAST
@given(seed=st.integers(0, 2**31 - 1), quantize=st.sampled_from([None, "uint8", "uint16"]),
       dense_min=st.sampled_from([None, 0.0, 0.3, 2.0]),
       weights=st.sampled_from(["skewed", "ties", "mixed"]),
       bits=st.sampled_from([0, 1, 3, 5]), k=st.integers(1, 80),
       binary=st.booleans(), cap_q=st.sampled_from([0.0, 0.3, 0.9, 1.0]),
       few_cost=st.sampled_from([0.0, 64.0]))
def test_pruned_equals_exhaustive_equals_brute_force(seed, quantize, dense_min, weights, bits,
                                                     k, binary, cap_q, few_cost):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    n_terms = int(rng.integers(2, 40))
    D = skewed_csr(rng, n, n_terms, int(rng.integers(1, 12)), weights)
    Q = skewed_csr(rng, int(rng.integers(1, 5)), n_terms, int(rng.integers(1, 6)),
                   "ties" if weights == "ties" else "skewed")
    if binary:
        Q.data[:] = 1.0
    with knobs(bits, cap_q, few_cost):
        idx = SparseIndex.from_csr(D, quantize=quantize, dense_min=dense_min)
        dec = decoded(idx, n)
        allowed = (rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)
                   if rng.random() < 0.4 else None)
        got = all_modes(idx, Q, k, allowed=allowed)
        assert_same(got, brute_force(dec, Q, k, allowed=allowed))
        # tombstones and a second segment (own quantisation scales)
        gone = rng.choice(n, size=n // 3, replace=False)
        idx.delete(gone)
        extra = skewed_csr(rng, int(rng.integers(1, 60)), n_terms, 6, weights)
        idx.add(extra)
        live = np.ones(n + extra.shape[0], dtype=bool)
        live[gone] = False
        both = sp.vstack([dec, decoded(SparseIndex.from_csr(extra, quantize=quantize),
                                       extra.shape[0])]).tocsr()
        allowed_all = None if allowed is None else np.concatenate(
            [allowed, np.arange(n, n + extra.shape[0])])
        got = all_modes(idx, Q, k, allowed=allowed_all)
        assert_same(got, brute_force(both, Q, k, allowed=allowed_all, live=live))


def test_pruned_across_blocks_with_filters_and_large_k():
    """Several 2**16-document blocks (the last one short), dense columns, tombstones and an
    allowed set crossing a block boundary; k from 1 to more than the matches."""
    rng = np.random.default_rng(5)
    n = 140_000
    D = skewed_csr(rng, n, 3000, 12, "skewed")
    Q = skewed_csr(rng, 6, 3000, 8, "skewed")
    Q.data[:] = 1.0
    idx = SparseIndex.from_csr(D)
    assert idx._segments[0].nb == 3 and idx._segments[0].dense_keys.shape[0] > 0
    gone = rng.choice(n, size=4000, replace=False)
    idx.delete(gone)
    live = np.ones(n, dtype=bool)
    live[gone] = False
    allowed = np.arange(65_000, 66_000)
    for few_cost in (0.0, blockmax.FEW_COST):
        with knobs(blockmax.SUB_BITS, few_cost=few_cost):
            for k in (1, 10, 1000):
                assert_same(all_modes(idx, Q, k), brute_force(D, Q, k, live=live))
            assert_same(all_modes(idx, Q, 2000, allowed=allowed),
                        brute_force(D, Q, 2000, allowed=allowed, live=live))


def test_block_maxima_bound_every_posting():
    """Every (term, sub-block) is bounded: by the term's cap, or, where a weight exceeds
    it, by the listed maximum -- which is the sub-block's largest decoded weight."""
    rng = np.random.default_rng(6)
    D = skewed_csr(rng, 3000, 50, 10, "skewed")
    for quantize in (None, "uint8"):
        idx = SparseIndex.from_csr(D, quantize=quantize, dense_min=0.3)
        bm = idx._segments[0].block_maxima(4)
        assert 0 < bm.cap_ratio < 1
        dec = decoded(idx, 3000).tocsc()
        for t in range(50):  # one storage block: key == term
            rows, w = dec[:, t].indices, dec[:, t].data
            subs = rows >> 4
            want = {int(s): float(w[subs == s].max()) for s in np.unique(subs[w > bm.cap[t]])}
            a, b = bm.hi_ptr[t], bm.hi_ptr[t + 1]
            got = dict(zip(bm.hi_sub[a:b].astype(int).tolist(), bm.hi_max[a:b].tolist()))
            assert got == want
            assert w.size == 0 or 0 < bm.cap[t] <= w.max()


def test_concurrent_searches_equal_serial():
    """Threads sharing one index (single queries: the GIL-free per-query kernels, and
    batches: numba's pool, one at a time) get exactly what serial searches get."""
    rng = np.random.default_rng(7)
    D = skewed_csr(rng, 20_000, 2000, 20, "skewed")
    Q = skewed_csr(rng, 64, 2000, 10, "skewed")
    idx = SparseIndex.from_csr(D)
    segs = SparseIndex.from_csr(D[:9000])
    segs.add(D[9000:])
    want = {p: idx.search(Q, 50, prune=p) for p in ("on", "off")}
    errors: list[BaseException] = []

    def work(tid: int) -> None:
        try:
            for rep in range(3):
                for i in range(tid, Q.shape[0], 4):
                    for p in ("on", "off"):
                        got = (idx if (i + rep) % 2 else segs).search(Q[i], 50, prune=p)
                        assert_same(got, (want[p][0][i:i + 1], want[p][1][i:i + 1]))
                got = idx.search(Q[tid::4], 50, threads=2)
                assert_same(got, (want["on"][0][tid::4], want["on"][1][tid::4]))
        except BaseException as e:  # noqa: BLE001 -- reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert_same(want["on"], want["off"])


def test_prune_option_is_checked():
    idx = SparseIndex.from_csr(sp.csr_matrix(np.eye(3, dtype=np.float32)))
    try:
        idx.search(sp.csr_matrix(np.eye(3, dtype=np.float32)), 2, prune="maybe")
    except ValueError as e:
        assert "prune" in str(e)
    else:
        raise AssertionError("prune='maybe' was accepted")
