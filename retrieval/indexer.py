"""Build an index folder from a corpus, and re-sparsify one without re-encoding.

corpus (BEIR folder or corpus .jsonl) -> encoder (dense h, cached) -> u1 (eq.14) ->
sparse aligned-token vectors (eq.15) + FAISS index -> index folder (index.store, atomic).
By default the folder also gets the lexical leg: BM25 weights of the same texts
(title + " " + text, as the bm25s baseline sees them; retrieval/bm25.py).

Long documents: by default (``passages="auto"``) a document longer than the encoder's window
is split into overlapping passages (retrieval/passages.py), each encoded and stored as its own
dense and aligned-token row, with the passage -> document map as the index's ``passages`` part;
searches score documents by their passages (index/passages.py, MaxP by default: Dai & Callan,
"Deeper Text Understanding for IR with Contextual Neural Language Modeling", SIGIR 2019). The
BM25 leg always indexes whole documents.
"""
from __future__ import annotations

from alignir.errors import AlignirError, InvalidInputError

import dataclasses
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from alignir.index.lock import writer_lock
from alignir.index.spool import spool_folder
from alignir.index.texts import DocTexts, SpooledTexts
from alignir.index.manifest_io import read_manifest
from alignir.index.reader import open_index
from alignir.index.writer import replace_part, replace_parts, update_params, write_index
from alignir.errors import NotAnIndexError
from alignir.retrieval.beir import Document
from alignir.encoders.shipped import DEFAULT_MODEL
from alignir.encoders.word_forms import WordForms
from alignir.retrieval.config import (MODEL_LEGS, UNSET, DenseConfig, IndexConfig, LexicalConfig, PassageConfig,
                                      SparseConfig, index_legs, parse_legs)
from alignir.retrieval.ingest import DEFAULT_BATCH_DOCS, PassagePlanner, ingest
from alignir.retrieval.manifest import (check_encoder, doc_encoder_fingerprint, embedder_spec,
                                       term_map_arrays, term_map_from_arrays)
from alignir.retrieval.encoder import Encoder
from alignir.retrieval.ray_encode import ray_pool
from alignir.retrieval.sources import DocSource, DocumentStream, read_source

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "prompteol"
#: PromptEOL vectors are very anisotropic: centring + cosine lifted dense nDCG@10 from 0.45
#: to 0.57 on MED and 0.22 to 0.36 on ADI (benchmarks/results/quality.json, dense_centering.json);
#: the defaults of retrieval.config.DenseConfig
DEFAULT_DENSE_OPTIONS = {"center": True, "normalize": True}


def check_target(index_dir: str | Path) -> None:
    """Refuse to write over a folder that holds something other than an alignir index."""
    p = Path(index_dir)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        try:
            read_manifest(p)
        except NotAnIndexError:
            raise InvalidInputError(f"{p} exists and is not an alignir index: refusing to overwrite it "
                             "(choose an empty or new folder)") from None


def encode_corpus(embedder: Any, texts: list[str], cache_dir: str | Path | None,
                  use_cache: bool = True, progress: bool = True) -> np.ndarray:
    """Dense document vectors, through the embedding cache (resumes a killed encode)."""
    return Encoder(embedder, None, None, model="", family="", options={}, cache_dir=cache_dir,
                   use_cache=use_cache).dense(texts, "document", progress=progress)


