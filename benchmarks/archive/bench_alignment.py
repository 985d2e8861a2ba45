"""Reproduce “A Text is Worth Several Tokens” §3.5 (Fig.2) and §4 (Fig.3-4) with the shipped models.

For each model and embedder (pooling): Hit@10, LAR, GAR (eq.6-8, exact ids and stem
matches), v_j spectrum against the base embedder (eq.10) with v1_share = |v1| / Σ|v_j|, the
PC1 sweep (eq.14) and plots.  Embeddings are checkpointed per (model, embedder) under
--work, so a killed run resumes.  Writes benchmarks/results/alignment.json and PNGs.

    nice -n 10 .venv/bin/python -m benchmarks.archive.bench_alignment --collection cran --n 400
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from alignir.encoders.analysis import analyze_embeddings, write_plots  # noqa: E402
from alignir.encoders.embedders import get_embedder  # noqa: E402
from alignir.encoders.models import load_model  # noqa: E402
from alignir.retrieval.commands.analyze import sample_texts  # noqa: E402
from benchmarks.common import DATASETS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="cran", help="name under ../shared/datasets or a BEIR folder")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--poolings", default="last,mean,prompteol")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/alignir/bench_alignment"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    coll = Path(args.collection)
    if not coll.is_dir():
        coll = DATASETS / args.collection
    _, texts = sample_texts(coll, args.n, args.seed)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    command = (f"nice -n {os.nice(0)} " if os.nice(0) else "") + ".venv/bin/python -m benchmarks.archive.bench_alignment " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    json_path = out / "alignment.json"
    doc = json.loads(json_path.read_text()) if json_path.is_file() else {}
    doc.update({"collection": coll.name, "n_texts": len(texts), "max_length": args.max_length,
                "seed": args.seed, "command": command})
    results = [r for r in doc.get("results", []) if r["model"] not in args.models.split(",")]
    details = {m: v for m, v in doc.get("details", {}).items() if m not in args.models.split(",")}
    poolings = args.poolings.split(",")
    for model in args.models.split(","):
        t0 = time.perf_counter()
        loaded = load_model(model, device="cpu")
        load_s = time.perf_counter() - t0
        H, enc = {}, {}
        for p in poolings:
            f = work / f"{model}_{coll.name}_{p}_n{len(texts)}_s{args.seed}_L{args.max_length}.npy"
            if f.is_file():
                H[p] = np.load(f)
                enc[p] = None
                continue
            emb = get_embedder(p, loaded, max_length=args.max_length)
            t = time.perf_counter()
            H[p] = emb.encode_documents(texts)
            enc[p] = {"seconds": time.perf_counter() - t, "tokens": emb.last_stats.get("n_tokens")}
            np.save(f.with_suffix(".tmp.npy"), H[p])
            os.replace(f.with_suffix(".tmp.npy"), f)
            print(f"{model}/{p}: {enc[p]}", flush=True)
        t = time.perf_counter()
        rep = analyze_embeddings(texts, H, loaded.tokenizer, loaded.lm_head, loaded.special_ids,
                                 k=10, match="stem", max_length=args.max_length)
        analysis_s = time.perf_counter() - t
        plots = write_plots(rep, loaded.tokenizer, str(out), prefix=f"alignment_{model}_")
        for p in poolings:
            m = rep.summary["embedders"][p]
            results.append({
                "model": model, "pooling": p, "hit@10": m["hit@10"], "lar": m["lar"], "gar": m["gar"],
                "hit@10_stem": m.get("hit@10_stem"), "lar_stem": m.get("lar_stem"), "gar_stem": m.get("gar_stem"),
                "v1_share": m.get("v1_share"), "v1": rep.summary["spectral"].get(p, {}).get("v1"),
                "mean_surface": m["mean_surface"], "n_texts": m["n_texts"], "encode": enc[p],
                "command": command,
            })
        details[model] = {**rep.summary, "load_seconds": load_s, "analysis_seconds": analysis_s,
                          "plots": [os.path.basename(x) for x in plots]}
        doc["results"], doc["details"] = results, details
        tmp = json_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, json_path)
        print(json.dumps([r for r in results if r["model"] == model], indent=1), flush=True)
        del loaded, H


if __name__ == "__main__":
    main()
