"""Which recorded adapter may replace the shipped default: the ship rule applied to the rows on file.

A run ships only if its three legs (dense + aligned-token + BM25, nDCG@10) beat the shipped
default's on at least four of the five evaluation collections and lose nowhere by more than
0.005. A run's rows are its scores in ``gpu_train.json``; a shipped model's are its product rows
in ``training.json`` (``alignir beir``, the harness ``gpu_train.py`` reproduces in fp32), and,
for a collection it has no product row of, the ``gpu_train.json`` row of the run it was shipped
from (:data:`SHIPPED_FROM`). Runs missing a collection are listed as incomplete, with what they
have so far; the other shipped models are judged beside the runs.

    python -m benchmarks.decisions.ship_rule                       # every recorded run, best first
    python -m benchmarks.decisions.ship_rule long-base-gemma3-270m-1500 --record   # also writes ship_rule.json
    python -m benchmarks.decisions.ship_rule --default smollm2-135m-alignir-v3     # against an earlier default

Result file: benchmarks/results/ship_rule.json (with --record; otherwise it prints).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
COLLECTIONS = ("scifact", "med", "cisi", "cran", "adi")
LEGS = ("dense", "sparse", "hybrid", "dense+sparse+bm25")
RULED_LEG = "dense+sparse+bm25"
#: the gpu_train.json run a shipped adapter was packaged from (its rows stand in for missing product rows)
SHIPPED_FROM = {"smollm2-135m-alignir-v4": "gpu-distill-85",
                "gemma3-270m-alignir": "long-base-gemma3-270m-1500-mined-1500"}
MIN_WINS = 4
TOLERANCE = 0.005


@dataclass
class Verdict:
    run: str
    ships: bool
    complete: bool
    wins: int  # collections where the run's three legs are strictly above the default's
    worst_margin: float | None  # the run's lowest (run - default) over the collections it has
    margins: dict[str, float] = field(default_factory=dict)
    legs: dict[str, dict[str, float]] = field(default_factory=dict)  # collection -> leg -> nDCG@10


def shipped_rows(training: dict, gpu_train: dict, model: str) -> dict[str, dict[str, float]]:
    """collection -> leg -> nDCG@10 of a shipped model: its product rows in ``training.json``,
    else the rows of the run it was shipped from."""
    source = SHIPPED_FROM.get(model)
    fallback = run_rows(gpu_train["runs"][source]) if source else {}
    out: dict[str, dict[str, float]] = {}
    for collection in COLLECTIONS:
        row = training["runs"].get(f"{collection}/{model}")
        if row is not None:
            out[collection] = {leg: float(row[f"ndcg@10_{leg}"]) for leg in LEGS}
        elif collection in fallback:
            out[collection] = fallback[collection]
    return out


def shipped_names(training: dict) -> set[str]:
    """The shipped models that have product rows in ``training.json``."""
    return {key.split("/", 1)[1] for key, row in training["runs"].items() if row.get("shipped")}


def default_rows(training: dict, gpu_train: dict, model: str) -> dict[str, dict[str, float]]:
    """:func:`shipped_rows` of the default, which must cover every collection."""
    out = shipped_rows(training, gpu_train, model)
    missing = [c for c in COLLECTIONS if c not in out]
    if missing:
        raise KeyError(f"{model} has no row on {', '.join(missing)} (training.json, or its run in gpu_train.json)")
    return out


def run_rows(run: dict, label: str = "trained") -> dict[str, dict[str, float]]:
    """collection -> leg -> nDCG@10 of one ``gpu_train.json`` run (its ``label`` adapter)."""
    scores = run.get("scores", {}).get(label, {})
    return {c: {leg: float(scores[c]["metrics"][leg]["ndcg@10"]) for leg in LEGS if leg in scores[c]["metrics"]}
            for c in COLLECTIONS if c in scores}


def judge(name: str, rows: dict[str, dict[str, float]], default: dict[str, dict[str, float]],
          min_wins: int = MIN_WINS, tolerance: float = TOLERANCE) -> Verdict:
    """The ship rule on one run's rows against the default's."""
    margins = {c: rows[c][RULED_LEG] - default[c][RULED_LEG] for c in COLLECTIONS if RULED_LEG in rows.get(c, {})}
    complete = len(margins) == len(COLLECTIONS)
    wins = sum(m > 0 for m in margins.values())
    worst = min(margins.values()) if margins else None
    # a loss of exactly the tolerance is allowed (1e-9: the float error of a difference of two scores)
    ships = complete and wins >= min_wins and worst is not None and worst >= -tolerance - 1e-9
    return Verdict(name, ships, complete, wins, worst, margins, rows)


def judge_all(gpu_train: dict, training: dict, default_model: str,
              default: dict[str, dict[str, float]]) -> list[Verdict]:
    """Every run (and every scored label) of ``gpu_train.json`` but the default's own, and every
    other shipped model, against the default's rows (:func:`default_rows`): complete runs first,
    then by wins and by worst margin."""
    verdicts = []
    for name, run in gpu_train["runs"].items():
        if name == SHIPPED_FROM.get(default_model):
            continue
        for label in run.get("scores", {}):
            rows = run_rows(run, label)
            if rows:
                verdicts.append(judge(name if label == "trained" else f"{name}:{label}", rows, default))
    for model in sorted(shipped_names(training) - {default_model}):
        rows = shipped_rows(training, gpu_train, model)
        if rows:
            verdicts.append(judge(model, rows, default))
    return sorted(verdicts, key=lambda v: (not v.complete, -v.wins, -(v.worst_margin or -1.0), v.run))


def render(verdicts: list[Verdict], default: dict[str, dict[str, float]], default_model: str) -> str:
    head = "| run | ships | wins | worst margin | " + " | ".join(COLLECTIONS) + " |"
    lines = [f"three legs, nDCG@10 (margin over {default_model}); rule: >= {MIN_WINS} wins of "
             f"{len(COLLECTIONS)}, no loss over {TOLERANCE}", "", head,
             "|" + "---|" * (4 + len(COLLECTIONS)),
             f"| {default_model} | (default) | | | "
             + " | ".join(f"{default[c][RULED_LEG]:.3f}" for c in COLLECTIONS) + " |"]
    for v in verdicts:
        cells = [f"{v.legs[c][RULED_LEG]:.3f} ({v.margins[c]:+.3f})" if c in v.margins else "–"
                 for c in COLLECTIONS]
        ships = "yes" if v.ships else ("no" if v.complete else "incomplete")
        worst = "" if v.worst_margin is None else f"{v.worst_margin:+.3f}"
        lines.append(f"| {v.run} | {ships} | {v.wins} | {worst} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="gpu_train.json runs to judge (default: all)")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/ship_rule.json")
    parser.add_argument("--default", default=None, help="the shipped model to beat (default: alignir's default)")
    args = parser.parse_args(argv)
    from alignir.encoders.shipped import DEFAULT_MODEL
    from alignir.io import atomic_write_json

    default_model = args.default or DEFAULT_MODEL
    training = json.loads((RESULTS / "training.json").read_text())
    gpu_train = json.loads((RESULTS / "gpu_train.json").read_text())
    default = default_rows(training, gpu_train, default_model)
    verdicts = judge_all(gpu_train, training, default_model, default)
    if args.runs:
        unknown = set(args.runs) - {v.run for v in verdicts}
        if unknown:
            parser.error(f"no scored run named {', '.join(sorted(unknown))} in gpu_train.json")
        verdicts = [v for v in verdicts if v.run in args.runs]
    print(render(verdicts, default, default_model))
    if args.record:
        command = "python -m benchmarks.decisions.ship_rule --record" + (f" --default {args.default}" if args.default else "") \
            + "".join(f" {r}" for r in args.runs)
        out = {"command": command, "rule": {"leg": RULED_LEG, "min_wins": MIN_WINS, "tolerance": TOLERANCE,
                                            "default": default_model},
               "default": default, "verdicts": [asdict(v) for v in verdicts]}
        atomic_write_json(RESULTS / "ship_rule.json", out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
