"""Fusion vs hand-computed examples, missing-document policy, deterministic ties."""
from __future__ import annotations

import math

import pytest

from retrieval.fusion import fuse, fuse_runs, minmax, ranked, rrf, zscore

A = {"a": 3.0, "b": 2.0, "c": 1.0}
B = {"b": 10.0, "d": 6.0, "a": 2.0}


def test_rrf_hand_computed():
    f = rrf([A, B], k=60)
    expect = {"a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62}
    assert f == pytest.approx(expect, abs=1e-15)
    assert list(f) == ["b", "a", "d", "c"]
    w = rrf([A, B], k=1, weights=[2.0, 1.0], depth=2)  # only a, b from A and b, d from B
    assert w == pytest.approx({"a": 2 / 2, "b": 2 / 3 + 1 / 2, "d": 1 / 3})


def test_minmax_hand_computed_and_missing_gets_list_minimum():
    # A normalised: a=1, b=.5, c=0 ; B normalised: b=1, d=.5, a=0 ; missing -> 0 (B's min)
    f = minmax([A, B], alpha=0.3)
    expect = {"a": 0.3 * 1 + 0.7 * 0, "b": 0.3 * 0.5 + 0.7 * 1, "c": 0.3 * 0 + 0.7 * 0, "d": 0.3 * 0 + 0.7 * 0.5}
    assert f == pytest.approx(expect)
    assert list(f) == ["b", "d", "a", "c"]
    assert minmax([A, B], alpha=0.3) == minmax([A, B], weights=[0.3, 0.7])
    assert minmax([A, B], alpha=1.0) == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.0})


def test_zscore_hand_computed_missing_min_vs_zero():
    mean_a, sd_a = 2.0, math.sqrt(2 / 3)
    mean_b, sd_b = 6.0, math.sqrt((16 + 0 + 16) / 3)
    za = {d: (s - mean_a) / sd_a for d, s in A.items()}
    zb = {d: (s - mean_b) / sd_b for d, s in B.items()}
    f = zscore([A, B])
    assert f["c"] == pytest.approx(za["c"] + min(zb.values()))
    assert f["d"] == pytest.approx(min(za.values()) + zb["d"])
    assert f["b"] == pytest.approx(za["b"] + zb["b"])
    g = zscore([A, B], missing="zero")
    assert g["c"] == pytest.approx(za["c"]) and g["d"] == pytest.approx(zb["d"])


def test_degenerate_list_does_not_move_order():
    flat = {"a": 5.0, "b": 5.0}
    assert minmax([A, flat]) == minmax([A, {}]) == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0})
    assert list(zscore([A, flat])) == ["a", "b", "c"]


def test_ties_broken_by_doc_id_and_order_independent():
    tie = {"z": 1.0, "m": 1.0, "a": 1.0}
    assert [d for d, _ in ranked(tie)] == ["a", "m", "z"]
    assert list(rrf([tie])) == ["a", "m", "z"]
    assert list(rrf([dict(reversed(list(tie.items())))])) == ["a", "m", "z"]
    assert list(minmax([{"x": 1.0, "y": 0.0}, {"y": 1.0, "x": 0.0}])) == ["x", "y"]


def test_fuse_dispatch_runs_and_errors():
    assert fuse([A, B], "minmax", alpha=0.5) == minmax([A, B], alpha=0.5)
    assert list(fuse([A, B], "rrf", top=2)) == ["b", "a"]
    runs = fuse_runs([{"q1": A, "q2": A}, {"q1": B}], "rrf")
    assert runs["q1"] == rrf([A, B]) and runs["q2"] == rrf([A, {}])
    with pytest.raises(ValueError, match="unknown fusion method"):
        fuse([A], "borda")
    with pytest.raises(ValueError, match="alpha must be in"):
        minmax([A, B], alpha=1.5)
    with pytest.raises(ValueError, match="exactly two runs"):
        minmax([A, B, A], alpha=0.5)
    with pytest.raises(ValueError, match="2 weights for 3 runs"):
        zscore([A, B, A], weights=[1, 1])
    with pytest.raises(ValueError, match="non-finite"):
        rrf([{"a": float("nan")}])
    with pytest.raises(ValueError, match="sequence of runs"):
        rrf(A)
    with pytest.raises(ValueError, match="no runs"):
        rrf([])
