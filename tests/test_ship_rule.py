"""The ship rule (benchmarks/ship_rule.py): a run replaces the shipped default only if its three
legs beat the default's on at least four of the five collections and lose nowhere by more than
0.005; judged on the rows on file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import ship_rule
from benchmarks.ship_rule import COLLECTIONS, RULED_LEG, judge

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
DEFAULT = {c: {RULED_LEG: 0.5} for c in COLLECTIONS}


def _rows(*margins: float) -> dict[str, dict[str, float]]:
    return {c: {RULED_LEG: 0.5 + m} for c, m in zip(COLLECTIONS, margins)}


@pytest.mark.parametrize(("margins", "ships", "wins"), [
    ((0.01, 0.01, 0.01, 0.01, -0.005), True, 4),   # a loss of exactly the tolerance is allowed
    ((0.01, 0.01, 0.01, 0.01, -0.006), False, 4),  # a larger one is not, whatever the wins
    ((0.01, 0.01, 0.01, 0.0, 0.0), False, 3),      # a tie is not a win
    ((0.01, 0.01, 0.01, 0.01, 0.01), True, 5),
    ((0.05, 0.05, 0.05, -0.001, -0.001), False, 3),
])
def test_the_rule_counts_strict_wins_and_bounds_the_worst_loss(margins, ships, wins):
    verdict = judge("run", _rows(*margins), DEFAULT)
    assert (verdict.ships, verdict.wins, verdict.complete) == (ships, wins, True)
    assert verdict.worst_margin == pytest.approx(min(margins))


def test_a_run_missing_a_collection_never_ships():
    rows = _rows(0.1, 0.1, 0.1, 0.1)  # four collections, four large wins
    verdict = judge("run", rows, DEFAULT)
    assert not verdict.complete and not verdict.ships and verdict.wins == 4
    assert set(verdict.margins) == set(COLLECTIONS[:4])


def test_the_defaults_rows_agree_with_the_scoring_harness():
    """The default's product rows (training.json) and its row scored again through gpu_train.py's
    harness (gpu_train.json) are the same numbers: the rule compares like with like."""
    default = ship_rule.default_rows(json.loads((RESULTS / "training.json").read_text()))
    runs = json.loads((RESULTS / "gpu_train.json").read_text())["runs"]
    rescored = ship_rule.run_rows(runs["harness-check-and-smoke"], "v3")["adi"]
    for leg, value in rescored.items():
        assert value == pytest.approx(default["adi"][leg], abs=1e-4), leg


def test_every_recorded_run_is_judged_on_what_it_has(capsys):
    gpu_train = json.loads((RESULTS / "gpu_train.json").read_text())
    default = ship_rule.default_rows(json.loads((RESULTS / "training.json").read_text()))
    verdicts = ship_rule.judge_all(gpu_train, default)
    scored = {name for name, run in gpu_train["runs"].items() if run.get("scores", {}).get("trained")}
    assert scored <= {v.run for v in verdicts}
    for v in verdicts:  # the margins are the rows' differences, recomputed here
        for c, m in v.margins.items():
            assert m == pytest.approx(v.legs[c][RULED_LEG] - default[c][RULED_LEG])
    complete = [v.complete for v in verdicts]
    assert complete == sorted(complete, reverse=True)  # complete runs are listed first
    assert ship_rule.main([]) == 0
    table = capsys.readouterr().out
    assert all(f"| {v.run} |" in table for v in verdicts)
    with pytest.raises(SystemExit):
        ship_rule.main(["no-such-run"])
