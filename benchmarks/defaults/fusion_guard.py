"""The per-query guard of the calibrated fusion (retrieval/fusion_guard.py): which shape and
ratio keep the default three legs at or above BM25 when the queries differ from the
pseudo-queries the index was calibrated on, at the least cost on natural queries.

Input: per-leg ranked-list dumps (benchmarks/quality/dump_leg_lists.py; also the text-form
benchmark's, which have the same format). Each dump gives these units, each scored with the
product's plan of dense+sparse+bm25 (``resolve_plan`` with the index's saved leg-set weights,
its calibration measured from the dump's pseudo-query lists, and the candidate guard; the
product's ``FusionPlan.fuse``), nDCG@10 against the unit's own BM25 leg:

- real: the dump as measured;
- shuffled: every query gets the LLM lists of the next query, and so does every pseudo-query
  (the calibration sees the defect, as an index would);
- shuffled-dense (full-length dumps only): the same for the dense leg alone;
- query-shift: only the real queries get the next query's LLM lists; the pseudo-queries keep
  their own, so the calibration cannot see it (queries unlike the corpus the index was
  calibrated on: the failure the guard is for).

Candidates: no guard, and every (ratio, floor, power, joint) of :data:`GRID` (floor < ratio).
The joint shape (one factor for both LLM legs, from the mean of their shares) was added to the
grid after a first run over two ADI dumps showed the per-leg ramp's noise on an 82-document
collection; the selection rule below was fixed before that run and is unchanged.

Selection rule, fixed before any result was seen:

1. cost(c) = mean over the real units of nDCG@10(no guard) - nDCG@10(c);
2. worst(c) = min over every unit of nDCG@10(c) - BM25's nDCG@10 on that unit;
3. among the candidates with cost <= 0.005 (:data:`COST`), the best worst(c), rounded to 0.001;
   ties go to the lower cost (rounded to 0.001), then to the simpler shape (power 1 before 2,
   floor 0 before higher, the lower ratio, per leg before joint).

It prints the table and writes benchmarks/results/fusion_guard.json: the candidates, every
unit's nDCG@10 under each, the choice, the goal check (three legs >= BM25 - 0.005 on every
unit), the command and the load average.

    nice -n 10 python -m benchmarks.defaults.fusion_guard /work/scratch/guard/lists/*.json.gz

With ``--held-out``, nothing is chosen: the shipped guard (:data:`CALIBRATED_GUARD`) and no
guard are scored on the units of dumps the choice never saw (other collections), and the rows
go under ``held_out`` in the same file, beside the choice they check:

    nice -n 10 python -m benchmarks.defaults.fusion_guard --held-out /work/scratch/text_form/lists/cisi-*.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from alignir.encoders.shipped import SHIPPED
from alignir.retrieval.config import FusionConfig
from alignir.retrieval.fusion import ranked
from alignir.retrieval.fusion_guard import CALIBRATED_GUARD, FusionGuard
from alignir.retrieval.fusion_plan import resolve_plan
from benchmarks.defaults.fusion_rules import Setting, calibration, load, ndcg, shuffled

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "fusion_guard.json"
LEGS = ("dense", "sparse", "bm25")
MODE = "+".join(LEGS)
COST = 0.005  # the most mean nDCG@10 the guard may cost the real units
TOL = 0.005   # the goal: three legs >= BM25 - 0.005 on every unit
GRID = [FusionGuard(ratio=r, floor=f, power=p, joint=j) for j in (False, True)
        for r in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5) for f in (0.0, 0.25, 0.5) if f < r for p in (1.0, 2.0)]
OFF = FusionGuard(ratio=0.0)


def label(g: FusionGuard) -> str:
    return "off" if not g.active else f"r{g.ratio:g}-f{g.floor:g}-p{g.power:g}" + ("-joint" if g.joint else "")


def query_shift(s: Setting) -> Setting:
    """Every real query gets the LLM lists of the next query; the pseudo-queries keep theirs."""
    qids = sorted(s.legs["bm25"])
    nxt = dict(zip(qids, qids[1:] + qids[:1]))
    legs = {leg: ({q: runs.get(nxt[q], {}) for q in qids} if leg != "bm25" else runs)
            for leg, runs in s.legs.items()}
    return Setting(s.name + "-query-shift", s.dataset, s.model, s.max_length, s.qrels, legs, s.n_docs, s.pseudo)


def units(s: Setting) -> list[tuple[str, Setting]]:
    out = [("real", s), ("shuffled", shuffled(s)), ("query-shift", query_shift(s))]
    if s.max_length >= 512:
        out.insert(2, ("shuffled-dense", shuffled(s, ("dense",))))
    return out


def fusion_config(path: str, model: str) -> FusionConfig:
    """The fusion config of a dump's index: its manifest's when the index is still there, else
    the shipped model's leg sets, else alignir's defaults."""
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text())
        return FusionConfig(**manifest["params"]["config"]["fusion"])
    except (OSError, KeyError, ValueError, TypeError):
        shipped = SHIPPED.get(model)
        return FusionConfig(leg_sets=shipped.leg_sets) if shipped else FusionConfig()


def score(s: Setting, cfg: FusionConfig, guard: FusionGuard) -> float:
    """nDCG@10 of the product's default three-leg plan with ``guard`` on one unit."""
    plan = replace(resolve_plan(MODE, LEGS, config=cfg, calibration=calibration(s)), guard=guard)
    run = {q: dict(ranked(plan.fuse([s.legs[leg].get(q, {}) for leg in LEGS], s.n_docs), 10))
           for q in s.legs["bm25"]}
    return ndcg(s, run)


