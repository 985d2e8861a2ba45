"""The training-data side of ``alignir train`` (encoders/train/data.py, mix.py, unsupervised.py,
trainer.py): held-out queries never train, no document judged relevant to a query
is its negative (mined or in-batch), malformed data and settings are clear errors."""
from __future__ import annotations

import pytest

from alignir.encoders.train import unsupervised as un
from alignir.encoders.train.data import load_beir_pairs, load_texts, load_triples
from alignir.encoders.train.trainer import TrainConfig, split_heldout, train
from alignir.errors import InvalidInputError

from conftest import TINY_CORPUS, TRAIN_QUERIES, train_config, write_corpus, write_queries

pytestmark = pytest.mark.usefixtures("one_thread")


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


@pytest.fixture
def multi(tmp_path):
    """A BEIR folder whose train split has a query with three relevant documents, one with two,
    and two query ids with the same text (SciFact train 85 = 86, 89 = 90)."""
    d = tmp_path / "multi"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    write_queries(d / "queries.jsonl", [TRAIN_QUERIES[0], TRAIN_QUERIES[3], TRAIN_QUERIES[5], TRAIN_QUERIES[5]])
    (d / "qrels" / "train.tsv").write_text("q0\td0\t1\nq0\td1\t1\nq0\td2\t1\nq1\td3\t1\nq1\td4\t1\n"
                                           "q2\td5\t1\nq3\td5\t1\n")
    return d


def test_heldout_examples_share_no_query_with_training(multi):
    """``eval_examples`` holds out single (query, positive) pairs, so the other positives of a
    held-out query (or an identical pair of a duplicate query id) still train: the held-out loss is
    measured on queries the model trained on. On SciFact (77 of 809 train queries have several
    positives) 22 of 100 held-out pairs have their query in the training part."""
    pairs = load_beir_pairs(multi, "train", n_negatives=0)
    for seed in range(5):
        data, held = split_heldout(pairs, 2, seed)
        trained = {_norm(p.query) for p in data}
        assert not [p.query for p in held if _norm(p.query) in trained], f"seed {seed}"


def test_a_hard_negative_is_never_judged_relevant_to_the_same_query_text(tmp_path):
    """SciFact train 89 and 90 have the same text; 89 judges 7521113 relevant, 90 does not, so
    7521113 is mined as a BM25 hard negative of 90's pair (seen with --negatives 30)."""
    d = tmp_path / "dup"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    write_queries(d / "queries.jsonl", [TRAIN_QUERIES[1], TRAIN_QUERIES[1]])
    (d / "qrels" / "train.tsv").write_text("q0\td1\t1\nq0\td3\t1\nq1\td1\t1\n")
    pairs = load_beir_pairs(d, "train", n_negatives=5, mine_depth=5)
    relevant = {TINY_CORPUS[1], TINY_CORPUS[3]}  # judged relevant to "stock market rates"
    assert not [n for p in pairs for n in p.negatives if n in relevant]


def test_no_judged_relevant_document_is_an_in_batch_negative(multi, tiny_model, tmp_path, monkeypatch):
    """Two pairs of one query (or of two ids with one text) in a batch make each one's positive,
    a document judged relevant to the query, an in-batch negative of the other. batch_indices only
    keeps an example *index* from repeating. On SciFact train, 56 % of batch-64 batches (14/300
    at batch 16) hold such a pair. Either the batcher keeps them apart or the loss masks them."""
    import alignir.encoders.train.infonce as infonce_mod

    seen = []
    orig_loss, orig_nce = infonce_mod.InfoNCEMethod.loss, infonce_mod.info_nce

    def loss(self, batch):
        seen.append({"batch": list(batch)})
        return orig_loss(self, batch)

    def nce(q, docs, pos, tau=0.05, candidates=None):
        seen[-1]["candidates"] = candidates
        return orig_nce(q, docs, pos, tau, candidates)

    monkeypatch.setattr(infonce_mod.InfoNCEMethod, "loss", loss)
    monkeypatch.setattr(infonce_mod, "info_nce", nce)
    cfg = train_config(tmp_path / "run", "infonce", "contrastive", str(multi), steps=4, batch_size=4, n_negatives=0)
    train(cfg, loaded=tiny_model)
    clashes = []
    for row in seen:
        b, cand = row["batch"], row.get("candidates")
        for i in range(len(b)):
            for j in range(len(b)):
                if i != j and _norm(b[i].query) == _norm(b[j].query) and (cand is None or bool(cand[i, j])):
                    clashes.append((b[i].query, b[j].positive[:30]))
    assert not clashes


def test_missing_documents_are_not_reported_as_test_queries(tmp_path):
    """A corpus that lacks the judged documents (or is empty) is reported as 'every judged query
    ... is also a test query' although the folder has no test qrels; with negatives to mine, an
    empty corpus fails inside bm25s with 'max() arg is an empty sequence'."""
    d = tmp_path / "b"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    write_queries(d / "queries.jsonl", TRAIN_QUERIES[:2])
    (d / "qrels" / "train.tsv").write_text("q0\tdX\t1\nq1\tdY\t1\n")
    with pytest.raises(InvalidInputError) as e:
        load_beir_pairs(d, "train", n_negatives=0)
    assert "test query" not in str(e.value)
    (d / "corpus.jsonl").write_text("")
    (d / "qrels" / "train.tsv").write_text("q0\td0\t1\n")
    with pytest.raises(InvalidInputError) as e:
        load_beir_pairs(d, "train", n_negatives=1)
    assert "test query" not in str(e.value) and "max()" not in str(e.value)


@pytest.mark.parametrize("case", ["query-text-null", "corpus-row-list", "title-number", "triple-row-list",
                                  "texts-row-string", "corpus-docs-row-list", "crop-no-bm25-vocabulary"])