def build_index(
    source: DocSource,
    index_dir: str | Path,
    *,
    model: str = DEFAULT_MODEL,
    embedder: str = DEFAULT_EMBEDDER,
    config: IndexConfig | None = None,
    sparse: SparseConfig = UNSET,
    dense_kind: str = UNSET,
    dense_options: dict[str, Any] | None = UNSET,
    embedder_options: dict[str, Any] | None = None,
    skip_bad: bool = False,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    device: str = "auto",
    progress: bool = True,
    loaded: Any = None,
    on_stage: Callable[[str], None] | None = None,
    lexical: bool | LexicalConfig = UNSET,
    wait: bool = False,
    precision: str | None = None,
    passages: str | PassageConfig = UNSET,
    calibrate: bool = True,
    store_text: bool = False,
    legs: str | Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH_DOCS,
    ray: Any = None,
    runtime: str | None = None,
    text_form: str | None = None,
) -> dict[str, Any]:
    """Index ``source`` into ``index_dir`` and return the manifest.

    ``source``: a BEIR folder, a corpus .jsonl, a pyarrow table or any iterable of
    ``{"_id", "title"?, "text"}`` records (a generator is read exactly once). The documents are
    streamed ``batch_size`` at a time: each batch is checked, encoded, analysed for BM25 and
    spooled to disk beside the index (index/spool.py), so memory holds one batch of texts plus
    the index's own arrays, never the corpus (retrieval/ingest.py). A bad record is an error
    naming its position (a corpus file: every bad line at once, before anything is encoded).
    ``store_text``: keep every document's title and text in the index (its ``texts`` part:
    ``Searcher.doc``, and ``add_documents`` / calibration without the corpus file).

    ``legs``: the legs to build, any of "dense", "sparse", "bm25" (a list, or one string such
    as "bm25" or "dense,bm25"; default: dense and sparse, plus bm25 unless ``lexical`` says no).
    An index of "bm25" alone loads no model (torch is not imported): it is searched with
    ``mode="bm25"`` and grows with ``add_documents`` without a model either.

    ``config``: the whole :class:`IndexConfig` (sparse, dense, lexical, fusion; default
    ``IndexConfig()``, whose fusion a shipped model replaces by its own "hybrid" fusion and
    leg-set defaults, encoders.shipped.hybrid_fusion / leg_set_fusion), saved in the manifest (``params["config"]``). ``sparse`` /
    ``dense_kind`` + ``dense_options`` (``DenseIndex.build`` keywords) / ``lexical`` (a
    :class:`LexicalConfig`, True for the default one, False for none) replace that part of it
    when given. By default the BM25 leg is stored (k1 0.9, b 0.4, Lucene IDF; the "bm25" modes).
    ``precision``: "fp32" (default) or "int8" (dynamic int8 Linear layers, encoders.quantize);
    recorded in the embedder options and the encoder fingerprint, so searches use it too.
    ``runtime``: what runs the transformer, "auto" (default, or ``$ALIGNIR_RUNTIME``: ONNX Runtime
    fp32 where it applies, else torch), "torch" or "onnx" (encoders.onnx_runtime); not part of
    the fingerprint (the vectors are the same within float rounding), recorded in
    ``manifest["build"]["runtime"]``.
    ``text_form``: how the LLM reads a text, "auto" (default: runs of capitals in sentence case)
    or "off" (as given); BM25 and the stored text keep the original (encoders.text_form). An
    embedder option: recorded with the index, in its fingerprint when not "off".
    ``wait``: when another process is writing the same index, wait for it instead of failing
    (index.lock: one writer at a time; resparsify and add_lexical take the same option).
    ``passages``: how long documents are split (a :class:`PassageConfig`, or its ``--passages``
    spelling: "auto" (default), "off", "WINDOW" or "WINDOW:STRIDE" in tokens); what was done
    is reported through ``on_stage`` and kept in ``manifest["build"]["passages"]``.

    Nothing is written at ``index_dir`` until the whole index is complete (index.store swaps
    it in atomically); a previous index there stays usable if the build fails or is killed,
    and the spool folder is removed either way. The dense vectors are cached by encoder
    fingerprint + text hash, so a rebuild (or a resumed build after a kill) re-encodes only
    what is new.

    ``ray``: encode on a Ray cluster ("auto", "local", a cluster address, or
    ``encoders.ray_pool.RayOptions``): actors holding the model encode what the cache lacks,
    and their vectors go into the cache as this process's would (retrieval/ray_encode.py).
    """
    if text_form is not None:
        embedder_options = {**(embedder_options or {}), "text_form": text_form}
    cfg = _build_config(config, sparse, dense_kind, dense_options, lexical, passages)
    chosen, cfg = _legs(legs, cfg, lexical)
    uses_model = any(leg in MODEL_LEGS for leg in chosen)
    stage = on_stage or (lambda s: log.info(s))
    if uses_model:
        from alignir.encoders.quantize import check_precision
        from alignir.encoders.shipped import hybrid_fusion, leg_set_fusion, resolve_shipped

        own_hybrid, own_leg_sets = hybrid_fusion(model), leg_set_fusion(model)
        if config is None and own_hybrid is not None:  # the shipped model's own hybrid fusion
            cfg = replace(cfg, fusion=replace(cfg.fusion, method=own_hybrid[0], alpha=own_hybrid[1]))
        if config is None and own_leg_sets:  # ... and its own calibrated leg-set defaults
            cfg = replace(cfg, fusion=replace(cfg.fusion, leg_sets=own_leg_sets))
        from alignir.encoders.runtimes import check_runtime

        precision = None if precision is None else check_precision(precision)  # fails before any work
        runtime = check_runtime(runtime)
        model, embedder, embedder_options = resolve_shipped(model, embedder, embedder_options, DEFAULT_EMBEDDER)
    stream = DocumentStream(source, skip_bad=skip_bad)
    calibrates = calibrate and "bm25" in chosen and len(chosen) > 1
    with writer_lock(index_dir, wait=wait):  # one writer at a time, from read to swap
        check_target(index_dir)
        stage(f"reading {source if isinstance(source, (str, Path)) else 'the documents'}")
        stream.check()  # a corpus file: every bad line reported before any work
        t0 = time.perf_counter()
        encoder, opts = None, dict(embedder_options or {})
        if uses_model:
            encoder, loaded = _document_encoder(model, embedder, opts, precision, cfg, loaded, device, progress,
                                                cache_dir, use_cache, stage, runtime)
        with ray_pool(encoder and encoder.embedder, ray, model=model, family=embedder, options=opts, device=device,
                      runtime=runtime, use_cache=use_cache, stage=stage) as pool, spool_folder(index_dir) as folder:
            if pool is not None:
                encoder.runner = pool.encode_chunks  # type: ignore[union-attr]
            stage(f"reading{', encoding' if uses_model else ''} and analysing the documents, "
                  f"{batch_size} at a time")
            forms = WordForms() if encoder is not None and reads_capitals(encoder.embedder) else None
            got = ingest(stream, folder, encoder=encoder, passages=cfg.passages, lexical=cfg.lexical,
                         keep_texts=store_text or calibrates, batch_size=batch_size, progress=progress,
                         stage=stage, word_forms=forms)
            t_enc = time.perf_counter() - t0
            parts: dict[str, Any] = {"lexical": got.lexical, "passages": got.pmap,
                                     "texts": SpooledTexts(got.texts, batch_size) if store_text else None}
            manifest: dict[str, Any] = {"encoder": {}, "params": {}}
            pc1 = extra = None
            if encoder is not None:
                H = got.rows
                stage("projecting onto the vocabulary (aligned tokens)")
                encoder.fit(H)  # u1 and λ of eq.14 from this corpus
                cfg = replace(cfg, sparse=encoder.config)  # with the λ derived from the corpus
                if "sparse" in chosen:
                    from alignir.index.sparse import SparseIndex

                    parts["sparse"] = SparseIndex.from_csr(encoder.sparse_documents(H), quantize=cfg.sparse.quantize)
                if "dense" in chosen:
                    from alignir.index.dense import DenseIndex

                    stage(f"building the dense index ({cfg.dense.kind})")
                    parts["dense"] = DenseIndex.build(H, **cfg.dense.build_options())
                sparsifier = encoder.sparsifier
                pc1, extra = sparsifier.pc1, term_map_arrays(sparsifier.term_map)
                manifest = {"encoder": doc_encoder_fingerprint(encoder.embedder),
                            "embedder": {"family": embedder, "model": model, "options": opts},
                            "params": {"sparse": cfg.sparse.to_dict(), "term_map": sparsifier.term_map.kind}}
                if forms is not None:
                    extra.update(forms.to_arrays())
                    manifest["params"]["word_forms"] = forms.summary()
            manifest["params"]["config"] = cfg.to_dict()
            manifest["build"] = {"source": str(Path(source).absolute()) if isinstance(source, (str, Path)) else None,
                                 "encode_seconds": round(t_enc, 3),
                                 "skipped_lines": [[sk.line, sk.reason] for sk in got.skipped],
                                 "passages": got.passage_stats or None,
                                 "runtime": None if encoder is None else encoder.runtime}
            if pool is not None:
                manifest["build"]["ray"] = pool.summary()
            stage(f"writing {index_dir}")
            write_index(index_dir, manifest, got.doc_ids, got.rows, parts=parts, pc1=pc1, extra_arrays=extra)
            if calibrates:
                stage("calibrating the fusion (pseudo-queries from the corpus)")
                store_calibration(index_dir, got.texts.contents(), loaded, runtime=runtime,  # type: ignore[union-attr]
                                  encoder=encoder)
        return read_manifest(index_dir)


