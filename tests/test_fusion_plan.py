"""The fusion plan (retrieval/fusion_plan.py): every precedence case of resolve_plan (the call's
fusion / alpha / weights / depth against the index's saved fusion, its leg-set defaults, its
shipped model's, its calibration and the agree fallback), the errors of bad combinations, the
plan's record and summary, and a searcher executing exactly its plan."""
from __future__ import annotations

import json

import pytest

from alignir.encoders.shipped import SHIPPED
from alignir.errors import InvalidInputError
from alignir.retrieval import fusion as F
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.config import FusionConfig, SparseConfig
from alignir.retrieval.fusion_plan import (CALIBRATED_GATE, LEG_SET_AGREE, LEG_SET_CALIBRATED, LEG_SET_WEIGHTS,
                                           SOURCES, FusionPlan, fuse_legs, resolve_plan)

THREE = ("dense", "sparse", "bm25")
V3 = SHIPPED["smollm2-135m-alignir-v3"]
#: an index's calibration: dense at half the gate's tau, sparse above it
CAL = FusionCalibration(agreement={"dense": CALIBRATED_GATE.tau / 2, "sparse": 0.9}, queries=8)


def plan(mode: str, legs=None, **kw) -> FusionPlan:
    return resolve_plan(mode, legs or (("dense", "sparse") if mode == "hybrid" else tuple(mode.split("+"))), **kw)


def sources(p: FusionPlan) -> dict[str, str]:
    return {k: c.source for k, c in p.sources.items()}


def test_a_leg_set_with_bm25_defaults_to_calibrated_gated_by_the_index_calibration():
    p = plan("dense+sparse+bm25", calibration=CAL)
    assert (p.rule, p.requested, p.fallback) == ("calibrated", "calibrated", None)
    assert p.base_weights == pytest.approx({"dense": 0.2, "sparse": 0.2, "bm25": 0.6})  # LEG_SET_WEIGHTS, normalised
    assert p.weights == pytest.approx({"dense": 0.1, "sparse": 0.2, "bm25": 0.6})  # dense gated by 0.5
    assert p.gate == CALIBRATED_GATE and p.calibration is CAL
    assert sources(p) == {"rule": "alignir default", "weights": "alignir default", "gate": "alignir default",
                          "calibration": "calibration", "guard": "alignir default", "depth": "index config"}
    two = plan("sparse+bm25", calibration=CAL)
    assert two.gate == LEG_SET_CALIBRATED[("sparse", "bm25")]
    assert two.weights == pytest.approx({"sparse": 0.4, "bm25": 0.6})  # agreement 0.9 > tau 0.4: full weight


def test_without_a_calibration_calibrated_falls_back_to_the_per_query_agree_gate():
    for fusion in (None, "calibrated"):
        p = plan("sparse+bm25", fusion=fusion)
        assert (p.rule, p.requested) == ("agree", "calibrated") and "no stored calibration" in p.fallback
        assert p.sources["rule"].source == "fallback" and p.calibration is None
        assert p.gate == LEG_SET_AGREE[("sparse", "bm25")]
        w = LEG_SET_WEIGHTS["agree"][("sparse", "bm25")]
        assert p.weights == pytest.approx({k: v / sum(w.values()) for k, v in w.items()})
    asked = plan("dense+bm25", fusion="agree", calibration=CAL)  # asked for by name: no fallback, no calibration
    assert (asked.rule, asked.fallback, asked.calibration) == ("agree", None, None)
    assert asked.sources["rule"].source == "user"


