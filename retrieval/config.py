"""The typed configuration of an index: what decides its sparse, dense, lexical and fused scores.

``IndexConfig(sparse, dense, lexical, fusion)`` holds one frozen, validated dataclass per
part of the index and of the search; ``build_index`` saves it whole in the manifest
(``manifest["params"]["config"]``) and :meth:`IndexConfig.from_manifest` reads it back (also
from indexes written before it existed). Each allowed-value list lives once, next to the code
that uses it (weightings: encoders/weightings.py; quantisation: index/sparse.py; FAISS kinds
and whitenings: index/dense.py; fusion methods: retrieval/fusion.py); the configs only check
against them.

``UNSET`` means "not given": ``with_changes`` skips it, while ``None`` is a real value
(``quantize=None``: float32 postings; ``pc1_remove=None``: λ as given).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import numbers
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping

from alignir.encoders.weightings import DOC_WEIGHTINGS, QUERY_WEIGHTINGS
from alignir.retrieval.fusion import FUSION_METHODS
from alignir.retrieval.legs import LEGS

#: the fusions a search can use: fusion.FUSION_METHODS (per query) and "calibrated" (z-score
#: with weights gated by the index's stored collection-level calibration, retrieval/calibration.py)
SEARCH_FUSIONS = (*FUSION_METHODS, "calibrated")

__all__ = ["UNSET", "INDEX_LEGS", "MODEL_LEGS", "index_legs", "parse_legs", "SparseConfig", "DenseConfig", "LexicalConfig", "FusionConfig", "PassageConfig", "IndexConfig",
           "DOC_WEIGHTINGS", "QUERY_WEIGHTINGS", "FUSION_METHODS", "SEARCH_FUSIONS"]


class _Unset:
    """The type of :data:`UNSET` (one instance)."""

    _instance: "_Unset | None" = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


#: "not given" (``None`` is a value of its own)
UNSET: Any = _Unset()


def _int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise InvalidInputError(f"{name} must be an integer >= {low}, got {value!r}")


def _real(name: str, value: Any, low: float | None = None, high: float | None = None,
          optional: bool = False) -> None:
    if optional and value is None:
        return
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and value == value
    if ok and low is not None:
        ok = value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = "" if low is None and high is None else f" in [{low}, {high}]".replace("None", "…")
        raise InvalidInputError(f"{name} must be a number{bounds}{' or None' if optional else ''}, got {value!r}")


def _choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise InvalidInputError(f"{name} must be one of {allowed}, got {value!r}")


def _bool(name: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, bool) or (optional and value is None)):
        raise InvalidInputError(f"{name} must be true or false, got {value!r}")


class _Config:
    """Shared behaviour of the frozen configs: dict round trip and :meth:`with_changes`."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Build from a dict (a manifest entry): keys this version does not know are ignored
        (a newer alignir may have added some), missing ones take their defaults."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"{cls.__name__} data must be a JSON object, got {type(data).__name__}")
        return cls(**_known_fields(cls, data))

    def with_changes(self, **changes: Any) -> Any:
        """A copy with ``changes`` applied; values that are :data:`UNSET` are skipped (``None``
        is applied: it is a value). Unknown names are an error."""
        known = {f.name for f in fields(self)}  # type: ignore[arg-type]
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidInputError(f"{type(self).__name__} has no setting(s) {unknown}; known: {sorted(known)}")
        return replace(self, **{k: v for k, v in changes.items() if v is not UNSET})  # type: ignore[type-var]


@dataclass(frozen=True)
class SparseConfig(_Config):
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
    quantize: None (float32 postings), "uint8" or "uint16" (index.sparse.QUANTIZE).
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
        """“A Text is Worth Several Tokens” §5 exactly: raw logits (eq.15), binary query tokens
        (eq.16), no PC1 adjustment, no folding."""
        return cls(doc_k=doc_k, query_m=query_m, pc1_lambda=0.0, pc1_remove=None,
                   doc_weighting="raw", query_weighting="binary", fold=False)

    def __post_init__(self) -> None:
        from alignir.index.sparse import QUANTIZE

        _int("doc_k (K)", self.doc_k, 1)
        _int("query_m (M)", self.query_m, 0)
        _real("pc1_lambda (λ)", self.pc1_lambda)
        _real("pc1_remove", self.pc1_remove, optional=True)
        _choice("doc_weighting", self.doc_weighting, DOC_WEIGHTINGS)
        _choice("query_weighting", self.query_weighting, QUERY_WEIGHTINGS)
        _bool("fold", self.fold)
        _choice("quantize", self.quantize, QUANTIZE)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SparseConfig":
        values = _known_fields(cls, data)
        values.setdefault("pc1_remove", None)  # older manifests: λ was always explicit
        return cls(**values)


