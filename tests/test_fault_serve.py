"""The ``serve`` attacks of the fault campaign (benchmarks/faults/fault_serve.py) on a tiny
BM25-only index: every hostile request is refused clearly or answered right, the server keeps
answering with the same ranking, and the index is unchanged."""
from __future__ import annotations

import pytest

# a server attacked from outside: end to end (scripts/test.sh --fast leaves it out)
pytestmark = pytest.mark.e2e

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from benchmarks.faults import fault_serve  # noqa: E402

from serve_helpers import build_tiny  # noqa: E402


def test_serve_attacks_leave_no_silent_wrong_and_no_loss(tmp_path, tiny_model, monkeypatch):
    index = build_tiny(tmp_path / "idx", tiny_model, tmp_path / "cache", legs=["bm25"])
    rows: dict[str, dict] = {}

    def count(attack, outcome, lost=False):
        r = rows.setdefault(attack, {"cases": 0, "silent_wrong": 0, "clear_error": 0, "data_lost": 0})
        r["cases"] += 1
        r["silent_wrong"] += outcome == "wrong"
        r["clear_error"] += outcome == "clear"
        r["data_lost"] += lost

    (tmp_path / "work").mkdir()
    monkeypatch.setitem(fault_serve.PROBE, "q", "stock market wind tunnel")  # words of the tiny corpus
    fault_serve.run(index, tmp_path / "work", count, big=3 << 20, hold=2.0)
    assert len(rows) == 9, rows
    assert all(r["silent_wrong"] == 0 and r["data_lost"] == 0 for r in rows.values()), rows
    assert rows["serve: malformed JSON"]["clear_error"] == rows["serve: malformed JSON"]["cases"]
    assert rows["serve: 10 MB bodies"]["clear_error"] == 2
    assert rows["serve: unicode queries"]["clear_error"] == 2  # the lone surrogate, the long one
