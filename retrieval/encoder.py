"""``alignir.Encoder``: texts -> dense vectors h and aligned-token sparse vectors, for use anywhere.

    >>> from alignir import Encoder
    >>> enc = Encoder.from_pretrained("smollm2-135m-alignir-v3")
    >>> docs = enc.encode_documents(["Photosynthesis makes glucose.", "Rates rose."])
    >>> docs.dense.shape, docs.sparse.shape       # float32 [2, d], scipy CSR [2, n_terms]
    >>> docs.decode(0)                            # {token: weight}, heaviest first

One model pass gives both representations (“A Text is Worth Several Tokens” §5): the dense
vector h, and its projection onto the vocabulary through the LM head, whose top-K tokens are a
document's sparse vector (eq.15) and whose surface tokens ∪ top-M tokens are a query's (eq.16).
The sparse side is computed by :class:`retrieval.sparsify.Sparsifier`, the code that builds
and queries an index, so :meth:`Encoder.from_index` gives exactly the vectors an index stores
and searches with; ``build_index`` and ``Searcher.open`` create their encoder through this
class.

The first-principal-component adjustment of eq.14 (h + λ·u1) is fitted on a corpus: an index
fits it at build time; a free-standing encoder has none until :meth:`Encoder.fit` is given
(a sample of) the corpus, and until then projects h unadjusted.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.checks import check_texts
from alignir.errors import InvalidInputError
from alignir.retrieval.config import SparseConfig

__all__ = ["Encoder", "Encoded", "DEFAULT_EMBEDDER", "DEFAULT_BATCH_SIZE"]

#: the embedder family of a model that is not shipped, when none is given
DEFAULT_EMBEDDER = "prompteol"
#: texts per batch of encode_queries / encode_documents (bounds the memory of one projection)
DEFAULT_BATCH_SIZE = 64
#: texts encoded between two embedding-cache checkpoints on a CPU (a kill loses at most this many)
CHECKPOINT_EVERY = 128


def checkpoint_every(embedder: Any) -> int | None:
    """Texts between two embedding-cache checkpoints: :data:`CHECKPOINT_EVERY` on a CPU; beside a
    GPU the cache's own default (a larger part, so the GPU is not starved: encoders.cache)."""
    device = getattr(getattr(embedder, "loaded", None), "device", None)
    return None if getattr(device, "type", "cpu") == "cuda" else CHECKPOINT_EVERY


@dataclass
class Encoded:
    """The vectors of a batch of texts: row i = text i.

    ``dense``: float32 [n, d], the embedder's h (what an index stores in ``dense.npy``; its
    dense leg centres and normalises them, DenseConfig). ``sparse``: scipy CSR float32
    [n, n_terms] over the encoder's terms (the vocabulary, or its folded terms with
    ``SparseConfig(fold=True)``); ``terms[j]`` names column j."""

    dense: np.ndarray
    sparse: sp.csr_matrix
    terms: tuple[str, ...]
    role: str

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def decode(self, i: int, top: int | None = None) -> dict[str, float]:
        """Row ``i`` of the sparse matrix as {token: weight}, heaviest first (``top``: only
        the first that many)."""
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise InvalidInputError(f"row must be an integer in [-{n}, {n}), got {i!r}")
        row = self.sparse.getrow(int(i) % n)
        order = np.lexsort((row.indices, -row.data))[:top]
        return {self.terms[int(row.indices[j])]: float(row.data[j]) for j in order}


