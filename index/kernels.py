"""Numba kernels of the sparse inverted index, and nothing else.

Posting layout (one segment): documents are cut into blocks of ``BLOCK`` = 2**16 local
numbers; postings are grouped by (term, block), term-major, so ``ptr[t*nb + b]`` ..
``ptr[t*nb + b + 1]`` are the postings of term ``t`` in block ``b`` and the postings of one
term stay contiguous and sorted by document. A posting stores its document as a uint16
offset inside its block (2 bytes) plus a weight: float32, or a uint8/uint16 code ``q`` with
a per-term affine map ``w = lo[t] + scale[t] * q`` (evaluated in float32).

Scoring is the sparse dot product of seed 004 eq.16 (binary query weights) or its weighted
variant: score(q, d) = sum_t q_t * w_{t,d}, accumulated term-at-a-time in float32 in
ascending term order -- the same additions in the same order as scipy's ``Q @ D.T``, so the
scores are bitwise equal to it. A document is a candidate when it shares at least one term
with the query (structural overlap). Top-k is a linear-time partial selection on 64-bit keys
ordered by (score descending, document ascending), so ties break by document number; the
cross-segment merge uses a small bounded heap with the same order.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

BLOCK_BITS = 16
BLOCK = 1 << BLOCK_BITS
#: products of positive float32 weights whose exact value is at least this never round to 0
_TINY = 1.1754944e-38


@njit(cache=True)
def n_blocks(n_rows):
    """Number of 2**16-document blocks for ``n_rows`` local documents (at least one)."""
    return max(1, (n_rows + BLOCK - 1) >> BLOCK_BITS)


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
def dequantize_postings(ptr, codes, lo, scale, n_terms, nb):
    """Float32 weights ``lo[t] + scale[t] * q`` of every posting (the values scoring uses)."""
    out = np.empty(codes.shape[0], dtype=np.float32)
    for t in range(n_terms):
        lt = lo[t]
        st = scale[t]
        for j in range(ptr[t * nb], ptr[(t + 1) * nb]):
            out[j] = lt + st * np.float32(codes[j])
    return out


@njit(cache=True)
def postings_to_csr(ptr, docs, weights_f32, n_terms, nb, n_rows, keep):
    """Postings -> CSR of the kept rows (``keep`` uint8 [n_rows]), rows renumbered densely
    in ascending order; column indices come out sorted. Returns (indptr, indices, data)."""
    newrow = np.full(n_rows, -1, dtype=np.int64)
    m = 0
    for r in range(n_rows):
        if keep[r]:
            newrow[r] = m
            m += 1
    indptr = np.zeros(m + 1, dtype=np.int64)
    for t in range(n_terms):
        for b in range(nb):
            base = b << BLOCK_BITS
            for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                r = newrow[base + docs[j]]
                if r >= 0:
                    indptr[r + 1] += 1
    for i in range(m):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    indices = np.empty(indptr[m], dtype=np.int32)
    data = np.empty(indptr[m], dtype=np.float32)
    for t in range(n_terms):
        for b in range(nb):
            base = b << BLOCK_BITS
            for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                r = newrow[base + docs[j]]
                if r >= 0:
                    pos = fill[r]
                    indices[pos] = t
                    data[pos] = weights_f32[j]
                    fill[r] = pos + 1
    return indptr, indices, data


@njit(cache=True)
def doc_terms(ptr, docs, n_terms, nb, local):
    """Terms of local document ``local`` and the positions of its postings (binary search
    in each term's block list). Returns ``(terms int32, positions int64)``, terms ascending."""
    b = local >> BLOCK_BITS
    target = local & (BLOCK - 1)
    terms = np.empty(n_terms, dtype=np.int32)
    pos = np.empty(n_terms, dtype=np.int64)
    m = 0
    for t in range(n_terms):
        lo = ptr[t * nb + b]
        hi = ptr[t * nb + b + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if docs[mid] < target:
                lo = mid + 1
            else:
                hi = mid
        if lo < ptr[t * nb + b + 1] and docs[lo] == target:
            terms[m] = t
            pos[m] = lo
            m += 1
    return terms[:m].copy(), pos[:m].copy()


# ---------------------------------------------------------------- bounded top-k heap
# A min-heap on "badness": the root is the worst kept entry. Entry a is worse than b when
# a.score < b.score, or the scores are equal and a.doc > b.doc.


@njit(inline="always")
def _worse(s1, d1, s2, d2):
    return s1 < s2 or (s1 == s2 and d1 > d2)


@njit(inline="always")
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


@njit(inline="always")
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


@njit(inline="always")
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


@njit(inline="always")
def _weight(weights, j, quantized, lt, st):
    if quantized:
        return lt + st * np.float32(weights[j])
    return np.float32(weights[j])


# ---------------------------------------------------------------- top-k by sort keys
# (score, doc) -> uint64 key whose ascending order is (score desc, doc asc): the high 32
# bits are the float's bits mapped to an order-preserving unsigned int, then inverted.
# Candidates go to a buffer of 2k keys; when it fills, np.partition keeps the k smallest
# and the k-th key becomes the admission threshold (linear-time partial selection).
_SIGN = np.uint32(0x80000000)
_ALL = np.uint32(0xFFFFFFFF)
_LOW = np.uint64(0xFFFFFFFF)
_NEG_INF_BITS = np.uint32(0xFF800000)


@njit(inline="always")
def _key(bits, doc):
    if bits == _SIGN:  # -0.0 ranks as +0.0
        bits = np.uint32(0)
    if bits & _SIGN:
        asc = bits ^ _ALL
    else:
        asc = bits ^ _SIGN
    return (np.uint64(asc ^ _ALL) << np.uint64(32)) | np.uint64(doc)


@njit(inline="always")
def _unkey(key):
    asc = np.uint32((key >> np.uint64(32)) ^ _LOW)
    if asc & _SIGN:
        bits = asc ^ _SIGN
    else:
        bits = asc ^ _ALL
    return bits, np.int64(key & _LOW)


@njit(inline="always")
def _push(buf, m, k, key, tmp_u, tmp_f, thr, thr_s):
    """Append key (already < thr); on a full buffer keep the k best. Returns (m, thr, thr_s)."""
    buf[m] = key
    m += 1
    if m == buf.shape[0]:
        part = np.partition(buf, k - 1)
        buf[:k] = part[:k]
        m = k
        thr = part[k - 1]
        tmp_u[0], _ = _unkey(thr)
        thr_s = tmp_f[0]
    return m, thr, thr_s


@njit(inline="always")
def _emit(buf, m, k, out_d, out_bits):
    """Best-first (doc, score bits) of the buffer into the output row; pad -1 / -inf."""
    top = np.sort(buf[:m])
    n = min(m, k)
    for i in range(n):
        b, d = _unkey(top[i])
        out_bits[i] = b
        out_d[i] = d
    for i in range(n, out_d.shape[0]):
        out_d[i] = -1
        out_bits[i] = _NEG_INF_BITS



@njit(parallel=True, cache=True)
def search_segment(q_ptr, q_terms, q_w, ptr, docs, weights, lo, scale, quantized,
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
    nb = n_blocks(n_local)
    width = max(min(n_local, BLOCK), 1)
    nchunks = max(1, min(n_threads, nq))
    out_bits = out_scores.view(np.uint32)
    for c in prange(nchunks):
        acc = np.zeros(width, dtype=np.float32)
        acc_bits = acc.view(np.uint32)
        seen = np.zeros(width, dtype=np.uint8)
        touched = np.empty(width, dtype=np.int32)
        buf = np.empty(k + max(k, 64), dtype=np.uint64)
        tmp_u = np.zeros(1, dtype=np.uint32)
        tmp_f = tmp_u.view(np.float32)
        for qi in range(c, nq, nchunks):
            qs = q_ptr[qi]
            qe = q_ptr[qi + 1]
            m = 0
            thr = np.uint64(0xFFFFFFFFFFFFFFFF)
            thr_s = np.float32(-np.inf)
            for b in range(nb):
                base = b << BLOCK_BITS
                blen = min(BLOCK, n_local - base)
                total = 0
                for i in range(qs, qe):
                    t = q_terms[i]
                    if t < seg_terms:
                        total += ptr[t * nb + b + 1] - ptr[t * nb + b]
                if total == 0:
                    continue
                if total * 4 < blen:
                    # sparse: remember which documents were touched
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
                                m, thr, thr_s = _push(buf, m, k, key, tmp_u, tmp_f, thr, thr_s)
                else:
                    for i in range(qs, qe):
                        t = q_terms[i]
                        if t >= seg_terms:
                            continue
                        qw = q_w[i]
                        lt = lo[t] if quantized else np.float32(0)
                        st = scale[t] if quantized else np.float32(0)
                        if nonneg:
                            for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                                acc[docs[j]] += qw * _weight(weights, j, quantized, lt, st)
                        else:
                            for j in range(ptr[t * nb + b], ptr[t * nb + b + 1]):
                                d = docs[j]
                                seen[d] = 1
                                acc[d] += qw * _weight(weights, j, quantized, lt, st)
                    for d in range(blen):
                        s = acc[d]
                        if nonneg:
                            if s == 0:  # positive products: untouched <=> zero
                                continue
                        else:
                            if seen[d] == 0:
                                continue
                            seen[d] = 0
                        bits = acc_bits[d]
                        acc[d] = 0
                        if has_excluded and excluded[base + d]:
                            continue
                        if s >= thr_s:
                            key = _key(bits, base + d)
                            if key < thr:
                                m, thr, thr_s = _push(buf, m, k, key, tmp_u, tmp_f, thr, thr_s)
            _emit(buf, m, k, out_docs[qi], out_bits[qi])


@njit(parallel=True, cache=True)
def merge_topk(all_docs, all_scores, out_docs, out_scores):
    """Merge per-segment top-k lists [S, nq, k] (global doc numbers, -1 padded) into the
    global top-k per query by (score desc, doc asc)."""
    n_seg, nq, k = all_docs.shape
    for qi in prange(nq):
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