def test_the_user_fusion_beats_the_index_and_leg_set_defaults():
    cfg = FusionConfig(method="zscore", alpha=0.7, leg_sets={"dense+sparse+bm25": {
        "weights": {"dense": 3, "sparse": 3, "bm25": 4}, "gate_power": 2}})
    p = plan("dense+sparse+bm25", fusion="minmax", config=cfg, calibration=CAL)
    assert p.rule == "minmax" and p.sources["rule"].source == "user"
    assert p.weights == pytest.approx({"dense": 1 / 3, "sparse": 1 / 3, "bm25": 1 / 3}) and p.gate is None
    z = plan("dense+sparse+bm25", fusion="zscore", config=cfg, calibration=CAL)  # the fixed z-score weights
    assert z.weights == pytest.approx({"dense": 0.2, "sparse": 0.2, "bm25": 0.6}) and z.calibration is None
    assert z.sources["weights"].source == "alignir default"
    h = plan("hybrid", fusion="rrf", config=cfg)
    assert (h.rule, h.rrf_weights, h.alpha) == ("rrf", None, None) and "plain RRF" in h.sources["weights"].reason


def test_the_index_leg_set_defaults_apply_under_calibrated_only_without_user_weights():
    cfg = FusionConfig(leg_sets={"dense+sparse+bm25": {"weights": {"dense": 3, "sparse": 3, "bm25": 4},
                                                       "gate_power": 2}})
    p = plan("dense+sparse+bm25", config=cfg, calibration=CAL)
    assert p.base_weights == pytest.approx({"dense": 0.3, "sparse": 0.3, "bm25": 0.4})
    assert p.gate.power == 2.0 and p.weights == pytest.approx({"dense": 0.3 * 0.5 ** 2, "sparse": 0.3, "bm25": 0.4})
    assert p.sources["weights"].source == p.sources["gate"].source == "index leg-set default"
    # the user's weights are never replaced; under "calibrated" alignir's gate (power 1) gates them
    mine = plan("dense+sparse+bm25", fusion="calibrated", weights={"dense": 2, "sparse": 2, "bm25": 6},
                config=cfg, calibration=CAL)
    assert mine.base_weights == pytest.approx({"dense": 0.2, "sparse": 0.2, "bm25": 0.6})
    assert mine.weights == pytest.approx({"dense": 0.1, "sparse": 0.2, "bm25": 0.6})
    assert mine.sources["weights"].source == "user" and mine.gate == CALIBRATED_GATE
    # weights without a fusion: the index's rule, and no calibration at all
    plain = plan("dense+sparse+bm25", weights={"dense": 2, "sparse": 2, "bm25": 6}, config=cfg, calibration=CAL)
    assert (plain.rule, plain.calibration, plain.gate) == ("minmax", None, None)
    assert plain.sources["rule"].source == "index config"
    # other leg sets keep alignir's defaults; without a calibration the fallback keeps the agree weights
    assert plan("dense+bm25", config=cfg, calibration=CAL).sources["weights"].source == "alignir default"
    assert plan("dense+sparse+bm25", config=cfg).base_weights == pytest.approx(
        {"dense": 0.2, "sparse": 0.2, "bm25": 0.6})


def test_the_shipped_model_defaults_are_named_as_such():
    """An index built with a shipped model saved its fusion at build: the plan names the model."""
    own = {k: dict(v) for k, v in V3.leg_sets.items()}
    cfg = FusionConfig(method=V3.hybrid[0], alpha=V3.hybrid[1], leg_sets=own)
    h = plan("hybrid", config=cfg, model=V3)
    assert (h.rule, h.alpha) == ("zscore", 0.7) and h.weights == pytest.approx({"dense": 0.7, "sparse": 0.3})
    assert sources(h) == {"rule": "model default", "alpha": "model default", "depth": "index config"}
    assert V3.name in h.sources["alpha"].reason
    three = plan("dense+sparse+bm25", config=cfg, model=V3, calibration=CAL)
    assert three.sources["weights"].source == "model default" and three.gate.power == 2.0
    # a config that differs from the model's is the index's own; the searcher's own is the user's
    assert plan("hybrid", config=FusionConfig(method="zscore", alpha=0.5), model=V3).sources["rule"].source == \
        "index config"
    assert plan("hybrid", config=cfg, model=V3, config_source="user").sources["alpha"].source == "user"


