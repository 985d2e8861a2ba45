"""Dense side of the hybrid index: a FAISS wrapper over the encoder's vectors h.

Scores are inner products ``<T(q), T(d)>`` where ``T`` is an optional corpus-fitted
affine map (centering, or whitening in the spirit of BERT-whitening, the anisotropy
fix cited in AutoRegEmbed §2) followed by an optional L2 normalisation (cosine). The
map is fitted once on the corpus vectors at ``build`` and applied identically to
queries and to documents added later. PromptEOL vectors are dominated by their first
principal component (“A Text is Worth Several Tokens” §4, eq.14), which is what centering/whitening targets.

Doc numbers are row indices of the collection, as in ``index.sparse.SparseIndex``:
``build`` gives rows ``0..n-1``, ``add`` appends (or takes explicit numbers, see
:meth:`DenseIndex.add`). ``remove`` is a *tombstone*: the row keeps its number and
vector, but is never returned again. FAISS ``remove_ids``
is not used: it renumbers flat indexes and HNSW does not support it, which would
break the shared numbering with the sparse index.

Index kinds: ``"flat"`` (exact ``IndexFlatIP``, the default), ``"hnsw"``
(``IndexHNSWFlat``), ``"ivfpq"`` (``IndexIVFPQ``, trained on the corpus). A faiss GPU
copy is used for flat/IVF-PQ searches when ``faiss.get_num_gpus() > 0``.

A part of the index folder (``index.parts.Part``). Files written by ``save`` (no pickle): ``dense.json`` (parameters), ``index.faiss``
(faiss serialisation), ``mean.npy`` / ``whiten.npy`` (the fitted map),
``deleted.npy`` (tombstones).
"""
from __future__ import annotations

from alignir.checks import doc_numbers_for_add, int_ids
from alignir.errors import InvalidInputError

import json
import logging
import math
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import faiss
import numpy as np

from alignir.io import save_npy
from alignir.index.parts import check_empty_folder

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
KINDS = ("flat", "hnsw", "ivfpq")
WHITENINGS = (None, "zca", "pca")

_FLT_MAX = float(np.finfo(np.float32).max)


# ---------------------------------------------------------------------------------
# the fitted map T(x) = (x - mean) @ matrix, then optional L2 normalisation


@dataclass
class Transform:
    """Affine map fitted on the corpus: ``T(x) = (x - mean) @ matrix``.

    ``mean`` is None without centering; ``matrix`` [d_in, d_out] is None without
    whitening. Whitening follows C = U diag(s) Uᵀ (covariance of the centred corpus):
    PCA-whitening ``W = U_r diag(1/sqrt(s_r + eps))`` keeps the top r components;
    ZCA ``W = U_r diag(1/sqrt(s_r + eps)) U_rᵀ`` rotates back to the input axes.
    ZCA and PCA-whitening of the same rank give identical inner products (they differ
    by the orthogonal U_rᵀ); they differ when ``whiten_dim`` truncates PCA.
    """

    mean: np.ndarray | None = None
    matrix: np.ndarray | None = None

    @property
    def out_dim(self) -> int | None:
        return None if self.matrix is None else int(self.matrix.shape[1])

    def apply(self, x: np.ndarray) -> np.ndarray:
        y = np.asarray(x, dtype=np.float32)
        if self.mean is not None:
            y = y - self.mean
        if self.matrix is not None:
            y = y @ self.matrix
        return np.ascontiguousarray(y, dtype=np.float32)

    @staticmethod
    def fit(
        x: np.ndarray,
        center: bool,
        whiten: str | None,
        whiten_dim: int | None = None,
        eps: float = 1e-4,
        rank_tol: float = 1e-6,
    ) -> "Transform":
        """Fit on corpus vectors ``x`` [n, d]; computed in float64.

        Components whose variance is below ``rank_tol`` × the largest are dropped
        (with n < d the covariance is rank-deficient; inverting its null space would
        only amplify noise). ``eps`` (relative to the largest variance) regularises
        the inverse square root.
        """
        if whiten not in WHITENINGS:
            raise InvalidInputError(f"whiten must be one of {WHITENINGS}, got {whiten!r}")
        if not center and whiten is None:
            return Transform()
        x64 = np.asarray(x, dtype=np.float64)
        mean = x64.mean(axis=0)
        if whiten is None:
            return Transform(mean=mean.astype(np.float32))
        if x64.shape[0] < 2:
            raise InvalidInputError("whitening needs at least 2 corpus vectors to fit a covariance")
        xc = x64 - mean
        cov = (xc.T @ xc) / (x64.shape[0] - 1)
        s, u = np.linalg.eigh(cov)
        order = np.argsort(s)[::-1]
        s, u = np.clip(s[order], 0.0, None), u[:, order]
        if s[0] <= 0:
            raise InvalidInputError("cannot whiten: the corpus vectors have zero variance")
        rank = int((s > rank_tol * s[0]).sum())
        if whiten_dim is not None:
            if not 1 <= whiten_dim <= x64.shape[1]:
                raise InvalidInputError(f"whiten_dim must be in [1, {x64.shape[1]}], got {whiten_dim}")
            if whiten == "zca":
                raise InvalidInputError("whiten_dim only applies to whiten='pca' (ZCA keeps the input axes)")
            rank = min(rank, whiten_dim)
        s_r, u_r = s[:rank], u[:, :rank]
        w = u_r / np.sqrt(s_r + eps * s[0])
        if whiten == "zca":
            w = w @ u_r.T
        return Transform(mean=mean.astype(np.float32), matrix=w.astype(np.float32))



