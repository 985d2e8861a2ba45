"""Which fusion rule never sinks far below BM25? Candidate rules compared on dumped per-leg lists
(benchmarks/quality/dump_leg_lists.py), chosen leave-one-collection-out.

Every setting is one dump: a collection, a model and a document max length (short lengths make
the LLM legs deliberately bad: the degraded setting), plus, for every full-length dump, a
"shuffled" setting whose LLM legs are another query's lists (useless legs, as the LLM legs on
long news articles: dense .074, sparse .135 vs BM25 .640). For every held-out *collection*,
each rule's parameters — and then the rule itself — are chosen on the settings of the other
collections only (never on the held-out collection's qrels, in any of its settings), for each
leg set with BM25 (the rules scale today's base weights of that set); the choice is applied
to every setting of the held-out collection. The selection criterion, over the training
(leg set, setting) units of the leg set: among the (rule, parameters) whose fused nDCG@10 stays >= BM25 - 0.005
on every unit (the shuffled ones included), the best mean nDCG@10 over the real units (the
shuffled ones only constrain); when none does, the best worst-case margin. The product
default is the same criterion over all units.

The rule "calibrated" is the product default (retrieval/calibration.py): one gate per leg and
collection from the mean agreement of the leg with BM25 on 64 pseudo-queries cut from the
corpus, stored in the dump by dump_leg_lists.py (in a shuffled setting the pseudo-queries' LLM
lists are shuffled the same way, so the calibration sees the defect as the index would).

    python -m benchmarks.defaults.fusion_rules /work/bg/out/fusion/lists/*.json.gz

Prints the per-rule table and writes the held-out rows and the rows of the shipped default
(the Searcher's LEG_SET_DEFAULTS through fusion_plan.fuse_legs, product code) into benchmarks/results/fusion_transfer.json
(``"kind": "fusion-rule"`` rows; rows of other kinds are kept), each with the exact command.
Leg lists are cut to the fused modes' depth (FusionConfig.depth = 100) before fusing.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from alignir.retrieval import fusion as F
from alignir.retrieval.calibration import MEASURE, FusionCalibration, mean_agreement
from alignir.retrieval.config import FusionConfig
from alignir.retrieval.metrics import evaluate

ROOT = Path(__file__).resolve().parents[2]
DEPTH = FusionConfig().depth
MODES = {("dense", "bm25"): [0.4, 0.6], ("sparse", "bm25"): [0.4, 0.6],
         ("dense", "sparse", "bm25"): [0.2, 0.2, 0.6]}  # today's LEG_SET_DEFAULTS weights
TOL = 0.005  # the goal: fused >= BM25 - 0.005 nDCG@10
GAIN = 0.02  # gain retention is judged where z-score gains at least this (4 x TOL) over BM25


@dataclass
class Setting:
    """One dump: name like "med-smollm2-135m-ml512", its collection, qrels and leg lists."""

    name: str
    dataset: str
    model: str
    max_length: int
    qrels: dict
    legs: dict[str, dict[str, dict[str, float]]]
    n_docs: int | None = None  # the collection size (the agree gate's chance correction)
    pseudo: dict[str, list[dict[str, float]]] | None = None  # leg lists of the calibration pseudo-queries


def shuffled(s: Setting, which: tuple[str, ...] = ("dense", "sparse")) -> Setting:
    """The degraded setting at its worst: every query gets the LLM legs (``which``: dense and
    sparse; name suffix "-shuffled", else "-shuffled-LEG") of the next query in id order —
    lists with real score distributions that carry no information about this query (BM25 and
    the other legs stay their own)."""
    qids = sorted(s.legs["bm25"])
    nxt = dict(zip(qids, qids[1:] + qids[:1]))
    legs = {leg: ({q: runs.get(nxt[q], {}) for q in qids} if leg in which else runs)
            for leg, runs in s.legs.items()}
    suffix = "-shuffled" if set(which) == {"dense", "sparse"} else "-shuffled-" + "-".join(which)
    pseudo = None
    if s.pseudo is not None:  # the calibration sees the same defect: each pseudo-query gets the next one's lists
        pseudo = {leg: (runs[1:] + runs[:1] if leg in which else runs) for leg, runs in s.pseudo.items()}
    return Setting(s.name + suffix, s.dataset, s.model, s.max_length, s.qrels, legs, s.n_docs, pseudo)


def load(path: Path, depth: int = DEPTH) -> Setting:
    d = json.load(gzip.open(path, "rt"))
    legs = {leg: {q: {doc: float(s) for doc, s in lst[:depth]} for q, lst in runs.items()}
            for leg, runs in d["legs"].items()}
    spec = d["model"]
    ml = int(spec.get("options", {}).get("max_length", 512))
    name = Path(path).name.removesuffix(".json.gz")
    pseudo = None
    if "pseudo" in d:
        pseudo = {leg: [{doc: float(v) for doc, v in lst} for lst in runs] for leg, runs in d["pseudo"]["legs"].items()}
    return Setting(name, d["dataset"], model_label(spec), ml, d["qrels"], legs, d.get("n_docs") or _n_docs(d["index"]),
                   pseudo)


def one_model_cli(doc: str, script: str, argv: list[str] | None
                  ) -> tuple[argparse.Namespace, str, dict[str, Setting], str]:
    """The command line of a per-model choice over dumps (hybrid_alpha.py, leg_set_weights.py):
    (arguments, the command as run, {collection: setting}, model). The dumps must be one
    model's, one per collection, two collections at least."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("lists", nargs="+", help="dump_leg_lists.py outputs of ONE model, one per collection")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/fusion_transfer.json"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    command = f"python benchmarks/{script} " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    settings = {s.dataset: s for s in (load(Path(p)) for p in args.lists)}
    models = {s.model for s in settings.values()}
    if len(models) != 1 or len(settings) != len(args.lists) or len(settings) < 2:
        raise SystemExit(f"give one dump per collection of one model, two collections at least "
                         f"(got {len(args.lists)} dumps of models {sorted(models)})")
    return args, command, settings, next(iter(models))


