"""`alignir build-index | search | resparsify | info`."""
from __future__ import annotations

from alignir.errors import InvalidInputError

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from alignir.encoders.shipped import DEFAULT_MODEL
from alignir.retrieval.ingest import DEFAULT_BATCH_DOCS
from alignir.retrieval.commands.common import (BACKEND_OPT, COLLECTION_OPT, DEVICE_OPT, RUNTIME_OPT, EMBEDDER_OPTION_HELP,
                                               LM_HEAD_HELP, PRECISION_HELP, TEXT_FORM_OPT, URI_OPT, backend_options, echo_json, embedder_options,
                                               renamed_flag,
                                               setup_logging, user_errors)
from alignir.retrieval.commands.evaluate import FUSION_HELP, PASSAGE_AGG_HELP, PASSAGES_HELP, WEIGHTS_HELP

INDEX_OPT = typer.Option(..., "--index", "-i", help="Index folder.")
#: the earlier names of --doc-k / --query-m / --pc1-lambda, accepted with a deprecation notice
OLD_K_OPT = typer.Option(None, "--k", hidden=True)
OLD_M_OPT = typer.Option(None, "--m", hidden=True)
OLD_LAMBDA_OPT = typer.Option(None, "--lambda", hidden=True)
RAY_OPT = typer.Option(None, "--ray", help="Encode on a Ray cluster: auto (the running one), local (start one "
                       "here) or HOST:PORT; one actor per GPU, else per --ray-cpus-per-actor cores (pip install "
                       "'alignir[ray]'; docs/scaling.md).")
RAY_CPUS_OPT = typer.Option(1, "--ray-cpus-per-actor", help="Cores per Ray actor on a cluster without GPUs.")


def _ray(address: Optional[str], cpus_per_actor: int):
    """The --ray flags as build_index's ``ray`` (None: no Ray), checked before any model loads."""
    if address is None:
        return None
    from alignir.encoders.ray_pool import RayOptions

    return RayOptions(address=address, cpus_per_actor=cpus_per_actor).check()


def _sparse_flags(doc_k, query_m, pc1_lambda, old_k, old_m, old_lambda) -> tuple:
    """(doc_k, query_m, pc1_lambda) from the new flags or their deprecated names."""
    return (renamed_flag(doc_k, old_k, "--doc-k", "--k"), renamed_flag(query_m, old_m, "--query-m", "--m"),
            renamed_flag(pc1_lambda, old_lambda, "--pc1-lambda", "--lambda"))


def _given(value):
    """A command-line option left out (None from typer) is UNSET: not a value."""
    from alignir.retrieval.config import UNSET

    return UNSET if value is None else value


def _sparse_config(k, m, lam, remove, doc_weighting, query_weighting, fold, quantize):
    from alignir.retrieval.config import SparseConfig

    base = SparseConfig()
    if lam is not None or remove is not None:  # an explicit λ or fraction replaces the default
        base = replace(base, pc1_lambda=lam or 0.0, pc1_remove=remove)
    changes = {"doc_k": k, "query_m": m, "doc_weighting": doc_weighting, "query_weighting": query_weighting,
               "fold": fold}
    sparse = base.with_changes(**{name: _given(v) for name, v in changes.items()})
    return replace(sparse, quantize=None) if quantize == "none" else sparse.with_changes(quantize=_given(quantize))


