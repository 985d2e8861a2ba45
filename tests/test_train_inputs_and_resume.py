"""encoders/train/ inputs and resumes: qrels / triples / corpus input read as the evaluation reads it or
refused clearly, data descriptions that say what the pairs hold, one corpus given as a string,
resumes that equal an uninterrupted run (CDA's p_ref, gradient accumulation, held-out curve)."""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from alignir.encoders.train.data import batch_indices, load_beir_pairs, load_triples, queries_shared_with_test
from alignir.encoders.train.mix import load_mix
from alignir.encoders.train.stages import stage_configs
from alignir.encoders.train.trainer import TrainConfig, train
from alignir.qrels import read_qrels

from conftest import DATASETS, TINY_CORPUS, TRAIN_QUERIES, train_config, train_log, train_losses, write_corpus, write_queries

pytestmark = pytest.mark.usefixtures("one_thread")

_cfg = functools.partial(train_config, steps=4)


@pytest.fixture
def beir(tmp_path):
    d = tmp_path / "beir"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    write_queries(d / "queries.jsonl", TRAIN_QUERIES[:3])
    return d


@pytest.mark.parametrize("qrels,encoding", [
    ("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t1\n", "utf-8-sig"),  # header after a BOM
    ("q0\td0\t1\nq1\td1\t1\nq2\td2\t1\n", "utf-8-sig"),  # BOM: q0 was silently dropped
    ("q0 0 d0 1\nq1 0 d1 1\nq2 0 d2 1\n", "utf-8"),  # TREC rows, space-separated
    ("qid\tdocid\trel\nq0\td0\t1\nq1\td1\t1.0\nq2\td2\t2\n", "utf-8"),  # another header, "1.0"
], ids=["bom-header", "bom-no-header", "trec", "other-header-float"])
def test_train_qrels_read_as_the_evaluation_reads_them(beir, qrels, encoding):
    (beir / "qrels" / "train.tsv").write_bytes(qrels.encode(encoding))
    got = load_beir_pairs(beir, "train", n_negatives=0)
    assert [(p.query, p.positive) for p in got] == list(zip(TRAIN_QUERIES[:3], TINY_CORPUS[:3]))


def test_a_train_query_that_is_also_a_test_query_never_trains(beir):
    """BEIR's SciFact has train 871 = test 870 and train 1291 = test 1292 (same text, same relevant doc)."""
    write_queries(beir / "queries.jsonl", TRAIN_QUERIES[:4] + ["  Stock  MARKET rates "])  # q4 = q1, case/space
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t1\n")
    before = load_beir_pairs(beir, "train", n_negatives=1, mine_depth=3)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td1\t1\nq3\td3\t1\n")
    after = load_beir_pairs(beir, "train", n_negatives=1, mine_depth=3)
    assert [p.query for p in after] == [TRAIN_QUERIES[0], TRAIN_QUERIES[2]]
    assert after == [before[0], before[2]]  # the other pairs, negatives included, are unchanged
    pairs, desc = load_mix(beir, "supervised", n_negatives=1)
    assert desc["sources"][0]["dropped_test_queries"] == ["q1"] and len(pairs) == 2
    assert load_beir_pairs(beir, "test", n_negatives=0)  # the test split itself is not filtered
    (beir / "qrels" / "train.tsv").write_text("q1\td1\t1\n")
    with pytest.raises(ValueError, match="also a test query"):
        load_beir_pairs(beir, "train", n_negatives=0)


def test_scifact_train_pairs_hold_no_test_query():
    folder = DATASETS / "scifact"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found (set ALIGNIR_SHARED)")
    assert queries_shared_with_test(folder) == ["871", "1291"]
    test = {json.loads(line)["_id"]: json.loads(line)["text"] for line in open(folder / "queries.jsonl")}
    test_texts = {test[q] for q in read_qrels(folder, "test")}
    pairs = load_beir_pairs(folder, "train", n_negatives=0)
    assert not {p.query for p in pairs} & test_texts
    # 919 judged pairs: 2 of queries shared with test, 3 repeated (train 85 and 86 are one query text)
    assert len(pairs) == 919 - 2 - 3 == len({(" ".join(p.query.casefold().split()), p.positive) for p in pairs})


def test_malformed_train_input_is_a_clear_error(beir, tmp_path):
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\n")
    with pytest.raises(ValueError, match=r"train.tsv: 1 problem.*\n  line 2: expected 3 .* got 2"):
        load_beir_pairs(beir, "train", n_negatives=0)
    (beir / "qrels" / "train.tsv").write_text("q0\td0\t1\nq1\td1\thigh\n")
    with pytest.raises(ValueError, match=r"train.tsv: 1 problem.*\n  line 2: relevance 'high'"):
        load_beir_pairs(beir, "train", n_negatives=0)
    (beir / "queries.jsonl").write_text('{"id": "q0", "text": "x"}\n')
    with pytest.raises(ValueError, match=r"queries.jsonl: record 1 has no '_id'"):
        load_beir_pairs(beir, "train", n_negatives=0)
    trip = tmp_path / "t.jsonl"
    trip.write_text(json.dumps({"query": "q", "positive": "p", "negatives": [None, 3]}) + "\n")
    with pytest.raises(ValueError, match="list of strings"):
        load_triples(trip)  # used to train on the negatives "None" and "3"


