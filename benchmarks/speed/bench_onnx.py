"""ONNX Runtime vs torch for the default encoder, in one run: speed and agreement with fp32.

Runtimes (all the default model, ``smollm2-135m-alignir-v3``: SmolLM2-135M + its LoRA adapter,
merged): torch fp32, torch int8 (``precision="int8"``: encoders.quantize), ONNX Runtime fp32 and
ONNX Runtime dynamic int8 (encoders.onnx_runtime; exported and quantised once, cached by the
encoder fingerprint: the one-off export time is reported apart).

- documents: ``--docs`` MED texts at ``--doc-length`` tokens per prompt, encoded whole by each
  runtime in turn, ``--rounds`` rounds (A B C D, A B C D, ...); tokens/s = prompt tokens / median
  seconds; ``speedup_vs_torch_int8`` is the median over rounds of the paired ratio.
- queries: ``--queries`` MED queries, each encoded alone (batch 1, the index-time query prompt
  and instruction), runtimes interleaved query by query, ``--rounds`` passes; p50 over all.
- agreement: cosine of every document and query vector to torch fp32's (min, mean).

The machine is shared: only ratios inside the run mean something; the 1-minute load average
is recorded before and after every round. Verdicts (``--rejudge`` recomputes them from the rows
of ``--out``): an ONNX runtime is worth offering when it is >= 1.3x torch int8 on documents at
cosine >= 0.998 to fp32; ONNX fp32 is worth being the default runtime (``--runtime auto``) when
it is >= 1.3x torch fp32 on documents and queries at cosine >= 0.99999 (the same vectors within
float rounding, so nDCG cannot move).

    nice -n 5 .venv/bin/python -m benchmarks.speed.bench_onnx --out benchmarks/results/onnx_runtime.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from alignir.encoders.embedders import get_embedder
from alignir.encoders.models import load_model
from alignir.encoders.onnx_runtime import to_onnx
from alignir.encoders.shipped import DEFAULT_MODEL, resolve_shipped
from alignir.encoders.templates import INSTRUCTIONS
from alignir.retrieval.beir import load_beir
from alignir.retrieval.indexer import read_source
from alignir.environment import cpu_name
from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("torch-fp32", "torch-int8", "onnx-fp32", "onnx-int8")
SPEEDUP_GOAL, COSINE_GOAL = 1.3, 0.998
#: ONNX fp32 replaces torch fp32 by default at this cosine (float rounding, not an approximation)
DEFAULT_COSINE_GOAL = 0.99999


def build(loaded, model: str, runtime: str, max_length: int, instruction: str | None, root: str | None):
    _, family, opts = resolve_shipped(model, "prompteol", {})
    kind, precision = runtime.split("-")
    if kind == "torch":
        return get_embedder(family, loaded, progress=False, max_length=max_length, instruction=instruction,
                            precision=precision, **opts)
    emb = get_embedder(family, loaded, progress=False, max_length=max_length, instruction=instruction, **opts)
    return to_onnx(emb, quantize=precision == "int8", root=root)


def cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    c = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"min": float(c.min()), "mean": float(c.mean())}


def verdict(rows: list[dict]) -> dict:
    """Which ONNX runtimes pass the bar: >= SPEEDUP_GOAL x torch int8 on documents at cosine >=
    COSINE_GOAL to torch fp32 (every document and query vector)."""
    out: dict = {"speedup_goal": SPEEDUP_GOAL, "cosine_goal": COSINE_GOAL}
    for row in rows:
        if row["runtime"].startswith("onnx"):
            cos = min(row["doc_cosine_to_fp32"]["min"], row["query_cosine_to_fp32"]["min"])
            out[row["runtime"]] = {"passes": row["speedup_vs_torch_int8"] >= SPEEDUP_GOAL and cos >= COSINE_GOAL,
                                   "speedup_vs_torch_int8": row["speedup_vs_torch_int8"], "min_cosine": cos}
    by = {row["runtime"]: row for row in rows}
    if "onnx-fp32" in by and "speedup_vs_torch_fp32" in by["onnx-fp32"]:
        row = by["onnx-fp32"]
        cos = min(row["doc_cosine_to_fp32"]["min"], row["query_cosine_to_fp32"]["min"])
        out["onnx-fp32 as the default"] = {
            "passes": min(row["speedup_vs_torch_fp32"], row["query_speedup_vs_torch_fp32"]) >= SPEEDUP_GOAL
            and cos >= DEFAULT_COSINE_GOAL, "goal": f">= {SPEEDUP_GOAL}x torch fp32 at cosine >= {DEFAULT_COSINE_GOAL}",
            "speedup_vs_torch_fp32": row["speedup_vs_torch_fp32"],
            "query_speedup_vs_torch_fp32": row["query_speedup_vs_torch_fp32"], "min_cosine": cos}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATASETS / "med"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--docs", type=int, default=48)
    ap.add_argument("--doc-length", type=int, default=256)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--label", default="quiet", help="the machine's state, recorded (quiet: nothing else running)")
    ap.add_argument("--onnx-cache", default=None, help="folder of the exported files (default: the alignir cache)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/onnx_runtime.json"))
    ap.add_argument("--rejudge", action="store_true", help="recompute the verdict of --out's rows, no timings")
    args = ap.parse_args(argv)
    if args.rejudge:
        result = json.loads(Path(args.out).read_text())
        result["verdict"] = verdict(result["rows"])
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print("verdict", result["verdict"])
        return 0
    torch.set_num_threads(args.threads)
    base, _, _ = resolve_shipped(args.model, "prompteol", {})
    loaded = load_model(base, device="cpu")
    data = load_beir(args.data, split="test")
    docs = read_source(args.data).texts()[: args.docs]
    queries = list(data.queries.values())[: args.queries]
    instruction = INSTRUCTIONS.get(Path(args.data).name)
    encoders, export_s = {}, {}
    for rt in ("onnx-fp32", "onnx-int8", "torch-fp32", "torch-int8"):  # exports first, while memory is free
        t = time.perf_counter()
        encoders[rt] = build(loaded, args.model, rt, args.doc_length, instruction, args.onnx_cache)
        export_s[rt] = time.perf_counter() - t
        gc.collect()
        print(f"{rt}: ready in {export_s[rt]:.1f}s", flush=True)
    # warm-up and vectors
    dvec = {rt: e.encode_documents(docs) for rt, e in encoders.items()}
    tokens = encoders["torch-fp32"].last_stats["n_tokens"]
    qvec = {rt: np.vstack([e.encode_queries([q]) for q in queries]) for rt, e in encoders.items()}
    doc_s: dict[str, list[float]] = {rt: [] for rt in RUNTIMES}
    query_ms: dict[str, list[float]] = {rt: [] for rt in RUNTIMES}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for rt in RUNTIMES:
            t = time.perf_counter()
            encoders[rt].encode_documents(docs)
            doc_s[rt].append(time.perf_counter() - t)
        for q in queries:
            for rt in RUNTIMES:
                t = time.perf_counter()
                encoders[rt].encode_queries([q])
                query_ms[rt].append(1000 * (time.perf_counter() - t))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}: " + ", ".join(f"{rt} {doc_s[rt][-1]:.1f}s" for rt in RUNTIMES), flush=True)
    rows = []
    for rt in RUNTIMES:
        paired = [b / a for a, b in zip(doc_s[rt], doc_s["torch-int8"])]
        qpaired = [b / a for a, b in zip(query_ms[rt], query_ms["torch-int8"])]
        paired32 = [b / a for a, b in zip(doc_s[rt], doc_s["torch-fp32"])]
        qpaired32 = [b / a for a, b in zip(query_ms[rt], query_ms["torch-fp32"])]
        rows.append({
            "runtime": rt, "documents": len(docs), "doc_length": args.doc_length, "prompt_tokens": tokens,
            "doc_seconds_median": float(np.median(doc_s[rt])), "doc_seconds": doc_s[rt],
            "tokens_per_s": tokens / float(np.median(doc_s[rt])),
            "docs_per_s": len(docs) / float(np.median(doc_s[rt])),
            "speedup_vs_torch_int8": float(np.median(paired)),
            "query_p50_ms": float(np.median(query_ms[rt])), "query_p90_ms": float(np.quantile(query_ms[rt], 0.9)),
            "query_speedup_vs_torch_int8": float(np.median(qpaired)),
            "speedup_vs_torch_fp32": float(np.median(paired32)),
            "query_speedup_vs_torch_fp32": float(np.median(qpaired32)),
            "doc_cosine_to_fp32": cosines(dvec[rt], dvec["torch-fp32"]),
            "query_cosine_to_fp32": cosines(qvec[rt], qvec["torch-fp32"]),
            "setup_seconds": export_s[rt]})
    result = {"rows": rows, "verdict": verdict(rows),
              "model": args.model, "dataset": Path(args.data).name, "queries": len(queries), "rounds": args.rounds,
              "threads": args.threads, "loadavg_1min": load, "label": args.label,
              "cpu": cpu_name(),
              "command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": platform.machine(),
              "cpus": os.cpu_count(), "torch": torch.__version__,
              "onnxruntime": __import__("onnxruntime").__version__,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({r["runtime"]: {k: r[k] for k in ("tokens_per_s", "speedup_vs_torch_int8", "query_p50_ms",
                                                       "doc_cosine_to_fp32", "query_cosine_to_fp32")} for r in rows},
                     indent=1))
    print("verdict", result["verdict"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
