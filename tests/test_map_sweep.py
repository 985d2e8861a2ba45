"""The settings sweep of the aligned-token map: its rule, and the recorded sweep against it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.training.map_sweep import choose, folder_name, parse_setting, summary_row

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _fit(weight, held_after, transfer_after, breadth=0.0, transfer_before=0.8):
    return {"config": {"function_weight": weight, "breadth": breadth, "identity_weight": 0.05},
            "held_out_ndcg@10": {"before": 0.5, "after": held_after},
            "transfer_ndcg@10": {"pairs_per_corpus": 10, "before": {"a": transfer_before, "mean": transfer_before},
                                 "after": {"a": transfer_after, "mean": transfer_after}},
            "identity_distance": 1.0, "seconds": 1.0}


def test_the_largest_held_out_gain_among_the_settings_that_keep_the_transfer_is_chosen():
    fits = [_fit(1e-5, 0.75, 0.79), _fit(1e-4, 0.6, 0.8), _fit(1e-3, 0.55, 0.81)]
    # 1e-5 gains most but lowers the transfer; of the two that keep it (a tie counts), 1e-4 gains more
    assert choose(fits)["index"] == 1 and choose(fits)["settings"]["function_weight"] == 1e-4
    tie = [_fit(1e-4, 0.6, 0.8), _fit(1e-4, 0.6, 0.82, breadth=0.5)]
    assert choose(tie)["index"] == 0
    lost = [_fit(1e-5, 0.75, 0.7), _fit(1e-3, 0.6, 0.79)]
    chosen = choose(lost)
    assert chosen["index"] == 1 and "least" in chosen["why"]


def test_a_fit_without_a_transfer_measure_and_bad_settings_are_refused():
    bare = {**_fit(1e-5, 0.7, 0.8), "transfer_ndcg@10": None}
    with pytest.raises(ValueError, match="transfer_pairs"):
        choose([bare])
    with pytest.raises(ValueError, match="no fit"):
        choose([])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_setting("tau=0.05")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_setting("function_weight")


def test_settings_parse_and_name_their_folder():
    assert parse_setting("function_weight=3e-5, breadth=0.5") == {"function_weight": 3e-5, "breadth": 0.5}
    assert folder_name("function_weight=3e-5,breadth=0.5") == "function_weight3e-5-breadth0.5"


def test_summary_row_is_the_gain_and_the_change_per_corpus():
    row = summary_row(_fit(3e-5, 0.7, 0.77))
    assert row["held_out_gain"] == 0.2 and row["transfer_change"] == {"a": -0.03, "mean": -0.03}
    assert row["function_weight"] == 3e-5 and row["breadth"] == 0.0


def test_the_recorded_sweep_follows_its_rule_and_its_chosen_map_is_the_kept_one():
    sweep = json.loads((RESULTS / "map_sweep.json").read_text())
    assert choose(sweep["fits"]) == sweep["chosen"]
    assert sweep["settings"] == [summary_row(r) for r in sweep["fits"]]
    chosen = sweep["fits"][sweep["chosen"]["index"]]
    kept = [json.loads(p.read_text()) for p in (RESULTS / "adapters").glob("*/alignir_sparse_map.json")]
    assert chosen in kept, "the chosen map is kept in benchmarks/results/adapters/"
