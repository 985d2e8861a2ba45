"""Numba kernels of the sparse inverted index, and nothing else.

Posting layout (one segment): documents are cut into blocks of ``BLOCK`` = 2**16 local
numbers; postings are grouped by (term, block), term-major. Each (term, block) list is stored
in whichever of two forms is smaller (``densify``):

- sparse: ``ptr[t*nb + b]`` .. ``ptr[t*nb + b + 1]`` index ``docs`` (uint16 offset inside the
  block, ascending) and ``weights`` -- 2 + w bytes per posting;
- dense: a column of one weight per document of the block (w bytes per document, 0 where the
  term is absent), listed in ``dense_keys`` (sorted keys t*nb + b) with offsets ``dense_off``
  into ``dense``. Frequent tokens (present in more than w/(w+2) of a block's documents) pay no
  doc ids at all, and are scored with a branch-free vector add instead of a scatter.

Weights are float32, or a uint8/uint16 code ``q`` (0..levels) with a per-term affine map
``w = lo[t] + scale[t] * q`` (evaluated in float32); dense columns store ``q + 1`` so that 0
means "absent".

Scoring is the sparse dot product of “A Text is Worth Several Tokens” eq.16 (binary query weights) or its weighted
variant: score(q, d) = sum_t q_t * w_{t,d}, accumulated term-at-a-time in float32 in
ascending term order -- the same additions in the same order as scipy's ``Q @ D.T``, so the
scores are bitwise equal to it (adding the +-0 product of an absent dense entry leaves a sum
unchanged). A document is a candidate when it shares at least one term with the query
(structural overlap). Top-k is a linear-time partial selection on 64-bit keys ordered by
(score descending, document ascending), so ties break by document number; the cross-segment
merge uses a small bounded heap with the same order.

The small helpers are plain ``@njit`` functions, not ``inline="always"``: LLVM inlines them into
the kernels anyway, while inlining them in Numba's own IR first made every caller compile them
again, and a fresh install's first search wait for it (``benchmarks/speed/bench_jit.py``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

BLOCK_BITS = 16
BLOCK = 1 << BLOCK_BITS
#: products of positive float32 weights whose exact value is at least this never round to 0
_TINY = 1.1754944e-38
#: the smallest positive float32 (subnormal): ``acc >= _MIN_POSITIVE`` <=> ``acc > 0``
_MIN_POSITIVE = 1.4e-45


@njit(cache=True)
def n_blocks(n_rows):
    """Number of 2**16-document blocks for ``n_rows`` local documents (at least one)."""
    return max(1, (n_rows + BLOCK - 1) >> BLOCK_BITS)


@njit
def _weight(weights, j, quantized, lt, st):
    if quantized:
        return lt + st * np.float32(weights[j])
    return np.float32(weights[j])


@njit(cache=True)
def build_postings(indptr, indices, data, n_rows, n_terms):
    """CSR rows (docs) -> block-partitioned postings by a counting sort.

    Rows are visited in ascending order, so each (term, block) list is sorted by document.
    Returns ``(ptr int64 [n_terms*nb + 1], docs uint16 [nnz], weights float32 [nnz])``.
    """
    nb = n_blocks(n_rows)
    nnz = indptr[n_rows] - indptr[0]
    ptr = np.zeros(n_terms * nb + 1, dtype=np.int64)
    for r in range(n_rows):
        b = r >> BLOCK_BITS
        for j in range(indptr[r], indptr[r + 1]):
            ptr[indices[j] * nb + b + 1] += 1
    for i in range(n_terms * nb):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    docs = np.empty(nnz, dtype=np.uint16)
    weights = np.empty(nnz, dtype=np.float32)
    for r in range(n_rows):
        b = r >> BLOCK_BITS
        loc = np.uint16(r & (BLOCK - 1))
        for j in range(indptr[r], indptr[r + 1]):
            key = indices[j] * nb + b
            pos = fill[key]
            docs[pos] = loc
            weights[pos] = data[j]
            fill[key] = pos + 1
    return ptr, docs, weights


@njit(cache=True)
def quantize_postings(ptr, weights, n_terms, nb, levels, out):
    """Per-term affine quantisation of float32 postings into ``out`` (uint8/uint16 codes).

    lo[t] = min weight of term t, scale[t] = (max - min) / levels, q = round((w - lo) / scale);
    decoding is ``lo[t] + scale[t] * q`` in float32 (error at most scale/2 per posting).
    Returns ``(lo float32 [n_terms], scale float32 [n_terms])``.
    """
    lo = np.zeros(n_terms, dtype=np.float32)
    scale = np.zeros(n_terms, dtype=np.float32)
    for t in range(n_terms):
        s = ptr[t * nb]
        e = ptr[(t + 1) * nb]
        if s == e:
            continue
        mn = weights[s]
        mx = weights[s]
        for j in range(s + 1, e):
            w = weights[j]
            if w < mn:
                mn = w
            if w > mx:
                mx = w
        sc = np.float32((mx - mn) / np.float32(levels))
        lo[t] = mn
        scale[t] = sc
        for j in range(s, e):
            if sc > 0:
                q = np.rint((weights[j] - mn) / sc)
                if q < 0:
                    q = 0
                if q > levels:
                    q = levels
                out[j] = q
            else:
                out[j] = 0
    return lo, scale


@njit(cache=True)
def densify(ptr, docs, weights, n_terms, nb, n_rows, shift, min_density):
    """Move every (term, block) list holding at least ``min_density`` of the block's
    documents out of the sparse postings into a dense column (one weight per document).

    Dense costs w bytes per document against 2 + w per posting, so it is no larger above
    w / (w + 2) (2/3 for float32, 1/3 for uint8); it is also scored without a scatter.
    ``shift``: added to the stored value in dense columns (1 for quantised codes, so that 0
    means absent; 0 for float32, whose postings are never 0).
    Returns ``(ptr, docs, weights, dense_keys int64, dense_off int64, dense)``.
    """
    n_keys = n_terms * nb
    is_dense = np.zeros(n_keys, dtype=np.uint8)
    n_dense = 0
    dense_len = 0
    sparse_len = 0
    for key in range(n_keys):
        cnt = ptr[key + 1] - ptr[key]
        blen = min(BLOCK, n_rows - ((key % nb) << BLOCK_BITS))
        if cnt > 0 and cnt >= min_density * blen:
            is_dense[key] = 1
            n_dense += 1
            dense_len += blen
        else:
            sparse_len += cnt
    ptr2 = np.zeros(n_keys + 1, dtype=np.int64)
    docs2 = np.empty(sparse_len, dtype=np.uint16)
    weights2 = np.empty(sparse_len, dtype=weights.dtype)
    dense_keys = np.empty(n_dense, dtype=np.int64)
    dense_off = np.zeros(n_dense + 1, dtype=np.int64)
    dense = np.zeros(dense_len, dtype=weights.dtype)
    m = 0
    j = 0
    for key in range(n_keys):
        if is_dense[key]:
            blen = min(BLOCK, n_rows - ((key % nb) << BLOCK_BITS))
            off = dense_off[j]
            for p in range(ptr[key], ptr[key + 1]):
                if shift:
                    dense[off + docs[p]] = weights[p] + 1
                else:
                    dense[off + docs[p]] = weights[p]
            dense_keys[j] = key
            dense_off[j + 1] = off + blen
            j += 1
        else:
            for p in range(ptr[key], ptr[key + 1]):
                docs2[m] = docs[p]
                weights2[m] = weights[p]
                m += 1
        ptr2[key + 1] = m
    return ptr2, docs2, weights2, dense_keys, dense_off, dense


@njit
def _dense_find(dense_keys, key):
    """Index of ``key`` in the sorted ``dense_keys``, or -1."""
    lo = 0
    hi = dense_keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if dense_keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    if lo < dense_keys.shape[0] and dense_keys[lo] == key:
        return lo
    return -1


@njit
def _dense_weight(v, quantized, lt, st):
    """Decoded weight of a non-zero dense entry ``v`` (codes are stored as q + 1)."""
    if quantized:
        return lt + st * (np.float32(v) - np.float32(1))
    return np.float32(v)


@njit(cache=True)
def min_weight(ptr, weights, lo, quantized, dense_keys, dense, n_terms, nb):
    """Smallest decoded weight of the segment (inf when it has no postings). Quantised:
    the smallest ``lo`` of a used term (quantize_postings maps each term's minimum to 0)."""
    best = np.inf
    if quantized:
        for t in range(n_terms):
            if ptr[(t + 1) * nb] > ptr[t * nb] and lo[t] < best:
                best = lo[t]
        for j in range(dense_keys.shape[0]):
            t = dense_keys[j] // nb
            if lo[t] < best:
                best = lo[t]
        return best
    for j in range(weights.shape[0]):
        if weights[j] < best:
            best = weights[j]
    for j in range(dense.shape[0]):
        if dense[j] != 0 and dense[j] < best:
            best = dense[j]
    return best


@njit(cache=True)
def postings_to_csr(ptr, docs, weights, lo, scale, quantized, dense_keys, dense_off, dense,
                    n_terms, nb, n_rows, keep):
    """Postings -> CSR of the kept rows (``keep`` uint8 [n_rows]) with decoded float32
    weights, rows renumbered densely in ascending order; column indices come out sorted.
    Returns (indptr, indices, data)."""
    newrow = np.full(n_rows, -1, dtype=np.int64)
    m = 0
    for r in range(n_rows):
        if keep[r]:
            newrow[r] = m
            m += 1
    indptr = np.zeros(m + 1, dtype=np.int64)
    dj = 0
    for t in range(n_terms):
        for b in range(nb):
            key = t * nb + b
            base = b << BLOCK_BITS
            if dj < dense_keys.shape[0] and dense_keys[dj] == key:
                off = dense_off[dj]
                for d in range(dense_off[dj + 1] - off):
                    if dense[off + d] != 0:
                        r = newrow[base + d]
                        if r >= 0:
                            indptr[r + 1] += 1
                dj += 1
            for j in range(ptr[key], ptr[key + 1]):
                r = newrow[base + docs[j]]
                if r >= 0:
                    indptr[r + 1] += 1
    for i in range(m):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    indices = np.empty(indptr[m], dtype=np.int32)
    data = np.empty(indptr[m], dtype=np.float32)
    dj = 0
    for t in range(n_terms):
        lt = lo[t] if quantized else np.float32(0)
        st = scale[t] if quantized else np.float32(0)
        for b in range(nb):
            key = t * nb + b
            base = b << BLOCK_BITS
            if dj < dense_keys.shape[0] and dense_keys[dj] == key:
                off = dense_off[dj]
                for d in range(dense_off[dj + 1] - off):
                    v = dense[off + d]
                    if v != 0:
                        r = newrow[base + d]
                        if r >= 0:
                            pos = fill[r]
                            indices[pos] = t
                            data[pos] = _dense_weight(v, quantized, lt, st)
                            fill[r] = pos + 1
                dj += 1
            for j in range(ptr[key], ptr[key + 1]):
                r = newrow[base + docs[j]]
                if r >= 0:
                    pos = fill[r]
                    indices[pos] = t
                    data[pos] = _weight(weights, j, quantized, lt, st)
                    fill[r] = pos + 1
    return indptr, indices, data


@njit(cache=True)
def doc_terms(ptr, docs, weights, lo, scale, quantized, dense_keys, dense_off, dense,
              n_terms, nb, local):
    """Terms of local document ``local`` and their decoded float32 weights (binary search
    in each term's block list, direct read in dense columns). Terms ascending."""
    b = local >> BLOCK_BITS
    target = local & (BLOCK - 1)
    terms = np.empty(n_terms, dtype=np.int32)
    ws = np.empty(n_terms, dtype=np.float32)
    m = 0
    for t in range(n_terms):
        lt = lo[t] if quantized else np.float32(0)
        st = scale[t] if quantized else np.float32(0)
        key = t * nb + b
        dj = _dense_find(dense_keys, key)
        if dj >= 0:
            v = dense[dense_off[dj] + target]
            if v != 0:
                terms[m] = t
                ws[m] = _dense_weight(v, quantized, lt, st)
                m += 1
            continue
        lo_ = ptr[key]
        hi = ptr[key + 1]
        while lo_ < hi:
            mid = (lo_ + hi) >> 1
            if docs[mid] < target:
                lo_ = mid + 1
            else:
                hi = mid
        if lo_ < ptr[key + 1] and docs[lo_] == target:
            terms[m] = t
            ws[m] = _weight(weights, lo_, quantized, lt, st)
            m += 1
    return terms[:m].copy(), ws[:m].copy()


# ---------------------------------------------------------------- bounded top-k heap
# A min-heap on "badness": the root is the worst kept entry. Entry a is worse than b when
# a.score < b.score, or the scores are equal and a.doc > b.doc.


@njit
def _worse(s1, d1, s2, d2):
    return s1 < s2 or (s1 == s2 and d1 > d2)


@njit
def _sift_down(hs, hd, m, s, d):
    i = 0
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        r = c + 1
        if r < m and _worse(hs[r], hd[r], hs[c], hd[c]):
            c = r
        if _worse(hs[c], hd[c], s, d):
            hs[i] = hs[c]
            hd[i] = hd[c]
            i = c
        else:
            break
    hs[i] = s
    hd[i] = d


@njit
def _offer(hs, hd, m, k, s, d):
    """Offer (score s, doc d) to a heap of size m <= k; returns the new size."""
    if m < k:
        i = m
        while i > 0:
            p = (i - 1) >> 1
            if _worse(s, d, hs[p], hd[p]):
                hs[i] = hs[p]
                hd[i] = hd[p]
                i = p
            else:
                break
        hs[i] = s
        hd[i] = d
        return m + 1
    if _worse(hs[0], hd[0], s, d):
        _sift_down(hs, hd, m, s, d)
    return m


@njit
def _drain(hs, hd, m, out_d, out_s, offset):
    """Write the heap best-first into out_d/out_s; pad the rest with -1 / -inf."""
    k = out_d.shape[0]
    for i in range(m, k):
        out_d[i] = -1
        out_s[i] = -np.inf
    while m > 0:
        m -= 1
        out_d[m] = hd[0] + offset
        out_s[m] = hs[0]
        if m > 0:
            _sift_down(hs, hd, m, hs[m], hd[m])


# ---------------------------------------------------------------- top-k by sort keys
# (score, doc) -> uint64 key whose ascending order is (score desc, doc asc): the high 32
# bits are the float's bits mapped to an order-preserving unsigned int, then inverted.
# Candidates go to a buffer of 2k keys; when it fills, np.partition keeps the k smallest
# and the k-th key becomes the admission threshold (linear-time partial selection).
_SIGN = np.uint32(0x80000000)
_ALL = np.uint32(0xFFFFFFFF)
_LOW = np.uint64(0xFFFFFFFF)
_NEG_INF_BITS = np.uint32(0xFF800000)


@njit
def _f32_bits(x):
    return np.float32(x).view(np.uint32)


@njit
def _key(bits, doc):
    if bits == _SIGN:  # -0.0 ranks as +0.0
        bits = np.uint32(0)
    if bits & _SIGN:
        asc = bits ^ _ALL
    else:
        asc = bits ^ _SIGN
    return (np.uint64(asc ^ _ALL) << np.uint64(32)) | np.uint64(doc)


@njit
def _unkey(key):
    asc = np.uint32((key >> np.uint64(32)) ^ _LOW)
    if asc & _SIGN:
        bits = asc ^ _SIGN
    else:
        bits = asc ^ _ALL
    return bits, np.int64(key & _LOW)


@njit
def _push(buf, m, k, key, thr, thr_s):
    """Append key (already < thr); on a full buffer keep the k best (in place) and make the
    k-th the new admission threshold. Returns (m, thr, thr_s)."""
    buf[m] = key
    m += 1
    if m == buf.shape[0]:
        part = np.partition(buf, k - 1)
        buf[:k] = part[:k]
        m = k
        thr = part[k - 1]
        bits, _ = _unkey(thr)
        thr_s = np.uint32(bits).view(np.float32)
    return m, thr, thr_s


@njit
def _emit(buf, m, k, out_d, out_bits):
    """Best-first (doc, score bits) of the buffer into the output row; pad -1 / -inf."""
    n = min(m, k)
    if m > k:
        top = np.sort(np.partition(buf[:m], k - 1)[:k])
    else:
        top = np.sort(buf[:m])
    for i in range(n):
        b, d = _unkey(top[i])
        out_bits[i] = b
        out_d[i] = d
    for i in range(n, out_d.shape[0]):
        out_d[i] = -1
        out_bits[i] = _NEG_INF_BITS


#: k from which a block's admission threshold is first raised by a histogram (_block_floor)
HIST_MIN_K = 64
_HIST_BINS = 2048


@njit
def _block_floor(acc_bits, blen, floor, k, excluded, has_excluded, base, hist):
    """A score below which no document of this block can be in the top-k: the lower edge of
    the highest histogram bin (over the non-negative scores' bits, which order like the
    scores) with at least k eligible documents of the block at or above it -- a document
    under it is beaten by k others. Returns max(floor, that edge) as float32."""
    fb = _f32_bits(floor)
    cnt = 0
    lo = np.uint32(0xFFFFFFFF)
    hi = np.uint32(0)
    for d in range(blen):
        b = acc_bits[d]
        if b >= fb and b < _SIGN and not (has_excluded and excluded[base + d]):
            cnt += 1
            lo = min(lo, b)
            hi = max(hi, b)
    if cnt <= 2 * k:
        return floor
    span = np.uint32(hi - lo)
    shift = 0
    while (span >> np.uint32(shift)) >= _HIST_BINS:
        shift += 1
    hist[:] = 0
    for d in range(blen):
        b = acc_bits[d]
        if b >= fb and b < _SIGN and not (has_excluded and excluded[base + d]):
            hist[(b - lo) >> np.uint32(shift)] += 1
    c = 0
    j = _HIST_BINS - 1
    while j > 0:
        c += hist[j]
        if c >= k:
            break
        j -= 1
    edge = np.uint32(lo + (np.uint32(j) << np.uint32(shift)))
    return max(floor, edge.view(np.float32))


@njit
def _dense_add(acc, seen, col, blen, qw, quantized, lt, st, untracked):
    """acc[d] += qw * w[d] over a dense column (absent entries add nothing); marks ``seen``
    unless ``untracked`` (no touched-set is kept). Branch-free so that LLVM vectorises it."""
    if quantized:
        zero = np.float32(0)
        for d in range(blen):
            c = col[d]
            v = qw * (lt + st * (np.float32(c) - np.float32(1)))
            acc[d] += v if c != 0 else zero
    else:
        for d in range(blen):
            acc[d] += qw * np.float32(col[d])
    if not untracked:
        for d in range(blen):
            if col[d] != 0:
                seen[d] = 1


@njit
def _query_exhaustive(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                      dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                      has_excluded, nonneg, positive, k, acc, seen, touched, dcol, hist, buf,
                      out_d, out_bits):
    """Top-k of the query ``q_terms[qs:qe]`` over one segment, every posting scored
    (see :func:`search_segment`).

    ``positive``: blocks scored through the accumulator admit only documents scoring > 0
    (no touched-set: one compare per document). Exact when ``nonneg``; otherwise exact only if
    the k-th result scores > 0, which :func:`_query_topk` checks.
    """
    nb = n_blocks(n_local)
    acc_bits = acc.view(np.uint32)
    m = 0
    thr = np.uint64(0xFFFFFFFFFFFFFFFF)
    thr_s = np.float32(-np.inf)
    for b in range(nb):
        base = b << BLOCK_BITS
        blen = min(BLOCK, n_local - base)
        total = 0
        for i in range(qs, qe):
            t = q_terms[i]
            dcol[i - qs] = -1
            if t < seg_terms:
                key = t * nb + b
                total += ptr[key + 1] - ptr[key]
                if dense_keys.shape[0] > 0:
                    dj = _dense_find(dense_keys, key)
                    dcol[i - qs] = dj
                    if dj >= 0:
                        total += blen
        if total == 0:
            continue
        if total * 4 < blen:
            # sparse (never holds a dense column): remember which documents were touched
            nt = 0
            for i in range(qs, qe):
                t = q_terms[i]
                if t >= seg_terms:
                    continue
                qw = q_w[i]
                lt = lo[t] if quantized else np.float32(0)
                st = scale[t] if quantized else np.float32(0)
                for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                    d = docs[j]
                    if seen[d] == 0:
                        seen[d] = 1
                        touched[nt] = d
                        nt += 1
                    acc[d] += qw * _weight(weights, j, quantized, lt, st)
            for i in range(nt):
                d = touched[i]
                s = acc[d]
                bits = acc_bits[d]
                acc[d] = 0
                seen[d] = 0
                if has_excluded and excluded[base + d]:
                    continue
                if s >= thr_s:
                    key = _key(bits, base + d)
                    if key < thr:
                        m, thr, thr_s = _push(buf, m, k, key, thr, thr_s)
        else:
            for i in range(qs, qe):
                t = q_terms[i]
                if t >= seg_terms:
                    continue
                qw = q_w[i]
                lt = lo[t] if quantized else np.float32(0)
                st = scale[t] if quantized else np.float32(0)
                dj = dcol[i - qs]
                if dj >= 0:
                    off = dense_off[dj]
                    _dense_add(acc, seen, dense[off:off + blen], blen, qw, quantized,
                               lt, st, positive)
                elif positive:
                    for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                        acc[docs[j]] += qw * _weight(weights, j, quantized, lt, st)
                else:
                    for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                        d = docs[j]
                        seen[d] = 1
                        acc[d] += qw * _weight(weights, j, quantized, lt, st)
            if positive:
                # nonneg: products are >= _TINY, so touched <=> acc >= _TINY; otherwise only
                # the documents scoring > 0. One compare per document, then the accumulator
                # is cleared by a vector fill
                floor = max(thr_s, np.float32(_TINY if nonneg else _MIN_POSITIVE))
                if k >= HIST_MIN_K:
                    floor = _block_floor(acc_bits, blen, floor, k, excluded,
                                         has_excluded, base, hist)
                for d in range(blen):
                    if acc[d] >= floor:
                        if has_excluded and excluded[base + d]:
                            continue
                        key = _key(acc_bits[d], base + d)
                        if key < thr:
                            m, thr, thr_s = _push(buf, m, k, key, thr, thr_s)
                            floor = max(floor, thr_s)
                acc[:blen] = 0
                continue
            for d in range(blen):
                if seen[d] == 0:
                    continue
                seen[d] = 0
                s = acc[d]
                bits = acc_bits[d]
                acc[d] = 0
                if has_excluded and excluded[base + d]:
                    continue
                if s >= thr_s:
                    key = _key(bits, base + d)
                    if key < thr:
                        m, thr, thr_s = _push(buf, m, k, key, thr, thr_s)
    _emit(buf, m, k, out_d, out_bits)


@njit
def _query_topk(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                has_excluded, nonneg, k, acc, seen, touched, dcol, hist, buf, out_d, out_bits):
    """Exact top-k of one query over one segment, every posting scored.

    With mixed-sign products (aligned-token queries carry negative weights) the candidates are
    the documents sharing a term with the query, whatever their score, which needs a
    touched-set. The documents scoring > 0 are found without one; when the k-th of them
    scores > 0, no other candidate (score <= 0) can enter the top-k, so that pass is the exact
    answer. Only otherwise is the query scored again with the touched-set.
    """
    _query_exhaustive(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                      dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                      has_excluded, nonneg, True, k, acc, seen, touched, dcol, hist, buf,
                      out_d, out_bits)
    if nonneg:
        return
    kth = out_bits[k - 1]
    if out_d[k - 1] >= 0 and kth != 0 and kth < _SIGN:
        return
    _query_exhaustive(qs, qe, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                      dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                      has_excluded, nonneg, False, k, acc, seen, touched, dcol, hist, buf,
                      out_d, out_bits)


@njit
def _exhaustive_scratch(q_ptr, n_local, k):
    nq = q_ptr.shape[0] - 1
    qmax = 1
    for qi in range(nq):
        qmax = max(qmax, q_ptr[qi + 1] - q_ptr[qi])
    width = max(min(n_local, BLOCK), 1)
    return (np.zeros(width, dtype=np.float32), np.zeros(width, dtype=np.uint8),
            np.empty(width, dtype=np.int32), np.empty(qmax, dtype=np.int64),
            np.zeros(_HIST_BINS, dtype=np.int64), np.empty(k + max(k, 64), dtype=np.uint64))


@njit(parallel=True, cache=True)
def search_segment(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                   dense_keys, dense_off, dense,
                   n_local, seg_terms, excluded, has_excluded, nonneg, k, n_threads,
                   out_docs, out_scores):
    """Exact top-k of every query over one segment (queries split across threads).

    q_ptr/q_terms/q_w: CSR of the queries (terms ascending, weights float32). ``excluded``
    (uint8 [n_local]) marks deleted or filtered-out documents when ``has_excluded``.
    ``nonneg``: all products q_t*w are > 0, so "score > 0" identifies the candidates and no
    touched-set is needed. ``n_threads``: how many query chunks to run in parallel
    (pass numba.get_num_threads(); reading it inside the kernel would defeat caching).
    Writes local document numbers into out_docs [nq, k] (-1 padded)
    and scores into out_scores (-inf padded). Each block of 2**16 documents is accumulated
    then scanned while its accumulator is hot in cache.
    """
    nq = q_ptr.shape[0] - 1
    nchunks = max(1, min(n_threads, nq))
    out_bits = out_scores.view(np.uint32)
    for c in prange(nchunks):
        acc, seen, touched, dcol, hist, buf = _exhaustive_scratch(q_ptr, n_local, k)
        for qi in range(c, nq, nchunks):
            _query_topk(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights,
                        lo, scale, quantized, dense_keys, dense_off, dense, n_local,
                        seg_terms, excluded, has_excluded, nonneg, k, acc, seen,
                        touched, dcol, hist, buf, out_docs[qi], out_bits[qi])


@njit(nogil=True, cache=True)
def search_segment_serial(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
                          dense_keys, dense_off, dense, n_local, seg_terms, excluded,
                          has_excluded, nonneg, k, out_docs, out_scores):
    """:func:`search_segment` on the calling thread without the GIL: safe to run from
    several Python threads at once (no numba thread pool involved)."""
    nq = q_ptr.shape[0] - 1
    out_bits = out_scores.view(np.uint32)
    acc, seen, touched, dcol, hist, buf = _exhaustive_scratch(q_ptr, n_local, k)
    for qi in range(nq):
        _query_topk(q_ptr[qi], q_ptr[qi + 1], q_terms, q_w, ptr, docs, weights, lo,
                    scale, quantized, dense_keys, dense_off, dense, n_local, seg_terms,
                    excluded, has_excluded, nonneg, k, acc, seen, touched, dcol, hist,
                    buf, out_docs[qi], out_bits[qi])


@njit(nogil=True, cache=True)
def merge_topk(all_docs, all_scores, out_docs, out_scores):
    """Merge per-segment top-k lists [S, nq, k] (global doc numbers, -1 padded) into the
    global top-k per query by (score desc, doc asc). Serial, without the GIL (cheap)."""
    n_seg, nq, k = all_docs.shape
    for qi in range(nq):
        hs = np.empty(k, dtype=np.float32)
        hd = np.empty(k, dtype=np.int64)
        m = 0
        for s in range(n_seg):
            for j in range(k):
                d = all_docs[s, qi, j]
                if d < 0:
                    break
                m = _offer(hs, hd, m, k, all_scores[s, qi, j], d)
        _drain(hs, hd, m, out_docs[qi], out_scores[qi], 0)
