"""Per-model base weights of the leg sets with BM25 (dense+bm25, sparse+bm25,
dense+sparse+bm25), chosen leave-one-collection-out on dumped leg lists
(benchmarks/quality/dump_leg_lists.py), for the goal "dense+sparse+bm25 >= all-MiniLM-L6-v2".

The product's default for a leg set with BM25 is the "calibrated" z-score fusion
(retrieval/calibration.py): each LLM leg's base weight times a gate of its agreement with BM25
on the index's pseudo-queries. The base weights (fusion_plan.LEG_SET_WEIGHTS: dense 0.2, sparse
0.2, bm25 0.6 for the three legs) were chosen for *untrained* LLM legs, which sit far below BM25;
a trained embedder's legs can beat BM25 (the shipped v3 on MED: dense 0.760 vs BM25 0.667), so
the share BM25 gets is chosen per model, like the hybrid mode's α (benchmarks/defaults/hybrid_alpha.py).
The gate is kept: every candidate is the product's calibrated fusion (fusion_plan.fuse_legs with
fusion_plan.calibrated_weights) with other base weights.

For every held-out collection the candidate chosen on the *other* collections is applied to it.
Candidates must stay within 0.005 of BM25 on every training collection with the LLM legs
shuffled (each query gets the next query's lists, benchmarks/defaults/fusion_rules.py: useless legs must
not sink the fusion below BM25). Two rules pick among them (:func:`choose`): "mean", the best
mean nDCG@10, and "no-regress", the best worst change against the product default, then the
best mean — a shipped default must not lose on a collection it was chosen on. The row "all" is
the choice over every collection: what a model's registry entry ships under "no-regress"
(encoders/shipped.py, ``ShippedEmbedder.leg_sets``).

    python -m benchmarks.defaults.leg_set_weights /work/bg/dumps/*-v3.json.gz

Rows (``"kind": "leg-set-weights"``) go to benchmarks/results/fusion_transfer.json; rows of other
kinds are kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.defaults.fusion_rules import TOL, Setting, one_model_cli, ndcg, product_run, replace_rows, shuffled

LEG_SETS = (("dense", "bm25"), ("sparse", "bm25"), ("dense", "sparse", "bm25"))
BM25_SHARES = (0.2, 0.3, 0.4, 0.5, 0.6)
DENSE_FRACTIONS = (0.25, 0.5, 0.75)  # of the LLM share, in the three-leg set
GATE_POWERS = (1.0, 2.0, 3.0)  # of the calibration gate min(1, ā/τ)^power (τ: the leg set's own)


@dataclass(frozen=True)
class Candidate:
    weights: dict[str, float]
    gate_power: float

    def label(self) -> str:
        return "/".join(f"{k} {v:g}" for k, v in self.weights.items()) + f" power {self.gate_power:g}"

    def leg_set(self) -> dict:
        """As FusionConfig.leg_sets holds it."""
        return {"weights": dict(self.weights), "gate_power": self.gate_power}


def candidates(legs: tuple[str, ...]) -> list[Candidate]:
    """The grid of a leg set: BM25's share × (three legs) dense's part of the rest × gate power
    (weights sum to 1); the product default first."""
    from alignir.retrieval.fusion_plan import LEG_SET_CALIBRATED, LEG_SET_WEIGHTS

    w0 = LEG_SET_WEIGHTS["calibrated"][legs]
    default = Candidate({leg: w0[leg] / sum(w0.values()) for leg in legs}, LEG_SET_CALIBRATED[legs].power)
    out = [default]
    for b in BM25_SHARES:
        if len(legs) == 2:
            grid = [{legs[0]: round(1 - b, 4), "bm25": b}]
        else:
            grid = [{"dense": round((1 - b) * f, 4), "sparse": round((1 - b) * (1 - f), 4), "bm25": b}
                    for f in DENSE_FRACTIONS]
        out += [c for c in (Candidate(w, p) for w in grid for p in GATE_POWERS) if not _same(c, default)]
    return out


def _same(a: Candidate, b: Candidate) -> bool:
    return (a.gate_power == b.gate_power and a.weights.keys() == b.weights.keys()
            and all(abs(a.weights[k] - b.weights[k]) < 1e-9 for k in a.weights))


RULES = ("no-regress", "mean")


def choose(real: dict[str, list[float]], safe: dict[str, list[float]], bm25: dict[str, float],
           train: list[str], rule: str = "no-regress") -> int:
    """The index of the chosen candidate over the ``train`` collections. Only candidates within
    TOL of BM25 on every training collection's shuffled setting (``safe[d][i]``) qualify (when
    none does: the best worst shuffled margin). Among them, rule "mean": the best mean nDCG@10;
    rule "no-regress" (what ships): the best worst change against the product default
    (candidate 0) over the training collections, so a default that loses on a collection it was
    chosen on is never preferred to the product's own, then the best mean. Ties: the earlier
    candidate (the product default first)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    n = len(real[train[0]])

    def margin(i: int) -> float:
        return min(safe[d][i] - bm25[d] for d in train)

    def mean(i: int) -> float:
        return round(float(np.mean([real[d][i] for d in train])), 10)

    def worst_change(i: int) -> float:
        return round(min(real[d][i] - real[d][0] for d in train), 10)

    ok = [i for i in range(n) if margin(i) >= -TOL]
    if not ok:
        return max(range(n), key=lambda i: (margin(i), -i))
    if rule == "mean":
        return max(ok, key=lambda i: (mean(i), -i))
    return max(ok, key=lambda i: (worst_change(i), mean(i), -i))


