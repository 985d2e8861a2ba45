"""What a shipped model costs to index and query on this CPU, and where its time goes: each model
against the default on the same documents, in one process, interleaved.

For each collection (the first ``--n-docs`` documents, title + text, as build-index reads them)
and each model (``--models``, default gemma3-270m-alignir and smollm2-135m-alignir-v4, each
through ``Encoder.from_pretrained`` with its default runtime), every round runs the models in
turn (the order alternates from round to round, so load from other processes hits both alike)
and the best round of each is kept (also recorded: the median of the rounds' paired ratios, and
documents per CPU-second of the process, both steadier than the best wall time on a loaded machine):

- end to end: ``Encoder.encode_documents`` (dense + aligned-token vectors, no cache): documents/s;
- tokenisation: the embedder's ``prepare`` (template, tokenizer, truncation) of the same texts;
- transformer: the rest of the end-to-end time, with its real and padded tokens (the
  embedder's ``last_stats``): tokens per document, padding share;
- projection + top-K: ``Encoder.sparse_documents`` on the dense vectors (the LM head over the
  whole vocabulary, 262,144 rows for Gemma 3, 49,152 for SmolLM2, and the top K);
- queries: ``Encoder.encode_queries`` of one query at a time (``--n-queries`` of the
  collection's test queries), p50 and p90 in ms.

The ratio of documents/s of each model to the first model of ``--against`` is the cost the ship
rule reads (benchmarks/decisions/ship_rule.py). The load average is recorded before and after.

    nice -n 10 python -m benchmarks.speed.model_cost --n-docs 48 --rounds 3

Result file: benchmarks/results/model_cost.json (the rows of this run replace the rows of the
same models, collections and number of documents; each row keeps the command and the load).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATASETS
from benchmarks.speed.bench_encoder_throughput import load_docs

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OUT = ROOT / "benchmarks" / "results" / "model_cost.json"
MODELS = ("gemma3-270m-alignir", "smollm2-135m-alignir-v4")


def load_queries(folder: Path, n: int) -> list[str]:
    out = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                break
    return out


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def measure(enc, texts: list[str], queries: list[str]) -> dict:
    """One round of one model on one collection (see the module docstring): one end-to-end
    encode; tokenisation and projection + top-K timed again on their own (both are cheap) and
    the transformer's share is the rest."""
    emb = enc.embedder
    t, c = time.perf_counter(), time.process_time()
    encoded = enc.encode_documents(texts, batch_size=len(texts))
    e2e, cpu = time.perf_counter() - t, time.process_time() - c
    stats = dict(getattr(emb, "last_stats", {}) or {})
    t = time.perf_counter()
    emb.prepare(list(texts), "document")
    tokenise = time.perf_counter() - t
    t = time.perf_counter()
    enc.sparse_documents(encoded.dense)
    project = time.perf_counter() - t
    q_ms = []
    for q in queries:
        t = time.perf_counter()
        enc.encode_queries([q])
        q_ms.append((time.perf_counter() - t) * 1e3)
    real, padded = int(stats.get("n_tokens", 0)), int(stats.get("n_padded_tokens", 0))
    return {"seconds": e2e, "docs_per_s": len(texts) / e2e, "docs_per_cpu_s": len(texts) / cpu, "tokenise_s": tokenise,
            "transformer_s": max(0.0, e2e - tokenise - project), "project_topk_s": project,
            "tokens_per_doc": real / len(texts) if real else None,
            "padding_share": (padded - real) / padded if padded else None,
            "prefix_cached": stats.get("n_prefix_cached"),
            "query_p50_ms": statistics.median(q_ms), "query_p90_ms": float(np.percentile(q_ms, 90)),
            "dense": np.asarray(encoded.dense)}


