"""Input files never lose a line silently: a qrels first line is a header only when made of
header words, negative relevance is read as 0 with a warning naming the lines, training refuses
empty texts naming their line and data on which no batch holds a negative."""
from __future__ import annotations

import json
import logging

import pytest

from alignir.encoders.train.data import Pair, load_beir_pairs, load_triples
from alignir.encoders.train.trainer import check_negatives, negative_candidates, train
from alignir.errors import InvalidInputError, QrelsError
from alignir.qrels import read_qrels

from conftest import train_config


def _qrels(tmp_path, text):
    p = tmp_path / "q.tsv"
    p.write_text(text)
    return p


def test_a_first_line_that_is_a_judgement_is_counted(tmp_path):
    assert read_qrels(_qrels(tmp_path, "1\t17\t1\n1\t18\t2\n")) == {"1": {"17": 1, "18": 2}}
    assert read_qrels(_qrels(tmp_path, "q1 0 d7 1\n")) == {"q1": {"d7": 1}}


def test_a_first_line_with_a_bad_relevance_is_refused_not_taken_for_a_header(tmp_path):
    """``1 17 0.5`` as line 1 is refused exactly as it is on line 2 (it was dropped as a header)."""
    for text, line in (("1 17 0.5\n1 18 1\n", 1), ("1 18 1\n1 17 0.5\n", 2)):
        with pytest.raises(QrelsError, match=rf"line {line}: relevance '0.5' is not an integer"):
            read_qrels(_qrels(tmp_path, text))


@pytest.mark.parametrize("header", ["query-id\tcorpus-id\tscore", "qid iter docno rel", "query_id doc_id label",
                                    "\ufeffquery-id\tcorpus-id\tscore"])
def test_header_words_are_a_header(tmp_path, header):
    assert read_qrels(_qrels(tmp_path, f"{header}\nq1\td1\t1\n")) == {"q1": {"d1": 1}}


def test_a_header_that_is_not_the_first_line_is_refused(tmp_path):
    with pytest.raises(QrelsError, match="line 2: relevance 'score' is not an integer"):
        read_qrels(_qrels(tmp_path, "q1\td1\t1\nquery-id\tcorpus-id\tscore\n"))


def test_negative_relevance_is_read_as_0_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="alignir.qrels"):
        qrels = read_qrels(_qrels(tmp_path, "q1 d1 1\nq1 d2 -1\nq2 d3 -2\nq2 d4 0\n"))
    assert qrels == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 0, "d4": 0}}
    assert "2 judgement(s) with negative relevance (line 2, 3) read as 0" in caplog.text


def _triples(tmp_path, rows, blank_after=None):
    p = tmp_path / "t.jsonl"
    lines = [json.dumps(r) for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "")
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("field,row", [("query", {"query": " ", "positive": "b"}),
                                       ("positive", {"query": "a", "positive": ""}),
                                       ("negative", {"query": "a", "positive": "b", "negatives": ["c", "\t"]})])
def test_a_triple_with_an_empty_text_is_refused_naming_its_line(tmp_path, field, row):
    """The line number counts blank lines too (it is the file's line, not the record's number)."""
    good = {"query": "q", "positive": "p", "negatives": ["n"]}
    path = _triples(tmp_path, [good, row], blank_after=1)
    with pytest.raises(InvalidInputError, match=rf"t\.jsonl:3: empty {field} text"):
        load_triples(path)


def test_a_beir_query_with_an_empty_text_is_refused_naming_its_line(tmp_path):
    from conftest import write_corpus

    write_corpus(tmp_path / "corpus.jsonl", ["a b c", "d e f"])
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "a"}) + "\n\n"
                                            + json.dumps({"_id": "q1", "text": "  "}) + "\n")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "train.tsv").write_text("q0\td0\t1\nq1\td1\t1\n")
    with pytest.raises(InvalidInputError, match=r"queries\.jsonl:3: the query text is empty"):
        load_beir_pairs(tmp_path, n_negatives=0)


def test_negative_candidates_counts_what_a_contrastive_loss_can_use():
    a, b = Pair("qa", "pa", []), Pair("qb", "pb", [])
    assert negative_candidates([a, a]) == 0  # the same example twice: its own positive only
    assert negative_candidates([a, b]) == 2  # each query has the other's positive
    assert negative_candidates([Pair("qa", "pa", ["na"])]) == 1
    assert negative_candidates([a, Pair("qa", "pb", [])]) == 0  # both positives relevant to the one query text


def test_data_without_any_possible_negative_is_refused():
    one = [Pair("qa", "pa", [])]
    with pytest.raises(InvalidInputError, match="no batch holds a negative candidate"):
        check_negatives(one, 2)
    with pytest.raises(InvalidInputError, match="batch_size is 1"):
        check_negatives([Pair("qa", "pa", []), Pair("qb", "pb", [])], 1)
    check_negatives([Pair("qa", "pa", []), Pair("qb", "pb", [])], 2)
    check_negatives([Pair("qa", "pa", ["n"])], 1)


def test_training_on_one_triple_without_negatives_stops_before_writing(tmp_path, tiny_model):
    """It trained with loss exactly 0 at every step and saved an adapter; now it stops first."""
    path = _triples(tmp_path, [{"query": "light and plants", "positive": "photosynthesis"}])
    cfg = train_config(tmp_path, "infonce", "contrastive", str(path), steps=2, batch_size=2)
    with pytest.raises(InvalidInputError, match="no batch holds a negative candidate"):
        train(cfg, loaded=tiny_model)
    assert not (tmp_path / "infonce-contrastive" / "loss_log.jsonl").exists()