def build_index_cmd(
    source: Path = typer.Argument(..., help="A BEIR folder or a corpus.jsonl (`_id`, `title`, `text` per line)."),
    index: Path = INDEX_OPT,
    model: str = typer.Option(DEFAULT_MODEL, help="A shipped or registered name, HF folder, .gguf file or hub id "
                              "(list: docs/models.md)."),
    embedder: str = typer.Option("prompteol", help="prompteol | last | mean | weighted-mean | echo | autoregembed | "
                                 "llm2comp | gircse | pretrained (a shipped model brings its own)."),
    adapter: Optional[Path] = typer.Option(None, help="Trained LoRA adapter folder (alignir train; with a "
                                           "model that is not a shipped trained one)."),
    embedder_option: list[str] = typer.Option([], "--embedder-option", help=EMBEDDER_OPTION_HELP),
    lm_head_from: Optional[str] = typer.Option(None, "--lm-head-from", help=LM_HEAD_HELP),
    doc_k: Optional[int] = typer.Option(None, "--doc-k", help="K: aligned tokens kept per document (eq.15)."),
    query_m: Optional[int] = typer.Option(None, "--query-m", help="M: aligned tokens added to each query (eq.16)."),
    pc1_lambda: Optional[float] = typer.Option(None, "--pc1-lambda", help="λ of the PC1 adjustment h + λ·u1 (eq.14); "
                                               "0 = off."),
    old_k: Optional[int] = OLD_K_OPT,
    old_m: Optional[int] = OLD_M_OPT,
    old_lambda: Optional[float] = OLD_LAMBDA_OPT,
    remove: Optional[float] = typer.Option(None, "--pc1-remove", help="Set λ relative to the corpus: "
                                           "λ = -f · mean(h·u1), removing fraction f of the common component."),
    doc_weighting: Optional[str] = typer.Option(None, help="Document weights: raw | relu | log1p."),
    query_weighting: Optional[str] = typer.Option(None, help="Query weights: binary (paper) | raw | relu | log1p."),
    fold: Optional[bool] = typer.Option(None, "--fold/--no-fold", help="Fold case/space variants of a token into one term."),
    quantize: Optional[str] = typer.Option(None, help="Posting weights: none | uint8 | uint16."),
    dense: str = typer.Option("flat", help="FAISS index: flat | hnsw | ivfpq."),
    center: bool = typer.Option(True, "--center/--no-center", help="Center the dense vectors (mean fitted on the corpus)."),
    normalize: bool = typer.Option(True, "--normalize/--no-normalize", help="Cosine instead of raw inner product on the dense side."),
    whiten: Optional[str] = typer.Option(None, help="Whiten the dense vectors: zca | pca."),
    max_length: int = typer.Option(512, help="Truncate prompts to this many tokens."),
    passages: str = typer.Option("auto", help=PASSAGES_HELP),
    batch_tokens: Optional[int] = typer.Option(None, help="Padded tokens per encoder batch (default: 4096 on a CPU, "
                                               "sized to the free memory on a GPU)."),
    instruction: Optional[str] = typer.Option(None, help="Default query instruction (task name or text); "
                                              "can be overridden at search time."),
    skip_bad: bool = typer.Option(False, help="Skip malformed corpus lines (reported) instead of stopping."),
    lexical: bool = typer.Option(True, "--lexical/--no-lexical", help="Also store the BM25 lexical "
                                 "leg (k1 0.9, b 0.4, Lucene IDF) for the bm25 and fused modes."),
    legs: Optional[str] = typer.Option(None, "--legs", help="The legs to build, comma-separated: dense, sparse, "
                                       "bm25 (default: all three; bm25 alone loads no model)."),
    batch_size: int = typer.Option(DEFAULT_BATCH_DOCS, "--batch-size", help="Documents read, encoded and analysed at a time "
                                   "(memory holds one batch of texts, never the corpus)."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse dense vectors cached by an "
                                "earlier (or killed) encode of the same texts with the same encoder."),
    cache_dir: Optional[Path] = typer.Option(None, help="Embedding cache folder "
                                             "(default $ALIGNIR_CACHE/embeddings, ~/.cache/alignir)."),
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    precision: str = typer.Option("fp32", help=PRECISION_HELP),
    runtime: Optional[str] = RUNTIME_OPT,
    text_form: Optional[str] = TEXT_FORM_OPT,
    store_text: bool = typer.Option(False, "--store-text", help="Keep each document's title and text in "
                                    "the index (Searcher.doc; add and calibrate without the corpus file)."),
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    ray: Optional[str] = RAY_OPT,
    ray_cpus_per_actor: int = RAY_CPUS_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Encode a corpus once and build its sparse (aligned-token) + dense index (and BM25 leg).

    The corpus is streamed --batch-size documents at a time. Nothing appears at --index until
    the index is complete: a failed or killed build leaves an older index there intact.
    Re-running after a kill resumes from the encoded shards. --legs bm25 builds a BM25 index
    without loading any model.
    """
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.config import PassageConfig, parse_legs
        from alignir.retrieval.indexer import build_index

        passage_cfg = PassageConfig.parse(passages)  # a bad --passages fails before the model loads
        legs = None if legs is None else parse_legs(legs)  # ... and so does a bad --legs
        k, m, lam = _sparse_flags(doc_k, query_m, pc1_lambda, old_k, old_m, old_lambda)
        cfg = _sparse_config(k, m, lam, remove, doc_weighting, query_weighting, fold, quantize)
        opts = _encoder_options(embedder_option, max_length, batch_tokens, adapter, instruction, lm_head_from,
                                text_form)
        dense_opts = {"center": center or whiten is not None, "whiten": whiten, "normalize": normalize}
        manifest = build_index(source, index, model=model, embedder=embedder, sparse=cfg,
                               dense_kind=dense, dense_options=dense_opts, embedder_options=opts,
                               skip_bad=skip_bad, cache_dir=cache_dir, use_cache=resume,
                               device=device, lexical=lexical, wait=wait, precision=precision,
                               passages=passage_cfg, store_text=store_text, legs=legs, batch_size=batch_size,
                               runtime=runtime, ray=_ray(ray, ray_cpus_per_actor),
                               on_stage=lambda s: typer.secho(f"• {s}", err=True))
        skipped = manifest.get("build", {}).get("skipped_lines", [])
        for line, reason in skipped[:20]:
            typer.secho(f"skipped line {line}: {reason}", fg=typer.colors.YELLOW, err=True)
        postings = manifest["parts"].get("sparse", manifest["parts"].get("lexical", {})).get("n_postings", 0)
        rows = manifest["counts"].get("rows")
        as_rows = f" as {rows} passages" if rows is not None else ""
        typer.echo(f"indexed {manifest['counts']['docs']} documents{as_rows} into {index} "
                   f"({postings} postings, {len(skipped)} lines skipped)")


def _encoder_options(embedder_option: list[str], max_length: int, batch_tokens: Optional[int], adapter: Optional[Path],
                     instruction: Optional[str], lm_head_from: Optional[str] = None,
                     text_form: Optional[str] = None) -> dict:
    """The embedder options of build-index's (and encode's) flags: the same flags give the same
    encoder fingerprint, so build-index finds what encode cached."""
    opts = {**embedder_options(embedder_option), "max_length": max_length}
    if batch_tokens is not None:  # unset: the embedder's budget for its device (encoders.batching)
        opts["batch_tokens"] = batch_tokens
    if adapter is not None:
        opts["adapter"] = str(adapter)
    if instruction is not None:
        opts["instruction"] = instruction
    if lm_head_from is not None:  # moves into the model spec (encoders.shipped.resolve_shipped)
        opts["lm_head_from"] = lm_head_from
    if text_form is not None:  # unset: the default of a new encoder (encoders.shipped.resolve_shipped)
        from alignir.encoders.text_form import check_text_form

        opts["text_form"] = check_text_form(text_form)
    return opts


def search_cmd(
    query: str = typer.Argument(..., help="The query text."),
    index: Path = INDEX_OPT,
    mode: str = typer.Option("hybrid", help="hybrid | sparse | dense | bm25 | a '+'-joined leg set "
                             "(dense+bm25, sparse+bm25, dense+sparse+bm25)."),
    top: int = typer.Option(10, "--top", "-k", help="Number of hits."),
    explain: bool = typer.Option(False, help="Show the fusion plan in force and, per hit, the matched tokens and their "
                                 "contributions (␣ = a leading space; passage spans: docs/searching.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"query\", \"hits\": [...]} as JSON."),
    instruction: Optional[str] = typer.Option(None, help="Query instruction: a task name (e.g. scifact) or text."),
    fusion: Optional[str] = typer.Option(None, help=FUSION_HELP),
    alpha: Optional[float] = typer.Option(None, help="Weight of the dense side in minmax/zscore fusion."),
    weights: Optional[str] = typer.Option(None, help=WEIGHTS_HELP),
    model: Optional[str] = typer.Option(None, help="Override the model location recorded in the index."),
    passage_agg: Optional[str] = typer.Option(None, "--passage-agg", help=PASSAGE_AGG_HELP),
    backend: str = BACKEND_OPT,
    uri: Optional[str] = URI_OPT,
    collection: Optional[str] = COLLECTION_OPT,
    device: str = DEVICE_OPT,
    precision: Optional[str] = typer.Option(None, help="Query encoder precision: fp32 | int8 "
                                            "(default: the index's)."),
    allow_precision_mismatch: bool = typer.Option(False, "--allow-precision-mismatch", help="Accept a "
                                                  "query encoder whose precision differs from the index's."),
    runtime: Optional[str] = RUNTIME_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Search an index from the shell (its legs in the folder, or in Milvus with --backend milvus)."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.commands.evaluate import parse_weights
        from alignir.retrieval.searcher import check_search_options
        from alignir.retrieval.searcher import Searcher

        # every argument is checked before the model loads (which takes seconds)
        if not query.strip():
            raise InvalidInputError("the query is empty")
        if top < 1:
            raise InvalidInputError(f"--top must be at least 1, got {top}")
        leg_weights = parse_weights(weights)
        check_search_options(mode, fusion=fusion, alpha=alpha, weights=leg_weights, precision=precision,
                             passage_agg=passage_agg)
        searcher = Searcher.open(index, model=model, instruction=instruction, device=device,
                                 precision=precision, allow_precision_mismatch=allow_precision_mismatch,
                                 passage_agg=passage_agg, runtime=runtime,
                                 **backend_options(backend, uri, collection))
        hits = searcher.search(query, k=top, mode=mode, explain=explain, fusion=fusion, alpha=alpha,
                               weights=leg_weights)
        plan = searcher.plan(mode, fusion=fusion, alpha=alpha, weights=leg_weights) if explain else None
        if as_json:
            echo_json({"query": query, "mode": mode, "hits": [_hit_json(h) for h in hits],
                       **({} if plan is None else {"plan": plan.to_dict()})})
            return
        if plan is not None:
            typer.echo(plan.describe())
        _print_hits(query, hits, explain)


def _fusion_summary(manifest) -> str:
    """The default fusion of fused modes saved in the index (IndexConfig.fusion)."""
    from alignir.retrieval.config import IndexConfig

    f = IndexConfig.from_manifest(manifest).fusion
    saved = "" if "config" in manifest.get("params", {}) else " (not saved: the default)"
    own = "".join(f"; {key} calibrated " + "/".join(f"{leg} {w:g}" for leg, w in v["weights"].items())
                  + f" gate power {v['gate_power']:g}" for key, v in f.leg_sets.items())
    return f"{f.method}, alpha {f.alpha} on dense, depth {f.depth}, rrf_k {f.rrf_k}{own}{saved}"


def _calibration_summary(manifest) -> str:
    """The stored fusion calibration (what the default of the leg sets with bm25 gates by)."""
    cal = manifest.get("params", {}).get("fusion_calibration")
    if not cal:
        return "no (leg sets with bm25 gate per query; alignir calibrate measures it)"
    agree = ", ".join(f"{leg} {a:.3f}" for leg, a in cal["agreement"].items())
    return f"agreement with bm25 on {cal['queries']} pseudo-queries: {agree}"


def _hit_json(hit) -> dict:
    d = {"id": hit.id, "score": hit.score, "rank": hit.rank,
         "sparse_score": hit.sparse_score, "dense_score": hit.dense_score,
         "bm25_score": hit.bm25_score}
    if hit.explanation is not None:
        d["matched"] = [{"term": c.string, "text": c.text if c.text is not None else c.string,
                         **({} if c.token is None else {"token_id": c.token}),
                         "query_weight": c.query_weight, "doc_weight": c.doc_weight,
                         "contribution": c.contribution}
                        for c in hit.explanation]
    if hit.passages is not None:
        d["passages"] = {leg: vars(m) for leg, m in hit.passages.items()}
    return d


def _passage_note(hit) -> str:
    """"passage d3#2 [812:1460]" per passage leg of a hit (indexes with passages, --explain)."""
    if not hit.passages:
        return ""
    shown = []
    for leg, m in hit.passages.items():
        span = f" [{m.start}:{m.end}]" if m.start is not None else ""
        shown.append(f"{leg}: {m.id}{span}")
    return "passage " + "; ".join(shown) + " | "


def _print_hits(query: str, hits, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{query!r}", show_lines=explain)
    for col in ("rank", "id", "score", "sparse", "dense", "bm25"):
        table.add_column(col, justify="right" if col != "id" else "left")
    if explain:
        table.add_column("why (top matched tokens: contribution)")
    fmt = lambda v: "" if v is None else f"{v:.4g}"  # noqa: E731
    for h in hits:
        row = [str(h.rank), h.id, fmt(h.score), fmt(h.sparse_score), fmt(h.dense_score),
               fmt(h.bm25_score)]
        if explain:
            row.append(_passage_note(h) + ", ".join(f"{c.text if c.text is not None else c.string}: "
                                                     f"{c.contribution:.3g}" for c in (h.explanation or [])[:8]))
        table.add_row(*row)
    Console().print(table)
    if not hits:
        typer.echo("no hits")


def resparsify_cmd(
    index: Path = INDEX_OPT,
    doc_k: Optional[int] = typer.Option(None, "--doc-k", help="New K (eq.15)."),
    query_m: Optional[int] = typer.Option(None, "--query-m", help="New M (eq.16)."),
    pc1_lambda: Optional[float] = typer.Option(None, "--pc1-lambda", help="New λ (eq.14)."),
    old_k: Optional[int] = OLD_K_OPT,
    old_m: Optional[int] = OLD_M_OPT,
    old_lambda: Optional[float] = OLD_LAMBDA_OPT,
    remove: Optional[float] = typer.Option(None, "--pc1-remove", help="New λ = -f · mean(h·u1)."),
    doc_weighting: Optional[str] = typer.Option(None, help="raw | relu | log1p."),
    query_weighting: Optional[str] = typer.Option(None, help="binary | raw | relu | log1p."),
    fold: Optional[bool] = typer.Option(None, "--fold/--no-fold"),
    quantize: Optional[str] = typer.Option(None, help="none | uint8 | uint16."),
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Rebuild the sparse side with new K / M / λ / weighting from the stored dense vectors
    (seconds; no re-encode). Unset options keep their current values."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.indexer import resparsify

        k, m, lam = _sparse_flags(doc_k, query_m, pc1_lambda, old_k, old_m, old_lambda)
        changes = {name: _given(v) for name, v in dict(
            doc_k=k, query_m=m, pc1_lambda=lam, pc1_remove=remove, doc_weighting=doc_weighting,
            query_weighting=query_weighting, fold=fold).items()}
        changes["quantize"] = None if quantize == "none" else _given(quantize)
        manifest = resparsify(index, wait=wait, **changes)
        typer.echo(f"re-sparsified {index}: {manifest['params']['sparse']}")


def info_cmd(
    index: Path = INDEX_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
    verify: bool = typer.Option(True, "--verify/--no-verify",
                                help="Check every file against the manifest's sizes and sha256 (default)."),
    backend: str = BACKEND_OPT,
    uri: Optional[str] = URI_OPT,
    collection: Optional[str] = COLLECTION_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """What is inside an index: counts, sizes, parameters, encoder fingerprint. Verifies the
    manifest's own checksum and, unless --no-verify, every file it lists. With --backend milvus,
    also checks its collection: the same index, whole (an interrupted export or damaged storage
    is refused)."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.index.manifest_io import read_manifest, verify_index
        from alignir.retrieval.config import index_legs

        opts = backend_options(backend, uri, collection)
        manifest = read_manifest(index)
        if verify:
            verify_index(index, manifest)
        remote = _milvus_summary(index, opts) if opts else None
        size = sum(f.stat().st_size for f in Path(index).rglob("*") if f.is_file())
        if as_json:
            echo_json({**manifest, "bytes": size, **({"milvus": remote} if remote else {})})
            return
        enc, emb = manifest["encoder"], manifest.get("embedder", {})
        parts = manifest["parts"]
        sparse, dense, lexical = (parts.get(k, {}) for k in ("sparse", "dense", "lexical"))
        lines = [
            f"index      {Path(index).absolute()}",
            f"format     {manifest['format']} v{manifest['format_version']} (created {manifest.get('created')})",
            f"documents  {manifest['counts']['docs']}" + (
                f" as {manifest['counts']['rows']} passages ({_passage_summary(manifest)})"
                if "rows" in manifest["counts"] else "") + _live_summary(manifest),
            f"legs       {', '.join(index_legs(manifest))}",
            f"postings   {sparse.get('n_postings', '-')} over {sparse.get('n_terms', '-')} terms",
            f"dense      {manifest['dims']['dense']} dims, {dense.get('kind', '-')}"
            f", stored {manifest.get('dense_dtype')}",
            *([f"model      {emb.get('model')} ({enc.get('model', {}).get('sha256', '')[:12]})",
               f"embedder   {emb.get('family')} {emb.get('options', {})}"
               + (f", encoded on {build['runtime']}" if (build := manifest.get("build") or {}).get("runtime") else ""),
               f"sparse     {manifest.get('params', {}).get('sparse')}"] if emb
              else ["model      none (built without one: searched by bm25 alone)"]),
            *([f"word forms {wf['forms']} counted, {wf['words_not_lower']} words read in their corpus form in "
               f"capital queries"] if (wf := manifest.get("params", {}).get("word_forms")) else []),
            f"fusion     {_fusion_summary(manifest)}",
            f"calibrated {_calibration_summary(manifest)}",
            "lexical    " + (f"{lexical.get('n_terms')} terms, {lexical.get('n_postings')} postings, "
                              f"{_bm25_summary(lexical.get('params', {}))}" if lexical
                              else "none (no bm25 modes; alignir add-lexical adds it)"),
            *(f"part       {name} ({entry['path']}/)" for name, entry in sorted(parts.items())
              if name not in ("sparse", "dense", "lexical")),
            f"encoder    hash {manifest['encoder_hash'][:16]}",
            f"size       {size / 1e6:.1f} MB",
            *([f"milvus     {remote['collection']} at {remote['uri']}: {remote['rows']} rows, whole"] if remote else []),
        ]
        typer.echo("\n".join(lines))


