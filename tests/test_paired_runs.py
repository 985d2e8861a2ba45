"""The paired comparison of two recorded runs (benchmarks/decisions/paired_runs.py): the sign-flip p-value
against hand enumeration, the summary's counts, and the committed record against its own
per-query scores and gpu_train.json's means."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.decisions.paired_runs import OUT, adapter_of, compare, find_index, merge_rows, recorded_mean, sign_flip_p

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks/results"
GPU_TRAIN = json.loads((RESULTS / "gpu_train.json").read_text())
TRAINING = json.loads((RESULTS / "training.json").read_text())


def test_the_p_value_is_the_share_of_sign_patterns_at_least_as_extreme():
    # differences 0.4, 0.2, -0.1: of the 8 sign patterns, the sums 0.5 (observed), 0.7, -0.5 and
    # -0.7 are at least as far from 0 as the observed one -> 4 / 8
    assert sign_flip_p([0.5, 0.3, 0.2], [0.1, 0.1, 0.3]) == pytest.approx(0.5)
    # five wins: only all-plus and all-minus are as extreme -> 2 / 32
    assert sign_flip_p([1.0] * 5, [0.0] * 5) == pytest.approx(2 / 32)
    assert sign_flip_p([0.3, 0.2], [0.3, 0.2]) == 1.0
    with pytest.raises(ValueError, match="equal-length"):
        sign_flip_p([0.1, 0.2], [0.1])


def test_a_large_query_set_is_sampled_with_its_seed():
    a = [0.1 * (i % 7) for i in range(40)]
    b = [0.1 * ((i + 2) % 7) for i in range(40)]
    p = sign_flip_p(a, b, resamples=2000, seed=3)
    assert p == sign_flip_p(a, b, resamples=2000, seed=3) and 0.0 < p <= 1.0


def test_the_summary_counts_wins_losses_and_ties_per_query():
    row = compare({"q1": 0.5, "q2": 0.2, "q3": 0.4, "q4": 0.0}, {"q1": 0.3, "q2": 0.2, "q3": 0.6, "q4": 0.1})
    assert (row["wins"], row["losses"], row["ties"], row["queries"]) == (1, 2, 1, 4)
    assert row["mean"] == pytest.approx(0.275) and row["against_mean"] == pytest.approx(0.3)
    assert row["mean_diff"] == pytest.approx(-0.025)
    with pytest.raises(ValueError, match="same queries"):
        compare({"q1": 0.5}, {"q2": 0.5})


def test_a_shipped_model_is_searched_with_its_own_weights_and_a_run_with_its_kept_adapter():
    assert adapter_of("smollm2-135m-alignir-v4", GPU_TRAIN) == "builtin:smollm2-135m-alignir-v4"
    assert adapter_of("gpu-distill-85", GPU_TRAIN) == GPU_TRAIN["runs"]["gpu-distill-85"]["kept_adapter"]
    with pytest.raises(KeyError, match="no run named"):
        adapter_of("no-such-run", GPU_TRAIN)
    # a shipped model's recorded mean is the row the ship rule reads for it
    v4_cisi = TRAINING["runs"]["cisi/smollm2-135m-alignir-v4"]["ndcg@10_dense+sparse+bm25"]
    assert recorded_mean(GPU_TRAIN, TRAINING, "smollm2-135m-alignir-v4", "cisi", "dense+sparse+bm25") == v4_cisi



def test_a_run_re_recorded_after_a_fusion_change_reads_its_old_three_legs_on_request():
    row = {"fusion_before": 0.6, "metrics": {"dense": {"ndcg@10": 0.5}, "dense+sparse+bm25": {"ndcg@10": 0.59}}}
    gpu = {"runs": {"r": {"scores": {"trained": {"adi": row}}}}}
    assert recorded_mean(gpu, {"runs": {}}, "r", "adi", "dense+sparse+bm25") == 0.59
    assert recorded_mean(gpu, {"runs": {}}, "r", "adi", "dense+sparse+bm25", before_fusion_change=True) == 0.6
    assert recorded_mean(gpu, {"runs": {}}, "r", "adi", "dense", before_fusion_change=True) == 0.5
    assert recorded_mean(gpu, {"runs": {}}, "r", "cisi", "dense") is None

def test_an_index_is_found_under_either_spelling_of_its_adapter_path(tmp_path):
    from benchmarks.gpu.gpu_train import index_folder
    from benchmarks.decisions.paired_runs import ROOT

    folder = Path("../shared/datasets/adi")
    assert find_index(folder, "benchmarks/results/adapters/x", tmp_path) is None
    built = index_folder(folder, str(ROOT / "benchmarks/results/adapters/x"), tmp_path)
    built.mkdir()
    (built / "manifest.json").write_text("{}")
    assert find_index(folder, "benchmarks/results/adapters/x", tmp_path) == built
    assert find_index(folder, str(ROOT / "benchmarks/results/adapters/x"), tmp_path) == built


def test_merging_replaces_the_rows_of_the_same_comparison(tmp_path):
    path = tmp_path / "paired.json"
    row = {"run": "a", "against": "b", "collection": "adi", "leg": "dense", "mean": 0.1}
    merge_rows(path, [row, {**row, "leg": "sparse"}])
    merge_rows(path, [{**row, "mean": 0.2}])
    rows = json.loads(path.read_text())["rows"]
    assert sorted((r["leg"], r["mean"]) for r in rows) == [("dense", 0.2), ("sparse", 0.1)]


@pytest.mark.parametrize("row", json.loads(OUT.read_text())["rows"] if OUT.is_file() else [],
                         ids=lambda r: f"{r['run']}-vs-{r['against']}-{r['collection']}-{r['leg']}")
@pytest.mark.e2e  # each recorded comparison derived again
def test_each_recorded_comparison_follows_from_its_per_query_scores(row):
    mine = {q: a for q, a, _ in row["per_query"]}
    theirs = {q: b for q, _, b in row["per_query"]}
    again = compare(mine, theirs, row["resamples"])
    for key in ("queries", "mean", "against_mean", "mean_diff", "wins", "losses", "ties"):
        assert again[key] == pytest.approx(row[key], abs=1e-4), key
    # the exact or seeded p-value, recomputed with the command's resamples
    assert again["p_two_sided"] == pytest.approx(row["p_two_sided"], rel=1e-3, abs=1e-5)
    # the same queries and index as the scoring: the means are gpu_train.json's rows (three legs
    # with the fusion the comparison ran with: before the fusion guard, ``fusion_before``, for
    # comparisons made before it; the current rows for those made since)
    for side, name in (("mean", row["run"]), ("against_mean", row["against"])):
        recorded = {recorded_mean(GPU_TRAIN, TRAINING, name, row["collection"], row["leg"], before_fusion_change=b)
                    for b in (True, False)} - {None}
        assert any(row[side] == pytest.approx(r, abs=1e-4) for r in recorded), (side, row[side], recorded)
