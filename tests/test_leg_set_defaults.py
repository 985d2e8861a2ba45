"""An index's own calibrated leg-set defaults (FusionConfig.leg_sets, which a shipped trained model
brings): validation, the manifest round trip, the searcher's use of them against the fusion
computed by hand, and benchmarks/defaults/leg_set_weights.py's leave-one-collection-out choice."""
from __future__ import annotations

import json

import pytest

from alignir.errors import InvalidInputError
from alignir.index.store import read_manifest
from alignir.retrieval import fusion as F
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.config import FusionConfig, IndexConfig, SparseConfig
from alignir.retrieval.indexer import build_index
from alignir.retrieval.searcher import Searcher
from alignir.retrieval.fusion_guard import CALIBRATED_GUARD
from alignir.retrieval.fusion_plan import LEG_SET_CALIBRATED
from benchmarks.defaults.leg_set_weights import candidates, choose

from conftest import write_corpus
from test_calibration import TEXTS

THREE = {"dense+sparse+bm25": {"weights": {"dense": 3, "sparse": 3, "bm25": 4}, "gate_power": 2}}
THREE_LEGS = ("dense", "sparse", "bm25")


def test_leg_sets_are_validated_and_normalised():
    f = FusionConfig(leg_sets=THREE)
    assert f.leg_sets == {"dense+sparse+bm25": {"weights": {"dense": 0.3, "sparse": 0.3, "bm25": 0.4},
                                                "gate_power": 2.0}}
    assert f.leg_set(("dense", "sparse", "bm25")) == ({"dense": 0.3, "sparse": 0.3, "bm25": 0.4}, 2.0)
    assert f.leg_set(("dense", "bm25")) is None and FusionConfig().leg_sets == {}
    cfg = IndexConfig(fusion=f)
    back = IndexConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and hash(back) == hash(cfg) and hash(f) != hash(FusionConfig())
    assert IndexConfig.from_dict({"fusion": {"method": "zscore"}}).fusion.leg_sets == {}  # older manifests
    bad = [({"bm25+dense": {"weights": {"dense": 1, "bm25": 1}, "gate_power": 1}}, "in that order"),
           ({"dense+sparse": {"weights": {"dense": 1, "sparse": 1}, "gate_power": 1}}, "bm25 among them"),
           ({"dense+bm25": {"weights": {"dense": 1}, "gate_power": 1}}, "name exactly its legs"),
           ({"dense+bm25": {"weights": {"dense": 1, "bm25": 1}}}, "exactly 'weights' and 'gate_power'"),
           ({"dense+bm25": {"weights": {"dense": 1, "bm25": 1}, "gate_power": 0}}, "gate_power must be > 0"),
           ({"dense+bm25": {"weights": {"dense": -1, "bm25": 1}, "gate_power": 1}}, "weight of dense"),
           ({"dense+bm25": {"weights": {"dense": 0, "bm25": 0}, "gate_power": 1}}, "not all be 0"),
           ([1], "must be a mapping")]
    for leg_sets, msg in bad:
        with pytest.raises(InvalidInputError, match=msg):
            FusionConfig(leg_sets=leg_sets)


