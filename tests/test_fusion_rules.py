"""benchmarks/defaults/fusion_rules.py: its replay of a rule equals the product code, the shuffled
setting, and the leave-one-collection-out choice."""
from __future__ import annotations

import numpy as np

from benchmarks.defaults.fusion_rules import MODES, Setting, apply_rule, choose, prepare, product_run, shuffled


def _setting() -> Setting:
    rng = np.random.default_rng(1)
    legs = {leg: {} for leg in ("dense", "sparse", "bm25")}
    for q in ("q1", "q2", "q3"):
        for leg in legs:
            docs = rng.choice(60, size=40, replace=False)
            legs[leg][q] = {f"d{d:02d}": float(s) for d, s in zip(docs, rng.normal(size=40))}
    legs["bm25"]["q3"] = {}  # a query with no BM25 word
    return Setting("toy-m-ml512", "toy", "m", 512, {"q1": {"d01": 1}}, legs, 60)


def test_replayed_rules_equal_the_product_code():
    s = _setting()
    for legs, base in MODES.items():
        prepared = prepare(s, legs)
        for rule in ("zscore", "agree"):
            replay = apply_rule(prepared, base, rule, {} if rule == "zscore" else
                                {"k": 10, "tau": 0.3, "power": 1.0, "floor": 0.0, "cap": 1.0})
            product = product_run(s, legs, "zscore") if rule == "zscore" else None
            if product is not None:
                for q in replay:  # same top 10 in the same order (q3 without BM25: the product
                    assert list(replay[q]) == list(product[q])  # keeps one leg's raw scores)
    # the product default's agree on the 3-leg set equals the replayed agree with its parameters
    from alignir.retrieval.fusion_plan import LEG_SET_AGREE, LEG_SET_WEIGHTS

    for legs in MODES:
        w = LEG_SET_WEIGHTS["agree"][legs]
        cap = w[legs[0]] / MODES[legs][0] * MODES[legs][-1] / w["bm25"]
        replay = apply_rule(prepare(s, legs), MODES[legs], "agree-corpus", {**LEG_SET_AGREE[legs].to_dict(), "cap": cap})
        product = product_run(s, legs)
        for q in replay:
            assert list(replay[q]) == list(product[q]), (legs, q)


def test_shuffled_gives_each_query_the_next_querys_llm_legs():
    s = _setting()
    sh = shuffled(s)
    assert sh.name == "toy-m-ml512-shuffled" and sh.dataset == "toy"
    assert sh.legs["dense"]["q1"] == s.legs["dense"]["q2"] and sh.legs["sparse"]["q3"] == s.legs["sparse"]["q1"]
    assert sh.legs["bm25"] == s.legs["bm25"]


def test_choose_prefers_safe_candidates_then_the_best_mean():
    table = {("u1", "a", "{}"): (0.50, 0.40), ("u2", "a", "{}"): (0.30, 0.40),   # unsafe on u2
             ("u1", "b", "{}"): (0.45, 0.40), ("u2", "b", "{}"): (0.397, 0.40),  # safe (-0.003)
             ("u1", "c", "{}"): (0.41, 0.40), ("u2", "c", "{}"): (0.40, 0.40)}   # safe, lower mean
    assert choose(table, ["u1", "u2"], [("a", "{}"), ("b", "{}"), ("c", "{}")]) == ("b", "{}")
    assert choose(table, ["u1"], [("a", "{}"), ("b", "{}")]) == ("a", "{}")
    # nobody safe: the best worst-case margin
    assert choose(table, ["u2"], [("a", "{}")]) == ("a", "{}")


def test_choose_prefers_gain_retention_over_the_mean():
    """Among safe candidates the worst gain retention (where z-score gains >= GAIN) decides
    before the mean: b keeps 0.95 of the gain on both real units, c averages higher but keeps
    only 0.5 on u2; shuffled units only constrain."""
    table = {("u1", "zscore", "{}"): (0.50, 0.40), ("u2", "zscore", "{}"): (0.50, 0.40),
             ("u3-shuffled", "zscore", "{}"): (0.30, 0.40),
             ("u1", "b", "{}"): (0.495, 0.40), ("u2", "b", "{}"): (0.495, 0.40), ("u3-shuffled", "b", "{}"): (0.40, 0.40),
             ("u1", "c", "{}"): (0.60, 0.40), ("u2", "c", "{}"): (0.45, 0.40), ("u3-shuffled", "c", "{}"): (0.40, 0.40)}
    units = ["u1", "u2", "u3-shuffled"]
    assert choose(table, units, [("zscore", "{}"), ("b", "{}"), ("c", "{}")]) == ("b", "{}")  # zscore unsafe
    # retention is capped at 1: above it, the mean decides
    table[("u2", "c", "{}")] = (0.55, 0.40)
    assert choose(table, units, [("b", "{}"), ("c", "{}")]) == ("c", "{}")


def _with_pseudo(s: Setting, seed: int = 2) -> Setting:
    """The toy setting with 5 pseudo-queries; dense agrees with BM25 on them, sparse does not."""
    rng = np.random.default_rng(seed)
    pseudo = {leg: [] for leg in ("dense", "sparse", "bm25")}
    for _ in range(5):
        bm = {f"d{d:02d}": float(60 - i) for i, d in enumerate(rng.choice(600, size=50, replace=False))}
        pseudo["bm25"].append(bm)
        pseudo["dense"].append({d: v + 0.5 for d, v in bm.items()})
        pseudo["sparse"].append({f"d{d:02d}": float(60 - i) for i, d in enumerate(rng.choice(600, size=50, replace=False))})
    return Setting(s.name, s.dataset, s.model, s.max_length, s.qrels, s.legs, 600, pseudo)


def test_calibrated_replay_equals_the_product_default():
    from alignir.retrieval.fusion_plan import LEG_SET_CALIBRATED, LEG_SET_DEFAULTS

    s = _with_pseudo(_setting())
    cal = prepare(s, ("dense", "sparse", "bm25"))["q1"].calibration
    assert cal.agreement["dense"] == 1.0 and cal.agreement["sparse"] < 0.2  # 50 of 600 by chance
    for legs in MODES:
        assert LEG_SET_DEFAULTS[legs][0] == "calibrated"
        g = LEG_SET_CALIBRATED[legs]
        replay = apply_rule(prepare(s, legs), MODES[legs], "calibrated", {"tau": g.tau, "power": g.power})
        product = product_run(s, legs)
        for q in replay:
            assert list(replay[q]) == list(product[q]), (legs, q)
    sh = shuffled(s)  # the pseudo-queries' LLM lists rotate like the real queries'
    assert sh.pseudo["dense"][0] == s.pseudo["dense"][1] and sh.pseudo["bm25"] == s.pseudo["bm25"]


def test_rows_name_a_shipped_model_by_its_registered_name():
    from benchmarks.defaults.fusion_rules import model_label

    assert model_label({"model": "smollm2-135m", "options": {"adapter": "builtin:smollm2-135m-alignir-v3"}}) \
        == "smollm2-135m-alignir-v3"
    assert model_label({"model": "smollm2-135m", "options": {"adapter": "/runs/v4/"}}) == "smollm2-135m+v4"
    assert model_label({"model": "gemma3-270m", "options": {"max_length": 512}}) == "gemma3-270m"
