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

from .kernels import (BLOCK, BLOCK_BITS, _HIST_BINS, _TINY, _dense_add, _dense_find,
                      _dense_weight, _emit, _key, _offer, _push, _query_exhaustive, _unkey,
                      _weight, n_blocks)

#: default sub-block size (documents) of the block maxima: 2**SUB_BITS
SUB_BITS = 6
#: a term's cap is this quantile of its weights; sub-blocks holding a weight above it are
#: listed with their maximum, all others are bounded by the cap
CAP_QUANTILE = 0.9
#: ``prune="auto"`` prunes a segment when its median cap / max ratio is at most this
#: (skewed weights; near-uniform weights give loose bounds and the exhaustive pass wins)
AUTO_MAX_CAP_RATIO = 0.6
_HBINS = 256
#: the pruned pass scores the live sub-blocks one by one (about the query's terms in binary
#: searches each) while live * terms * FEW_COST <= the postings an exhaustive pass reads;
#: beyond that it falls back to the exhaustive pass (0: never falls back; for tests)
FEW_COST = 64.0


class BlockMaxima(NamedTuple):
    """Per-term caps and the sub-blocks whose maximum exceeds them, of one segment."""

    sub_bits: int
    cap: np.ndarray     # float32 [n_terms] CAP_QUANTILE of the term's decoded weights
    hi_ptr: np.ndarray  # int64 [n_terms*nb + 1] per key t*nb + b into hi_sub / hi_max
    hi_sub: np.ndarray  # uint16: sub-block (inside the storage block) with a weight > cap
    hi_max: np.ndarray  # float32: that sub-block's largest decoded weight of the term
    cap_ratio: float    # median over terms of cap / max (how skewed the weights are)

    @property
    def nbytes(self) -> int:
        return int(self.cap.nbytes + self.hi_ptr.nbytes + self.hi_sub.nbytes
                   + self.hi_max.nbytes)


@njit
def _key_weight(ptr, docs, weights, lo, scale, quantized, dense_off, dense, key, dj, lt, st,
                out_d, out_w):
    """Local docs and decoded weights of one (term, block) list into out_d / out_w; count."""
    n = 0
    if dj >= 0:
        off = dense_off[dj]
        for d in range(dense_off[dj + 1] - off):
            v = dense[off + d]
            if v != 0:
                out_d[n] = d
                out_w[n] = _dense_weight(v, quantized, lt, st)
                n += 1
    else:
        for j in range(ptr[key], ptr[key + 1]):
            out_d[n] = docs[j]
            out_w[n] = _weight(weights, j, quantized, lt, st)
            n += 1
    return n