@pytest.fixture()
def built(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.jsonl", TEXTS)
    cfg = IndexConfig(sparse=SparseConfig.paper(doc_k=24, query_m=5), fusion=FusionConfig(leg_sets=THREE))
    build_index(corpus, tmp_path / "idx", model="tiny", config=cfg, loaded=tiny_model,
                cache_dir=tmp_path / "cache", progress=False)
    return tmp_path / "idx"


def test_the_searcher_uses_the_index_leg_set_defaults(built, tiny_model):
    """Stored in the manifest; the default dense+sparse+bm25 search is z-score fusion with the
    index's weights, each LLM leg's gated by min(1, agreement / tau)^power with the index's power
    (computed here by hand) and by this query's guard (fusion_guard); other leg sets and explicit
    weights keep the searcher's rules."""
    assert read_manifest(built)["params"]["config"]["fusion"]["leg_sets"] == FusionConfig(leg_sets=THREE).leg_sets
    s = Searcher.open(built, loaded=tiny_model)
    tau = LEG_SET_CALIBRATED[("dense", "sparse", "bm25")].tau
    s.calibration = FusionCalibration(agreement={"dense": tau / 2, "sparse": 0.9}, queries=8)
    n = s.index.n_docs
    q = "boundary layer of a wing"
    lists = s.leg_lists([q], ("dense", "sparse", "bm25"), k=n)
    guard = CALIBRATED_GUARD.factors(THREE_LEGS, [lists[leg][0] for leg in THREE_LEGS], s.calibration, n)
    w = [x * f for x, f in zip([0.3 * 0.5 ** 2, 0.3, 0.4], guard)]  # dense gated by (0.5)^2
    want = F.ranked(F.zscore([lists[leg][0] for leg in ("dense", "sparse", "bm25")], weights=w))
    got = [(h.doc_number, h.score) for h in s.search(q, k=n, mode="dense+sparse+bm25", depth=n)]
    assert [d for d, _ in got] == [d for d, _ in want]
    assert [x for _, x in got] == pytest.approx([x for _, x in want])
    # asking for "calibrated" by name is the same; explicit weights are not replaced
    assert s.search(q, k=n, mode="dense+sparse+bm25", depth=n, fusion="calibrated") == \
        s.search(q, k=n, mode="dense+sparse+bm25", depth=n)
    mine = s.search(q, k=n, mode="dense+sparse+bm25", depth=n, fusion="calibrated",
                    weights={"dense": 0.2, "sparse": 0.2, "bm25": 0.6})
    base = [x * f for x, f in zip([0.2 * 0.5, 0.2, 0.6], guard)]  # the searcher's own gate (power 1)
    want = F.ranked(F.zscore([lists[leg][0] for leg in ("dense", "sparse", "bm25")], weights=base))
    assert [h.doc_number for h in mine] == [d for d, _ in want]


def test_candidates_start_with_the_product_default_and_sum_to_one():
    from alignir.retrieval.fusion_plan import LEG_SET_WEIGHTS

    for legs in (("dense", "bm25"), ("sparse", "bm25"), ("dense", "sparse", "bm25")):
        cands = candidates(legs)
        w0 = LEG_SET_WEIGHTS["calibrated"][legs]
        assert cands[0].weights == pytest.approx({k: v / sum(w0.values()) for k, v in w0.items()})
        assert cands[0].gate_power == LEG_SET_CALIBRATED[legs].power
        assert all(sum(c.weights.values()) == pytest.approx(1.0) for c in cands)
        assert len({c.label() for c in cands}) == len(cands)  # no candidate twice
        FusionConfig(leg_sets={"+".join(legs): cands[-1].leg_set()})  # each one is a valid config


def test_the_mean_rule_keeps_shuffled_legs_within_tol_of_bm25_then_takes_the_best_mean():
    bm25 = {"a": 0.40, "b": 0.50}
    real = {"a": [0.45, 0.60, 0.40], "b": [0.55, 0.70, 0.52]}
    safe = {"a": [0.40, 0.30, 0.399], "b": [0.50, 0.50, 0.50]}  # 1 sinks on a's shuffled lists
    assert choose(real, safe, bm25, ["a", "b"], "mean") == 0  # 0: mean 0.50, 2: 0.46; 1 is unsafe
    real["a"][2] = 0.65
    assert choose(real, safe, bm25, ["a", "b"], "mean") == 2  # safe (-0.001 on a) and now the best mean
    assert choose(real, safe, bm25, ["b"], "mean") == 1  # trained on b alone, 1 is safe and best
    safe["a"] = [0.3, 0.2, 0.1]  # nobody safe on a: the best worst margin
    assert choose(real, safe, bm25, ["a"], "mean") == 0


def test_the_no_regress_rule_never_prefers_a_candidate_that_loses_on_a_training_collection():
    bm25 = {"a": 0.40, "b": 0.50}
    safe = {"a": [0.40] * 3, "b": [0.50] * 3}
    real = {"a": [0.45, 0.60, 0.46], "b": [0.55, 0.54, 0.56]}  # 1: best mean but -0.01 on b
    assert choose(real, safe, bm25, ["a", "b"], "mean") == 1
    assert choose(real, safe, bm25, ["a", "b"], "no-regress") == 2  # +0.01 on both
    real["a"][2] = 0.44  # 2 loses on a too: nobody beats the default everywhere
    assert choose(real, safe, bm25, ["a", "b"], "no-regress") == 0
    with pytest.raises(ValueError, match="rule"):
        choose(real, safe, bm25, ["a"], "best")


def test_info_shows_the_index_leg_set_defaults(built):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    r = CliRunner().invoke(app, ["info", "--index", str(built)])
    assert r.exit_code == 0, r.output
    fusion = next(line for line in r.output.splitlines() if line.startswith("fusion"))
    assert "dense+sparse+bm25 calibrated dense 0.3/sparse 0.3/bm25 0.4 gate power 2" in fusion
