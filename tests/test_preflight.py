"""Every option checkable without the model is checked before any model load: a bad fusion,
alpha, weights, mode or precision, and a manifest whose model is not the one its fingerprint
records. `alignir info` shows live and deleted documents."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from alignir.errors import InvalidInputError
from alignir.index import manifest_io
from alignir.errors import CorruptIndexError
from alignir.retrieval.cli import app
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index, delete_documents
from alignir.retrieval.preflight import check_adapter_base, check_manifest_model
from alignir.retrieval.searcher import check_search_options

from conftest import TINY_CORPUS, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def idx(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("preflight")
    corpus = write_corpus(root / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, root / "idx", model="tiny", sparse=SparseConfig().with_changes(doc_k=16, query_m=4),
                loaded=tiny_model, cache_dir=root / "cache", progress=False)
    return root / "idx"


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if a model is loaded (the options must be refused before)."""
    import alignir.encoders.models as models

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(models, "load_model", refuse)


@pytest.mark.parametrize("opts,match", [
    (["--fusion", "bogus"], "fusion method must be one of"),
    (["--alpha", "2"], "alpha"),
    (["--mode", "dense+bogus"], "bogus"),
    (["--mode", "dense+sparse", "--weights", "dense=1"], "missing"),
    (["--precision", "int4"], "unknown precision"),
    (["--mode", "dense+sparse", "--fusion", "calibrated"], "bm25"),
    (["--passage-agg", "best"], "best"),
])
def test_cli_search_refuses_bad_options_before_loading_the_model(idx, no_model_load, opts, match):
    r = CliRunner().invoke(app, ["search", "plants", "--index", str(idx), *opts])
    assert r.exit_code == 1, r.output
    assert match in r.output and "Traceback" not in r.output


def test_cli_eval_refuses_a_bad_fusion_before_loading_the_model(idx, no_model_load, tmp_path):
    r = CliRunner().invoke(app, ["eval", "--index", str(idx), "--dataset", str(tmp_path), "--fusion", "bogus"])
    assert r.exit_code == 1 and "fusion method must be one of" in r.output, r.output


def test_check_search_options_accepts_what_search_accepts():
    assert check_search_options("dense+sparse+bm25", fusion="calibrated",
                                weights={"dense": 1, "sparse": 1, "bm25": 2}) == ("dense", "sparse", "bm25")
    assert check_search_options("hybrid", alpha=0.3, precision="int8", passage_agg="sum2") == ("dense", "sparse")
    with pytest.raises(InvalidInputError):
        check_search_options("dense+sparse", weights={"dense": -1, "sparse": 1})


def test_a_resealed_manifest_naming_another_registered_model_is_refused_before_loading(idx, tmp_path, no_model_load):
    """A manifest whose embedder.model was changed to another registered model (and resealed)
    is refused before that model is loaded or converted."""
    import shutil

    from alignir.retrieval.searcher import Searcher

    case = shutil.copytree(idx, tmp_path / "case")
    m = json.loads((case / "manifest.json").read_text())
    m["encoder"]["model"]["name"] = "smollm2-135m"
    m["embedder"]["model"] = "gemma3-270m"
    (case / "manifest.json").write_text(json.dumps(manifest_io.seal_manifest(m)))
    searcher = Searcher.open(case, verify=False)  # the model loads lazily: the check runs before it does
    with pytest.raises(CorruptIndexError, match="'gemma3-270m' is another model"):
        searcher.search("indexing", mode="dense")
    with pytest.raises(InvalidInputError, match="--model 'gemma3-270m' is another model"):
        check_manifest_model(m["encoder"], {"model": "smollm2-135m"}, "gemma3-270m")
    check_manifest_model(m["encoder"], {"model": "smollm2-135m"})  # the recorded model itself passes


def test_info_shows_live_and_deleted_documents(idx, tmp_path):
    import shutil

    case = shutil.copytree(idx, tmp_path / "del")
    delete_documents(case, ["d0", "d3"])
    r = CliRunner().invoke(app, ["info", "--index", str(case)])
    assert r.exit_code == 0, r.output
    n = len(TINY_CORPUS)
    assert f"documents  {n} ({n - 2} live, 2 deleted)" in r.output


def test_an_adapter_trained_on_another_registered_model_is_refused_before_loading(no_model_load):
    """The shipped adapters record their base (smollm2-135m): naming gemma3-270m with one is
    refused before the GGUF is converted (it took minutes, then failed on the adapter)."""
    spec = {"model": "gemma3-270m", "options": {"adapter": "builtin:smollm2-135m-alignir-v3"}}
    with pytest.raises(CorruptIndexError, match="trained on 'smollm2-135m'"):
        check_adapter_base(spec)
    with pytest.raises(InvalidInputError, match="--model 'gemma3-270m'"):
        check_adapter_base({**spec, "model": "smollm2-135m"}, "gemma3-270m")
    check_adapter_base({**spec, "model": "smollm2-135m"})
    check_adapter_base({"model": "gemma3-270m", "options": {}})
