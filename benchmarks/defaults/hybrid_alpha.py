"""The "hybrid" (dense+sparse) fusion of one model, chosen leave-one-collection-out on dumped leg
lists (benchmarks/quality/dump_leg_lists.py), for the goal "dense+sparse >= both legs".

The hybrid mode fuses the dense and the aligned-token sparse leg, α·dense + (1-α)·sparse over
each leg's top FusionConfig.depth (100), with the product's own fusion code (fusion_plan.fuse_legs).
Which leg is the stronger one depends on the model (untrained PromptEOL SmolLM2: sparse; the
shipped trained adapter: dense), so the choice is made per model, over the model's dumps: for every
held-out collection, the (method, α) with the best mean nDCG@10 over the *other* collections is
applied to it (never its own qrels). The row "all" is the choice over every collection: what the
model's registry entry (encoders/shipped.py, ``ShippedEmbedder.hybrid``) ships.

    python -m benchmarks.defaults.hybrid_alpha /work/bg/out/fusion/lists/*-smollm2-135m-alignir-ml512.json.gz

Rows (``"kind": "hybrid-alpha"``) go to benchmarks/results/fusion_transfer.json; rows of other kinds are kept.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.defaults.fusion_rules import Setting, one_model_cli, ndcg, replace_rows
from alignir.retrieval import fusion as F
from alignir.retrieval.config import FusionConfig
from alignir.retrieval.fusion_plan import fuse_legs

METHODS = ("minmax", "zscore")
ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
DEFAULT = ("minmax", 0.5)  # FusionConfig() before this study


def hybrid_run(s: Setting, method: str, alpha: float) -> dict[str, dict[str, float]]:
    """The hybrid mode's fused top 100 of every query of ``s``, by the product's fuse_legs."""
    cfg = FusionConfig(method=method, alpha=alpha)
    return {q: dict(F.ranked(fuse_legs([s.legs["dense"][q], s.legs["sparse"][q]], [alpha, 1 - alpha], cfg),
                             cfg.depth))
            for q in s.legs["bm25"]}


def choose(scores: dict[str, dict[tuple[str, float], float]], train: list[str]) -> tuple[str, float]:
    """The (method, α) of the best mean nDCG@10 over ``train`` (ties: the first in grid order)."""
    grid = list(next(iter(scores.values())))
    return max(grid, key=lambda g: (round(float(np.mean([scores[d][g] for d in train])), 10), -grid.index(g)))


def main(argv: list[str] | None = None) -> None:
    args, command, settings, model = one_model_cli(__doc__, "hybrid_alpha.py", argv)
    grid = [(m, a) for m in METHODS for a in ALPHAS]
    scores = {d: {g: ndcg(s, hybrid_run(s, *g)) for g in grid} for d, s in settings.items()}
    legs = {d: {leg: ndcg(s, s.legs[leg]) for leg in ("dense", "sparse")} for d, s in settings.items()}
    rows = []
    for held in [*settings, "all"]:
        train = [d for d in settings if d != held]
        g = choose(scores, train if held != "all" else list(settings))
        tests = [held] if held != "all" else list(settings)
        for d in tests:
            rows.append({"kind": "hybrid-alpha", "model": model,
                         "held_out": held, "dataset": d, "method": g[0], "alpha": g[1],
                         "ndcg@10_hybrid": round(scores[d][g], 4),
                         "ndcg@10_hybrid_default": round(scores[d][DEFAULT], 4),
                         "ndcg@10_dense": round(legs[d]["dense"], 4), "ndcg@10_sparse": round(legs[d]["sparse"], 4),
                         "command": command})
            print(f"held out {held:8s} {d:18s} {g[0]} α {g[1]}: hybrid {scores[d][g]:.4f} "
                  f"(default {scores[d][DEFAULT]:.4f}) dense {legs[d]['dense']:.4f} sparse {legs[d]['sparse']:.4f}")
    if not args.no_write:
        replace_rows(Path(args.out), "hybrid-alpha", model, rows)


if __name__ == "__main__":
    main()
