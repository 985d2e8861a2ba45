"""Passage map round-trip and passage -> document aggregation against brute force (issue 17)."""
from __future__ import annotations

import numpy as np
import pytest

from alignir.index.passages import PassageMap, aggregate


def test_map_from_counts_round_trip_and_ids(tmp_path):
    m = PassageMap.from_counts([2, 1, 3])
    assert m.doc.tolist() == [0, 0, 1, 2, 2, 2]
    assert m.ordinal.tolist() == [0, 1, 0, 0, 1, 2]
    assert (m.n_rows, m.n_docs) == (6, 3) and m.describe() == {"rows": 6, "docs": 3}
    m.save(tmp_path / "p")
    back = PassageMap.load(tmp_path / "p")
    assert np.array_equal(back.doc, m.doc) and np.array_equal(back.ordinal, m.ordinal)
    assert back.doc.dtype == np.int64 and back.ordinal.dtype == np.int32
    assert [m.passage_id(r, ["a", "b", "c"]) for r in range(6)] == ["a#0", "a#1", "b#0", "c#0", "c#1", "c#2"]


@pytest.mark.parametrize("doc, ordinal, msg", [
    ([0, 1, 0], [0, 0, 0], "in order"), ([1, 1], [0, 1], "in order"), ([0, 0, 1], [0, 2, 0], "ordinals"),
    ([0, 0], [0], "equal 1-d"), ([0, 2], [0, 0], "in order")])
def test_map_rejects_broken_maps(doc, ordinal, msg):
    with pytest.raises(ValueError, match=msg):
        PassageMap(np.array(doc), np.array(ordinal))
    with pytest.raises(ValueError, match=">= 1"):
        PassageMap.from_counts([1, 0])


def test_aggregation_equals_brute_force():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 6, size=40)
    m = PassageMap.from_counts(counts)
    rows = rng.choice(m.n_rows, size=m.n_rows // 2, replace=False)
    scores = {int(r): float(s) for r, s in zip(rows, rng.normal(size=len(rows)))}
    by_doc: dict[int, list[tuple[float, int]]] = {}
    for r, s in scores.items():
        by_doc.setdefault(int(m.doc[r]), []).append((s, r))
    maxp, firstp, sum2 = aggregate(scores, m), aggregate(scores, m, "firstp"), aggregate(scores, m, "sumk", k=2)
    assert set(maxp) == set(by_doc) == set(sum2)
    for d, hits in by_doc.items():
        best = max(hits)
        assert maxp[d] == (best[0], best[1])                   # the max over the document's passages
        assert sum2[d][0] == pytest.approx(sum(sorted((s for s, _ in hits), reverse=True)[:2]))
        assert sum2[d][1] == best[1]
        first = [s for s, r in hits if m.ordinal[r] == 0]
        assert (d in firstp) == bool(first)
        if first:
            assert firstp[d] == (first[0], best[1])
    assert aggregate(scores, m, "sumk", k=1) == maxp


def test_aggregation_ties_and_errors():
    m = PassageMap.from_counts([3])
    assert aggregate({2: 1.0, 1: 1.0}, m) == {0: (1.0, 1)}      # tie -> the earlier passage
    with pytest.raises(ValueError, match="aggregation"):
        aggregate({0: 1.0}, m, "meanp")
    with pytest.raises(ValueError, match="k >= 1"):
        aggregate({0: 1.0}, m, "sumk", k=0)
    with pytest.raises(ValueError, match="not in the passage map"):
        aggregate({3: 1.0}, m)