def _live_summary(manifest) -> str:
    """", 80 live, 2 deleted": rows (documents, or passages) still searched and deleted ones."""
    dense = manifest["parts"].get("dense", {})
    total, live = manifest["counts"].get("rows", manifest["counts"].get("docs")), dense.get("n_live")
    if not isinstance(live, int) or not isinstance(total, int):
        return ""
    unit = " passages" if "rows" in manifest["counts"] else ""
    return f" ({live}{unit} live, {total - live} deleted)"


def _milvus_summary(index: Path, opts: dict) -> dict:
    """The collection of ``index`` at the Milvus URI, opened as a search opens it (same index, whole)."""
    from alignir.index.reader import open_index
    from alignir.retrieval.milvus_search import open_collection

    c = open_collection(open_index(index, verify=False), opts["uri"], opts["collection"])
    try:
        return {"uri": c.uri, "collection": c.name, "rows": c.rows}
    finally:
        c.close()


def _passage_summary(manifest) -> str:
    p = manifest.get("build", {}).get("passages", {})
    return f"window {p.get('window')} tokens, stride {p.get('stride')}, {p.get('split_documents')} documents split"


def _bm25_summary(p: dict) -> str:
    return f"{p.get('model', 'bm25')} k1={p.get('k1')} b={p.get('b')} stemmer={p.get('stemmer')}"


