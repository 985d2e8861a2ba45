"""The ship rule (benchmarks/decisions/ship_rule.py): a run replaces the shipped default only if its three
legs beat the default's on at least four of the five collections and lose nowhere by more than
0.005; judged on the rows on file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.decisions import ship_rule
from benchmarks.decisions.ship_rule import COLLECTIONS, RULED_LEG, judge

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


def _files() -> tuple[dict, dict]:
    return (json.loads((RESULTS / "training.json").read_text()),
            json.loads((RESULTS / "gpu_train.json").read_text()))


def test_shipped_rows_agree_with_the_scoring_harness():
    """A shipped model's product rows (training.json) and the same adapter scored through
    gpu_train.py's harness (gpu_train.json) are the same numbers, so the rule compares like with
    like: v3 scored again as a check, and v4 against the run it was packaged from. A three-leg
    value re-recorded after a change of the fusion keeps the one it replaced (``fusion_before``):
    a harness row scored before the change is compared with that, one re-recorded with both."""
    training, gpu_train = _files()
    runs = gpu_train["runs"]
    pairs = [("smollm2-135m-alignir-v3", runs["harness-check-and-smoke"], "v3")]
    pairs += [(model, runs[run], "trained") for model, run in ship_rule.SHIPPED_FROM.items()]
    compared = 0
    for model, run, label in pairs:
        harness = ship_rule.run_rows(run, label)
        for collection in ship_rule.COLLECTIONS:
            row = training["runs"].get(f"{collection}/{model}")
            if row is None or collection not in harness:
                continue
            before = run["scores"][label][collection].get("fusion_before")
            for leg, value in harness[collection].items():
                key = f"ndcg@10_{leg}"
                recorded = row[key]
                if leg == RULED_LEG and before is None:  # the harness row predates the change
                    recorded = row.get("fusion_before", recorded)
                elif leg == RULED_LEG:  # both re-recorded: the same fusion before and after
                    assert before == pytest.approx(row["fusion_before"], abs=1e-4), (model, collection)
                assert value == pytest.approx(recorded, abs=1e-4), (model, collection, leg)
                compared += 1
    assert compared >= 2 * len(ship_rule.LEGS)  # at least ADI of each


def test_the_default_is_judged_on_all_five_and_missing_rows_come_from_its_run():
    from alignir.encoders.shipped import DEFAULT_MODEL

    training, gpu_train = _files()
    default = ship_rule.default_rows(training, gpu_train, DEFAULT_MODEL)
    assert set(default) == set(COLLECTIONS)
    source = ship_rule.SHIPPED_FROM.get(DEFAULT_MODEL)
    for c in COLLECTIONS:
        row = training["runs"].get(f"{c}/{DEFAULT_MODEL}")
        want = ship_rule.run_rows(gpu_train["runs"][source])[c] if row is None else \
            {leg: row[f"ndcg@10_{leg}"] for leg in ship_rule.LEGS}
        assert default[c] == want
    with pytest.raises(KeyError, match="no row on"):
        ship_rule.default_rows(training, gpu_train, "smollm2-135m-alignir-v2")  # scored on two collections


def test_every_recorded_run_is_judged_on_what_it_has(capsys):
    from alignir.encoders.shipped import DEFAULT_MODEL

    training, gpu_train = _files()
    default = ship_rule.default_rows(training, gpu_train, DEFAULT_MODEL)
    verdicts = ship_rule.judge_all(gpu_train, training, DEFAULT_MODEL, default)
    names = {v.run for v in verdicts}
    scored = {name for name, run in gpu_train["runs"].items() if run.get("scores", {}).get("trained")}
    assert scored - {ship_rule.SHIPPED_FROM.get(DEFAULT_MODEL)} <= names
    assert ship_rule.SHIPPED_FROM.get(DEFAULT_MODEL) not in names and DEFAULT_MODEL not in names
    assert "smollm2-135m-alignir-v3" in names  # an earlier default is judged beside the runs
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


def test_the_shipped_default_passed_the_rule_over_the_one_before():
    """The default was shipped by the rule: judged against the previous default, it ships."""
    from alignir.encoders.shipped import DEFAULT_MODEL, SHIPPED

    previous = list(SHIPPED)[list(SHIPPED).index(DEFAULT_MODEL) - 1]
    training, gpu_train = _files()
    default = ship_rule.default_rows(training, gpu_train, previous)
    rows = ship_rule.shipped_rows(training, gpu_train, DEFAULT_MODEL)
    assert ship_rule.judge(DEFAULT_MODEL, rows, default).ships


def test_a_shipped_adapter_is_the_kept_adapter_of_the_run_it_was_shipped_from():
    """The rows that stand in for a shipped model's missing product rows are those of the very
    weights it ships: its adapter files are the run's kept adapter byte for byte."""
    import hashlib

    from alignir.encoders.shipped import SHIPPED, adapter_dir

    _, gpu_train = _files()
    root = RESULTS.parents[1]
    # weights that left the tree are compared by the sha256 recorded when they left
    recorded = json.loads((root / "benchmarks/results/adapters/adapter_hashes.json").read_text())["runs"]
    for model, run in ship_rule.SHIPPED_FROM.items():
        assert model in SHIPPED
        kept = root / gpu_train["runs"][run]["kept_adapter"]
        removed = recorded.get(kept.name, {}).get("removed", [])
        for name in ("adapter_config.json", "adapter_model.safetensors", "alignir_extra.safetensors"):
            kept_digest = (recorded[kept.name]["files"][name]["sha256"] if name in removed
                           else hashlib.sha256((kept / name).read_bytes()).hexdigest())
            assert hashlib.sha256((adapter_dir(model) / name).read_bytes()).hexdigest() == kept_digest, (model, run, name)


