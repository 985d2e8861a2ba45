"""Learned-sparse inverted index over aligned-token vectors.

Documents are rows of a CSR matrix [n_docs, n_terms] (“A Text is Worth Several Tokens” eq.15 weights); queries are
rows of a CSR matrix of query weights (binary for the paper's eq.16). Scores are exact and
bitwise equal to scipy's ``Q @ D.T`` (see index/kernels.py); results are the top-k documents
sharing at least one term with the query, ordered by score descending then doc number
ascending, padded with -1 / -inf.

The index is a list of segments (each with its own postings, a sorted map local -> global
doc number, and tombstones). ``add`` appends a segment, ``delete`` sets tombstones, ``merge``
rewrites everything live into one segment. Doc numbers never change.
"""
from __future__ import annotations

from alignir.checks import doc_numbers_for_add
from alignir.errors import InvalidInputError

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numba
import numpy as np
import scipy.sparse as sp

from alignir.index import blockmax, kernels
from alignir.io import save_npy
from alignir.index.parts import check_empty_folder

FORMAT = "alignir-sparse"
FORMAT_VERSION = 2  # 2: dense columns for frequent (term, block) lists; 1 is still read
META_FILE = "sparse.json"
_LEGACY_META_FILE = "manifest.json"  # written before parts (it also held per-file checksums)
#: codes 0..levels; dense columns store code + 1 (0 = absent), hence 254 / 65534 levels
_QUANT_LEVELS = {"uint8": (np.uint8, 254), "uint16": (np.uint16, 65534)}
#: the allowed ``quantize`` values (None: float32 postings)
QUANTIZE = (None, *_QUANT_LEVELS)
_ARRAYS = ("map_", "ptr", "docs", "weights", "lo", "scale", "deleted", "dense_keys",
           "dense_off", "dense")
_DENSE_ARRAYS = ("dense_keys", "dense_off", "dense")  # absent from version-1 directories
#: default share of a block's documents from which a (term, block) list is stored dense:
#: where dense is no larger (w/(w+2) bytes rule) but at most 1/2, where the vector add
#: already beats the scatter by far (measured in benchmarks/speed/bench_sparse_index.py)
_DENSE_MIN = {None: 0.5, "uint16": 0.5, "uint8": 1 / 3}
PRUNE_MODES = ("auto", "on", "off")
#: numba's parallel (workqueue) kernels must not be entered from two threads at once
_POOL_LOCK = threading.Lock()
_DERIVE_LOCK = threading.Lock()


