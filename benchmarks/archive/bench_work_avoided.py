"""Where the encoder's tokens go, and what the prompt prefix's KV cache saves on documents.

Part 1 (``tokens``, tokenization only, no timings): for each collection's corpus, the default
encoder's document prompts (PromptEOL ``This sentence: "[text]" means in one word: "``, “A Text
is Worth Several Tokens” §2.2, at ``max_length``) split into

- ``text_tokens``: tokens of the document itself, ``template_tokens``: the rest of the prompt
  (template head and suffix, special tokens); ``prefix_tokens``: the template head, computed
  once by the prefix cache (encoders.prefix_cache) for every prompt it covers;
- ``padding_share``: padded positions / all positions of the batches the encoder forms (prompts
  sorted by length, greedy batches within ``batch_tokens`` padded tokens and ``max_batch_size``
  rows: encoders.embedders.prompteol), at the CPU budget (4,096 tokens, 64 rows) and at a GPU's
  largest one (262,144 tokens, 1,024 rows; encoders.batching); ``*_budget_only``: the same
  batches without the padding cap (``max_padding``), as they were formed before it.

Part 2 (``prefix``): the default model (fp32) encodes ``--docs`` MED documents with and without
the document prefix cache: the largest absolute difference and the smallest cosine of the
vectors, and the time of each, interleaved A B A B over ``--rounds`` rounds (medians; the
ratio is what holds on a loaded machine; the load average is recorded next to it).

    nice -n 5 .venv/bin/python -m benchmarks.archive.bench_work_avoided \\
        --datasets adi,cisi,cran,med,scifact --out benchmarks/results/work_avoided.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from alignir.encoders.batching import CPU_BATCH_TOKENS, CPU_MAX_ROWS, GPU_MAX_ROWS, GPU_MAX_TOKENS
from alignir.encoders.embedders import get_embedder
from alignir.encoders.models import load_model
from alignir.encoders.shipped import DEFAULT_MODEL, resolve_shipped
from alignir.retrieval.beir import resolve_dataset
from alignir.retrieval.indexer import read_source
from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = {"cpu": (CPU_BATCH_TOKENS, CPU_MAX_ROWS), "gpu": (GPU_MAX_TOKENS, GPU_MAX_ROWS)}


def default_embedder(loaded, model: str, **options):
    """The embedder ``build_index(model=model)`` reads documents with."""
    _, family, opts = resolve_shipped(model, "prompteol", {})
    return get_embedder(family, loaded, progress=False, **opts, **options)


def padding(emb, lengths: np.ndarray) -> dict[str, int]:
    """Real and padded positions of the encoder's length-sorted batches of prompts of ``lengths``."""
    order = np.argsort(-lengths, kind="stable")
    padded = sum(int(lengths[b].max()) * len(b) for b in emb._batches(lengths, order))
    return {"positions": padded, "padding": padded - int(lengths.sum())}


def token_rows(emb, name: str, max_length: int, data: str) -> dict:
    texts = read_source(resolve_dataset(name, data)).texts()
    ids, pos, empty, n_trunc = emb.prepare(texts, "document")
    live = np.flatnonzero(~empty)
    with torch.inference_mode():
        prefix = emb._prefix_cache("document")
    lengths = np.array([len(ids[i]) for i in live])
    text = np.array([len(pos[i]) for i in live])
    covered = sum(prefix.covers(ids[i], pos[i]) for i in live)
    row = {"dataset": name, "documents": len(texts), "empty": int(empty.sum()), "truncated": int(n_trunc),
           "max_length": max_length, "prompt_tokens": int(lengths.sum()), "text_tokens": int(text.sum()),
           "template_tokens": int((lengths - text).sum()),
           "template_share": float((lengths - text).sum() / lengths.sum()),
           "prefix_tokens_per_prompt": prefix.n, "prompts_on_prefix_cache": int(covered),
           "prefix_tokens_saved": int(covered * prefix.n),
           "prefix_share": float(covered * prefix.n / lengths.sum()),
           "mean_prompt_tokens": float(lengths.mean())}
    cap = emb.max_padding
    for where, (tokens, rows) in BUDGETS.items():
        emb.batch_tokens, emb.max_batch_size = tokens, rows
        for key, emb.max_padding in (("", cap), ("_budget_only", 1.0)):
            p = padding(emb, lengths)
            row[f"padding_share_{where}{key}"] = p["padding"] / p["positions"]
            row[f"batches_{where}{key}"] = len(emb._batches(lengths, np.argsort(-lengths, kind="stable")))
    emb.batch_tokens, emb.max_batch_size, emb.max_padding = *BUDGETS["cpu"], cap
    return row


def prefix_row(loaded, model: str, n_docs: int, rounds: int, max_length: int, data: str) -> dict:
    texts = read_source(resolve_dataset("med", data)).texts()[:n_docs]
    full = default_embedder(loaded, model, max_length=max_length)
    cached = default_embedder(loaded, model, max_length=max_length, prefix_cache=True)
    a, b = full.encode_documents(texts), cached.encode_documents(texts)  # warm-up, and the vectors
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    times: dict[str, list[float]] = {"full": [], "prefix_cache": []}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for key, emb in (("full", full), ("prefix_cache", cached)):
            t = time.perf_counter()
            emb.encode_documents(texts)
            times[key].append(time.perf_counter() - t)
        load.append(os.getloadavg()[0])
    ratios = [f / c for f, c in zip(times["full"], times["prefix_cache"])]
    return {"dataset": "med", "documents": len(texts), "model": model, "precision": "fp32",
            "max_length": max_length, "prompts_on_prefix_cache": cached.last_stats["n_prefix_cached"],
            "prefix_tokens_per_prompt": cached._prefix_cache("document").n,
            "tokens_full": full.last_stats["n_tokens"], "tokens_cached": cached.last_stats["n_tokens"],
            "max_abs_diff": float(np.abs(a - b).max()), "min_cosine": float(cos.min()),
            "seconds_full_median": float(np.median(times["full"])),
            "seconds_prefix_cache_median": float(np.median(times["prefix_cache"])),
            "speedup_median": float(np.median(ratios)), "speedups": ratios, "rounds": rounds,
            "threads": torch.get_num_threads(), "loadavg_1min": load}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="adi,cisi,cran,med,scifact")
    ap.add_argument("--data", default=str(DATASETS), help="folder of the BEIR folders")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--docs", type=int, default=24, help="MED documents of the prefix-cache check")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-prefix", action="store_true", help="tokenization only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/work_avoided.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    base, _, _ = resolve_shipped(args.model, "prompteol", {})
    loaded = load_model(base, device="cpu")
    emb = default_embedder(loaded, args.model, max_length=args.max_length)
    meta = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    result = {"tokens": [], "prefix": None, **meta}
    for name in args.datasets.split(","):
        row = token_rows(emb, name, args.max_length, args.data)
        print(json.dumps(row), flush=True)
        result["tokens"].append(row)
    if not args.skip_prefix:
        result["prefix"] = prefix_row(loaded, args.model, args.docs, args.rounds, args.max_length, args.data)
        print(json.dumps(result["prefix"]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
