"""benchmarks/training/record_fusion_rows.py: a fused row re-recorded from a fresh beir result
only when the single legs are the recorded ones."""
from __future__ import annotations

import json

import pytest

from benchmarks.training.record_fusion_rows import FUSED, rerecord


def _result(dense: float, fused: float) -> dict:
    return {"dataset": "adi", "metrics": {"dense": {"ndcg@10": dense}, "sparse": {"ndcg@10": 0.5},
                                         "dense+sparse+bm25": {"ndcg@10": fused}}}


def test_only_the_fused_value_moves_and_the_old_one_is_kept(tmp_path):
    out = tmp_path / "training.json"
    out.write_text(json.dumps({"runs": {"adi/m": {"ndcg@10_dense": 0.53, "ndcg@10_sparse": 0.5, FUSED: 0.5864,
                                                  "command": "c", "shipped": True}}}))
    row = rerecord(_result(0.53004, 0.58396), "m", "alignir beir adi --model m --json", out)
    assert row == {"ndcg@10_dense": 0.53, "ndcg@10_sparse": 0.5, FUSED: 0.584, "command": "c", "shipped": True,
                   "fusion_before": 0.5864, "fusion_command": "alignir beir adi --model m --json"}
    assert json.loads(out.read_text())["runs"]["adi/m"] == row
    assert rerecord(_result(0.53, 0.59), "m", "again", out)["fusion_before"] == 0.5864  # the first value stays
    with pytest.raises(SystemExit, match="single legs differ"):
        rerecord(_result(0.54, 0.6), "m", "c", out)
    with pytest.raises(SystemExit, match="no recorded row"):
        rerecord(_result(0.53, 0.6), "other", "c", out)