@dataclass
class _Segment:
    map_: np.ndarray      # int64 [n] global doc numbers ascending, or [0] when contiguous
    ptr: np.ndarray       # int64 [n_terms * nb + 1] into docs / weights (sparse lists)
    docs: np.ndarray      # uint16 [sparse nnz] offsets inside 2**16 blocks
    weights: np.ndarray   # float32 | uint8 | uint16 [sparse nnz]
    lo: np.ndarray        # float32 [n_terms] (empty unless quantised)
    scale: np.ndarray     # float32 [n_terms] (empty unless quantised)
    deleted: np.ndarray   # uint8 [n] tombstones
    dense_keys: np.ndarray  # int64 [n_dense] sorted keys t*nb + b stored as dense columns
    dense_off: np.ndarray   # int64 [n_dense + 1] column offsets into dense
    dense: np.ndarray       # weights.dtype: one entry per document of the block, 0 = absent
    n_terms: int
    n_postings: int       # sparse + dense postings
    min_weight: float     # smallest (decoded) weight, for the positive-only fast path
    doc_start: int = 0    # first doc number when map_ is empty (numbers are a range)
    bmax: blockmax.BlockMaxima | None = None  # derived on first pruned search, not saved

    @property
    def n(self) -> int:
        return int(self.deleted.shape[0])

    @property
    def doc_map(self) -> np.ndarray:
        """Global doc number of each local document (int64, ascending)."""
        if self.map_.shape[0] == self.n:
            return self.map_
        return np.arange(self.doc_start, self.doc_start + self.n, dtype=np.int64)

    def to_global(self, local: np.ndarray) -> np.ndarray:
        return self.map_[local] if self.map_.shape[0] == self.n else local + self.doc_start

    @property
    def nb(self) -> int:
        return int(kernels.n_blocks(self.n))

    @property
    def quantized(self) -> bool:
        return self.weights.dtype != np.float32

    def block_maxima(self, sub_bits: int) -> blockmax.BlockMaxima:
        """The segment's block maxima (derived once per sub-block size, thread-safe)."""
        bm = self.bmax
        if bm is None or bm.sub_bits != sub_bits:
            with _DERIVE_LOCK:
                bm = self.bmax
                if bm is None or bm.sub_bits != sub_bits:
                    cap, hp, hs, hm, ratio = blockmax.block_maxima(
                        *self.kernel_arrays(), self.n_terms, self.nb, self.n, sub_bits,
                        blockmax.CAP_QUANTILE)
                    bm = blockmax.BlockMaxima(sub_bits, cap, hp, hs, hm, float(ratio))
                    self.bmax = bm
        return bm

    def decoded(self, n_terms: int, keep: np.ndarray | None = None) -> sp.csr_matrix:
        """The documents as CSR rows [kept docs, n_terms] of the weights the kernel scores
        (quantised codes decoded); ``keep`` (uint8 [n]) selects rows, default all."""
        keep = np.ones(self.n, np.uint8) if keep is None else keep
        ip, ix, dt = kernels.postings_to_csr(*self.kernel_arrays(), self.n_terms, self.nb, self.n, keep)
        return sp.csr_matrix((dt, ix, ip), shape=(int(keep.sum()), n_terms))

    def kernel_arrays(self) -> tuple:
        """(ptr, docs, weights, lo, scale, quantized, dense_keys, dense_off, dense)."""
        return (self.ptr, self.docs, self.weights, self.lo, self.scale, self.quantized,
                self.dense_keys, self.dense_off, self.dense)


def _as_csr(matrix, what: str) -> sp.csr_matrix:
    """Canonical float32 CSR (sorted indices, duplicates summed, zeros dropped); rejects
    non-sparse input and NaN/inf values."""
    if not sp.issparse(matrix):
        raise InvalidInputError(f"{what} must be a scipy.sparse matrix, got {type(matrix).__name__}")
    if matrix.ndim != 2:
        raise InvalidInputError(f"{what} must be 2-D, got shape {matrix.shape}")
    if matrix.format == "csr":
        _check_structure(matrix, what)
    if (matrix.format == "csr" and matrix.dtype == np.float32 and matrix.has_canonical_format
            and np.isfinite(matrix.data).all() and matrix.data.all()):
        return matrix  # already canonical (the common single-query path): no copy
    csr = sp.csr_matrix(matrix, dtype=np.float32, copy=True)
    if not np.all(np.isfinite(csr.data)):
        bad = int(np.flatnonzero(~np.isfinite(csr.data))[0])
        row = int(np.searchsorted(csr.indptr, bad, side="right") - 1)
        raise InvalidInputError(f"{what} has a NaN/inf weight (row {row})")
    csr.sum_duplicates()
    csr.eliminate_zeros()
    csr.sort_indices()
    return csr


def _check_structure(m, what: str) -> None:
    """Row pointers that never decrease and column ids inside the shape: scipy does not check
    them unless asked, and the kernels would read or write out of bounds (a crash)."""
    ip, n_rows, n_cols = m.indptr, m.shape[0], m.shape[1]
    if (ip.ndim != 1 or ip.shape[0] != n_rows + 1 or int(ip[0]) != 0
            or int(ip[-1]) > min(m.indices.shape[0], m.data.shape[0]) or (np.diff(ip) < 0).any()):
        raise InvalidInputError(f"{what}: invalid CSR structure (indptr)")
    nnz = int(ip[-1])
    if nnz:
        ix = m.indices[:nnz]
        lo, hi = int(ix.min()), int(ix.max())
        if lo < 0 or hi >= n_cols:
            raise InvalidInputError(f"{what}: column id {lo if lo < 0 else hi} is outside the "
                                    f"matrix's {n_cols} columns")


