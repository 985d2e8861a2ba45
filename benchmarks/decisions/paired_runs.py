"""Query by query: is one recorded run better than another, or only luckier? A paired sign-flip test.

The ship rule and the goals compare means of nDCG@10 over small query sets (ADI 35 judged test
queries, MED 30, CISI 76), where one query moves a mean by 0.01-0.03. This re-runs the judged
test queries of each collection through the two runs' indexes, as ``gpu_train.py`` built them
when it scored the runs (a missing index is rebuilt the same way; its dense vectors come from the
embedding cache when the run was scored on this machine), and reports per collection and leg:

* both means (checked against the rows in ``gpu_train.json``: the same queries, the same index),
* the mean difference and the queries won, lost and tied (each query's two scores are kept in
  the record, so the summary can be recomputed from it), and
* the two-sided p-value of a paired sign-flip randomization test of the mean difference
  (``scipy.stats.permutation_test`` with ``permutation_type="samples"``: under the null the two
  runs' scores of a query are exchangeable; exact when 2^n sign patterns are at most
  ``--resamples``, else that many random ones, seeded).

A shipped model is searched with its own weights (``builtin:NAME``) and checked against the rows
the ship rule reads for it.

    python -m benchmarks.decisions.paired_runs v4-map-scifact-fw3e-5 --against smollm2-135m-alignir-v4 \\
        --work ../runs/score-work --record
    python -m benchmarks.decisions.paired_runs long-base-gemma3-270m-1500-mined-1500-bio-200 \\
        --against long-base-gemma3-270m-1500-mined-1500-more-200 --collection med --leg dense --record

``--record`` merges the rows into benchmarks/results/paired_runs.json, keyed by (run, against,
collection, leg).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from benchmarks.common import DATASETS
from benchmarks.decisions.ship_rule import COLLECTIONS, RULED_LEG, shipped_rows

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "paired_runs.json"
KEY = ("run", "against", "collection", "leg")


def sign_flip_p(a: Sequence[float], b: Sequence[float], resamples: int = 100_000, seed: int = 0) -> float:
    """Two-sided p-value of the mean of ``a - b`` under random sign flips of each query's
    difference (exact enumeration when 2^n <= ``resamples``)."""
    from scipy.stats import permutation_test

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError("give two equal-length, non-empty lists of per-query scores")
    if not np.any(a != b):
        return 1.0
    res = permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                           vectorized=True, n_resamples=resamples, alternative="two-sided",
                           random_state=np.random.default_rng(seed))  # (`rng` only from SciPy 1.15)
    return float(res.pvalue)


def compare(a: Mapping[str, float], b: Mapping[str, float], resamples: int = 100_000,
            seed: int = 0) -> dict[str, float | int]:
    """The paired summary of two runs' per-query scores over the same judged queries."""
    if set(a) != set(b):
        raise ValueError("the two runs must score the same queries")
    qids = sorted(a)
    x = np.array([a[q] for q in qids])
    y = np.array([b[q] for q in qids])
    d = x - y
    eps = 1e-9  # pytrec_eval's float noise between two identical rankings
    return {"queries": len(qids), "mean": round(float(x.mean()), 4), "against_mean": round(float(y.mean()), 4),
            "mean_diff": round(float(d.mean()), 4), "wins": int((d > eps).sum()), "losses": int((d < -eps).sum()),
            "ties": int((np.abs(d) <= eps).sum()), "p_two_sided": float(f"{sign_flip_p(x, y, resamples, seed):.4g}")}


def adapter_of(name: str, gpu_train: dict) -> str:
    """The adapter a run or shipped model is scored with: a shipped model's own weights
    (``builtin:NAME``, the adapter its product rows were scored with), a run's kept folder."""
    from alignir.encoders.shipped import BUILTIN_PREFIX, SHIPPED

    if name in SHIPPED:
        return BUILTIN_PREFIX + name
    entry = gpu_train["runs"].get(name)
    if entry is None:
        raise KeyError(f"no run named {name!r} in gpu_train.json, and no shipped model")
    adapter = entry.get("kept_adapter")
    if not adapter:
        raise KeyError(f"{name} keeps no adapter in the repository, so its indexes cannot be rebuilt")
    return adapter


def find_index(folder: Path, adapter: str, work: Path) -> Path | None:
    """The index ``gpu_train.py`` built for this adapter, under any spelling of its path it was
    given (relative to the checkout, or absolute), or None."""
    from benchmarks.gpu.gpu_train import index_folder

    spellings = [adapter]
    if not Path(adapter).is_absolute() and ":" not in adapter:
        spellings.append(str(ROOT / adapter))
    elif Path(adapter).is_absolute() and Path(adapter).is_relative_to(ROOT):
        spellings.append(str(Path(adapter).relative_to(ROOT)))
    for spelling in spellings:
        target = index_folder(folder, spelling, work)
        if (target / "manifest.json").is_file():
            return target
    return None


