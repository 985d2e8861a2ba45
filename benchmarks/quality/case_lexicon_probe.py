"""What a fold of capitals cannot restore, and what a lexicon of the corpus's own word forms would.

``text_form="auto"`` reads a run of capitals in sentence case (encoders.text_form). A query in
capitals then loses the case of its acronyms and names ("SIDS", "PrP", "Caenorhabditis"), which
the natural-case documents keep. This probe measures, on one collection with its natural corpus
and its queries in capitals (the text-form benchmark's ``queries-capitals`` setting):

- word agreement: the share of the queries' words whose case, as the LLM would read them, equals
  the case the query was written in;
- nDCG@10 of each leg and of the default three legs, with the queries read three ways: as
  written (``natural``), in capitals folded by the shipped rule (``capitals folded``), and in
  capitals with every word of a run given its corpus form (``capitals lexicon``).

The lexicon: for each word (lower-cased), the form it takes most often in the corpus's titles and
texts, counting only words outside runs of capitals and not at a sentence start (where case says
nothing); at a sentence start the form's first letter is a capital. Only the queries are read
through it; the index is the natural corpus's own, built through the product with the default
model and ``text_form="auto"``. It is a probe, not a product setting: the result says what an
index that kept such a lexicon would gain.

Result file: benchmarks/results/case_lexicon_probe.json (rows merged by collection). With the
text-form benchmark's embedding cache (``--work``/cache) the build encodes nothing:

    nice -n 10 python -m benchmarks.quality.case_lexicon_probe --collection scifact
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable

from benchmarks.common import DATASETS, replace_rows

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "case_lexicon_probe.json"
WORK = Path("/work/scratch/text_form")
MODES = ("bm25", "dense", "sparse", "dense+sparse+bm25")


def corpus_lexicon(texts: list[str]) -> dict[str, str]:
    """Lower-cased word -> its most frequent form among the words of ``texts`` that stand outside
    runs of capitals and not at a sentence start (ties: the form seen first)."""
    from alignir.encoders.text_form import WORD, capital_runs, sentence_start

    forms: dict[str, Counter] = defaultdict(Counter)
    for text in texts:
        runs = capital_runs(text)
        for m in WORD.finditer(text):
            a = m.start()
            if any(s <= a < e for s, e in runs) or sentence_start(text, a):
                continue
            forms[m.group().lower()][m.group()] += 1
    return {w: c.most_common(1)[0][0] for w, c in forms.items()}


def read_with_lexicon(text: str, lexicon: dict[str, str]) -> str:
    """``text`` with its runs of capitals folded (the shipped rule), then each word of a run that
    the lexicon knows written in the lexicon's form (a capital first letter at a sentence start)."""
    from alignir.encoders.text_form import WORD, capital_runs, fold_capitals, sentence_start

    out = list(fold_capitals(text))
    for start, end in capital_runs(text):
        for m in WORD.finditer(text, start, end):
            a, b = m.span()
            form = lexicon.get(m.group().lower())
            if form is None or len(form) != b - a:
                continue
            if sentence_start(text, a):
                form = form[:1].upper() + form[1:]
            out[a:b] = form
    return "".join(out)


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
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import evaluate_runs, run_queries
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    folder = Path(args.data) / args.collection
    ds = load_beir(folder)
    index = Path(args.work) / "indexes" / f"{args.collection}-natural-auto-probe"
    t0 = time.perf_counter()
    build_index(folder, index, cache_dir=Path(args.work) / "cache", text_form="auto", progress=False)
    build_s = time.perf_counter() - t0
    lexicon = corpus_lexicon([t for doc in ds.corpus.values() for t in (doc.title, doc.text)])
    readings: dict[str, Callable[[str], str]] = {
        "natural": lambda q: q,
        "capitals folded": lambda q: q.upper(),  # the searcher's own fold reads them
        "capitals lexicon": lambda q: read_with_lexicon(q.upper(), lexicon),
    }
    queries = list(ds.queries.values())
    row = {"collection": args.collection, "queries": len(queries), "lexicon_words": len(lexicon),
           "lexicon_words_not_lower": sum(w != f for w, f in lexicon.items()),
           "word_agreement": {"capitals folded": word_agreement(queries, fold_capitals),
                              "capitals lexicon": word_agreement(queries, lambda t: read_with_lexicon(t, lexicon))},
           "ndcg@10": {}, "build_seconds": round(build_s, 1)}
    s = Searcher.open(index)
    try:
        for name, read in readings.items():
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
