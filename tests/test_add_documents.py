"""Adding documents to an index: build(A) + add(B) ranks exactly as build(A ∪ B) in every mode
(dense vectors of both from the same embedding cache, so the comparison is bit for bit);
an id already indexed is an error unless replaced; documents from Python records and pyarrow
tables; stored texts (Searcher.doc); the searcher as a context manager."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import alignir
from alignir.errors import InvalidInputError
from alignir.index.store import open_index, read_manifest
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import add_documents, build_index
from alignir.retrieval.searcher import MODES, Searcher

from conftest import TINY_CORPUS

QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel", "proteins fold"]
SPARSE = SparseConfig(doc_k=24, query_m=5)


def _records(ids, texts, title=""):
    return [{"_id": i, "title": title, "text": t} for i, t in zip(ids, texts)]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _build(source, path, tiny_model, cache, **kw):
    return build_index(source, path, model="tiny", sparse=SPARSE, loaded=tiny_model, cache_dir=cache,
                       progress=False, **kw)


def _rankings(path, tiny_model):
    with Searcher.open(path, loaded=tiny_model) as s:
        return {mode: [[(h.id, h.score) for h in hits] for hits in s.batch_search(QUERIES, k=10, mode=mode)]
                for mode in MODES}


IDS = [f"d{i}" for i in range(len(TINY_CORPUS))]
A, B = _records(IDS[:4], TINY_CORPUS[:4]), _records(IDS[4:], TINY_CORPUS[4:])


def test_build_plus_add_ranks_as_the_rebuild_in_every_mode(tmp_path, tiny_model):
    cache = tmp_path / "cache"
    _build(_write(tmp_path / "a.jsonl", A), tmp_path / "grown", tiny_model, cache)
    before = read_manifest(tmp_path / "grown")
    manifest = add_documents(tmp_path / "grown", B, loaded=tiny_model, cache_dir=cache, progress=False)
    assert manifest["counts"]["docs"] == len(TINY_CORPUS) and manifest["build"]["added"][-1]["documents"] == 2
    _build(_write(tmp_path / "all.jsonl", A + B), tmp_path / "rebuilt", tiny_model, cache)
    grown, rebuilt = open_index(tmp_path / "grown"), open_index(tmp_path / "rebuilt")
    assert list(grown.doc_ids) == list(rebuilt.doc_ids) == IDS
    np.testing.assert_array_equal(grown.pc1, rebuilt.pc1)
    assert grown.params["sparse"] == rebuilt.params["sparse"] != before["params"]["sparse"]  # λ re-fitted
    assert grown.lexical.params == rebuilt.lexical.params  # N and avgdl of the whole collection
    assert grown.params["fusion_calibration"] == rebuilt.params["fusion_calibration"] is not None
    assert _rankings(tmp_path / "grown", tiny_model) == _rankings(tmp_path / "rebuilt", tiny_model)


def test_an_indexed_id_is_an_error_unless_replaced(tmp_path, tiny_model):
    cache = tmp_path / "cache"
    _build(_write(tmp_path / "all.jsonl", A + B), tmp_path / "idx", tiny_model, cache, store_text=True)
    changed = [{"_id": "d1", "title": "", "text": "Wind tunnels measure supersonic heating of plates."}]
    with pytest.raises(InvalidInputError, match="already in the index.*d1"):
        add_documents(tmp_path / "idx", changed, loaded=tiny_model, cache_dir=cache, progress=False)
    assert open_index(tmp_path / "idx").doc_ids[1] == "d1"  # nothing written
    add_documents(tmp_path / "idx", changed, replace=True, loaded=tiny_model, cache_dir=cache, progress=False)
    expect = [r for r in A + B if r["_id"] != "d1"] + changed  # the replaced document moves to the end
    _build(expect, tmp_path / "rebuilt", tiny_model, cache, store_text=True)
    assert _rankings(tmp_path / "idx", tiny_model) == _rankings(tmp_path / "rebuilt", tiny_model)
    with Searcher.open(tmp_path / "idx", loaded=tiny_model) as s:
        assert s.doc("d1") == changed[0] and s.doc("d0")["text"] == TINY_CORPUS[0]
        with pytest.raises(InvalidInputError, match="no document 'nope'"):
            s.doc("nope")


def test_records_and_pyarrow_tables_index_as_the_corpus_file(tmp_path, tiny_model):
    cache = tmp_path / "cache"
    _build(_write(tmp_path / "all.jsonl", A + B), tmp_path / "file", tiny_model, cache)
    _build(iter(A + B), tmp_path / "records", tiny_model, cache)
    _build(pa.Table.from_pylist(A + B), tmp_path / "table", tiny_model, cache)
    ref = _rankings(tmp_path / "file", tiny_model)
    assert _rankings(tmp_path / "records", tiny_model) == ref == _rankings(tmp_path / "table", tiny_model)
    assert read_manifest(tmp_path / "records")["build"]["source"] is None
    with Searcher.open(tmp_path / "file", loaded=tiny_model) as s:
        with pytest.raises(InvalidInputError, match="does not store its texts.*--store-text"):
            s.doc("d0")


def test_bad_records_are_named(tmp_path, tiny_model):
    for bad, match in (([{"title": "x", "text": "y"}], "record 1 has no _id"),
                       ([{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}], "repeats the _id 'a'"),
                       ([{"_id": "a", "text": 3}], "needs a string text"),
                       ({"_id": "a", "text": "x"}, "iterable of")):
        with pytest.raises(InvalidInputError, match=match):
            alignir.build_index(bad, tmp_path / "idx", model="tiny", loaded=tiny_model, progress=False)
    assert not (tmp_path / "idx").exists()