def test_hybrid_weighs_dense_by_alpha_and_a_leg_set_without_bm25_weighs_equally():
    cfg = FusionConfig(method="zscore", alpha=0.8)
    h = plan("hybrid", config=cfg, weights={"dense": 1, "sparse": 9})  # weights do not apply to hybrid
    assert h.weights == pytest.approx({"dense": 0.8, "sparse": 0.2}) and h.alpha == 0.8
    assert plan("hybrid", config=cfg, alpha=0.3).sources["alpha"].source == "user"
    ds = plan("dense+sparse", config=cfg)  # the same legs as a '+'-joined set: α only when given
    assert (ds.rule, ds.alpha) == ("zscore", None) and ds.weights == pytest.approx({"dense": 0.5, "sparse": 0.5})
    assert plan("dense+sparse", config=cfg, weights={"dense": 1, "sparse": 3}).weights == pytest.approx(
        {"dense": 0.25, "sparse": 0.75})


def test_alpha_on_a_leg_set_and_weights_for_rrf():
    a = plan("dense+sparse+bm25", alpha=0.4)  # given: no leg-set default, the index's rule
    assert (a.rule, a.alpha) == ("minmax", 0.4) and a.weights == pytest.approx({"dense": 0.4, "sparse": 0.3,
                                                                                  "bm25": 0.3})
    no_dense = plan("sparse+bm25", alpha=0.4)
    assert no_dense.weights == pytest.approx({"sparse": 0.5, "bm25": 0.5}) and no_dense.alpha is None
    assert "lacks" in no_dense.sources["weights"].reason
    r = plan("dense+bm25", fusion="rrf", weights={"dense": 1, "bm25": 3})
    assert r.rrf_weights == {"dense": 1.0, "bm25": 3.0} and r.sources["weights"].source == "user"


def test_depth_and_one_leg():
    assert plan("dense+bm25", depth=7, config=FusionConfig(depth=30)).depth == 7
    p = plan("dense+bm25", config=FusionConfig(depth=30))
    assert p.depth == 30 and p.sources["depth"].source == "index config"
    one = plan("bm25", fusion="calibrated")
    assert (one.rule, one.weights, sources(one)) == ("none", {"bm25": 1.0}, {"rule": "mode"})
    assert one.fuse([{3: 1.0}]) == {3: 1.0}


@pytest.mark.parametrize("kw, match", [
    ({"mode": "dense+sparse", "fusion": "agree"}, "gates the LLM legs by their agreement with the bm25"),
    ({"mode": "hybrid", "fusion": "calibrated"}, "gates the LLM legs by their agreement with the bm25"),
    ({"mode": "hybrid", "config": FusionConfig(method="agree")}, "mode 'hybrid' has none"),
    ({"mode": "dense+bm25", "fusion": "borda"}, "fusion method must be one of"),
    ({"mode": "dense", "fusion": "borda"}, "fusion method must be one of"),  # checked for one leg too
    ({"mode": "dense+bm25", "alpha": 1.5}, r"alpha must be a number in \[0.0, 1.0\]"),
    ({"mode": "dense+bm25", "weights": {"dense": 1}}, r"missing \['bm25'\]"),
    ({"mode": "dense+bm25", "weights": {"dense": 1, "bm25": 1, "colbert": 1}}, r"unknown \['colbert'\]"),
    ({"mode": "dense+bm25", "weights": {"dense": -1, "bm25": 1}}, "finite, >= 0 and not all 0"),
    ({"mode": "dense+bm25", "depth": -3}, "fusion depth must be an integer >= 1"),
])
def test_bad_combinations_raise_the_clear_errors(kw, match):
    with pytest.raises(InvalidInputError, match=match):
        plan(**kw)