def _document_encoder(model: str, embedder: str, opts: dict[str, Any], precision: str | None, cfg: IndexConfig,
                      loaded: Any, device: str, progress: bool, cache_dir: str | Path | None, use_cache: bool,
                      stage: Callable[[str], None], runtime: str | None = None) -> tuple[Encoder, Any]:
    """(the build's document encoder, its loaded model); ``opts`` gets the precision option."""
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model

    stage(f"loading model {model}")
    loaded = loaded if loaded is not None else load_model(model, device=device)
    if precision is not None and precision != "fp32":
        opts["precision"] = precision
    encoder = Encoder.from_embedder(get_embedder(embedder, loaded, progress=progress, **opts), loaded,
                                    cfg.sparse, model=model, family=embedder, options=opts,
                                    cache_dir=cache_dir, use_cache=use_cache, runtime=runtime, on_stage=stage)
    stage(f"encoder runtime: {encoder.runtime}")
    return encoder, loaded


def _legs(legs: Any, cfg: IndexConfig, lexical: Any) -> tuple[tuple[str, ...], IndexConfig]:
    """(the legs to build, ``cfg`` with its lexical part following them): default dense and
    sparse, plus bm25 when ``cfg`` has a lexical part; legs naming bm25 while ``lexical`` (or
    the config) says no BM25 part is a contradiction."""
    if legs is None:
        return (*MODEL_LEGS, *(("bm25",) if cfg.lexical is not None else ())), cfg
    chosen = parse_legs(legs)
    if "bm25" not in chosen:
        return chosen, replace(cfg, lexical=None)
    if cfg.lexical is None:
        said = "lexical=False" if lexical is False or lexical is None else "the config's lexical=None"
        raise InvalidInputError(f"legs {', '.join(chosen)} include bm25 but {said} asks for no BM25 part")
    return chosen, cfg


