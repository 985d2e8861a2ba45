"""Pyserini reproduces alignir's sparse ranking from the exported files.

For a real alignir index (aligned-token vectors of a shipped LLM; built here if missing):
the product's own export (retrieval/export.py, what ``alignir export pyserini`` writes:
integer weights = round(w * scale), non-positive dropped) of the stored document vectors and
of the Searcher's query vectors (eq.15-16) is indexed and searched by Pyserini's own CLI (``--impact --encoder FILE --min-idf -1``), and compared with
alignir's SparseIndex searching the *same* integers: per query, equal score lists and equal
top-k up to ties; nDCG@10 of both runs. The float (unquantised) alignir run is reported too,
so the cost of quantisation is visible.

    nice -n 10 .venv/bin/python -m benchmarks.quality.bench_pyserini_compat \
        --dataset /work/shared/datasets/adi --index /tmp/alignir-adi

Result file: benchmarks/results/pyserini_compat.json.
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

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.quality.pyserini_support import _impact_index_job, run_pyserini_jobs  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.metrics import evaluate  # noqa: E402
from alignir.retrieval.runs import quantize, read_trec  # noqa: E402
from benchmarks.common import DATASETS  # noqa: E402


def _ranking(docs: np.ndarray, scores: np.ndarray, ids: list[str]) -> list[tuple[str, float]]:
    return [(ids[d], float(s)) for d, s in zip(docs, scores) if d >= 0 and np.isfinite(s) and s > 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=str(DATASETS / "adi"))
    ap.add_argument("--index", required=True, help="alignir index folder (built if missing)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--embedder", default="prompteol")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--scale", type=float, default=100.0, help="document (and non-binary query) weight scale")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pyserini_compat.json"))
    args = ap.parse_args()
    command = "python -m " + " ".join(shlex.quote(a) for a in ["benchmarks.quality.bench_pyserini_compat", *sys.argv[1:]])

    from alignir.index.sparse import SparseIndex
    from alignir.retrieval.searcher import Searcher

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = load_beir(args.dataset)
    if not (Path(args.index) / "manifest.json").exists():
        from alignir.retrieval.indexer import build_index

        print(f"building {args.index} ({args.model}, {args.embedder})", flush=True)
        build_index(args.dataset, args.index, model=args.model, embedder=args.embedder)
    from alignir.retrieval.export import export_documents, export_queries, stored_doc_matrix

    searcher = Searcher.open(args.index)
    stored = searcher.index
    doc_ids = list(stored.doc_ids)
    D = stored_doc_matrix(stored.sparse)
    qids = list(ds.queries)
    texts = [ds.queries[q] for q in qids]
    Q = sp.csr_matrix(searcher.encode(texts).legs["sparse"], dtype=np.float32)
    k = args.k

    # alignir on float weights (what the product serves) and on the exported integers
    f_docs, f_scores = stored.sparse.search(Q, k)
    run_float = {q: dict(_ranking(f_docs[i], f_scores[i], doc_ids)) for i, q in enumerate(qids)}
    with tempfile.TemporaryDirectory(prefix="pyserini-compat-") as tmp:
        tmp = Path(tmp)
        contents = {d: doc.contents for d, doc in ds.corpus.items()}
        info = export_documents(args.index, tmp / "coll", scale=args.scale, contents=contents)
        qinfo = export_queries(searcher, ds.queries, tmp / "queries")
        t0 = time.perf_counter()
        run_pyserini_jobs([
            _impact_index_job(tmp / "coll", tmp / "lucene", 1),
            ("pyserini.search.lucene", ["--index", tmp / "lucene", "--topics", tmp / "queries" / "topics.tsv",
                                        "--encoder", tmp / "queries" / "queries.jsonl", "--impact",
                                        "--min-idf", "-1", "--hits", k, "--output", tmp / "run.trec"]),
        ])
        pyserini_s = time.perf_counter() - t0
        pys = read_trec(tmp / "run.trec")
    q_scale = float(qinfo["scale"])
    binary = bool(Q.nnz and np.all(Q.data == 1.0))
    Dq, Qq = quantize(D, args.scale), quantize(Q, q_scale)
    i_docs, i_scores = SparseIndex.from_csr(Dq.astype(np.float32)).search(Qq.astype(np.float32), k)
    run_int = {q: _ranking(i_docs[i], i_scores[i], doc_ids) for i, q in enumerate(qids)}
    full = (Qq.astype(np.int64) @ Dq.astype(np.int64).T).toarray()

    same_scores = same_topk = 0
    pos = {d: j for j, d in enumerate(doc_ids)}
    mismatches = []
    for i, q in enumerate(qids):
        got = sorted(pys.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        mine = run_int[q]
        scores_equal = [s for _, s in got] == [s for _, s in mine]

        exact = all(full[i, pos[d]] == s for d, s in got)
        cut = mine[-1][1] if mine else None
        strict_mine = {d for d, s in mine if cut is not None and s > cut}
        topk_ok = scores_equal and exact and strict_mine <= {d for d, _ in got}
        same_scores += scores_equal and exact
        same_topk += topk_ok
        if not topk_ok:
            mismatches.append(q)

    m = {name: evaluate(ds.qrels, run) for name, run in
         (("alignir_float", run_float), ("alignir_int", {q: dict(h) for q, h in run_int.items()}),
          ("pyserini", pys))}
    result = {
        "dataset": ds.name, "index": str(args.index), "model": args.model, "embedder": args.embedder,
        "sparse_params": stored.params, "queries": len(qids), "k": k,
        "doc_scale": args.scale, "query_scale": q_scale, "binary_queries": bool(binary),
        "export": {k_: v for k_, v in info.items() if k_ != "files"}, "query_export": qinfo,
        "queries_equal_scores": same_scores, "queries_equal_topk_up_to_ties": same_topk,
        "mismatched_queries": mismatches,
        "ndcg@10": {n: round(v["ndcg@10"], 6) for n, v in m.items()},
        "pyserini_seconds": round(pyserini_s, 1), "command": command,
    }
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