def add_lexical_cmd(
    index: Path = INDEX_OPT,
    source: Optional[Path] = typer.Option(None, help="Corpus (BEIR folder or .jsonl); default: "
                                          "the one the index was built from."),
    k1: float = typer.Option(0.9, help="BM25 k1."),
    b: float = typer.Option(0.4, help="BM25 b."),
    calibrate: bool = typer.Option(True, "--calibrate/--no-calibrate",
                                   help="Measure the fusion calibration against the new leg (loads the model "
                                        "for 64 pseudo-queries); --no-calibrate: no model, the fused modes "
                                        "gate per query."),
    device: str = typer.Option("auto", help="Device of the model (auto, cpu, cuda)."),
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Add (or rebuild) the BM25 lexical leg of an existing index from its corpus: no re-encode.
    Indexes built before the leg existed get the bm25 modes."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.indexer import add_lexical

        entry = add_lexical(index, source, k1=k1, b=b, wait=wait, calibrate=calibrate,
                            device=device)["parts"]["lexical"]
        typer.echo(f"lexical leg added to {index}: {entry['n_terms']} terms, {entry['n_postings']} postings")


def calibrate_cmd(
    index: Path = INDEX_OPT,
    source: Optional[Path] = typer.Option(None, help="Corpus (BEIR folder or .jsonl); default: "
                                          "the one the index was built from."),
    device: str = typer.Option("auto", help="Device of the model (auto, cpu, cuda)."),
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Measure how far each LLM leg agrees with BM25 on pseudo-queries cut from the corpus, and
    store it in the index.

    The default "calibrated" fusion of the leg sets with bm25 then drops
    a leg that is noise on this collection (build-index does this already; for older indexes)."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.indexer import calibrate_index

        cal = calibrate_index(index, source, device=device, wait=wait)
        if cal is None:
            typer.echo(f"{index}: nothing to calibrate (the fusion needs the bm25 leg and another leg)")
        else:
            agree = ", ".join(f"{leg} {a:.3f}" for leg, a in cal["agreement"].items())
            typer.echo(f"calibrated {index} on {cal['queries']} pseudo-queries: agreement with bm25 {agree}")


def delete_cmd(
    ids: list[str] = typer.Argument(..., help="Document ids to delete."),
    index: Path = INDEX_OPT,
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Delete documents from an index (every part, all their passages; atomic): they never come
    back from a search or an export. No model, no re-encode."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.indexer import delete_documents

        delete_documents(index, ids, wait=wait)
        typer.echo(f"deleted {len(set(ids))} documents from {index}")


def add_cmd(
    corpus: Path = typer.Argument(..., help="The documents to add: a BEIR folder or a corpus .jsonl."),
    index: Path = INDEX_OPT,
    replace_existing: bool = typer.Option(False, "--replace", help="Replace documents whose id is already "
                                          "indexed (else they are an error)."),
    source: Optional[Path] = typer.Option(None, help="The corpus the index was built from (its texts make the "
                                          "BM25 part and the calibration; default: the stored texts, else the "
                                          "corpus the index records)."),
    skip_bad: bool = typer.Option(False, help="Skip malformed corpus lines (reported) instead of stopping."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse cached dense vectors."),
    cache_dir: Optional[Path] = typer.Option(None, help="Embedding cache folder."),
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    runtime: Optional[str] = RUNTIME_OPT,
    wait: bool = typer.Option(False, "--wait", help="If another process is writing this index, wait for it instead of failing."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Add documents to an index: only they are encoded; every part is made again from the stored
    vectors plus theirs (u1/λ and the dense centring re-fitted, BM25 statistics updated), so the
    index ranks as a rebuild over all its documents would. Deleted documents are purged. Atomic."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.indexer import add_documents

        manifest = add_documents(index, corpus, replace=replace_existing, source=source,
                                 skip_bad=skip_bad, cache_dir=cache_dir, use_cache=resume, device=device,
                                 wait=wait, runtime=runtime, on_stage=lambda s: typer.secho(f"• {s}", err=True))
        added = manifest["build"]["added"][-1]
        typer.echo(f"added {added['documents']} documents ({added['replaced']} replaced) to {index}: "
                   f"{manifest['counts']['docs']} documents")


def encode_cmd(
    source: Path = typer.Argument(..., help="A BEIR folder or a corpus .jsonl."),
    model: str = typer.Option(DEFAULT_MODEL, help="Model spec (as for build-index)."),
    embedder: str = typer.Option("prompteol", help="Embedder family (as for build-index)."),
    adapter: Optional[Path] = typer.Option(None, help="Trained LoRA adapter folder (as for build-index)."),
    embedder_option: list[str] = typer.Option([], "--embedder-option", help=EMBEDDER_OPTION_HELP),
    lm_head_from: Optional[str] = typer.Option(None, "--lm-head-from", help=LM_HEAD_HELP),
    instruction: Optional[str] = typer.Option(None, help="Default query instruction (as for build-index: "
                                              "part of the encoder fingerprint)."),
    max_length: int = typer.Option(512, help="Truncate prompts to this many tokens."),
    passages: str = typer.Option("auto", help=PASSAGES_HELP + " Give build-index the same value."),
    batch_tokens: Optional[int] = typer.Option(None, help="Padded tokens per encoder batch (default: 4096 on a CPU, "
                                               "sized to the free memory on a GPU)."),
    shard_id: Optional[int] = typer.Option(None, help="Encode only this shard (0-based) ..."),
    shard_num: Optional[int] = typer.Option(None, help="... of this many contiguous shards."),
    ray: Optional[str] = RAY_OPT,
    ray_cpus_per_actor: int = RAY_CPUS_OPT,
    skip_bad: bool = typer.Option(False, help="Skip malformed corpus lines."),
    cache_dir: Optional[Path] = typer.Option(None, help="Embedding cache folder "
                                             "(default $ALIGNIR_CACHE/embeddings)."),
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    precision: str = typer.Option("fp32", help=PRECISION_HELP),
    runtime: Optional[str] = RUNTIME_OPT,
    text_form: Optional[str] = TEXT_FORM_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Encode a corpus (or one shard of it) into the embedding cache.

    Pyserini-style: run shards in separate processes or machines, `alignir cache-merge` their cache folders, then
    `alignir build-index` with the same model/embedder/max-length finds every vector cached.
    Use the same --max-length/--batch-tokens/--passages/--adapter/--embedder-option/--instruction/--text-form
    here as in build-index (they make the encoder fingerprint, or the texts encoded: long
    documents are split into passages as build-index splits them).
    --ray encodes on a Ray cluster instead (no shards to merge: the vectors land in this
    machine's cache)."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.encoders.cache import EmbeddingCache
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model
        from alignir.encoders.onnx_runtime import apply_runtime
        from alignir.encoders.runtimes import check_runtime
        from alignir.encoders.shipped import resolve_shipped
        from alignir.retrieval.config import PassageConfig
        from alignir.retrieval.encoder import checkpoint_every
        from alignir.retrieval.indexer import DEFAULT_EMBEDDER, _passages, read_source
        from alignir.retrieval.ray_encode import ray_pool

        passage_cfg = PassageConfig.parse(passages)  # a bad --passages fails before the model loads
        runtime = check_runtime(runtime)  # ... and so does a bad --runtime
        ray_options = _ray(ray, ray_cpus_per_actor)  # ... and an unreachable --ray
        opts = _encoder_options(embedder_option, max_length, batch_tokens, adapter, instruction, lm_head_from,
                                text_form)
        texts = read_source(source, skip_bad=skip_bad).texts()
        model, embedder, opts = resolve_shipped(model, embedder, opts, DEFAULT_EMBEDDER)
        enc = apply_runtime(get_embedder(embedder, load_model(model, device=device), precision=precision, **opts),
                            runtime)
        # the rows build-index encodes: the passages of long documents (same plan, same texts)
        plan, pmap = _passages(passage_cfg, texts, enc, lambda s: typer.secho(f"• {s}", err=True))
        with ray_pool(enc, ray_options, model=model, family=embedder,
                      options={**opts, "precision": precision} if precision != "fp32" else opts, device=device,
                      runtime=runtime, stage=lambda s: typer.secho(f"• {s}", err=True)) as pool:
            H = EmbeddingCache(cache_dir).encode_cached(enc, plan.texts, "document", shard_size=checkpoint_every(enc),
                                                        shard_id=shard_id, shard_num=shard_num,
                                                        runner=pool and pool.encode_chunks)
        what = "passages" if pmap is not None else "documents"
        typer.echo(f"encoded {H.shape[0]} of {len(plan.texts)} {what} into the cache")


def cache_merge_cmd(
    sources: list[Path] = typer.Argument(..., help="Cache folders to copy from."),
    cache_dir: Optional[Path] = typer.Option(None, help="Target cache (default $ALIGNIR_CACHE/embeddings)."),
) -> None:
    """Join embedding caches written by separate `alignir encode --shard-id` runs."""
    with user_errors():
        from alignir.encoders.cache import EmbeddingCache

        n = EmbeddingCache(cache_dir).merge(sources)
        typer.echo(f"copied {n} cache parts")


def register(app: typer.Typer) -> None:
    app.command("encode")(encode_cmd)
    app.command("cache-merge")(cache_merge_cmd)
    app.command("build-index")(build_index_cmd)
    app.command("search")(search_cmd)
    app.command("resparsify")(resparsify_cmd)
    app.command("add-lexical")(add_lexical_cmd)
    app.command("calibrate")(calibrate_cmd)
    app.command("delete")(delete_cmd)
    app.command("add")(add_cmd)
    app.command("info")(info_cmd)