def score_leg_set(settings: dict[str, Setting], legs: tuple[str, ...]
                  ) -> tuple[list[Candidate], dict[str, list[float]], dict[str, list[float]]]:
    """(candidates, nDCG@10 per collection and candidate, the same with the LLM legs shuffled),
    each run by the product's calibrated fusion (fusion_rules.product_run)."""
    cands = candidates(legs)

    def scores(s: Setting) -> list[float]:
        return [ndcg(s, product_run(s, legs, base=c.weights, gate_power=c.gate_power)) for c in cands]
    return cands, {d: scores(s) for d, s in settings.items()}, {d: scores(shuffled(s)) for d, s in settings.items()}


def main(argv: list[str] | None = None) -> None:
    args, command, settings, model = one_model_cli(__doc__, "leg_set_weights.py", argv)
    if any(s.pseudo is None for s in settings.values()):
        raise SystemExit("every dump needs its calibration pseudo-query lists (dump_leg_lists.py writes them)")
    bm25 = {d: ndcg(s, s.legs["bm25"]) for d, s in settings.items()}
    alone = {d: {leg: ndcg(s, s.legs[leg]) for leg in ("dense", "sparse")} for d, s in settings.items()}
    rows = []
    for legs in LEG_SETS:
        mode = "+".join(legs)
        cands, real, safe = score_leg_set(settings, legs)
        for rule, held in ((r, h) for r in RULES for h in [*settings, "all"]):
            train = [d for d in settings if d != held] if held != "all" else list(settings)
            i = choose(real, safe, bm25, train, rule)
            for d in ([held] if held != "all" else list(settings)):
                rows.append({"kind": "leg-set-weights", "model": model, "mode": mode, "rule": rule, "held_out": held,
                             "dataset": d, "leg_set": cands[i].leg_set(), "ndcg@10": round(real[d][i], 4),
                             "ndcg@10_default": round(real[d][0], 4), "default": cands[0].leg_set(),
                             "ndcg@10_shuffled": round(safe[d][i], 4), "bm25_ndcg@10": bm25[d],
                             "ndcg@10_dense": alone[d]["dense"], "ndcg@10_sparse": alone[d]["sparse"],
                             "command": command})
                print(f"{mode:18s} {rule:10s} held out {held:8s} {d:8s} {cands[i].label():46s} {real[d][i]:.4f} "
                      f"(default {real[d][0]:.4f}, shuffled {safe[d][i]:.4f}, bm25 {bm25[d]:.4f})", flush=True)
    if not args.no_write:
        replace_rows(Path(args.out), "leg-set-weights", model, rows)


if __name__ == "__main__":
    main()
