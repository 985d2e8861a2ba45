"""Keeping an index in step with its corpus through the CLI, the index builder and the Milvus
backend: `alignir encode` caches the rows build-index encodes (passages of long documents),
`add-lexical` keeps deleted documents deleted, a document without terms exports to Milvus, and
`export milvus --store-text` with a corpus lacking documents says so. On the tiny random Llama of conftest."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignir.errors import InvalidInputError
from alignir.retrieval.cli import app
from alignir.retrieval.indexer import add_lexical, build_index, calibrate_index, delete_documents
from alignir.retrieval.searcher import Searcher

from conftest import assert_same_ranking, share_model_cache, TINY_CORPUS, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _parts(cache: Path) -> set[str]:
    return {p.name for p in cache.rglob("part-*")}


def test_encode_caches_the_passages_build_index_encodes(tmp_path, tiny_folder, monkeypatch):
    """Documents longer than the window are split by build-index (passages auto): `encode`
    shards must cache those passages, so the build after `cache-merge` encodes nothing."""
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "home"))
    share_model_cache(tmp_path / "home")  # the run's converted models and ONNX exports
    long = " ".join(TINY_CORPUS)
    corpus = write_corpus(tmp_path / "corpus.jsonl", [f"{long} {i}" for i in range(3)] + ["short text"])
    for shard in (0, 1):
        r = invoke("encode", corpus, "--model", tiny_folder, "--max-length", 64, "--shard-id", shard,
                   "--shard-num", 2, "--cache-dir", tmp_path / f"shard{shard}")
        assert r.exit_code == 0, r.output
        assert "passages into the cache" in r.output
    assert invoke("cache-merge", tmp_path / "shard0", tmp_path / "shard1", "--cache-dir",
                  tmp_path / "merged").exit_code == 0
    before = _parts(tmp_path / "merged")
    r = invoke("build-index", corpus, "--index", tmp_path / "idx", "--model", tiny_folder, "--max-length", 64,
               "--cache-dir", tmp_path / "merged")
    assert r.exit_code == 0, r.output
    assert "passages into" in r.output  # the documents were split
    assert _parts(tmp_path / "merged") == before, "build-index re-encoded what `encode` should have cached"


def test_encode_takes_the_encoder_flags_of_build_index(tmp_path, tiny_folder, monkeypatch):
    """--instruction is part of the encoder fingerprint: `encode` takes it as build-index does."""
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "home"))
    share_model_cache(tmp_path / "home")  # the run's converted models and ONNX exports
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    r = invoke("encode", corpus, "--model", tiny_folder, "--instruction", "scifact", "--cache-dir", tmp_path / "c")
    assert r.exit_code == 0, r.output
    before = _parts(tmp_path / "c")
    r = invoke("build-index", corpus, "--index", tmp_path / "idx", "--model", tiny_folder, "--instruction",
               "scifact", "--cache-dir", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert _parts(tmp_path / "c") == before
    r = invoke("encode", corpus, "--model", tiny_folder, "--passages", "bogus")
    assert r.exit_code == 1 and "--passages" in r.output


# ---------------------------------------------------------------- add-lexical after delete

@pytest.fixture()
def deleted(tmp_path, tiny_model):
    """An index of TINY_CORPUS (d0..d5) with d1 ("stock market ... interest rates") deleted."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, tmp_path / "idx", model="tiny", loaded=tiny_model, cache_dir=tmp_path / "cache",
                progress=False, calibrate=False)
    delete_documents(tmp_path / "idx", ["d1"])
    return tmp_path


QUERY = "stock market interest rates"


def _ids(searcher, mode):
    return [h.id for h in searcher.search(QUERY, k=10, mode=mode)]


def test_add_lexical_keeps_deleted_documents_deleted(deleted, tiny_model):
    idx = deleted / "idx"
    assert "d1" not in _ids(Searcher.open(idx, loaded=tiny_model), "bm25")
    add_lexical(idx, calibrate=False)
    s = Searcher.open(idx, loaded=tiny_model)
    for mode in ("bm25", "dense+bm25", "dense+sparse+bm25"):
        assert "d1" not in _ids(s, mode), mode
    assert s.index.lexical.index.live_doc_numbers().tolist() == [0, 2, 3, 4, 5]


