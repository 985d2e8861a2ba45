"""Weight-space interpolation of two LoRA adapters: the written rank r₀ + r₁ adapter's merged
weights equal (1 − w)·ΔW₀ + w·ΔW₁ on the base model, computed here by merging each source alone."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from alignir.encoders.embedders.adapters import training_cost
from alignir.encoders.train.interpolate import interpolate_adapters
from alignir.errors import InvalidInputError
from tests.conftest import TINY_CORPUS

META = {"method": "infonce", "embedder": "infonce", "hp": {}, "steps": 7, "examples_seen": 56,
        "train_cpu_seconds": 3.0, "config": {"batch_size": 8, "init_adapter": None}}


def _random_lora(model, folder, seed: int, r: int, alpha: int, extra=None, **meta):
    from alignir.encoders.train.adapter import add_lora, save_adapter

    torch.manual_seed(seed)
    pm = add_lora(copy.deepcopy(model.model), r=r, alpha=alpha)
    for n, p in pm.named_parameters():
        if "lora_" in n:
            torch.nn.init.normal_(p, std=0.2)
    return save_adapter(pm, folder, extra, {**META, **meta})


def _merged(model, adapter) -> dict[str, torch.Tensor]:
    from peft import PeftModel

    pm = PeftModel.from_pretrained(copy.deepcopy(model.model), str(adapter))
    return {k: v.detach().clone() for k, v in pm.merge_and_unload().state_dict().items()}


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_the_interpolated_adapter_merges_to_the_weighted_updates(tiny_model, tmp_path, weight):
    start = _random_lora(tiny_model, tmp_path / "start", seed=1, r=4, alpha=8)
    end = _random_lora(tiny_model, tmp_path / "end", seed=2, r=2, alpha=6)  # other rank and scale
    out = interpolate_adapters(start, end, weight, tmp_path / "mix")
    base = {k: v.detach() for k, v in tiny_model.model.state_dict().items()}
    ws, we, wm = _merged(tiny_model, start), _merged(tiny_model, end), _merged(tiny_model, out)
    assert set(wm) == set(base)
    changed = 0
    for k, w0 in base.items():
        want = w0 + (1 - weight) * (ws[k] - w0) + weight * (we[k] - w0)
        torch.testing.assert_close(wm[k], want, rtol=0, atol=1e-5)
        changed += bool((ws[k] - w0).abs().max() > 1e-3)
    assert changed > 0  # the sources do change the model
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 6 and cfg["lora_alpha"] == 6


def test_the_interpolated_adapter_encodes_between_its_sources(tiny_model, tmp_path):
    from alignir.encoders.embedders import get_embedder

    start = _random_lora(tiny_model, tmp_path / "start", seed=1, r=4, alpha=8)
    end = _random_lora(tiny_model, tmp_path / "end", seed=2, r=4, alpha=8)
    at0 = interpolate_adapters(start, end, 0.0, tmp_path / "w0")
    half = interpolate_adapters(start, end, 0.5, tmp_path / "w5")

    def encode(adapter):
        return get_embedder("infonce", tiny_model, progress=False, adapter=str(adapter)).encode_documents(TINY_CORPUS)

    np.testing.assert_allclose(encode(at0), encode(start), atol=2e-5)
    mid, a, b = encode(half), encode(start), encode(end)
    assert np.abs(mid - a).max() > 1e-3 and np.abs(mid - b).max() > 1e-3


def test_record_names_both_sources_and_the_cost_follows_the_end(tiny_model, tmp_path):
    start = _random_lora(tiny_model, tmp_path / "start", seed=1, r=4, alpha=8)
    end = _random_lora(tiny_model, tmp_path / "end", seed=2, r=4, alpha=8,
                       config={"batch_size": 8, "init_adapter": str(tmp_path / "start")})
    out = interpolate_adapters(start, end, 0.25, tmp_path / "mix")
    meta = json.loads((out / "alignir_train.json").read_text())
    assert meta["stage"] == "interpolation" and meta["interpolation"]["weight"] == 0.25
    assert meta["interpolation"]["start"]["adapter"] == str(start)
    assert len(meta["interpolation"]["end"]["sha256"]) == 64
    cost = training_cost(out)
    assert [s["stage"] for s in cost["stages"]][-1] == "interpolation"
    assert cost["steps"] == 14 and cost["examples_seen"] == 112  # start's 7 + end's 7, none of its own


def test_soft_token_extras_are_interpolated(tiny_model, tmp_path):
    from safetensors.torch import load_file

    start = _random_lora(tiny_model, tmp_path / "start", seed=1, r=4, alpha=8, extra={"mem": torch.zeros(2, 3)})
    end = _random_lora(tiny_model, tmp_path / "end", seed=2, r=4, alpha=8, extra={"mem": torch.ones(2, 3)})
    out = interpolate_adapters(start, end, 0.25, tmp_path / "mix")
    torch.testing.assert_close(load_file(str(out / "alignir_extra.safetensors"))["mem"], torch.full((2, 3), 0.25))


def test_mismatched_or_bad_inputs_are_named(tiny_model, tmp_path):
    start = _random_lora(tiny_model, tmp_path / "start", seed=1, r=4, alpha=8)
    other = _random_lora(tiny_model, tmp_path / "other", seed=2, r=4, alpha=8, embedder="gircse")
    with pytest.raises(InvalidInputError, match="'embedder'"):
        interpolate_adapters(start, other, 0.5, tmp_path / "x")
    asks = _random_lora(tiny_model, tmp_path / "asks", seed=2, r=4, alpha=8, hp={"instruction": "Find the claim"})
    with pytest.raises(InvalidInputError, match="query instructions"):
        interpolate_adapters(start, asks, 0.5, tmp_path / "v")
    with pytest.raises(InvalidInputError, match=r"in \[0, 1\]"):
        interpolate_adapters(start, start, 1.5, tmp_path / "y")
    with pytest.raises(InvalidInputError, match="not a peft adapter"):
        interpolate_adapters(start, tmp_path / "missing", 0.5, tmp_path / "z")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(InvalidInputError, match="not empty"):
        interpolate_adapters(start, start, 0.5, tmp_path / "full")
    extra = _random_lora(tiny_model, tmp_path / "extra", seed=3, r=4, alpha=8, extra={"mem": torch.ones(1, 3)})
    with pytest.raises(InvalidInputError, match="soft-token"):
        interpolate_adapters(start, extra, 0.5, tmp_path / "w")