def summarise(best: dict, lm_rows: int, runtime: str) -> dict:
    s = best["seconds"]
    return {"docs_per_s": round(best["docs_per_s"], 3), "seconds": round(s, 3),
            "tokens_per_doc": None if best["tokens_per_doc"] is None else round(best["tokens_per_doc"], 1),
            "padding_share": None if best["padding_share"] is None else round(best["padding_share"], 4),
            "prefix_cached": best["prefix_cached"], "lm_head_rows": lm_rows, "runtime": runtime,
            "share": {"tokenise": round(best["tokenise_s"] / s, 4), "transformer": round(best["transformer_s"] / s, 4),
                      "project_topk": round(best["project_topk_s"] / s, 4)},
            "seconds_of": {k: round(best[k + "_s"], 3) for k in ("tokenise", "transformer", "project_topk")},
            "docs_per_cpu_s": round(best["docs_per_cpu_s"], 3),
            "query_p50_ms": round(best["query_p50_ms"], 1), "query_p90_ms": round(best["query_p90_ms"], 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated shipped names")
    ap.add_argument("--against", default=MODELS[1], help="the model the ratios are taken against")
    ap.add_argument("--datasets", default="scifact,med")
    ap.add_argument("--n-docs", type=int, default=48)
    ap.add_argument("--n-queries", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.speed.model_cost " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    from alignir.retrieval.encoder import Encoder

    models = [m for m in args.models.split(",") if m]
    if args.against not in models:
        models.append(args.against)
    load_before = loadavg()
    encoders = {m: Encoder.from_pretrained(m) for m in models}
    data = {d: (load_docs(DATASETS / d, args.n_docs), load_queries(DATASETS / d, args.n_queries))
            for d in args.datasets.split(",")}
    for enc in encoders.values():  # warm-up: sessions, allocations, prefix caches
        enc.encode_documents(data[next(iter(data))][0][:4])
        enc.encode_queries(["warm up"])
    rounds: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for d, (texts, queries) in data.items():
            for m in (models if r % 2 == 0 else models[::-1]):
                got = measure(encoders[m], texts, queries)
                rounds.setdefault((m, d), []).append(got)
                print(f"round {r} {d} {m}: {got['docs_per_s']:.2f} docs/s, query p50 {got['query_p50_ms']:.0f} ms, "
                      f"load {loadavg()[0]:.2f}", flush=True)
    load_after = loadavg()
    rows = []
    for d in data:
        base = max(rounds[(args.against, d)], key=lambda x: x["docs_per_s"])
        for m in models:
            runs = rounds[(m, d)]
            best = max(runs, key=lambda x: x["docs_per_s"])
            same = [float(np.max(np.abs(x["dense"] - runs[0]["dense"]))) for x in runs]
            row = {"kind": "model-cost", "model": m, "dataset": d, "n_docs": args.n_docs,
                   "n_queries": args.n_queries, "rounds": args.rounds, **summarise(
                       best, int(encoders[m].embedder.lm_head.shape[0]), encoders[m].runtime),
                   "docs_per_s_rounds": [round(x["docs_per_s"], 3) for x in runs],
                   "ratio_to": args.against, "docs_per_s_ratio": round(best["docs_per_s"] / base["docs_per_s"], 3),
                   # each round ran both models back to back: the median of those paired ratios,
                   # and the ratio of documents per CPU-second (both less sensitive to the load)
                   "docs_per_s_ratio_paired_median": round(statistics.median(
                       x["docs_per_s"] / y["docs_per_s"] for x, y in zip(runs, rounds[(args.against, d)])), 3),
                   "docs_per_cpu_s_ratio": round(max(x["docs_per_cpu_s"] for x in runs)
                                                 / max(y["docs_per_cpu_s"] for y in rounds[(args.against, d)]), 3),
                   "query_p50_ratio": round(best["query_p50_ms"] / base["query_p50_ms"], 3),
                   "max_dense_diff_between_rounds": max(same),
                   "loadavg_before": load_before, "loadavg_after": load_after, "command": command}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "command"}))
    if not args.no_write:
        out = Path(args.out)
        old = json.loads(out.read_text()) if out.exists() else []
        done = {(r["model"], r["dataset"], r["n_docs"]) for r in rows}
        out.write_text(json.dumps([r for r in old if (r.get("model"), r.get("dataset"), r.get("n_docs")) not in done]
                                  + rows, indent=1) + "\n")
        print(f"wrote {len(rows)} rows to {out}")
    return rows


if __name__ == "__main__":
    main()
