"""build_index streams its documents: a generator is read once, a few records at a time, and the
index it makes equals the one built from the same records as a list (ids, stored arrays, and the
scores of every mode); its parts equal those made from all documents at once; the memory the
build allocates stays far below the corpus text; a bad record is an error naming its position
and leaves no index (nor any spool file) behind."""
from __future__ import annotations

import gc
import json
import random
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from alignir.errors import CorpusError, InvalidInputError
from alignir.index.store import open_index, read_manifest
from alignir.retrieval import sources
from alignir.retrieval.bm25 import LexicalBuilder, lexical_leg
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index, read_source
from alignir.retrieval.passages import plan_passages
from alignir.retrieval.searcher import MODES, Searcher

from conftest import TINY_CORPUS, assert_same_ranking

SPARSE = SparseConfig(doc_k=24, query_m=5)
QUERIES = ["light plants", "stock market rates", "wind tunnel flow", "protein amino sequence"]
WORDS = " ".join(TINY_CORPUS).split()
BATCH = 4


def _records(n: int = 30, seed: int = 0) -> list[dict]:
    """``n`` documents of 3 to 45 words of the tiny corpus (some long enough to be split into
    16-token passages), every third with a title."""
    rng = random.Random(seed)
    return [{"_id": f"d{i}", "title": f"Title {i}" if i % 3 == 0 else "",
             "text": " ".join(rng.choice(WORDS) for _ in range(3 + (i * 7) % 43))} for i in range(n)]


RECORDS = _records()


def _interleaved(records, done: list, read: list):
    """A generator of ``records`` that fails when it is asked for a record while more than BATCH
    records it gave are not yet processed (``done[0]``: how many are): a build that read ahead,
    or held the corpus, would ask for them all first."""
    for r in records:
        assert len(read) - done[0] <= BATCH, f"record {len(read) + 1} asked for, only {done[0]} processed"
        read.append(r["_id"])
        yield dict(r)


@pytest.fixture
def processed(monkeypatch):
    """[documents processed so far] during a build: analysed for BM25 (each batch is analysed,
    then encoded, before the next is read: retrieval/ingest.py)."""
    done = [0]
    analyse = LexicalBuilder.add

    def add(self, texts, **kw):
        analyse(self, texts, **kw)
        done[0] += len(texts)

    monkeypatch.setattr(LexicalBuilder, "add", add)
    return done


def _build(source, path, tiny_model, **kw):
    opts = dict(model="tiny", sparse=SPARSE, loaded=tiny_model, use_cache=False, progress=False,
                passages="16:8", device="cpu")
    return build_index(source, path, **{**opts, **kw})


def _rankings(path, tiny_model) -> dict:
    with Searcher.open(path, loaded=tiny_model, device="cpu") as s:
        return {mode: [[(h.id, h.score) for h in hits] for hits in s.batch_search(QUERIES, k=10, mode=mode)]
                for mode in MODES}


def test_a_generator_is_read_once_a_batch_at_a_time_and_builds_the_list_s_index(tmp_path, tiny_model, processed):
    read: list = []
    gen = _interleaved(RECORDS, processed, read)
    streamed = _build(gen, tmp_path / "streamed", tiny_model, batch_size=BATCH, store_text=True)
    listed = _build(list(RECORDS), tmp_path / "listed", tiny_model, batch_size=BATCH, store_text=True)
    assert read == [r["_id"] for r in RECORDS] and next(gen, None) is None  # read once, to the end
    assert streamed["counts"] == listed["counts"] and streamed["counts"]["rows"] > len(RECORDS)  # passages
    assert streamed["params"] == listed["params"]
    assert streamed["build"]["passages"] == listed["build"]["passages"]
    a, b = open_index(tmp_path / "streamed"), open_index(tmp_path / "listed")
    assert a.doc_ids == b.doc_ids == [r["_id"] for r in RECORDS]
    np.testing.assert_array_equal(a.dense_vectors, b.dense_vectors)
    np.testing.assert_array_equal(a.pc1, b.pc1)
    np.testing.assert_array_equal(a.passages.doc, b.passages.doc)
    np.testing.assert_array_equal(a.passages.start, b.passages.start)
    assert [a.parts["texts"].get(i) for i in range(a.n_docs)] == [(r["title"], r["text"]) for r in RECORDS]
    assert _rankings(tmp_path / "streamed", tiny_model) == _rankings(tmp_path / "listed", tiny_model)