def replace_rows(out: Path, kind: str, model: str, rows: list[dict]) -> None:
    """Write ``rows`` into the results list at ``out`` in place of its rows of this kind and model
    (rows of other kinds and models are kept)."""
    old = json.loads(out.read_text()) if out.exists() else []
    keep = [r for r in old if not (r.get("kind") == kind and r.get("model") == model)]
    out.write_text(json.dumps(keep + rows, indent=1) + "\n")
    print(f"wrote {len(rows)} rows to {out}")


def model_label(spec: dict) -> str:
    """The model of an index's embedder spec as rows name it: a shipped adapter by its registered
    name (smollm2-135m-alignir-v3), another adapter as MODEL+FOLDER, else the model."""
    from alignir.encoders.shipped import BUILTIN_PREFIX

    adapter = str((spec.get("options") or {}).get("adapter") or "")
    if adapter.startswith(BUILTIN_PREFIX):
        return adapter[len(BUILTIN_PREFIX):]
    return f"{spec['model']}+{Path(adapter).name}" if adapter else spec["model"]


def _n_docs(index: str) -> int | None:
    """The document count of a dump's index (dumps written before they held ``n_docs``)."""
    try:
        return int(json.loads((Path(index) / "manifest.json").read_text())["counts"]["docs"])
    except (OSError, KeyError, ValueError):
        return None


# ----------------------------------------------------------------------------- per-query state
@dataclass
class Query:
    """One query of one mode: z-scores of the union of its leg lists (missing = the leg's
    minimum z, as fusion.zscore), each leg's top docs, and its raw lists."""

    docs: list[str]
    z: np.ndarray            # (legs, docs)
    lists: list[dict]        # raw leg lists (empty ones kept, for the product rules)
    present: np.ndarray      # bool per leg: list non-empty
    top: list[list[str]]     # each leg's ranking (ids best first)
    n_docs: int | None = None  # the collection size
    calibration: FusionCalibration | None = None  # the setting's (product) calibration
    legs: tuple[str, ...] = ()