class Encoder:
    """An embedder (dense h) plus the :class:`Sparsifier` that turns h into aligned-token
    vectors. Build one with :meth:`from_pretrained` (any model) or :meth:`from_index` (the
    encoder of an index, with its fitted u1/λ and term map)."""

    def __init__(self, embedder: Any, sparsifier: Any, loaded: Any, *, model: str, family: str,
                 options: dict[str, Any], cache_dir: str | Path | None = None, use_cache: bool = False) -> None:
        self.embedder = embedder
        self.sparsifier = sparsifier
        self.loaded = loaded
        #: what rebuilds this encoder: the model spec loaded, the embedder family, its options
        self.model, self.family, self.options = model, family, dict(options)
        self.cache_dir, self.use_cache = cache_dir, bool(use_cache)
        #: encodes uncached texts elsewhere (``EmbeddingCache.encode_cached``'s runner: a Ray pool,
        #: encoders.ray_pool); None: this process's embedder
        self.runner: Any = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None = None, adapter: str | Path | None = None,
                        family: str | None = None, precision: str | None = None, device: str = "auto", *,
                        sparse: SparseConfig | None = None, pc1: np.ndarray | None = None,
                        instruction: str | None = None, cache_dir: str | Path | None = None,
                        use_cache: bool = False, loaded: Any = None, progress: bool = False,
                        runtime: str | None = None, **embedder_options: Any) -> "Encoder":
        """Load ``name_or_path``: a shipped trained embedder (``smollm2-135m-alignir-v3``, the
        default), a registered model (``smollm2-135m``), a local Hugging Face folder, a
        ``.gguf`` file or a hub id. ``adapter``: a LoRA adapter folder (not with a shipped
        name, which brings its own); ``family``: the embedder family (default: the shipped
        model's, else "prompteol"); ``precision``: "fp32" (default) or "int8"; ``sparse``:
        K, M, weightings and folding of the aligned-token vectors (default ``SparseConfig()``);
        ``pc1``: a fitted u1 for eq.14 (else call :meth:`fit`); ``cache_dir`` / ``use_cache``:
        keep dense vectors in the embedding cache (encoders.cache), keyed by encoder fingerprint
        and text; ``loaded``: an already loaded ``LoadedModel`` of ``name_or_path``;
        ``runtime``: what runs the transformer, "auto" (default, or ``$ALIGNIR_RUNTIME``: ONNX
        Runtime fp32 where it applies, else torch), "torch" or "onnx" (encoders.onnx_runtime);
        ``embedder_options``: more options of the family (``max_length``, ``batch_tokens``...);
        ``model=`` is taken for ``name_or_path``, as ``build_index`` and ``Searcher.open`` name it."""
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model
        from alignir.encoders.quantize import check_precision
        from alignir.encoders.shipped import DEFAULT_MODEL, resolve_shipped

        opts = dict(embedder_options)
        if "model" in opts:  # the keyword build_index and Searcher.open take: the same thing here
            if name_or_path is not None:
                raise InvalidInputError(f"two models given: {str(name_or_path)!r} and model={opts['model']!r}")
            name_or_path = opts.pop("model")
        name = str(name_or_path) if name_or_path is not None else DEFAULT_MODEL
        if adapter is not None:
            opts["adapter"] = str(adapter)
        if instruction is not None:
            opts["instruction"] = instruction
        if precision is not None and check_precision(precision) != "fp32":
            opts["precision"] = precision
        explicit = family is not None
        model, fam, opts = resolve_shipped(name, family or DEFAULT_EMBEDDER, opts, DEFAULT_EMBEDDER)
        if explicit and fam != family:
            raise InvalidInputError(f"model {name!r} is a trained {fam!r} embedder, not {family!r}")
        loaded = loaded if loaded is not None else load_model(model, device=device)
        embedder = get_embedder(fam, loaded, progress=progress, **opts)
        return cls.from_embedder(embedder, loaded, sparse or SparseConfig(), pc1=pc1, model=model, family=fam,
                                 options=_recorded(opts), cache_dir=cache_dir,
                                 use_cache=use_cache or cache_dir is not None, runtime=runtime)

    @classmethod
    def from_embedder(cls, embedder: Any, loaded: Any, sparse: SparseConfig, *, pc1: np.ndarray | None = None,
                      term_map: Any = None, model: str = "", family: str = "", options: dict[str, Any] | None = None,
                      cache_dir: str | Path | None = None, use_cache: bool = False,
                      runtime: str | None = None, on_stage: Callable[[str], None] | None = None) -> "Encoder":
        """An Encoder around an embedder already built (``get_embedder``) of ``loaded``, put on
        ``runtime`` (as in :meth:`from_pretrained`; the embedder is changed in place);
        ``on_stage`` hears of a one-off ONNX export."""
        from alignir.encoders.onnx_runtime import apply_runtime
        from alignir.retrieval.sparsify import Sparsifier

        if not isinstance(sparse, SparseConfig):
            raise InvalidInputError(f"sparse must be a SparseConfig, got {type(sparse).__name__}")
        embedder = apply_runtime(embedder, runtime, on_export=on_stage)
        sparsifier = Sparsifier.for_model(loaded, sparse, pc1=pc1, term_map=term_map, embedder=embedder)
        return cls(embedder, sparsifier, loaded, model=model or str(getattr(loaded, "name", "")),
                   family=family or getattr(embedder, "family", ""), options=options or {},
                   cache_dir=cache_dir, use_cache=use_cache)

    @classmethod
    def from_index(cls, path: str | Path, *, model: str | None = None, loaded: Any = None,
                   instruction: str | None = None, precision: str | None = None, device: str = "auto",
                   allow_precision_mismatch: bool = False, progress: bool = False,
                   runtime: str | None = None) -> "Encoder":
        """The encoder of the index at ``path``: its model, family and options, its sparse
        configuration, fitted u1/λ (eq.14) and term map, so that :meth:`encode_documents` gives
        the rows the index stores and :meth:`encode_queries` the vectors its searches use.
        The model's fingerprint must equal the index's (errors.FingerprintMismatch);
        ``model`` / ``loaded`` / ``instruction`` / ``precision`` / ``runtime`` as in ``Searcher.open``."""
        from alignir.index.reader import open_index

        return cls.for_stored(open_index(path, verify=False, parts=()), path, model=model, loaded=loaded,
                              instruction=instruction, precision=precision, device=device,
                              allow_precision_mismatch=allow_precision_mismatch, progress=progress,
                              runtime=runtime)

    @classmethod
    def for_stored(cls, stored: Any, path: str | Path, *, model: str | None = None, loaded: Any = None,
                   instruction: str | None = None, precision: str | None = None, device: str = "auto",
                   allow_precision_mismatch: bool = False, progress: bool = False,
                   runtime: str | None = None, reuse: "Encoder | None" = None) -> "Encoder":
        """:meth:`from_index` of an index already opened (``index.store.StoredIndex``).
        ``reuse``: the encoder of another version of this index (or of an index built by the same
        encoder): its loaded model and embedder (and so its ONNX Runtime session) are used as they
        are, after the fingerprint check; only the sparse part (config, u1/λ, term map) is this
        index's. A server that follows an index through its versions holds one model this way."""
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model
        from alignir.encoders.shipped import SHIPPED
        from alignir.retrieval.manifest import check_encoder, embedder_spec, term_map_from_arrays
        from alignir.retrieval.sparsify import Sparsifier

        spec = embedder_spec(stored.manifest, path)
        if reuse is not None:
            check_encoder(stored, reuse.embedder, allow_precision_mismatch)
            params = stored.params
            term_map = (term_map_from_arrays(stored.extra, params.get("term_map", "identity"))
                        if "token_to_term" in stored.extra else None)
            sparsifier = Sparsifier.for_model(reuse.loaded, SparseConfig.from_dict(params.get("sparse", {})),
                                              pc1=stored.pc1, term_map=term_map, embedder=reuse.embedder)
            return cls(reuse.embedder, sparsifier, reuse.loaded, model=spec["model"], family=spec["family"],
                       options=dict(reuse.options))
        if loaded is None:
            model = SHIPPED[model].base_model if model in SHIPPED else model
            loaded = load_model(model or spec["model"], device=device)
        options = dict(spec.get("options", {}))
        if instruction is not None:
            options["instruction"] = instruction
        if precision is not None:
            options["precision"] = precision
        embedder = get_embedder(spec["family"], loaded, progress=progress, **options)
        check_encoder(stored, embedder, allow_precision_mismatch)
        params = stored.params
        config = SparseConfig.from_dict(params.get("sparse", {}))
        term_map = (term_map_from_arrays(stored.extra, params.get("term_map", "identity"))
                    if "token_to_term" in stored.extra else None)
        return cls.from_embedder(embedder, loaded, config, pc1=stored.pc1, term_map=term_map,
                                 model=spec["model"], family=spec["family"], options=options, runtime=runtime)

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> SparseConfig:
        """K, M, λ, weightings and folding of the sparse vectors."""
        return self.sparsifier.config

    @property
    def terms(self) -> tuple[str, ...]:
        """Column names of the sparse matrices (token or folded-term strings)."""
        return self.sparsifier.term_map.term_strings

    @property
    def runtime(self) -> str:
        """What runs the transformer: "onnx" (ONNX Runtime) or "torch"."""
        from alignir.encoders.onnx_runtime import runtime_of

        return runtime_of(self.embedder)

    @property
    def dim(self) -> int:
        return int(self.embedder.dim)

    @property
    def tokenizer(self) -> Any:
        return self.embedder.tokenizer

    def fingerprint(self) -> dict[str, Any]:
        """The embedder's fingerprint: everything that changes the dense vectors, and the
        aligned-token map (``sparse_map_sha256``) when its adapter carries one."""
        return self.embedder.fingerprint()

    # ------------------------------------------------------------------ eq.14
    def fit(self, texts_or_vectors: Sequence[str] | np.ndarray) -> "Encoder":
        """Fit u1 (eq.14) on a corpus, as an index build does (a fixed sample of at most
        ``sparsify.PC1_SAMPLE`` rows), and resolve ``pc1_remove`` into the absolute λ; texts are
        encoded as documents first. Returns self."""
        from alignir.retrieval.sparsify import fit_corpus_pc1, resolve_lambda

        H = (np.asarray(texts_or_vectors, dtype=np.float32) if isinstance(texts_or_vectors, np.ndarray)
             else self.dense(texts_or_vectors, "document"))
        if H.ndim != 2 or H.shape[0] < 1 or H.shape[1] != self.dim:
            raise InvalidInputError(f"fit needs texts or vectors [n, {self.dim}], got shape {H.shape}")
        pc1 = fit_corpus_pc1(H)
        self.sparsifier = replace(self.sparsifier, config=resolve_lambda(self.config, H, pc1), pc1=pc1)
        return self

    # ------------------------------------------------------------------ encoding
    def dense(self, texts: Sequence[str], role: str, progress: bool = False) -> np.ndarray:
        """Dense vectors h (float32 [n, d]) of ``texts`` as ``role`` ("query" | "document"),
        through the embedding cache when it is on."""
        if role not in ("query", "document"):
            raise InvalidInputError(f"role must be 'query' or 'document', got {role!r}")
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.use_cache:
            return self._embedding_cache().encode_cached(self.embedder, texts, role,
                                                         shard_size=checkpoint_every(self.embedder),
                                                         progress=progress, runner=self.runner)
        if role == "query":
            return self.embedder.encode_queries(texts)
        return self.embedder.encode_documents(texts)

    def _embedding_cache(self) -> Any:
        """The embedding cache of ``cache_dir``, one instance per folder: a build that encodes
        batch after batch reads each cache part once, not once per batch."""
        from alignir.encoders.cache import EmbeddingCache

        held = getattr(self, "_cache", None)
        if held is None or held[0] != self.cache_dir:
            held = self._cache = (self.cache_dir, EmbeddingCache(self.cache_dir))
        return held[1]

    def sparse_documents(self, H: np.ndarray) -> sp.csr_matrix:
        """Documents' aligned-token vectors (eq.15) of their dense vectors."""
        return self.sparsifier.documents(H)

    def sparse_queries(self, H: np.ndarray, texts: Sequence[str]) -> sp.csr_matrix:
        """Queries' aligned-token vectors (eq.16: surface tokens ∪ top-M) of their dense vectors."""
        return self.sparsifier.queries(H, self.embedder.surface_token_ids(check_texts(texts)))

    def encode_documents(self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE,
                         show_progress_bar: bool = False) -> Encoded:
        """Dense + aligned-token (top-K, eq.15) vectors of documents, ``batch_size`` at a time."""
        return self._encode(texts, "document", batch_size, show_progress_bar)

    def encode_queries(self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE,
                       show_progress_bar: bool = False) -> Encoded:
        """Dense + aligned-token (surface ∪ top-M, eq.16) vectors of queries."""
        return self._encode(texts, "query", batch_size, show_progress_bar)

    def _encode(self, texts: Sequence[str], role: str, batch_size: int, show: bool) -> Encoded:
        texts = check_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        dense, sparse = [], []
        for batch in _batches(texts, batch_size, show, role):
            H = self.dense(batch, role)
            dense.append(H)
            sparse.append(self.sparse_documents(H) if role == "document" else self.sparse_queries(H, batch))
        if not texts:
            n_terms = self.sparsifier.term_map.n_terms
            return Encoded(np.zeros((0, self.dim), np.float32), sp.csr_matrix((0, n_terms), dtype=np.float32),
                           self.terms, role)
        S = sp.vstack(sparse, format="csr", dtype=np.float32) if len(sparse) > 1 else sparse[0]
        return Encoded(np.concatenate(dense) if len(dense) > 1 else dense[0], S, self.terms, role)

    def __repr__(self) -> str:
        c = self.config
        return (f"Encoder(model={self.model!r}, family={self.family!r}, doc_k={c.doc_k}, query_m={c.query_m}, "
                f"pc1_lambda={c.pc1_lambda}, fitted={self.sparsifier.pc1 is not None})")


#: embedder options that change how an encoder runs, not what it computes: an index does not record them
RUN_ONLY_OPTIONS = frozenset({"progress", "compile"})


def _recorded(opts: dict[str, Any]) -> dict[str, Any]:
    """The embedder options an index records (none of :data:`RUN_ONLY_OPTIONS`)."""
    return {k: v for k, v in opts.items() if k not in RUN_ONLY_OPTIONS}


def _batches(texts: list[str], size: int, show: bool, role: str) -> Iterator[list[str]]:
    starts = range(0, len(texts), size)
    if show:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"encoding {role}s", unit="batch", total=len(starts))
    for s in starts:
        yield texts[s:s + size]
