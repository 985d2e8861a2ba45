"""Dump each leg's per-query top-k (dense, sparse, bm25) of an index for a BEIR split, so fusion
rules can be compared offline (benchmarks/defaults/fusion_rules.py) without encoding again.

    python -m benchmarks.quality.dump_leg_lists ../shared/datasets/med --index indexes/med \\
        --out /work/bg/out/fusion/med-smollm2-135m.json.gz --k 1000

Writes gzipped JSON: {"dataset", "index", "model" (the index's embedder spec; its options
hold max_length), "k", "qrels", "legs": {leg: {qid: [[doc_id, score], ...] best first}}} —
lists straight from ``Searcher.leg_lists`` (the lists the fused modes fuse; they cut them to
FusionConfig.depth). A query whose words are all outside the BM25 vocabulary has an empty bm25
list, as in search.

Result file: none under results/ (the leg-list dump goes to --out, outside git; fusion_rules.py and
hybrid_alpha.py read it).
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
    ap.add_argument("--pseudo-only", action="store_true",
                    help="only (re)compute the pseudo-query lists of an existing dump at --out")
    args = ap.parse_args(argv)

    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.searcher import LEGS, Searcher

    ds = load_beir(args.dataset, split=args.split)
    s = Searcher.open(args.index)
    if args.pseudo_only:
        with gzip.open(args.out, "rt") as f:
            out = json.load(f)
        out.update(_pseudo(s, ds))
        with gzip.open(args.out, "wt") as f:
            json.dump(out, f)
        print(f"added {len(out['pseudo']['queries'])} pseudo-query lists to {args.out}")
        return
    qids = list(ds.queries)
    legs: dict[str, dict[str, list]] = {leg: {} for leg in LEGS}
    for start in tqdm(range(0, len(qids), args.batch), desc="leg lists"):
        ids = qids[start:start + args.batch]
        lists = s.leg_lists([ds.queries[q] for q in ids], LEGS, k=args.k)
        for leg in LEGS:
            for q, run in zip(ids, lists[leg]):
                legs[leg][q] = _by_id(s, run)
    spec = s.index.manifest.get("embedder", {})
    out = {"dataset": ds.name, "index": str(args.index), "model": spec, "k": args.k,
           "qrels": ds.qrels, "legs": legs, **_pseudo(s, ds)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(out, f)
    print(f"wrote {args.out}: {len(qids)} queries x {len(LEGS)} legs, k={args.k}")


def _pseudo(s, ds) -> dict:
    """The index's calibration pseudo-queries (retrieval/calibration.py, from the corpus texts in
    index order) and every leg's lists for them, cut to the calibration's depth — what the
    "calibrated" rule of fusion_rules.py measures (also on shuffled legs) — and the collection size."""
    from alignir.retrieval.calibration import MEASURE, pseudo_queries

    texts = [ds.corpus[d].contents for d in s.index.doc_ids]
    queries = pseudo_queries(texts)
    lists = s.leg_lists(queries, tuple(s.legs), k=MEASURE.anchor_depth)
    legs = {leg: [_by_id(s, run) for run in runs] for leg, runs in lists.items()}
    return {"pseudo": {"queries": queries, "legs": legs}, "n_docs": s.index.n_docs}


def _by_id(s, run: dict[int, float]) -> list[list]:
    """One leg list ({doc number: score}) as [[doc id, score], ...] best first (fusion.ranked)."""
    from alignir.retrieval.fusion import ranked

    return [[s.index.doc_ids[n], float(v)] for n, v in ranked(run)]


if __name__ == "__main__":
    main()