def bm25(s: Setting) -> float:
    return ndcg(s, {q: dict(ranked(run, 10)) for q, run in s.legs["bm25"].items()})


def choose(table: list[dict], candidates: dict[str, FusionGuard]) -> tuple[str, dict]:
    """The selection rule of the module docstring over ``table`` (one row per unit with
    ``kind``, ``bm25`` and ``ndcg`` {candidate label: value}; ``candidates``: {label: guard},
    "off" among them)."""
    real = [u for u in table if u["kind"] == "real"]
    stats = {}
    for c in candidates:
        cost = sum(u["ndcg"]["off"] - u["ndcg"][c] for u in real) / len(real)
        worst = min(u["ndcg"][c] - u["bm25"] for u in table)
        stats[c] = {"cost": round(cost, 4), "worst": round(worst, 4)}
    order = {c: i for i, c in enumerate(candidates)}
    eligible = [c for c in candidates if stats[c]["cost"] <= COST]

    def key(c: str):
        g = candidates[c]
        return (-round(stats[c]["worst"], 3), round(stats[c]["cost"], 3), g.power, g.floor, g.ratio, g.joint,
                order[c])
    return min(eligible, key=key), stats


def unit_table(paths: list[str], candidates: list[FusionGuard]) -> list[dict]:
    """One row per unit of every dump: its kind, BM25's nDCG@10 and each candidate's."""
    table = []
    for path in paths:
        d = load(Path(path))
        if d.pseudo is None:
            print(f"skip {path}: no pseudo-query lists (dump_leg_lists.py --pseudo-only adds them)")
            continue
        index = json.load(gzip.open(path, "rt"))["index"]
        cfg = fusion_config(index, d.model)
        for kind, u in units(d):
            row = {"unit": u.name, "kind": kind, "dataset": d.dataset, "model": d.model,
                   "max_length": d.max_length, "bm25": bm25(u),
                   "ndcg": {label(g): score(u, cfg, g) for g in candidates}}
            table.append(row)
            print(f"{u.name:60s} bm25 {row['bm25']:.4f} off {row['ndcg']['off']:.4f} "
                  f"default {row['ndcg'].get(label(CALIBRATED_GUARD), float('nan')):.4f}", flush=True)
    return table


KINDS = ("real", "shuffled", "shuffled-dense", "query-shift")


