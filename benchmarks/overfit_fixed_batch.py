"""Diagnostic: can one training method/stage overfit a single fixed batch of real data?

Writes the first ``--n`` SciFact train pairs (random negative) and their positives as raw text to
``--workdir``, then trains with ``batch_size = n`` so that every step sees the same batch, and
prints the loss of every step. A loss that does not fall here is a bug (sign, detached tensor,
wrong parameters trainable); a loss that falls here but rises across fresh batches is noise /
learning-rate / generalisation, not wiring.

    .venv/bin/python benchmarks/overfit_fixed_batch.py gircse icr --steps 6 --lr 1e-4 --set K=3
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("method")
    ap.add_argument("stage")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--n", type=int, default=4, help="examples in the fixed batch")
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--target-length", type=int, default=24)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", default="/work/shared/datasets/scifact")
    ap.add_argument("--workdir", default="/tmp/alignir_overfit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--init-adapter", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from alignir.encoders.models import load_model
    from alignir.encoders.train.data import _beir
    from alignir.encoders.train.trainer import TrainConfig, method_class, train

    wd = Path(args.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels = _beir(Path(args.data), "train")
    qids, dids, rng = sorted(qrels)[: args.n], list(corpus), random.Random(0)
    pos = [corpus[next(iter(qrels[q]))] for q in qids]
    with open(wd / "triples.jsonl", "w") as fh:
        for q, p in zip(qids, pos):
            fh.write(json.dumps({"query": queries[q], "positive": p, "negatives": [corpus[rng.choice(dids)]]}) + "\n")
    (wd / "texts.txt").write_text("\n".join(p.replace("\n", " ") for p in pos))
    kind = method_class(args.method).STAGES[args.stage]
    hp = {}
    for item in args.set:
        k, v = item.split("=", 1)
        try:
            hp[k] = json.loads(v)
        except json.JSONDecodeError:
            hp[k] = v
    cfg = TrainConfig(method=args.method, stage=args.stage, data=str(wd / ("triples.jsonl" if kind == "pairs" else "texts.txt")),
                      out=str(wd / f"{args.method}-{args.stage}"), model=args.model, steps=args.steps, batch_size=args.n,
                      lr=args.lr, warmup_ratio=0.0, max_length=args.max_length, target_length=args.target_length,
                      progress=False, resume=False, init_adapter=args.init_adapter, hp=hp)
    t0 = time.perf_counter()
    train(cfg, loaded=load_model(args.model, device="cpu"))
    for line in open(Path(cfg.out) / "loss_log.jsonl"):
        r = json.loads(line)
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items() if k != "lr"})
    print(f"seconds {time.perf_counter() - t0:.1f}")


if __name__ == "__main__":
    main()
