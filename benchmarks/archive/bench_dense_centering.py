"""Dense retrieval quality with and without centering / whitening (index.dense).

PromptEOL vectors of a small LLM are strongly anisotropic (one dominant direction, “A Text is Worth Several Tokens”
§4 eq.14); centering or whitening the corpus (the BERT-whitening idea cited in AutoRegEmbed §2)
may or may not help retrieval. This measures nDCG@10 / recall@20 / recall@100 of the exact flat index
under each option on the same cached vectors. The anchor is the plain inner product of the
raw vectors (no transform); every variant also gets its ratio to the anchor.

Vectors come from the shared embedding cache (encoders.cache, $ALIGNIR_CACHE), so a rerun
or another benchmark on the same encoder does not re-encode.

Run:
    nice -n 10 .venv/bin/python -m benchmarks.archive.bench_dense_centering --collections adi,med

Result file: benchmarks/results/dense_centering.json.
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

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from alignir.index.dense import DenseIndex  # noqa: E402
from benchmarks import common  # noqa: E402

DATASETS = Path(os.environ.get("ALIGNIR_DATASETS", common.DATASETS))
#: name -> DenseIndex.build options; "raw-ip" is the anchor
VARIANTS = {
    "raw-ip": {},
    "cosine": {"normalize": True},
    "center-ip": {"center": True},
    "center-cosine": {"center": True, "normalize": True},
    "zca-ip": {"whiten": "zca"},
    "zca-cosine": {"whiten": "zca", "normalize": True},
    "zca-eps0.01-cosine": {"whiten": "zca", "whiten_eps": 0.01, "normalize": True},
    "zca-eps0.1-cosine": {"whiten": "zca", "whiten_eps": 0.1, "normalize": True},
    "pca64-cosine": {"whiten": "pca", "whiten_dim": 64, "normalize": True},
    "pca128-cosine": {"whiten": "pca", "whiten_dim": 128, "normalize": True},
    "pca256-cosine": {"whiten": "pca", "whiten_dim": 256, "normalize": True},
}


def encode(collection: str, model: str, embedder_name: str, threads: int):
    import torch

    from alignir.encoders.cache import EmbeddingCache
    from alignir.encoders.embedders import get_embedder
    from alignir.retrieval.beir import load_beir

    torch.set_num_threads(threads)
    ds = load_beir(DATASETS / collection)
    emb = get_embedder(embedder_name, model, device="cpu")
    cache = EmbeddingCache()
    t0 = time.perf_counter()
    docs = cache.encode_cached(emb, ds.corpus.texts(), "document", shard_size=128)
    qids = list(ds.queries)
    queries = cache.encode_cached(emb, [ds.queries[q] for q in qids], "query", shard_size=128)
    return ds, qids, docs, queries, emb.fingerprint(), time.perf_counter() - t0


def anisotropy(x: np.ndarray) -> dict[str, float]:
    """Mean pairwise cosine of the corpus and the share of variance on the top component."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(u)
    mean_cos = float((np.square(u.sum(axis=0)).sum() - n) / (n * (n - 1)))
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False) ** 2
    return {"mean_pairwise_cosine": round(mean_cos, 4), "pc1_variance_share": round(float(s[0] / s.sum()), 4)}


def run(collection: str, args: argparse.Namespace) -> dict:
    from alignir.retrieval.metrics import evaluate

    ds, qids, docs, queries, fp, enc_s = encode(collection, args.model, args.embedder, args.threads)
    doc_ids = ds.corpus.ids()
    out = {"docs": len(doc_ids), "queries": len(qids), "dim": int(docs.shape[1]),
           "encode_or_cache_seconds": round(enc_s, 1), "fingerprint": fp,
           "anisotropy": anisotropy(docs.astype(np.float64)), "variants": {}}
    for name, opts in VARIANTS.items():
        if opts.get("whiten_dim", 0) > min(docs.shape[0] - 1, docs.shape[1]):
            continue  # more components than the corpus has
        idx = DenseIndex.build(docs, **opts)
        top, scores = idx.search(queries, 100)
        run_ = {q: {doc_ids[d]: float(s) for d, s in zip(top[i], scores[i]) if d >= 0}
                for i, q in enumerate(qids)}
        m = evaluate(ds.qrels, run_, metrics=("ndcg@10", "recall@20", "recall@100"))
        out["variants"][name] = {"options": opts, "indexed_dim": idx.dim,
                                 "ndcg@10": round(m["ndcg@10"], 4), "recall@20": round(m["recall@20"], 4),
                                 "recall@100": round(m["recall@100"], 4)}
    anchor = out["variants"]["raw-ip"]
    for v in out["variants"].values():
        for key in ("ndcg@10", "recall@20"):
            v[f"{key}_vs_raw_ip"] = round(v[key] / anchor[key], 3) if anchor[key] else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collections", default="adi,med")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--embedder", default="prompteol")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/dense_centering.json"))
    args = ap.parse_args()
    result = {
        "benchmark": "dense nDCG@10 with/without centering and whitening (flat IP index)",
        "command": "nice -n 10 .venv/bin/python -m benchmarks.archive.bench_dense_centering " + " ".join(sys.argv[1:]),
        "model": args.model, "embedder": args.embedder, "anchor": "raw-ip",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch threads {args.threads}",
        "collections": {},
    }
    for c in args.collections.split(","):
        result["collections"][c] = run(c, args)
        print(json.dumps({c: {k: v["ndcg@10"] for k, v in result["collections"][c]["variants"].items()}}),
              flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
