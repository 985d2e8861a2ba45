"""benchmarks/gpu/gpu_e2e.py, the GPU end-to-end run, checked on the CPU: its arguments, the
comparison of nDCG rows with the committed CPU rows, and a whole run on a tiny BEIR collection
with the tiny model (``--device cpu``), so that the script is known to run before a GPU is lent."""
from __future__ import annotations

import json

import pytest

from benchmarks.gpu.gpu_e2e import compare_rows, main, parse_args, reference_rows

from conftest import TINY_CORPUS, write_corpus, write_queries

pytestmark = pytest.mark.usefixtures("one_thread")


def test_arguments():
    args = parse_args([])
    assert args.datasets == "med,scifact" and args.device == "cuda" and args.tolerance == 0.002
    assert args.reference.endswith("benchmarks/results/training.json") and args.goal == 2000
    with pytest.raises(SystemExit):
        parse_args(["--device", "tpu"])
    with pytest.raises(SystemExit):
        parse_args(["--tolerance", "-1"])


def test_rows_are_compared_mode_by_mode():
    ref = {"dense": 0.70, "sparse": 0.60, "hybrid": 0.65}
    ok = compare_rows({"dense": 0.7015, "sparse": 0.5985, "hybrid": 0.65, "bm25": 0.5}, ref, 0.002)
    assert ok["all_within"] is True and set(ok["modes"]) == set(ref)
    assert ok["modes"]["dense"] == {"gpu": 0.7015, "cpu": 0.70, "diff": 0.0015, "within": True}
    off = compare_rows({"dense": 0.703, "sparse": 0.60, "hybrid": 0.65}, ref, 0.002)
    assert off["all_within"] is False and off["modes"]["dense"]["within"] is False
    missing = compare_rows({"dense": 0.70, "sparse": 0.60}, ref, 0.002)
    assert missing["all_within"] is False and missing["modes"]["hybrid"]["diff"] is None
    assert compare_rows({"dense": 0.7}, {}, 0.002)["all_within"] is None


def test_the_committed_cpu_rows_are_found():
    """The reference the GPU run compares with: the default model's rows on MED and SciFact."""
    from alignir.encoders.shipped import DEFAULT_MODEL

    for collection in ("med", "scifact"):
        rows = reference_rows(parse_args([]).reference, collection, DEFAULT_MODEL)
        assert {"dense", "sparse", "hybrid", "dense+sparse+bm25"} <= set(rows), (collection, rows)


def _collection(folder):
    folder.mkdir()
    texts = [f"{TINY_CORPUS[i % len(TINY_CORPUS)]} {TINY_CORPUS[(i * 5 + 1) % len(TINY_CORPUS)]} ({i})"
             for i in range(30)]
    write_corpus(folder / "corpus.jsonl", texts)
    write_queries(folder / "queries.jsonl", ["light plants", "stock market rates", "wind tunnel", "proteins"])
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{q}\td{d}\t1\n" for q, d in ((0, 0), (1, 1), (2, 2), (3, 4), (0, 6))))
    return folder


def test_a_whole_run_on_the_cpu_with_the_tiny_model(tmp_path, tiny_folder, monkeypatch):
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ALIGNIR_RUNTIME", "torch")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # restored after the test (the script hides CUDA)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    data = _collection(tmp_path / "toy")
    common = ["--datasets", str(data), "--model", str(tiny_folder), "--device", "cpu", "--latency-queries", "3"]
    first = main([*common, "--out", str(tmp_path / "first.json"), "--reference", str(tmp_path / "none.json")])
    row = first["collections"]["toy"]
    assert row["documents"] == 30 and row["queries"] == 4
    assert row["against_cpu"]["all_within"] is None  # no reference row
    assert row["encode"]["rows"] >= 30 and row["encode"]["docs_per_s"] > 0
    assert row["latency"]["queries"] == 3 and row["latency"]["p50_ms"] > 0
    assert row["faiss_gpu"]["on_gpu"] is False and "faiss" in row["faiss_gpu"]["why"]
    # a reference made of the first run's rows: the second run is within tolerance of it ...
    key = f"toy/{tiny_folder}"
    ref = {"runs": {key: {f"ndcg@10_{m}": v for m, v in row["ndcg@10"].items()}}}
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    second = main([*common, "--out", str(tmp_path / "second.json"), "--reference", str(tmp_path / "ref.json")])
    assert second["collections"]["toy"]["against_cpu"]["all_within"] is True
    assert json.loads((tmp_path / "second.json").read_text())["collections"]["toy"]["documents"] == 30
    # ... and a reference 0.01 away in one mode is flagged
    ref["runs"][key]["ndcg@10_dense"] += 0.01
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    third = main([*common, "--out", str(tmp_path / "third.json"), "--reference", str(tmp_path / "ref.json")])
    assert third["collections"]["toy"]["against_cpu"]["all_within"] is False
    assert third["collections"]["toy"]["against_cpu"]["modes"]["dense"]["within"] is False
