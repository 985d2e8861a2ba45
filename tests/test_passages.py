"""Passage map round-trip and passage -> document aggregation against brute force."""
from __future__ import annotations

import numpy as np
import pytest

from alignir.index.passages import PassageMap, aggregate


def test_map_from_counts_round_trip_and_ids(tmp_path):
    m = PassageMap.from_counts([2, 1, 3])
    assert m.doc.tolist() == [0, 0, 1, 2, 2, 2]
    assert m.ordinal.tolist() == [0, 1, 0, 0, 1, 2]
    assert (m.n_rows, m.n_docs) == (6, 3) and m.describe() == {"rows": 6, "docs": 3, "spans": False}
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


# ----------------------------------------------------------------------------- splitting text
from alignir.retrieval.passages import parse_passages, split_passages  # noqa: E402

LONG = " ".join(f"Sentence number {i} talks about wind tunnels and heat." for i in range(30))


def _spans(tok, text):
    return [(a, b) for a, b in tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            if b > a]


def test_parse_passages():
    assert parse_passages("256") == (256, 128)
    assert parse_passages("256:64") == (256, 64)
    assert parse_passages("1") == (1, 1)
    for bad in ("0", "64:0", "64:65", "x", "64:y", ""):
        with pytest.raises(ValueError, match="passages"):
            parse_passages(bad)


@pytest.mark.parametrize("window, stride", [(32, 16), (40, 40), (25, 7)])
def test_windows_cover_every_token_with_the_stride(tiny_tokenizer, window, stride):
    spans = _spans(tiny_tokenizer, LONG)
    assert len(spans) > window
    plain = split_passages(LONG, tiny_tokenizer, window, stride, sentence_aware=False)
    starts = [p.start for p in plain]
    assert starts == [spans[i][0] for i in range(0, stride * len(plain), stride)]
    for p in plain:
        assert p.text == LONG[p.start:p.end]
        assert sum(1 for a, b in spans if p.start <= a and b <= p.end) <= window
    assert plain[-1].end == spans[-1][1]
    covered = {i for p in plain for i, (a, b) in enumerate(spans) if p.start <= a and b <= p.end}
    assert covered == set(range(len(spans)))


def test_sentence_aware_cut_and_short_documents(tiny_tokenizer):
    window, stride = 120, 60
    spans = _spans(tiny_tokenizer, LONG)
    aware = split_passages(LONG, tiny_tokenizer, window, stride)
    plain = split_passages(LONG, tiny_tokenizer, window, stride, sentence_aware=False)
    assert [p.start for p in aware] == [p.start for p in plain]
    cut = 0
    for i, (a, p) in enumerate(zip(aware[:-1], plain[:-1])):
        quarter = spans[i * stride + 3 * window // 4][0]      # where the last quarter starts
        dots = [j + 1 for j in range(quarter, p.end) if LONG[j] == "." and LONG[j + 1:j + 2] == " "]
        assert a.end == (dots[-1] if dots else p.end)         # the last sentence end in it, if any
        cut += a.end < p.end
    assert cut > 0
    assert aware[-1] == plain[-1]                              # the last passage ends with the text
    short = "A short document."
    assert split_passages(short, tiny_tokenizer, 64, 32) == [type(aware[0])(0, len(short), short)]
