"""The per-query guard of the calibrated fusion (retrieval/fusion_guard.py): its ramp, each
query's agreement measured as the calibration measured the pseudo-queries', what it leaves
alone, and the plan that carries it (fuse, to_dict, describe). Values computed by hand."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from alignir.errors import InvalidInputError
from alignir.retrieval import fusion as F
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.config import FusionConfig
from alignir.retrieval.fusion_guard import CALIBRATED_GUARD, FusionGuard
from alignir.retrieval.fusion_plan import fuse_legs, resolve_plan

THREE = ("dense", "sparse", "bm25")
#: both legs agreed with BM25 at 0.5 on the pseudo-queries (above the gate's tau: full weight)
CAL = FusionCalibration(agreement={"dense": 0.5, "sparse": 0.5}, queries=8)
#: 100 documents; BM25 finds 0..59 (best first)
BM25 = {d: 60.0 - d for d in range(60)}
#: a leg that shares half of its top 10 with BM25: docs 0..4 and 200..204
HALF = {**{d: 10.0 - d for d in range(5)}, **{200 + i: 5.0 - i for i in range(5)}}
#: a leg that finds BM25's top 10 in its own order
SAME = {d: float(d) for d in range(10)}
#: a leg of another query: nothing in common with BM25
OTHER = {300 + i: 10.0 - i for i in range(10)}


def test_the_ramp():
    g = FusionGuard(ratio=0.5)
    assert g.factor(0.1, 0.4) == pytest.approx(0.5)   # 0.1 / 0.4 = 0.25 of the stored; 0.25 / 0.5
    assert g.factor(0.3, 0.4) == 1.0                   # 0.75 >= 0.5: full weight
    assert g.factor(0.0, 0.4) == 0.0                   # chance: out
    assert g.factor(0.0, 0.0) == 1.0                   # nothing stored to compare with
    floored = FusionGuard(ratio=1.0, floor=0.5, power=2.0)
    assert floored.factor(0.3, 0.4) == pytest.approx(0.25)  # ((0.75 - 0.5) / (1 - 0.5)) ** 2
    assert floored.factor(0.2, 0.4) == 0.0                  # at the floor
    assert FusionGuard(ratio=0).factor(0.0, 0.4) == 1.0     # off
    for bad in ({"ratio": -1}, {"ratio": 0.5, "floor": 0.5}, {"power": 0}, {"ratio": float("nan")}):
        with pytest.raises(InvalidInputError):
            FusionGuard(**bad)


def test_a_query_is_measured_as_the_calibration_measured_its_pseudo_queries():
    # HALF against BM25, 100 documents: its top 10 in BM25's top 50: 5/10; BM25's top 10 in its
    # top 50 (all 10 of it): 5/10; o = 0.5. Chance: 50/100 one way, 10/100 the other, c = 0.3;
    # corrected (0.5 - 0.3) / 0.7 = 0.285714, 0.571429 of the stored 0.5; ratio 0.75: 0.761905.
    f = FusionGuard(ratio=0.75).factors(THREE, [HALF, SAME, BM25], CAL, n_docs=100)
    assert f == pytest.approx([0.2 / 0.7 / 0.5 / 0.75, 1.0, 1.0])
    assert F.AgreeParams().agreement(HALF, BM25, 100) == pytest.approx(0.2 / 0.7)


def test_a_joint_guard_gives_the_llm_legs_one_factor_from_their_mean_share():
    # HALF: 0.285714 / 0.5 = 0.571429 of the stored agreement; OTHER: 0. Mean 0.285714; ratio 0.75:
    # 0.380952 for both. Apart: 0.761905 and 0.
    lists = [HALF, OTHER, BM25]
    assert FusionGuard(ratio=0.75, joint=True).factors(THREE, lists, CAL, n_docs=100) == pytest.approx(
        [0.2 / 0.7 / 0.5 / 2 / 0.75] * 2 + [1.0])
    assert FusionGuard(ratio=0.75).factors(THREE, lists, CAL, n_docs=100) == pytest.approx(
        [0.2 / 0.7 / 0.5 / 0.75, 0.0, 1.0])
    # a leg without a list or a stored agreement takes no part in the mean
    assert FusionGuard(ratio=0.75, joint=True).factors(THREE, [HALF, {}, BM25], CAL, n_docs=100) == pytest.approx(
        [0.2 / 0.7 / 0.5 / 0.75, 1.0, 1.0])
    with pytest.raises(InvalidInputError):
        FusionGuard(joint="yes")


def test_what_the_guard_leaves_alone():
    g = FusionGuard(ratio=0.75)
    assert g.factors(THREE, [OTHER, OTHER, {}], CAL, n_docs=100) == [1.0, 1.0, 1.0]  # no BM25 list: nothing to agree with
    assert g.factors(THREE, [OTHER, {}, BM25], CAL, n_docs=100) == [0.0, 1.0, 1.0]   # an empty leg drops out anyway
    only_dense = FusionCalibration(agreement={"dense": 0.5}, queries=8)
    assert g.factors(THREE, [OTHER, OTHER, BM25], only_dense, n_docs=100) == [0.0, 1.0, 1.0]  # sparse not calibrated
    assert FusionGuard(ratio=0).factors(THREE, [OTHER, OTHER, BM25], CAL, n_docs=100) == [1.0, 1.0, 1.0]


def test_the_default_guard_is_joint():
    # SAME agrees fully: o = 1, share 1 / 0.5 = 2; OTHER: 0. Joint: the mean share 1 >= 0.75, both
    # legs at full weight; two legs of another query: 0 for both
    p = resolve_plan("dense+sparse+bm25", THREE, calibration=CAL)
    assert p.guard == CALIBRATED_GUARD == FusionGuard(ratio=0.75, joint=True)
    assert p.query_weights([OTHER, SAME, BM25], 100) == pytest.approx([0.2, 0.2, 0.6])
    assert p.query_weights([OTHER, OTHER, BM25], 100) == pytest.approx([0.0, 0.0, 0.6])
    assert p.query_weights([HALF, OTHER, BM25], 100) == pytest.approx([0.2 * 0.2 / 0.7 / 0.5 / 2 / 0.75] * 2 + [0.6])


def test_the_plan_guards_each_query_of_the_calibrated_fusion():
    p = resolve_plan("dense+sparse+bm25", THREE, calibration=CAL)
    assert p.sources["guard"].source == "alignir default"
    p = replace(p, guard=FusionGuard(ratio=0.75))  # per leg
    w = [p.weights[leg] for leg in THREE]
    assert w == pytest.approx([0.2, 0.2, 0.6])  # calibrated weights: both legs above the gate
    zscore = FusionConfig(method="zscore")
    # a query on which both legs agree as the pseudo-queries did: the calibrated fusion as before
    agreeing = [SAME, SAME, BM25]
    assert p.query_weights(agreeing, 100) == pytest.approx(w)
    assert p.fuse(agreeing, 100) == fuse_legs(agreeing, w, zscore)
    # dense is another query's list: it drops out, sparse stays
    shifted = [OTHER, SAME, BM25]
    assert p.query_weights(shifted, 100) == pytest.approx([0.0, 0.2, 0.6])
    assert p.fuse(shifted, 100) == fuse_legs(shifted, [0.0, 0.2, 0.6], zscore)
    # both legs lost: the fused order is BM25's
    lost = [OTHER, OTHER, BM25]
    assert p.fuse(lost, 100) == fuse_legs(lost, [0.0, 0.0, 0.6], zscore) != fuse_legs(lost, w, zscore)
    assert [d for d, _ in F.ranked(p.fuse(lost, 100), 60)] == list(range(60))


def test_the_plan_shows_its_guard_and_only_under_calibrated():
    p = resolve_plan("dense+sparse+bm25", THREE, calibration=CAL)
    d = json.loads(json.dumps(p.to_dict()))
    assert d["guard"] == {"ratio": CALIBRATED_GUARD.ratio, "floor": CALIBRATED_GUARD.floor,
                          "power": CALIBRATED_GUARD.power, "joint": CALIBRATED_GUARD.joint}
    line = next(x for x in p.describe().splitlines() if x.split()[:1] == ["guard"])
    assert f"agreement with bm25 is >= {CALIBRATED_GUARD.ratio:g} x the stored" in line
    assert "[alignir default:" in line
    for other in (resolve_plan("dense+sparse+bm25", THREE), resolve_plan("dense+sparse+bm25", THREE, fusion="zscore",
                                                                         calibration=CAL)):
        assert other.guard is None and "guard" not in other.sources and other.to_dict()["guard"] is None
        assert other.query_weights([OTHER, OTHER, BM25], 100) == [other.weights[leg] for leg in THREE]



def test_the_benchmark_shifts_only_the_real_queries_and_chooses_by_its_stated_rule():
    from benchmarks.defaults.fusion_guard import choose, query_shift
    from benchmarks.defaults.fusion_rules import Setting

    legs = {"dense": {"a": {"d1": 1.0}, "b": {"d2": 1.0}}, "sparse": {"a": {"d3": 1.0}, "b": {"d4": 1.0}},
            "bm25": {"a": {"d1": 2.0}, "b": {"d2": 2.0}}}
    pseudo = {"dense": [{"d1": 1.0}], "sparse": [{"d3": 1.0}], "bm25": [{"d1": 1.0}]}
    s = query_shift(Setting("x", "adi", "m", 512, {}, legs, 4, pseudo))
    assert s.legs["dense"] == {"a": {"d2": 1.0}, "b": {"d1": 1.0}} and s.legs["bm25"] == legs["bm25"]
    assert s.pseudo is pseudo and s.name == "x-query-shift"
    # cost: mean loss on the real units against "off"; worst: the least margin to BM25 anywhere
    table = [{"kind": "real", "bm25": 0.50, "ndcg": {"off": 0.60, "a": 0.598, "b": 0.590, "c": 0.596}},
             {"kind": "query-shift", "bm25": 0.50, "ndcg": {"off": 0.40, "a": 0.480, "b": 0.499, "c": 0.4801}}]
    chosen, stats = choose(table, {"off": FusionGuard(ratio=0), "a": FusionGuard(ratio=0.5),
                                   "b": FusionGuard(ratio=1.0), "c": FusionGuard(ratio=0.25)})
    assert stats["b"] == {"cost": 0.01, "worst": -0.001}  # the best worst case, but it costs 0.01 > 0.005
    assert stats["a"] == {"cost": 0.002, "worst": -0.02} and stats["c"] == {"cost": 0.004, "worst": -0.0199}
    assert chosen == "a"  # a and c tie at -0.020 (rounded to 0.001): the lower cost wins over the lower ratio


def test_held_out_rows_merge_by_unit_and_keep_the_recorded_choice(tmp_path):
    from benchmarks.defaults.fusion_guard import label, write_held_out

    out = tmp_path / "fusion_guard.json"
    out.write_text(json.dumps({"chosen": "kept"}))
    shipped = label(CALIBRATED_GUARD)

    def unit(name, kind, bm25, off, guard):
        return {"unit": name, "kind": kind, "dataset": "d", "model": "m", "bm25": bm25,
                "ndcg": {"off": off, shipped: guard}}

    write_held_out(out, [unit("a", "real", 0.40, 0.50, 0.49), unit("a-qs", "query-shift", 0.40, 0.30, 0.394)], "c1", [])
    held = write_held_out(out, [unit("a-qs", "query-shift", 0.40, 0.30, 0.396), unit("b", "real", 0.5, 0.6, 0.6)],
                          "c2", [])
    data = json.loads(out.read_text())
    assert data["chosen"] == "kept" and data["held_out"] == held
    assert [u["unit"] for u in held["units"]] == ["a", "a-qs", "b"]  # a unit scored again replaces its row
    assert held["worst_margin_by_kind"] == {"real": 0.09, "query-shift": -0.004}
    assert held["meets_bm25_minus_0.005"] == {"real": True, "query-shift": True} and held["commands"] == ["c1", "c2"]
    worse = write_held_out(out, [unit("c-qs", "query-shift", 0.40, 0.30, 0.39)], "c3", [], write=False)
    assert worse["meets_bm25_minus_0.005"] == {"real": True, "query-shift": False}
    assert json.loads(out.read_text())["held_out"]["commands"] == ["c1", "c2"]  # not written
