"""Pseudo-relevance feedback on the dense leg (Rocchio): does moving each query's dense vector
towards its first-round top documents lift the product's three legs?

For each index (built by ``alignir beir`` with the default model), the queries are searched once
with the product's default three-leg fusion; the dense vectors of the top ``fb_docs`` fused hits
(as the index compares them: centred and normalised) are averaged, and the query's compared
vector becomes ``normalise(T(q) + beta * mean(T(d_i)))`` (Rocchio with alpha = 1). The dense leg is
searched again with it and fused with the unchanged sparse and BM25 lists by the same fusion
plan. No model pass is added: the feedback documents' vectors are in the index. Settings are
not tuned per collection: every (fb_docs, beta) of the grid is reported on every collection.

    .venv/bin/python -m benchmarks.archive.dense_prf --index med=/work/indexes/med-v3 --data med=../shared/datasets/med \\
        --out benchmarks/results/dense_prf.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

MODE = "dense+sparse+bm25"


def _raw_for(stored_dense, compared: np.ndarray) -> np.ndarray:
    """Raw query vectors whose compared form (the index's transform, then its normalisation) is
    ``compared`` (unit rows): the transform is a centring only, so adding the mean back inverts it."""
    t = stored_dense.transform
    if t.matrix is not None:
        raise SystemExit("a whitened dense index: the benchmark inverts a centring only")
    return compared + (t.mean if t.mean is not None else 0.0)


def run(index: str, data: str, grid: list[tuple[int, float]]) -> list[dict]:
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.searcher import QueryBatch, Searcher

    s = Searcher.open(index)
    beir = load_beir(data)
    qids = [q for q in beir.qrels if q in beir.queries]
    queries = [beir.queries[q] for q in qids]
    batch = s.encode(queries)
    dense = s.index.dense
    if not dense.params.normalize:
        raise SystemExit("the benchmark expects a normalised (cosine) dense index")

    def metrics(hits) -> dict:
        from alignir.retrieval.metrics import evaluate

        run_ = {q: {h.id: float(h.score) for h in hs} for q, hs in zip(qids, hits)}
        m = evaluate(beir.qrels, run_, ["ndcg@10", "recall@100"])
        return {"ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4)}

    base = s.batch_search(queries, k=100, mode=MODE, encoded=batch)
    rows = [{"dataset": Path(data).name, "fb_docs": 0, "beta": 0.0, **metrics(base)}]
    dense_only = s.batch_search(queries, k=100, mode="dense", encoded=batch)
    rows[0]["dense_ndcg@10"] = metrics(dense_only)["ndcg@10"]
    qt = dense.transform_queries(batch.legs["dense"])
    for fb, beta in grid:
        top = np.array([[h.doc_number for h in hs[:fb]] for hs in base])
        fbv = dense.reconstruct(top.reshape(-1)).reshape(len(queries), fb, -1).mean(axis=1)
        new = qt + beta * fbv
        new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        legs = dict(batch.legs)
        legs["dense"] = _raw_for(dense, new).astype(np.float32)
        moved = QueryBatch(legs=legs)
        hits = s.batch_search(queries, k=100, mode=MODE, encoded=moved)
        row = {"dataset": Path(data).name, "fb_docs": fb, "beta": beta, **metrics(hits)}
        row["dense_ndcg@10"] = metrics(s.batch_search(queries, k=100, mode="dense", encoded=moved))["ndcg@10"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", action="append", required=True, help="NAME=INDEX_FOLDER")
    ap.add_argument("--data", action="append", required=True, help="NAME=BEIR_FOLDER")
    ap.add_argument("--fb-docs", default="3,5")
    ap.add_argument("--beta", default="0.25,0.5,1.0")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    data = dict(x.split("=", 1) for x in args.data)
    grid = [(int(f), float(b)) for f in args.fb_docs.split(",") for b in args.beta.split(",")]
    rows = []
    for spec in args.index:
        name, folder = spec.split("=", 1)
        rows += run(folder, data[name], grid)
    out = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "mode": MODE,
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