def test_the_parts_are_those_of_all_documents_at_once(tmp_path, tiny_model):
    """Batches of 4 against one batch of everything: BM25 (N, df, avgdl of the whole collection)
    bit for bit, the passage map and its report exactly, the encoder rows and every mode's
    scores up to float rounding (the encoder pads other batches)."""
    _build(iter(RECORDS), tmp_path / "batched", tiny_model, batch_size=BATCH)
    _build(RECORDS, tmp_path / "whole", tiny_model, batch_size=10 ** 6)
    a, b = open_index(tmp_path / "batched"), open_index(tmp_path / "whole")
    texts = read_source(RECORDS).texts()
    once = lexical_leg(texts)
    assert a.lexical.vocab == once.vocab and a.lexical.params == once.params
    for d in range(len(texts)):
        for got, want in zip(a.lexical.index.doc_vector(d), once.index.doc_vector(d)):
            np.testing.assert_array_equal(got, want)
    enc = _embedder(tiny_model)
    plan = plan_passages(texts, enc.tokenizer, "auto", 16, 8, budget=enc.text_budget("document"))
    assert read_manifest(tmp_path / "batched")["build"]["passages"] == plan.stats
    np.testing.assert_array_equal(a.passages.counts, plan.counts)
    np.testing.assert_array_equal(a.passages.start, plan.starts)
    np.testing.assert_array_equal(a.passages.end, plan.ends)
    np.testing.assert_allclose(a.dense_vectors, b.dense_vectors, rtol=1e-5, atol=1e-6)
    got, want = _rankings(tmp_path / "batched", tiny_model), _rankings(tmp_path / "whole", tiny_model)
    for mode in MODES:
        for g, w in zip(got[mode], want[mode]):
            assert_same_ranking(g, w, rtol=1e-4, where=mode)


def _embedder(tiny_model):
    from alignir.encoders.embedders import get_embedder

    return get_embedder("prompteol", tiny_model, progress=False)


def _big_records(n: int, words: int):
    """``n`` records of ``words`` words each, made one at a time (a few distinct words: the
    index stays small while the text is large)."""
    for i in range(n):
        yield {"_id": f"big{i}", "text": " ".join(WORDS[(i + j) % 20] for j in range(words))}


def _peak(fn) -> int:
    gc.collect()  # garbage left by earlier work would otherwise be freed, or not, inside the measure
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.e2e  # a memory measurement of whole builds
def test_the_memory_a_build_allocates_is_a_batch_not_the_corpus(tmp_path, tiny_model):
    """Four times the documents (of ~26 kB each) cost a streamed build next to no more memory
    (Python allocations, tracemalloc), while holding them costs their size."""
    words, small, large = 4000, 40, 160
    extra_text = sum(len(r["text"]) for r in _big_records(large, words)) * (large - small) / large  # ~3 MB

    def streamed(n, name=None):
        return _peak(lambda: _build(_big_records(n, words), tmp_path / (name or f"big{n}"), tiny_model, batch_size=2,
                                    passages="off", store_text=True, embedder_options={"max_length": 32}))

    streamed(small, "warm")  # one-time costs (the embedder with these options, lazy imports) land here
    held = _peak(lambda: read_source(_big_records(large, words))) - _peak(lambda: read_source(_big_records(small, words)))
    grown = min(streamed(large) - streamed(small) for _ in range(2))  # the lesser of two: a stray allocation is not growth
    assert held > extra_text  # the measure sees documents held in memory
    assert grown < extra_text / 10, (grown, extra_text)
    stored = open_index(tmp_path / f"big{large}")
    assert stored.n_docs == large and stored.parts["texts"].get(large - 1)[1].startswith(WORDS[(large - 1) % 20])


