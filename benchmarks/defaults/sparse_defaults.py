"""Per-model sparse defaults, chosen by leave-one-collection-out over built indexes.

A small grid of the factors the one-factor sweeps (bench_quality.py) found to matter —
the relative PC1 removal of eq.14 (``pc1_remove``), K of eq.15, case/space folding and the
query weighting — is scored on every index of one model. For each collection the config
with the best mean nDCG@10 on the *other* collections is applied to it (an honest, held-out
choice); the product default for the model is the config best on the mean over all of them.

    python -m benchmarks.defaults.sparse_defaults --model gemma3-270m \
        --pair adi=/work/indexes/adi-gemma3 --pair med=/work/indexes/med-gemma3 ...

Writes benchmarks/results/sparse_defaults.json (rows keyed by model, or by ``--label`` for a
trained adapter on that model; other rows kept).
"""
from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from alignir.encoders.shipped import BUILTIN_PREFIX  # noqa: E402
from alignir.retrieval.config import SparseConfig  # noqa: E402
from benchmarks.common import DATASETS  # noqa: E402
from benchmarks.quality.bench_quality import Harness  # noqa: E402

GRID = {
    "pc1_remove": (0.75, 1.0, 1.25),
    "doc_k": (256, 1000),
    "fold": (False, True),
    "query_weighting": ("raw", "log1p"),
}


def grid_configs(base: SparseConfig) -> list[SparseConfig]:
    keys = list(GRID)
    return [replace(base, **dict(zip(keys, values))) for values in itertools.product(*GRID.values())]


def label(cfg: SparseConfig) -> str:
    return ",".join(f"{k}={getattr(cfg, k)}" for k in GRID)


def leave_one_out(scores: dict[str, dict[str, float]]) -> dict[str, dict]:
    """scores[collection][config label] -> per collection: the config best on the others."""
    out = {}
    for held in scores:
        others = [c for c in scores if c != held]
        labels = list(scores[held])
        pick = max(labels, key=lambda lab: (np.mean([scores[c][lab] for c in others]), lab))
        out[held] = {"config": pick, "ndcg@10": scores[held][pick]}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the indexes' model (checked against each index)")
    ap.add_argument("--label", help="the rows' key (default: --model); e.g. MODEL+RUN for a trained adapter")
    ap.add_argument("--pair", action="append", required=True,
                    help="NAME=INDEX_DIR; the dataset is --datasets/NAME")
    ap.add_argument("--datasets", default=str(DATASETS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/sparse_defaults.json"))
    args = ap.parse_args(argv)
    command = "python -m benchmarks.defaults.sparse_defaults " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    configs = grid_configs(SparseConfig())
    current = label(SparseConfig())
    scores: dict[str, dict[str, float]] = {}
    for pair in args.pair:
        name, index = pair.split("=", 1)
        t0 = time.perf_counter()
        h = Harness(index, str(Path(args.datasets) / name), "test", None)
        spec = h.searcher.index.manifest["embedder"]
        adapter = str(spec.get("options", {}).get("adapter") or "")
        model = adapter.removeprefix(BUILTIN_PREFIX) if adapter.startswith(BUILTIN_PREFIX) else spec["model"]
        if model != args.model:  # a shipped model is named by its registered name
            raise SystemExit(f"{index} was built with {model}, not {args.model}")
        scores[name] = {label(c): h.score(h.sparse_run(c))["ndcg@10"] for c in configs}
        print(f"{name}: {len(configs)} configs in {time.perf_counter() - t0:.0f}s; "
              f"current default {scores[name][current]}, best {max(scores[name].values())}", flush=True)
    loo = leave_one_out(scores)
    mean = {lab: float(np.mean([scores[c][lab] for c in scores])) for lab in scores[next(iter(scores))]}
    chosen = max(mean, key=lambda lab: (mean[lab], lab))
    result = {
        "model": args.model, **({"label": args.label} if args.label else {}),
        "collections": list(scores), "grid": {k: list(v) for k, v in GRID.items()},
        "fixed": {k: v for k, v in SparseConfig().to_dict().items() if k not in GRID},
        "current_default": current, "chosen": chosen,
        "per_collection": {c: {"current_default": scores[c][current], "chosen_all": scores[c][chosen],
                               "held_out_choice": loo[c]["config"], "held_out_ndcg@10": loo[c]["ndcg@10"],
                               "oracle": max(scores[c].values())} for c in scores},
        "scores": scores, "command": command,
    }
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else {}
    rows[args.label or args.model] = result
    out.write_text(json.dumps(rows, indent=1) + "\n")
    for c, r in result["per_collection"].items():
        print(f"{c:8s} current {r['current_default']:.4f}  held-out choice {r['held_out_ndcg@10']:.4f} "
              f"({r['held_out_choice']})  oracle {r['oracle']:.4f}")
    print("chosen on all:", chosen)


if __name__ == "__main__":
    main()