def store_calibration(index_dir: str | Path, texts: Sequence[str] | None, loaded: Any = None,
                      device: str = "auto", runtime: str | None = None,
                      encoder: Encoder | None = None) -> dict[str, Any] | None:
    """Measure the index's fusion calibration from its corpus ``texts`` (retrieval/calibration.py)
    and store it in the manifest (``params.fusion_calibration``); ``texts`` None drops a stored
    one (it would be stale). The caller holds the writer lock. Returns the calibration dict.

    ``encoder``: the encoder that just wrote the index (a build or an add): its embedder,
    runtime session and fitted sparsifier encode the pseudo-queries, instead of a second encoder
    opened from the folder (on ONNX Runtime a second session, about 0.5 GB, at the build's peak)."""
    from alignir.retrieval.calibration import calibrate

    manifest = read_manifest(index_dir)
    cal = None
    if texts is not None:
        # the encoder's own progress bars stay off while it encodes the pseudo-queries
        shown = getattr(encoder.embedder, "progress", None) if encoder is not None else None
        try:
            if shown is not None:
                encoder.embedder.progress = False
            cal = calibrate(_calibration_searcher(index_dir, loaded, device, runtime, encoder), texts)
        finally:
            if shown is not None:
                encoder.embedder.progress = shown
    data = None if cal is None else cal.to_dict()
    update_params(index_dir, {"fusion_calibration": data}, expected=manifest)
    return data


def _calibration_searcher(index_dir: str | Path, loaded: Any, device: str, runtime: str | None,
                          encoder: Encoder | None) -> Any:
    """The searcher the calibration measures with: over ``encoder`` when given (its fingerprint
    checked against the index's), else opened from the folder."""
    from alignir.retrieval.searcher import Searcher

    if encoder is None:
        return Searcher.open(index_dir, loaded=loaded, device=device, runtime=runtime)
    stored = open_index(index_dir)
    check_encoder(stored, encoder.embedder)
    return Searcher(stored, encoder.embedder, encoder.sparsifier, IndexConfig.from_manifest(stored.manifest).fusion)


def _passages(cfg: PassageConfig, texts: list[str], enc: Any, stage: Callable[[str], None]) -> tuple[Any, Any]:
    """(the rows to encode, the passage map or None) for ``texts`` under ``cfg`` (reported
    through ``stage`` when documents are split)."""
    planner = PassagePlanner(cfg, enc)
    plan = planner.plan(texts)
    return plan, planner.finish(stage)


def _build_config(config: IndexConfig | None, sparse: Any, dense_kind: Any, dense_options: Any,
                  lexical: Any, passages: Any = UNSET) -> IndexConfig:
    """``config`` (default ``IndexConfig()``) with the parts given by build_index's own
    keywords replaced."""
    cfg = IndexConfig() if config is None else config
    if not isinstance(cfg, IndexConfig):
        raise InvalidInputError(f"config must be an IndexConfig, got {type(cfg).__name__}")
    if passages is not UNSET:
        cfg = replace(cfg, passages=PassageConfig.parse(passages))
    if sparse is not UNSET:
        if not isinstance(sparse, SparseConfig):
            raise InvalidInputError(f"sparse must be a SparseConfig, got {type(sparse).__name__}")
        cfg = replace(cfg, sparse=sparse)
    if dense_options is not UNSET and dense_options is not None:
        cfg = replace(cfg, dense=DenseConfig.from_options(cfg.dense.kind if dense_kind is UNSET else dense_kind,
                                                          dense_options))
    elif dense_kind is not UNSET:
        cfg = replace(cfg, dense=replace(cfg.dense, kind=dense_kind))
    if lexical is not UNSET:
        if isinstance(lexical, LexicalConfig) or lexical is None:
            cfg = replace(cfg, lexical=lexical)
        elif isinstance(lexical, bool):
            cfg = replace(cfg, lexical=(cfg.lexical or LexicalConfig()) if lexical else None)
        else:
            raise InvalidInputError(f"lexical must be True, False or a LexicalConfig, got {lexical!r}")
    return cfg


