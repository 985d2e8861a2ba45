"""Benchmark result files: a rerun's rows replace the old rows with the same key, other rows stay in order."""
import json

import pytest

from benchmarks.common import merged_rows, replace_rows


def test_merged_rows_replaces_matching_keys_and_keeps_order():
    old = [{"c": "adi", "m": "dense", "x": 1}, {"c": "med", "m": "dense", "x": 2}, {"c": "adi", "m": "bm25", "x": 3}]
    new = [{"c": "adi", "m": "dense", "x": 9}]
    assert merged_rows(old, new, ("c", "m")) == [old[1], old[2], new[0]]
    # a callable key; a field missing from a row counts as None
    assert merged_rows(old, [{"c": "med"}], lambda r: r["c"]) == [old[0], old[2], {"c": "med"}]
    assert merged_rows([{"c": "adi"}], [{"c": "adi", "config": None}], ("c", "config")) == [{"c": "adi", "config": None}]


def test_replace_rows_round_trips_a_bare_list(tmp_path):
    out = tmp_path / "sub" / "rows.json"
    replace_rows(out, [{"c": "adi", "x": 1}, {"c": "med", "x": 2}], ("c",))
    replace_rows(out, [{"c": "adi", "x": 3}], ("c",))
    assert json.loads(out.read_text()) == [{"c": "med", "x": 2}, {"c": "adi", "x": 3}]


def test_replace_rows_wrapped_and_refuses_the_other_shape(tmp_path):
    out = tmp_path / "rows.json"
    replace_rows(out, [{"dataset": "adi", "adapter": "a", "x": 1}, {"dataset": "adi", "adapter": "b", "x": 2}],
                 ("dataset", "adapter"), wrapped=True)
    replace_rows(out, [{"dataset": "adi", "adapter": "b", "x": 3}], ("dataset", "adapter"), wrapped=True)
    assert json.loads(out.read_text()) == {"rows": [{"dataset": "adi", "adapter": "a", "x": 1},
                                                    {"dataset": "adi", "adapter": "b", "x": 3}]}
    before = out.read_text()
    with pytest.raises(ValueError, match="expected a list"):
        replace_rows(out, [{"dataset": "adi"}], ("dataset",))
    assert out.read_text() == before
