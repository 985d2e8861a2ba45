"""`alignir eval` (score an index on a BEIR split) and `alignir beir` (build + eval in one go)."""
from __future__ import annotations

from alignir.errors import InvalidInputError

import hashlib
from pathlib import Path
from typing import Any, Optional

import typer

from alignir.encoders.shipped import DEFAULT_MODEL
from alignir.retrieval.commands.common import (BACKEND_OPT, COLLECTION_OPT, DEVICE_OPT, RUNTIME_OPT, EMBEDDER_OPTION_HELP,
                                               LM_HEAD_HELP, PRECISION_HELP, TEXT_FORM_OPT, URI_OPT, backend_options, echo_json, embedder_options,
                                               setup_logging, user_errors)

MODES_HELP = "hybrid | sparse | dense | bm25 | a '+'-joined set (dense+sparse+bm25 ...) | all; comma-separated list allowed."
WEIGHTS_HELP = "Per-leg weights of a fused set, e.g. dense=0.4,sparse=0.2,bm25=0.4 (default: the index's; alignir info shows them)."
PASSAGES_HELP = 'auto | off | WINDOW[:STRIDE] in tokens: split documents longer than the encoder window into passages. See docs/indexing.md.'
PASSAGE_AGG_HELP = 'maxp | firstp | sumN: how a document scores by its passages (default maxp).'
FUSION_HELP = "calibrated | agree | zscore | minmax | rrf (default: the index's; sets with bm25: calibrated). See docs/searching.md."


def _modes(mode: str, available: tuple[str, ...] | None = None) -> list[str]:
    """Modes of a --mode value; ``available``: what "all" means (default: every mode). Spaces
    around '+' are dropped ("dense + bm25" -> "dense+bm25": the mode names a run file and its tag)."""
    from alignir.retrieval.searcher import MODES, parse_mode

    if mode.strip() == "all":
        return list(available or MODES)
    modes = ["+".join(p.strip() for p in m.split("+")) for m in mode.split(",") if m.strip()]
    if not modes:
        raise InvalidInputError(f"no mode given; use {MODES_HELP}")
    for m in modes:
        try:
            parse_mode(m)
        except ValueError:
            raise InvalidInputError(f"unknown mode {m!r}; use {MODES_HELP}") from None
    return modes


def parse_weights(text: str | None) -> dict[str, float] | None:
    """"dense=0.4,bm25=0.6" -> {"dense": 0.4, "bm25": 0.6}."""
    if text is None:
        return None
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise InvalidInputError(f"--weights wants LEG=WEIGHT pairs like dense=0.5,bm25=0.5, got {text!r}")
    return out


def _indexed_corpus(stored: Any, corpus: Any) -> dict:
    """The documents of ``corpus`` that the index holds live: the BM25 anchor ranks the collection the
    legs rank (not documents deleted from it with ``alignir delete``, nor ones it was never built on)."""
    from alignir.retrieval.indexer import deleted_ids

    deleted = deleted_ids(stored)
    kept = {d: corpus[d] for d in stored.doc_ids if d in corpus and d not in deleted}
    if not kept:
        raise InvalidInputError(f"{stored.path}: none of its documents is in the dataset's corpus")
    return kept


def _evaluate(index: Path, dataset: str, split: str, mode: str, run: Optional[Path],
              top: int, instruction: Optional[str], fusion: Optional[str], alpha: Optional[float],
              bm25: bool, progress: bool = True, weights: Optional[dict] = None,
              backend: Optional[dict] = None, device: str = "auto", passage_agg: Optional[str] = None,
              runtime: Optional[str] = None) -> dict:
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import evaluate_runs, timed_eval
    from alignir.retrieval.runs import write_trec
    from alignir.retrieval.searcher import Searcher, modes_for

    data = load_beir(dataset, split=split)
    searcher = Searcher.open(index, instruction=instruction, device=device, passage_agg=passage_agg,
                             runtime=runtime, **(backend or {}))
    try:
        modes = _modes(mode, modes_for(searcher.index))
        out = timed_eval(searcher, data, modes, k=top, progress=progress, fusion=fusion, alpha=alpha,
                         weights=weights)
        if bm25:
            from alignir.retrieval.bm25 import bm25_run

            from alignir.retrieval.metrics import drop_self_hits, self_hits_apply

            run_bm25 = bm25_run(_indexed_corpus(searcher.index, data.corpus), data.queries, k=top, show_progress=progress)
            # the bm25s anchor is "bm25" unless the index's own bm25 leg already is
            name = "bm25s" if "bm25" in out["runs"] else "bm25"
            runs_bm25 = {name: drop_self_hits(run_bm25) if self_hits_apply(data.name) else run_bm25}
            out["metrics"].update(evaluate_runs(data.qrels, runs_bm25))
            out["runs"].update(runs_bm25)
        if run is not None:
            for mode in out["runs"]:
                path = run if len(out["runs"]) == 1 else run.with_name(f"{run.stem}.{mode}{run.suffix}")
                write_trec(out["runs"][mode], path, tag=f"alignir-{mode}")
                typer.secho(f"run written: {path}", err=True)
        result = {"dataset": data.name, "split": split, "index": str(index), "queries": len(data.queries),
                  "metrics": out["metrics"], "seconds": out["seconds"]}
        if searcher.index.passages is not None:
            result["passages"] = {**searcher.index.manifest.get("build", {}).get("passages", {}),
                                  "aggregate": searcher.passage_agg}
        # the fusion plan each mode ran: rule, weights, gate, calibration and where each came from
        result["plan"] = {m: searcher.plan(m, fusion=fusion, alpha=alpha, weights=weights).to_dict()
                          for m in modes}
    finally:
        searcher.close()  # Milvus: the connection (Milvus Lite keeps its .db open until closed)
    return result