BAD = [({"_id": "", "text": "x"}, "record 7 has no _id"),
       ({"_id": "d2", "text": "again"}, "record 7 repeats the _id 'd2'"),
       ({"_id": "n7", "text": 7}, "record 7 \\('n7'\\) needs a string text"),
       ("not a record", "record 7 is str")]


@pytest.mark.parametrize("bad,message", BAD, ids=["no-id", "duplicate", "text-not-str", "not-a-mapping"])
def test_a_bad_record_names_its_position_and_leaves_nothing_behind(tmp_path, tiny_model, bad, message):
    def records():
        yield from RECORDS[:6]
        yield bad
        yield from RECORDS[6:]

    with pytest.raises(InvalidInputError, match=message):
        _build(records(), tmp_path / "idx", tiny_model, batch_size=3)  # two batches were encoded first
    assert not (tmp_path / "idx").exists()
    assert [p.name for p in tmp_path.iterdir()] == [".idx.lock"]  # no spool, no temp folder


def test_a_failed_stream_leaves_the_previous_index_as_it_was(tmp_path, tiny_model):
    _build(RECORDS[:5], tmp_path / "idx", tiny_model, legs=["bm25"])
    before = read_manifest(tmp_path / "idx")
    with pytest.raises(InvalidInputError, match="record 4 repeats the _id 'd0'"):
        _build(iter([*RECORDS[:3], RECORDS[0]]), tmp_path / "idx", tiny_model, batch_size=2)
    assert read_manifest(tmp_path / "idx") == before and open_index(tmp_path / "idx").n_docs == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [".idx.lock", "idx"]


def test_a_corpus_file_is_checked_whole_before_the_model_loads(tmp_path):
    lines = [json.dumps(r) for r in RECORDS[:4]] + ["{broken", json.dumps({"_id": "d1", "text": "dup"})]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # no such model: had the build loaded it before reading the file, this would be another error
    with pytest.raises(CorpusError) as e:
        build_index(corpus, tmp_path / "idx", model=str(tmp_path / "no-such-model"), progress=False)
    assert [ln for ln, _ in e.value.problems] == [5, 6]
    assert not (tmp_path / "idx").exists()


def test_an_empty_stream_is_an_error(tmp_path):
    with pytest.raises(InvalidInputError, match="no documents to index"):
        build_index(iter([]), tmp_path / "idx", legs="bm25", progress=False)
    with pytest.raises(InvalidInputError, match="no documents to index .document 'e' has empty title and text"):
        build_index([{"_id": "e", "text": " "}], tmp_path / "idx", legs="bm25", progress=False)
    assert not (tmp_path / "idx").exists()


class SpyTable:
    """A pyarrow table that records how it was asked for its record batches."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.asked = table, []
        self.column_names = table.column_names

    def to_batches(self, **kw):
        self.asked.append(kw)
        return self.table.to_batches(**kw)


def test_a_table_is_read_a_record_batch_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "TABLE_CHUNK", 3)
    table = SpyTable(pa.Table.from_pylist(RECORDS))
    build_index(table, tmp_path / "table", legs=["bm25"], batch_size=BATCH, progress=False)
    build_index(RECORDS, tmp_path / "list", legs=["bm25"], progress=False)
    assert table.asked == [{"max_chunksize": 3}]
    with Searcher.open(tmp_path / "table") as t, Searcher.open(tmp_path / "list") as s:
        assert t.index.doc_ids == s.index.doc_ids
        got = [[(h.id, h.score) for h in hits] for hits in t.batch_search(QUERIES, mode="bm25")]
        assert got == [[(h.id, h.score) for h in hits] for hits in s.batch_search(QUERIES, mode="bm25")]
