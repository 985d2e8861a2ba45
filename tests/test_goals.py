"""The quality goals (benchmarks/decisions/goals.py): each judged on the rows on file, a ratio goal against
the model's own dense leg, a fused anchor at the better of its two fusions, a missing row
unmeasured rather than met or missed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.decisions import goals
from benchmarks.decisions.goals import GEMMA, MINILM, SPLADE, Goal, judge
from benchmarks.decisions.ship_rule import COLLECTIONS, RULED_LEG

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_a_fused_anchor_is_the_better_of_its_two_fusions():
    anchors = {("med", MINILM, "dense+bm25-calibrated"): 0.768, ("med", MINILM, "dense+bm25-zscore-0.5"): 0.783,
               ("adi", MINILM, "dense+bm25-calibrated"): 0.543}
    assert goals.best_fusion(anchors, "med", MINILM, "dense") == 0.783
    assert goals.best_fusion(anchors, "adi", MINILM, "dense") == 0.543  # one fusion on file
    assert goals.best_fusion(anchors, "cran", MINILM, "dense") is None


@pytest.mark.parametrize(("legs", "met", "target"), [
    ({"dense": 0.60, "sparse": 0.54}, True, 0.54),     # exactly 0.9 x its own dense
    ({"dense": 0.60, "sparse": 0.539}, False, 0.54),
    ({"dense": 0.70, "sparse": 0.60}, False, 0.63),    # the target moves with the model's dense leg
    ({"sparse": 0.60}, None, None),                     # no dense row: unmeasured
])
def test_the_ratio_goal_uses_the_models_own_dense_leg(legs, met, target):
    goal = Goal("sparse >= 0.9 x dense", "scifact", "sparse", None, "0.9 x dense", ratio_of_dense=0.9)
    judged = judge(goal, "m", {"scifact": legs})
    assert judged.met is met and judged.per_model_target
    assert judged.target == (None if target is None else pytest.approx(target))


def test_a_missing_row_or_anchor_is_unmeasured():
    goal = Goal("three legs >= MiniLM + BM25", "cran", RULED_LEG, 0.418, "anchor")
    assert judge(goal, "m", {"cran": {RULED_LEG: 0.418}}).met is True   # a tie meets the goal
    assert judge(goal, "m", {"cran": {RULED_LEG: 0.417}}).met is False
    assert judge(goal, "m", {"adi": {RULED_LEG: 0.9}}).met is None       # the model has no cran row
    no_anchor = Goal("three legs >= MiniLM + BM25", "cran", RULED_LEG, None, "anchor")
    assert judge(no_anchor, "m", {"cran": {RULED_LEG: 0.9}}).met is None


def test_every_goal_of_every_collection_is_listed():
    anchors = {(c, m, f"{k}+{f}"): 0.5 for c in COLLECTIONS for m, k in ((MINILM, "dense"), (GEMMA, "dense"))
               for f in goals.FUSIONS}
    anchors.update({(c, SPLADE, "sparse"): 0.5 for c in COLLECTIONS})
    listed = goals.goals(anchors)
    assert sum(not g.stretch for g in listed) == len(goals.DENSE_TARGETS) + len(goals.RATIO_COLLECTIONS) + len(COLLECTIONS)
    assert sum(g.stretch for g in listed) == len(goals.RATIO_COLLECTIONS) + len(COLLECTIONS)
    assert all(g.target is not None for g in listed if g.ratio_of_dense is None)


def test_the_recorded_goals_are_what_the_files_give_now(tmp_path, capsys):
    """goals.json is regenerated whenever a row it reads changes: judged again from today's
    files, with the runs its command named, it is the same."""
    recorded = json.loads((RESULTS / "goals.json").read_text())
    runs = recorded["command"].split("--record", 1)[1].split()
    assert goals.main([*runs, "--record", "--out", str(tmp_path / "goals.json")]) == 0
    again = json.loads((tmp_path / "goals.json").read_text())
    assert again["rows"] == recorded["rows"] and again["summary"] == recorded["summary"]
    table = capsys.readouterr().out
    assert f"| {recorded['default']} |" in table.splitlines()[0]
