"""Aligned-token projection: dense h -> vocabulary logits E_g·h -> sparse term vectors.

“A Text is Worth Several Tokens: Text Embedding from LLMs Secretly Aligns Well with The Key Tokens”:

* §3.2 / Process 1: the aligned tokens of a text are the vocabulary sorted by e_tᵀh;
* eq.14: first-principal-component adjustment h_adj = h + λ·u1;
* eq.15: a document keeps its top-K aligned tokens with weight w_t = e_tᵀh;
* eq.16: a query's token set is its surface tokens ∪ its top-M aligned tokens, and the score
  is the sum of the document weights over the shared tokens (= dot product with a binary
  query vector).

Everything here works on arrays (numpy / torch); a tokenizer is needed only to build a
:class:`TermMap`.  Logits are computed in vocabulary chunks, so no [n, V] (let alone
[batch, seq, V]) tensor is ever materialised; outputs are ``scipy.sparse.csr_matrix``
float32 with one column per *term* (a token, or a folded group of token variants).
"""
from __future__ import annotations

from alignir.checks import int_ids
from alignir.errors import InvalidInputError

from functools import lru_cache
from typing import Iterable, Literal, Sequence

import numpy as np
import scipy.sparse as sp
import torch

__all__ = [
    "project_topk",
    "token_logits",
    "TermMap",
    "doc_vectors",
    "query_vectors",
    "svd_basis",
    "fit_pc1",
    "adjust",
    "TermContribution",
    "explain",
    "DOC_WEIGHTINGS",
    "QUERY_WEIGHTINGS",
]

from alignir.encoders.terms import SPACE_MARK, TermContribution, TermMap, explain, token_text  # noqa: E402,F401  (torch-free, defined there)
from alignir.encoders.weightings import DOC_WEIGHTINGS, QUERY_WEIGHTINGS  # noqa: E402  (defined once there)

#: rows of H processed at once (bounds the [rows, chunk] logit block to ~64 MB at chunk=8192)
_ROW_BLOCK = 2048


# ----------------------------------------------------------------------------- helpers


def _as_weight(lm_head: torch.Tensor | np.ndarray) -> torch.Tensor:
    """E_g as a detached 2-D torch tensor (dtype/device kept; chunks are cast to fp32)."""
    if isinstance(lm_head, np.ndarray):
        W = torch.from_numpy(np.ascontiguousarray(lm_head))
    elif isinstance(lm_head, torch.Tensor):
        W = lm_head.detach()
    else:
        raise InvalidInputError(f"lm_head must be a torch.Tensor or numpy array, got {type(lm_head).__name__}")
    if W.ndim != 2 or W.shape[0] == 0 or W.shape[1] == 0:
        raise InvalidInputError(f"lm_head must have shape [V, d] with V, d > 0, got {tuple(W.shape)}")
    if not W.is_floating_point():
        raise InvalidInputError(f"lm_head must be floating point, got {W.dtype}")
    return W


def _as_h(H: np.ndarray | torch.Tensor, d: int, name: str = "H") -> np.ndarray:
    """H as C-contiguous float32 numpy [n, d]; a 1-D vector is treated as one row."""
    if isinstance(H, torch.Tensor):
        H = H.detach().cpu().float().numpy()
    H = np.asarray(H)
    if H.ndim == 1:
        H = H[None, :]
    if H.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D [n, d], got shape {H.shape}")
    if H.shape[1] != d:
        raise InvalidInputError(f"{name} has dimension {H.shape[1]} but lm_head has d={d}")
    if not np.issubdtype(H.dtype, np.floating):
        raise InvalidInputError(f"{name} must be floating point, got {H.dtype}")
    H = np.ascontiguousarray(H, dtype=np.float32)
    if not np.isfinite(H).all():
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return H


def token_mask(mask_ids: Iterable[int] | np.ndarray | None, V: int) -> torch.Tensor | None:
    """Boolean [V] mask of ids never to be returned, or None (no ids given). The same ids give
    the same (shared, read-only by convention) tensor: a query's projection does not rebuild a
    262,144-entry mask each time."""
    if mask_ids is None:
        return None
    ids = int_ids(mask_ids if isinstance(mask_ids, np.ndarray) else list(mask_ids), V, "mask_ids", "token ids")
    if ids.size == 0:
        return None
    return _mask(np.unique(ids).astype(np.int64).tobytes(), V)


@lru_cache(maxsize=8)
def _mask(ids: bytes, V: int) -> torch.Tensor:
    m = torch.zeros(V, dtype=torch.bool)
    m[torch.from_numpy(np.frombuffer(ids, dtype=np.int64).copy())] = True
    return m


