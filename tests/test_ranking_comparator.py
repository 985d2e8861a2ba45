"""The near-tie ranking comparator (alignir.retrieval.ranking_match, behind
conftest.assert_same_ranking) accepts float rounding and swaps inside near ties, and names
anything else."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from alignir.retrieval.ranking_match import hits_mismatch, ranking_mismatch
from conftest import assert_same_ranking

WANT = [("a", 10.0), ("b", 5.0), ("c", 4.9999), ("d", 1.0)]


def test_accepts_rounding_and_near_tie_swaps():
    assert_same_ranking([("a", 10.0004), ("b", 5.0), ("c", 4.9999), ("d", 1.0)], WANT, rtol=1e-4)
    assert_same_ranking([("a", 10.0), ("c", 5.0), ("b", 4.9999), ("d", 1.0)], WANT, rtol=1e-4)
    # a tie at the last place cut differently: "e" ties with the reference's last score
    assert_same_ranking([("a", 10.0), ("b", 5.0), ("c", 4.9999), ("e", 1.0)], WANT, rtol=1e-4)
    assert_same_ranking([], [], rtol=1e-4)


@pytest.mark.parametrize("got, why", [
    ([("a", 10.0), ("b", 5.0), ("c", 4.9999)], "3 hits, expected 4"),                      # a hit missing
    ([("a", 10.01), ("b", 5.0), ("c", 4.9999), ("d", 1.0)],                                 # a score off by 1e-3 of the top
     "scores differ at ranks [0], max |diff| 0.01 > 0.001"),
    ([("b", 10.0), ("a", 5.0), ("c", 4.9999), ("d", 1.0)],                                  # a swap that is not a tie
     "rank 1: b (reference score 5.0) replaces a (10.0), not a near tie"),
    ([("a", 10.0), ("b", 5.0), ("c", 4.9999), ("e", 1.0 + 1e-2)],                           # a new document above the cut
     "scores differ at ranks [3], max |diff| 0.01 > 0.001"),
])
def test_rejects_real_differences_and_says_why(got, why):
    assert ranking_mismatch(got, WANT, rtol=1e-4) == why
    with pytest.raises(AssertionError):
        assert_same_ranking(got, WANT, rtol=1e-4)


def test_min_scale_sets_the_tolerance_of_small_scores():
    small = [("a", 0.01), ("b", 0.005)]
    with pytest.raises(AssertionError):
        assert_same_ranking([("a", 0.01), ("b", 0.00501)], small, rtol=1e-4)
    assert_same_ranking([("a", 0.01), ("b", 0.00501)], small, rtol=1e-4, min_scale=1.0)


def test_hits_are_compared_within_rel_of_max_one_and_the_top_score():
    want = [SimpleNamespace(id="x", score=0.1), SimpleNamespace(id="y", score=0.099995)]
    swapped = [SimpleNamespace(id="y", score=0.1), SimpleNamespace(id="x", score=0.099995)]
    assert hits_mismatch(want, swapped, rel=1e-5) is None  # 5e-6 apart: within 1e-5 x max(1, 0.1)
    assert hits_mismatch(want, swapped, rel=1e-6) == "rank 1: y (reference score 0.099995) replaces x (0.1), not a near tie"
