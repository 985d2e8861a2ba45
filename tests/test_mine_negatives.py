"""scripts/mine_negatives.py: hard negatives ranked by a trained encoder (the tiny model read through
an adapter of `alignir train`) on a toy BEIR folder: never judged relevant, in the order of a
brute-force cosine ranking, no test query, the embedding cache reused, and the file trains."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from alignir.encoders.train.data import Pair, load_triples, normal_query, triple_row
from alignir.retrieval.cli import app

from conftest import TINY_CORPUS, TRAIN_QUERIES, train_log, write_corpus, write_queries

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mine_negatives.py"
MORE_DOCS = [
    "Chlorophyll absorbs red and blue light for plant growth.",
    "Bond yields rose as investors expected higher interest rates.",
    "Shock waves form around a body moving faster than sound.",
    "Search engines index web pages to answer queries quickly.",
    "Enzymes are proteins that speed up chemical reactions in cells.",
    "A fox and a dog met on a quiet country road.",
]
DEPTH, SKIP, PER_QUERY = 8, 1, 3


def _script():
    spec = importlib.util.spec_from_file_location("mine_negatives", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def toy(tmp_path):
    """Twelve documents; train queries q0-q4 with q0 judging two documents relevant, q4 a
    repeat of q1's text judging a third one (so it is relevant to q1 too), and q2's text also a
    test query (q5): q2 must give no pairs."""
    d = tmp_path / "toy"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS + MORE_DOCS)
    write_queries(d / "queries.jsonl", [TRAIN_QUERIES[0], TRAIN_QUERIES[1], TRAIN_QUERIES[2], TRAIN_QUERIES[3],
                                        TRAIN_QUERIES[1].upper(), "  " + TRAIN_QUERIES[2]])
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq0\td6\t1\nq1\td1\t1\n"
                                           "q2\td2\t1\nq3\td3\t1\nq3\td9\t0\nq4\td7\t1\n")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq5\td8\t1\n")
    return d


@pytest.fixture
def adapter(tiny_adapter):
    return tiny_adapter


def _mine(tiny_folder, adapter, toy, out, cache, *more) -> int:
    return _script().main(["--model", str(tiny_folder), "--adapter", str(adapter), "--data", str(toy),
                           "--out", str(out), "--depth", str(DEPTH), "--skip", str(SKIP),
                           "--per-query", str(PER_QUERY), "--max-length", "32", "--cache-dir", str(cache), *more])


def test_mined_negatives_follow_the_dense_ranking(tiny_folder, adapter, toy, tmp_path, monkeypatch, capsys):
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.embedders.infonce import InfoNCEEmbedder
    from alignir.encoders.models import load_model

    out = tmp_path / "mined.jsonl"
    assert _mine(tiny_folder, adapter, toy, out, tmp_path / "emb") == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    # one pair per judged (query text, document): q0-d0, q0-d6, q1-d1, q3-d3, q4-d7; q2 is a test query
    assert [(r["query_id"], r["positive_id"]) for r in rows] == [("q0", "d0"), ("q0", "d6"), ("q1", "d1"),
                                                                  ("q3", "d3"), ("q4", "d7")]
    assert report == {"out": str(out), "pairs": 5, "queries": 4, "negatives": 15, "short_pairs": 0}
    assert not [r for r in rows if normal_query(r["query"]) == normal_query(TRAIN_QUERIES[2])]

    # brute force: cosines of the adapter's embeddings, every document ranked
    docs = TINY_CORPUS + MORE_DOCS
    # text_form "auto" as the miner's encoder reads it: q4 is q1's text in capitals
    emb = get_embedder("infonce", load_model(str(tiny_folder), device="cpu"), adapter=str(adapter), max_length=32,
                       text_form="auto")
    H = emb.encode_documents(docs)
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    relevant = {normal_query(TRAIN_QUERIES[0]): {"d0", "d6"}, normal_query(TRAIN_QUERIES[1]): {"d1", "d7"},
                normal_query(TRAIN_QUERIES[3]): {"d3"}}
    for r in rows:
        q = emb.encode_queries([r["query"]])[0]
        cos = H @ (q / np.linalg.norm(q))
        order = sorted(range(len(docs)), key=lambda i: -cos[i])[:DEPTH]
        assert np.min(-np.diff(cos[order])) > 1e-5  # no near tie: the order is well defined
        rel = relevant[normal_query(r["query"])]
        want = [f"d{i}" for i in order if f"d{i}" not in rel][SKIP:SKIP + PER_QUERY]
        assert r["negative_ids"] == want, r["query_id"]
        assert not set(r["negative_ids"]) & rel
        assert r["negatives"] == [docs[int(d[1:])] for d in want]
        assert sorted(r["relevant"]) == sorted(docs[int(d[1:])] for d in rel)

    # the file reads back as the pairs it holds, relevant texts included
    pairs = load_triples(out)
    assert [triple_row(p) for p in pairs] == [{k: r[k] for k in ("query", "positive", "negatives", "relevant")}
                                              for r in rows]

    # a second run reads every vector from the embedding cache: no text is embedded again
    def refuse(self, texts, **kw):
        raise AssertionError(f"embedded {len(texts)} texts again")

    monkeypatch.setattr(InfoNCEEmbedder, "encode_documents", refuse)
    monkeypatch.setattr(InfoNCEEmbedder, "encode_queries", refuse)
    again = tmp_path / "again.jsonl"
    assert _mine(tiny_folder, adapter, toy, again, tmp_path / "emb") == 0
    assert again.read_text() == out.read_text()


def test_the_mined_file_trains(tiny_folder, adapter, toy, tmp_path):
    """Stage two: `alignir train infonce --data mined.jsonl --init-adapter stage1` runs a step on
    the mined pairs (three hard negatives each)."""
    out = tmp_path / "mined.jsonl"
    assert _mine(tiny_folder, adapter, toy, out, tmp_path / "emb") == 0
    stage2 = tmp_path / "stage2"
    res = CliRunner().invoke(app, ["train", "infonce", "--data", str(out), "--model", str(tiny_folder),
                                   "--init-adapter", str(adapter), "--out", str(stage2), "--steps", "1",
                                   "--batch-size", "2", "--max-length", "32"])
    assert res.exit_code == 0, res.output
    assert len(train_log(stage2)) == 1 and np.isfinite(train_log(stage2)[0]["loss"])
    meta = json.loads((stage2 / "alignir_train.json").read_text())
    assert meta["data"]["sources"][0]["negatives_per_pair"] == PER_QUERY and meta["n_examples"] == 5


def test_relevant_texts_keep_a_pair_off_the_other_pairs_of_its_query(tmp_path):
    """Two mined pairs of one query in a batch: each one's positive is not the other's negative."""
    from alignir.encoders.train.base import in_batch_candidates, pair_texts

    path = tmp_path / "p.jsonl"
    rows = [Pair("q", "a", ["n1"], ("a", "b")), Pair("q", "b", ["n2"], ("a", "b")), Pair("r", "c", [], ("c",))]
    path.write_text("".join(json.dumps(triple_row(p)) + "\n" for p in rows))
    batch = load_triples(path)
    assert batch == rows
    cand = in_batch_candidates(batch, pair_texts(batch)[1])
    assert cand is not None and not cand[0, 1] and not cand[1, 0] and cand[0, 2] and cand[2, 0]


@pytest.mark.parametrize("args,message", [
    (["--depth", "5", "--skip", "3", "--per-query", "4"], "exceeds --depth 5"),
    (["--per-query", "0"], "--per-query >= 1"),
    (["--split", "test"], "never trains"),
    (["--out", "mined.txt"], "must be a .jsonl file"),
])
def test_bad_settings_are_clear_errors(args, message, tiny_folder, toy, tmp_path, capsys):
    base = {"--model": str(tiny_folder), "--data": str(toy), "--out": str(tmp_path / "m.jsonl"),
            "--max-length": "32", "--cache-dir": str(tmp_path / "emb")}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    assert _script().main([x for kv in base.items() for x in kv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.jsonl").exists()
