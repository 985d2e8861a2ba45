"""Unsupervised training pairs built from real BEIR corpora (no queries, no qrels): title <->
abstract pairs and Contriever-style independent crops, with BM25 hard negatives."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from alignir.encoders.train.mix import load_mix, parse_mix
from alignir.encoders.train.unsupervised import (CorpusDoc, body_without_title, crop_pairs, crop_span, load_corpus_docs,
                                                 title_pairs)
from conftest import DATASETS

needs_data = pytest.mark.skipif(not (DATASETS / "cran").is_dir(), reason="BEIR datasets not on this machine")


def _rows(name: str) -> list[dict]:
    with open(DATASETS / name / "corpus.jsonl") as fh:
        return [json.loads(line) for line in fh]


def _is_span(span: str, text: str) -> bool:
    """``span`` is a run of consecutive whitespace-separated words of ``text``."""
    w, s = text.split(), span.split()
    return any(w[i:i + len(s)] == s for i in range(len(w) - len(s) + 1))


@needs_data
def test_title_pairs_on_scifact_rows():
    docs = load_corpus_docs(DATASETS / "scifact")
    rows = _rows("scifact")
    pairs = title_pairs(docs, n_negatives=2, seed=0, max_pairs=40)
    assert len(pairs) == 40
    by_title = {r["title"].strip(): r for r in rows}
    for p in pairs:
        row = by_title[p.query]  # the query is a document's title ...
        assert p.positive == row["text"].strip()  # ... the positive that document's abstract
        assert len(p.negatives) == 2 and p.positive not in p.negatives
        assert all(n in {r["text"].strip() for r in rows} for n in p.negatives)  # other abstracts of the corpus
    # the first row of the file, as it is written there
    first = title_pairs(docs[:50], n_negatives=0)[0]
    assert first.query == rows[0]["title"] and first.positive == rows[0]["text"] and first.negatives == []
    assert title_pairs(docs, n_negatives=2, seed=0, max_pairs=40) == pairs  # seeded


@needs_data
def test_title_pairs_drop_the_title_copy_of_cranfield_texts():
    rows = _rows("cran")
    assert rows[0]["text"].startswith(rows[0]["title"])  # Cranfield texts open with their title
    docs = load_corpus_docs(DATASETS / "cran")
    p = title_pairs(docs[:20], n_negatives=1)[0]
    assert p.query == "experimental investigation of the aerodynamics of a wing in a slipstream ."
    assert p.positive.startswith("an experimental study of a wing in a propeller slipstream")
    assert rows[0]["text"].endswith(p.positive)
    assert all(not n.startswith(d.title) for n in p.negatives for d in docs[:20] if d.title)
    # case and punctuation do not matter; a text that does not open with its title stays whole
    assert body_without_title(CorpusDoc("x", "Heat Transfer.", "heat transfer . in a pipe")) == "in a pipe"
    assert body_without_title(CorpusDoc("x", "Heat transfer", "The heat transfer in a pipe")) == "The heat transfer in a pipe"


@needs_data
def test_crop_pairs_are_independent_spans_of_one_cisi_document():
    """Contriever §3.2 independent cropping: two spans of the same document, each 10-50 % of its words."""
    docs = load_corpus_docs(DATASETS / "cisi")
    pairs = crop_pairs(docs, n_negatives=1, seed=3, max_pairs=30)
    assert len(pairs) == 30
    texts = [d.text for d in docs]
    for p in pairs:
        src = [t for t in texts if _is_span(p.query, t) and _is_span(p.positive, t)]
        assert src, (p.query, p.positive)
        n = len(src[0].split())
        for span in (p.query, p.positive):
            assert max(1, round(0.1 * n) - 1) <= len(span.split()) <= round(0.5 * n) + 1
        neg = p.negatives[0]
        assert any(_is_span(neg, t) for t in texts if t != src[0])  # a crop of another document
    assert crop_pairs(docs, n_negatives=1, seed=3, max_pairs=30) == pairs
    assert crop_pairs(docs, n_negatives=1, seed=4, max_pairs=30) != pairs
    # the two crops are drawn independently: they differ for most documents
    assert sum(p.query != p.positive for p in pairs) >= 25


def test_crop_span_bounds():
    words = [f"w{i}" for i in range(100)]
    rng = np.random.default_rng(0)
    for _ in range(200):
        s = crop_span(words, rng).split()
        assert 10 <= len(s) <= 50 and _is_span(" ".join(s), " ".join(words))
    assert crop_span(["one"], rng) == "one"
    with pytest.raises(ValueError, match="empty"):
        crop_span([], rng)
    with pytest.raises(ValueError, match="min_ratio"):
        crop_span(words, rng, 0.6, 0.5)


@needs_data
def test_load_mix_over_several_corpora_records_its_data(tmp_path):
    spec = "title=20,crop=10"
    corpora = [str(DATASETS / "cisi"), str(DATASETS / "cran")]
    pairs, desc = load_mix(DATASETS / "scifact", spec, n_negatives=1, seed=0, corpora=corpora)
    assert len(pairs) == 60 and desc["total"] == 60
    assert [(s["name"], Path(s["corpus"]).name, s["count"]) for s in desc["sources"]] == [
        ("title", "cisi", 20), ("title", "cran", 20), ("crop", "cisi", 10), ("crop", "cran", 10)]
    cisi_titles = {d.title for d in load_corpus_docs(DATASETS / "cisi")}
    assert all(p.query in cisi_titles for p in pairs[:20])
    # no query of the benchmark enters training: the pairs are built from corpus.jsonl only
    with open(DATASETS / "cisi" / "queries.jsonl") as fh:
        test_queries = {json.loads(line)["text"].strip() for line in fh}
    assert not test_queries & {p.query for p in pairs}
    with pytest.raises(ValueError, match="never train"):
        load_mix(DATASETS / "scifact", "supervised,title", split="test")


def test_parse_mix():
    assert parse_mix(None) == [("supervised", None)]
    assert parse_mix("supervised, title=2000,crop") == [("supervised", None), ("title", 2000), ("crop", None)]
    for bad, msg in [("tite", "unknown data source"), ("title,title", "twice"), ("crop=x", "integer"),
                     ("crop=0", ">= 1")]:
        with pytest.raises(ValueError, match=msg):
            parse_mix(bad)
