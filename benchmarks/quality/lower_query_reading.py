"""Would a query typed all in lower case read better with its case restored? Two readings
measured against reading it as typed.

``text_form="auto"`` reads runs of capitals in sentence case, through the corpus's word forms
(encoders.text_form, encoders.word_forms), and leaves text without capitals as it is. Queries
typed in lower case are common (MED's and Cranfield's are all so; the text-form benchmark's
``both-lower`` setting lower-cases every query and drops its punctuation), and the transformer
was trained on queries that start with a capital. Two readings of a query without any upper-case
letter, for the model legs only (BM25 does not see case):

- ``sentence case``: the first letter of each sentence a capital (what the fold gives a run of
  capitals at a sentence start);
- ``fewest tokens``: each word in the form of lower case, first letter capital or capitals that
  the model's tokenizer cuts into the fewest pieces, lower case on a tie (a truecasing that needs
  no corpus: "dna" -> "DNA" when " DNA" is one token and " dna" two).

Each is scored by nDCG@10 of BM25, dense, sparse and the default three legs on the text-form
benchmark's index of that corpus form (``--work``/indexes/COLLECTION-FORM-auto, built through the
product when missing, from the embedding cache in ``--work``/cache), with the same queries. A
row per collection, setting and reading; ``changed`` counts the queries the reading changes.

Result file: benchmarks/results/lower_query_reading.json (rows merged by collection, setting and reading):

    nice -n 10 python -m benchmarks.quality.lower_query_reading --collection scifact --settings both-lower
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import DATASETS, replace_rows
from benchmarks.quality.text_form import SETTINGS, WORK, load_avg, write_variant

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "lower_query_reading.json"
MODES = ("bm25", "dense", "sparse", "dense+sparse+bm25")


def has_capital(text: str) -> bool:
    return any(ch.isupper() for ch in text)


def sentence_case(text: str) -> str:
    """``text`` with the first letter of each sentence upper case, when it has no capital at all."""
    from alignir.encoders.text_form import WORD, _upper_first, sentence_start

    if has_capital(text):
        return text
    out = list(text)
    for m in WORD.finditer(text):
        if sentence_start(text, m.start()):
            out[m.start():m.end()] = _upper_first(m.group())
    return "".join(out)


def fewest_tokens(tokenizer: Any) -> Callable[[str], str]:
    """A reading that writes each word of a text without capitals in the form (lower, first letter
    capital, capitals) the tokenizer cuts into the fewest pieces after a space; lower case on a tie."""
    from alignir.encoders.text_form import WORD, _upper_first

    memo: dict[str, str] = {}

    def best(word: str) -> str:
        if word not in memo:  # min keeps the first of equals: lower case wins a tie
            memo[word] = min((word, _upper_first(word), word.upper()),
                             key=lambda form: len(tokenizer(" " + form, add_special_tokens=False)["input_ids"]))
        return memo[word]

    def read(text: str) -> str:
        if has_capital(text):
            return text
        return WORD.sub(lambda m: best(m.group()), text)

    return read


def score(collection: str, setting: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per reading of the queries of ``collection`` in ``setting``."""
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import evaluate_runs, run_queries
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    corpus_form, query_form = SETTINGS[setting]
    work = Path(args.work)
    folder = write_variant(Path(args.data) / collection, work / "data" / collection / setting, corpus_form, query_form)
    index = work / "indexes" / f"{collection}-{corpus_form}-auto"
    built = not (index / "manifest.json").exists()
    if built:
        build_index(folder, index, cache_dir=work / "cache", text_form="auto", progress=False)
    ds = load_beir(folder)
    without = sum(not has_capital(q) for q in ds.queries.values())
    s = Searcher.open(index)
    rows: list[dict[str, Any]] = []
    try:
        readings = {"as given": lambda q: q, "sentence case": sentence_case,
                    "fewest tokens": fewest_tokens(s.embedder.tokenizer)}
        for name, read in readings.items():
            queries = {q: read(t) for q, t in ds.queries.items()}
            runs, _ = run_queries(s, queries, MODES, k=100, progress=False)
            metrics = evaluate_runs(ds.qrels, runs, ("ndcg@10",))
            ndcg = {m: round(float(metrics[m]["ndcg@10"]), 4) for m in MODES}
            rows.append({"collection": collection, "setting": setting, "reading": name, "queries": len(ds.queries),
                         "queries_without_capitals": without,
                         "changed": sum(queries[q] != ds.queries[q] for q in queries),
                         "ndcg@10": ndcg, "index": index.name, "index_built": built,
                         "load_avg": load_avg()})
            print(collection, setting, f"{name:14s}", rows[-1]["changed"], ndcg, flush=True)
    finally:
        s.close()
    given = rows[0]["ndcg@10"]
    for row in rows:
        row["delta_vs_as_given"] = {m: round(row["ndcg@10"][m] - given[m], 4) for m in MODES}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default="scifact")
    ap.add_argument("--settings", default="original,both-lower", help="comma-separated text-form settings")
    ap.add_argument("--data", default=str(DATASETS))
    ap.add_argument("--work", default=str(WORK), help="the text-form benchmark's folder: cache/, indexes/, data/")
    ap.add_argument("--out", default=str(RESULT))
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting: {', '.join(unknown)}")
    command = "python -m benchmarks.quality.lower_query_reading " + shlex.join(sys.argv[1:] if argv is None else argv)
    for setting in settings:
        rows = score(args.collection, setting, args)
        for row in rows:
            row["command"] = command
        replace_rows(args.out, rows, ("collection", "setting", "reading"), wrapped=True)
    print("->", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
