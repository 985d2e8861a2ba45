"""Single-query encoding against the machine's floor: fp32, fp32 with the
prompt prefix's KV cache, and int8 (which always runs the prefix through the cache, in fp32).

For each model and configuration, every query is encoded alone (batch of one, as a user's query
is; the configurations interleaved query by query, so that their ratios share the machine's
moods; ``speedup_vs_fp32`` is the median over the queries of each query's fp32 time over its
time in the configuration) with the index-time encoder of ``alignir build-index`` (PromptEOL, 512 tokens) plus the
dataset's query instruction; ``encode_p50_ms`` / ``encode_p99_ms`` are over the queries.

The floor of one query is 2 x non-embedding parameters x its prompt tokens (template and
instruction included) / the fp32 GEMM rate measured in the same run with the same threads
(best of 3, measured before and after the timings; the highest rate is used, so
the floor is the strict one and a noisy GEMM run cannot make a configuration look closer to it);
``floor_ms``
is its median over the queries and ``ratio_to_floor`` = encode_p50_ms / floor_ms (goal <= 1.5,
fp32). The prefix-cached configurations run fewer tokens than the prompt holds, so they can
go below this full-prompt floor.

A batch of one short query is too small for the GEMMs to reuse a weight: each Linear weight is
read from memory once per query, so the bytes of the backbone's weights (as stored: fp32, or
int8 + fp32 scales and the fp32 down-projections) over the machine's read bandwidth (a sum over
a 1 GiB fp32 tensor, best of 3, same threads, same run) is a second floor,
``bandwidth_floor_ms``, with ``ratio_to_bandwidth_floor``. ``ndcg_delta_vs_fp32`` is copied from benchmarks/results/int8_quality.json when that
file has the dataset (hybrid mode), else null.

``--configs ...,int8-separate`` adds int8 without the shared-input groups (one quantisation and,
for a short query, one GEMM per q/k/v and per gate/up: encoders.int8_linear.SharedInputInt8);
``speedup_vs_int8_separate`` is then every configuration's paired speed-up over it.

Timings mean something only on a quiet machine: run it alone (nothing else in the queue).

    .venv/bin/python -m benchmarks.speed.bench_query_encode --models smollm2-135m,gemma3-270m \\
        --dataset /work/shared/datasets/med --threads 2 --out benchmarks/results/latency.json
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.common import replace_rows  # noqa: E402
from alignir.encoders.embedders import get_embedder  # noqa: E402
from alignir.encoders.models import backbone, load_model  # noqa: E402
from alignir.encoders.quantize import to_int8  # noqa: E402
from alignir.encoders.templates import INSTRUCTIONS  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from benchmarks.speed.bench_encoder_throughput import matmul_gflops  # noqa: E402  (the same GEMM anchor in both benchmarks)

#: name -> (precision, prefix_cache, shared_inputs); "int8-separate": int8 without the shared-input
#: groups (encoders.int8_linear.SharedInputInt8), their A/B (not in the default run)
CONFIGS = {"fp32": ("fp32", False, True), "fp32+prefix": ("fp32", True, True), "int8": ("int8", True, True),
           "int8-separate": ("int8", True, False)}
DEFAULT_CONFIGS = "fp32,fp32+prefix,int8"


def non_embedding_params(model: torch.nn.Module) -> int:
    """Parameters of the transformer without its input embeddings (the LM head is outside it)."""
    bb = backbone(model)
    return sum(p.numel() for p in bb.parameters()) - model.get_input_embeddings().weight.numel()


def weight_bytes(emb) -> int:
    """Bytes of the transformer's weights as the embedder stores them (parameters and buffers,
    without the input embeddings): what one query streams from memory."""
    bb = getattr(emb, "_backbone", None)  # the prompt families' (possibly int8) backbone
    bb = bb if isinstance(bb, torch.nn.Module) else backbone(emb.loaded.model)
    tensors = list(bb.parameters()) + [b for b in bb.buffers() if b is not None]
    embed = bb.get_input_embeddings().weight
    return sum(t.numel() * t.element_size() for t in tensors) - embed.numel() * embed.element_size()


def read_bandwidth_gbs(n_bytes: int = 1 << 30, repeats: int = 3) -> float:
    """Best-of-``repeats`` rate (GB/s) at which torch's threads read one large fp32 tensor."""
    x = torch.ones(n_bytes // 4)
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        float(x.sum())
        best = max(best, n_bytes / (time.perf_counter() - t) / 1e9)
    del x
    return best


def prompt_tokens(emb, query: str) -> int:
    ids, _, _, _ = emb.prepare([query], "query")
    return len(ids[0])


def time_interleaved(embedders: dict, queries: list[str], warmup: int = 3) -> dict[str, np.ndarray]:
    """Milliseconds per query of each embedder, the configurations interleaved query by query
    (in a rotating order), so that a slow minute of a shared machine hits all of them alike."""
    names = list(embedders)
    for q in queries[:warmup]:
        for name in names:
            embedders[name].encode_queries([q])
    out: dict[str, list[float]] = {name: [] for name in names}
    for i, q in enumerate(queries):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t = time.perf_counter()
            embedders[name].encode_queries([q])
            out[name].append(time.perf_counter() - t)
    return {name: np.array(v) * 1000 for name, v in out.items()}


def ndcg_delta(quality: Path, dataset: str, model: str) -> float | None:
    if not quality.exists():
        return None
    for r in json.loads(quality.read_text()).get("rows", []):
        if r["dataset"] == dataset and r["model"] == model and r["mode"] == "hybrid":
            return float(r["ndcg_delta_vs_fp32"])
    return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"of {','.join(CONFIGS)}")
    ap.add_argument("--max-queries", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quality", default=str(ROOT / "benchmarks/results/int8_quality.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latency.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python -m benchmarks.speed.bench_query_encode " + " ".join(argv if argv is not None else sys.argv[1:])
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    data = load_beir(args.dataset)
    queries = list(data.queries.values())[: args.max_queries]
    rows = []
    for spec in args.models.split(","):
        loaded = load_model(spec, device="cpu")
        n_params = non_embedding_params(loaded.model)
        mm = [matmul_gflops()]
        bw = [read_bandwidth_gbs()]
        instruction = data.name if data.name in INSTRUCTIONS else None
        embedders = {}
        for name in args.configs.split(","):
            precision, cached, shared = CONFIGS[name]
            emb = get_embedder("prompteol", loaded, progress=False, instruction=instruction, prefix_cache=cached)
            embedders[name] = to_int8(emb, shared_inputs=shared) if precision == "int8" else emb
        timings = time_interleaved(embedders, queries)
        mm.append(matmul_gflops())
        bw.append(read_bandwidth_gbs())
        for name, emb in embedders.items():
            precision, cached, _ = CONFIGS[name]
            t = timings[name]
            tokens = np.array([prompt_tokens(emb, q) for q in queries])
            rows.append({"collection": data.name, "mode": "encode", "model": spec, "precision": precision,
                         "prefix_cache": cached, "config": name, "queries": len(queries), "threads": args.threads,
                         "encode_p50_ms": round(float(np.percentile(t, 50)), 2),
                         "encode_p99_ms": round(float(np.percentile(t, 99)), 2),
                         "prompt_tokens_p50": float(np.percentile(tokens, 50)),
                         "prefix_tokens": emb._prefix_cache("query").n if cached else 0,
                         "n_prefix_cached_last": emb.last_stats.get("n_prefix_cached", 0),
                         "speedup_vs_fp32": (round(float(np.median(timings["fp32"] / t)), 3)
                                             if "fp32" in timings else None),  # paired, per query
                         "speedup_vs_int8_separate": (round(float(np.median(timings["int8-separate"] / t)), 3)
                                                      if "int8-separate" in timings else None),
                         "non_embedding_params": n_params, "weight_bytes": weight_bytes(emb),
                         "tokens": tokens.tolist(), "times_ms": np.round(t, 3).tolist()})
        gflops, gbs = max(mm), max(bw)
        for r in rows:
            if r["model"] == spec:
                floor = 2 * n_params * np.array(r.pop("tokens")) / (gflops * 1e9) * 1000
                times = np.array(r.pop("times_ms"))
                bw_floor = r["weight_bytes"] / (gbs * 1e9) * 1000
                r.update(floor_ms=round(float(np.percentile(floor, 50)), 2),
                         ratio_to_floor=round(float(np.percentile(times / floor, 50)), 3),
                         bandwidth_floor_ms=round(bw_floor, 2),
                         ratio_to_bandwidth_floor=round(float(np.percentile(times, 50)) / bw_floor, 3),
                         read_gbs=round(gbs, 2), read_gbs_runs=[round(x, 2) for x in bw],
                         matmul_gflops=round(gflops, 2), matmul_gflops_runs=[round(x, 2) for x in mm],
                         ndcg_delta_vs_fp32=(ndcg_delta(Path(args.quality), data.name, spec)
                                             if r["precision"] == "int8" else 0.0),
                         torch=torch.__version__, machine=f"{platform.machine()}", load=load, command=command,
                         date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                print(json.dumps(r), file=sys.stderr, flush=True)
    replace_rows(args.out, rows, ("collection", "mode", "model", "config"))


if __name__ == "__main__":
    main()
