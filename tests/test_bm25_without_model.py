"""A BM25 search loads no model and imports no torch: the query encoder loads on the first
query that needs it, and then searches as an eagerly opened searcher does. An index of the BM25
leg alone (``legs=["bm25"]``, ``build-index --legs bm25``) is built, grown (``alignir add``) and
searched without a model either, and ranks as the BM25 leg of a full index."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import add_documents, build_index
from alignir.retrieval.searcher import Searcher

from conftest import TINY_CORPUS, write_corpus

HEAVY = '{m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "peft"}'

QUERIES = ["light plants", "stock market rates"]

SCRIPT = """
import json, sys
from alignir.retrieval.searcher import Searcher
s = Searcher.open(sys.argv[1])
hits = [[(h.id, h.score) for h in s.search(q, k=3, mode="bm25")] for q in json.loads(sys.argv[2])]
heavy = sorted(HEAVY)
print(json.dumps({"hits": hits, "heavy": heavy, "loaded": s.embedder._encoder.loaded}))
""".replace("HEAVY", HEAVY)

BUILD = """
import json, sys
from alignir.retrieval.indexer import build_index
from alignir.retrieval.searcher import Searcher
build_index(sys.argv[1], sys.argv[2], legs=["bm25"], progress=False)
s = Searcher.open(sys.argv[2])
hits = [[(h.id, h.score) for h in s.search(q, k=3, mode="bm25")] for q in json.loads(sys.argv[3])]
print(json.dumps({"hits": hits, "heavy": sorted(HEAVY)}))
""".replace("HEAVY", HEAVY)

CLI = """
import json, sys
from alignir.retrieval.cli import app
corpus, more, index, queries = sys.argv[1:]
app(["build-index", corpus, "--index", index, "--legs", "bm25"], standalone_mode=False)
app(["add", more, "--index", index], standalone_mode=False)
app(["search", json.loads(queries)[0], "--index", index, "--mode", "bm25"], standalone_mode=False)
from alignir.retrieval.searcher import Searcher
s = Searcher.open(index)
hits = [[(h.id, h.score) for h in s.search(q, k=3, mode="bm25")] for q in json.loads(queries)]
print(json.dumps({"hits": hits, "heavy": sorted(HEAVY)}))
""".replace("HEAVY", HEAVY)

TINY_CORPUS_RECORDS = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(TINY_CORPUS)]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_folder):
    root = tmp_path_factory.mktemp("bm25-only")
    build_index(write_corpus(root / "corpus.jsonl", TINY_CORPUS), root / "idx", model=str(tiny_folder),
                sparse=SparseConfig(doc_k=24, query_m=5), use_cache=False, progress=False, device="cpu")
    return root / "idx"


def _run(script: str, *args) -> dict:
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], check=True, capture_output=True,
                         text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bm25_hits(index) -> list:
    with Searcher.open(index, device="cpu") as s:
        return [[[h.id, h.score] for h in s.search(q, k=3, mode="bm25")] for q in QUERIES]


@pytest.mark.e2e  # a child Python process
def test_a_bm25_search_imports_no_torch_and_loads_no_model(built):
    got = _run(SCRIPT, built, json.dumps(QUERIES))
    assert got["heavy"] == [] and got["loaded"] is False
    with Searcher.open(built, device="cpu") as s:
        want = [[[h.id, h.score] for h in s.search(q, k=3, mode="bm25")] for q in QUERIES]
    assert got["hits"] == want and all(want)


def test_the_model_loads_on_the_first_query_that_needs_it(built, tiny_folder):
    lazy = Searcher.open(built, device="cpu")
    lazy.batch_search(QUERIES, mode="bm25")
    assert not lazy.embedder._encoder.loaded
    eager = Searcher.open(built, model=str(tiny_folder), device="cpu")  # a given model is checked at open
    assert eager.embedder._encoder.loaded
    for mode in ("hybrid", "dense+sparse+bm25"):
        got = [[(h.id, h.score) for h in hits] for hits in lazy.batch_search(QUERIES, mode=mode)]
        assert got == [[(h.id, h.score) for h in hits] for hits in eager.batch_search(QUERIES, mode=mode)]
    assert lazy.embedder._encoder.loaded


@pytest.mark.e2e  # a child Python process
def test_a_bm25_only_build_imports_no_torch_and_ranks_as_the_full_index_s_bm25_leg(built, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    got = _run(BUILD, corpus, tmp_path / "idx", json.dumps(QUERIES))
    assert got["heavy"] == []
    assert got["hits"] == _bm25_hits(built) and all(got["hits"])


@pytest.mark.e2e  # a child Python process
def test_the_cli_builds_grows_and_searches_a_bm25_index_without_a_model(tmp_path):
    first = write_corpus(tmp_path / "first.jsonl", TINY_CORPUS[:4])
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TINY_CORPUS)
                            if i >= 4), encoding="utf-8")
    got = _run(CLI, first, more, tmp_path / "grown", json.dumps(QUERIES))
    assert got["heavy"] == []
    build_index(TINY_CORPUS_RECORDS, tmp_path / "whole", legs="bm25", progress=False)
    assert got["hits"] == _bm25_hits(tmp_path / "whole") and all(got["hits"])


def test_add_and_delete_on_a_bm25_index_rank_as_its_rebuild(tmp_path):
    from alignir.retrieval.indexer import delete_documents

    build_index(TINY_CORPUS_RECORDS[:4], tmp_path / "grown", legs=["bm25"], store_text=True, progress=False)
    delete_documents(tmp_path / "grown", ["d1"])
    manifest = add_documents(tmp_path / "grown", TINY_CORPUS_RECORDS[4:], progress=False)
    assert manifest["build"]["added"][-1]["purged_deleted"] == 1 and set(manifest["parts"]) == {"lexical", "texts"}
    kept = [r for r in TINY_CORPUS_RECORDS if r["_id"] != "d1"]
    build_index(kept, tmp_path / "rebuilt", legs=["bm25"], progress=False)
    with Searcher.open(tmp_path / "grown") as a, Searcher.open(tmp_path / "rebuilt") as b:
        assert a.index.doc_ids == b.index.doc_ids == [r["_id"] for r in kept]
        assert a.doc("d5") == {**TINY_CORPUS_RECORDS[5]}  # texts kept (store_text): an add needs them
    assert _bm25_hits(tmp_path / "grown") == _bm25_hits(tmp_path / "rebuilt")
