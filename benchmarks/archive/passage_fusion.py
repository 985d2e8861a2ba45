"""Why passages lower the fused nDCG@10 while each LLM leg holds or gains.

Takes pairs of leg-list dumps (benchmarks/quality/dump_leg_lists.py) of one collection indexed truncated
(``--passages off``) and split into passages (``auto``, MaxP), and reports for each: every leg's
nDCG@10 and recall@100, the three-leg z-score fusion (0.2/0.2/0.6: what the calibrated default
gives when every LLM leg's agreement reaches its gate, as on these indexes), the two-leg fusions,
and the mean top-10 overlap of every pair of legs (how much the LLM legs repeat BM25). The paired
difference of the fused nDCG@10 per query (passages - truncated) gets a paired t-test, a Wilcoxon
signed-rank test and a bootstrap 95 % interval.

    python -m benchmarks.archive.passage_fusion med=/work/bg/out/passages/dumps/med-len128-off.json.gz,/work/bg/out/passages/dumps/med-len128-auto.json.gz

Writes benchmarks/results/passage_fusion.json (rows keyed by collection and max length).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks.defaults.fusion_rules import Setting, load
from benchmarks.common import replace_rows  # noqa: E402
from alignir.retrieval import fusion as F
from alignir.retrieval.metrics import evaluate

ROOT = Path(__file__).resolve().parents[2]
THREE = (("dense", "sparse", "bm25"), [0.2, 0.2, 0.6])
TWO = ((("dense", "bm25"), [0.4, 0.6]), (("sparse", "bm25"), [0.4, 0.6]))


def fused(s: Setting, legs: tuple[str, ...], weights: list[float]) -> dict:
    return {q: F.zscore([s.legs[leg][q] for leg in legs], weights=weights) for q in s.legs["bm25"]}


def overlap(s: Setting, a: str, b: str, k: int = 10) -> float:
    return float(np.mean([len(set(list(s.legs[a][q])[:k]) & set(list(s.legs[b][q])[:k])) / k
                          for q in s.legs["bm25"]]))


def summary(s: Setting) -> dict:
    out = {}
    for leg in ("dense", "sparse", "bm25"):
        m = evaluate(s.qrels, s.legs[leg], ["ndcg@10", "recall@100"])
        out[leg] = {"ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4)}
    for legs, w in (THREE, *TWO):
        out["+".join(legs)] = round(evaluate(s.qrels, fused(s, legs, w), ["ndcg@10"])["ndcg@10"], 4)
    out["top10_overlap"] = {f"{a}-{b}": round(overlap(s, a, b), 3)
                            for a, b in (("dense", "sparse"), ("dense", "bm25"), ("sparse", "bm25"))}
    return out


def paired(off: Setting, on: Setting, seed: int = 0) -> dict:
    """Per-query fused nDCG@10, passages minus truncated: mean, tests, bootstrap interval."""
    per = [evaluate(s.qrels, fused(s, *THREE), ["ndcg@10"], per_query=True)["per_query"] for s in (off, on)]
    qids = sorted(per[0])
    a = np.array([per[0][q]["ndcg@10"] for q in qids])
    b = np.array([per[1][q]["ndcg@10"] for q in qids])
    d = b - a
    boot = np.random.default_rng(seed).choice(d, (10000, len(d))).mean(1)
    return {"queries": len(d), "mean_diff": round(float(d.mean()), 4),
            "better": int((d > 0).sum()), "worse": int((d < 0).sum()),
            "t_test_p": round(float(stats.ttest_rel(b, a).pvalue), 3),
            "wilcoxon_p": round(float(stats.wilcoxon(b, a).pvalue), 3) if d.any() else 1.0,
            "bootstrap_95": [round(float(x), 4) for x in np.quantile(boot, [0.025, 0.975])]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", help="NAME=OFF_DUMP,AUTO_DUMP")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/passage_fusion.json"))
    args = ap.parse_args(argv)
    command = "python -m benchmarks.archive.passage_fusion " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    rows = []
    for pair in args.pairs:
        name, _, paths = pair.partition("=")
        off, on = (load(Path(p)) for p in paths.split(","))  # cut to the fused modes depth, as the product
        if off.dataset != on.dataset or off.max_length != on.max_length:
            raise SystemExit(f"{pair}: the two dumps must be one collection at one max length")
        row = {"collection": name, "max_length": off.max_length, "truncated": summary(off),
               "passages": summary(on), "fused_paired": paired(off, on), "command": command}
        rows.append(row)
        print(json.dumps(row), flush=True)
    replace_rows(args.out, rows, ("collection", "max_length"))


if __name__ == "__main__":
    main()
