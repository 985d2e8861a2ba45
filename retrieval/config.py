"""Parameters of an index that decide its sparse and fused scores (recorded in the manifest)."""
from __future__ import annotations

from alignir.errors import InvalidInputError

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

DOC_WEIGHTINGS = ("raw", "relu", "log1p")
QUERY_WEIGHTINGS = ("binary", "raw", "relu", "log1p")
FUSION_METHODS = ("minmax", "rrf", "zscore", "agree")


@dataclass(frozen=True)
class SparseConfig:
    """How dense vectors become sparse ones (“A Text is Worth Several Tokens” §5).

    The defaults are alignir's, chosen by the sweeps in benchmarks/results/sweeps (ADI, MED):
    removing 75 % of the common first component (eq.14) before projecting, log1p document
    weights and logit-weighted query terms; :meth:`paper` gives the paper's configuration.
    ``pc1_remove`` takes precedence over ``pc1_lambda`` when set.

    doc_k: K of eq.15, aligned tokens kept per document.
    query_m: M of eq.16, aligned tokens added to a query's surface tokens.
    pc1_lambda: λ of eq.14 (h + λ·u1) applied before projection; 0 disables it.
    pc1_remove: if set, λ is derived from the corpus at build / re-sparsify time as
        λ = -pc1_remove · mean_i(h_i·u1): the fraction of the common first component removed
        (1.0 removes the mean projection). The derived λ is stored in pc1_lambda.
    doc_weighting: document term weight: "raw" logit e_tᵀh (eq.15), "relu", "log1p" (of relu).
    query_weighting: "binary" (eq.16, the paper) or a logit-derived weight for the
        aligned part (surface tokens keep weight 1).
    fold: fold case / leading-space variants of a token into one term.
    quantize: None (float32 postings), "uint8" or "uint16".
    """

    doc_k: int = 256
    query_m: int = 50
    pc1_lambda: float = 0.0
    pc1_remove: float | None = 0.75
    doc_weighting: str = "log1p"
    query_weighting: str = "raw"
    fold: bool = False
    quantize: str | None = None

    @classmethod
    def paper(cls, doc_k: int = 256, query_m: int = 50) -> "SparseConfig":
        """Seed 004 §5 exactly: raw logits (eq.15), binary query tokens (eq.16), no PC1
        adjustment, no folding."""
        return cls(doc_k=doc_k, query_m=query_m, pc1_lambda=0.0, pc1_remove=None,
                   doc_weighting="raw", query_weighting="binary", fold=False)

    def __post_init__(self) -> None:
        if self.doc_k <= 0:
            raise InvalidInputError(f"doc_k (K) must be positive, got {self.doc_k}")
        if self.query_m < 0:
            raise InvalidInputError(f"query_m (M) must be >= 0, got {self.query_m}")
        if self.doc_weighting not in DOC_WEIGHTINGS:
            raise InvalidInputError(f"doc_weighting must be one of {DOC_WEIGHTINGS}, got {self.doc_weighting!r}")
        if self.query_weighting not in QUERY_WEIGHTINGS:
            raise InvalidInputError(
                f"query_weighting must be one of {QUERY_WEIGHTINGS}, got {self.query_weighting!r}")
        if self.quantize not in (None, "uint8", "uint16"):
            raise InvalidInputError(f"quantize must be None, 'uint8' or 'uint16', got {self.quantize!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SparseConfig":
        values = _known_fields(cls, data)
        values.setdefault("pc1_remove", None)  # older manifests: λ was always explicit
        return cls(**values)

    def with_changes(self, **changes: Any) -> "SparseConfig":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class FusionConfig:
    """How hybrid search fuses the sparse and dense lists (retrieval/fusion.py).

    alpha weighs the dense side in convex fusions: score = alpha·dense + (1-alpha)·sparse.
    depth is how many hits each side contributes before fusion.
    """

    method: str = "minmax"
    alpha: float = 0.5
    depth: int = 100
    rrf_k: int = 60

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise InvalidInputError(f"fusion method must be one of {FUSION_METHODS}, got {self.method!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise InvalidInputError(f"alpha must lie in [0, 1], got {self.alpha}")
        if self.depth <= 0:
            raise InvalidInputError(f"fusion depth must be positive, got {self.depth}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FusionConfig":
        return cls(**_known_fields(cls, data))


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of dataclass ``cls`` (newer manifests may
    carry keys this version does not know)."""
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in known}
