"""The README quality table is rendered from results, and its target checks are right."""
from __future__ import annotations

from benchmarks.decisions.quality_table import render


def _rows(dataset: str, model: str, **scores: float) -> list[dict]:
    return [{"dataset": dataset, "model": model, "method": m.replace("_", "-"), "ndcg@10": v}
            for m, v in scores.items()]


def test_targets_and_three_leg_source():
    quality = (_rows("med", "smollm2-135m", bm25=0.6, dense_centered_cosine=0.5, sparse_paper=0.3,
                     sparse_default=0.44, hybrid_default=0.52, **{"hybrid+bm25": 0.61})
               + _rows("adi", "gemma3-270m", bm25=0.4, dense_centered_cosine=0.3, sparse_paper=0.2,
                       sparse_default=0.36, hybrid_default=0.35, **{"hybrid+bm25": 0.45}))
    fusion = [{"dataset": "med", "model": "smollm2-135m", "mode": "dense+sparse+bm25",
               "selected_on": "product default (LEG_SET_DEFAULTS)", "ndcg@10": 0.65},
              {"dataset": "adi", "model": "gemma3-270m", "mode": "dense+sparse+bm25",
               "selected_on": ["cisi", "med"], "ndcg@10": 0.99},
              {"kind": "fusion-rule", "rule": "product default (LEG_SET_DEFAULTS)", "dataset": "med",
               "model": "smollm2-135m", "mode": "dense+sparse+bm25",
               "setting": "med-smollm2-135m-ml512", "selected_on": "all", "ndcg@10": 0.66},
              {"kind": "fusion-rule", "rule": "product default (LEG_SET_DEFAULTS)", "dataset": "med",
               "model": "smollm2-135m", "mode": "dense+sparse+bm25",
               "setting": "med-smollm2-135m-ml16", "selected_on": "all", "ndcg@10": 0.1}]
    lines = render(quality, fusion).splitlines()
    assert len(lines) == 4  # header, rule, two rows
    adi, med = lines[2], lines[3]  # collection order: ADI before MED
    assert adi.startswith("| ADI | Gemma3 |")
    assert "| 1.20 ✓ |" in adi  # 0.36 / 0.30
    assert "| 0.350 | ✗ |" in adi  # hybrid below its sparse input
    assert adi.endswith("| 0.450 | – |")  # no z-score fusion row: bench_quality's; no agree row
    assert med.startswith("| MED | SmolLM2 |")
    assert "| 0.88 ✗ |" in med  # 0.44 / 0.50 < 0.9
    assert "| 0.520 | ✓ |" in med
    assert med.endswith("| 0.650 | 0.660 |")  # fusion rows win over the older quality row;
    # agree: the full-length index's row, not the degraded one