@dataclass(frozen=True)
class DenseConfig(_Config):
    """The FAISS part (index/dense.py): ``kind`` ("flat" | "hnsw" | "ivfpq",
    index.dense.KINDS), cosine (``normalize``), centring on the corpus mean (``center``; None:
    only when whitening), ``whiten`` (None | "zca" | "pca", index.dense.WHITENINGS) and
    further ``options`` of :class:`index.dense.DenseParams` (hnsw_m, nlist, pq_m, nprobe...).
    The defaults (centred cosine) lifted dense nDCG@10 from 0.45 to 0.57 on MED
    (benchmarks/results/dense_centering.json)."""

    kind: str = "flat"
    normalize: bool = True
    center: bool | None = True
    whiten: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from alignir.index.dense import DenseParams

        if not isinstance(self.options, Mapping):
            raise InvalidInputError(f"dense options must be a dict, got {type(self.options).__name__}")
        object.__setattr__(self, "options", dict(self.options))
        _bool("normalize", self.normalize)
        _bool("center", self.center, optional=True)
        known = {f.name for f in fields(DenseParams)} - {"kind", "normalize", "center", "whiten", "extra"}
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise InvalidInputError(f"unknown dense option(s) {unknown}; known: {sorted(known)}")
        DenseParams(kind=self.kind, normalize=self.normalize, center=bool(self.center or self.whiten),
                    whiten=self.whiten, **self.options).validate()

    @classmethod
    def from_options(cls, kind: str = "flat", options: Mapping[str, Any] | None = None) -> "DenseConfig":
        """From ``DenseIndex.build`` keyword arguments (its defaults: no normalisation, centring
        only with whitening)."""
        rest = dict(options or {})
        return cls(kind=kind, normalize=rest.pop("normalize", False), center=rest.pop("center", None),
                   whiten=rest.pop("whiten", None), options=rest)

    def build_options(self) -> dict[str, Any]:
        """Keyword arguments of ``DenseIndex.build`` (after the vectors)."""
        return {"kind": self.kind, "normalize": self.normalize, "center": self.center, "whiten": self.whiten,
                **self.options}

    def __hash__(self) -> int:  # options is a dict
        return hash((self.kind, self.normalize, self.center, self.whiten, tuple(sorted(self.options.items()))))


@dataclass(frozen=True)
class LexicalConfig(_Config):
    """The BM25 part (retrieval/bm25.py): k1, b (Lucene IDF, bm25s "lucene" weights), the
    analyser's stemming and stopword list."""

    k1: float = 0.9
    b: float = 0.4
    stem: bool = True
    stopwords: str | None = "en"

    def __post_init__(self) -> None:
        _real("k1", self.k1, 0.0)
        _real("b", self.b, 0.0, 1.0)
        _bool("stem", self.stem)
        if not (self.stopwords is None or isinstance(self.stopwords, str)):
            raise InvalidInputError(f"stopwords must be a language code such as 'en', or None, got {self.stopwords!r}")


@dataclass(frozen=True)
class FusionConfig(_Config):
    """How fused modes combine their legs' lists (retrieval/fusion.py).

    alpha weighs the dense side in convex fusions: score = alpha·dense + (1-alpha)·sparse.
    depth is how many hits each side contributes before fusion.
    leg_sets: the index's own "calibrated" defaults of leg sets with BM25, overriding
    alignir's (fusion_plan.LEG_SET_WEIGHTS / LEG_SET_CALIBRATED) for the leg sets named:
    ``{"dense+sparse+bm25": {"weights": {"dense": 0.3, "sparse": 0.3, "bm25": 0.4},
    "gate_power": 2.0}}`` (a shipped trained model brings its own, encoders.shipped; chosen by
    benchmarks/defaults/leg_set_weights.py). Keys are '+'-joined built-in legs (legs.LEGS) in their order.
    Which of these a search uses, and why, is its plan (retrieval/fusion_plan.py).
    """

    method: str = "minmax"
    alpha: float = 0.5
    depth: int = 100
    rrf_k: int = 60
    leg_sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _choice("fusion method", self.method, SEARCH_FUSIONS)
        _real("alpha", self.alpha, 0.0, 1.0)
        _int("fusion depth", self.depth, 1)
        _int("rrf_k", self.rrf_k, 0)
        object.__setattr__(self, "leg_sets", _leg_sets(self.leg_sets))

    def leg_set(self, legs: tuple[str, ...]) -> tuple[dict[str, float], float] | None:
        """(base weights, gate power) this config gives the leg set ``legs``, or None."""
        own = self.leg_sets.get("+".join(legs))
        return None if own is None else (dict(own["weights"]), float(own["gate_power"]))

    def __hash__(self) -> int:  # leg_sets is a dict
        return hash((self.method, self.alpha, self.depth, self.rrf_k,
                     tuple((k, tuple(v["weights"].items()), v["gate_power"]) for k, v in sorted(self.leg_sets.items()))))


