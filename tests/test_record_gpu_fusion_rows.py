"""benchmarks/training/record_gpu_fusion_rows.py: an ADI row of gpu_train.json gets a fresh three-leg
score only when its single legs come back as recorded."""
from __future__ import annotations

import copy
import json

import pytest

from benchmarks.training.record_gpu_fusion_rows import FUSED, adi_row, rerecord


def _metrics(dense: float, fused: float, sparse: float = 0.5) -> dict:
    return {"dense": {"ndcg@10": dense, "map": 0.4}, "sparse": {"ndcg@10": sparse},
            FUSED: {"ndcg@10": fused, "map": 0.45, "mrr@10": 0.7}}


def _results(tmp_path):
    runs = {"cpu-run": {"command": "c", "scores": {"trained": {
                "adi": {"dataset": "adi", "metrics": _metrics(0.53, 0.5864), "seconds": 17.1},
                "cisi": {"dataset": "cisi", "metrics": _metrics(0.43, 0.48)}}}},
            "mix": {"interpolation": {"weight": 0.5}, "scores": {"interpolated": {"adi": {"metrics": _metrics(0.52, 0.57)}}}},
            "gpu-distill-85": {"scores": {"trained": {"adi": {"metrics": _metrics(0.5299, 0.5864)}}}}}
    out = tmp_path / "gpu_train.json"
    out.write_text(json.dumps({"about": "kept", "runs": runs}))
    return out, runs


def test_only_the_three_leg_metrics_move_and_the_first_old_value_is_kept(tmp_path):
    out, runs = _results(tmp_path)
    fresh = _metrics(0.53004, 0.5812)
    fresh[FUSED]["map"] = 0.44
    assert rerecord(out, "cpu-run", fresh, "python -m m --run cpu-run") == {}
    run = json.loads(out.read_text())["runs"]["cpu-run"]
    expected = copy.deepcopy(runs["cpu-run"])
    expected["scores"]["trained"]["adi"]["metrics"][FUSED] = fresh[FUSED]  # map, mrr@10 too, from the same ranking
    expected["scores"]["trained"]["adi"].update(fusion_before=0.5864, fusion_command="python -m m --run cpu-run")
    assert run == expected  # the single legs, the other collection, the timings: as recorded
    assert rerecord(out, "cpu-run", _metrics(0.53, 0.59), "again") == {}
    assert adi_row(json.loads(out.read_text())["runs"]["cpu-run"])["fusion_before"] == 0.5864
    assert rerecord(out, "mix", _metrics(0.52, 0.56), "m") == {}  # an interpolation's row, under its own label
    assert json.loads(out.read_text())["runs"]["mix"]["scores"]["interpolated"]["adi"]["fusion_before"] == 0.57


def test_a_row_whose_single_legs_moved_is_left_alone(tmp_path):
    out, _ = _results(tmp_path)
    text = out.read_text()
    assert rerecord(out, "cpu-run", _metrics(0.5302, 0.59), "m") == {"dense": (0.53, 0.5302)}
    assert rerecord(out, "cpu-run", _metrics(0.53, 0.59, sparse=0.49), "m") == {"sparse": (0.5, 0.49)}
    assert out.read_text() == text


def test_a_row_scored_on_a_gpu_is_checked_within_the_gpu_tolerance(tmp_path):
    out, _ = _results(tmp_path)
    assert rerecord(out, "gpu-distill-85", _metrics(0.5314, 0.5801), "m") == {}  # 1.5e-3 from the H100's dense
    assert adi_row(json.loads(out.read_text())["runs"]["gpu-distill-85"])["metrics"][FUSED]["ndcg@10"] == 0.5801
    assert rerecord(out, "gpu-distill-85", _metrics(0.5329, 0.58), "m") == {"dense": (0.5299, 0.5329)}


def test_a_run_must_have_exactly_one_adi_row():
    with pytest.raises(SystemExit, match="one ADI row, found 2"):
        adi_row({"scores": {"trained": {"adi": {}}, "v3": {"adi": {}}}})
    with pytest.raises(SystemExit, match="found 0"):
        adi_row({"scores": {"trained": {"cisi": {}}}})
