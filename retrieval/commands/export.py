"""`alignir export pyserini | pyserini-queries`: files Pyserini/Anserini can index and search;
`alignir export milvus`: the index as a Milvus collection (retrieval/milvus.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from alignir.errors import InvalidInputError
from alignir.retrieval.commands.common import echo_json, setup_logging, user_errors

export_app = typer.Typer(help="Export an index for other engines (Pyserini/Anserini impact search, Milvus).",
                         no_args_is_help=True)


@export_app.command("pyserini")
def export_pyserini_cmd(
    index: Path = typer.Option(..., "--index", "-i", help="Index folder."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder for docs-*.jsonl."),
    scale: float = typer.Option(100.0, help="Integer weight = round(weight × scale); "
                                "weights that round to ≤ 0 are dropped (reported)."),
    corpus: Optional[Path] = typer.Option(None, help="BEIR folder or corpus .jsonl to fill `contents`."),
) -> None:
    """Write the documents as a Pyserini JsonVectorCollection (an impact index's input).

    Then index it, e.g.: python -m pyserini.index.lucene --collection JsonVectorCollection
    --input OUT --index LUCENE_DIR --generator DefaultLuceneDocumentGenerator --impact --pretokenized"""
    setup_logging()
    with user_errors():
        from alignir.retrieval.export import export_documents

        contents = None
        if corpus is not None:
            from alignir.retrieval.indexer import read_source

            contents = {d: doc.contents for d, doc in read_source(corpus).items()}
        echo_json(export_documents(index, out, scale=scale, contents=contents))


@export_app.command("pyserini-queries")
def export_queries_cmd(
    index: Path = typer.Option(..., "--index", "-i", help="Index folder (its query encoder is used)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="BEIR folder (queries of --split) or a queries .jsonl."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: queries.jsonl + topics.tsv."),
    split: str = typer.Option("test", help="qrels split selecting the queries of a BEIR folder."),
    scale: Optional[float] = typer.Option(None, help="Query weight scale (default 1 for binary weights)."),
    instruction: Optional[str] = typer.Option(None, help="Query instruction (task name or text)."),
) -> None:
    """Write the query vectors (and topics) for a Pyserini impact search of an exported index.

    Then search, e.g.: python -m pyserini.search.lucene --index LUCENE_DIR --topics
    OUT/topics.tsv --encoder OUT/queries.jsonl --impact --min-idf -1 --output run.trec"""
    setup_logging()
    with user_errors():
        from alignir.retrieval.beir import load_beir, read_queries
        from alignir.retrieval.export import export_queries
        from alignir.retrieval.searcher import Searcher

        src = Path(dataset)
        queries = read_queries(src) if src.is_file() else load_beir(dataset, split=split).queries
        searcher = Searcher.open(index, instruction=instruction)
        echo_json(export_queries(searcher, queries, out, scale=scale))


URI_HELP = ("Milvus: a local path ending in .db (embedded Milvus Lite) or http(s)://host:port (a server "
            "or cluster; credentials from $MILVUS_TOKEN or $MILVUS_USER + $MILVUS_PASSWORD).")


@export_app.command("milvus")
def export_milvus_cmd(
    index: Path = typer.Option(..., "--index", "-i", help="Index folder."),
    uri: str = typer.Option(..., "--uri", help=URI_HELP),
    collection: Optional[str] = typer.Option(None, help="Collection name (default: alignir_ + the "
                                             "index folder's name + _ + 8 hex digits of its path's sha256)."),
    recreate: bool = typer.Option(False, "--recreate", help="Drop this folder's collection first and export "
                                  "everything again (default: resume, inserting only missing documents); a "
                                  "collection another folder exported is never dropped."),
    store_text: bool = typer.Option(False, "--store-text", help="Also store each document's title and "
                                    "text (from --corpus)."),
    corpus: Optional[Path] = typer.Option(None, help="BEIR folder or corpus .jsonl with the texts "
                                          "(default with --store-text: the corpus the index was built from)."),
    batch_size: int = typer.Option(256, help="Documents per insert."),
    shards: Optional[int] = typer.Option(None, help="Shards of a new collection (Milvus num_shards, fixed "
                                         "at creation; default: the server's). A cluster spreads inserts over them."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Copy an index into a Milvus collection: dense vectors as the index scores them, the
    aligned-token and BM25 weights as two exact sparse fields, the index's manifest as a
    collection property. Re-running resumes an interrupted export."""
    setup_logging(verbose)
    with user_errors(verbose):
        from alignir.retrieval.milvus import export_index

        contents = None
        if store_text:
            contents = _texts(index, corpus)
        elif corpus is not None:
            raise InvalidInputError("--corpus is only read with --store-text")
        echo_json(export_index(index, uri, collection, recreate=recreate, contents=contents,
                               batch_size=batch_size, shards=shards))


def _texts(index: Path, corpus: Optional[Path]) -> dict[str, tuple[str, str]]:
    """doc id -> (title, text) from ``corpus`` or the source recorded in the index's manifest."""
    from alignir.index.manifest_io import read_manifest
    from alignir.retrieval.indexer import read_source

    if corpus is None:
        source = read_manifest(index).get("build", {}).get("source")
        if not source or not Path(source).exists():
            raise InvalidInputError(f"{index}: the corpus it was built from is not recorded or gone "
                                    f"({source}); give --corpus")
        corpus = Path(source)
    return {d: (doc.title, doc.text) for d, doc in read_source(corpus).items()}


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
