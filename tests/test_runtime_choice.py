"""Which runtime runs an encoder's transformer (encoders.onnx_runtime.apply_runtime): "auto"
takes ONNX Runtime fp32 where it applies and torch elsewhere, an export that fails falls back to
torch and is remembered, "onnx" says why it cannot; the product surfaces (Encoder, build_index,
Searcher, the CLI) pass the choice through and get the same rankings either way."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from conftest import TINY_CORPUS, needs_onnx, share_onnx_exports, write_corpus
from typer.testing import CliRunner

from alignir.encoders import onnx_runtime
from alignir.encoders.embedders import get_embedder
from alignir.encoders.onnx_runtime import FAILED_NOTE, apply_runtime, onnx_unavailable, runtime_of
from alignir.errors import InvalidInputError

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_onnx()]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-choice")


def _emb(model, **kw):
    return get_embedder("prompteol", model, progress=False, **kw)


@pytest.fixture(scope="module")
def exported(tiny_model, root):
    """The tiny model put on ONNX by "auto" into the module's fresh ``root`` (its one export),
    and what ``apply_runtime`` said meanwhile; the module's other tests reuse that export."""
    heard: list[str] = []
    return apply_runtime(_emb(tiny_model), "auto", root=root, on_export=heard.append), heard


def test_auto_takes_onnx_where_it_applies(tiny_model, root, exported, monkeypatch):
    monkeypatch.delenv("ALIGNIR_RUNTIME", raising=False)
    ref = _emb(tiny_model)
    emb = apply_runtime(_emb(tiny_model), None, root=root)
    assert runtime_of(emb) == "onnx" and runtime_of(ref) == "torch"
    np.testing.assert_allclose(emb.encode_documents(TINY_CORPUS), ref.encode_documents(TINY_CORPUS),
                               rtol=1e-4, atol=1e-4)
    assert emb.fingerprint() == ref.fingerprint()
    assert apply_runtime(emb, "onnx", root=root) is emb  # already there: unchanged


def test_the_one_off_export_is_announced(tiny_model, root, exported):
    emb, heard = exported
    assert runtime_of(emb) == "onnx"
    assert len(heard) == 1 and "exporting the model to ONNX once" in heard[0] and str(root) in heard[0]
    apply_runtime(_emb(tiny_model), "auto", root=root, on_export=heard.append)
    assert len(heard) == 1  # cached: nothing to say


def test_torch_when_asked_or_from_the_environment(tiny_model, root, monkeypatch):
    assert runtime_of(apply_runtime(_emb(tiny_model), "torch", root=root)) == "torch"
    monkeypatch.setenv("ALIGNIR_RUNTIME", "torch")
    assert runtime_of(apply_runtime(_emb(tiny_model), None, root=root)) == "torch"