def prepare(setting: Setting, legs: tuple[str, ...]) -> dict[str, Query]:
    out = {}
    cal = calibration(setting)
    for q in setting.legs["bm25"]:
        lists = [setting.legs[leg].get(q, {}) for leg in legs]
        docs = sorted({d for r in lists for d in r})
        z = np.zeros((len(legs), len(docs)))
        for i, run in enumerate(lists):
            if run:
                norm, lo = F._normalised(run, "zscore")
                z[i] = [norm.get(d, lo) for d in docs]
        out[q] = Query(docs, z, lists, np.array([bool(r) for r in lists]),
                       [[d for d, _ in F.ranked(r)] for r in lists], setting.n_docs, cal, legs)
    return out


def calibration(setting: Setting) -> FusionCalibration | None:
    """The product's calibration of a setting (retrieval/calibration.py) from its dumped
    pseudo-query lists (None: the dump has none)."""
    if setting.pseudo is None:
        return None
    agreement = mean_agreement(setting.pseudo, setting.n_docs)
    return FusionCalibration(agreement=agreement, queries=len(setting.pseudo["bm25"]))


def overlap(a: list[str], b: list[str], k: int) -> float:
    """|top-k(a) ∩ top-k(b)| / k."""
    return len(set(a[:k]) & set(b[:k])) / k


# ----------------------------------------------------------------------------- candidate rules
# Each rule maps (query state, base weights, **params) -> per-leg weights for a z-score sum
# (None: the rule scores documents itself and returns {doc: score}).

def w_fixed(q: Query, base, **_):
    return np.array(base, float)


def w_agree(q: Query, base, k=10, tau=0.5, power=1.0, floor=0.0, cap=1.0, chance=False, kb=None, **_):
    """LLM leg i weighted by cap · base_i · g^power, g = clip((o - floor) / (tau - floor), 0, 1),
    o = overlap(top-k_i, top-k_bm25); ``chance``: o corrected for the overlap two random top-k
    picks from the pooled candidates U would have, c = k/|U|: o' = max(0, (o - c) / (1 - c))."""
    w = np.array(base, float)
    a = len(base) - 1  # bm25 is last
    if not q.present[a]:
        return w
    kb = kb or k
    c = min(1.0, kb / len(q.docs))
    if chance and c >= 1.0:
        return w
    for i in range(a):
        o = len(set(q.top[i][:k]) & set(q.top[a][:kb])) / k
        if chance:
            o = max(0.0, (o - c) / (1.0 - c))
        w[i] *= cap * min(1.0, max(0.0, o - floor) / (tau - floor)) ** power
    return w


def w_agree_params(q: Query, base, cap=1.0, **params):
    """The product's gate (fusion.agree_weights with AgreeParams(**params), the collection size
    for the chance correction), the LLM legs' base weights scaled by ``cap``."""
    a = len(base) - 1
    w = np.array(base, float) * np.r_[np.full(a, cap), 1.0]
    runs = [r for r in q.lists]
    if not q.present[a]:
        return w
    return np.array(F.agree_weights(runs, list(w), anchor=a, params=F.AgreeParams(**params), n_docs=q.n_docs))


def w_calibrated(q: Query, base, tau=0.2, power=1.0, **_):
    """The product's "calibrated" rule: LLM leg i at base_i · gate(ā_i) on every query, ā_i its
    mean chance-corrected agreement with BM25 on the setting's pseudo-queries
    (fusion_plan.calibrated_weights with the gate AgreeParams(tau, power))."""
    if q.calibration is None:
        return np.array(base, float)
    gate = F.AgreeParams(tau=tau, power=power)
    return np.array([w * q.calibration.gate(leg, gate) for w, leg in zip(base, q.legs)], float)