def _build_segment(csr: sp.csr_matrix, doc_map: np.ndarray, quantize: str | None,
                   dense_min: float | None = None) -> _Segment:
    n, n_terms = csr.shape
    ptr, docs, weights = kernels.build_postings(
        csr.indptr.astype(np.int64), csr.indices.astype(np.int32), csr.data, n, n_terms)
    lo = scale = np.zeros(0, dtype=np.float32)
    if quantize is not None:
        dtype, levels = _QUANT_LEVELS[quantize]
        codes = np.empty(weights.shape[0], dtype=dtype)
        lo, scale = kernels.quantize_postings(ptr, weights, n_terms, kernels.n_blocks(n),
                                              levels, codes)
        weights = codes
    nnz = int(weights.shape[0])
    ptr, docs, weights, dk, do, dense = kernels.densify(
        ptr, docs, weights, n_terms, kernels.n_blocks(n), n, 1 if quantize else 0,
        _DENSE_MIN[quantize] if dense_min is None else float(dense_min))
    doc_map = np.ascontiguousarray(doc_map, dtype=np.int64)
    start = int(doc_map[0]) if n else 0
    contiguous = n == 0 or int(doc_map[-1]) - start == n - 1  # sorted + unique
    seg = _Segment(map_=np.zeros(0, np.int64) if contiguous else doc_map, ptr=ptr, docs=docs,
                   weights=weights, lo=lo, scale=scale,
                   deleted=np.zeros(n, dtype=np.uint8), dense_keys=dk, dense_off=do,
                   dense=dense, n_terms=n_terms, n_postings=nnz, min_weight=0.0,
                   doc_start=start)
    seg.min_weight = _min_weight(seg)
    return seg


def _min_weight(seg: _Segment) -> float:
    """Smallest decoded weight (inf for an empty segment)."""
    return float(kernels.min_weight(seg.ptr, seg.weights, seg.lo, seg.quantized,
                                    seg.dense_keys, seg.dense, seg.n_terms, seg.nb))


