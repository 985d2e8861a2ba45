"""An index built with some of the legs (``build_index(legs=)``, ``build-index --legs``): a search
asking for a leg it lacks is an error naming the legs it has; what needs a model is refused on an
index built without one; an index without the sparse leg searches and grows with the legs it has,
each ranking as the same leg of a full index, and a re-sparsify gives it the sparse leg."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from alignir.errors import InvalidInputError
from alignir.index.store import open_index, read_manifest
from alignir.retrieval.cli import app
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.encoder import Encoder
from alignir.retrieval.indexer import add_documents, build_index, calibrate_index, resparsify
from alignir.retrieval.searcher import Searcher, modes_for

from conftest import TINY_CORPUS

RECORDS = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(TINY_CORPUS)]
QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel", "proteins fold"]
SPARSE = SparseConfig(doc_k=24, query_m=5)
runner = CliRunner()


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("legs") / "bm25"
    build_index(RECORDS, path, legs="bm25", progress=False)
    return path


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse+bm25", "dense+sparse+bm25"])
def test_a_mode_needing_a_missing_leg_names_the_legs_the_index_has(bm25_index, mode):
    with Searcher.open(bm25_index) as s:
        with pytest.raises(InvalidInputError, match=r"built without the (dense|sparse) leg .*its legs: bm25$"):
            s.search("plants", mode=mode)
        assert s.search("plants", mode="bm25")[0].id == "d0"
    assert modes_for(open_index(bm25_index)) == ("bm25",)


@pytest.mark.parametrize("legs", [[], ["bm25", "bm25"], "colbert", ["dense", 3], "dense,,bm25"])
def test_bad_legs_are_refused_before_any_work(tmp_path, legs):
    with pytest.raises(InvalidInputError, match="legs must name each of dense, sparse, bm25"):
        build_index(RECORDS, tmp_path / "idx", legs=legs, progress=False)
    assert not (tmp_path / "idx").exists()


def test_legs_with_bm25_contradict_no_lexical_part(tmp_path):
    with pytest.raises(InvalidInputError, match="include bm25 but lexical=False asks for no BM25 part"):
        build_index(RECORDS, tmp_path / "idx", legs=["bm25"], lexical=False, progress=False)


def test_what_needs_a_model_is_refused_on_an_index_built_without_one(bm25_index, tmp_path):
    with pytest.raises(InvalidInputError, match="built without a model .its legs: bm25.: it has no encoder"):
        Encoder.from_index(bm25_index)
    with pytest.raises(InvalidInputError, match="built without a model .its legs: bm25."):
        resparsify(bm25_index, doc_k=8)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    assert calibrate_index(bm25_index, corpus) is None  # one leg: nothing to calibrate, no model


def test_the_cli_takes_legs_and_names_them(tmp_path, bm25_index):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    for legs, said in ((["--legs", "sparse,colbert"], "legs must name"),
                       (["--legs", "bm25", "--no-lexical"], "include bm25 but lexical=False")):
        r = runner.invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx"), *legs])
        assert r.exit_code == 1 and said in r.output and "Traceback" not in r.output
    assert not (tmp_path / "idx").exists()
    r = runner.invoke(app, ["info", "--index", str(bm25_index)])
    assert r.exit_code == 0 and "legs       bm25\n" in r.output and "built without one" in r.output
    r = runner.invoke(app, ["search", "plants", "--index", str(bm25_index)])  # the default mode: hybrid
    assert r.exit_code == 1 and "built without the dense leg (build-index --legs); its legs: bm25" in r.output


def _hits(path, tiny_model, mode: str, **kw) -> list:
    with Searcher.open(path, loaded=tiny_model, device="cpu") as s:
        return [[(h.id, h.score) for h in hits] for hits in s.batch_search(QUERIES, k=5, mode=mode, **kw)]


def test_an_index_without_the_sparse_leg(tmp_path, tiny_model):
    opts = dict(model="tiny", sparse=SPARSE, loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False,
                device="cpu", store_text=True)
    build_index(RECORDS, tmp_path / "full", **opts)
    build_index(RECORDS[:4], tmp_path / "part", legs=["dense", "bm25"], **opts)
    add_documents(tmp_path / "part", RECORDS[4:], loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    part = open_index(tmp_path / "part")
    assert set(part.parts) == {"dense", "lexical", "texts"} and part.doc_ids == [r["_id"] for r in RECORDS]
    assert modes_for(part) == ("dense", "bm25", "dense+bm25")
    for mode, kw in (("dense", {}), ("bm25", {}), ("dense+bm25", {"fusion": "zscore"})):
        assert _hits(tmp_path / "part", tiny_model, mode, **kw) == _hits(tmp_path / "full", tiny_model, mode, **kw)
    with pytest.raises(InvalidInputError, match="built without the sparse leg .*its legs: dense, bm25$"):
        _hits(tmp_path / "part", tiny_model, "sparse")
    resparsify(tmp_path / "part", loaded=tiny_model)  # the stored vectors give it the sparse leg
    assert "sparse" in read_manifest(tmp_path / "part")["parts"]
    assert _hits(tmp_path / "part", tiny_model, "sparse") == _hits(tmp_path / "full", tiny_model, "sparse")
