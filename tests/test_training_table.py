"""The README's trained-embedder table and direction checks are rendered from results, correctly."""
from __future__ import annotations

import pytest

from benchmarks.decisions.training_table import checks, collection_runs, render


def _run(steps: int, dense: float, sparse: float, **extra) -> dict:
    return {"steps": steps, "train_seconds": 10.0 * steps, "ndcg@10_dense": dense, "ndcg@10_sparse": sparse, **extra}


RUNS = {
    "c/llm2comp-nll": _run(50, 0.20, 0.10),
    "c/prompteol-untrained": _run(0, 0.30, 0.25),
    "c/llm2comp-ctkd": _run(50, 0.25, 0.05),
    "c/llm2comp-rc": _run(40, 0.10, 0.01),
    "c/gircse": _run(50, 0.31, 0.2, test_time_K={"K=20": {"ndcg@10_dense": 0.4}, "K=5": {"ndcg@10_dense": 0.35},
                                               "K=1": {"ndcg@10_dense": 0.2}}),
    "other/infonce": _run(50, 0.9, 0.9),
}


def test_rows_of_one_collection_in_method_order():
    rows = collection_runs(RUNS, "c")
    assert list(rows) == ["prompteol-untrained", "gircse", "llm2comp-ctkd", "llm2comp-nll", "llm2comp-rc"]
    lines = render(RUNS, "c").splitlines()
    assert lines[2] == "| prompteol-untrained | 0 | 0 | 0.300 | 0.250 |"
    assert "infonce" not in render(RUNS, "c")


def test_direction_checks_follow_the_numbers():
    out = checks(collection_runs(RUNS, "c"))
    nll = next(c for c in out if "CTKD beats NLL" in c)
    assert "dense 0.250 vs 0.200 (yes)" in nll and "sparse 0.050 vs 0.100 (no)" in nll and "unequal" not in nll
    rc = next(c for c in out if "CTKD beats RC" in c)
    assert "unequal steps 50 vs 40" in rc
    k = next(c for c in out if "test-time K" in c)  # K sorted numerically, not as strings
    assert "K=1 0.200, K=5 0.350, K=20 0.400 (yes)" in k
    assert out[-1].endswith("dense 0.300: gircse")
    assert not any("CDA" in c for c in out)  # no AutoRegEmbed runs: no claim


def test_unknown_collection_is_an_error():
    with pytest.raises(SystemExit, match="no runs"):
        render(RUNS, "nope")


def test_product_runs_get_their_own_table():
    from benchmarks.decisions.training_table import product_table

    runs = {"adi/prompteol-untrained": {"method": "prompteol", "steps": 0, "train_seconds": 0,
                                        "ndcg@10_dense": 0.3, "ndcg@10_sparse": 0.2},
            "adi/shipped": {"method": "infonce", "steps": 360, "harness": "alignir beir (defaults)", "shipped": True,
                            "ndcg@10_dense": 0.48, "ndcg@10_sparse": 0.485, "ndcg@10_hybrid": 0.4849,
                            "ndcg@10_dense+sparse+bm25": 0.556, "ndcg@10_bm25": 0.475}}
    table = product_table(runs).splitlines()
    assert len(table) == 3 and table[2] == "| adi/shipped | 360 | – | – | yes | 0.480 | 0.485 | 0.485 | 0.556 | 0.475 |"
    runs["adi/shipped"].update(examples_seen=2880, train_cpu_seconds=6386)
    assert product_table(runs).splitlines()[2].startswith("| adi/shipped | 360 | 2,880 | 6,386 | yes | 0.480 |")
    assert "shipped" not in collection_runs(runs, "adi")
