"""Sanity check of a training stage on SmolLM2-135M before a long run:
a few optimizer steps on unlabelled title<->abstract pairs of one corpus, with the held-out loss
before and after next to the no-information baseline ln(candidates per query) of InfoNCE.

    .venv/bin/python -m benchmarks.training.recipe_sanity autoregembed contrastive --set k=5 --steps 6
    .venv/bin/python -m benchmarks.training.recipe_sanity llm2comp scl --set k=8 --set bidirectional=false --steps 6

Result file: benchmarks/results/recipe_sanity.json.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import torch

from alignir.encoders.models import load_model
from alignir.encoders.train.trainer import TrainConfig, train
from benchmarks.common import DATASETS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("method")
    ap.add_argument("stage")
    ap.add_argument("--data", default=str(DATASETS / "cisi"), help="BEIR folder whose corpus gives the pairs")
    ap.add_argument("--mix", default="title=200", help="data mix (unlabelled sources)")
    ap.add_argument("--out", default="/work/bg/out/train/sanity")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--set", dest="hp", action="append", default=[], help="KEY=JSON hyper-parameter")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hp = {}
    for item in args.hp:
        k, _, v = item.partition("=")
        try:
            hp[k] = json.loads(v)
        except json.JSONDecodeError:
            hp[k] = v
    cfg = TrainConfig(method=args.method, stage=args.stage, data=args.data, data_mix=args.mix, hp=hp, lr=args.lr,
                      out=f"{args.out}/{args.method}-{args.stage}", steps=args.steps, batch_size=args.batch_size,
                      n_negatives=args.negatives, max_length=64, target_length=32, eval_examples=12, progress=False,
                      resume=False)
    t = time.process_time()
    s = train(cfg, loaded=load_model("smollm2-135m", device="cpu"))
    baseline = math.log(args.batch_size * (1 + args.negatives))
    print(json.dumps({"method": args.method, "stage": args.stage, "hp": hp, "steps": args.steps,
                      "heldout_first": s["heldout"]["first"]["loss"], "heldout_last": s["heldout"]["last"]["loss"],
                      "no_information_baseline": baseline, "cpu_seconds": round(time.process_time() - t, 1)}))


if __name__ == "__main__":
    main()
