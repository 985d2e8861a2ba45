"""An adapter's training cost (steps, examples seen, CPU-seconds) summed over its stage chain,
read from the alignir_train.json each stage saved; and its use by record_beir_run.py."""
from __future__ import annotations

import json

import pytest

from alignir.encoders.embedders.adapters import training_cost
from alignir.errors import InvalidInputError


def _stage(folder, stage, steps, cpu, init=None, batch=8, data="supervised", seen=True):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    meta = {"method": "llm2comp", "stage": stage, "steps": steps, "data": {"mix": data},
            "config": {"batch_size": batch, "grad_accum": 2, "init_adapter": None if init is None else str(init)}}
    if cpu is not None:
        meta["train_cpu_seconds"] = cpu
    if seen:
        meta["examples_seen"] = steps * batch * 2
    (folder / "alignir_train.json").write_text(json.dumps(meta))
    return folder


def test_a_stage_chain_sums_steps_examples_and_cpu_seconds(tmp_path):
    a = _stage(tmp_path / "run" / "ctkd", "ctkd", 60, 100.5, data="texts")
    b = _stage(tmp_path / "run" / "ucl", "ucl", 40, 50.0, init=a, data="texts")
    # recorded relative to another working directory: found as a sibling of the stage
    c = _stage(tmp_path / "run" / "scl", "scl", 100, 200.0, init="elsewhere/ucl")
    cost = training_cost(c)
    assert [s["stage"] for s in cost["stages"]] == ["ctkd", "ucl", "scl"]
    assert [s["adapter"] for s in cost["stages"]] == [str(a), str(b), str(c)]
    assert cost["steps"] == 200 and cost["examples_seen"] == 200 * 16 and cost["cpu_seconds"] == 350.5
    assert [s["data"] for s in cost["stages"]] == ["texts", "texts", "supervised"]


def test_an_unrecorded_field_makes_its_total_unknown_not_zero(tmp_path):
    old = _stage(tmp_path / "old", "contrastive", 360, None, seen=False)
    cost = training_cost(old)
    assert cost["cpu_seconds"] is None and cost["examples_seen"] == 360 * 8 * 2 and cost["steps"] == 360


def test_bad_chains_are_named(tmp_path):
    a = _stage(tmp_path / "a", "x", 1, 1.0, init=tmp_path / "a")
    with pytest.raises(InvalidInputError, match="loops"):
        training_cost(a)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "adapter_config.json").write_text("{}")
    with pytest.raises(InvalidInputError, match="training is unknown"):
        training_cost(bare)
    with pytest.raises(InvalidInputError, match="not a peft adapter"):
        training_cost(tmp_path / "missing")


def test_the_shipped_adapter_has_a_readable_cost():
    cost = training_cost("builtin:smollm2-135m-alignir")
    assert cost["steps"] == 360 and cost["examples_seen"] == 360 * 8


def test_record_beir_run_takes_the_cost_from_the_adapter(tmp_path):
    from benchmarks.training.record_beir_run import cost_fields

    a = _stage(tmp_path / "ctkd", "ctkd", 60, 100.4)
    b = _stage(tmp_path / "scl", "scl", 100, 200.0, init=a)
    assert cost_fields(str(b), None) == {"steps": 160, "examples_seen": 160 * 16, "train_cpu_seconds": 300,
                                         "train_stages": ["ctkd:60:supervised", "scl:100:supervised"]}
    assert cost_fields(str(b), 160)["steps"] == 160
    with pytest.raises(SystemExit, match="trained 160 steps"):
        cost_fields(str(b), 100)


def test_cost_of_recorded_runs_is_added_in_place(tmp_path):
    from benchmarks.training.record_beir_run import add_cost

    a = _stage(tmp_path / "a", "contrastive", 10, 5.0)
    out = tmp_path / "training.json"
    out.write_text(json.dumps({"runs": {"x/r": {"steps": 10, "ndcg@10_dense": 0.5}, "x/s": {"steps": 3}}}))
    add_cost(["x/r"], str(a), out=out)
    runs = json.loads(out.read_text())["runs"]
    assert runs["x/r"] == {"steps": 10, "ndcg@10_dense": 0.5, "examples_seen": 160, "train_cpu_seconds": 5,
                           "train_stages": ["contrastive:10:supervised"]}
    with pytest.raises(SystemExit, match="trained 10 steps"):
        add_cost(["x/s"], str(a), out=out)
    with pytest.raises(SystemExit, match="no recorded runs"):
        add_cost(["x/nope"], str(a), out=out)


def test_packaging_casts_the_lora_weights_to_fp16_and_keeps_the_record(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from alignir.encoders.embedders.adapters import adapter_hash, read_meta, training_cost
    from alignir.encoders.train.adapter import package_adapter

    src = _stage(tmp_path / "run", "contrastive", 10, 5.0)
    w = {"a.lora_A.weight": torch.randn(4, 8), "a.lora_B.weight": torch.randn(8, 4)}
    save_file(w, str(src / "adapter_model.safetensors"))
    out = package_adapter(src, tmp_path / "shipped")
    got = load_file(str(out / "adapter_model.safetensors"))
    assert {v.dtype for v in got.values()} == {torch.float16}
    for k in w:
        torch.testing.assert_close(got[k].float(), w[k], rtol=1e-3, atol=1e-3)
    meta = read_meta(out)
    assert meta["weights_dtype"].startswith("float16 (cast from the float32") and meta["stage"] == "contrastive"
    assert meta["packaged_from_sha256"] == adapter_hash(src)
    assert training_cost(out)["cpu_seconds"] == 5.0 and load_file(str(out / "alignir_extra.safetensors")) == {}
    with pytest.raises(InvalidInputError, match="not empty"):
        package_adapter(src, out)


def test_the_packaging_script_writes_where_it_is_told(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    src = _stage(tmp_path / "run", "contrastive", 10, 5.0)
    save_file({"w": torch.ones(2, 2)}, str(src / "adapter_model.safetensors"))
    path = Path(__file__).resolve().parents[1] / "scripts" / "package_adapter.py"
    spec = importlib.util.spec_from_file_location("package_adapter", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main([str(src), "x", "--dest", str(tmp_path / "x")])
    assert (tmp_path / "x" / "adapter_model.safetensors").is_file() and "packaged" in capsys.readouterr().out
