"""benchmarks/defaults/sparse_defaults.py: the held-out choice and the rows it writes."""
from __future__ import annotations

import json

import pytest
from conftest import write_corpus, write_queries

from alignir.retrieval.config import SparseConfig
from benchmarks.defaults import sparse_defaults
from benchmarks.defaults.sparse_defaults import grid_configs, label, leave_one_out, main

DOCS = ["the cat sat on the mat", "dogs chase cats in the yard", "stock markets fell sharply today",
        "the central bank raised interest rates", "a recipe for bread with yeast and flour",
        "bake the dough in a hot oven"]
QUERIES = ["cat on a mat", "interest rates and banks", "baking bread"]
RELEVANT = ["d0", "d3", "d4"]


def test_each_collection_gets_the_config_best_on_the_others():
    scores = {"a": {"x": 0.9, "y": 0.1, "z": 0.5},
              "b": {"x": 0.2, "y": 0.6, "z": 0.5},
              "c": {"x": 0.1, "y": 0.7, "z": 0.5}}
    loo = leave_one_out(scores)
    # a: mean over b, c -> x 0.15, y 0.65, z 0.5; b: x 0.5, y 0.4, z 0.5 (tie: the larger label);
    # c: x 0.55, y 0.35, z 0.5
    assert loo == {"a": {"config": "y", "ndcg@10": 0.1}, "b": {"config": "z", "ndcg@10": 0.5},
                   "c": {"config": "x", "ndcg@10": 0.1}}


def _collection(root, name):
    folder = root / name
    (folder / "qrels").mkdir(parents=True)
    write_corpus(folder / "corpus.jsonl", DOCS)
    write_queries(folder / "queries.jsonl", QUERIES)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                               + "".join(f"q{i}\t{d}\t1\n" for i, d in enumerate(RELEVANT)))
    return folder


def test_rows_are_keyed_by_label_and_other_rows_are_kept(tiny_folder, tmp_path, monkeypatch):
    from alignir.retrieval.indexer import build_index

    monkeypatch.setitem(sparse_defaults.GRID, "doc_k", (64, 256))  # the tiny vocabulary: ~400 tokens
    datasets = tmp_path / "datasets"
    for name in ("one", "two"):  # two collections of the same corpus: one index serves both
        _collection(datasets, name)
    build_index(datasets / "one" / "corpus.jsonl", tmp_path / "idx", model=str(tiny_folder),
                embedder_options={"max_length": 32}, progress=False)
    pairs = ["--pair", f"one={tmp_path / 'idx'}", "--pair", f"two={tmp_path / 'idx'}"]
    out = tmp_path / "rows.json"
    out.write_text(json.dumps({"kept": {"model": "another"}}))
    main(["--model", str(tiny_folder), "--label", "tiny+run", "--datasets", str(datasets), "--out", str(out), *pairs])
    rows = json.loads(out.read_text())
    assert set(rows) == {"kept", "tiny+run"}
    row = rows["tiny+run"]
    assert row["model"] == str(tiny_folder) and row["label"] == "tiny+run"
    assert set(row["scores"]["one"]) == {label(c) for c in grid_configs(SparseConfig())}
    for held, other in (("one", "two"), ("two", "one")):
        pick = row["per_collection"][held]["held_out_choice"]
        assert row["scores"][other][pick] == max(row["scores"][other].values())
        assert row["per_collection"][held]["held_out_ndcg@10"] == row["scores"][held][pick]
    with pytest.raises(SystemExit):  # an index built with another model is refused
        main(["--model", "smollm2-135m", "--datasets", str(datasets), "--out", str(out), pairs[0], pairs[1]])