def resparsify(index_dir: str | Path, *, loaded: Any = None, device: str = "auto", wait: bool = False,
               **changes: Any) -> dict[str, Any]:
    """Rebuild the sparse part with new K / M / λ / weighting / folding / quantisation from
    the stored dense vectors (no re-encode). ``changes``: SparseConfig fields; a value
    :data:`UNSET` keeps the current one, ``None`` is a value (``quantize=None``: float32)."""
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model
    from alignir.index.sparse import SparseIndex
    from alignir.retrieval.sparsify import Sparsifier, resolve_lambda

    with writer_lock(index_dir, wait=wait):  # one writer at a time, from read to swap
        legs = _model_legs(index_dir, "to re-sparsify")
        # passages, and the sparse part (else the dense one): which documents are deleted
        stored = open_index(index_dir, parts=("sparse" if "sparse" in legs else "dense", "passages"))
        config = IndexConfig.from_manifest(stored.manifest)
        old = SparseConfig.from_dict(stored.params.get("sparse", {}))
        new = old.with_changes(**changes)
        changes = {k: v for k, v in changes.items() if v is not UNSET}
        spec = embedder_spec(stored.manifest, index_dir)
        loaded = loaded if loaded is not None else load_model(spec["model"], device=device)
        enc = get_embedder(spec["family"], loaded, progress=False, **spec.get("options", {}))
        check_encoder(stored, enc)
        term_map = None
        if new.fold == old.fold and "token_to_term" in stored.extra:
            term_map = term_map_from_arrays(stored.extra, stored.params.get("term_map", "identity"))
        H = np.asarray(stored.dense_vectors, dtype=np.float32)
        if "pc1_lambda" in changes and "pc1_remove" not in changes:
            new = replace(new, pc1_remove=None)  # an explicit λ replaces a relative one
        new = resolve_lambda(new, H, stored.pc1)
        sparsifier = Sparsifier.for_model(loaded, new, pc1=stored.pc1, term_map=term_map, embedder=enc)
        sparse_index = SparseIndex.from_csr(sparsifier.documents(H), quantize=new.quantize)
        if stored.sparse is not None:  # deleted documents (their rows) stay deleted
            dead = np.setdiff1d(np.arange(sparse_index.n_docs), stored.sparse.live_doc_numbers())
            sparse_index.delete(dead)
        elif stored.dense is not None:  # an index without the sparse leg gets it
            sparse_index.delete(np.flatnonzero(stored.dense.deleted))
        params = {"sparse": new.to_dict(), "term_map": sparsifier.term_map.kind,
                  "config": replace(config, sparse=new).to_dict()}
        # folding changes the term map: its arrays are replaced in the same atomic step
        extra = term_map_arrays(sparsifier.term_map) if term_map is None else None
        replace_part(index_dir, "sparse", sparse_index, params=params, extra_arrays=extra,
                     expected=stored.manifest)
        store_calibration(index_dir, _corpus_texts(index_dir, stored.doc_ids, deleted_ids(stored)),
                          loaded)  # the sparse leg changed
        return read_manifest(index_dir)


def _model_legs(index_dir: str | Path, what: str) -> tuple[str, ...]:
    """The legs of an index, which must include a model leg (``what``: the operation, for the
    error an index built without a model gets)."""
    legs = index_legs(read_manifest(index_dir))
    if not any(leg in MODEL_LEGS for leg in legs):
        raise InvalidInputError(f"{index_dir} was built without a model (its legs: {', '.join(legs)}): "
                                f"there are no encoder vectors {what}")
    return legs


def calibrate_index(index_dir: str | Path, source: str | Path | None = None, *, loaded: Any = None,
                    device: str = "auto", wait: bool = False) -> dict[str, Any] | None:
    """(Re)measure and store the fusion calibration of an existing index (e.g. one built before
    it existed) from its corpus: ``source`` (BEIR folder or .jsonl), default the one the
    manifest records. Loads the model to encode the pseudo-queries; no document is re-encoded."""
    with writer_lock(index_dir, wait=wait):
        stored = open_index(index_dir, verify=False, parts=_deletion_parts(index_dir))
        deleted = deleted_ids(stored)
        if source is None:
            texts = _corpus_texts(index_dir, stored.doc_ids, deleted)
            if texts is None:
                raise InvalidInputError(f"{index_dir}: the corpus it was built from is gone or changed; "
                                        "pass it (--source)")
        else:
            texts = _indexed_texts(source, stored.doc_ids, deleted=deleted)
        return store_calibration(index_dir, texts, loaded, device)


def _indexed_texts(source: str | Path, doc_ids: Sequence[str], skip_bad: bool = True,
                   deleted: frozenset[str] = frozenset()) -> list[str]:
    """The texts of the indexed documents ``doc_ids`` (in that order) from the corpus
    ``source``; a corpus that lacks one of them is not this index's (InvalidInputError),
    except for ``deleted`` documents (``alignir delete``), whose text is then empty."""
    corpus = read_source(source, skip_bad=skip_bad)
    missing = [d for d in doc_ids if d not in corpus and d not in deleted]
    if missing:
        raise InvalidInputError(f"{source} lacks {len(missing)} indexed document(s), e.g. {missing[:5]}: "
                                "not the corpus of this index")
    return [corpus[d].contents if d in corpus else "" for d in doc_ids]


def _deletion_parts(index_dir: str | Path) -> tuple[str, str]:
    """The parts to open for :func:`deleted_numbers`: the first of sparse, dense, lexical the
    index has, and passages."""
    parts = read_manifest(index_dir)["parts"]
    return next((name for name in ("sparse", "dense", "lexical") if name in parts), "sparse"), "passages"


