"""The README's trained-embedder tables and direction-of-effect checks, rendered from
``training.json`` (bench_training.py) — no number typed by hand.

For each evaluation collection: one row per run (steps, training seconds, dense and sparse
nDCG@10, the untrained PromptEOL baseline of the same run), then the checks each method's paper suggests:
does CDA beat IC-only (AutoRegEmbed), does CTKD beat NLL / RC (LLM2Comp), does GIRCSE improve with
a larger test-time K (GIRCSE), and which methods beat the untrained baseline.

    python -m benchmarks.decisions.training_table [--collection scifact-sample1000]

Result file: none (prints the tables from benchmarks/results/training.json).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
ORDER = ("prompteol-untrained", "infonce", "autoregembed-untrained", "autoregembed-ic", "autoregembed-cda",
         "gircse-untrained", "gircse", "gircse-lr1e-4", "gircse-lr2e-5", "llm2comp-untrained",
         "llm2comp-ctkd", "llm2comp-nll", "llm2comp-rc", "llm2comp-ctkd-ucl", "llm2comp-ctkd-scl")


def is_product_run(run: dict) -> bool:
    """A run scored through the product (``alignir beir``, recorded by record_beir_run.py)
    rather than bench_training.py's own harness."""
    return str(run.get("harness", "")).startswith("alignir beir")


def collection_runs(runs: dict[str, dict], collection: str) -> dict[str, dict]:
    prefix = collection + "/"
    found = {k[len(prefix):]: v for k, v in runs.items() if k.startswith(prefix) and not is_product_run(v)}
    return {name: found[name] for name in sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER
                                                                       else len(ORDER), n))}


def table(runs: dict[str, dict]) -> str:
    lines = ["| run | steps | train s | dense nDCG@10 | sparse nDCG@10 |", "|---|---|---|---|---|"]
    for name, r in runs.items():
        lines.append(f"| {name} | {r['steps']} | {r['train_seconds']:.0f} | {r['ndcg@10_dense']:.3f} "
                     f"| {r['ndcg@10_sparse']:.3f} |")
    return "\n".join(lines)


def _versus(runs: dict, a: str, b: str) -> str | None:
    if a not in runs or b not in runs:
        return None
    parts = []
    for leg in ("dense", "sparse"):
        x, y = runs[a][f"ndcg@10_{leg}"], runs[b][f"ndcg@10_{leg}"]
        parts.append(f"{leg} {x:.3f} vs {y:.3f} ({'yes' if x > y else 'no'})")
    steps = {runs[a]["steps"], runs[b]["steps"]}
    note = "" if len(steps) == 1 else f" — unequal steps {runs[a]['steps']} vs {runs[b]['steps']}"
    return "; ".join(parts) + note


def checks(runs: dict[str, dict]) -> list[str]:
    """The direction-of-effect questions, answered from the numbers (None rows are skipped)."""
    out = []
    cda = _versus(runs, "autoregembed-cda", "autoregembed-ic")
    if cda:
        out.append(f"CDA beats IC-only (AutoRegEmbed §4.4): {cda}")
    for other in ("llm2comp-nll", "llm2comp-rc"):
        ctkd = _versus(runs, "llm2comp-ctkd", other)
        if ctkd:
            out.append(f"CTKD beats {other.split('-')[1].upper()} (LLM2Comp §3.3): {ctkd}")
    for name in ("gircse", "gircse-lr1e-4"):
        ks = runs.get(name, {}).get("test_time_K")
        if ks:
            order = sorted(ks, key=lambda k: int(k.split("=")[1]))
            vals = [ks[k]["ndcg@10_dense"] for k in order]
            mono = all(b >= a for a, b in zip(vals, vals[1:]))
            out.append(f"GIRCSE ({name}) improves with test-time K (GIRCSE §5.1): dense "
                       + ", ".join(f"{k} {v:.3f}" for k, v in zip(order, vals))
                       + f" ({'yes' if mono else 'no, not monotone'})")
    base = runs.get("prompteol-untrained")
    if base:
        above = [n for n, r in runs.items() if r["steps"] > 0 and r["ndcg@10_dense"] > base["ndcg@10_dense"]]
        out.append(f"trained runs above the untrained PromptEOL dense {base['ndcg@10_dense']:.3f}: "
                   + (", ".join(above) if above else "none"))
    return out


PRODUCT_COLUMNS = (("dense", "ndcg@10_dense"), ("sparse", "ndcg@10_sparse"), ("dense+sparse", "ndcg@10_hybrid"),
                   ("dense+sparse+bm25", "ndcg@10_dense+sparse+bm25"), ("BM25", "ndcg@10_bm25"))


def product_table(runs: dict[str, dict]) -> str:
    """The runs scored through ``alignir beir``: one row per collection and run, every mode, with
    the training's examples seen and CPU-seconds where recorded (``record_beir_run.py --adapter``;
    "–": not recorded, an untrained run shows 0)."""
    rows = {k: v for k, v in runs.items() if is_product_run(v)}
    lines = ["| collection / run | steps | examples | train CPU-s | shipped | "
             + " | ".join(c for c, _ in PRODUCT_COLUMNS) + " |",
             "|---|---|---|---|---|" + "---|" * len(PRODUCT_COLUMNS)]
    for key in sorted(rows):
        r = rows[key]
        vals = " | ".join(f"{r[f]:.3f}" if f in r else "–" for _, f in PRODUCT_COLUMNS)
        cost = " | ".join(f"{r[f]:,}" if r.get(f) is not None else ("0" if r["steps"] == 0 else "–")
                          for f in ("examples_seen", "train_cpu_seconds"))
        lines.append(f"| {key} | {r['steps']} | {cost} | {'yes' if r.get('shipped') else ''} | {vals} |")
    return "\n".join(lines)


def render(runs: dict[str, dict], collection: str) -> str:
    rows = collection_runs(runs, collection)
    if not rows:
        raise SystemExit(f"no runs for {collection!r} in training.json")
    return table(rows) + "\n\n" + "\n".join(f"- {c}" for c in checks(rows))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS / "training.json")
    ap.add_argument("--collection", action="append", help="default: every collection in the file")
    ap.add_argument("--product", action="store_true", help="print the runs scored through alignir beir")
    args = ap.parse_args(argv)
    runs = json.loads(args.results.read_text())["runs"]
    if args.product:
        print(product_table(runs))
        return
    collections = args.collection or sorted({k.split("/", 1)[0] for k, v in runs.items() if not is_product_run(v)})
    for c in collections:
        print(f"#### {c}\n\n{render(runs, c)}\n")


if __name__ == "__main__":
    main()
