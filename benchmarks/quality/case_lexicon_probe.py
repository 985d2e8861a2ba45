"""What a fold of capitals cannot restore, and what the index's word forms restore of it.

``text_form="auto"`` reads a run of capitals in sentence case (encoders.text_form). A query in
capitals then loses the case of its acronyms and names ("SIDS", "PrP", "Caenorhabditis"), which
the natural-case documents keep. An index built with ``text_form="auto"`` keeps how its corpus
writes each word (encoders.word_forms), and the searcher reads a query's runs of capitals
through those forms. This benchmark measures, on one collection with its natural corpus and its
queries in capitals (the text-form benchmark's ``queries-capitals`` setting):

- word agreement: the share of the queries' words whose case, as the LLM would read them, equals
  the case the query was written in;
- nDCG@10 of each leg and of the default three legs, with the queries read three ways: as
  written (``natural``), in capitals read by the fold alone (``capitals folded``: the searcher's
  ``word_forms`` set to None) and in capitals read through the index's word forms
  (``capitals lexicon``: what a search does).

The index is the natural corpus's own, built through the product with the default model.

Result file: benchmarks/results/case_lexicon_probe.json (rows merged by collection). With the
text-form benchmark's embedding cache (``--work``/cache) the build encodes nothing:

    nice -n 10 python -m benchmarks.quality.case_lexicon_probe --collection scifact
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Callable

from benchmarks.common import DATASETS, replace_rows

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "case_lexicon_probe.json"
WORK = Path("/work/scratch/text_form")
MODES = ("bm25", "dense", "sparse", "dense+sparse+bm25")


def word_agreement(queries: list[str], read: Callable[[str], str]) -> float:
    """Share of the words of ``queries`` that ``read`` of the queries in capitals writes as the query did."""
    from alignir.encoders.text_form import WORD

    same = total = 0
    for q in queries:
        for written, read_back in zip(WORD.findall(q), WORD.findall(read(q.upper()))):
            total += 1
            same += written == read_back
    return round(same / max(1, total), 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default="scifact")
    ap.add_argument("--data", default=str(DATASETS))
    ap.add_argument("--work", default=str(WORK), help="folder of the embedding cache (cache/) and the index")
    ap.add_argument("--out", default=str(RESULT))
    args = ap.parse_args(argv)

    from alignir.encoders.text_form import fold_capitals
    from alignir.encoders.word_forms import WordForms
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import evaluate_runs, run_queries
    from alignir.index.store import open_index
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    folder = Path(args.data) / args.collection
    ds = load_beir(folder)
    index = Path(args.work) / "indexes" / f"{args.collection}-natural-auto-probe"
    t0 = time.perf_counter()
    build_index(folder, index, cache_dir=Path(args.work) / "cache", text_form="auto", progress=False)
    build_s = time.perf_counter() - t0
    forms = WordForms.from_arrays(open_index(index).extra)
    if forms is None:
        raise SystemExit(f"{index} keeps no word forms (built with text_form='off'?)")
    queries = list(ds.queries.values())
    best = forms.most_frequent()
    row = {"collection": args.collection, "queries": len(queries), "word_forms": len(forms),
           "words_not_lower": len(best),
           "word_agreement": {"capitals folded": word_agreement(queries, fold_capitals),
                              "capitals lexicon": word_agreement(queries, lambda t: fold_capitals(t, forms.form))},
           "ndcg@10": {}, "build_seconds": round(build_s, 1)}
    readings = {"natural": (lambda q: q, forms), "capitals folded": (str.upper, None),
                "capitals lexicon": (str.upper, forms)}
    s = Searcher.open(index)
    try:
        for name, (read, word_forms) in readings.items():
            s.word_forms = word_forms
            runs, _ = run_queries(s, {q: read(t) for q, t in ds.queries.items()}, MODES, k=100, progress=False)
            metrics = evaluate_runs(ds.qrels, runs, ("ndcg@10",))
            row["ndcg@10"][name] = {m: round(float(metrics[m]["ndcg@10"]), 4) for m in MODES}
            print(args.collection, f"{name:18s}", row["ndcg@10"][name], flush=True)
    finally:
        s.close()
    row["load_avg"] = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    row["command"] = "python -m benchmarks.quality.case_lexicon_probe " + shlex.join(sys.argv[1:] if argv is None else argv)
    replace_rows(args.out, [row], ("collection",), wrapped=True)
    print("word agreement", row["word_agreement"], "->", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