def deleted_numbers(stored: Any) -> np.ndarray:
    """Doc numbers of the deleted documents (``alignir delete``: no live row left) of an index
    opened with its sparse (or dense, or for an index without them lexical) and passages parts."""
    if stored.sparse is not None:
        rows = np.asarray(stored.sparse.live_doc_numbers(), dtype=np.int64)
    elif stored.dense is not None:
        rows = np.flatnonzero(~stored.dense.deleted)
    elif stored.lexical is not None:  # an index without the model legs: its documents are the BM25 part's
        live = np.asarray(stored.lexical.index.live_doc_numbers(), dtype=np.int64)
        return np.setdiff1d(np.arange(stored.n_docs, dtype=np.int64), live)
    else:
        return np.zeros(0, dtype=np.int64)
    live = rows if stored.passages is None else np.asarray(stored.passages.doc, dtype=np.int64)[rows]
    return np.setdiff1d(np.arange(stored.n_docs, dtype=np.int64), live)


def deleted_ids(stored: Any) -> frozenset[str]:
    """Ids of the deleted documents (see :func:`deleted_numbers`)."""
    return frozenset(stored.doc_ids[d] for d in deleted_numbers(stored).tolist())


def _corpus_texts(index_dir: str | Path, doc_ids: Sequence[str],
                  deleted: frozenset[str] = frozenset()) -> list[str] | None:
    """The texts of the indexed documents from the corpus the manifest records (None when it
    is gone or no longer holds them: the calibration is then dropped, not left stale)."""
    src = read_manifest(index_dir).get("build", {}).get("source")
    try:
        return _indexed_texts(src, doc_ids, deleted=deleted) if src else None
    except (AlignirError, OSError):
        return None


def add_lexical(index_dir: str | Path, source: str | Path | None = None, *, k1: float = 0.9,
                b: float = 0.4, skip_bad: bool = False, wait: bool = False, calibrate: bool = True,
                loaded: Any = None, device: str = "auto") -> dict[str, Any]:
    """Add (or rebuild) the BM25 lexical leg of an existing index from its corpus, without
    re-encoding: ``source`` defaults to the corpus the index was built from (manifest
    ``build.source``). The corpus must hold every live indexed document id; texts are taken in
    the index's doc-number order. ``calibrate``: then measure the fusion calibration against
    the new leg (loads the model, ``loaded`` if given, to encode the pseudo-queries); without
    it a stored calibration is dropped (it was measured against the old leg). Deleted
    documents stay deleted (the corpus need not hold them any more)."""
    from alignir.retrieval.bm25 import lexical_leg

    with writer_lock(index_dir, wait=wait):  # one writer at a time, from read to swap
        manifest = read_manifest(index_dir)
        src = source or manifest.get("build", {}).get("source")
        if not src:
            raise InvalidInputError(f"{index_dir}: the manifest does not record its corpus; pass the source")
        stored = open_index(index_dir, verify=False, parts=_deletion_parts(index_dir))
        dead = deleted_numbers(stored)
        texts = _indexed_texts(src, stored.doc_ids, skip_bad=skip_bad, deleted=deleted_ids(stored))
        lexical = LexicalConfig(k1=k1, b=b)
        leg = lexical_leg(texts, k1=lexical.k1, b=lexical.b, stem=lexical.stem, stopwords=lexical.stopwords)
        if dead.size:  # deleted documents stay deleted
            leg.index.delete(dead)
        config = replace(IndexConfig.from_manifest(manifest), lexical=lexical)
        replace_part(index_dir, "lexical", leg, params={"config": config.to_dict()}, expected=manifest)
        store_calibration(index_dir, texts if calibrate else None, loaded, device)  # a new anchor
        return read_manifest(index_dir)


def delete_documents(index_dir: str | Path, ids: Iterable[str], *, wait: bool = False) -> dict[str, Any]:
    """Delete documents from every part of an index in one atomic step: their rows (all their
    passages, in an index with passages) from the dense and aligned-token parts, the documents
    from the BM25 part. They keep their numbers as tombstones and never come back from a
    search (nor an export). Unknown or already deleted ids raise :class:`InvalidInputError`."""
    if isinstance(ids, (str, bytes)):
        raise InvalidInputError("ids must be a collection of document ids, not a single string")
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        raise InvalidInputError("no document ids to delete")
    with writer_lock(index_dir, wait=wait):
        stored = open_index(index_dir, mmap=False)
        docs = stored.doc_numbers(wanted)
        rows = docs if stored.passages is None else stored.passages.rows_of(docs)
        changed: dict[str, Any] = {}
        if stored.sparse is not None:
            stored.sparse.delete(rows)
            changed["sparse"] = stored.sparse
        if stored.dense is not None:
            if stored.dense.deleted[rows].any():
                raise InvalidInputError(f"some of the documents are already deleted, e.g. {wanted[:5]}")
            stored.dense.remove(rows)
            changed["dense"] = stored.dense
        if stored.lexical is not None:
            stored.lexical.index.delete(docs)
            changed["lexical"] = stored.lexical
        replace_parts(index_dir, changed, expected=stored.manifest)
        return read_manifest(index_dir)