def _print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from alignir.retrieval.metrics import DEFAULT_METRICS

    table = Table(title=f"{result['dataset']} ({result['split']}, {result['queries']} queries)")
    table.add_column("method")
    for m in DEFAULT_METRICS:
        table.add_column(m, justify="right")
    for mode, vals in result["metrics"].items():
        table.add_row(mode, *(f"{vals[m]:.4f}" for m in DEFAULT_METRICS))
    Console().print(table)


def eval_cmd(
    index: Path = typer.Option(..., "--index", "-i", help="Index folder (alignir build-index)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="BEIR folder, or a name found under $ALIGNIR_DATA."),
    split: str = typer.Option("test", help="qrels split."),
    mode: str = typer.Option("all", help=MODES_HELP),
    run: Optional[Path] = typer.Option(None, help="Write a TREC run here (one file per mode: NAME.MODE.trec)."),
    top: int = typer.Option(100, help="Hits per query in the run (recall@100 needs 100)."),
    instruction: Optional[str] = typer.Option(None, help="Query instruction (task name or text)."),
    fusion: Optional[str] = typer.Option(None, help=FUSION_HELP),
    alpha: Optional[float] = typer.Option(None, help="Weight of the dense side in fusion."),
    weights: Optional[str] = typer.Option(None, help=WEIGHTS_HELP),
    passage_agg: Optional[str] = typer.Option(None, "--passage-agg", help=PASSAGE_AGG_HELP),
    bm25: bool = typer.Option(False, help="Add a BM25 (bm25s) row from the same harness, over the index's live documents (named "
                              "bm25s when the index's own bm25 mode is evaluated too)."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object."),
    backend: str = BACKEND_OPT,
    uri: Optional[str] = URI_OPT,
    collection: Optional[str] = COLLECTION_OPT,
    device: str = DEVICE_OPT,
    runtime: Optional[str] = RUNTIME_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """nDCG@10 (headline), recall@100, MRR@10 and MAP of an index on a BEIR split, via
    pytrec_eval.

    On ArguAna/Quora, hits whose doc id equals the query id are dropped, as
    BEIR and Pyserini do. --backend milvus searches the collection exported from the index."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.encoders.runtimes import check_runtime
        from alignir.retrieval.searcher import check_search_options

        runtime = check_runtime(runtime)
        opts = backend_options(backend, uri, collection)
        leg_weights = parse_weights(weights)
        modes = _modes(mode)
        for m in modes:  # every option checked before the model loads
            check_search_options(m, fusion=fusion, alpha=alpha, passage_agg=passage_agg,
                                 weights=leg_weights if len(modes) == 1 and "+" in m else None)
        result = _evaluate(index, dataset, split, mode, run, top, instruction, fusion,
                           alpha, bm25, progress=not as_json, weights=leg_weights, backend=opts,
                           device=device, passage_agg=passage_agg, runtime=runtime)
        if opts:
            from alignir.retrieval.milvus import default_collection_name

            result["backend"] = {"name": "milvus", "uri": uri,
                                 "collection": collection or default_collection_name(index)}
        echo_json(result) if as_json else _print_table(result)


def beir_cmd(
    dataset: str = typer.Argument(..., help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a dataset name "
                                  "(looked up in $ALIGNIR_DATA; see --download)."),
    download: bool = typer.Option(False, "--download", help="Fetch a dataset name found nowhere as BEIR's zip "
                                  "(into the first $ALIGNIR_DATA folder, else $ALIGNIR_CACHE/beir)."),
    index: Optional[Path] = typer.Option(None, "--index", "-i", help="Index folder (default: indexes/NAME-MODEL-EMBEDDER, plus a tag per non-default encoder option)."),
    model: str = typer.Option(DEFAULT_MODEL, help="Model spec (see build-index)."),
    embedder: str = typer.Option("prompteol", help="Embedder family."),
    adapter: Optional[Path] = typer.Option(None, help="Trained LoRA adapter folder (alignir train)."),
    embedder_option: list[str] = typer.Option([], "--embedder-option", help=EMBEDDER_OPTION_HELP),
    lm_head_from: Optional[str] = typer.Option(None, "--lm-head-from", help=LM_HEAD_HELP),
    instruction: Optional[str] = typer.Option(None, help="Default query instruction (task name, e.g. scifact, "
                                              "or text), stored with the index as build-index does."),
    split: str = typer.Option("test", help="qrels split."),
    mode: str = typer.Option("all", help=MODES_HELP),
    run: Optional[Path] = typer.Option(None, help="Write TREC runs here."),
    max_length: int = typer.Option(512, help="Truncate prompts to this many tokens."),
    passages: str = typer.Option("auto", help=PASSAGES_HELP),
    passage_agg: Optional[str] = typer.Option(None, "--passage-agg", help=PASSAGE_AGG_HELP),
    bm25: bool = typer.Option(True, help="Add the BM25 (bm25s) anchor row."),
    lexical: bool = typer.Option(True, "--lexical/--no-lexical", help="Store the BM25 lexical leg "
                                 "in the index (the bm25 modes)."),
    fusion: Optional[str] = typer.Option(None, help=FUSION_HELP),
    weights: Optional[str] = typer.Option(None, help=WEIGHTS_HELP),
    as_json: bool = typer.Option(False, "--json"),
    cache_dir: Optional[Path] = typer.Option(None, help="Embedding cache folder (default $ALIGNIR_CACHE/embeddings)."),
    precision: str = typer.Option("fp32", help=PRECISION_HELP),
    runtime: Optional[str] = RUNTIME_OPT,
    text_form: Optional[str] = TEXT_FORM_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Build an index over a BEIR folder with the default model, then evaluate it: the
    one-command benchmark. The index is kept (re-running reuses the cached encodings)."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.index.passages import parse_aggregation
        from alignir.retrieval.beir import resolve_dataset
        from alignir.retrieval.config import PassageConfig
        from alignir.retrieval.indexer import build_index

        _modes(mode)  # a bad --mode, --fusion, --weights or --passages fails before the build
        leg_weights = parse_weights(weights)
        passage_cfg = PassageConfig.parse(passages)
        if passage_agg is not None:
            parse_aggregation(passage_agg)
        if fusion is not None:
            from alignir.retrieval.config import FusionConfig

            FusionConfig(method=fusion)
        family_options = embedder_options(embedder_option)
        folder = resolve_dataset(dataset, download=download)
        from alignir.encoders.runtimes import check_runtime
        from alignir.encoders.quantize import check_precision

        from alignir.encoders.text_form import check_text_form

        precision = check_precision(precision)
        runtime = check_runtime(runtime)
        text_form = None if text_form is None else check_text_form(text_form)
        tag = embedder if adapter is None else f"{embedder}-{Path(adapter).name}"
        tag += "".join(f"-{key}{value}" for key, value in sorted(family_options.items()))
        tag += "" if instruction is None else "-instr-" + (instruction if instruction.isidentifier() else
                                                         hashlib.sha256(instruction.encode()).hexdigest()[:8])
        tag += "" if lm_head_from is None else f"-head-{Path(lm_head_from).name}"
        tag += "" if precision == "fp32" else f"-{precision}"
        tag += "" if max_length == 512 else f"-len{max_length}"
        tag += "" if text_form in (None, "auto") else f"-text{text_form}"
        tag += "" if passage_cfg.split == "auto" and passage_cfg.window is None else (
            "-nopassages" if passage_cfg.split == "off" else f"-p{passage_cfg.window}-{passage_cfg.stride}")
        target = index or Path("indexes") / f"{folder.name}-{model.replace('/', '_')}-{tag}"
        options: dict = {**family_options, "max_length": max_length}
        if adapter is not None:
            options["adapter"] = str(adapter)
        if instruction is not None:
            options["instruction"] = instruction
        if lm_head_from is not None:  # moves into the model spec (encoders.shipped.resolve_shipped)
            options["lm_head_from"] = lm_head_from
        if text_form is not None:
            options["text_form"] = text_form
        build_index(folder, target, model=model, embedder=embedder, cache_dir=cache_dir,
                    embedder_options=options, lexical=lexical, precision=precision, passages=passage_cfg,
                    runtime=runtime, on_stage=lambda s: typer.secho(f"• {s}", err=True))
        result = _evaluate(target, str(folder), split, mode, run, 100, None, fusion, None,
                           bm25, progress=not as_json, weights=leg_weights, passage_agg=passage_agg,
                           runtime=runtime)
        echo_json(result) if as_json else _print_table(result)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("beir")(beir_cmd)