#: the legs an index can be built with (``build_index(legs=)``, ``build-index --legs``): the
#: built-in legs (legs.LEGS), in their order
INDEX_LEGS = LEGS
#: the index part each leg searches
LEG_PARTS = {"dense": "dense", "sparse": "sparse", "bm25": "lexical"}
#: the legs that need the model (to encode the documents, and the queries)
MODEL_LEGS = ("dense", "sparse")


def _leg_sets(value: Any) -> dict[str, dict[str, Any]]:
    """FusionConfig.leg_sets validated and normalised (weights summing to 1, floats)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"fusion leg_sets must be a mapping, got {type(value).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for key, entry in value.items():
        legs = str(key).split("+")
        if (len(legs) < 2 or "bm25" not in legs or len(set(legs)) != len(legs)
                or legs != [leg for leg in LEGS if leg in legs]):
            raise InvalidInputError(f"fusion leg set {key!r} must be two or three of {LEGS} joined "
                                    f"by '+' in that order, bm25 among them")
        if not isinstance(entry, Mapping) or set(entry) != {"weights", "gate_power"}:
            raise InvalidInputError(f"fusion leg set {key!r} needs exactly 'weights' and 'gate_power', got {entry!r}")
        weights = entry["weights"]
        if not isinstance(weights, Mapping) or set(weights) != set(legs):
            raise InvalidInputError(f"fusion leg set {key!r}: weights must name exactly its legs {legs}, "
                                    f"got {weights!r}")
        for leg in legs:
            _real(f"fusion leg set {key!r} weight of {leg}", weights[leg], 0.0)
        total = sum(float(weights[leg]) for leg in legs)
        if total <= 0:
            raise InvalidInputError(f"fusion leg set {key!r}: weights must not all be 0")
        _real(f"fusion leg set {key!r} gate_power", entry["gate_power"], 0.0)
        if entry["gate_power"] <= 0:
            raise InvalidInputError(f"fusion leg set {key!r}: gate_power must be > 0, got {entry['gate_power']!r}")
        out[key] = {"weights": {leg: round(float(weights[leg]) / total, 6) for leg in legs},
                    "gate_power": float(entry["gate_power"])}
    return out


@dataclass(frozen=True)
class PassageConfig(_Config):
    """Splitting long documents into passages (retrieval/passages.py) and scoring documents by
    them (index/passages.py; Dai & Callan, "Deeper Text Understanding for IR with Contextual
    Neural Language Modeling", SIGIR 2019, §3).

    split: "auto" (default: split when some document is longer than the window), "on" (split
    every document longer than the window) or "off" (one row per document, truncated by the
    encoder as before). window: passage length in tokens of the encoder's tokenizer (None: the
    encoder's text budget, its max length less the prompt). stride: tokens between passage
    starts (None: window // 2). aggregate: how searches score a document by its passages by
    default: "maxp" (its best passage), "firstp" (its first) or "sumN" (its N best summed).
    What a build did (window, stride, documents split, rows) is in ``manifest["build"]["passages"]``
    and the index's passages part."""

    split: str = "auto"
    window: int | None = None
    stride: int | None = None
    aggregate: str = "maxp"

    def __post_init__(self) -> None:
        from alignir.index.passages import parse_aggregation

        _choice("passage split", self.split, ("auto", "on", "off"))
        if self.window is not None:
            _int("passage window", self.window, 1)
        if self.stride is not None:
            _int("passage stride", self.stride, 1)
            if self.window is not None and self.stride > self.window:
                raise InvalidInputError(f"passage stride {self.stride} exceeds the window {self.window}")
        parse_aggregation(self.aggregate)

    @classmethod
    def parse(cls, spec: "str | PassageConfig | None") -> "PassageConfig":
        """From ``--passages``: "auto", "off" / "none", "on", "WINDOW" or "WINDOW:STRIDE"
        (tokens; retrieval.passages.parse_passages); a PassageConfig is returned as it is."""
        if isinstance(spec, PassageConfig):
            return spec
        text = "auto" if spec is None else str(spec).strip().lower()
        if text in ("auto", "on"):
            return cls(split=text)
        if text in ("off", "none", "no", "false", "0"):
            return cls(split="off")
        from alignir.retrieval.passages import parse_passages

        window, stride = parse_passages(text)
        return cls(split="on", window=window, stride=stride)


@dataclass(frozen=True)
class IndexConfig(_Config):
    """Everything configurable about an index: ``sparse``, ``dense``, ``lexical`` (None: no
    BM25 part), the default ``fusion`` of its searches and the ``passages`` of long documents.
    Saved whole in the manifest by ``build_index`` and read back with :meth:`from_manifest`."""

    sparse: SparseConfig = field(default_factory=SparseConfig)
    dense: DenseConfig = field(default_factory=DenseConfig)
    lexical: LexicalConfig | None = field(default_factory=LexicalConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    passages: PassageConfig = field(default_factory=PassageConfig)

    def __post_init__(self) -> None:
        for name, cls, optional in (("sparse", SparseConfig, False), ("dense", DenseConfig, False),
                                    ("lexical", LexicalConfig, True), ("fusion", FusionConfig, False),
                                    ("passages", PassageConfig, False)):
            value = getattr(self, name)
            if not (isinstance(value, cls) or (optional and value is None)):
                raise InvalidInputError(f"IndexConfig.{name} must be a {cls.__name__}"
                                        f"{' or None' if optional else ''}, got {type(value).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {"sparse": self.sparse.to_dict(), "dense": self.dense.to_dict(),
                "lexical": None if self.lexical is None else self.lexical.to_dict(),
                "fusion": self.fusion.to_dict(), "passages": self.passages.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "IndexConfig":
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"IndexConfig data must be a JSON object, got {type(data).__name__}")
        lexical = data.get("lexical", {})
        return cls(sparse=SparseConfig.from_dict(data.get("sparse", {})),
                   dense=DenseConfig.from_dict(data.get("dense", {})),
                   lexical=None if lexical is None else LexicalConfig.from_dict(lexical),
                   fusion=FusionConfig.from_dict(data.get("fusion", {})),
                   passages=PassageConfig.from_dict(data.get("passages", {"split": "off"})))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> "IndexConfig":
        """The configuration an index was built with: ``params["config"]``, or, for an index
        written before it was saved, what its manifest records (sparse parameters, the dense and
        lexical parts' entries; the default fusion)."""
        params = manifest.get("params", {})
        parts = manifest.get("parts", {})
        if isinstance(params.get("config"), Mapping):
            saved = cls.from_dict(params["config"])
            # a part removed since (replace_part(..., None)) takes its config with it
            return saved if "lexical" in parts else replace(saved, lexical=None)
        # written before passages existed: one row per document
        dense = parts.get("dense", {})
        lexical = parts.get("lexical")
        lex_params = (lexical or {}).get("params", {})
        return cls(sparse=SparseConfig.from_dict(params.get("sparse", {})),
                   dense=DenseConfig(kind=dense.get("kind", "flat"), normalize=dense.get("normalize", False),
                                     center=dense.get("center", None), whiten=dense.get("whiten")),
                   lexical=None if lexical is None else LexicalConfig(
                       k1=lex_params.get("k1", 0.9), b=lex_params.get("b", 0.4),
                       stem=lex_params.get("stemmer") is not None if "stemmer" in lex_params else True,
                       stopwords=lex_params.get("stopwords", "en")),
                   fusion=FusionConfig(), passages=PassageConfig(split="off"))


def _known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of dataclass ``cls`` (newer manifests may
    carry keys this version does not know)."""
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in known}


def parse_legs(legs: Any) -> tuple[str, ...]:
    """The legs to build, in :data:`INDEX_LEGS` order, from a collection of names or one string
    ("bm25", "dense,bm25", "dense+sparse+bm25"); a name twice, an unknown name or none at all
    is an InvalidInputError."""
    names = ([p.strip() for p in legs.replace("+", ",").split(",")] if isinstance(legs, str)
             else list(legs) if isinstance(legs, (list, tuple, set, frozenset)) else None)
    if (not names or any(not isinstance(n, str) or n not in INDEX_LEGS for n in names)
            or len(set(names)) != len(names)):
        raise InvalidInputError(f"legs must name each of {', '.join(INDEX_LEGS)} at most once (at least one), "
                                f"got {legs!r}")
    return tuple(leg for leg in INDEX_LEGS if leg in names)


def index_legs(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """The built-in legs an index has (its parts), in :data:`INDEX_LEGS` order."""
    parts = manifest.get("parts", {})
    return tuple(leg for leg in INDEX_LEGS if LEG_PARTS[leg] in parts)