@njit(cache=True)
def block_maxima(ptr, docs, weights, lo, scale, quantized, dense_keys, dense_off, dense,
                 n_terms, nb, n_rows, sub_bits, cap_q):
    """Derive the caps (a histogram quantile ``cap_q`` of each term's decoded weights) and
    the per-sub-block maxima above them. Returns (cap, hi_ptr, hi_sub, hi_max, cap_ratio)."""
    bd = np.empty(BLOCK, dtype=np.int64)
    bw = np.empty(BLOCK, dtype=np.float32)
    cap = np.zeros(n_terms, dtype=np.float32)
    ratio = np.zeros(n_terms, dtype=np.float64)
    hist = np.zeros(_HBINS, dtype=np.int64)
    hi_ptr = np.zeros(n_terms * nb + 1, dtype=np.int64)
    n_used = 0
    for t in range(n_terms):
        lt = lo[t] if quantized else np.float32(0)
        st = scale[t] if quantized else np.float32(0)
        mx = np.float32(0)
        cnt = 0
        for b in range(nb):
            key = t * nb + b
            dj = _dense_find(dense_keys, key) if dense_keys.shape[0] > 0 else -1
            n = _key_weight(ptr, docs, weights, lo, scale, quantized, dense_off, dense, key,
                            dj, lt, st, bd, bw)
            for j in range(n):
                if bw[j] > mx:
                    mx = bw[j]
            cnt += n
        if cnt == 0 or mx <= 0:
            cap[t] = mx
            continue
        hist[:] = 0
        for b in range(nb):
            key = t * nb + b
            dj = _dense_find(dense_keys, key) if dense_keys.shape[0] > 0 else -1
            n = _key_weight(ptr, docs, weights, lo, scale, quantized, dense_off, dense, key,
                            dj, lt, st, bd, bw)
            for j in range(n):
                h = int(max(np.float32(0), bw[j]) / mx * (_HBINS - 1))
                hist[h] += 1
        want = cap_q * cnt
        c = 0
        h = 0
        while h < _HBINS - 1:
            c += hist[h]
            if c >= want:
                break
            h += 1
        cap[t] = np.float32(mx * np.float32((h + 1) / (_HBINS - 1)))
        if cap[t] > mx:
            cap[t] = mx
        ratio[n_used] = cap[t] / mx
        n_used += 1
    # sub-blocks holding a weight above the cap, two passes (count, fill)
    for fill in range(2):
        if fill:
            for i in range(n_terms * nb):
                hi_ptr[i + 1] += hi_ptr[i]
            hi_sub = np.empty(hi_ptr[n_terms * nb], dtype=np.uint16)
            hi_max = np.empty(hi_ptr[n_terms * nb], dtype=np.float32)
        else:
            hi_sub = np.empty(0, dtype=np.uint16)
            hi_max = np.empty(0, dtype=np.float32)
        for t in range(n_terms):
            lt = lo[t] if quantized else np.float32(0)
            st = scale[t] if quantized else np.float32(0)
            c = cap[t]
            for b in range(nb):
                key = t * nb + b
                dj = _dense_find(dense_keys, key) if dense_keys.shape[0] > 0 else -1
                n = _key_weight(ptr, docs, weights, lo, scale, quantized, dense_off, dense,
                                key, dj, lt, st, bd, bw)
                last = -1
                p = hi_ptr[key]
                for j in range(n):
                    if bw[j] > c:
                        sb = bd[j] >> sub_bits
                        if sb != last:
                            if fill:
                                hi_sub[p] = sb
                                hi_max[p] = bw[j]
                            p += 1
                            last = sb
                        elif fill and bw[j] > hi_max[p - 1]:
                            hi_max[p - 1] = bw[j]
                if not fill:
                    hi_ptr[key + 1] = p - hi_ptr[key]
    med = np.median(ratio[:n_used]) if n_used else 1.0
    return cap, hi_ptr, hi_sub, hi_max, med


@njit
def _score_sub(acc, qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
               dense_off, dense, dcol, nb, seg_terms, b, s0, s1):
    """Add the query's exact contributions to the documents [s0, s1) of block ``b`` in
    ascending term order (binary search in sparse lists, a slice of dense columns)."""
    for i in range(qs, qe):
        t = q_terms[i]
        if t >= seg_terms:
            continue
        qw = q_w[i]
        lt = lo[t] if quantized else np.float32(0)
        st = scale[t] if quantized else np.float32(0)
        dj = dcol[(i - qs) * nb + b]
        if dj >= 0:
            off = dense_off[dj]
            _dense_add(acc[s0:s1], acc[s0:s1], dense[off + s0:off + s1], s1 - s0, qw,
                       quantized, lt, st, True)
            continue
        key = t * nb + b
        lo_ = ptr[key]
        hi = ptr[key + 1]
        while lo_ < hi:
            mid = (lo_ + hi) >> 1
            if docs[mid] < s0:
                lo_ = mid + 1
            else:
                hi = mid
        end = ptr[key + 1]
        j = lo_
        while j < end and docs[j] < s1:
            acc[docs[j]] += qw * _weight(weights, j, quantized, lt, st)
            j += 1


@njit
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


