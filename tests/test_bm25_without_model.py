"""A BM25 search loads no model and imports no torch: the query encoder loads on the first
query that needs it, and then searches as an eagerly opened searcher does."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index
from alignir.retrieval.searcher import Searcher

from conftest import TINY_CORPUS, write_corpus

QUERIES = ["light plants", "stock market rates"]

SCRIPT = """
import json, sys
from alignir.retrieval.searcher import Searcher
s = Searcher.open(sys.argv[1])
hits = [[(h.id, h.score) for h in s.search(q, k=3, mode="bm25")] for q in json.loads(sys.argv[2])]
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "peft"})
print(json.dumps({"hits": hits, "heavy": heavy, "loaded": s.embedder._encoder.loaded}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_folder):
    root = tmp_path_factory.mktemp("bm25-only")
    build_index(write_corpus(root / "corpus.jsonl", TINY_CORPUS), root / "idx", model=str(tiny_folder),
                sparse=SparseConfig(doc_k=24, query_m=5), use_cache=False, progress=False, device="cpu")
    return root / "idx"


def test_a_bm25_search_imports_no_torch_and_loads_no_model(built):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(built), json.dumps(QUERIES)], check=True,
                         capture_output=True, text=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
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