def w_consensus(q: Query, base, k=10, tau=0.5, **_):
    """Every leg (BM25 too) weighted by its mean top-k overlap with the other legs (symmetric)."""
    n = len(base)
    w = np.array(base, float)
    for i in range(n):
        others = [overlap(q.top[i], q.top[j], k) for j in range(n) if j != i and q.present[j]]
        if others:
            w[i] *= min(1.0, float(np.mean(others)) / tau)
    return w


def w_spread(q: Query, base, m=10, tau=0.5, **_):
    """LLM leg i weighted by min(1, d_i / tau), d_i = (s_1 - s_m) / (s_1 - s_last): the share
    of the list's score range spent inside its top m (a flat top carries little evidence)."""
    w = np.array(base, float)
    for i in range(len(base) - 1):
        s = np.sort(np.array(list(q.lists[i].values())))[::-1] if q.lists[i] else np.zeros(0)
        if len(s) > m and s[0] > s[-1]:
            w[i] *= min(1.0, (s[0] - s[m - 1]) / (s[0] - s[-1]) / tau)
    return w


def w_topgap(q: Query, base, m=10, tau=1.0, **_):
    """LLM leg i weighted by min(1, g_i / tau), g_i = mean z of its top m minus mean z of
    BM25's top m (how far the leg's top stands out of its list compared with BM25's)."""
    w = np.array(base, float)
    a = len(base) - 1
    if not q.present[a]:
        return w
    def g(i):
        order = np.argsort(-q.z[i], kind="stable")[:m]
        return float(q.z[i][order].mean())
    ga = g(a)
    for i in range(a):
        if q.present[i] and ga > 0:
            w[i] *= min(1.0, max(0.0, g(i) / ga) / tau)
    return w


def s_rrf(q: Query, base, k=60, weighted=False, **_):
    runs = [r for r in q.lists if r]
    ws = [b for b, r in zip(base, q.lists) if r] if weighted else None
    return F.rrf(runs, k=k, weights=ws) if runs else {}


RULES: dict[str, tuple[Callable, list[dict]]] = {
    "zscore": (w_fixed, [{}]),
    "rrf": (s_rrf, [dict(k=60), dict(k=60, weighted=True)]),
    "agree": (w_agree, [dict(k=k, tau=t, power=p, floor=f, cap=c) for k in (5, 10, 20)
                        for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7) for p in (1.0, 2.0)
                        for f in (0.0, 0.1) if f < t for c in (1.0, 1.5, 2.0)]),
    "agree-chance": (w_agree, [dict(k=k, tau=t, power=p, cap=c, chance=True) for k in (5, 10, 20)
                               for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7) for p in (1.0, 2.0)
                               for c in (1.0, 1.5, 2.0)]),
    "agree-deep": (w_agree, [dict(k=k, kb=kb, tau=t, cap=c, chance=True) for k in (5, 10)
                             for kb in (30, 100) for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7)
                             for c in (1.0, 1.5, 2.0)]),
    "agree-corpus": (w_agree_params, [dict(k=10, depth=50, symmetric=True, chance="corpus", tau=t, power=p, cap=c)
                                      for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7) for p in (1.0, 2.0)
                                      for c in (1.0, 1.25, 1.5)]),
    "calibrated": (w_calibrated, [dict(tau=t, power=p) for t in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
                                  for p in (1.0, 2.0)]),
    "consensus": (w_consensus, [dict(k=k, tau=t) for k in (5, 10, 20)
                                for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)]),
    "spread": (w_spread, [dict(m=m, tau=t) for m in (5, 10, 20) for t in (0.2, 0.4, 0.6, 0.8, 1.0)]),
    "topgap": (w_topgap, [dict(m=m, tau=t) for m in (5, 10) for t in (0.5, 0.7, 0.9, 1.0, 1.2)]),
}