def add_documents(index_dir: str | Path, docs: DocSource, *, replace: bool = False,
                  source: str | Path | None = None, loaded: Any = None, device: str = "auto",
                  cache_dir: str | Path | None = None, use_cache: bool = True, progress: bool = True,
                  skip_bad: bool = False, wait: bool = False, calibrate: bool = True,
                  on_stage: Callable[[str], None] | None = None, runtime: str | None = None) -> dict[str, Any]:
    """Add ``docs`` (anything :func:`read_source` reads) to the index at ``index_dir``: only
    they are encoded (their dense vectors through the embedding cache); every part is then made
    from the stored dense vectors plus theirs, exactly as :func:`build_index` makes it from a
    corpus: u1 and λ (eq.14) and the dense centring are re-fitted on the whole collection and
    the aligned tokens re-projected (no model forward for the stored documents), the BM25 part
    recomputed with the new N, document frequencies and average length, the passage map
    extended, the calibration re-measured. The result ranks as ``build_index`` over the
    documents it now holds (in this order) with the same dense vectors. Deleted documents are
    purged. An id already indexed is an error unless ``replace`` (the document then
    moves to the end with its new text). One atomic write under the writer lock.

    The BM25 part and the calibration need the texts of the stored documents: from the index's
    stored texts (``store_text``), else ``source`` or the corpus the manifest records. An index
    without the model legs (``legs=["bm25"]``) loads no model: only its BM25 part is made again.
    ``runtime``: what runs the transformer (as in :func:`build_index`)."""
    from alignir.encoders.runtimes import check_runtime

    runtime = check_runtime(runtime)
    stage = on_stage or (lambda s: log.info(s))
    new = read_source(docs, skip_bad=skip_bad)
    with writer_lock(index_dir, wait=wait):
        stored = open_index(index_dir, mmap=False)
        manifest = stored.manifest
        cfg = IndexConfig.from_manifest(manifest)
        dead = set(deleted_numbers(stored).tolist())
        live = [n for n in range(stored.n_docs) if n not in dead]
        clash = [stored.doc_ids[n] for n in live if stored.doc_ids[n] in new]
        if clash and not replace:
            raise InvalidInputError(f"{len(clash)} document(s) are already in the index, e.g. {clash[:5]}: "
                                    "pass replace=True (--replace) to replace them")
        keep = [n for n in live if stored.doc_ids[n] not in new]
        old_ids = [stored.doc_ids[n] for n in keep]
        texts_part = stored.parts.get("texts")
        need_texts = cfg.lexical is not None or texts_part is not None
        old_docs = _stored_documents(index_dir, stored, keep, source) if need_texts else None
        legs = index_legs(manifest)
        all_docs = [*(old_docs or []), *new.values()]
        texts = [d.contents for d in all_docs] if old_docs is not None else None
        parts: dict[str, Any] = {"texts": DocTexts.of(all_docs) if texts_part is not None else None}
        out = {"encoder": manifest["encoder"], "params": {"config": cfg.to_dict()}}
        encoder = None
        if any(leg in MODEL_LEGS for leg in legs):
            encoder = Encoder.for_stored(stored, index_dir, loaded=loaded, device=device, progress=progress,
                                         runtime=runtime)
            encoder.cache_dir, encoder.use_cache = cache_dir, use_cache
            H, model_parts, cfg = _added_rows(encoder, stored, cfg, legs, keep, old_docs, new, progress, stage)
            parts.update(model_parts)
            out = {"encoder": manifest["encoder"], "embedder": manifest["embedder"],
                   "params": {"sparse": cfg.sparse.to_dict(), "term_map": encoder.sparsifier.term_map.kind,
                              "config": cfg.to_dict()}}
        else:  # an index without the model legs: documents only
            H = np.zeros((len(keep) + len(new), 0), dtype=np.float32)
        if cfg.lexical is not None:
            from alignir.retrieval.bm25 import lexical_leg

            stage("rebuilding the lexical leg (BM25) with the new collection statistics")
            parts["lexical"] = lexical_leg(texts, k1=cfg.lexical.k1, b=cfg.lexical.b, stem=cfg.lexical.stem,
                                           stopwords=cfg.lexical.stopwords)
        build = dict(manifest.get("build", {}))
        build["added"] = [*build.get("added", []), {"documents": len(new), "replaced": len(clash),
                                                    "purged_deleted": len(dead),
                                                    "skipped_lines": [[s.line, s.reason] for s in new.skipped]}]
        out["build"] = build
        extra = None
        if encoder is not None:
            extra = term_map_arrays(encoder.sparsifier.term_map)
            forms = _added_word_forms(encoder, stored, old_docs, new.values())
            if forms is not None:
                extra.update(forms.to_arrays())
                out["params"]["word_forms"] = forms.summary()
        stage(f"writing {index_dir}")
        write_index(index_dir, out, [*old_ids, *new.ids()], H, parts=parts,
                    pc1=None if encoder is None else encoder.sparsifier.pc1, extra_arrays=extra)
        if encoder is not None:
            if calibrate:
                stage("calibrating the fusion (pseudo-queries from the corpus)")
            store_calibration(index_dir, texts if calibrate else None, encoder.loaded, runtime=runtime,
                              encoder=encoder)
        return read_manifest(index_dir)