def per_query(folder: Path, adapter: str, work: Path, legs: Sequence[str], device: str = "cpu",
              dtype: str = "fp32") -> dict[str, dict[str, float]]:
    """leg -> query id -> nDCG@10 of the judged test queries, through the index ``gpu_train.py``
    builds for this adapter (built first if missing), searched as it searched when scoring."""
    from alignir.encoders.models import load_model
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import run_queries
    from alignir.retrieval.metrics import evaluate, self_hits_apply
    from alignir.retrieval.searcher import Searcher
    from benchmarks.gpu.gpu_train import adapter_base_model, build_scored_index

    target = find_index(folder, adapter, work) or build_scored_index(folder, adapter, work, device, dtype)
    data = load_beir(folder, split="test")
    searcher = Searcher.open(target, loaded=load_model(adapter_base_model(adapter), device=device, dtype=dtype))
    try:
        runs, _ = run_queries(searcher, data.queries, list(legs), k=100, progress=False,
                              drop_self=self_hits_apply(data.name))
    finally:
        searcher.close()
    return {leg: {q: v["ndcg@10"] for q, v in evaluate(data.qrels, run, ["ndcg@10"], per_query=True)
                  ["per_query"].items()} for leg, run in runs.items()}


def recorded_mean(gpu_train: dict, training: dict, name: str, collection: str, leg: str,
                  before_fusion_change: bool = False) -> float | None:
    """The nDCG@10 on file for a run's (``gpu_train.json``) or shipped model's (the rows the ship
    rule reads) leg on a collection, if scored. With ``before_fusion_change``, a three-leg value
    re-recorded after a change of the fusion is read as it was before it (``fusion_before``: a
    shipped model's, benchmarks.training.record_fusion_rows; a run's,
    benchmarks.training.record_gpu_fusion_rows): what comparisons made earlier were scored with."""
    from alignir.encoders.shipped import SHIPPED

    if name in SHIPPED:
        before = training["runs"].get(f"{collection}/{name}", {}).get("fusion_before")
        if before_fusion_change and leg == "dense+sparse+bm25" and before is not None:
            return float(before)
        return shipped_rows(training, gpu_train, name).get(collection, {}).get(leg)
    scores = gpu_train["runs"][name].get("scores", {}).get("trained", {}).get(collection)
    if scores is None:
        return None
    if before_fusion_change and leg == "dense+sparse+bm25" and "fusion_before" in scores:
        return float(scores["fusion_before"])
    return scores["metrics"].get(leg, {}).get("ndcg@10")


def merge_rows(path: Path, rows: list[dict]) -> None:
    """Add ``rows`` to the record at ``path``, replacing those with the same key."""
    from alignir.io import atomic_write_json

    old = json.loads(path.read_text())["rows"] if path.is_file() else []
    keys = {tuple(r[k] for k in KEY) for r in rows}
    kept = [r for r in old if tuple(r[k] for k in KEY) not in keys]
    atomic_write_json(path, {"about": __doc__.split("\n\n")[0], "rows": kept + rows}, indent=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a gpu_train.json run with a kept adapter, or a shipped model")
    ap.add_argument("--against", required=True, help="the run or shipped model to compare with")
    ap.add_argument("--collection", action="append", choices=COLLECTIONS, default=None,
                    help="repeatable (default: all five)")
    ap.add_argument("--leg", action="append", default=None, help=f"repeatable (default: {RULED_LEG})")
    ap.add_argument("--work", type=Path, default=ROOT.parent / "runs" / "score-work",
                    help="gpu_train.py's index folder (--work of its scoring)")
    ap.add_argument("--data", type=Path, default=DATASETS, help="the folder holding the collections")
    ap.add_argument("--resamples", type=int, default=100_000)
    ap.add_argument("--record", action="store_true", help=f"merge the rows into {OUT.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    gpu_train = json.loads((RESULTS / "gpu_train.json").read_text())
    training = json.loads((RESULTS / "training.json").read_text())
    try:
        adapter, against_adapter = (adapter_of(r, gpu_train) for r in (args.run, args.against))
    except KeyError as e:
        ap.error(str(e.args[0]))
    legs = args.leg or [RULED_LEG]
    command = "python -m benchmarks.decisions.paired_runs " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    for collection in args.collection or COLLECTIONS:
        folder = args.data / collection  # gpu_train.json names a row by its folder
        mine = per_query(folder, adapter, args.work, legs)
        theirs = per_query(folder, against_adapter, args.work, legs)
        for leg in legs:
            row = {"run": args.run, "against": args.against, "collection": collection, "leg": leg,
                   **compare(mine[leg], theirs[leg], args.resamples), "resamples": args.resamples, "command": command,
                   # [query id, this run's nDCG@10, the other's], so the summary can be recomputed
                   "per_query": [[q, round(mine[leg][q], 6), round(theirs[leg][q], 6)] for q in sorted(mine[leg])]}
            for name, here in ((args.run, "mean"), (args.against, "against_mean")):
                value = recorded_mean(gpu_train, training, name, collection, leg)
                row[f"recorded_{here}"] = None if value is None else round(value, 4)
                if value is not None and abs(value - row[here]) > 1e-3:  # a stale index, or another adapter
                    print(f"warning: {name} {collection} {leg}: {row[here]:.4f} here, {value:.4f} on file",
                          file=sys.stderr)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("command", "per_query")}), flush=True)
    if args.record:
        merge_rows(OUT, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