def apply_rule(prepared: dict[str, Query], base, rule: str, params: dict) -> dict[str, dict[str, float]]:
    """Top-10 fused run {qid: {doc: score}} of a rule (enough for nDCG@10)."""
    fn, _ = RULES[rule]
    run = {}
    for qid, q in prepared.items():
        if not q.present.any():
            run[qid] = {}
            continue
        if fn is s_rrf:
            run[qid] = dict(F.ranked(fn(q, base, **params), 10))
            continue
        w = fn(q, base, **params) * q.present
        if w.sum() <= 0:
            w = np.array(base, float) * q.present
        score = w @ q.z
        order = np.lexsort((np.arange(len(q.docs)), -score))[:10]  # docs are sorted: ties by id
        run[qid] = {q.docs[j]: float(score[j]) for j in order}
    return run


def product_run(setting: Setting, legs: tuple[str, ...], method: str | None = None,
                base: dict[str, float] | None = None, gate_power: float | None = None) -> dict:
    """The fused run of the product code (fusion_plan.fuse_legs) with the Searcher's default for
    this leg set (``method``: that method with its LEG_SET_WEIGHTS instead; ``base`` /
    ``gate_power``: these base weights {leg: w} and calibration gate power instead, as an
    index's own leg-set defaults, FusionConfig.leg_sets)."""
    from alignir.retrieval.fusion_plan import (LEG_SET_AGREE, LEG_SET_DEFAULTS, LEG_SET_WEIGHTS, calibrated_weights,
                                               fuse_legs)

    method = method or LEG_SET_DEFAULTS[legs][0]
    cal = calibration(setting)
    if method == "calibrated" and cal is None:
        method = "agree"  # as the Searcher on an index without a calibration
    base = base or LEG_SET_WEIGHTS[method][legs]
    w = [base[leg] / sum(base.values()) for leg in legs]
    if method == "calibrated":
        w, method = calibrated_weights(legs, w, cal, gate_power), "zscore"
    cfg = FusionConfig(method=method)
    run = {}
    for q in setting.legs["bm25"]:
        lists = [setting.legs[leg].get(q, {}) for leg in legs]
        run[q] = dict(F.ranked(fuse_legs(lists, w, cfg, w, anchor=legs.index("bm25"),
                                         agree_params=LEG_SET_AGREE.get(legs), n_docs=setting.n_docs), 10))
    return run


def ndcg(setting: Setting, run) -> float:
    return round(evaluate(setting.qrels, run, ["ndcg@10"])["ndcg@10"], 4)


def _product_params(legs: tuple[str, ...]) -> dict:
    from alignir.retrieval.fusion_plan import LEG_SET_AGREE, LEG_SET_DEFAULTS

    from alignir.retrieval.fusion_plan import LEG_SET_CALIBRATED

    method, w = LEG_SET_DEFAULTS[legs]
    out = {"fusion": method, "weights": w}
    if method == "agree":
        out.update(LEG_SET_AGREE[legs].to_dict())
    if method == "calibrated":
        out["gate"] = LEG_SET_CALIBRATED[legs].to_dict()
        out["measure"] = {k: getattr(MEASURE, k) for k in ("k", "depth", "symmetric", "chance")}
    return out


# ----------------------------------------------------------------------------- selection
def choose(table: dict, train: list[str], candidates: list[tuple[str, str]]) -> tuple[str, str]:
    """(rule, params json) for the training units: among those within TOL of BM25 on every
    training unit (shuffled ones included), the best worst *gain retention*
    (rule − BM25) / (z-score − BM25), capped at 1, over the real (not shuffled) training units
    where z-score gains at least GAIN (the issue's second goal), then the best mean nDCG@10
    over the real units; when none is safe, the best worst-case margin.
    ``table[(unit, rule, params)] = (ndcg, bm25)`` (z-score: rule "zscore", params "{}");
    ties go to the earlier candidate."""
    real = [u for u in train if "-shuffled" not in u] or train
    gains = {u: table[(u, "zscore", "{}")][0] - table[(u, "zscore", "{}")][1]
             for u in real if (u, "zscore", "{}") in table}
    judged = [u for u, g in gains.items() if g >= GAIN]

    def margin(c):
        return min(table[(s, *c)][0] - table[(s, *c)][1] for s in train)

    def mean(c):
        return sum(table[(s, *c)][0] for s in real) / len(real)

    def kept(c):
        return min([min(1.0, (table[(u, *c)][0] - table[(u, *c)][1]) / gains[u]) for u in judged], default=1.0)
    safe = [c for c in candidates if margin(c) >= -TOL]
    if safe:
        return max(safe, key=lambda c: (round(kept(c), 6), mean(c), margin(c)))
    return max(candidates, key=lambda c: (margin(c), mean(c)))


