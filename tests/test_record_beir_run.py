"""benchmarks/training/record_beir_run.py copies an `alignir beir --json` result into training.json's layout."""
from __future__ import annotations

import json

from benchmarks.training.record_beir_run import record


def test_a_beir_result_becomes_a_training_run(tmp_path):
    out = tmp_path / "training.json"
    out.write_text(json.dumps({"runs": {"adi/old": {"method": "x"}}, "setups": {}}))
    modes = {"dense": 0.51234, "sparse": 0.4, "hybrid": 0.45, "dense+sparse+bm25": 0.6, "bm25": 0.47}
    result = {"dataset": "adi", "queries": 35, "seconds": {"encode": 12.34},
              "metrics": {m: {"ndcg@10": v, "n_queries": 35} for m, v in modes.items()}}
    row = record(result, "shipped", "infonce", 360, "alignir beir adi", shipped=True, out=out)
    data = json.loads(out.read_text())
    assert set(data["runs"]) == {"adi/old", "adi/shipped"} and data["runs"]["adi/shipped"] == row
    assert row["ndcg@10_dense"] == 0.5123 and row["ndcg@10_dense+sparse+bm25"] == 0.6
    assert row["shipped"] is True and row["steps"] == 360 and row["command"] == "alignir beir adi"