def test_a_corpus_without_the_deleted_documents_is_still_the_index_corpus(deleted, tiny_model):
    """Deleting a document from the index and from the corpus file: add-lexical and calibrate
    take that corpus (it holds every live document)."""
    idx = deleted / "idx"
    corpus = write_corpus(deleted / "pruned.jsonl", TINY_CORPUS)
    lines = [line for line in corpus.read_text().splitlines() if json.loads(line)["_id"] != "d1"]
    corpus.write_text("\n".join(lines) + "\n")
    add_lexical(idx, corpus, calibrate=False)
    assert "d1" not in _ids(Searcher.open(idx, loaded=tiny_model), "bm25")
    calibrate_index(idx, corpus, loaded=tiny_model)
    bad = write_corpus(deleted / "other.jsonl", TINY_CORPUS[:3])  # lacks live d3..d5
    with pytest.raises(InvalidInputError, match="lacks 3 indexed"):
        add_lexical(idx, bad, calibrate=False)


# ---------------------------------------------------------------- Milvus

@pytest.fixture(scope="module")
def termless(tmp_path_factory, tiny_model):
    """An index whose last two documents have no BM25 term (stopwords only, punctuation only)."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    root = tmp_path_factory.mktemp("termless")
    texts = TINY_CORPUS + ["the of and", "!!! ???"]
    corpus = write_corpus(root / "corpus.jsonl", texts)
    build_index(corpus, root / "idx", model="tiny", loaded=tiny_model, cache_dir=root / "cache", progress=False,
                calibrate=False)
    return root, texts


@pytest.mark.milvus
def test_milvus_exports_documents_without_terms(termless, tiny_model):
    from alignir.retrieval.milvus import export_index

    root, texts = termless
    uri = str(root / "m.db")
    summary = export_index(root / "idx", uri, progress=False)
    assert summary["inserted"] == summary["count"] == len(texts)
    folder = Searcher.open(root / "idx", loaded=tiny_model)
    milvus = Searcher.open(root / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    try:
        for mode in ("bm25", "sparse", "dense", "dense+sparse+bm25"):
            for fusion in (None, "rrf"):
                for q in ("the plants", "of the and", "supersonic wind tunnel"):
                    want = folder.search(q, k=len(texts), mode=mode, fusion=fusion)
                    got = milvus.search(q, k=len(texts), mode=mode, fusion=fusion)
                    assert_same_ranking([(h.id, h.score) for h in got], [(h.id, h.score) for h in want],
                                        rtol=1e-5, min_scale=1.0)
    finally:
        milvus.close()


@pytest.mark.milvus
def test_milvus_store_text_with_a_corpus_lacking_documents(termless, caplog):
    from alignir.retrieval.milvus import connect, export_index

    root, texts = termless
    uri = str(root / "t.db")
    with pytest.raises(InvalidInputError, match="none of the index"):
        export_index(root / "idx", uri, "foreign", contents={"x1": ("t", "x")}, progress=False)
    contents = {f"d{i}": ("", t) for i, t in enumerate(texts) if i != 2}
    with caplog.at_level(logging.WARNING, logger="alignir.retrieval.milvus"):
        summary = export_index(root / "idx", uri, "texts", contents=contents, progress=False)
    assert summary["missing_contents"] == 1 and summary["count"] == len(texts)
    assert "lacks 1 of the index's 8 documents" in caplog.text
    client = connect(uri)
    try:
        assert not client.has_collection("foreign")  # refused before anything was created
    finally:
        client.close()
    shutil.rmtree(root / "t.db", ignore_errors=True)


def test_add_lexical_after_delete_in_an_index_with_passages(tmp_path, tiny_model):
    """The deleted documents of a passage index are those without a live passage (rows are not
    documents): add-lexical tombstones exactly them and takes a corpus without them."""
    from alignir.retrieval.indexer import resparsify

    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, tmp_path / "idx", model="tiny", loaded=tiny_model, cache_dir=tmp_path / "cache",
                progress=False, calibrate=False, passages="8")
    idx = tmp_path / "idx"
    s = Searcher.open(idx, loaded=tiny_model)
    assert s.index.n_rows > s.index.n_docs  # split into passages
    delete_documents(idx, ["d1", "d4"])
    lines = [line for line in corpus.read_text().splitlines() if json.loads(line)["_id"] not in ("d1", "d4")]
    pruned = tmp_path / "pruned.jsonl"
    pruned.write_text("\n".join(lines) + "\n")
    add_lexical(idx, pruned, calibrate=False)
    s = Searcher.open(idx, loaded=tiny_model)
    assert s.index.lexical.index.live_doc_numbers().tolist() == [0, 2, 3, 5]
    assert not {"d1", "d4"} & set(_ids(s, "bm25"))
    resparsify(idx, loaded=tiny_model, doc_k=12)
    calibrate_index(idx, pruned, loaded=tiny_model)