def render(rows: list[dict], mode: str = "dense+sparse+bm25") -> str:
    """The README table of one leg set from the committed ``fusion-rule`` rows: BM25, the fixed
    z-score weights (``fusion="zscore"``), the product default (with the calibration's
    pseudo-query agreement of each LLM leg), and the rule chosen with this collection held out."""
    prod = [r for r in rows if r.get("kind") == "fusion-rule" and r["mode"] == mode
            and r["rule"].startswith("product default")]
    held = {r["setting"]: r for r in rows if r.get("kind") == "fusion-rule" and r["mode"] == mode
            and r.get("chosen_overall")}
    name = prod[0]["params"]["fusion"] if prod else "default"
    lines = [f"| setting | BM25 | z-score 0.2/0.2/0.6 (before) | {name} (default) | ≥ BM25 − 0.005 | gain kept "
             "| pseudo-query agreement dense / sparse | chosen without this collection |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(prod, key=lambda r: ("shuffled" in r["setting"], -r["max_length"], r["setting"])):
        h = held.get(r["setting"])
        kept = "–" if r["gain_kept"] is None else f"{r['gain_kept']:.2f}"
        cal = r.get("calibration") or {}
        agree = " / ".join(f"{cal[leg]:.3f}" if leg in cal else "–" for leg in ("dense", "sparse"))
        lines.append(f"| {r['setting']} | {r['bm25_ndcg@10']:.3f} | {r['today_zscore_ndcg@10']:.3f} | "
                     f"{r['ndcg@10']:.3f} | {'✓' if r['meets_bm25_minus_0.005'] else '✗'} | {kept} | {agree} | "
                     + ("–" if h is None else f"{h['ndcg@10']:.3f} ({h['rule']})") + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lists", nargs="*", help="dump_leg_lists.py outputs (.json.gz)")
    ap.add_argument("--markdown", metavar="MODE", default=None,
                    help="only print the README table of this leg set from --out's rows")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/fusion_transfer.json"))
    ap.add_argument("--table", default=None, help="also write every (setting, mode, rule) score here")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--rules", default=",".join(RULES),
                    help=f"comma-separated candidate rules to compare (default all: {','.join(RULES)})")
    ap.add_argument("--no-shuffled", action="store_true",
                    help="skip the shuffled-LLM-legs setting of every full-length dump")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.defaults.fusion_rules " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.markdown:
        print(render(json.loads(Path(args.out).read_text()), args.markdown))
        return
    if not args.lists:
        ap.error("give the leg-list dumps")
    unknown = sorted(set(args.rules.split(",")) - set(RULES))
    if unknown:
        ap.error(f"unknown rules {unknown}; choose from {', '.join(RULES)}")
    rules = {r: RULES[r] for r in dict.fromkeys(["zscore", *args.rules.split(",")])}
    settings = [load(Path(p)) for p in args.lists]
    full = [s for s in settings if s.max_length >= 512 and not args.no_shuffled]
    settings += [shuffled(s) for s in full] + [shuffled(s, ("dense",)) for s in full]
    datasets = sorted({s.dataset for s in settings})
    by_name = {s.name: s for s in settings}
    bm25 = {s.name: ndcg(s, s.legs["bm25"]) for s in settings}
    legs_alone = {s.name: {leg: ndcg(s, s.legs[leg]) for leg in ("dense", "sparse")} for s in settings}
    for s in settings:
        print(f"{s.name:34s} bm25 {bm25[s.name]:.4f} dense {legs_alone[s.name]['dense']:.4f} "
              f"sparse {legs_alone[s.name]['sparse']:.4f}", flush=True)

    # one table over every (leg set, setting) unit: key (unit, rule, params) -> (nDCG@10, BM25)
    table: dict[tuple[str, str, str], tuple[float, float]] = {}
    for legs, base in MODES.items():
        mode = "+".join(legs)
        for s in settings:
            prepared = prepare(s, legs)
            for rule, (_, grid) in rules.items():
                for p in grid:
                    table[(f"{mode}|{s.name}", rule, json.dumps(p, sort_keys=True))] = (
                        ndcg(s, apply_rule(prepared, base, rule, p)), bm25[s.name])
    candidates = sorted({k[1:] for k in table})
    rows = []
    for legs in MODES:
        mode = "+".join(legs)
        units = sorted(k[0] for k in table if k[0].startswith(mode + "|") and k[1:] == ("zscore", "{}"))
        pick = choose(table, units, candidates)
        print(f"{mode:18s} chosen on ALL settings (the product default's basis): {pick[0]} {pick[1]}",
              flush=True)
        for held in datasets:
            train = [u for u in units if by_name[u.split("|")[1]].dataset != held]
            if not train:
                continue
            per_rule = {rule: choose(table, train, [c for c in candidates if c[0] == rule]) for rule in rules}
            overall = choose(table, train, list(per_rule.values()))
            print(f"  held out {held}: chosen on the others {overall[0]} {overall[1]}", flush=True)
            for u in units:
                name = u.split("|")[1]
                s = by_name[name]
                if s.dataset != held:
                    continue
                today = table[(u, "zscore", "{}")][0]
                line = {rule: table[(u, *c)][0] for rule, c in per_rule.items()}
                print(f"    {name:40s} bm25 {bm25[name]:.4f} | "
                      + " ".join(f"{r} {v:.4f}" for r, v in line.items()), flush=True)
                for rule, c in per_rule.items():
                    rows.append({"kind": "fusion-rule", "setting": name, "dataset": s.dataset,
                                 "model": s.model, "max_length": s.max_length, "mode": mode,
                                 "rule": rule, "params": json.loads(c[1]),
                                 "selected_on": sorted({by_name[x.split("|")[1]].dataset for x in train}),
                                 "chosen_overall": c == overall,
                                 "ndcg@10": table[(u, *c)][0], "bm25_ndcg@10": bm25[name],
                                 "today_zscore_ndcg@10": today, "command": command})
    for legs in MODES:  # the shipped default, product code, on every setting
        mode = "+".join(legs)
        for s in settings:
            prod, today = ndcg(s, product_run(s, legs)), ndcg(s, product_run(s, legs, "zscore"))
            gain = today - bm25[s.name]
            rows.append({"kind": "fusion-rule", "setting": s.name, "dataset": s.dataset, "model": s.model,
                         "max_length": s.max_length, "mode": mode,
                         "rule": "product default (LEG_SET_DEFAULTS)", "params": _product_params(legs),
                         "selected_on": "all settings (product default)",
                         "ndcg@10": prod, "bm25_ndcg@10": bm25[s.name], "today_zscore_ndcg@10": today,
                         "meets_bm25_minus_0.005": prod >= bm25[s.name] - TOL,
                         "gain_kept": round((prod - bm25[s.name]) / gain, 3) if gain > 0 else None,
                         "calibration": None if calibration(s) is None else calibration(s).agreement,
                         "command": command})
            print(f"{mode:18s} {s.name:40s} PRODUCT {prod:.4f} bm25 {bm25[s.name]:.4f} zscore {today:.4f}"
                  f" kept {rows[-1]['gain_kept']}", flush=True)
    full = {"|".join(k): v[0] for k, v in table.items()}
    if args.table:
        Path(args.table).write_text(json.dumps(full, indent=0) + "\n")
    if not args.no_write:
        out = Path(args.out)
        old = json.loads(out.read_text()) if out.exists() else []
        keep = [r for r in old if r.get("kind") != "fusion-rule"]
        out.write_text(json.dumps(keep + rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