_SAID: set[str] = set()


def _say_cpu_once(reason: str) -> None:
    """Log why a GPU request searches on the CPU, once per process and reason."""
    if reason not in _SAID:
        _SAID.add(reason)
        log.warning("dense index: GPU requested but %s", reason)


def _l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norms > 0, norms, 1.0), dtype=np.float32)


# ---------------------------------------------------------------------------------
# parameters


@dataclass
class DenseParams:
    """Everything that defines a dense index (stored in ``dense.json``)."""

    kind: str = "flat"
    normalize: bool = False
    center: bool = False
    whiten: str | None = None
    whiten_dim: int | None = None
    whiten_eps: float = 1e-4
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None  # IVF lists; None: about 4·sqrt(n), at least 39 points per list
    pq_m: int | None = None  # PQ sub-quantisers; None: largest divisor of dim ≤ min(64, dim/4)
    pq_nbits: int = 8
    nprobe: int = 16
    exact_below: int = 4096  # filtered searches over fewer candidates are brute force
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise InvalidInputError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.whiten not in WHITENINGS:
            raise InvalidInputError(f"whiten must be one of {WHITENINGS}, got {self.whiten!r}")
        if self.whiten is not None and not self.center:
            raise InvalidInputError("whitening always centres the vectors: pass center=True (or leave it unset)")
        for name in ("hnsw_m", "ef_construction", "ef_search", "pq_nbits", "nprobe"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.exact_below < 0:
            raise InvalidInputError(f"exact_below must be >= 0, got {self.exact_below}")


def _auto_pq_m(dim: int) -> int:
    cap = max(1, min(64, dim // 4))
    return max(m for m in range(1, cap + 1) if dim % m == 0)


# ---------------------------------------------------------------------------------
# the index


class DenseIndex:
    """FAISS index over (transformed) dense vectors, numbered like the collection rows.

    Build with :meth:`build`; search with :meth:`search`; persist with :meth:`save` /
    :meth:`load`. Concurrent :meth:`search` calls from several threads are safe;
    ``add`` / ``remove`` must not run concurrently with searches.
    """

    def __init__(self, params: DenseParams, dim_in: int, transform: Transform, index: Any,
                 deleted: np.ndarray | None = None, use_gpu: bool = True) -> None:
        self.params = params
        self.dim_in = int(dim_in)
        self.transform = transform
        self._index = index  # the CPU index: the master copy (save, reconstruct)
        self._deleted = np.zeros(index.ntotal, dtype=bool) if deleted is None else deleted.astype(bool)
        self._use_gpu = use_gpu
        self._gpu_index: Any = None
        self._direct_map_ready = False
        self.read_only = False  # set by load(mmap=True): the faiss data is a read-only mapping
        self._lock = threading.Lock()  # guards the lazy direct map / GPU copy: searches may run in threads

    # ---- construction ------------------------------------------------------------

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        kind: str = "flat",
        normalize: bool = False,
        center: bool | None = None,
        whiten: str | None = None,
        use_gpu: bool = True,
        **options: Any,
    ) -> "DenseIndex":
        """Index corpus ``vectors`` [n, d] as doc numbers ``0..n-1``.

        ``normalize``: cosine (L2-normalise after the transform) instead of raw inner
        product — follow the encoder. ``center``: subtract the corpus mean (defaults to
        True when whitening). ``whiten``: None, ``"zca"`` or ``"pca"`` (see
        :class:`Transform`). ``options``: any :class:`DenseParams` field (``hnsw_m``,
        ``ef_construction``, ``ef_search``, ``nlist``, ``pq_m``, ``pq_nbits``,
        ``nprobe``, ``whiten_dim``, ``whiten_eps``, ``exact_below``).
        """
        x = _check_matrix(vectors, "vectors")
        if x.shape[0] == 0:
            raise InvalidInputError("cannot build a dense index from 0 vectors")
        unknown = set(options) - set(DenseParams.__dataclass_fields__) - {"extra"}
        if unknown:
            raise InvalidInputError(f"unknown dense index option(s): {sorted(unknown)}")
        if center is None:
            center = whiten is not None
        params = DenseParams(kind=kind, normalize=bool(normalize), center=bool(center),
                             whiten=whiten, **options)
        params.validate()
        transform = Transform.fit(x, params.center, params.whiten, params.whiten_dim, params.whiten_eps)
        xt = transform.apply(x)
        if params.normalize:
            xt = _l2_normalize(xt)
        index = _make_faiss_index(params, xt)
        index.add(xt)
        return cls(params, x.shape[1], transform, index, use_gpu=use_gpu)

    def add(self, vectors: np.ndarray, doc_numbers: np.ndarray | list[int] | None = None
            ) -> np.ndarray:
        """Add documents; returns their doc numbers (int64). The fitted transform is
        reused, not refitted.

        Default numbers are ``n_docs, n_docs+1, ...`` (as ``SparseIndex.add``). Explicit
        ``doc_numbers`` (unique) may be new numbers ≥ ``n_docs`` — skipped numbers become
        tombstoned placeholder rows — or tombstoned numbers being updated, which only the
        flat index supports (its vectors are overwritten in place).
        """
        if self.read_only:
            raise InvalidInputError("this dense index was loaded with mmap=True and is read-only; "
                             "load it with mmap=False to add documents")
        x = _check_matrix(vectors, "vectors", self.dim_in)
        n_old = self.n_docs
        nums = doc_numbers_for_add(doc_numbers, x.shape[0], n_old)
        if x.shape[0] == 0:
            return nums
        xt = self._prepare(x)
        reuse = nums < n_old
        if reuse.any():
            live = nums[reuse][~self._deleted[nums[reuse]]]
            if live.size:
                raise InvalidInputError(f"doc numbers already live in the index: {live[:5].tolist()} "
                                 "(remove them first)")
            if self.params.kind != "flat":
                raise InvalidInputError(f"re-adding removed doc numbers needs kind='flat' "
                                 f"({self.params.kind} cannot replace vectors); rebuild instead")
            xb = faiss.rev_swig_ptr(self._index.get_xb(), n_old * self.dim).reshape(n_old, self.dim)
            xb[nums[reuse]] = xt[reuse]
            self._deleted[nums[reuse]] = False
        new = ~reuse
        if new.any():
            top = int(nums[new].max()) + 1
            block = np.zeros((top - n_old, self.dim), dtype=np.float32)
            block[nums[new] - n_old] = xt[new]
            self._index.add(block)
            dead = np.ones(top - n_old, dtype=bool)
            dead[nums[new] - n_old] = False
            self._deleted = np.concatenate([self._deleted, dead])
        self._gpu_index = None
        return nums

    def remove(self, doc_numbers: np.ndarray | list[int]) -> None:
        """Tombstone documents: they keep their numbers but are never returned."""
        ids = int_ids(doc_numbers, self.n_docs, "doc_numbers", "doc numbers")
        self._deleted[ids] = True

    # ---- properties --------------------------------------------------------------

    @property
    def n_docs(self) -> int:
        """Rows ever added, including tombstoned ones (= next doc number)."""
        return int(self._index.ntotal)

    @property
    def n_live(self) -> int:
        return int(self.n_docs - self._deleted.sum())

    @property
    def dim(self) -> int:
        """Dimension of the indexed (transformed) vectors."""
        return int(self._index.d)

    @property
    def deleted(self) -> np.ndarray:
        return self._deleted.copy()

    @property
    def kind(self) -> str:
        return self.params.kind

    def use_gpu(self, enabled: bool) -> bool:
        """Search on the GPU (a faiss GPU copy of flat / IVF-PQ indexes, made at the next search)
        or not; returns whether searches will really run there (faiss-gpu installed and a GPU
        visible: ``pip install 'alignir[gpu]'``). HNSW always searches on the CPU."""
        with self._lock:
            self._use_gpu = bool(enabled)
            if not enabled:
                self._gpu_index = None
        on_gpu = bool(enabled) and self.params.kind != "hnsw" and faiss.get_num_gpus() > 0
        if enabled and not on_gpu:
            _say_cpu_once("an HNSW index searches on the CPU" if self.params.kind == "hnsw" else
                          "faiss sees no GPU here (faiss-cpu, or no device): the dense leg searches on the CPU; "
                          "for FAISS on the GPU: pip install 'alignir[gpu]'")
        return on_gpu

    def transform_queries(self, Q: np.ndarray) -> np.ndarray:
        """The exact vectors the index compares documents with: T(q), normalised if set."""
        return self._prepare(_check_matrix(Q, "Q", self.dim_in))

    # ---- search ------------------------------------------------------------------

    def search(self, Q: np.ndarray, k: int, allowed: np.ndarray | list[int] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` doc numbers (int64 [nq, k]) and scores (float32 [nq, k]).

        ``allowed``: doc numbers that may be returned; any other doc never comes back.
        Rows are padded with -1 / -inf when fewer than ``k`` docs qualify. Filtered
        searches use a faiss ``IDSelectorBitmap``; when the candidates number fewer
        than ``exact_below``, or an approximate index returns fewer hits than exist,
        the scores are computed exactly over the candidates instead.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        q = np.asarray(Q)
        if q.ndim == 1:
            q = q[None, :]
        qt = self.transform_queries(q)
        nq = qt.shape[0]
        docs = np.full((nq, k), -1, dtype=np.int64)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        if nq == 0 or self.n_docs == 0:
            return docs, scores

        mask = None
        if allowed is not None:
            mask = np.zeros(self.n_docs, dtype=bool)
            mask[int_ids(allowed, self.n_docs, "allowed", "doc numbers")] = True
        if self._deleted.any():
            mask = ~self._deleted if mask is None else mask & ~self._deleted
        n_cand = self.n_docs if mask is None else int(mask.sum())
        if n_cand == 0:
            return docs, scores
        kk = min(k, n_cand)

        if mask is not None and (n_cand <= self.params.exact_below or not self._selector_supported()):
            cand = np.flatnonzero(mask)
            d, s = self._exact(qt, cand, kk)
        else:
            flat = self.params.kind == "flat"
            # one more (on the CPU; GPU searches cap k): does a tie run past the k-th place?
            extra = int(flat and kk < n_cand and self._selector_supported())
            d, s = self._faiss_search(qt, kk + extra, mask)
            if extra:
                # faiss keeps any of the documents tied at the k-th score (often the highest
                # numbers): such rows are scored exactly, ties -> lower doc number
                tied = np.flatnonzero((s[:, kk - 1] == s[:, kk]) & (d[:, kk] >= 0))
                d, s = d[:, :kk], s[:, :kk]
                if tied.size:
                    cand = np.arange(self.n_docs) if mask is None else np.flatnonzero(mask)
                    d[tied], s[tied] = self._exact(qt[tied], cand, kk)
            if not flat:
                short = np.flatnonzero((d >= 0).sum(axis=1) < kk)
                if short.size:  # approximate search missed qualifying docs (the probed IVF lists or
                    # the HNSW beam held fewer than k, filter or not): exact refill
                    cand = np.arange(self.n_docs) if mask is None else np.flatnonzero(mask)
                    d[short], s[short] = self._exact(qt[short], cand, kk)
        docs[:, :kk] = d
        scores[:, :kk] = s
        missing = docs < 0
        scores[missing] = -np.inf
        return docs, scores

    def _faiss_search(self, qt: np.ndarray, k: int, mask: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray]:
        index = self._search_index()
        on_gpu = index is not self._index
        sel = bitmap = None
        if mask is not None:
            bitmap = np.packbits(mask, bitorder="little")
            sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bitmap))
        kind = self.params.kind
        if on_gpu:
            if kind == "ivfpq":
                faiss.GpuParameterSpace().set_index_parameter(index, "nprobe", self.params.nprobe)
            dist, ids = index.search(qt, k)
        else:
            if kind == "hnsw":
                params = faiss.SearchParametersHNSW(sel=sel, efSearch=max(self.params.ef_search, k))
            elif kind == "ivfpq":
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.params.nprobe)
            else:
                params = faiss.SearchParameters(sel=sel)
            dist, ids = index.search(qt, k, params=params)
        del bitmap  # the selector borrowed it until here
        ids = ids.astype(np.int64)
        dist = dist.astype(np.float32)
        dist[(ids < 0) | (dist <= -_FLT_MAX)] = -np.inf
        ids[~np.isfinite(dist)] = -1
        # faiss returns equal scores in no set order (a flat index: highest number first);
        # break ties by doc number ascending, as the exact path and the sparse index do
        return _topk_rows(ids, dist, k)

    def _exact(self, qt: np.ndarray, cand: np.ndarray, k: int, chunk: int = 65536
               ) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force top-k of ``qt`` over candidate doc numbers (ties: lower number first)."""
        nq = qt.shape[0]
        best_d = np.full((nq, 0), -1, dtype=np.int64)
        best_s = np.full((nq, 0), -np.inf, dtype=np.float32)
        for start in range(0, len(cand), chunk):
            ids = cand[start:start + chunk]
            s = qt @ self._reconstruct(ids).T
            all_s = np.concatenate([best_s, s.astype(np.float32)], axis=1)
            all_d = np.concatenate([best_d, np.broadcast_to(ids, s.shape)], axis=1)
            best_d, best_s = _topk_rows(all_d, all_s, k)
        return best_d, best_s

    def reconstruct(self, doc_numbers: np.ndarray | list[int]) -> np.ndarray:
        """The indexed vectors (T(h), normalised if set) of ``doc_numbers`` [n, dim] float32:
        exactly what :meth:`search` scores for flat / HNSW, the decoded codes for IVF-PQ."""
        return np.asarray(self._reconstruct(int_ids(doc_numbers, self.n_docs, "doc_numbers", "doc numbers")),
                          dtype=np.float32)

    def _reconstruct(self, ids: np.ndarray) -> np.ndarray:
        if self.params.kind == "ivfpq" and not self._direct_map_ready:
            with self._lock:
                if not self._direct_map_ready:
                    self._index.make_direct_map()
                    self._direct_map_ready = True
        return self._index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))

    def _selector_supported(self) -> bool:
        return self._search_index() is self._index

    def _search_index(self) -> Any:
        """The GPU copy when a GPU is present (flat / IVF-PQ), else the CPU index."""
        if not self._use_gpu or self.params.kind == "hnsw" or faiss.get_num_gpus() == 0:
            return self._index
        with self._lock:
            if self._gpu_index is None:
                self._gpu_index = faiss.index_cpu_to_all_gpus(self._index)
            return self._gpu_index

    def _prepare(self, x: np.ndarray) -> np.ndarray:
        y = self.transform.apply(x)
        return _l2_normalize(y) if self.params.normalize else y

    # ---- persistence -------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The index manifest's entry for this part (``index.parts.Part``)."""
        return {"kind": self.kind, "n_docs": self.n_docs, "n_live": self.n_live, "dim_in": self.dim_in,
                "dim": self.dim, "normalize": self.params.normalize, "center": self.params.center,
                "whiten": self.params.whiten}

    def save(self, folder: str | Path) -> None:
        """Write ``dense.json``, ``index.faiss``, ``deleted.npy`` and the transform
        arrays into ``folder`` (new or empty). No pickle."""
        out = check_empty_folder(folder)
        meta = {
            "format_version": FORMAT_VERSION,
            "faiss_version": faiss.__version__,
            "dim_in": self.dim_in,
            "dim": self.dim,
            "n_docs": self.n_docs,
            "n_live": self.n_live,
            "params": asdict(self.params),
            "has_mean": self.transform.mean is not None,
            "has_whiten": self.transform.matrix is not None,
        }
        blob = faiss.serialize_index(self._index)  # uint8 array; written by Python for errno-rich errors
        with open(out / "index.faiss", "wb") as f:
            f.write(memoryview(blob))
        save_npy(out / "deleted.npy", self._deleted)
        if self.transform.mean is not None:
            save_npy(out / "mean.npy", self.transform.mean)
        if self.transform.matrix is not None:
            save_npy(out / "whiten.npy", self.transform.matrix)
        with open(out / "dense.json", "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)

    @classmethod
    def load(cls, folder: str | Path, entry: Mapping[str, Any] | None = None, *, mmap: bool = False,
             use_gpu: bool = True) -> "DenseIndex":
        """Read what :meth:`save` wrote (``entry``: unused, the folder describes itself).

        ``mmap``: map ``index.faiss`` read-only instead of reading it: the vectors of a flat
        index and the HNSW storage are used in place from the page cache (faiss
        ``IO_FLAG_MMAP_IFC``), IVF-PQ inverted lists likewise (``IO_FLAG_MMAP``); the index is
        then read-only (``add`` refuses, ``remove`` still works: tombstones are in memory)."""
        src = Path(folder)
        meta_path = src / "dense.json"
        if not meta_path.is_file():
            raise InvalidInputError(f"{src} is not a dense index folder (no dense.json)")
        try:
            meta = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"{meta_path} is not valid JSON: {e}") from e
        version = meta.get("format_version")
        if not isinstance(version, int) or version < 1:
            raise InvalidInputError(f"{meta_path}: missing or invalid format_version")
        if version > FORMAT_VERSION:
            raise InvalidInputError(f"{meta_path}: dense index format {version} is newer than supported ({FORMAT_VERSION})")
        known = set(DenseParams.__dataclass_fields__)
        params = DenseParams(**{k: v for k, v in meta["params"].items() if k in known})
        params.validate()
        flags = 0
        if mmap:
            flags = faiss.IO_FLAG_MMAP if params.kind == "ivfpq" else faiss.IO_FLAG_MMAP_IFC
        try:
            index = faiss.read_index(str(src / "index.faiss"), flags)
        except RuntimeError as e:
            raise InvalidInputError(f"{src / 'index.faiss'} is not a readable faiss index: {e}") from e
        mean = np.load(src / "mean.npy", allow_pickle=False) if meta.get("has_mean") else None
        matrix = np.load(src / "whiten.npy", allow_pickle=False) if meta.get("has_whiten") else None
        deleted = np.load(src / "deleted.npy", allow_pickle=False)
        dim_in = int(meta["dim_in"])
        if index.ntotal != meta["n_docs"] or deleted.shape != (index.ntotal,):
            raise InvalidInputError(f"{src}: faiss index holds {index.ntotal} vectors, metadata says "
                             f"{meta['n_docs']} and tombstones {deleted.shape}")
        if (mean is not None and mean.shape != (dim_in,)) or (
                matrix is not None and matrix.shape != (dim_in, index.d)):
            raise InvalidInputError(f"{src}: transform arrays do not match dimensions {dim_in} -> {index.d}")
        if matrix is None and index.d != dim_in:
            raise InvalidInputError(f"{src}: faiss dimension {index.d} != input dimension {dim_in}")
        out = cls(params, dim_in, Transform(mean, matrix), index, deleted, use_gpu=use_gpu)
        out.read_only = bool(flags)
        return out

    def vectors(self) -> np.ndarray | None:
        """The indexed (transformed) vectors [n_docs, dim] as a read-only view of faiss's own
        storage — the mapped ``index.faiss`` after ``load(mmap=True)`` — for the flat and HNSW
        kinds; None for IVF-PQ (its vectors are compressed codes)."""
        store = self._index
        if self.params.kind == "hnsw":
            store = faiss.downcast_index(self._index.storage)
        elif self.params.kind != "flat":
            return None
        n = self.n_docs
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        view = faiss.rev_swig_ptr(store.get_xb(), n * self.dim).reshape(n, self.dim)
        view.flags.writeable = False
        return view


# ---------------------------------------------------------------------------------
# helpers


def _make_faiss_index(params: DenseParams, xt: np.ndarray) -> Any:
    n, d = xt.shape
    ip = faiss.METRIC_INNER_PRODUCT
    if params.kind == "flat":
        return faiss.IndexFlatIP(d)
    if params.kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, int(params.hnsw_m), ip)
        index.hnsw.efConstruction = int(params.ef_construction)
        index.hnsw.efSearch = int(params.ef_search)
        return index
    nlist = params.nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))
    m = params.pq_m or _auto_pq_m(d)
    if d % m:
        raise InvalidInputError(f"pq_m={m} must divide the vector dimension {d}")
    if n < nlist:
        raise InvalidInputError(f"IVF-PQ with nlist={nlist} needs at least {nlist} corpus vectors, got {n}")
    if n < 2 ** params.pq_nbits:
        raise InvalidInputError(f"IVF-PQ with pq_nbits={params.pq_nbits} needs at least "
                         f"{2 ** params.pq_nbits} corpus vectors to train, got {n}: lower "
                         "pq_nbits or use kind='flat'")
    params.nlist, params.pq_m = nlist, m
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, m, int(params.pq_nbits), ip)
    index.train(xt)
    index.nprobe = int(params.nprobe)
    return index


def _check_matrix(x: Any, name: str, dim: int | None = None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise InvalidInputError(f"{name} must be a 2-D array [n, d], got shape {a.shape}")
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise InvalidInputError(f"{name} must be numeric, got dtype {a.dtype}")
    if dim is not None and a.shape[1] != dim:
        raise InvalidInputError(f"{name} has dimension {a.shape[1]}, the index expects {dim}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return a


def _topk_rows(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the k best (score desc, doc number asc) among the columns."""
    k = min(k, scores.shape[1])
    order = np.lexsort((docs, -scores), axis=1)[:, :k]
    return (np.take_along_axis(docs, order, axis=1).astype(np.int64),
            np.take_along_axis(scores, order, axis=1).astype(np.float32))