class SparseIndex:
    """Exact inverted index: ``from_csr`` -> ``search`` / ``add`` / ``delete`` / ``merge``,
    ``save`` / ``load`` (mmap); a part of the index folder (``index.parts.Part``). ``quantize``: None (float32), "uint8" or "uint16"
    (per-term affine codes, see kernels.quantize_postings)."""

    def __init__(self, segments: list[_Segment], n_docs: int, n_terms: int,
                 quantize: str | None, dense_min: float | None = None):
        self._segments = segments
        self._n_docs = int(n_docs)
        self._n_terms = int(n_terms)
        self.quantize = quantize
        self.dense_min = dense_min

    # ------------------------------------------------------------------ build
    @classmethod
    def from_csr(cls, csr, quantize: str | None = None, dense_min: float | None = None
                 ) -> "SparseIndex":
        """Index the rows of ``csr`` [n_docs, n_terms]; doc number = row index.

        ``dense_min``: a (term, 2**16-doc block) list is stored as a dense column when it
        holds at least this share of the block's documents (None: 0.5 for float32/uint16,
        1/3 for uint8; > 1 never). Layout only: results are the same either way."""
        if quantize not in QUANTIZE:
            raise InvalidInputError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
        if dense_min is not None and not (isinstance(dense_min, (int, float))
                                          and dense_min >= 0):
            raise InvalidInputError(f"dense_min must be None or a number >= 0, got {dense_min!r}")
        m = _as_csr(csr, "documents")
        seg = _build_segment(m, np.arange(m.shape[0], dtype=np.int64), quantize, dense_min)
        return cls([seg], m.shape[0], m.shape[1], quantize, dense_min)

    # ------------------------------------------------------------------ properties
    @property
    def n_docs(self) -> int:
        """Size of the doc-number space (largest number ever assigned + 1), deleted included."""
        return self._n_docs

    @property
    def n_terms(self) -> int:
        return self._n_terms

    @property
    def n_segments(self) -> int:
        return len(self._segments)

    @property
    def n_postings(self) -> int:
        return int(sum(s.n_postings for s in self._segments))

    def nbytes(self) -> int:
        """Bytes of all posting arrays (ptr, docs, weights, lo/scale, doc maps, tombstones)."""
        return int(sum(getattr(s, a).nbytes for s in self._segments for a in _ARRAYS))

    def live_doc_numbers(self) -> np.ndarray:
        """Sorted int64 doc numbers that are not deleted."""
        parts = [s.doc_map[s.deleted == 0] for s in self._segments]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def _locate(self, doc_numbers: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """For each segment: (segment index, positions in doc_numbers, local numbers) of the
        live documents among doc_numbers."""
        out = []
        for si, s in enumerate(self._segments):
            if s.n == 0:
                continue
            pos = np.minimum(np.searchsorted(s.doc_map, doc_numbers), s.n - 1)
            hit = (s.doc_map[pos] == doc_numbers) & (s.deleted[pos] == 0)
            if hit.any():
                out.append((si, np.flatnonzero(hit), pos[hit]))
        return out

    def _is_live(self, doc_numbers: np.ndarray) -> np.ndarray:
        live = np.zeros(doc_numbers.shape, dtype=bool)
        for _, where, _ in self._locate(doc_numbers):
            live[where] = True
        return live

    def doc_vector(self, doc_number: int) -> tuple[np.ndarray, np.ndarray]:
        """(term ids int32 ascending, weights float32 as scored) of a live document."""
        hits = self._locate(np.array([int(doc_number)], dtype=np.int64))
        if not hits:
            raise InvalidInputError(f"doc number {doc_number} is not a live document of this index")
        si, _, local = hits[0]
        s = self._segments[si]
        return kernels.doc_terms(*s.kernel_arrays(), s.n_terms, s.nb, int(local[0]))

    # ------------------------------------------------------------------ search
    def search(self, queries, k: int, allowed=None, threads: int | None = None,
               prune: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query row: (docs int64 [nq, k], scores float32 [nq, k]).

        Only documents sharing a term with the query are returned; rows are padded with
        -1 / -inf when fewer than k qualify (k may exceed n_docs). An empty query returns a
        padded row. ``allowed``: doc numbers to restrict to (others never come back).
        ``threads``: numba threads for a batch (default: numba's current setting); a single
        query, or ``threads=1``, runs on the calling thread without the GIL, so several
        Python threads may search one index at once. ``prune``: "auto"/"on" skip the
        document sub-blocks that cannot reach the top-k (index/blockmax.py; used when all
        query and document weights are positive), "off" scores every posting. The result
        is the same, bit for bit, in every mode.
        """
        if prune not in PRUNE_MODES:
            raise InvalidInputError(f"prune must be one of {PRUNE_MODES}, got {prune!r}")
        _threads(threads)  # validates
        q = _as_csr(queries, "queries")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        if q.nnz and int(q.indices.max()) >= self._n_terms:
            bad = int(q.indices.max())
            raise InvalidInputError(f"query token id {bad} is out of range: index has "
                             f"{self._n_terms} terms")
        nq = q.shape[0]
        allowed_arr = self._check_allowed(allowed)
        kk = max(1, min(k, self._n_docs))
        q_ptr = q.indptr.astype(np.int64)
        q_terms = q.indices.astype(np.int32)
        q_w = q.data
        q_min = float(q_w.min()) if q.nnz else 1.0
        serial = nq <= 1 or threads == 1 or (threads is None and numba.get_num_threads() == 1)
        per_seg = []
        for s in self._segments:
            if s.n == 0 or s.n_postings == 0:
                continue
            excluded = s.deleted
            if allowed_arr is not None:
                excluded = excluded | (~np.isin(s.doc_map, allowed_arr)).astype(np.uint8)
            has_ex = bool(excluded.any())
            nonneg = q_min > 0 and s.min_weight > 0 and q_min * s.min_weight >= 1.2e-38
            od = np.empty((nq, kk), dtype=np.int64)
            os_ = np.empty((nq, kk), dtype=np.float32)
            if nq:
                _search_segment(s, (q_ptr, q_terms, q_w), excluded, has_ex, nonneg, kk,
                                prune if prune != "off" and nonneg else None, serial, threads,
                                od, os_)
            valid = od >= 0
            od[valid] = s.to_global(od[valid])
            per_seg.append((od, os_))
        if not per_seg:
            docs = np.full((nq, kk), -1, dtype=np.int64)
            scores = np.full((nq, kk), -np.inf, dtype=np.float32)
        elif len(per_seg) == 1:
            docs, scores = per_seg[0]
        else:
            docs = np.empty((nq, kk), dtype=np.int64)
            scores = np.empty((nq, kk), dtype=np.float32)
            kernels.merge_topk(np.stack([d for d, _ in per_seg]),
                               np.stack([s for _, s in per_seg]), docs, scores)
        if kk < k:
            docs = np.concatenate([docs, np.full((nq, k - kk), -1, np.int64)], axis=1)
            scores = np.concatenate([scores, np.full((nq, k - kk), -np.inf, np.float32)],
                                    axis=1)
        return docs, scores

    def _check_allowed(self, allowed) -> np.ndarray | None:
        if allowed is None:
            return None
        arr = np.asarray(allowed)
        if arr.dtype == bool:
            raise InvalidInputError("allowed must be an array of doc numbers, not a boolean mask")
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(arr.dtype, np.integer):
            raise InvalidInputError(f"allowed must hold integer doc numbers, got dtype {arr.dtype}")
        arr = np.unique(arr.astype(np.int64).ravel())
        if arr[0] < 0 or arr[-1] >= self._n_docs:
            bad = arr[0] if arr[0] < 0 else arr[-1]
            raise InvalidInputError(f"allowed doc number {bad} is out of range [0, {self._n_docs})")
        return arr

    # ------------------------------------------------------------------ updates
    def add(self, csr, doc_numbers: Iterable[int] | None = None) -> np.ndarray:
        """Append documents as a new segment; returns their doc numbers (int64).

        Default numbers are n_docs, n_docs+1, ... . Explicit ``doc_numbers`` must be unique
        and not live (a deleted number may be reused: that is an update). Rows are
        quantised with the index's mode (own per-term scales for this segment)."""
        m = _as_csr(csr, "documents")
        n = m.shape[0]
        nums = doc_numbers_for_add(doc_numbers, n, self._n_docs)
        if doc_numbers is not None:
            live = self._is_live(nums)
            if live.any():
                raise InvalidInputError(f"doc numbers already live in the index: "
                                 f"{nums[live][:5].tolist()} (delete them first)")
        if n == 0:
            return nums
        order = np.argsort(nums, kind="stable")
        m = m[order]
        self._segments.append(_build_segment(m, nums[order], self.quantize, self.dense_min))
        self._n_docs = max(self._n_docs, int(nums.max()) + 1)
        self._n_terms = max(self._n_terms, m.shape[1])
        return nums

    def delete(self, doc_numbers: Iterable[int]) -> None:
        """Tombstone live documents; unknown or already-deleted numbers raise ValueError."""
        arr = np.asarray(list(doc_numbers) if not isinstance(doc_numbers, np.ndarray)
                         else doc_numbers)
        if arr.size == 0:
            return
        if not np.issubdtype(arr.dtype, np.integer):  # a boolean mask or floats: never cast
            raise InvalidInputError(f"doc numbers to delete must be integers, got dtype {arr.dtype}")
        nums = np.unique(arr.astype(np.int64).ravel())
        hits = self._locate(nums)
        found = np.zeros(nums.shape, dtype=bool)
        for _, where, _ in hits:
            found[where] = True
        if not found.all():
            raise InvalidInputError(f"cannot delete doc numbers that are not live: "
                             f"{nums[~found][:5].tolist()}")
        for si, _, local in hits:
            seg = self._segments[si]
            if not seg.deleted.flags.writeable:
                seg.deleted = seg.deleted.copy()
            seg.deleted[local] = 1

    def merge(self) -> None:
        """Rewrite all live documents into one segment (drops tombstoned postings).
        Exact for float32 indexes; quantised ones are re-quantised from decoded weights."""
        parts, maps = [], []
        for s in self._segments:
            keep = (s.deleted == 0).astype(np.uint8)
            parts.append(s.decoded(self._n_terms, keep))
            maps.append(s.doc_map[keep == 1])
        if parts:
            m = sp.vstack(parts, format="csr")
            nums = np.concatenate(maps)
        else:
            m = sp.csr_matrix((0, self._n_terms), dtype=np.float32)
            nums = np.zeros(0, dtype=np.int64)
        order = np.argsort(nums, kind="stable")
        m = _as_csr(m[order], "documents")
        self._segments = [_build_segment(m, nums[order], self.quantize, self.dense_min)]

    # ------------------------------------------------------------------ persistence
    def describe(self) -> dict[str, Any]:
        """The index manifest's entry for this part (``index.parts.Part``)."""
        return {"n_docs": self._n_docs, "n_terms": self._n_terms, "n_postings": self.n_postings,
                "n_segments": self.n_segments, "quantize": self.quantize}

    def save(self, folder: str | os.PathLike) -> None:
        """Write the segments' .npy arrays and ``sparse.json`` (shapes, quantisation) into
        ``folder``, which must be new or empty. No temp folder and no checksums: the index
        store (``index.store``) checksums the files and swaps the folder in atomically."""
        folder = check_empty_folder(folder)
        segs = []
        for i, s in enumerate(self._segments):
            files = {}
            for a in _ARRAYS:
                name = f"seg{i:04d}_{a}.npy"
                save_npy(folder / name, np.ascontiguousarray(getattr(s, a)))
                files[a] = {"file": name}
            segs.append({"n_terms": s.n_terms, "n": s.n, "doc_start": s.doc_start,
                         "n_postings": s.n_postings,
                         "min_weight": s.min_weight if np.isfinite(s.min_weight) else None,
                         "files": files})
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "n_docs": self._n_docs,
                "n_terms": self._n_terms, "quantize": self.quantize, "dense_min": self.dense_min,
                "block_bits": kernels.BLOCK_BITS, "segments": segs}
        with open(folder / META_FILE, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)

    @classmethod
    def load(cls, folder: str | os.PathLike, entry: Mapping[str, Any] | None = None, *,
             mmap: bool = True) -> "SparseIndex":
        """Open a folder written by :meth:`save` (or by alignir before parts existed, whose
        ``manifest.json`` carried per-file checksums: they are not checked here, the index
        store verifies every file). ``mmap``: map the arrays copy-on-write instead of reading
        them. ``entry``: unused (the folder describes itself)."""
        path = Path(folder)
        mf = path / META_FILE
        if not mf.is_file():
            mf = path / _LEGACY_META_FILE
        if not mf.is_file():
            raise InvalidInputError(f"{path} is not a sparse index directory (no {META_FILE})")
        try:
            manifest = json.loads(mf.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"corrupt sparse index metadata {mf}: {e}") from None
        if manifest.get("format") != FORMAT or manifest.get("version") not in (1, FORMAT_VERSION):
            raise InvalidInputError(f"{mf}: unsupported format {manifest.get('format')!r} "
                             f"version {manifest.get('version')!r}")
        if manifest.get("block_bits") != kernels.BLOCK_BITS:
            raise InvalidInputError(f"{mf}: block_bits {manifest.get('block_bits')} != "
                             f"{kernels.BLOCK_BITS}")
        segments = []
        for sm in manifest["segments"]:
            arrays = {}
            for a in _ARRAYS:
                if a in _DENSE_ARRAYS and a not in sm["files"]:  # version 1: no dense columns
                    arrays[a] = (np.zeros(1, np.int64) if a == "dense_off" else
                                 np.zeros(0, np.int64 if a == "dense_keys" else
                                          arrays["weights"].dtype))
                    continue
                f = path / sm["files"][a]["file"]
                if not f.is_file():
                    raise InvalidInputError(f"sparse index file missing: {f}")
                try:
                    arr = np.load(f, mmap_mode="c" if mmap else None, allow_pickle=False)
                except (ValueError, OSError) as e:
                    raise InvalidInputError(f"cannot read {f}: {e}") from None
                arrays[a] = arr
            if any(a.ndim != 1 for a in arrays.values()):
                raise InvalidInputError(f"{path}: segment arrays do not match the manifest shapes")
            arrays["deleted"] = np.array(arrays["deleted"])  # small, mutated by delete()
            seg = _Segment(**arrays, n_terms=int(sm["n_terms"]), min_weight=0.0,
                           n_postings=int(sm.get("n_postings", arrays["docs"].shape[0])),
                           doc_start=int(sm["doc_start"]))
            if (seg.n != int(sm["n"]) or seg.ptr.shape[0] != seg.n_terms * seg.nb + 1
                    or seg.map_.shape[0] not in (0, seg.n)
                    or seg.dense_off.shape[0] != seg.dense_keys.shape[0] + 1
                    or seg.dense.shape[0] != int(seg.dense_off[-1])
                    or not _consistent(seg, manifest.get("quantize"))):
                raise InvalidInputError(f"{path}: segment arrays do not match the manifest shapes")
            if "min_weight" in sm:  # stored: no pass over the mapped weights at load
                mw = sm["min_weight"]
                seg.min_weight = float("inf") if mw is None else float(mw)
            else:  # written before the manifest kept it
                seg.min_weight = _min_weight(seg)
            segments.append(seg)
        return cls(segments, manifest["n_docs"], manifest["n_terms"], manifest["quantize"],
                   manifest.get("dense_min"))


def _consistent(seg: _Segment, quantize: str | None) -> bool:
    """The kernels' reads stay inside the segment's arrays (O(1) checks: a truncated or
    swapped file must be an error, not garbage scores or a crash in numba)."""
    want = np.float32 if quantize is None else _QUANT_LEVELS.get(quantize, (None,))[0]
    n_lo = seg.n_terms if quantize is not None else 0
    return (seg.weights.dtype == want and seg.dense.dtype == want
            and seg.docs.dtype == np.uint16 and seg.deleted.dtype == np.uint8
            and all(a.dtype == np.int64 for a in (seg.ptr, seg.map_, seg.dense_keys, seg.dense_off))
            and seg.lo.dtype == np.float32 and seg.scale.dtype == np.float32
            and seg.lo.shape[0] == n_lo and seg.scale.shape[0] == n_lo
            and int(seg.ptr[0]) == 0 and int(seg.dense_off[0]) == 0
            and int(seg.ptr[-1]) == seg.docs.shape[0] == seg.weights.shape[0])


def _search_segment(s: _Segment, query: tuple, excluded: np.ndarray, has_ex: bool,
                    nonneg: bool, k: int, prune: str | None, serial: bool, threads: int | None,
                    od: np.ndarray, os_: np.ndarray) -> None:
    """Run the right kernel on one segment: pruned or exhaustive, on this thread (no GIL)
    or across numba's pool (one batch at a time)."""
    head = (*query, *s.kernel_arrays())
    bm = s.block_maxima(blockmax.SUB_BITS) if prune else None
    if prune == "auto" and bm.cap_ratio > blockmax.AUTO_MAX_CAP_RATIO:
        bm = None  # near-uniform weights: bounds too loose to pay for themselves
    if bm is not None:
        args = (*head, bm.cap, bm.hi_ptr, bm.hi_sub, bm.hi_max, bm.sub_bits, s.n,
                s.n_terms, excluded, has_ex, k, blockmax.boot_blocks(k, bm.sub_bits),
                float(blockmax.FEW_COST))
        if serial:
            blockmax.search_pruned_serial(*args, od, os_)
            return
        with _POOL_LOCK, _threads(threads):
            blockmax.search_pruned(*args, numba.get_num_threads(), od, os_)
        return
    args = (*head, s.n, s.n_terms, excluded, has_ex, nonneg, k)
    if serial:
        kernels.search_segment_serial(*args, od, os_)
        return
    with _POOL_LOCK, _threads(threads):
        kernels.search_segment(*args, numba.get_num_threads(), od, os_)


class _threads:
    """Context manager: run numba kernels with ``n`` threads, then restore."""

    def __init__(self, n: int | None):
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer))
                              or not 1 <= n <= numba.config.NUMBA_NUM_THREADS):
            raise InvalidInputError(f"threads must be an integer in [1, "
                             f"{numba.config.NUMBA_NUM_THREADS}], got {n!r}")
        self.n = n

    def __enter__(self):
        self.prev = numba.get_num_threads()
        if self.n is not None:
            numba.set_num_threads(int(self.n))

    def __exit__(self, *exc):
        numba.set_num_threads(self.prev)
