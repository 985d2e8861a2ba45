"""Training step time with a batch's forward as one padded block vs in groups of similar length
(encoders.batching.length_groups), on the long run's own batches: the padding share of each
way, seconds per optimizer step (forward + backward of the real InfoNCE + distillation loss,
teacher vectors from the cache) and the largest difference of the two losses. The two ways
alternate batch by batch, so a change in the machine's load falls on both.

    nice -n 5 .venv/bin/python -m benchmarks.archive.bench_train_padding \
        --run benchmarks/results/adapters/long-base-gemma3-270m-400 --steps 12 --threads 2

``--run`` names a kept adapter whose recorded training config (model, data mix, corpora, seed,
batch, max length, teacher) gives the batches; the model is trained from its base (LoRA r=16, the
run's own settings), so the step cost is that of the run's first steps. Results merge into
benchmarks/results/train_padding.json under the model's name.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from dataclasses import fields
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "train_padding.json"


def load_run(run: Path):
    """The run's TrainConfig, with corpus and teacher-cache paths read relative to this checkout."""
    from alignir.encoders.train.trainer import TrainConfig

    saved = json.loads((run / "alignir_train.json").read_text())["config"]
    cfg = TrainConfig(**{k: v for k, v in saved.items() if k in {f.name for f in fields(TrainConfig)}})
    cfg.hp = {**cfg.hp, "teacher_cache": str(ROOT / "benchmarks/cache/teacher-embeddinggemma-512")}
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a kept adapter folder (its alignir_train.json)")
    ap.add_argument("--steps", type=int, default=12, help="batches timed each way")
    ap.add_argument("--skip", type=int, default=2, help="untimed warm-up batches each way")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from alignir.encoders import batching
    from alignir.encoders.models import load_model
    from alignir.encoders.train.adapter import add_lora
    from alignir.encoders.train.base import pair_texts
    from alignir.encoders.train.data import batch_indices
    from alignir.encoders.train.trainer import _load_data, _seed_all, method_class, split_heldout
    from alignir.environment import describe_environment

    cfg = load_run(Path(args.run))
    _seed_all(cfg.seed)
    loaded = load_model(cfg.model, dtype=cfg.dtype)
    examples, _ = _load_data(cfg, "pairs")
    data, _held = split_heldout(examples, cfg.eval_examples, cfg.seed)
    peft = add_lora(copy.deepcopy(loaded.model), cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout)
    peft.train()
    method = method_class(cfg.method)(peft, loaded, cfg.stage, dict(cfg.hp), {}, cfg.max_length, cfg.target_length)
    order = batch_indices(len(data), cfg.batch_size, cfg.seed)
    ways = {"one block": None, "length groups": batching.FORWARD_OVERHEAD_TOKENS["cpu"]}
    times: dict[str, list[float]] = {w: [] for w in ways}
    tokens: dict[str, list[int]] = {w: [0, 0] for w in ways}  # real, padded
    loss_gap = 0.0
    load_before = os.getloadavg()
    for step in range(args.skip + args.steps):
        batch = [data[i] for i in next(order)]
        queries, docs, _ = pair_texts(batch)
        losses = {}
        for way, overhead in ways.items():
            batching.FORWARD_OVERHEAD_TOKENS["cpu"] = overhead
            peft.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            logs = method.backward(batch, 1.0)
            seconds = time.perf_counter() - t0
            losses[way] = float(logs["loss"])
            if step >= args.skip:
                times[way].append(seconds)
                for role, texts in (("query", queries), ("document", docs)):
                    lengths = [len(x) for x in method.reader.prepare(texts, role)[0]]
                    for group in batching.length_groups(lengths, overhead):
                        tokens[way][0] += sum(lengths[i] for i in group)
                        tokens[way][1] += max(lengths[i] for i in group) * len(group)
        loss_gap = max(loss_gap, abs(losses["one block"] - losses["length groups"]))
        print(f"batch {step}: " + ", ".join(f"{w} {times[w][-1]:.2f} s" for w in ways if times[w] and step >= args.skip),
              flush=True)
    rows = {w: {"seconds_per_step": sum(times[w]) / len(times[w]), "padding_share": 1 - tokens[w][0] / tokens[w][1],
                "padded_tokens_per_step": tokens[w][1] / args.steps} for w in ways}
    report = {
        "model": cfg.model, "run": str(Path(args.run).relative_to(ROOT)) if Path(args.run).is_absolute() else args.run,
        "batch_size": cfg.batch_size, "negatives": cfg.n_negatives, "max_length": cfg.max_length,
        "steps_timed": args.steps, "overhead_tokens": ways["length groups"], "ways": rows,
        "speedup": rows["one block"]["seconds_per_step"] / rows["length groups"]["seconds_per_step"],
        "largest_loss_difference": loss_gap, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "command": "python -m benchmarks.archive.bench_train_padding " + " ".join(sys.argv[1:] if argv is None else argv),
        "environment": describe_environment("cpu"),
    }
    print(json.dumps({k: report[k] for k in ("model", "ways", "speedup", "largest_loss_difference")}, indent=1))
    out = Path(args.out)
    merged = json.loads(out.read_text()) if out.is_file() else {}
    merged[cfg.model] = report
    out.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
