"""The README's quality table, rendered from the committed results (no number typed by hand).

Reads ``quality.json`` (bench_quality.py) and ``fusion_transfer.json`` (fusion_transfer.py,
fusion_rules.py) and
prints one markdown row per (collection, model) with the quality targets checked:
sparse ≥ 0.9 × dense of the same model, hybrid ≥ the better of its two inputs.

    python -m benchmarks.decisions.quality_table

Result file: none (prints the table from benchmarks/results/quality.json and fusion_transfer.json).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
ORDER = ("adi", "med", "cran", "cisi", "scifact")
NAMES = {"adi": "ADI", "med": "MED", "cran": "Cranfield", "cisi": "CISI", "scifact": "SciFact"}
MODELS = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma3"}


def three_leg_default(fusion: list[dict], quality: dict, dataset: str, model: str) -> float | None:
    """dense+sparse+bm25 with the fixed z-score weights (0.2 / 0.2 / 0.6, ``fusion="zscore"``):
    fusion_transfer's "zscore option" (formerly "product default") row, computed
    from the same weight sweep for every collection, else bench_quality's row."""
    for r in fusion:
        if (r["dataset"], r["model"], r["mode"]) == (dataset, model, "dense+sparse+bm25") \
                and r.get("kind") != "fusion-rule" \
                and str(r["selected_on"]).startswith(("product default", "zscore option")):
            return r["ndcg@10"]
    row = quality.get((dataset, model, "hybrid+bm25"))
    return row["ndcg@10"] if row else None


def three_leg_calibrated(fusion: list[dict], dataset: str, model: str) -> float | None:
    """dense+sparse+bm25 with the leg-set default ("calibrated"): fusion_rules.py's product
    row of the full-length index of this collection and model."""
    for r in fusion:
        if r.get("kind") == "fusion-rule" and r["rule"].startswith("product default") \
                and r["mode"] == "dense+sparse+bm25" and r["setting"] == f"{dataset}-{model}-ml512":
            return r["ndcg@10"]
    return None


def render(quality_rows: list[dict], fusion: list[dict]) -> str:
    q = {(r["dataset"], r["model"], r["method"]): r for r in quality_rows}
    pairs = sorted({(r["dataset"], r["model"]) for r in quality_rows},
                   key=lambda p: (ORDER.index(p[0]) if p[0] in ORDER else len(ORDER), p[0],
                                  list(MODELS).index(p[1]) if p[1] in MODELS else len(MODELS), p[1]))
    lines = ["| collection | model | BM25 | dense | sparse, paper eq.15–16 | sparse, default | sparse / dense "
             "| hybrid (dense+sparse) | hybrid ≥ both inputs | dense+sparse+bm25, z-score 0.2/0.2/0.6 "
             "| dense+sparse+bm25, default fusion (calibrated) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for dataset, model in pairs:
        def get(method: str, dataset: str = dataset, model: str = model) -> float | None:
            row = q.get((dataset, model, method))
            return row["ndcg@10"] if row else None
        bm25, dense, paper = get("bm25"), get("dense-centered-cosine"), get("sparse-paper")
        sparse, hybrid = get("sparse-default"), get("hybrid-default")
        if None in (bm25, dense, sparse, hybrid):
            continue
        ratio = sparse / dense
        both = hybrid >= max(dense, sparse)
        three = three_leg_default(fusion, q, dataset, model)
        agree = three_leg_calibrated(fusion, dataset, model)
        lines.append(
            f"| {NAMES.get(dataset, dataset)} | {MODELS.get(model, model)} | {bm25:.3f} | {dense:.3f} | "
            f"{paper:.3f} | {sparse:.3f} | {ratio:.2f} {'✓' if ratio >= 0.9 else '✗'} | {hybrid:.3f} | "
            f"{'✓' if both else '✗'} | {'–' if three is None else f'{three:.3f}'} "
            f"| {'–' if agree is None else f'{agree:.3f}'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quality", type=Path, default=RESULTS / "quality.json")
    ap.add_argument("--fusion", type=Path, default=RESULTS / "fusion_transfer.json")
    args = ap.parse_args(argv)
    fusion = json.loads(args.fusion.read_text()) if args.fusion.exists() else []
    print(render(json.loads(args.quality.read_text()), fusion))


if __name__ == "__main__":
    main()