def test_where_onnx_does_not_apply(tiny_model, root, monkeypatch):
    int8 = _emb(tiny_model, precision="int8")
    assert "precision int8" in onnx_unavailable(int8)
    assert runtime_of(apply_runtime(int8, "auto", root=root)) == "torch"
    with pytest.raises(InvalidInputError, match="runtime onnx: precision int8"):
        apply_runtime(int8, "onnx", root=root)
    # the packages: auto quietly stays on torch, onnx names what is missing
    real = onnx_runtime.importlib.util.find_spec
    monkeypatch.setattr(onnx_runtime.importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxscript" else real(name, *a))
    assert runtime_of(apply_runtime(_emb(tiny_model), "auto", root=root)) == "torch"
    with pytest.raises(InvalidInputError, match="onnxscript not installed"):
        apply_runtime(_emb(tiny_model), "onnx", root=root)
    monkeypatch.undo()
    # a backbone over one ONNX file's limit
    monkeypatch.setattr(onnx_runtime, "MAX_EXPORT_BYTES", 1000)
    assert "exceed one ONNX file" in onnx_unavailable(_emb(tiny_model))


def test_bidirectional_embedders_stay_on_torch(tiny_model):
    emb = _emb(tiny_model)
    emb.bidirectional = True  # as the pretrained family sets it for LLM2Vec / GritLM
    assert "bidirectionally" in onnx_unavailable(emb)


def test_a_failed_export_falls_back_to_torch_and_is_remembered(tiny_model, tmp_path, monkeypatch, caplog):
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(onnx_runtime, "_export", broken)
    ref = _emb(tiny_model).encode_queries(TINY_CORPUS)
    with caplog.at_level(logging.WARNING, logger="alignir.encoders.onnx_runtime"):
        emb = apply_runtime(_emb(tiny_model), "auto", root=tmp_path)
    assert runtime_of(emb) == "torch" and calls == [1]
    assert "ONNX export failed" in caplog.text and "unsupported operator" in caplog.text
    np.testing.assert_array_equal(emb.encode_queries(TINY_CORPUS), ref)  # untouched: prefix cache and all
    note = json.loads(next(tmp_path.glob(f"*/{FAILED_NOTE}")).read_text())
    assert "unsupported operator" in note["error"]
    assert runtime_of(apply_runtime(_emb(tiny_model), "auto", root=tmp_path)) == "torch" and calls == [1]
    with pytest.raises(RuntimeError, match="unsupported operator"):  # asked for by name: tried, and it fails
        apply_runtime(_emb(tiny_model), "onnx", root=tmp_path)


def test_index_and_search_on_either_runtime_rank_alike(tiny_model, root, exported, tmp_path, monkeypatch):
    from alignir.retrieval.encoder import Encoder
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    monkeypatch.setenv("ALIGNIR_CACHE", str(share_onnx_exports(tmp_path / "cache", root)))  # the module's export
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    got = {}
    for runtime in ("torch", "onnx"):
        manifest = build_index(corpus, tmp_path / runtime, model="tiny", loaded=tiny_model, progress=False,
                               runtime=runtime, use_cache=False)
        assert manifest["build"]["runtime"] == runtime
        s = Searcher.open(tmp_path / runtime, loaded=tiny_model, runtime=runtime)
        got[runtime] = [[(h.id, h.score) for h in s.search(q, k=5, mode=m)]
                        for q in TINY_CORPUS[:4] for m in ("dense", "sparse", "hybrid")]
        assert Encoder.from_index(tmp_path / runtime, loaded=tiny_model, runtime=runtime).runtime == runtime
    for a, b in zip(got["torch"], got["onnx"]):
        assert [d for d, _ in a] == [d for d, _ in b]
        np.testing.assert_allclose([x for _, x in a], [x for _, x in b], rtol=1e-3, atol=1e-4)
    with pytest.raises(InvalidInputError, match="unknown runtime"):
        Searcher.open(tmp_path / "torch", loaded=tiny_model, runtime="tensorrt")


def test_cli_runtime_flag_is_checked_before_the_model_loads(tmp_path):
    from alignir.retrieval.cli import app

    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    for argv in (["build-index", str(corpus), "--index", str(tmp_path / "i"), "--model", "/nonexistent/model",
                  "--runtime", "tensorrt"],
                 ["encode", str(corpus), "--model", "/nonexistent/model", "--runtime", "tensorrt"]):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 1 and "unknown runtime 'tensorrt'" in res.output, res.output


@pytest.mark.e2e  # indexes built through the CLI, the model exported into a fresh cache
def test_cli_builds_on_the_runtime_asked_for_and_info_says_so(tmp_path, tiny_folder, monkeypatch):
    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    runner = CliRunner()
    for runtime in ("torch", "onnx"):
        idx = tmp_path / f"idx-{runtime}"
        res = runner.invoke(app, ["build-index", str(corpus), "--index", str(idx), "--model", str(tiny_folder),
                                  "--runtime", runtime])
        assert res.exit_code == 0, res.output
        assert f"encoder runtime: {runtime}" in res.output
        # a fresh cache: the onnx build exports the model first, and says so as a stage
        assert ("exporting the model to ONNX once" in res.output) == (runtime == "onnx")
        assert f"encoded on {runtime}" in runner.invoke(app, ["info", "--index", str(idx)]).output
        res = runner.invoke(app, ["search", TINY_CORPUS[0], "--index", str(idx), "--runtime", runtime, "--json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["hits"], res.output