def test_malformed_rows_are_clear_errors(case, tmp_path):
    """Each of these raised AttributeError / TypeError (a traceback from the CLI) or bm25s's
    'max() arg is an empty sequence' instead of an InvalidInputError naming the file and record."""
    d = tmp_path / "b"
    (d / "qrels").mkdir(parents=True)
    write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    write_queries(d / "queries.jsonl", TRAIN_QUERIES[:2])
    (d / "qrels" / "train.tsv").write_text("q0\td0\t1\nq1\td1\t1\n")
    (d / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    f = tmp_path / "x.jsonl"
    if case == "crop-no-bm25-vocabulary":  # words bm25s drops (one letter, stopwords): empty vocabulary
        docs = [un.CorpusDoc("a", "", "w x y z a b c d e f g"), un.CorpusDoc("b", "", "the of and " * 4)]
        try:
            got = un.crop_pairs(docs, n_negatives=1)
        except InvalidInputError:
            return
        assert len(got) == 2
        return
    writes = {
        "query-text-null": (d / "queries.jsonl", '{"_id": "q0", "text": null}\n{"_id": "q1", "text": "stock"}\n'),
        "corpus-row-list": (d / "corpus.jsonl", '{"_id": "d0", "text": "a b"}\n["not", "a", "record"]\n'),
        "title-number": (d / "corpus.jsonl", '{"_id": "d0", "title": 1984, "text": "a novel"}\n'),
        "triple-row-list": (f, '["q", "p"]\n'),
        "texts-row-string": (f, '"some text"\n'),  # "text" in "some text" is True: passed the field check
        "corpus-docs-row-list": (d / "corpus.jsonl", '["a"]\n'),
    }
    calls = {
        "query-text-null": lambda: load_beir_pairs(d, "train", n_negatives=0),
        "corpus-row-list": lambda: load_texts(d),
        "title-number": lambda: load_beir_pairs(d, "train", n_negatives=0),
        "triple-row-list": lambda: load_triples(f),
        "texts-row-string": lambda: load_texts(f),
        "corpus-docs-row-list": lambda: un.load_corpus_docs(d),
    }
    path, text = writes[case]
    path.write_text(text)
    with pytest.raises(InvalidInputError):
        calls[case]()


@pytest.mark.parametrize("field,value", [("max_examples", -1), ("max_examples", 0), ("n_negatives", -1),
                                         ("data_mix", 5)])
def test_validate_refuses_bad_data_settings(field, value, data_files, tmp_path):
    """``--max-examples -1`` silently trains on all queries but the last (qids[:-1]) and records
    -1; ``--max-examples 0`` trains on everything; ``--stage-option contrastive.n_negatives=-1``
    (no CLI min there) trains without negatives; ``--stage-option contrastive.data_mix=5`` arrives
    as an int and fails with AttributeError in parse_mix."""
    cfg = TrainConfig(method="infonce", data=data_files["pairs"], out=str(tmp_path / "o"), **{field: value})
    with pytest.raises(InvalidInputError):
        cfg.validate()


def test_title_copy_removal_cuts_exactly_the_title():
    """body_without_title counts the title's words in the lower-cased text but cuts the original:
    'İ'.lower() is two characters ('i' + U+0307), the second not a word character, so one word
    too many is cut."""
    doc = un.CorpusDoc("x", "İstanbul earthquakes", "İstanbul earthquakes. A survey of faults")
    assert un.body_without_title(doc) == "A survey of faults"


def test_in_batch_candidates_mask_exactly_the_judged_relevant_documents():
    from alignir.encoders.train.base import in_batch_candidates, pair_texts
    from alignir.encoders.train.data import Pair

    batch = [Pair("Stock  rates", "d1", ["d4"], ("d1", "d2")),
             Pair("stock rates", "d2", [], ("d1", "d2")),  # another id, the same query text
             Pair("wind tunnel", "d3", ["d1"], ("d3",))]   # d1 is its mined negative, relevant to query 0 only
    _, docs, pos = pair_texts(batch)
    assert docs == ["d1", "d2", "d3", "d4", "d1"] and pos == [0, 1, 2]
    got = in_batch_candidates(batch, docs).tolist()
    assert got == [[True, False, True, True, False],
                   [False, True, True, True, False],
                   [True, True, True, True, True]]
    assert in_batch_candidates([Pair("a", "x"), Pair("b", "y")], ["x", "y"]) is None


def test_bm25_top_orders_ties_by_row_on_every_machine():
    """Documents of equal BM25 score come in row order (a top-k selection would order them by
    its SIMD path, and a mined negative that moves changes a run's examples); the top k of a tie
    group cut by k are its first rows. Checked against bm25s's own scores."""
    import bm25s

    from alignir.encoders.train.data import bm25_top

    texts = ["solar wind plasma", "unrelated text about cooking", "solar wind plasma", "plasma", "solar wind plasma",
             "plasma", "wind", "solar wind plasma"]
    rows = bm25_top("t", texts, ["solar wind plasma", "plasma", "quantum"], 4)
    assert rows[0] == [0, 2, 4, 7]  # four equal top scores, in row order
    assert rows[1][:2] == [3, 5]  # the one-word documents score highest for "plasma", then the longer ones
    assert rows[2] == [0, 1, 2, 3]  # no indexed word: every score is 0, so the first rows
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    scores = retriever.get_scores(["plasma"])
    assert [round(float(scores[i]), 5) for i in rows[1]] == sorted((round(float(s), 5) for s in scores), reverse=True)[:4]
    assert rows[1][2:] == sorted(rows[1][2:])  # the tie group after them, in row order
