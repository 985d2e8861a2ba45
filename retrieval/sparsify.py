"""Dense vectors -> aligned-token sparse vectors for an index (“A Text is Worth Several Tokens” §5, eq.14-16).

The one place where an index's :class:`~retrieval.config.SparseConfig` is turned into calls of
``encoders.aligned``: building, re-sparsifying and querying all go through here, so the three
can never disagree about K, M, λ, weighting or folding.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.encoders.aligned import TermMap, adjust, doc_vectors_from_topk, fit_pc1, project_topk, query_vectors
from alignir.retrieval.config import SparseConfig

#: documents sampled to fit the first principal component u1 (eq.14)
PC1_SAMPLE = 4096
#: rows projected onto the vocabulary at a time (its logits: rows x one vocabulary chunk)
PROJECT_ROWS = 1024


@dataclass
class Sparsifier:
    """Projects dense vectors through one model's LM head with one SparseConfig."""

    lm_head: Any  # torch.Tensor [V, d]
    special_ids: np.ndarray
    term_map: TermMap
    config: SparseConfig
    pc1: np.ndarray | None = None
    #: the model's tokenizer (explanations show the text a term's token stands for), when known
    tokenizer: Any = None

    @classmethod
    def for_model(cls, loaded: Any, config: SparseConfig, pc1: np.ndarray | None = None,
                  term_map: TermMap | None = None, embedder: Any = None) -> "Sparsifier":
        """Build from an ``encoders.models.LoadedModel`` (term map from its tokenizer); with the
        ``embedder`` of that model, through its ``aligned_head`` (E_g, or E_g·A when its adapter
        carries a trained sparse map)."""
        if term_map is None:
            term_map = TermMap.from_tokenizer(loaded.tokenizer, vocab_size=loaded.vocab_size,
                                              fold=config.fold)
        head = loaded.lm_head if embedder is None else embedder.aligned_head
        return cls(head, np.asarray(loaded.special_ids), term_map, config, pc1,
                   getattr(loaded, "tokenizer", None))

    def _adjusted(self, H: np.ndarray) -> np.ndarray:
        """h + λ·u1 (eq.14) when λ ≠ 0; the vectors untouched otherwise."""
        lam = self.config.pc1_lambda
        H = np.asarray(H, dtype=np.float32)
        if not H.flags.writeable:  # a memory-mapped index: torch wants writable memory
            H = H.copy()
        if lam == 0.0:
            return H
        if self.pc1 is None:
            raise InvalidInputError("pc1_lambda is set but no first principal component u1 was fitted")
        return adjust(H, self.pc1, lam)

    def documents(self, H: np.ndarray) -> sp.csr_matrix:
        """Top-K aligned terms per document with the configured weighting (eq.15), projected
        :data:`PROJECT_ROWS` rows at a time (``H`` may be a memory map of a whole corpus)."""
        k = self.config.doc_k
        if H.shape[0] <= PROJECT_ROWS:
            return self.documents_from_topk(*self.document_topk(H, k))
        return sp.vstack([self.documents_from_topk(*self.document_topk(H[s:s + PROJECT_ROWS], k))
                          for s in range(0, H.shape[0], PROJECT_ROWS)], format="csr", dtype=np.float32)

    def document_topk(self, H: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
        """The projection behind :meth:`documents` at any K: (ids, logits) [n, K], rows sorted."""
        return project_topk(self._adjusted(H), self.lm_head, K, mask_ids=self.special_ids)

    def documents_from_topk(self, ids: np.ndarray, logits: np.ndarray) -> sp.csr_matrix:
        """:meth:`documents` from a :meth:`document_topk` result with K ≥ doc_k (sliced to doc_k)."""
        c = self.config
        if ids.shape[1] < c.doc_k:
            raise InvalidInputError(f"the top-k result has {ids.shape[1]} columns, fewer than doc_k={c.doc_k}")
        return doc_vectors_from_topk(ids[:, :c.doc_k], logits[:, :c.doc_k], int(self.lm_head.shape[0]),
                                     c.doc_weighting, self.term_map)

    def queries(self, H: np.ndarray, surface_ids: Sequence[np.ndarray]) -> sp.csr_matrix:
        """Surface tokens ∪ top-M aligned tokens per query (eq.16 token set)."""
        c = self.config
        return query_vectors(self._adjusted(H), surface_ids, self.lm_head, c.query_m,
                             weighting=c.query_weighting, term_map=self.term_map,
                             mask_ids=self.special_ids)


def resolve_lambda(config: SparseConfig, H: np.ndarray, u1: np.ndarray) -> SparseConfig:
    """Turn a relative ``pc1_remove`` into the absolute λ of eq.14 for this corpus."""
    if config.pc1_remove is None:
        return config
    mu1 = float(np.mean(np.asarray(H, dtype=np.float32) @ np.asarray(u1, dtype=np.float32)))
    return replace(config, pc1_lambda=round(-config.pc1_remove * mu1, 6))


def fit_corpus_pc1(H: np.ndarray, sample: int = PC1_SAMPLE, seed: int = 0) -> np.ndarray:
    """u1 of eq.14 fitted on (a fixed random sample of) the corpus embeddings."""
    H = np.asarray(H, dtype=np.float32)
    if H.shape[0] > sample:
        rows = np.sort(np.random.default_rng(seed).choice(H.shape[0], sample, replace=False))
        H = H[rows]
    return fit_pc1(H)
