"""Mine hard negatives with a trained encoder: a pairs file for ``alignir train infonce --data FILE``.

The corpus of a BEIR folder is embedded with the encoder (``alignir.Encoder``: a shipped or
registered model, optionally read through a LoRA adapter of ``alignir train``) through the
embedding cache, so an index built with the same encoder, or an earlier mining run, has already
paid for it. Each judged query of ``--split`` is searched by cosine (exact, FAISS flat: the score
InfoNCE trains); its negatives are the documents of the top ``--depth`` ranks that are not judged
relevant to the query's text, the first ``--skip`` of them left out (the top non-relevant
documents are often unjudged positives), then the next ``--per-query``. The pairs are those of the
folder path of the trainer (``encoders.train.data.judged_split``): one per judged (query text,
document), each carrying the texts of every document judged relevant to its query (so none is an
in-batch negative of it), and no pair from a query whose text is also a test query (SciFact's
train split repeats two). Rows also name their ids (``query_id``, ``positive_id``,
``negative_ids``); the trainer reads the texts.

    python scripts/mine_negatives.py --model smollm2-135m --adapter runs/stage1 \\
        --data datasets/scifact --split train --out runs/mined.jsonl --depth 30 --skip 3 --per-query 4
    alignir train infonce --data runs/mined.jsonl --init-adapter runs/stage1 --out runs/stage2
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from alignir.encoders.train.data import judged_split, triple_row
from alignir.encoders.train.mix import FORBIDDEN_SPLITS
from alignir.errors import AlignirError, InvalidInputError


def check_depths(depth: int, skip: int, per_query: int) -> None:
    """``--depth`` >= 1, ``--skip`` >= 0, ``--per-query`` >= 1, and skip + per-query within depth."""
    if depth < 1 or skip < 0 or per_query < 1:
        raise InvalidInputError(f"need --depth >= 1, --skip >= 0 and --per-query >= 1, got {depth}, {skip}, {per_query}")
    if skip + per_query > depth:
        raise InvalidInputError(f"--skip {skip} + --per-query {per_query} exceeds --depth {depth}: the negatives "
                                f"are taken from the top {depth} ranks")


def mine(folder: str | Path, split: str, encoder: Any, depth: int = 30, skip: int = 3, per_query: int = 4,
         progress: bool = False) -> list[dict[str, Any]]:
    """The triples-file rows of ``split`` of the BEIR ``folder`` with negatives mined by ``encoder``
    (an ``alignir.Encoder``): see the module's docstring."""
    from alignir.index.dense import DenseIndex

    check_depths(depth, skip, per_query)
    if split in FORBIDDEN_SPLITS:
        raise InvalidInputError(f"split {split!r} measures the product; it never trains")
    js = judged_split(folder, split)
    doc_ids = list(js.corpus)
    qids = [q for q in js.qids if q not in js.shared]  # the others give no pairs
    H = encoder.dense([js.corpus[d] for d in doc_ids], "document", progress=progress)
    Q = encoder.dense([js.queries[q] for q in qids], "query")
    index = DenseIndex.build(H, kind="flat", normalize=True, center=False)
    ranked, _ = index.search(Q, min(depth, len(doc_ids))) if qids else ([], None)
    negatives: dict[str, list[str]] = {}
    for q, row in zip(qids, ranked):
        rel = js.relevant_to(q)
        negatives[q] = [doc_ids[i] for i in row if i >= 0 and doc_ids[i] not in rel][skip:skip + per_query]
    rows = []
    for q, d, negs in js.pairs(lambda q: negatives.get(q, [])):
        rows.append({**triple_row(js.pair(q, d, negs)), "query_id": q, "positive_id": d, "negative_ids": negs})
    return rows


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """The rows as a jsonl file, written whole or not at all."""
    from alignir.io import atomic_write

    with atomic_write(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def summary(rows: list[dict[str, Any]], per_query: int) -> dict[str, Any]:
    """Counts of a mined file: pairs, queries, negatives, pairs with fewer than asked."""
    counts = [len(r["negatives"]) for r in rows]
    return {"pairs": len(rows), "queries": len({r["query_id"] for r in rows}),
            "negatives": sum(counts), "short_pairs": sum(1 for c in counts if c < per_query)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="shipped or registered name, HF folder, .gguf file or hub id")
    ap.add_argument("--adapter", default=None, help="LoRA adapter folder of `alignir train` (its base is --model)")
    ap.add_argument("--family", default=None, help="embedder family (default: the adapter's, else prompteol)")
    ap.add_argument("--data", required=True, help="BEIR folder")
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", required=True, help="the pairs file to write (.jsonl)")
    ap.add_argument("--depth", type=int, default=30, help="ranks searched per query")
    ap.add_argument("--skip", type=int, default=3, help="top non-relevant ranks left out")
    ap.add_argument("--per-query", type=int, default=4, help="negatives per query (each of its pairs)")
    ap.add_argument("--max-length", type=int, default=512, help="tokens per text (as build-index)")
    ap.add_argument("--batch-tokens", type=int, default=None)
    ap.add_argument("--instruction", default=None, help="query instruction (default: the adapter's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--cache-dir", default=None, help="embedding cache (default $ALIGNIR_CACHE/embeddings)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    try:
        check_depths(args.depth, args.skip, args.per_query)
        if not args.out.endswith(".jsonl"):
            raise InvalidInputError(f"--out must be a .jsonl file (what `alignir train --data` reads), got {args.out!r}")
        import torch

        from alignir.encoders.embedders.adapters import read_meta
        from alignir.retrieval.encoder import Encoder

        if args.threads:
            torch.set_num_threads(args.threads)
        family = args.family or (read_meta(args.adapter).get("embedder") if args.adapter else None)
        options: dict[str, Any] = {"max_length": args.max_length}
        if args.batch_tokens:
            options["batch_tokens"] = args.batch_tokens
        encoder = Encoder.from_pretrained(args.model, adapter=args.adapter, family=family, device=args.device,
                                          instruction=args.instruction, cache_dir=args.cache_dir, use_cache=True,
                                          progress=True, **options)
        rows = mine(args.data, args.split, encoder, args.depth, args.skip, args.per_query, progress=True)
        write_rows(args.out, rows)
    except AlignirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, **summary(rows, args.per_query)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
