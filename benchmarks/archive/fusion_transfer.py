"""Do fusion weights chosen on other collections transfer? Leave-one-collection-out over the
BM25-leg weight sweeps of bench_quality.py (sweeps/<dataset>-<model>-lexical.json).

For every fused mode and every held-out collection, the (fusion method, weights) with the best
mean nDCG@10 over the *other* collections is applied to the held-out one — an honest estimate of
a fixed default, unlike the per-split ``-best`` (oracle) rows. No search is run: the sweeps hold
every grid point.

    python -m benchmarks.archive.fusion_transfer --model smollm2-135m

Writes benchmarks/results/fusion_transfer.json (rows with the exact command): the held-out
choices, then the fixed z-score weights (``fusion="zscore"``;
``selected_on`` = "zscore option ...") on every collection. The product default,
"agree" (per-query weights), cannot be read off a fixed-weight sweep: benchmarks/defaults/fusion_rules.py
writes its rows (``"kind": "fusion-rule"``) into the same file; rows of that kind are kept. Re-run it after
a new collection's bench_quality run (e.g. SciFact) to get its held-out number.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "benchmarks/results/sweeps"


def load(model: str, sweeps: Path) -> dict[str, dict[tuple, dict]]:
    """{dataset: {(mode, fusion, weights json): sweep row}}."""
    out = {}
    for f in sorted(sweeps.glob(f"*-{model}-lexical.json")):
        d = json.loads(f.read_text())
        out[d["dataset"]] = {(r["mode"], r["fusion"], json.dumps(r["weights"], sort_keys=True)): r
                             for r in d["fusion"]}
    return out


def transfer(data: dict[str, dict[tuple, dict]], bm25: dict[str, float]) -> list[dict]:
    rows = []
    datasets = sorted(data)
    modes = sorted({k[0] for d in data.values() for k in d})
    for mode in modes:
        common = set.intersection(*(set(k for k in d if k[0] == mode) for d in data.values()))
        for held in datasets:
            train = [d for d in datasets if d != held]
            if not train:
                continue
            key = max(sorted(common), key=lambda k: sum(data[d][k]["ndcg@10"] for d in train))
            r = data[held][key]
            rows.append({"dataset": held, "mode": mode, "fusion": key[1],
                         "weights": json.loads(key[2]), "selected_on": train,
                         "ndcg@10": r["ndcg@10"], "recall@100": r["recall@100"],
                         "bm25_ndcg@10": bm25.get(held),
                         "oracle_ndcg@10": max(data[held][k]["ndcg@10"] for k in common)})
    return rows


ZSCORE_OPTION = "zscore option (LEG_SET_WEIGHTS['zscore'], fixed z-score weights)"


def product_default(data: dict[str, dict[tuple, dict]], bm25: dict[str, float]) -> list[dict]:
    """nDCG@10 of the fixed z-score weights (retrieval.fusion_plan.LEG_SET_WEIGHTS["zscore"]) on
    every collection, read from the same sweeps (the grid holds that point)."""
    from alignir.retrieval.fusion_plan import LEG_SET_WEIGHTS

    rows = []
    method = "zscore"
    for legs, weights in LEG_SET_WEIGHTS[method].items():
        mode = "+".join(legs)
        key = (mode, method, json.dumps(weights, sort_keys=True))
        for dataset in sorted(data):
            r = data[dataset].get(key)
            if r is None:
                raise SystemExit(f"the {dataset} sweep has no point {key}: re-run bench_quality.py")
            rows.append({"dataset": dataset, "mode": mode, "fusion": method, "weights": weights,
                         "selected_on": ZSCORE_OPTION,
                         "ndcg@10": r["ndcg@10"], "recall@100": r["recall@100"],
                         "bm25_ndcg@10": bm25.get(dataset),
                         "oracle_ndcg@10": max(v["ndcg@10"] for k, v in data[dataset].items() if k[0] == mode)})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sweeps", default=str(SWEEPS))
    ap.add_argument("--quality", default=str(ROOT / "benchmarks/results/quality.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/fusion_transfer.json"))
    args = ap.parse_args(argv)
    command = "python -m benchmarks.archive.fusion_transfer " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    data = load(args.model, Path(args.sweeps))
    if len(data) < 2:
        raise SystemExit(f"need sweeps of >= 2 collections for {args.model}, found {sorted(data)}")
    quality = json.loads(Path(args.quality).read_text()) if Path(args.quality).exists() else []
    bm25 = {r["dataset"]: r["ndcg@10"] for r in quality
            if r["model"] == args.model and r["method"] == "bm25"}
    rows = transfer(data, bm25) + product_default(data, bm25)
    for r in rows:
        r.update(model=args.model, command=command)
        print(f"{r['mode']:18s} {r['dataset']:8s} {r['fusion']:6s} {json.dumps(r['weights']):45s} "
              f"nDCG@10 {r['ndcg@10']:.4f} (bm25 {r['bm25_ndcg@10']}, oracle {r['oracle_ndcg@10']:.4f})")
    out = Path(args.out)
    others = [r for r in json.loads(out.read_text())
              if r.get("model") != args.model or r.get("kind") == "fusion-rule"] if out.exists() else []
    out.write_text(json.dumps(others + rows, indent=1) + "\n")  # other models' rows are kept


if __name__ == "__main__":
    main()