@njit
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
                  dense_keys, dense_off, dense, cap, hi_ptr, hi_sub, hi_max, sub_bits,
                  n_local, seg_terms, excluded, has_excluded, k, n_boot, few_cost,
                  acc, inc, touched, dcol, hs, hd, buf, seen, etouched, edcol, hist,
                  out_d, out_bits):
    """Exact top-k of one query over one segment with block-max pruning (positive weights);
    falls back to the exhaustive pass when the bounds cannot prune enough."""
    nb = n_blocks(n_local)
    sub = 1 << sub_bits
    spb = BLOCK >> sub_bits  # sub-blocks per storage block
    acc_bits = acc.view(np.uint32)
    # 1. bound of sub-block g: (C + inc[g]) * slack, C = sum_t q_t cap_t (float64)
    big_c = 0.0
    nt = 0
    nt_touch = 0
    work = 0  # postings the exhaustive pass would read
    for i in range(qs, qe):
        t = q_terms[i]
        for b in range(nb):
            dcol[(i - qs) * nb + b] = -1
        if t >= seg_terms:
            continue
        nt += 1
        qw = np.float64(q_w[i])
        c = np.float64(cap[t])
        big_c += qw * c
        for b in range(nb):
            key = t * nb + b
            work += ptr[key + 1] - ptr[key]
            if dense_keys.shape[0] > 0:
                dj = _dense_find(dense_keys, key)
                dcol[(i - qs) * nb + b] = dj
                if dj >= 0:
                    work += (dense_off[dj + 1] - dense_off[dj]) >> 2  # vector adds: cheap
            g0 = b * spb
            for p in range(hi_ptr[key], hi_ptr[key + 1]):
                g = g0 + np.int64(hi_sub[p])
                if inc[g] == 0:
                    touched[nt_touch] = g
                    nt_touch += 1
                inc[g] += qw * (np.float64(hi_max[p]) - c)
    # float32 sums of m non-negative rounded products exceed the real sum by < (1+2^-24)^2m
    slack = 1.0 + (2.0 * nt + 8.0) * 2.0 ** -24
    # 2. score the n_boot sub-blocks with the largest bounds exactly -> first threshold
    nh = 0
    for j in range(nt_touch):
        g = touched[j]
        nh = _offer(hs, hd, nh, n_boot, np.float32(inc[g]), g)
    m = 0
    thr = np.uint64(0xFFFFFFFFFFFFFFFF)
    thr_s = np.float32(-np.inf)
    tiny = np.float32(_TINY)
    for h in range(nh):
        g = hd[h]
        b = g // spb
        base = b << BLOCK_BITS
        s0 = (g - b * spb) << sub_bits
        s1 = min(s0 + sub, min(BLOCK, n_local - base))
        _score_sub(acc, qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                   dense_off, dense, dcol, nb, seg_terms, b, s0, s1)
        m, thr, thr_s = _scan(acc, acc_bits, s0, s1, base, tiny, excluded, has_excluded,
                              buf, m, k, thr, thr_s)
        inc[g] = -1.0  # scored: never again
    m, thr, thr_s = _tighten(buf, m, k, thr, thr_s)
    # 3. live: bound >= threshold (every untouched sub-block is bounded by C alone)
    theta = np.float64(thr_s)
    nlive = 0
    few = False
    live = np.empty(0, dtype=np.int64)
    if big_c * slack < theta:
        live = np.empty(nt_touch, dtype=np.int64)
        for j in range(nt_touch):
            g = touched[j]
            if inc[g] >= 0 and (big_c + inc[g]) * slack >= theta:
                live[nlive] = g
                nlive += 1
        # a sub-block costs ~nt binary searches; the exhaustive pass ~work postings
        few = nlive * nt * few_cost <= work
    if few:
        vals = np.empty(nlive, dtype=np.float64)
        for j in range(nlive):
            vals[j] = -inc[live[j]]
        for j in np.argsort(vals):
            g = live[j]
            if (big_c + inc[g]) * slack < np.float64(thr_s):
                break  # sorted: every later bound is lower
            b = g // spb
            base = b << BLOCK_BITS
            s0 = (g - b * spb) << sub_bits
            s1 = min(s0 + sub, min(BLOCK, n_local - base))
            _score_sub(acc, qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                       dense_off, dense, dcol, nb, seg_terms, b, s0, s1)
            m, thr, thr_s = _scan(acc, acc_bits, s0, s1, base, max(thr_s, tiny), excluded,
                                  has_excluded, buf, m, k, thr, thr_s)
    for j in range(nt_touch):  # reset the scratch
        inc[touched[j]] = 0
    if few:
        _emit(buf, m, k, out_d, out_bits)
        return
    # the bounds are too loose for this query: score every posting
    _query_exhaustive(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                      dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                      has_excluded, True, True, k, acc, seen, etouched, edcol, hist, buf,
                      out_d, out_bits)


