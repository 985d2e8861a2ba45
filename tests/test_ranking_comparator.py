"""The shared near-tie ranking comparator (conftest.assert_same_ranking) accepts float rounding
and swaps inside near ties, and rejects anything else."""
from __future__ import annotations

import pytest

from conftest import assert_same_ranking

WANT = [("a", 10.0), ("b", 5.0), ("c", 4.9999), ("d", 1.0)]


def test_accepts_rounding_and_near_tie_swaps():
    assert_same_ranking([("a", 10.0004), ("b", 5.0), ("c", 4.9999), ("d", 1.0)], WANT, rtol=1e-4)
    assert_same_ranking([("a", 10.0), ("c", 5.0), ("b", 4.9999), ("d", 1.0)], WANT, rtol=1e-4)
    # a tie at the last place cut differently: "e" ties with the reference's last score
    assert_same_ranking([("a", 10.0), ("b", 5.0), ("c", 4.9999), ("e", 1.0)], WANT, rtol=1e-4)
    assert_same_ranking([], [], rtol=1e-4)


@pytest.mark.parametrize("got", [
    [("a", 10.0), ("b", 5.0), ("c", 4.9999)],                    # a hit missing
    [("a", 10.01), ("b", 5.0), ("c", 4.9999), ("d", 1.0)],       # a score off by 1e-3 of the top
    [("b", 10.0), ("a", 5.0), ("c", 4.9999), ("d", 1.0)],        # a swap that is not a tie
    [("a", 10.0), ("b", 5.0), ("c", 4.9999), ("e", 1.0 + 1e-2)],  # a new document above the cut
])
def test_rejects_real_differences(got):
    with pytest.raises(AssertionError):
        assert_same_ranking(got, WANT, rtol=1e-4)


def test_min_scale_sets_the_tolerance_of_small_scores():
    small = [("a", 0.01), ("b", 0.005)]
    with pytest.raises(AssertionError):
        assert_same_ranking([("a", 0.01), ("b", 0.00501)], small, rtol=1e-4)
    assert_same_ranking([("a", 0.01), ("b", 0.00501)], small, rtol=1e-4, min_scale=1.0)
