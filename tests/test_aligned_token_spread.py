"""benchmarks/archive/aligned_token_spread.py: the document-frequency statistics of a collection's
aligned tokens, checked by hand on a small matrix and end to end on the tiny model."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.archive.aligned_token_spread import spread


def test_spread_by_hand():
    # 4 documents over 3 terms: "a" in all four, "b" in two, "c" in one
    S = sp.csr_matrix(np.array([[1.0, 3.0, 0.0],
                                [2.0, 0.0, 0.0],
                                [1.0, 1.0, 0.0],
                                [1.0, 0.0, 3.0]]))
    got = spread(S, ("a", "b", "c"), top=2)
    df = np.array([1.0, 0.5, 0.25])
    shares = S.toarray() / S.toarray().sum(1, keepdims=True)
    assert got["weighted_df"] == pytest.approx(float((shares @ df).mean()))
    # only "a" is carried by more than half: its shares are 1/4, 1, 1/2, 1/4
    assert got["weight_on_common"] == pytest.approx((0.25 + 1.0 + 0.5 + 0.25) / 4)
    assert got["postings_per_doc"] == pytest.approx(7 / 4)
    assert got["most_shared"] == [["a", 1.0], ["b", 0.5]]
    assert got["documents"] == 4


def test_end_to_end_on_the_tiny_model(tiny_folder, tiny_adapter, tmp_path):
    from benchmarks.archive.aligned_token_spread import main

    data = tmp_path / "beir"
    data.mkdir()
    docs = ["Photosynthesis makes glucose from light.", "Interest rates rose again.", "The cat sat on the mat."]
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": str(i), "title": "", "text": t}) + "\n"
                                               for i, t in enumerate(docs)))
    out = tmp_path / "spread.json"
    assert main([str(data), "--model", str(tiny_folder), "--adapter", f"tiny={tiny_adapter}", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["dataset"] == "beir" and row["adapter"] == "tiny" and row["documents"] == 3
    assert 0 < row["weighted_df"] <= 1 and 0 < row["postings_per_doc"]