def test_mix_description_records_the_negatives_the_pairs_carry(tmp_path):
    trip = tmp_path / "t.jsonl"
    trip.write_text("".join(json.dumps({"query": q, "positive": p, "negatives": TINY_CORPUS[:3]}) + "\n"
                            for q, p in zip(TRAIN_QUERIES, TINY_CORPUS)))
    pairs, desc = load_mix(trip, None, n_negatives=0)  # --negatives mines BEIR data only: the file's 3 are used
    assert {len(p.negatives) for p in pairs} == {3}
    assert desc["sources"][0]["negatives_per_pair"] == 3


def test_one_corpus_given_as_a_string_is_one_corpus(data_files, tmp_path):
    """``--stage-option scl.corpora=DIR`` arrives as a string, not a list: it is one corpus, not
    one per character ("corpus 'w' does not exist")."""
    cfg = TrainConfig(method="llm2comp", data=data_files["pairs"], out=str(tmp_path / "o"))
    (ucl, scl) = stage_configs(cfg, ["ucl", "scl"], {"ucl": {"corpora": data_files["texts"]}})
    ucl.validate()
    assert ucl.corpora == [data_files["texts"]] and scl.corpora is None


def test_batches_never_repeat_an_example_across_an_epoch_boundary():
    g = batch_indices(5, 4, seed=0)  # seed 0 clashes: the plain permutations put example 1 twice in batch 1
    batches = [next(g) for _ in range(10)]
    assert all(len(set(b)) == len(b) for b in batches)
    for n, size, seed in [(5, 4, 0), (7, 3, 1), (10, 4, 2), (6, 6, 3), (9, 2, 4), (11, 8, 5)]:
        g = batch_indices(n, size, seed=seed)
        stream = sum((next(g) for _ in range(60)), [])
        batches = [stream[i:i + size] for i in range(0, len(stream), size)]
        assert all(len(set(b)) == size for b in batches), (n, size, seed)
        epochs = [stream[i:i + n] for i in range(0, len(stream) - n + 1, n)]
        assert all(sorted(e) == list(range(n)) for e in epochs), (n, size, seed)  # each epoch visits all once
        for start in (0, 7, 23, 59):  # a resume anywhere, across fixed boundaries, continues exactly
            assert next(batch_indices(n, size, seed=seed, start_step=start)) == batches[start], (n, size, start)


def test_epochs_without_a_clash_keep_the_plain_permutation():
    """The boundary fix must not change the batches of runs that never had a repeat (every recorded one)."""
    n, size = 887, 8  # the shipped v2's 887 training examples, batch 8, 360 steps: three epoch boundaries
    g = batch_indices(n, size, seed=0)
    stream = sum((next(g) for _ in range(360)), [])
    plain = np.concatenate([np.random.default_rng([0, e]).permutation(n) for e in range(4)])[:len(stream)]
    assert stream == plain.tolist()
    clash = sum((next(batch_indices(5, 4, seed=0, start_step=s)) for s in range(5)), [])
    assert clash != np.concatenate([np.random.default_rng([0, e]).permutation(5) for e in range(4)]).tolist()


@pytest.mark.parametrize("method,stage,kind,kw", [
    ("autoregembed", "cda", "pairs", dict(hp={"k": 2}, batch_size=3)),  # p_ref rebuilt on resume
    ("infonce", "contrastive", "pairs", dict(grad_accum=2, batch_size=2, eval_examples=2, eval_every=1)),
], ids=["cda", "infonce-grad-accum-eval"])
def test_a_run_resumed_every_step_equals_one_run(method, stage, kind, kw, tiny_model, data_files, tmp_path):
    full = train(_cfg(tmp_path / "a", method, stage, data_files[kind], **kw), loaded=tiny_model)
    cfg = _cfg(tmp_path / "b", method, stage, data_files[kind], stop_after=1, **kw)
    for _ in range(3):
        assert train(cfg, loaded=tiny_model).get("interrupted")
    done = train(cfg, loaded=tiny_model)
    np.testing.assert_allclose(train_losses(done["out"]), train_losses(full["out"]), rtol=1e-5, atol=1e-6)
    if kw.get("eval_examples"):
        a, b = train_log(full["out"], "eval_log.jsonl"), train_log(done["out"], "eval_log.jsonl")
        assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3, 4]
        np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a], rtol=1e-5, atol=1e-6)
    meta = [json.loads((tmp_path / x / f"{method}-{stage}" / "alignir_train.json").read_text()) for x in "ab"]
    assert meta[0]["final_weights_sha256"] == meta[1]["final_weights_sha256"]