def margins(rows: list[dict]) -> tuple[dict, dict]:
    """Over held-out rows: the worst margin of the guard to BM25 by kind, and whether each kind
    meets the goal (three legs >= BM25 - 0.005 on every unit of it)."""
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    worst = {k: round(min(r["guard"] - r["bm25"] for r in rows if r["kind"] == k), 4) for k in kinds}
    return worst, {k: all(r["guard"] - r["bm25"] >= -TOL for r in rows if r["kind"] == k) for k in kinds}


def write_held_out(out: Path, table: list[dict], command: str, load_before: list[str], write: bool = True) -> dict:
    """The shipped guard on dumps the choice never saw, merged by unit under ``held_out`` in ``out``
    beside the recorded choice: per unit BM25, no guard and the guard, the worst margins, the goal."""
    shipped = label(CALIBRATED_GUARD)
    rows = [{"unit": u["unit"], "kind": u["kind"], "dataset": u["dataset"], "model": u["model"], "bm25": u["bm25"],
             "off": u["ndcg"]["off"], "guard": u["ndcg"][shipped]} for u in table]
    for r in rows:
        print(f"{r['unit']:60s} bm25 {r['bm25']:.4f} off {r['off']:.4f} guard {r['guard']:.4f}")
    result = json.loads(out.read_text()) if out.is_file() else {}
    before = result.get("held_out", {})
    merged = {r["unit"]: r for r in before.get("units", [])} | {r["unit"]: r for r in rows}
    commands = [c for c in before.get("commands", []) if c != command] + [command]
    worst, meets = margins(list(merged.values()))
    held = {"guard": shipped, "worst_margin_by_kind": worst, "meets_bm25_minus_0.005": meets,
            "units": list(merged.values()), "commands": commands, "loadavg_before": load_before,
            "loadavg_after": Path("/proc/loadavg").read_text().split()[:3]}
    print(f"held out, {shipped}: worst margin by kind {worst}; goal met {meets}")
    if write:
        result["held_out"] = held
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote held_out to {out}")
    return held


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lists", nargs="+", help="dump_leg_lists.py outputs (with pseudo-query lists)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--held-out", action="store_true",
                    help="score the shipped guard and no guard on these dumps; keep the recorded choice")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.defaults.fusion_guard " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    candidates = [OFF, CALIBRATED_GUARD] if args.held_out else [OFF, *GRID]
    table = unit_table(args.lists, candidates)
    if args.held_out:
        return write_held_out(Path(args.out), table, command, load_before, write=not args.no_write)
    labels = [label(g) for g in candidates]
    chosen, stats = choose(table, {label(g): g for g in candidates})
    print(f"\n{'candidate':18s} {'cost':>7s} {'worst':>7s}")
    for c in labels:
        print(f"{c:18s} {stats[c]['cost']:7.4f} {stats[c]['worst']:7.4f}" + ("  <- chosen" if c == chosen else ""))
    goal = {kind: min((u["ndcg"][chosen] - u["bm25"] for u in table if u["kind"] == kind), default=None)
            for kind in KINDS}
    result = {"kind": "fusion-guard", "mode": MODE, "selection": {"cost_at_most": COST, "rule": "best worst "
              "margin to BM25 over every unit among candidates costing the real units <= 0.005 mean nDCG@10"},
              "candidates": {label(g): g.to_dict() for g in candidates}, "stats": stats, "chosen": chosen,
              "chosen_guard": next(g for g in candidates if label(g) == chosen).to_dict(),
              "worst_margin_by_kind": {k: None if v is None else round(v, 4) for k, v in goal.items()},
              "meets_bm25_minus_0.005": all(u["ndcg"][chosen] - u["bm25"] >= -TOL for u in table),
              "units": table, "command": command, "loadavg_before": load_before,
              "loadavg_after": Path("/proc/loadavg").read_text().split()[:3]}
    print(f"chosen {chosen}: worst margin by kind {result['worst_margin_by_kind']}")
    if not args.no_write:
        out = Path(args.out)
        if out.is_file() and "held_out" in (previous := json.loads(out.read_text())):
            result["held_out"] = previous["held_out"]  # checks of an earlier choice, kept until re-run
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
