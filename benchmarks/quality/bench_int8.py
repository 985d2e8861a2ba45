"""int8 vs fp32 encoders: retrieval quality and agreement, no timings.

For each dataset, one index per precision is built with the default model and embedder (the
embedding cache keeps the two precisions apart, so re-runs are free), then:

- nDCG@10 (and recall@100) per mode — dense, sparse, hybrid (dense+sparse), and the three-leg
  dense+sparse+bm25 — for fp32 and int8, and ``ndcg_delta_vs_fp32`` = int8 - fp32 (goal:
  |delta| <= 0.005);
- agreement of the encodings: cosine between the fp32 and int8 vector of every document and
  query (min / mean / p05), overlap of the top-20 aligned tokens of each document (the top
  entries of E_g·h, “A Text is Worth Several Tokens” eq.15; E_g stays fp32, only h moves), and
  overlap of the top-10 hits per query and mode.

These numbers do not depend on the machine's load (no timings are recorded here; encode speed
is bench_latency.py / bench_encoder_throughput.py's business, on a quiet machine).

    nice -n 10 .venv/bin/python -m benchmarks.quality.bench_int8 --datasets adi,med \\
        --work /work/bg/out/speed/int8 --out benchmarks/results/int8_quality.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from alignir.encoders.models import load_model
from alignir.encoders.shipped import SHIPPED
from alignir.index.store import open_index
from alignir.retrieval.beir import load_beir, resolve_dataset
from alignir.retrieval.evaluation import evaluate_runs, run_queries
from alignir.retrieval.indexer import build_index
from alignir.retrieval.metrics import self_hits_apply
from alignir.retrieval.searcher import Searcher

ROOT = Path(__file__).resolve().parents[2]
MODES = ("dense", "sparse", "hybrid", "dense+sparse+bm25")
PRECISIONS = ("fp32", "int8")


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.where(n > 0, n, 1.0)


def _summary(x: np.ndarray) -> dict[str, float]:
    return {"min": float(x.min()), "p05": float(np.quantile(x, 0.05)), "mean": float(x.mean())}


def _topk_tokens(H: np.ndarray, lm_head: torch.Tensor, special: np.ndarray, k: int) -> np.ndarray:
    logits = torch.from_numpy(H) @ lm_head.T
    logits[:, torch.from_numpy(special.astype(np.int64))] = -torch.inf
    return torch.topk(logits, k, dim=1).indices.numpy()


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([len(set(x) & set(y)) / len(x) for x, y in zip(a, b)])


def run_dataset(name: str, work: Path, model: str, max_length: int, log) -> dict:
    folder = resolve_dataset(name)
    data = load_beir(folder, split="test")
    shipped = SHIPPED.get(model)  # a shipped trained embedder loads its base model (+ its adapter in build_index)
    loaded = load_model(shipped.base_model if shipped else model, device="cpu")
    idx = {}
    for p in PRECISIONS:
        idx[p] = work / f"{folder.name}-{model}-{p}"
        if not (idx[p] / "manifest.json").exists():
            log(f"{name}: building the {p} index")
            t = time.perf_counter()
            build_index(folder, idx[p], model=model, loaded=loaded, precision=p, progress=False,
                        embedder_options={"max_length": max_length},
                        on_stage=lambda s: log(f"  {s}"))
            log(f"{name}: {p} index in {time.perf_counter() - t:.0f}s")
    runs, metrics, qvec = {}, {}, {}
    for p in PRECISIONS:
        s = Searcher.open(idx[p], loaded=loaded)
        runs[p], _ = run_queries(s, data.queries, MODES, k=100, progress=False,
                                 drop_self=self_hits_apply(data.name))
        metrics[p] = evaluate_runs(data.qrels, runs[p], metrics=("ndcg@10", "recall@100"))
        qvec[p] = s.embedder.encode_queries(list(data.queries.values()))
        log(f"{name} {p}: " + json.dumps({m: round(v["ndcg@10"], 4) for m, v in metrics[p].items()}))
    H = {p: np.asarray(open_index(idx[p], parts=("dense",)).dense_vectors, np.float32)
         for p in PRECISIONS}
    tok = {p: _topk_tokens(H[p], loaded.lm_head, loaded.special_ids, 20) for p in PRECISIONS}
    rows = []
    for mode in MODES:
        top = {p: [list(runs[p][mode][q])[:10] for q in data.queries] for p in PRECISIONS}
        f, i = metrics["fp32"][mode], metrics["int8"][mode]
        rows.append({
            "dataset": data.name, "mode": mode, "model": model, "max_length": max_length,
            "ndcg10_fp32": f["ndcg@10"], "ndcg10_int8": i["ndcg@10"],
            "ndcg_delta_vs_fp32": i["ndcg@10"] - f["ndcg@10"],
            "recall100_fp32": f["recall@100"], "recall100_int8": i["recall@100"],
            "top10_overlap_mean": float(np.mean([len(set(a) & set(b)) / max(1, len(a))
                                                 for a, b in zip(top["fp32"], top["int8"])])),
        })
    agreement = {
        "dataset": data.name, "docs": int(H["fp32"].shape[0]), "queries": len(data.queries),
        "doc_cosine": _summary(_cos(H["fp32"], H["int8"])),
        "query_cosine": _summary(_cos(qvec["fp32"], qvec["int8"])),
        "doc_top20_aligned_token_overlap": _summary(_overlap(tok["fp32"], tok["int8"])),
    }
    return {"rows": rows, "agreement": agreement}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="adi,med")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--work", default="/tmp/alignir_bench_int8", help="where the indexes go")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/int8_quality.json"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    out = Path(a.out)
    for name in a.datasets.split(","):
        res = run_dataset(name, work, a.model, a.max_length, log)
        old = json.loads(out.read_text()) if out.exists() else {"rows": [], "agreement": []}
        ds = res["agreement"]["dataset"]
        meta = {"command": "nice -n 10 .venv/bin/python -m benchmarks.quality.bench_int8 " + " ".join(
                    sys.argv[1:] if argv is None else argv),
                "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine,
                "machine": f"{platform.machine()} (shared; no timings recorded)",
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        old["rows"] = [r for r in old["rows"] if r["dataset"] != ds] + [{**r, **meta} for r in res["rows"]]
        old["agreement"] = [r for r in old["agreement"] if r["dataset"] != ds] + [{**res["agreement"], **meta}]
        out.write_text(json.dumps(old, indent=1) + "\n")
        for r in res["rows"]:
            log(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}))
        log(json.dumps(res["agreement"]))


if __name__ == "__main__":
    torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "2")))
    main()