# ----------------------------------------------------------------------------- projection


@torch.no_grad()
def project_topk(
    H: np.ndarray | torch.Tensor,
    lm_head: torch.Tensor | np.ndarray,
    k: int,
    mask_ids: Iterable[int] | np.ndarray | None = None,
    chunk: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k aligned tokens of each row of H (“A Text is Worth Several Tokens” Process 1, lines 6-10).

    Logits e_tᵀh are computed for ``chunk`` vocabulary rows at a time (fp32) and merged into
    a running top-k, so memory is O(n·(k + chunk)) and never O(n·V).  Masked ids (special /
    unused tokens) are never returned.

    Returns ``(ids int32 [n, k], logits float32 [n, k])``; each row is sorted by logit
    descending, ties broken by the smaller token id.
    """
    W = _as_weight(lm_head)
    return _project_topk(_as_h(H, W.shape[1]), W, int(k), token_mask(mask_ids, W.shape[0]), chunk)


def _project_topk(X: np.ndarray, W: torch.Tensor, k: int, mask: torch.Tensor | None,
                  chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`project_topk` on checked inputs, with the [V] mask already built."""
    V = W.shape[0]
    if chunk < 1:
        raise InvalidInputError(f"chunk must be >= 1, got {chunk}")
    n_allowed = V - (int(mask.sum()) if mask is not None else 0)
    if k < 1 or k > n_allowed:
        raise InvalidInputError(f"k must be in [1, {n_allowed}] (vocabulary minus masked ids), got {k}")
    n = X.shape[0]
    out_ids = np.empty((n, k), dtype=np.int32)
    out_val = np.empty((n, k), dtype=np.float32)
    if n == 0:
        return out_ids, out_val
    dev = W.device
    if mask is not None:
        mask = mask.to(dev)
    for r0 in range(0, n, _ROW_BLOCK):
        h = torch.from_numpy(X[r0:r0 + _ROW_BLOCK]).to(dev)
        best_v = torch.full((h.shape[0], 0), float("-inf"), device=dev)
        best_i = torch.zeros((h.shape[0], 0), dtype=torch.int64, device=dev)
        for c0 in range(0, V, chunk):
            c1 = min(V, c0 + chunk)
            logits = h @ W[c0:c1].float().T  # [rows, c]
            if mask is not None:
                logits.masked_fill_(mask[c0:c1], float("-inf"))
            kk = min(k, c1 - c0)
            v, i = torch.topk(logits, kk, dim=1)
            cand_v = torch.cat([best_v, v], dim=1)
            cand_i = torch.cat([best_i, i + c0], dim=1)
            if cand_v.shape[1] > k:
                v, j = torch.topk(cand_v, k, dim=1)
                cand_v, cand_i = v, torch.gather(cand_i, 1, j)
            best_v, best_i = cand_v, cand_i
        bv = best_v.cpu().numpy().astype(np.float32)
        bi = best_i.cpu().numpy()
        # deterministic order: logit desc, then id asc
        order = _row_lexsort(bv, bi)
        out_val[r0:r0 + h.shape[0]] = np.take_along_axis(bv, order, 1)
        out_ids[r0:r0 + h.shape[0]] = np.take_along_axis(bi, order, 1).astype(np.int32)
    return out_ids, out_val


def _row_lexsort(vals: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per-row argsort by (value desc, id asc)."""
    order = np.argsort(ids, axis=1, kind="stable")
    v = np.take_along_axis(vals, order, 1)
    o2 = np.argsort(-v, axis=1, kind="stable")
    return np.take_along_axis(order, o2, 1)


@torch.no_grad()
def token_logits(
    H: np.ndarray | torch.Tensor,
    lm_head: torch.Tensor | np.ndarray,
    ids: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """e_tᵀh_i for the given token ids of each row i (a gather, no full projection)."""
    W = _as_weight(lm_head)
    V, d = W.shape
    X = _as_h(H, d)
    if len(ids) != X.shape[0]:
        raise InvalidInputError(f"got {len(ids)} id arrays for {X.shape[0]} rows of H")
    out = []
    for i, t in enumerate(ids):
        t = int_ids(t, V, f"ids[{i}]", "token ids")
        if t.size == 0:
            out.append(np.zeros(0, dtype=np.float32))
            continue
        e = W[torch.from_numpy(t.astype(np.int64)).to(W.device)].float()
        out.append((e @ torch.from_numpy(X[i]).to(W.device)).cpu().numpy().astype(np.float32))
    return out


# ----------------------------------------------------------------------------- sparse vectors


def _weights(logits: np.ndarray, weighting: str) -> np.ndarray:
    if weighting == "raw":
        return logits.astype(np.float32)
    if weighting == "relu":
        return np.maximum(logits, 0).astype(np.float32)
    if weighting == "log1p":
        return np.log1p(np.maximum(logits, 0)).astype(np.float32)
    if weighting == "binary":
        return np.ones_like(logits, dtype=np.float32)
    raise InvalidInputError(f"unknown weighting {weighting!r}")


def _rows_to_csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int, n_cols: int) -> sp.csr_matrix:
    """CSR from triplets; duplicate (row, col) pairs combine by max (folded variants)."""
    if rows.size:
        order = np.lexsort((-vals, cols, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        first = np.ones(rows.size, dtype=bool)
        first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        rows, cols, vals = rows[first], cols[first], vals[first]
        keep = vals != 0
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, rows + 1, 1)
    np.cumsum(indptr, out=indptr)
    m = sp.csr_matrix((vals.astype(np.float32), cols.astype(np.int32), indptr), shape=(n, n_cols))
    m.has_sorted_indices = True
    return m


def _n_cols(term_map: TermMap | None, V: int) -> int:
    if term_map is None:
        return V
    if term_map.vocab_size != V:
        raise InvalidInputError(f"term_map covers {term_map.vocab_size} tokens but lm_head has V={V}")
    return term_map.n_terms


def doc_vectors(
    H: np.ndarray | torch.Tensor,
    lm_head: torch.Tensor | np.ndarray,
    K: int,
    weighting: Literal["raw", "relu", "log1p"] = "raw",
    term_map: TermMap | None = None,
    mask_ids: Iterable[int] | np.ndarray | None = None,
    chunk: int = 8192,
) -> sp.csr_matrix:
    """Document sparse vectors, “A Text is Worth Several Tokens” eq.15: the top-K aligned *tokens* of each row keep
    w_t = e_tᵀh ("raw", the paper), relu(w_t), or log1p(relu(w_t)).  With a folding
    ``term_map`` the weights of variants of one term combine by max (so a row may hold fewer
    than K terms).  Zero weights are not stored.  Returns csr float32 [n, n_terms]."""
    if weighting not in DOC_WEIGHTINGS:
        raise InvalidInputError(f"doc weighting must be one of {DOC_WEIGHTINGS}, got {weighting!r}")
    W = _as_weight(lm_head)
    _n_cols(term_map, W.shape[0])  # check the term map before the expensive projection
    ids, logits = project_topk(H, W, K, mask_ids=mask_ids, chunk=chunk)
    return doc_vectors_from_topk(ids, logits, W.shape[0], weighting, term_map)


def doc_vectors_from_topk(
    ids: np.ndarray,
    logits: np.ndarray,
    V: int,
    weighting: Literal["raw", "relu", "log1p"] = "raw",
    term_map: TermMap | None = None,
) -> sp.csr_matrix:
    """The eq.15 document vectors from a :func:`project_topk` result (``ids``, ``logits``
    [n, K]). The first K' columns of a top-K result are the top-K' (rows are sorted), so a
    sweep over K projects once at the largest K and slices."""
    if weighting not in DOC_WEIGHTINGS:
        raise InvalidInputError(f"doc weighting must be one of {DOC_WEIGHTINGS}, got {weighting!r}")
    n_cols = _n_cols(term_map, V)
    n = ids.shape[0]
    cols = ids if term_map is None else term_map.map_ids(ids)
    rows = np.repeat(np.arange(n, dtype=np.int64), ids.shape[1])
    return _rows_to_csr(rows, cols.ravel().astype(np.int64), _weights(logits, weighting).ravel(), n, n_cols)


def query_vectors(
    H: np.ndarray | torch.Tensor,
    surface_ids: Sequence[np.ndarray],
    lm_head: torch.Tensor | np.ndarray,
    M: int,
    weighting: Literal["binary", "raw", "relu", "log1p"] = "binary",
    term_map: TermMap | None = None,
    mask_ids: Iterable[int] | np.ndarray | None = None,
    chunk: int = 8192,
) -> sp.csr_matrix:
    """Query sparse vectors, “A Text is Worth Several Tokens” eq.16: token set T̃_q = T_q ∪ T̂_q^M (deduplicated
    surface ids ∪ top-M aligned ids; masked ids dropped from both).

    ``weighting="binary"`` (the paper: score = Σ of document weights over shared tokens)
    gives every token weight 1; "raw" / "relu" / "log1p" weight each token by its own logit
    e_tᵀh_q (surface tokens included), folded variants combining by max.  Tokens whose
    weight is 0 (e.g. relu of a negative logit) drop out.  Returns csr float32 [n, n_terms].
    """
    if weighting not in QUERY_WEIGHTINGS:
        raise InvalidInputError(f"query weighting must be one of {QUERY_WEIGHTINGS}, got {weighting!r}")
    W = _as_weight(lm_head)
    V, d = W.shape
    X = _as_h(H, d)
    n = X.shape[0]
    if len(surface_ids) != n:
        raise InvalidInputError(f"got {len(surface_ids)} surface id arrays for {n} query vectors")
    M = int(M)
    if M < 0:
        raise InvalidInputError(f"M must be >= 0, got {M}")
    n_cols = _n_cols(term_map, V)
    maskt = token_mask(mask_ids, V)
    mask = maskt.numpy() if maskt is not None else None
    if M > 0:
        top_ids, _ = _project_topk(X, W, M, maskt, chunk)
    sets: list[np.ndarray] = []
    for i in range(n):
        s = int_ids(surface_ids[i], V, f"surface_ids[{i}]", "token ids")
        if mask is not None and s.size:
            s = s[~mask[s]]
        if M > 0:
            s = np.concatenate([s, top_ids[i].astype(np.int64)])
        sets.append(np.unique(s))
    lens = np.array([s.size for s in sets], dtype=np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), lens)
    tok = np.concatenate(sets) if n else np.zeros(0, dtype=np.int64)
    if weighting == "binary":
        vals = np.ones(tok.size, dtype=np.float32)
    else:
        vals = _weights(np.concatenate(token_logits(X, W, sets)) if n else np.zeros(0, np.float32), weighting)
    cols = tok if term_map is None else term_map.map_ids(tok).astype(np.int64)
    return _rows_to_csr(rows, cols, vals, n, n_cols)


# ----------------------------------------------------------------------------- PC1 (§4)


def svd_basis(H: np.ndarray | torch.Tensor, center: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Right singular vectors of the embedding matrix H [n, d] (“A Text is Worth Several Tokens” eq.9).

    Returns ``(U float64 [d, d], s float64 [d])``: column j is u_j, the singular vector of
    the j-th largest singular value s_j.  Computed from the d×d Gram matrix HᵀH in float64.
    The sign of each u_j is fixed deterministically: the mean projection of H onto u_j is
    made positive (ties: its largest-magnitude entry positive).  The paper's SVD is of the
    raw (uncentred) embeddings; ``center=True`` subtracts the mean first (plain PCA).
    """
    if isinstance(H, torch.Tensor):
        H = H.detach().cpu().numpy()
    X = np.asarray(H, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise InvalidInputError(f"H must be 2-D [n, d] with n >= 1, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise InvalidInputError("H contains NaN or infinite values")
    if center:
        X = X - X.mean(axis=0, keepdims=True)
    G = X.T @ X
    evals, evecs = np.linalg.eigh(G)
    order = np.argsort(-evals, kind="stable")
    evals, U = evals[order], evecs[:, order]
    s = np.sqrt(np.clip(evals, 0, None))
    proj = (X @ U).mean(axis=0)
    tol = 1e-9 * max(1.0, float(np.abs(X).max()))
    for j in range(U.shape[1]):
        sgn = np.sign(proj[j]) if abs(proj[j]) > tol else np.sign(U[np.argmax(np.abs(U[:, j])), j])
        if sgn < 0:
            U[:, j] = -U[:, j]
    return U, s


def fit_pc1(H_sample: np.ndarray | torch.Tensor, center: bool = False) -> np.ndarray:
    """u1: top singular vector of a sample of corpus embeddings (“A Text is Worth Several Tokens” §4, eq.9), float32
    [d], unit norm, oriented so the sample projects positively onto it (so λ < 0 in
    :func:`adjust` removes the common component)."""
    U, _ = svd_basis(H_sample, center=center)
    return U[:, 0].astype(np.float32)


def adjust(H: np.ndarray | torch.Tensor, u1: np.ndarray, lam: float) -> np.ndarray:
    """h_adj = h + λ·u1 for every row (“A Text is Worth Several Tokens” eq.14).  Returns float32 [n, d]."""
    u = np.asarray(u1, dtype=np.float32).ravel()
    X = _as_h(H, u.size)
    if not np.isfinite(u).all() or not np.isfinite(lam):
        raise InvalidInputError("u1 and lam must be finite")
    return (X + np.float32(lam) * u[None, :]).astype(np.float32)