@njit(nogil=True, cache=True)
def _scratch(q_ptr, n_local, sub_bits, k, n_boot):
    nq = q_ptr.shape[0] - 1
    qmax = 1
    for qi in range(nq):
        qmax = max(qmax, q_ptr[qi + 1] - q_ptr[qi])
    nb = n_blocks(n_local)
    n_sub = nb * (BLOCK >> sub_bits)
    width = max(min(n_local, BLOCK), 1)
    return (np.zeros(width, dtype=np.float32), np.zeros(n_sub, dtype=np.float64),
            np.empty(n_sub, dtype=np.int64), np.empty(qmax * nb, dtype=np.int64),
            np.empty(n_boot, dtype=np.float32), np.empty(n_boot, dtype=np.int64),
            np.empty(k + max(k, 64), dtype=np.uint64), np.zeros(width, dtype=np.uint8),
            np.empty(width, dtype=np.int32), np.empty(qmax, dtype=np.int64),
            np.zeros(_HIST_BINS, dtype=np.int64))


def boot_blocks(k: int, sub_bits: int) -> int:
    """Sub-blocks scored exactly (largest bounds first) before the threshold is set:
    about 2k documents, at least two sub-blocks (measured best in bench_pruning.py)."""
    return max(2, (2 * k) >> sub_bits)


@njit(parallel=True, cache=True)
def search_pruned(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                  dense_keys, dense_off, dense, cap, hi_ptr, hi_sub, hi_max, sub_bits,
                  n_local, seg_terms, excluded, has_excluded, k, n_boot, few_cost,
                  n_threads, out_docs, out_scores):
    """``kernels.search_segment`` with block-max pruning (positive query and document
    weights only), queries split across ``n_threads`` chunks; same outputs, bitwise."""
    nq = q_ptr.shape[0] - 1
    nchunks = max(1, min(n_threads, nq))
    out_bits = out_scores.view(np.uint32)
    for c in prange(nchunks):
        (acc, inc, touched, dcol, hs, hd, buf, seen, etouched, edcol,
         hist) = _scratch(q_ptr, n_local, sub_bits, k, n_boot)
        for qi in range(c, nq, nchunks):
            _query_pruned(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights, lo,
                          scale, quantized, dense_keys, dense_off, dense, cap, hi_ptr,
                          hi_sub, hi_max, sub_bits, n_local, seg_terms, excluded,
                          has_excluded, k, n_boot, few_cost, acc, inc, touched, dcol, hs, hd,
                          buf, seen, etouched, edcol, hist, out_docs[qi], out_bits[qi])


@njit(nogil=True, cache=True)
def search_pruned_serial(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                         dense_keys, dense_off, dense, cap, hi_ptr, hi_sub, hi_max, sub_bits,
                         n_local, seg_terms, excluded, has_excluded, k, n_boot,
                         few_cost, out_docs, out_scores):
    """:func:`search_pruned` on the calling thread without the GIL: safe to run from
    several Python threads at once (no numba thread pool involved)."""
    nq = q_ptr.shape[0] - 1
    out_bits = out_scores.view(np.uint32)
    (acc, inc, touched, dcol, hs, hd, buf, seen, etouched, edcol,
     hist) = _scratch(q_ptr, n_local, sub_bits, k, n_boot)
    for qi in range(nq):
        _query_pruned(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights, lo,
                      scale, quantized, dense_keys, dense_off, dense, cap, hi_ptr, hi_sub,
                      hi_max, sub_bits, n_local, seg_terms, excluded, has_excluded, k,
                      n_boot, few_cost, acc, inc, touched, dcol, hs, hd, buf, seen, etouched, edcol,
                      hist, out_docs[qi], out_bits[qi])
