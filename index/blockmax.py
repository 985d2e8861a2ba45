"""Exact block-max pruning for the sparse index's numba kernel (nothing else lives here).

After Mallia, Suel and Tonellotto, "Faster Learned Sparse Retrieval with Block-Max Pruning"
(SIGIR 2024): documents are cut into small *sub-blocks* of ``2**sub_bits`` documents; for
every (term, sub-block) holding a posting we keep the largest decoded weight. A query first
sums ``q_t * max`` over its terms per sub-block -- an upper bound of every score inside it
-- then scores exactly the few sub-blocks with the largest bounds to get a threshold (the
k-th best score so far), and finally scores only the sub-blocks whose bound reaches that
threshold (the threshold rises block after block). Safe (no approximation factor).

Exactness. A document's score is accumulated term-at-a-time in ascending term order in
float32, exactly as in ``kernels.search_segment`` (same products, same additions, dense
columns add their +0 entries), so its bits equal the exhaustive kernel's and scipy's. The
bound is summed in the same order from per-term products ``fl(q_t * max)``; float32
multiplication and addition are monotone, so for non-negative products (the only case the
pruned path runs: all query weights and all document weights > 0) every partial sum of the
bound is >= the document's partial sum, hence bound >= score bitwise. A sub-block is skipped
only when its bound is strictly below the current k-th score, so no document that could
tie its way in (lower doc number) is lost.

Metadata per segment (``BlockMaxima``), derived from the postings (not stored: the saved
format is unchanged, and older directories get pruning too), per key ``t*nb + b`` of the
2**16-document storage blocks: ``bm_ptr[key]..bm_ptr[key+1]`` index ``bm_sub`` (uint16
sub-block number inside the block, ascending), ``bm_max`` (float32 decoded maximum) and
``bm_off`` (uint16 start of the sub-block's postings inside the key's sparse list; unused
for dense columns).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .kernels import (BLOCK, BLOCK_BITS, _TINY, _dense_add, _dense_find, _dense_weight,
                      _emit, _key, _offer, _push, _unkey, _weight, n_blocks)

#: default sub-block size (documents) of the block maxima: 2**SUB_BITS
SUB_BITS = 5


class BlockMaxima(NamedTuple):
    """Per (term, storage block) lists of (sub-block, max decoded weight, postings offset)."""

    sub_bits: int
    bm_ptr: np.ndarray  # int64 [n_terms*nb + 1]
    bm_sub: np.ndarray  # uint16 [n_pairs]
    bm_max: np.ndarray  # float32 [n_pairs]
    bm_off: np.ndarray  # uint16 [n_pairs]

    @property
    def nbytes(self) -> int:
        return int(self.bm_ptr.nbytes + self.bm_sub.nbytes + self.bm_max.nbytes
                   + self.bm_off.nbytes)


@njit(cache=True)
def block_maxima(ptr, docs, weights, lo, scale, quantized, dense_keys, dense_off, dense,
                 n_terms, nb, n_rows, sub_bits):
    """Derive the block maxima of one segment (see the module docstring); two passes
    (count, fill) over the postings and dense columns."""
    n_keys = n_terms * nb
    sub = 1 << sub_bits
    bm_ptr = np.zeros(n_keys + 1, dtype=np.int64)
    dj = 0
    for key in range(n_keys):
        b = key % nb
        cnt = 0
        if dj < dense_keys.shape[0] and dense_keys[dj] == key:
            off = dense_off[dj]
            blen = dense_off[dj + 1] - off
            for s0 in range(0, blen, sub):
                for d in range(s0, min(s0 + sub, blen)):
                    if dense[off + d] != 0:
                        cnt += 1
                        break
            dj += 1
        last = -1
        for j in range(ptr[key], ptr[key + 1]):
            s = np.int64(docs[j]) >> sub_bits
            if s != last:
                cnt += 1
                last = s
        bm_ptr[key + 1] = bm_ptr[key] + cnt
    n = bm_ptr[n_keys]
    bm_sub = np.empty(n, dtype=np.uint16)
    bm_max = np.empty(n, dtype=np.float32)
    bm_off = np.zeros(n, dtype=np.uint16)
    dj = 0
    for key in range(n_keys):
        t = key // nb
        lt = lo[t] if quantized else np.float32(0)
        st = scale[t] if quantized else np.float32(0)
        p = bm_ptr[key]
        if dj < dense_keys.shape[0] and dense_keys[dj] == key:
            off = dense_off[dj]
            blen = dense_off[dj + 1] - off
            for s0 in range(0, blen, sub):
                found = False
                mx = np.float32(0)
                for d in range(s0, min(s0 + sub, blen)):
                    v = dense[off + d]
                    if v != 0:
                        w = _dense_weight(v, quantized, lt, st)
                        if not found or w > mx:
                            mx = w
                        found = True
                if found:
                    bm_sub[p] = s0 >> sub_bits
                    bm_max[p] = mx
                    p += 1
            dj += 1
        last = -1
        base = ptr[key]
        for j in range(ptr[key], ptr[key + 1]):
            s = np.int64(docs[j]) >> sub_bits
            w = _weight(weights, j, quantized, lt, st)
            if s != last:
                bm_sub[p] = s
                bm_max[p] = w
                bm_off[p] = j - base
                p += 1
                last = s
            elif w > bm_max[p - 1]:
                bm_max[p - 1] = w
    return bm_ptr, bm_sub, bm_max, bm_off


@njit(inline="always")
def _find_sub(bm_sub, lo_, hi, s):
    """Index of sub-block ``s`` in the sorted ``bm_sub[lo_:hi]``, or -1."""
    end = hi
    while lo_ < hi:
        mid = (lo_ + hi) >> 1
        if bm_sub[mid] < s:
            lo_ = mid + 1
        else:
            hi = mid
    if lo_ < end and bm_sub[lo_] == s:
        return lo_
    return -1


@njit(inline="always")
def _add_pair(acc, p, pend, key, dj, qw, lt, st, s0, s1, bm_off, ptr, docs, weights,
              quantized, dense_off, dense):
    """acc += qw * w over the postings of pair ``p`` (sub-block [s0, s1) of block key)."""
    if dj >= 0:
        off = dense_off[dj]
        _dense_add(acc[s0:s1], acc[s0:s1], dense[off + s0:off + s1], s1 - s0, qw, quantized,
                   lt, st, True)
    else:
        j0 = ptr[key] + np.int64(bm_off[p])
        j1 = ptr[key] + np.int64(bm_off[p + 1]) if p + 1 < pend else ptr[key + 1]
        for j in range(j0, j1):
            acc[docs[j]] += qw * _weight(weights, j, quantized, lt, st)


@njit(inline="always")
def _scan(acc, acc_bits, s0, s1, base, floor, excluded, has_excluded, buf, m, k, thr,
          thr_s):
    """Offer the documents [s0, s1) of the block with acc >= floor; clear the range."""
    for d in range(s0, s1):
        if acc[d] >= floor:
            bits = acc_bits[d]
            acc[d] = 0
            if has_excluded and excluded[base + d]:
                continue
            key = _key(bits, base + d)
            if key < thr:
                m, thr, thr_s = _push(buf, m, k, key, thr, thr_s)
                floor = max(floor, thr_s)
        else:
            acc[d] = 0
    return m, thr, thr_s


@njit(inline="always")
def _tighten(buf, m, k, thr, thr_s):
    """With at least k entries, keep the k best and make the k-th the threshold."""
    if m >= k and m > 0:
        part = np.partition(buf[:m], k - 1)
        buf[:k] = part[:k]
        m = k
        thr = part[k - 1]
        bits, _ = _unkey(thr)
        thr_s = np.uint32(bits).view(np.float32)
    return m, thr, thr_s


@njit(nogil=True, cache=True)
def _query_pruned(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                  dense_keys, dense_off, dense, bm_ptr, bm_sub, bm_max, bm_off, sub_bits,
                  n_local, seg_terms, excluded, has_excluded, k, n_boot,
                  acc, ub, live, dcol, hs, hd, buf, out_d, out_bits):
    """Exact top-k of one query over one segment with block-max pruning (positive weights)."""
    nb = n_blocks(n_local)
    sub = 1 << sub_bits
    spb = BLOCK >> sub_bits  # sub-blocks per storage block
    acc_bits = acc.view(np.uint32)
    # 1. upper bound per sub-block, summed in ascending term order
    ub[:nb * spb] = 0
    for i in range(qs, qe):
        t = q_terms[i]
        if t >= seg_terms:
            continue
        qw = q_w[i]
        for b in range(nb):
            key = t * nb + b
            g0 = b * spb
            for p in range(bm_ptr[key], bm_ptr[key + 1]):
                g = g0 + np.int64(bm_sub[p])
                ub[g] += qw * bm_max[p]
    # 2. score the n_boot sub-blocks with the largest bounds exactly -> first threshold
    nh = 0
    for g in range(nb * spb):
        if ub[g] > 0:
            nh = _offer(hs, hd, nh, n_boot, ub[g], g)
    m = 0
    thr = np.uint64(0xFFFFFFFFFFFFFFFF)
    thr_s = np.float32(-np.inf)
    tiny = np.float32(_TINY)
    for h in range(nh):
        g = hd[h]
        b = g // spb
        s = g - b * spb
        base = b << BLOCK_BITS
        blen = min(BLOCK, n_local - base)
        s0 = s << sub_bits
        s1 = min(s0 + sub, blen)
        for i in range(qs, qe):
            t = q_terms[i]
            if t >= seg_terms:
                continue
            key = t * nb + b
            pend = bm_ptr[key + 1]
            p = _find_sub(bm_sub, bm_ptr[key], pend, s)
            if p < 0:
                continue
            lt = lo[t] if quantized else np.float32(0)
            st = scale[t] if quantized else np.float32(0)
            dj = _dense_find(dense_keys, key) if dense_keys.shape[0] > 0 else -1
            _add_pair(acc, p, pend, key, dj, q_w[i], lt, st, s0, s1, bm_off, ptr, docs,
                      weights, quantized, dense_off, dense)
        m, thr, thr_s = _scan(acc, acc_bits, s0, s1, base, tiny, excluded, has_excluded,
                              buf, m, k, thr, thr_s)
        ub[g] = 0  # done: never scored twice
    m, thr, thr_s = _tighten(buf, m, k, thr, thr_s)
    # 3. every other sub-block whose bound reaches the threshold, term-at-a-time per block
    for b in range(nb):
        base = b << BLOCK_BITS
        blen = min(BLOCK, n_local - base)
        g0 = b * spb
        ns = (blen + sub - 1) >> sub_bits
        nlive = 0
        for s in range(ns):
            u = ub[g0 + s]
            ok = u > 0 and u >= thr_s
            live[s] = ok
            nlive += ok
        if nlive == 0:
            continue
        for i in range(qs, qe):
            t = q_terms[i]
            if t >= seg_terms:
                continue
            key = t * nb + b
            pend = bm_ptr[key + 1]
            if pend == bm_ptr[key]:
                continue
            qw = q_w[i]
            lt = lo[t] if quantized else np.float32(0)
            st = scale[t] if quantized else np.float32(0)
            dj = _dense_find(dense_keys, key) if dense_keys.shape[0] > 0 else -1
            for p in range(bm_ptr[key], pend):
                s = np.int64(bm_sub[p])
                if live[s]:
                    s0 = s << sub_bits
                    _add_pair(acc, p, pend, key, dj, qw, lt, st, s0, min(s0 + sub, blen),
                              bm_off, ptr, docs, weights, quantized, dense_off, dense)
        floor = max(thr_s, tiny)
        for s in range(ns):
            if live[s]:
                s0 = s << sub_bits
                m, thr, thr_s = _scan(acc, acc_bits, s0, min(s0 + sub, blen), base, floor,
                                      excluded, has_excluded, buf, m, k, thr, thr_s)
                floor = max(floor, thr_s)
    _emit(buf, m, k, out_d, out_bits)


@njit(nogil=True, cache=True)
def _scratch(n_local, sub_bits, k, n_boot):
    nb = n_blocks(n_local)
    spb = BLOCK >> sub_bits
    return (np.zeros(max(min(n_local, BLOCK), 1), dtype=np.float32),
            np.zeros(nb * spb, dtype=np.float32), np.zeros(spb, dtype=np.bool_),
            np.empty(1, dtype=np.int64), np.empty(n_boot, dtype=np.float32),
            np.empty(n_boot, dtype=np.int64), np.empty(k + max(k, 64), dtype=np.uint64))


def boot_blocks(k: int, sub_bits: int) -> int:
    """Sub-blocks scored exactly before the threshold is set: enough for ~4k documents."""
    return max(8, min(4096, (4 * k) >> sub_bits or 1))


@njit(parallel=True, cache=True)
def search_pruned(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                  dense_keys, dense_off, dense, bm_ptr, bm_sub, bm_max, bm_off, sub_bits,
                  n_local, seg_terms, excluded, has_excluded, k, n_boot, n_threads,
                  out_docs, out_scores):
    """``kernels.search_segment`` with block-max pruning (positive query and document
    weights only), queries split across ``n_threads`` chunks; same outputs, bitwise."""
    nq = q_ptr.shape[0] - 1
    nchunks = max(1, min(n_threads, nq))
    out_bits = out_scores.view(np.uint32)
    for c in prange(nchunks):
        acc, ub, live, dcol, hs, hd, buf = _scratch(n_local, sub_bits, k, n_boot)
        for qi in range(c, nq, nchunks):
            _query_pruned(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights, lo,
                          scale, quantized, dense_keys, dense_off, dense, bm_ptr, bm_sub,
                          bm_max, bm_off, sub_bits, n_local, seg_terms, excluded,
                          has_excluded, k, n_boot, acc, ub, live, dcol, hs, hd, buf,
                          out_docs[qi], out_bits[qi])


@njit(nogil=True, cache=True)
def search_pruned_serial(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                         dense_keys, dense_off, dense, bm_ptr, bm_sub, bm_max, bm_off,
                         sub_bits, n_local, seg_terms, excluded, has_excluded, k, n_boot,
                         out_docs, out_scores):
    """:func:`search_pruned` on the calling thread without the GIL: safe to run from
    several Python threads at once (no numba thread pool involved)."""
    nq = q_ptr.shape[0] - 1
    out_bits = out_scores.view(np.uint32)
    acc, ub, live, dcol, hs, hd, buf = _scratch(n_local, sub_bits, k, n_boot)
    for qi in range(nq):
        _query_pruned(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights, lo,
                      scale, quantized, dense_keys, dense_off, dense, bm_ptr, bm_sub,
                      bm_max, bm_off, sub_bits, n_local, seg_terms, excluded, has_excluded,
                      k, n_boot, acc, ub, live, dcol, hs, hd, buf, out_docs[qi],
                      out_bits[qi])