def test_the_plan_records_and_summarises_itself():
    cfg = FusionConfig(leg_sets={"dense+sparse+bm25": {"weights": {"dense": 3, "sparse": 3, "bm25": 4},
                                                       "gate_power": 2}})
    p = plan("dense+sparse+bm25", config=cfg, calibration=CAL)
    d = json.loads(json.dumps(p.to_dict()))
    assert d["rule"] == "calibrated" and d["legs"] == list(THREE) and d["gate"]["power"] == 2.0
    assert d["calibration"]["agreement"] == CAL.agreement and d["weights"] == pytest.approx(dict(p.weights))
    assert {k: v["source"] for k, v in d["sources"].items()} == sources(p)
    assert all(c.source in SOURCES for c in p.sources.values())
    text = p.describe().splitlines()
    assert text[0] == "fusion plan for dense+sparse+bm25: calibrated (z-score with each LLM leg gated by its " \
                      "stored agreement with bm25, guarded per query)"
    assert any(line.split()[:1] == ["weights"] and "dense 0.3, sparse 0.3, bm25 0.4" in line
               and "[index leg-set default:" in line for line in text)
    assert any(line.split()[:1] == ["calibration"] and "dense 0.075" in line and "8 pseudo-queries" in line
               for line in text)
    fallback = plan("dense+sparse+bm25").describe()
    assert "  rule     calibrated -> agree  [fallback: calibrated (alignir default: " in fallback
    assert "runs as agree: the index has no stored calibration" in fallback


def test_the_plan_fuses_as_fuse_legs_does():
    lists = [{0: 3.0, 1: 1.0, 2: 0.5}, {1: 2.0, 3: 1.0}, {0: 9.0, 3: 4.0, 4: 1.0}]
    p = plan("dense+sparse+bm25", calibration=CAL)
    guarded = [p.weights[leg] * f for leg, f in zip(THREE, p.guard.factors(THREE, lists, CAL))]
    assert p.query_weights(lists) == guarded
    assert p.fuse(lists) == fuse_legs(lists, guarded, FusionConfig(method="zscore"))
    a = plan("dense+sparse+bm25", fusion="agree")
    assert a.fuse(lists, n_docs=50) == F.agree(lists, weights=[a.weights[leg] for leg in THREE], anchor=2,
                                               params=LEG_SET_AGREE[THREE], n_docs=50)
    r = plan("dense+sparse+bm25", fusion="rrf", weights={"dense": 1, "sparse": 1, "bm25": 2})
    assert r.fuse(lists) == F.rrf(lists, k=60, weights=[1.0, 1.0, 2.0])


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    from alignir.retrieval.indexer import build_index
    from conftest import write_corpus
    from test_calibration import TEXTS

    root = tmp_path_factory.mktemp("plan")
    build_index(write_corpus(root / "corpus.jsonl", TEXTS), root / "idx", model="tiny", loaded=tiny_model,
                sparse=SparseConfig.paper(doc_k=24, query_m=5), cache_dir=root / "cache", progress=False)
    return root / "idx"


@pytest.mark.parametrize("mode", ["hybrid", "dense+bm25", "sparse+bm25", "dense+sparse+bm25", "dense+sparse"])
@pytest.mark.parametrize("options", [{}, {"fusion": "rrf"}, {"fusion": "zscore", "alpha": 0.3}, {"depth": 3}])
def test_a_search_runs_its_plan(built, tiny_model, mode, options):
    """The hits of a fused search are the ranking of its plan over the legs' lists (each leg's
    top ``plan.depth``), scores and order, on the index's stored calibration."""
    from alignir.retrieval.searcher import Searcher

    s = Searcher.open(built, loaded=tiny_model)
    assert s.calibration is not None
    queries = ["boundary layer of a wing", "kidney blood pressure"]
    p = s.plan(mode, **options)
    lists = s.leg_lists(queries, p.legs, k=max(5, p.depth))  # each leg's top max(k, depth)
    got = s.batch_search(queries, k=5, mode=mode, **options)
    for i, hits in enumerate(got):
        want = F.ranked(p.fuse([lists[leg][i] for leg in p.legs], s.index.n_docs), 5)
        assert [(h.doc_number, h.score) for h in hits] == want