def _legs(three: float, dense: float = 0.5, sparse: float = 0.5, bm25: float = 0.45) -> dict[str, float]:
    return {"dense+sparse+bm25": three, "dense": dense, "sparse": sparse, "bm25": bm25}


TEXT_FORM = {"model": "default", "rows": [
    {"collection": "adi", "setting": "original", "text_form": "auto", "ndcg@10": _legs(0.58)},
    {"collection": "adi", "setting": "queries-capitals", "text_form": "auto", "ndcg@10": _legs(0.57)},
    {"model": "new", "collection": "adi", "setting": "original", "text_form": "auto", "ndcg@10": _legs(0.60)},
    {"model": "new", "collection": "adi", "setting": "queries-capitals", "text_form": "auto",
     "ndcg@10": _legs(0.564)},
    {"model": "half", "collection": "adi", "setting": "original", "text_form": "auto", "ndcg@10": _legs(0.70, 0.6)},
    # against its own original: three legs 0.69 within 0.02 of 0.70, but dense 0.54 is 0.06 under 0.60
    {"model": "half", "collection": "adi", "setting": "both-lower", "text_form": "auto", "ndcg@10": _legs(0.69, 0.54)},
    {"model": "half", "collection": "adi", "setting": "original", "text_form": "off", "ndcg@10": _legs(0.44)}]}
COST = [{"kind": "model-cost", "model": "new", "dataset": "scifact", "ratio_to": "default", "docs_per_s_ratio": 0.9},
        {"kind": "model-cost", "model": "new", "dataset": "med", "ratio_to": "default", "docs_per_s_ratio": 0.81},
        {"kind": "model-cost", "model": "slow", "dataset": "med", "ratio_to": "default", "docs_per_s_ratio": 0.79},
        {"kind": "model-cost", "model": "elsewhere", "dataset": "med", "ratio_to": "other", "docs_per_s_ratio": 2.0}]


def test_form_and_cost_are_read_from_their_result_files():
    # new: 0.60 - 0.58 = +0.02 and 0.564 - 0.57 = -0.006 -> -0.006; half lacks a setting: not measured
    assert ship_rule.form_margin(TEXT_FORM, "new", "default") == pytest.approx(-0.006)
    assert ship_rule.form_margin(TEXT_FORM, "half", "default") is None
    assert ship_rule.form_margin(None, "new", "default") is None
    assert ship_rule.form_margin(TEXT_FORM, "default", "default") == 0.0
    assert ship_rule.cost_ratio(COST, "new", "default") == 0.81  # the slower collection
    assert ship_rule.cost_ratio(COST, "elsewhere", "default") is None  # not measured against the default
    assert ship_rule.cost_ratio(COST, "nobody", "default") is None


@pytest.mark.parametrize(("model", "form", "cost", "ships"), [
    ("new", {"queries-capitals": 0.565}, COST, True),   # form -0.005 (allowed), cost 0.81 >= 0.8
    ("new", {}, COST, False),                            # form -0.006
    ("slow", {"queries-capitals": 0.565}, COST, False),  # cost 0.79 < 1 / 1.25 (and no form rows)
    ("new", {"queries-capitals": 0.565}, None, False),   # cost not measured
])
def test_a_run_ships_only_with_quality_form_and_cost(model, form, cost, ships):
    rows = json.loads(json.dumps(TEXT_FORM))
    for r in rows["rows"]:
        if r.get("model") == "new" and r["setting"] in form:
            r["ndcg@10"]["dense+sparse+bm25"] = form[r["setting"]]
    v = ship_rule.with_form_and_cost(judge(model, _rows(0.01, 0.01, 0.01, 0.01, 0.01), DEFAULT), rows, cost,
                                     "default")
    assert v.quality and v.ships is ships
    line = ship_rule.decision([v], "default")
    assert line.split(";")[0] == ("decision: ship new in place of default" if ships else
                                  "decision: keep default: no run passes quality, form and cost (1 of 1 pass quality)")


def test_a_models_own_form_rows_are_reported_with_their_goals():
    """Rows of a model measured on part of the settings: each is judged against the model's own
    original, its margin taken over the default's row where the default has one."""
    rows = {(r["setting"], r["text_form"]): r for r in ship_rule.own_form_rows(TEXT_FORM, "half", "default")}
    assert set(rows) == {("original", "auto"), ("both-lower", "auto"), ("original", "off")}
    assert rows["original", "auto"]["vs_default"] == pytest.approx(0.12) and rows["original", "auto"]["goals_met"]
    lower = rows["both-lower", "auto"]
    assert lower["vs_default"] is None and not lower["goals_met"]  # the default has no both-lower row here
    assert lower["goals"] == {"three_legs_ge_bm25": True, "three_legs_within_0.02_of_original": True,
                              "dense_within_0.05_of_original": False}
    assert not rows["original", "off"]["goals_met"]  # three legs 0.44 under BM25 0.45
    assert ship_rule.own_form_rows(TEXT_FORM, "nobody", "default") == []
    v = ship_rule.with_form_and_cost(judge("half", _rows(0.01, 0.01, 0.01, 0.01, 0.01), DEFAULT), TEXT_FORM, COST,
                                     "default")
    assert v.form_worst is None and not v.ships  # part of the settings: the form rule is not met
    assert ship_rule.form_summary(v) == "1 of 2 settings, worst +0.120, goals met 1 of 3"
    line = ship_rule.decision([v], "default")
    assert line.endswith("(1 of 1 pass quality); half text form: 1 of 2 settings, worst +0.120, goals met 1 of 3")
    table = ship_rule.render([v], DEFAULT, "default")
    assert "| adi | auto | both-lower | 0.690 | 0.540 | 0.500 | 0.450 | – | missed: dense_within_0.05_of_original |" \
        in table
