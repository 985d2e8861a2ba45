"""The trained adapter that ships in the package (issue 19): a registered name usable by every
command with no training step, recorded in the index so the searcher rebuilds the same encoder."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from alignir.encoders.shipped import SHIPPED, adapter_dir, resolve_adapter, resolve_shipped
from alignir.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ALIGNIR_SHARED", ROOT.parent / "shared"))
NAME = "smollm2-135m-alignir"


def test_the_shipped_name_resolves_to_base_model_family_and_adapter():
    assert resolve_shipped(NAME, "prompteol", {"max_length": 64}) == (
        "smollm2-135m", "infonce", {"max_length": 64, "adapter": f"builtin:{NAME}"})
    assert resolve_shipped("smollm2-135m", "mean", None) == ("smollm2-135m", "mean", {})
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


@pytest.mark.slow
def test_the_shipped_model_reproduces_its_recorded_adi_ndcg(tmp_path, monkeypatch):
    """`alignir beir adi --model smollm2-135m-alignir` gives the nDCG@10 recorded in
    benchmarks/results/training.json (run adi/smollm2-135m-alignir)."""
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    adi = SHARED / "datasets" / "adi"
    if not adi.is_dir():
        pytest.skip(f"{adi} not found")
    runs = json.loads((ROOT / "benchmarks/results/training.json").read_text())["runs"]
    recorded = runs["adi/smollm2-135m-alignir"]
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(app, ["beir", str(adi), "--model", NAME, "--index", str(tmp_path / "adi"), "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["metrics"]
    for mode, key in (("dense", "ndcg@10_dense"), ("sparse", "ndcg@10_sparse"), ("hybrid", "ndcg@10_hybrid"),
                      ("dense+sparse+bm25", "ndcg@10_dense+sparse+bm25")):
        assert got[mode]["ndcg@10"] == pytest.approx(recorded[key], abs=1e-4), mode
