"""Dump each leg's per-query top-k (dense, sparse, bm25) of an index for a BEIR split, so fusion
rules can be compared offline (benchmarks/fusion_rules.py) without encoding again (#17 item 3).

    python benchmarks/dump_leg_lists.py ../shared/datasets/med --index indexes/med \\
        --out /work/bg/out/fusion/med-smollm2-135m.json.gz --k 1000

Writes gzipped JSON: {"dataset", "index", "model" (the index's embedder spec; its options
hold max_length), "k", "qrels", "legs": {leg: {qid: [[doc_id, score], ...] best first}}} —
lists straight from ``Searcher.leg_lists`` (the lists the fused modes fuse; they cut them to
FusionConfig.depth). A query whose words are all outside the BM25 vocabulary has an empty bm25
list, as in search.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from tqdm.auto import tqdm


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", help="BEIR folder")
    ap.add_argument("--index", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--split", default="test")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)

    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.searcher import LEGS, Searcher

    ds = load_beir(args.dataset, split=args.split)
    s = Searcher.open(args.index)
    qids = list(ds.queries)
    legs: dict[str, dict[str, list]] = {leg: {} for leg in LEGS}
    for start in tqdm(range(0, len(qids), args.batch), desc="leg lists"):
        ids = qids[start:start + args.batch]
        lists = s.leg_lists([ds.queries[q] for q in ids], LEGS, k=args.k)
        for leg in LEGS:
            for q, run in zip(ids, lists[leg]):
                items = sorted(run.items(), key=lambda kv: (-kv[1], kv[0]))
                legs[leg][q] = [[s.index.doc_ids[n], float(v)] for n, v in items]
    spec = s.index.manifest.get("embedder", {})
    out = {"dataset": ds.name, "index": str(args.index), "model": spec, "k": args.k,
           "qrels": ds.qrels, "legs": legs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(out, f)
    print(f"wrote {args.out}: {len(qids)} queries x {len(LEGS)} legs, k={args.k}")


if __name__ == "__main__":
    main()