def reads_capitals(embedder: Any) -> bool:
    """Whether ``embedder`` folds runs of capitals (``text_form="auto"``, encoders.text_form), so
    that its index keeps the forms of the corpus's words to read queries in capitals with."""
    return getattr(embedder, "text_form", "off") == "auto"


def _added_word_forms(encoder: Encoder, stored: Any, old_docs: list[Document] | None,
                      new_docs: Iterable[Document]) -> WordForms | None:
    """The word forms of an index after :func:`add_documents` (encoders.word_forms): counted
    again over every document when the stored ones' texts are at hand (deleted and replaced
    documents leave no trace), else the stored counts plus the new documents' (None: an index
    that kept none and whose texts are unknown, or an encoder that does not fold capitals)."""
    if not reads_capitals(encoder.embedder):
        return None
    if old_docs is not None:
        forms = WordForms()
    else:
        forms = WordForms.from_arrays(stored.extra)
        if forms is None:
            return None
    return forms.add_all(t for d in (*(old_docs or ()), *new_docs) for t in (d.title, d.text))


def _added_rows(encoder: Encoder, stored: Any, cfg: IndexConfig, legs: Sequence[str], keep: list[int],
                old_docs: list[Document] | None, new: Any, progress: bool,
                stage: Callable[[str], None]) -> tuple[np.ndarray, dict[str, Any], IndexConfig]:
    """(the rows of the kept and the new documents, the model parts made from them, ``cfg``
    with the re-fitted λ) for :func:`add_documents`: only the new documents are encoded."""
    from alignir.index.passages import PassageMap

    plan, _ = _passages(cfg.passages, new.texts(), encoder.embedder, stage)
    stage(f"encoding {len(plan.texts)} new rows of {len(new)} documents")
    H_new = encoder.dense(plan.texts, "document", progress=progress)
    pm = stored.passages
    if pm is None:
        rows = np.asarray(keep, dtype=np.int64)
        counts, starts, ends = [1] * len(keep), [0] * len(keep), [len(d.contents) for d in (old_docs or [])]
    else:
        rows = pm.rows_of(np.asarray(keep, dtype=np.int64))
        counts = np.asarray(pm.counts)[keep].tolist()
        starts = None if pm.start is None else np.asarray(pm.start)[rows].tolist()
        ends = None if pm.end is None else np.asarray(pm.end)[rows].tolist()
    H = np.concatenate([np.asarray(stored.dense_vectors, dtype=np.float32)[rows], H_new])
    counts += list(plan.counts)
    parts: dict[str, Any] = {}
    if pm is not None or plan.split:
        if pm is None:  # the stored documents were one row each: spans are their whole texts
            if old_docs is None:
                raise InvalidInputError("the new documents are split into passages but the stored ones' "
                                        "texts are unknown; pass source=")
            starts, ends = [0] * len(keep), [len(d.contents) for d in old_docs]
        parts["passages"] = (PassageMap.from_counts(counts) if starts is None
                             else PassageMap.from_counts(counts, starts + list(plan.starts), ends + list(plan.ends)))
    stage("re-fitting u1/λ and projecting onto the vocabulary (aligned tokens)")
    encoder.fit(H)
    cfg = dataclasses.replace(cfg, sparse=encoder.config)
    if "sparse" in legs:
        from alignir.index.sparse import SparseIndex

        parts["sparse"] = SparseIndex.from_csr(encoder.sparse_documents(H), quantize=cfg.sparse.quantize)
    if "dense" in legs:
        from alignir.index.dense import DenseIndex

        parts["dense"] = DenseIndex.build(H, **cfg.dense.build_options())
    return H, parts, cfg


def _stored_documents(index_dir: str | Path, stored: Any, numbers: Sequence[int],
                      source: str | Path | None) -> list[Document]:
    """The documents ``numbers`` of an index: from its stored texts, else from ``source`` or
    the corpus its manifest records (an error naming the way out when neither has them)."""
    part = stored.parts.get("texts")
    if part is not None:
        return [Document(*part.get(n)) for n in numbers]
    src = source or stored.manifest.get("build", {}).get("source")
    if not src:
        raise InvalidInputError(f"{index_dir}: the texts of its documents are not stored and no corpus is "
                                "recorded; pass the corpus it was built from (source=, --source)")
    corpus = read_source(src, skip_bad=True)
    ids = [stored.doc_ids[n] for n in numbers]
    missing = [d for d in ids if d not in corpus]
    if missing:
        raise InvalidInputError(f"{src} lacks {len(missing)} indexed document(s), e.g. {missing[:5]}: not the "
                                "corpus of this index (pass it with source=, --source)")
    return [corpus[d] for d in ids]
