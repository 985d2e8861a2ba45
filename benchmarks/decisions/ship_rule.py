"""Which recorded adapter may replace the shipped default: the ship rule applied to the rows on file.

A run ships only if its three legs (dense + aligned-token + BM25, nDCG@10) beat the shipped
default's on at least four of the five evaluation collections and lose nowhere by more than
0.005 (quality), lose no setting of the text-form benchmark (benchmarks/results/text_form.json:
text in capitals, lower case without punctuation) by more than 0.005 against the default
(form), and index at least 1/1.25 of the default's documents/s on the CPU, measured against it
in one run (benchmarks/results/model_cost.json, every collection there: cost). A model not
measured for form or cost does not ship. A model's own text-form rows (those naming it) are
reported beside its verdict, measured on every setting or not: per row its legs, its margin over
the default's row and the benchmark's goals against its own original (three legs >= BM25 and
within 0.02 of the original, dense within 0.05 of it), and the decision line names what they cover. A run's rows are its scores in ``gpu_train.json``; a shipped model's are its product rows
in ``training.json`` (``alignir beir``, the harness ``gpu_train.py`` reproduces in fp32), and,
for a collection it has no product row of, the ``gpu_train.json`` row of the run it was shipped
from (:data:`SHIPPED_FROM`). Runs missing a collection are listed as incomplete, with what they
have so far; the other shipped models are judged beside the runs.

    python -m benchmarks.decisions.ship_rule                       # every recorded run, best first
    python -m benchmarks.decisions.ship_rule long-base-gemma3-270m-1500 --record   # also writes ship_rule.json
    python -m benchmarks.decisions.ship_rule --default smollm2-135m-alignir-v3     # against an earlier default

Result file: benchmarks/results/ship_rule.json (with --record; otherwise it prints). Either
way it prints its decision: the model to ship, or the default kept and why.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.quality.text_form import GOALS as FORM_GOALS
from benchmarks.quality.text_form import goals as form_goals

RESULTS = Path(__file__).resolve().parents[1] / "results"
COLLECTIONS = ("scifact", "med", "cisi", "cran", "adi")
LEGS = ("dense", "sparse", "hybrid", "dense+sparse+bm25")
RULED_LEG = "dense+sparse+bm25"
#: the gpu_train.json run a shipped adapter was packaged from (its rows stand in for missing product rows)
SHIPPED_FROM = {"smollm2-135m-alignir-v4": "gpu-distill-85",
                "gemma3-270m-alignir": "long-base-gemma3-270m-1500-mined-1500"}
MIN_WINS = 4
TOLERANCE = 0.005
#: the slowest a new default may index on the CPU, as a multiple of the default's time
MAX_SLOWDOWN = 1.25
#: the three-leg mode as the text-form benchmark names it
FORM_LEG = "dense+sparse+bm25"


@dataclass
class Verdict:
    run: str
    ships: bool
    complete: bool
    wins: int  # collections where the run's three legs are strictly above the default's
    worst_margin: float | None  # the run's lowest (run - default) over the collections it has
    margins: dict[str, float] = field(default_factory=dict)
    legs: dict[str, dict[str, float]] = field(default_factory=dict)  # collection -> leg -> nDCG@10
    quality: bool | None = None  # the quality rule alone (``ships`` also needs form and cost)
    form_worst: float | None = None  # the lowest (run - default) over the text-form settings; None: not measured
    cost_ratio: float | None = None  # the lowest documents/s ratio to the default; None: not measured
    form_rows: list[dict] = field(default_factory=list)  # the model's own text-form rows (:func:`own_form_rows`)
    form_settings: int = 0  # the default's text-form settings (collection, setting, text form)


def _form_model(row: dict, text_form: dict) -> str:
    return row.get("model", text_form.get("model"))


def _form_key(row: dict) -> tuple:
    """What a text-form row measures, whatever its model: (collection, setting, text form)."""
    return row["collection"], row["setting"], row.get("text_form")


def form_margin(text_form: dict | None, model: str, default_model: str) -> float | None:
    """The lowest three-leg nDCG@10 margin of ``model`` over the default on the text-form
    benchmark's settings (same collection, setting and text form), or None when ``model`` lacks
    any setting the default has (rows name their model, else the file's ``model``)."""
    if not text_form:
        return None
    rows: dict[str, dict[tuple, float]] = {}
    for r in text_form.get("rows", []):
        rows.setdefault(_form_model(r, text_form), {})[_form_key(r)] = float(r["ndcg@10"][FORM_LEG])
    base, mine = rows.get(default_model, {}), rows.get(model, {})
    if not base or not set(base) <= set(mine):
        return None
    return min(mine[k] - base[k] for k in base)


def own_form_rows(text_form: dict | None, model: str, default_model: str) -> list[dict]:
    """The text-form rows of ``model``, each with its legs (nDCG@10), its three-leg margin over the
    default's row of the same collection, setting and text form (None where the default has none),
    and the benchmark's goals recomputed against ``model``'s own original of that collection and form."""
    if not text_form:
        return []
    rows = text_form.get("rows", [])
    base = {_form_key(r): r for r in rows if _form_model(r, text_form) == default_model}
    mine = [r for r in rows if _form_model(r, text_form) == model]
    originals = {(r["collection"], r.get("text_form")): r for r in mine if r["setting"] == "original"}
    out = []
    for r in mine:
        g = form_goals(r, originals.get((r["collection"], r.get("text_form"))))
        other = base.get(_form_key(r))
        out.append({"collection": r["collection"], "text_form": r.get("text_form"), "setting": r["setting"],
                    "ndcg@10": {m: float(v) for m, v in r["ndcg@10"].items()},
                    "vs_default": None if other is None else round(float(r["ndcg@10"][FORM_LEG])
                                                                  - float(other["ndcg@10"][FORM_LEG]), 4),
                    "goals_met": g["met"], "goals": {k: v for k, v in g.items() if isinstance(v, bool) and k != "met"}})
    return out


def form_summary(v: Verdict) -> str:
    """What a verdict's own text-form rows cover: settings of the default's measured, goals met,
    lowest margin over the default; "not measured" without rows."""
    if not v.form_rows:
        return "not measured"
    margins = [r["vs_default"] for r in v.form_rows if r["vs_default"] is not None]
    met = sum(r["goals_met"] for r in v.form_rows)
    worst = f", worst {min(margins):+.3f}" if margins else ""
    return f"{len(margins)} of {v.form_settings} settings{worst}, goals met {met} of {len(v.form_rows)}"


def cost_ratio(model_cost: list | None, model: str, default_model: str) -> float | None:
    """The lowest documents/s ratio of ``model`` to the default over the collections of
    model_cost.json where both ran in one run (rows whose ``ratio_to`` is the default), or None."""
    ratios = [float(r["docs_per_s_ratio"]) for r in model_cost or []
              if r.get("kind") == "model-cost" and r.get("model") == model and r.get("ratio_to") == default_model]
    return min(ratios) if ratios else None


def with_form_and_cost(v: Verdict, text_form: dict | None, model_cost: list | None, default_model: str) -> Verdict:
    """``v`` with the form and cost rules applied (the quality rule's verdict kept in ``quality``)."""
    model = v.run.split(":", 1)[0]
    v.quality = v.ships
    v.form_worst = form_margin(text_form, model, default_model)
    v.form_rows = own_form_rows(text_form, model, default_model) if model != default_model else []
    v.form_settings = sum(_form_model(r, text_form) == default_model for r in (text_form or {}).get("rows", []))
    v.cost_ratio = cost_ratio(model_cost, model, default_model)
    v.ships = bool(v.quality and v.form_worst is not None and v.form_worst >= -TOLERANCE - 1e-9
                   and v.cost_ratio is not None and v.cost_ratio >= 1 / MAX_SLOWDOWN - 1e-9)
    return v


def decision(verdicts: list[Verdict], default_model: str) -> str:
    """One line: the model to ship (the first that passes, in the verdicts' order), or the default kept."""
    passing = [v for v in verdicts if v.ships]
    if passing:
        return f"decision: ship {passing[0].run} in place of {default_model}"
    quality = sum(bool(v.quality) for v in verdicts)
    measured = "".join(f"; {v.run} text form: {form_summary(v)}" for v in verdicts if v.form_rows)
    return (f"decision: keep {default_model}: no run passes quality, form and cost ({quality} of {len(verdicts)} "
            f"pass quality){measured}")


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
    head = "| run | ships | wins | worst margin | " + " | ".join(COLLECTIONS) + " | form worst | cost × |"
    lines = [f"three legs, nDCG@10 (margin over {default_model}); rule: >= {MIN_WINS} wins of "
             f"{len(COLLECTIONS)}, no loss over {TOLERANCE}; form: no text-form setting lost by more than "
             f"{TOLERANCE}; cost: documents/s >= 1/{MAX_SLOWDOWN:g} of the default's", "", head,
             "|" + "---|" * (6 + len(COLLECTIONS)),
             f"| {default_model} | (default) | | | "
             + " | ".join(f"{default[c][RULED_LEG]:.3f}" for c in COLLECTIONS) + " | | |"]
    for v in verdicts:
        cells = [f"{v.legs[c][RULED_LEG]:.3f} ({v.margins[c]:+.3f})" if c in v.margins else "–"
                 for c in COLLECTIONS]
        ships = "yes" if v.ships else ("no" if v.complete else "incomplete")
        worst = "" if v.worst_margin is None else f"{v.worst_margin:+.3f}"
        form = form_summary(v) if v.form_worst is None else f"{v.form_worst:+.3f}"
        cost = "not measured" if v.cost_ratio is None else f"{v.cost_ratio:.2f}"
        lines.append(f"| {v.run} | {ships} | {v.wins} | {worst} | " + " | ".join(cells) + f" | {form} | {cost} |")
    for v in verdicts:
        if v.form_rows:
            lines += ["", render_form(v, default_model)]
    return "\n".join(lines)


def render_form(v: Verdict, default_model: str) -> str:
    """The text-form rows of one verdict's model, with the benchmark's goals against its own original."""
    lines = [f"text form, {v.run} (nDCG@10; vs default: three legs over {default_model}'s row; goals: three legs "
             f">= BM25 and within {FORM_GOALS['three_legs_vs_original']} of the original, dense within "
             f"{FORM_GOALS['dense_vs_original']} of it)", "",
             "| collection | form | setting | three legs | dense | sparse | BM25 | vs default | goals |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in v.form_rows:
        n = r["ndcg@10"]
        vs = "–" if r["vs_default"] is None else f"{r['vs_default']:+.3f}"
        missed = [k for k, ok in r["goals"].items() if not ok]
        goal = "met" if r["goals_met"] else "missed: " + ", ".join(missed)
        lines.append(f"| {r['collection']} | {r['text_form']} | {r['setting']} | {n[FORM_LEG]:.3f} | {n['dense']:.3f} "
                     f"| {n['sparse']:.3f} | {n['bm25']:.3f} | {vs} | {goal} |")
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
    text_form = _read(RESULTS / "text_form.json")
    model_cost = _read(RESULTS / "model_cost.json")
    verdicts = [with_form_and_cost(v, text_form, model_cost, default_model)
                for v in judge_all(gpu_train, training, default_model, default)]
    if args.runs:
        unknown = set(args.runs) - {v.run for v in verdicts}
        if unknown:
            parser.error(f"no scored run named {', '.join(sorted(unknown))} in gpu_train.json")
        verdicts = [v for v in verdicts if v.run in args.runs]
    print(render(verdicts, default, default_model))
    print(decision(verdicts, default_model))
    if args.record:
        command = "python -m benchmarks.decisions.ship_rule --record" + (f" --default {args.default}" if args.default else "") \
            + "".join(f" {r}" for r in args.runs)
        out = {"command": command, "rule": {"leg": RULED_LEG, "min_wins": MIN_WINS, "tolerance": TOLERANCE,
                                            "default": default_model, "form_tolerance": TOLERANCE,
                                            "max_slowdown": MAX_SLOWDOWN},
               "default": default, "verdicts": [asdict(v) for v in verdicts],
               "text_form_rows": [{"model": v.run, **{k: r[k] for k in ("collection", "text_form", "setting")},
                                   **{m: r["ndcg@10"][m] for m in (FORM_LEG, "dense", "sparse", "bm25")},
                                   "vs_default": r["vs_default"], "goals_met": r["goals_met"],
                                   "goals_missed": [k for k, ok in r["goals"].items() if not ok]}
                                  for v in verdicts for r in v.form_rows],
               "decision": decision(verdicts, default_model)}
        atomic_write_json(RESULTS / "ship_rule.json", out, indent=1)
    return 0


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
