"""The trained adapter that ships in the package: a registered name usable by every
command with no training step, recorded in the index so the searcher rebuilds the same encoder."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from alignir.encoders.shipped import (SHIPPED, adapter_dir, hybrid_fusion, leg_set_fusion, resolve_adapter,
                                      resolve_shipped)
from alignir.errors import InvalidInputError
from conftest import ADI, share_model_cache

ROOT = Path(__file__).resolve().parents[1]
NAME = "smollm2-135m-alignir"


def test_the_shipped_name_resolves_to_base_model_family_and_adapter():
    assert resolve_shipped(NAME, "prompteol", {"max_length": 64}) == (
        "smollm2-135m", "infonce", {"max_length": 64, "text_form": "auto", "adapter": f"builtin:{NAME}"})
    assert resolve_shipped("smollm2-135m", "mean", None) == ("smollm2-135m", "mean", {"text_form": "auto"})
    with pytest.raises(InvalidInputError, match="leave --embedder unset"):
        resolve_shipped(NAME, "gircse", {})
    with pytest.raises(InvalidInputError, match="brings its own adapter"):
        resolve_shipped(NAME, "prompteol", {"adapter": "/some/where"})
    assert resolve_adapter(f"builtin:{NAME}") == adapter_dir(NAME)
    with pytest.raises(InvalidInputError):
        adapter_dir("no-such-adapter")


def test_every_shipped_adapter_is_a_small_fp16_peft_folder():
    from safetensors import safe_open

    for name in SHIPPED:
        d = adapter_dir(name)
        assert json.loads((d / "adapter_config.json").read_text())["peft_type"] == "LORA"
        with safe_open(str(d / "adapter_model.safetensors"), "pt") as f:
            assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float16"}
        assert (d / "adapter_model.safetensors").stat().st_size < 12 * 2**20


@pytest.mark.model
def test_the_shipped_adapter_changes_the_encoder(smollm2):
    from alignir.encoders.embedders import get_embedder

    texts = ["aspirin lowers the risk of heart attack", "supersonic flow over a wedge"]
    plain = get_embedder("prompteol", smollm2, max_length=64, progress=False)
    trained = get_embedder("infonce", smollm2, max_length=64, progress=False, adapter=f"builtin:{NAME}")
    a, b = plain.encode_documents(texts), trained.encode_documents(texts)
    assert a.shape == b.shape and not np.allclose(a, b)
    assert trained.fingerprint()["adapter_sha256"] and trained.fingerprint() != plain.fingerprint()
    again = get_embedder("infonce", smollm2, max_length=64, progress=False, adapter=f"builtin:{NAME}")
    np.testing.assert_array_equal(again.encode_documents(texts), b)


@pytest.mark.model
def test_an_index_of_the_shipped_model_gets_its_hybrid_fusion(smollm2, tmp_path):
    """The shipped model's registry entry brings its "hybrid" fusion (z-score, α 0.7 on dense)
    and, for v3, its three-leg defaults;
    an explicit IndexConfig keeps its own; a plain model keeps FusionConfig's default."""
    from alignir.retrieval import fusion as F
    from alignir.retrieval.config import FusionConfig, IndexConfig
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher
    from conftest import write_corpus

    assert hybrid_fusion(NAME) == ("zscore", 0.7) and hybrid_fusion("smollm2-135m") is None
    corpus = write_corpus(tmp_path / "c.jsonl", ["aspirin lowers the risk of heart attack",
                                                 "supersonic flow over a wedge", "heart valves and blood flow",
                                                 "wing lift at low speed", "statins lower cholesterol"])
    kw = dict(loaded=smollm2, cache_dir=tmp_path / "cache", progress=False, embedder_options={"max_length": 32},
              calibrate=False)
    m = build_index(corpus, tmp_path / "shipped", model=NAME, **kw)
    assert m["params"]["config"]["fusion"] == FusionConfig(method="zscore", alpha=0.7).to_dict()
    s = Searcher.open(tmp_path / "shipped", loaded=smollm2)
    q = ["blood flow in the heart"]
    lists = s.leg_lists(q, ("dense", "sparse"), k=s.index.n_docs)
    want = F.ranked(F.zscore([lists["dense"][0], lists["sparse"][0]], weights=[0.7, 0.3]))
    got = [(h.doc_number, h.score) for h in s.search(q[0], k=5, mode="hybrid")]
    assert [d for d, _ in got] == [d for d, _ in want] and [x for _, x in got] == pytest.approx([x for _, x in want])
    m = build_index(corpus, tmp_path / "explicit", model=NAME, config=IndexConfig(), **kw)
    assert m["params"]["config"]["fusion"] == FusionConfig().to_dict()
    # v3 also brings its own three-leg defaults (FusionConfig.leg_sets), stored with the index
    v3 = "smollm2-135m-alignir-v3"
    assert leg_set_fusion(v3) == dict(SHIPPED[v3].leg_sets) and leg_set_fusion(NAME) == {}
    m = build_index(corpus, tmp_path / "v3", model=v3, **kw)
    assert m["params"]["config"]["fusion"] == FusionConfig(method="zscore", alpha=0.7,
                                                           leg_sets=SHIPPED[v3].leg_sets).to_dict()
    assert Searcher.open(tmp_path / "v3", loaded=smollm2).fusion.leg_set(("dense", "sparse", "bm25")) == (
        {"dense": 0.25, "sparse": 0.25, "bm25": 0.5}, 2.0)
    m = build_index(corpus, tmp_path / "plain", model="smollm2-135m", **kw)
    assert m["params"]["config"]["fusion"] == FusionConfig().to_dict()


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_shipped_model_reproduces_its_recorded_adi_ndcg(name, tmp_path, monkeypatch):
    """`alignir beir adi --model NAME` gives the nDCG@10 recorded in
    benchmarks/results/training.json (run adi/NAME), for every shipped model."""
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found")
    runs = json.loads((ROOT / "benchmarks/results/training.json").read_text())["runs"]
    recorded = runs[f"adi/{name}"]
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    r = CliRunner().invoke(app, ["beir", str(ADI), "--model", name, "--index", str(tmp_path / "adi"), "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["metrics"]
    for mode, key in (("dense", "ndcg@10_dense"), ("sparse", "ndcg@10_sparse"), ("hybrid", "ndcg@10_hybrid"),
                      ("dense+sparse+bm25", "ndcg@10_dense+sparse+bm25")):
        assert got[mode]["ndcg@10"] == pytest.approx(recorded[key], abs=1e-4), mode
