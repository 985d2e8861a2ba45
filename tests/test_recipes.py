"""Multi-stage recipes on the tiny real Llama: every stage starts exactly where the previous one
ended (weights hash chain), the contrastive stage lowers its loss on a fixed batch, the stage
configs are saved with the adapters, the CLI runs ``--stages`` and resuming a finished recipe
retrains nothing."""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import torch

from alignir.encoders.train.adapter import load_trainable_adapter
from alignir.encoders.train.data import load_pairs
from alignir.encoders.train.stages import run_stages, stage_configs
from alignir.encoders.train.trainer import method_class, train

from conftest import train_config, train_log, train_losses

pytestmark = pytest.mark.usefixtures("one_thread")

_cfg = functools.partial(train_config, steps=3)


def _meta(out) -> dict:
    return json.loads(Path(out, "alignir_train.json").read_text())


def fixed_batch_loss(loaded, adapter: str, method: str, stage: str, hp: dict, batch: list) -> float:
    """The ``stage`` loss of the adapter at ``adapter`` on ``batch`` (no gradients, no dropout)."""
    peft, extra, _ = load_trainable_adapter(copy.deepcopy(loaded.model), adapter)
    peft.eval()
    m = method_class(method)(peft, loaded, stage, hp, extra, 32, 32)
    with torch.no_grad():
        return float(m.loss(batch)[0])


def _check_chain(results: list[dict], stages: list[str], first_init: str | None = None) -> None:
    metas = [_meta(r["out"]) for r in results]
    assert [m["stage"] for m in metas] == stages
    assert metas[0]["config"]["init_adapter"] == first_init
    for prev, nxt, r in zip(metas, metas[1:], results):
        # the next stage was initialised from the previous adapter, and starts from its exact weights
        assert nxt["config"]["init_adapter"] == r["out"]
        assert nxt["init_adapter_final_sha256"] == prev["final_weights_sha256"]
        assert nxt["start_weights_sha256"] == prev["final_weights_sha256"]
        assert nxt["final_weights_sha256"] != nxt["start_weights_sha256"]  # and then trained


def test_autoregembed_ic_cda_contrastive_round_trip(tiny_model, data_files, tmp_path):
    """AutoRegEmbed §4.1: IC -> CDA -> one contrastive stage (eq.1 InfoNCE on mean-pooled compress
    states), each stage from the previous adapter; the contrastive loss falls on a fixed batch."""
    stages = ["ic", "cda", "contrastive"]
    cfg = _cfg(tmp_path, "autoregembed", None, data_files["pairs"], out=str(tmp_path / "are"), hp={"k": 2})
    results = run_stages(cfg, stages, loaded=tiny_model)
    _check_chain(results, stages)
    chain = json.loads((tmp_path / "are" / "stages.json").read_text())
    assert chain["stages"] == stages and chain["final"] == str(tmp_path / "are" / "contrastive")
    final = _meta(results[-1]["out"])
    assert final["hp"] == {"k": 2, "task": "retrieval", "tau": 0.05, "in_batch": True}
    assert final["embedder"] == "autoregembed" and final["embedder_options"]["k"] == 2
    batch = load_pairs(data_files["pairs"])  # the 6 pairs = every training batch (batch_size 6)
    hp = {"k": 2}
    before = fixed_batch_loss(tiny_model, results[1]["out"], "autoregembed", "contrastive", hp, batch)
    after = fixed_batch_loss(tiny_model, results[2]["out"], "autoregembed", "contrastive", hp, batch)
    assert after < before, (before, after)
    # the first logged step of the contrastive stage is the cda adapter's loss on that batch
    assert train_log(results[2]["out"])[0]["loss"] == pytest.approx(before, rel=1e-4)
    # rerunning the recipe resumes: every stage is complete, nothing retrains
    again = run_stages(cfg, stages, loaded=tiny_model)
    assert all(r["already_complete"] for r in again)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
def test_llm2comp_ctkd_ucl_scl_round_trip(bidirectional, tiny_model, data_files, tmp_path):
    """LLM2Comp §3 + §5.1: CTKD pretext -> UCL (SimCSE, eq.8) -> SCL, causal (App. 3) or
    bidirectional attention, carried through every stage into the adapter's reading options."""
    stages = ["ctkd", "ucl", "scl"]
    cfg = _cfg(tmp_path, "llm2comp", None, data_files["texts"], out=str(tmp_path / "l2c"),
               hp={"k": 2, "bidirectional": bidirectional})
    opts = {"scl": {"data": data_files["pairs"]}}  # the pretext and UCL read texts, SCL pairs
    results = run_stages(cfg, stages, opts, loaded=tiny_model)
    _check_chain(results, stages)
    for r in results:
        assert _meta(r["out"])["embedder_options"] == {"k": 2, "bidirectional": bidirectional}
    batch = load_pairs(data_files["pairs"])
    hp = {"k": 2, "bidirectional": bidirectional}
    before = fixed_batch_loss(tiny_model, results[1]["out"], "llm2comp", "scl", hp, batch)
    after = fixed_batch_loss(tiny_model, results[2]["out"], "llm2comp", "scl", hp, batch)
    assert after < before, (before, after)


def test_init_adapter_starts_a_stage_from_a_previous_adapter(tiny_model, data_files, tmp_path):
    """``--init-adapter`` chains runs by hand: the same weights hash as a ``--stages`` chain."""
    ic = train(_cfg(tmp_path, "autoregembed", "ic", data_files["pairs"], hp={"k": 2}), loaded=tiny_model)
    cfg = _cfg(tmp_path, "autoregembed", None, data_files["pairs"], out=str(tmp_path / "rest"), hp={"k": 2},
               init_adapter=ic["out"])
    results = run_stages(cfg, ["cda", "contrastive"], loaded=tiny_model)
    _check_chain([ic] + results, ["ic", "cda", "contrastive"])


def test_init_adapter_given_as_a_home_path_records_its_hash(tiny_model, data_files, tmp_path, monkeypatch):
    """An ``--init-adapter`` that must be resolved first (``~/...``, like ``builtin:NAME``) still
    records the hash of the adapter it started from."""
    monkeypatch.setenv("HOME", str(tmp_path))
    ic = train(_cfg(tmp_path, "autoregembed", "ic", data_files["pairs"], hp={"k": 2}), loaded=tiny_model)
    cda = train(_cfg(tmp_path, "autoregembed", "cda", data_files["pairs"], hp={"k": 2},
                     init_adapter="~/" + Path(ic["out"]).name), loaded=tiny_model)
    assert _meta(cda["out"])["init_adapter_final_sha256"] == _meta(ic["out"])["final_weights_sha256"]
    assert _meta(cda["out"])["start_weights_sha256"] == _meta(ic["out"])["final_weights_sha256"]


def test_stage_configs_settings_per_stage(data_files, tmp_path):
    cfg = _cfg(tmp_path, "autoregembed", None, data_files["pairs"], out=str(tmp_path / "x"),
               hp={"k": 3, "tau": 0.1, "cda.beta": 0.2}, data_mix="title")
    ic, cda, con = stage_configs(cfg, ["ic", "cda", "contrastive"], {"contrastive": {"steps": 7, "lr": 1e-4}})
    assert ic.hp == {"k": 3} and cda.hp == {"k": 3, "tau": 0.1, "beta": 0.2} and con.hp == {"k": 3, "tau": 0.1}
    assert (ic.steps, cda.steps, con.steps) == (3, 3, 7) and con.lr == 1e-4
    assert [c.init_adapter for c in (ic, cda, con)] == [None, ic.out, cda.out]
    with pytest.raises(ValueError, match="not in"):
        stage_configs(cfg, ["ic"], {"cda": {"steps": 1}})
    with pytest.raises(ValueError, match="cannot be set per stage"):
        stage_configs(cfg, ["ic"], {"ic": {"model": "x"}})
    with pytest.raises(ValueError, match="twice"):
        stage_configs(cfg, ["ic", "ic"])
    with pytest.raises(ValueError, match="unknown stage"):
        stage_configs(cfg, ["ic", "ucl"])
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        stage_configs(_cfg(tmp_path, "autoregembed", None, data_files["pairs"], hp={"lam": 1}), ["ic"])


def test_cli_stages(tiny_model, data_files, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import alignir.encoders.models as models
    from alignir.retrieval.cli import app

    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_model)  # the tiny real model for any spec
    out = tmp_path / "cli"
    args = ["train", "autoregembed", "--stages", "ic,contrastive", "--data", data_files["pairs"], "--out", str(out),
            "--steps", "2", "--batch-size", "3", "--max-length", "32", "--target-length", "16", "--lora-r", "4",
            "--set", "k=2", "--set", "contrastive.in_batch=false", "--stage-option", "contrastive.steps=3"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    ic, con = _meta(out / "ic"), _meta(out / "contrastive")
    assert ic["steps"] == 2 and con["steps"] == 3
    assert con["hp"]["in_batch"] is False and con["config"]["init_adapter"] == str(out / "ic")
    assert con["start_weights_sha256"] == ic["final_weights_sha256"]
    res = CliRunner().invoke(app, args[:-2] + ["--stage-option", "contrastive.steps=4"])
    assert res.exit_code != 0 and "steps: 3 -> 4" in res.output  # a finished stage is not reported under new settings
    res = CliRunner().invoke(app, args + ["--stage", "ic"])
    assert res.exit_code != 0 and "not both" in res.output


def test_gircse_adapter_records_its_prompt_and_k_and_old_adapters_read_plain(tiny_model, data_files, tmp_path):
    from alignir.encoders.embedders.gircse import GircseEmbedder

    r = train(_cfg(tmp_path, "gircse", "icr", data_files["pairs"], steps=1, hp={"K": 2, "instruction": "scifact"}),
              loaded=tiny_model)
    meta = _meta(r["out"])
    assert meta["embedder_options"] == {"prompt": "instruct", "K": 2} and meta["hp"]["reduction"] == "sum"
    e = GircseEmbedder(tiny_model, adapter=r["out"])
    # read the way it was trained: its prompt, its query instruction, its training K
    assert e.options["prompt"] == "instruct" and e.instruction == "scifact" and e.options["K"] == 2
    assert GircseEmbedder(tiny_model, adapter=r["out"], K=3).options["K"] == 3  # an explicit K wins
    assert GircseEmbedder(tiny_model).options["K"] == 20  # no adapter: the paper's test-time K
    meta["embedder_options"] = {}  # an adapter trained before the options existed
    Path(r["out"], "alignir_train.json").write_text(json.dumps(meta))
    old = GircseEmbedder(tiny_model, adapter=r["out"])
    assert old.options["prompt"] == "plain" and old.options["K"] == 20
    with pytest.raises(ValueError, match="prompt"):
        train(_cfg(tmp_path, "gircse", "icr", data_files["pairs"], steps=1, hp={"prompt": "chat"}, resume=False),
              loaded=tiny_model)


def test_a_long_run_in_time_slices_equals_one_run(tiny_model, data_files, tmp_path):
    """``--stop-after N`` pauses with a checkpoint even between ``save_every`` points; the same
    command continues exactly (same per-step losses as one uninterrupted run)."""
    full = train(_cfg(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3),
                 loaded=tiny_model)
    cfg = _cfg(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3, stop_after=2)
    assert train(cfg, loaded=tiny_model)["steps"] == 2
    assert train(cfg, loaded=tiny_model)["steps"] == 4
    done = train(cfg, loaded=tiny_model)
    assert done["steps"] == 5 and not done.get("interrupted")
    rows = train_log(done["out"])
    assert len(rows) == 5
    # wall and CPU seconds count the whole run across the slices; examples seen = steps x batch
    cpu = [r["cpu_seconds"] for r in rows]
    assert all(b > a for a, b in zip(cpu, cpu[1:])) and _meta(done["out"])["train_cpu_seconds"] >= cpu[-1]
    assert _meta(done["out"])["examples_seen"] == 15
    torch.testing.assert_close(torch.tensor([r["loss"] for r in train_log(done["out"])]),
                               torch.tensor([r["loss"] for r in train_log(full["out"])]), rtol=1e-5, atol=1e-6)


def test_stop_at_pauses_before_a_step_that_would_end_past_the_deadline(tiny_model, data_files, tmp_path):
    """``--stop-at`` is a wall-clock deadline: a deadline already reached pauses after the first step
    of the call (checkpointed, ``paused: stop_at``); the deadline may change between calls and the
    run still ends on the losses of one uninterrupted run."""
    import time

    full = train(_cfg(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=4, batch_size=3),
                 loaded=tiny_model)
    cfg = _cfg(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], steps=4, batch_size=3,
               stop_at=time.time())
    first = train(cfg, loaded=tiny_model)
    assert first["interrupted"] and first["paused"] == "stop_at" and first["steps"] == 1 and first["signal"] is None
    cfg.stop_at = time.time() + 3600.0  # a later deadline on the next call: not a changed setting
    done = train(cfg, loaded=tiny_model)
    assert done["steps"] == 4 and not done.get("interrupted") and done["steps_run"] == 3
    torch.testing.assert_close(torch.tensor(train_losses(done["out"])), torch.tensor(train_losses(full["out"])),
                               rtol=1e-5, atol=1e-6)


def test_stop_at_reads_a_clock_time_or_minutes_from_now():
    import datetime as dt

    import typer

    from alignir.retrieval.commands.train import _parse_stop_at

    now = dt.datetime(2026, 3, 1, 21, 30).timestamp()
    assert _parse_stop_at(None) is None
    assert _parse_stop_at("+90", now=now) == now + 5400.0
    assert _parse_stop_at("@1700000000", now=now) == 1700000000.0
    assert _parse_stop_at("22:15", now=now) == dt.datetime(2026, 3, 1, 22, 15).timestamp()
    assert _parse_stop_at("21:00", now=now) == dt.datetime(2026, 3, 2, 21, 0).timestamp()  # passed today: tomorrow
    for bad in ("+0", "+soon", "25:00", "tonight", "@noon"):
        with pytest.raises(typer.BadParameter, match="--stop-at"):
            _parse_stop_at(bad, now=now)


def test_unlabelled_run_over_two_corpora_records_its_data_and_resumes(tiny_model, tmp_path):
    """The long-run recipe in miniature: title + crop pairs of two corpora, paused and resumed."""
    from conftest import TINY_CORPUS

    folders = []
    for name, texts in (("a", TINY_CORPUS[:3]), ("b", TINY_CORPUS[3:])):
        d = tmp_path / name
        d.mkdir()
        with open(d / "corpus.jsonl", "w") as fh:
            for i, t in enumerate(texts):
                fh.write(json.dumps({"_id": f"{name}{i}", "title": " ".join(t.split()[:3]), "text": t}) + "\n")
        folders.append(str(d))
    cfg = _cfg(tmp_path, "infonce", "contrastive", folders[0], steps=3, batch_size=4, data_mix="title,crop",
               corpora=folders, stop_after=2)
    assert train(cfg, loaded=tiny_model).get("interrupted")
    done = train(cfg, loaded=tiny_model)
    assert done["steps"] == 3 and not done.get("interrupted")
    data = _meta(done["out"])["data"]
    assert [(s["name"], Path(s["corpus"]).name, s["count"]) for s in data["sources"]] == [
        ("title", "a", 3), ("title", "b", 3), ("crop", "a", 3), ("crop", "b", 3)]
    assert data["total"] == 12 and data["train"] == 12
    other = _cfg(tmp_path, "infonce", "contrastive", folders[0], steps=3, batch_size=4, data_mix="title,crop",
                 corpora=folders[:1])
    with pytest.raises(ValueError, match="corpora"):
        train(other, loaded=tiny_model)  # a finished run is not reported under another data set


def test_stop_after_is_one_budget_across_stages_and_never_starts_from_an_unfinished_stage(tiny_model, data_files,
                                                                                        tmp_path):
    """``--stages ic,cda,contrastive --stop-after 3`` in slices: the budget counts this call's steps over
    all its stages, the chain stops at a paused stage (the next one would start from an adapter that
    does not exist yet), and the slices end on exactly the weights of one uninterrupted chain."""
    stages = ["ic", "cda", "contrastive"]

    def cfg(out, **kw):
        return _cfg(tmp_path, "autoregembed", None, data_files["pairs"], out=str(tmp_path / out), steps=2,
                    batch_size=3, hp={"k": 2}, **kw)

    whole = run_stages(cfg("whole"), stages, loaded=tiny_model)
    first = run_stages(cfg("sliced", stop_after=3), stages, loaded=tiny_model)
    assert [r["stage"] for r in first] == ["ic", "cda"] and first[-1]["interrupted"] and first[-1]["steps"] == 1
    assert first[0]["steps_run"] == 2 and first[-1]["steps_run"] == 1 and first[-1]["signal"] is None
    assert not (tmp_path / "sliced" / "contrastive").exists()
    second = run_stages(cfg("sliced", stop_after=3), stages, loaded=tiny_model)  # cda 1 step, contrastive 2 steps
    assert [r["steps_run"] for r in second] == [0, 1, 2] and not any(r.get("interrupted") for r in second)
    assert second[0]["already_complete"]
    for a, b in zip(whole, second):
        assert _meta(a["out"])["final_weights_sha256"] == _meta(b["out"])["final_weights_sha256"]
    # a pause that falls on a stage boundary stops before the next stage
    edge = run_stages(cfg("edge", stop_after=2), stages, loaded=tiny_model)
    assert [r["stage"] for r in edge] == ["ic"] and not edge[0].get("interrupted")
    assert not (tmp_path / "edge" / "cda").exists()


def test_cli_says_how_to_continue_a_paused_recipe(tiny_model, data_files, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import alignir.encoders.models as models
    from alignir.retrieval.cli import app

    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_model)
    args = ["train", "autoregembed", "--stages", "ic,contrastive", "--data", data_files["pairs"],
            "--out", str(tmp_path / "cli"), "--steps", "2", "--batch-size", "3", "--max-length", "32",
            "--target-length", "16", "--lora-r", "4", "--set", "k=2"]
    res = CliRunner().invoke(app, args + ["--stop-after", "2"])
    assert res.exit_code == 0 and "after stage ic; rerun the same command to start contrastive" in res.output
    res = CliRunner().invoke(app, args + ["--stop-after", "1"])
    assert res.exit_code == 0 and "paused (--stop-after) at step 1 of autoregembed/contrastive" in res.output
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "rerun" not in res.output
    assert _meta(tmp_path / "cli" / "contrastive")["steps"] == 2


def _run_lib(tmp_path, runs: Path, parked: Path, call: str) -> str:
    """Run one function of benchmarks/training/run_lib.sh (the long runs' shared steps) against a RUNS and
    a PARKED folder of the test's own."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "RUNS": str(runs), "PARKED": str(parked), "PYTHON": sys.executable}
    script = f'ROOT="{root}"; source "{root}/benchmarks/training/run_lib.sh"; {call}'
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.e2e  # run_lib.sh's steps run $PYTHON in child processes
def test_a_parked_run_resumes_on_a_bare_machine_exactly(tiny_model, data_files, tmp_path):
    """A paused run's checkpoint and logs are parked in the repository (``keep_or_park``, after a
    ``STOP_AT`` pause, or ``long_run.sh park RUN``); on a
    machine whose RUNS folder is gone, the next call of the same step restores it and the run ends
    on the losses of one uninterrupted run. A local checkpoint that is ahead of the parked one is
    left alone."""
    import shutil

    full = train(_cfg(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3,
                      eval_examples=2, eval_every=2), loaded=tiny_model)
    runs, parked = tmp_path / "runs", tmp_path / "parked"
    cfg = _cfg(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3, stop_after=2,
               out=str(runs / "r"), eval_examples=2, eval_every=2)
    assert train(cfg, loaded=tiny_model)["steps"] == 2
    assert "at step 2" in _run_lib(tmp_path, runs, parked, "keep_or_park r")  # paused, so parked
    assert sorted(p.name for p in (parked / "r").iterdir()) == ["checkpoint", "eval_log.jsonl", "loss_log.jsonl"]
    shutil.rmtree(runs)  # the machine starts bare
    assert "step 2" in _run_lib(tmp_path, runs, parked, "unpark_run r")
    assert train(cfg, loaded=tiny_model)["steps"] == 4  # resumed at 2, not started over
    assert _run_lib(tmp_path, runs, parked, "unpark_run r") == ""  # the local step-4 checkpoint is ahead
    done = train(cfg, loaded=tiny_model)
    assert done["steps"] == 5 and [r["step"] for r in train_log(done["out"])] == [1, 2, 3, 4, 5]
    torch.testing.assert_close(torch.tensor(train_losses(done["out"])), torch.tensor(train_losses(full["out"])),
                               rtol=1e-5, atol=1e-6)
    assert [r["step"] for r in train_log(done["out"], "eval_log.jsonl")] == [0, 2, 4, 5]  # the held-out curve too
    # parking refuses a run with no checkpoint, and a kept run's parked copy goes
    with pytest.raises(Exception):
        _run_lib(tmp_path, runs, parked, "park_run missing")
    _run_lib(tmp_path, runs, parked, "unpark_done r")
    assert not (parked / "r").exists()


@pytest.mark.e2e  # run_lib.sh's steps run $PYTHON in child processes
def test_the_long_run_chain_knows_what_is_scored_and_fixes_its_deadline_once(tmp_path):
    """``long_run.sh budget`` skips a collection already scored for a run, and turns STOP_AT into one
    absolute deadline that every command it starts shares."""
    import os
    import subprocess
    import sys

    results = tmp_path / "gpu_train.json"
    results.write_text(json.dumps({"runs": {"r": {"scores": {"trained": {"adi": {}, "med": {}}}}}}))
    root = Path(__file__).resolve().parents[1]

    def run(call: str, **env: str) -> str:
        full = {**os.environ, "RUNS": str(tmp_path / "runs"), "PARKED": str(tmp_path / "parked"),
                "PYTHON": sys.executable, "TRAIN_RESULTS": str(results), **env}
        if "STOP_AT" not in env:
            full.pop("STOP_AT", None)
        script = f'ROOT="{root}"; source "{root}/benchmarks/training/run_lib.sh"; {call}'
        return subprocess.run(["bash", "-c", script], env=full, capture_output=True, text=True, check=True).stdout

    check = 'for d in adi med cisi; do if unscored r "$d"; then echo "$d"; fi; done; unscored other adi && echo other'
    assert run(check).split() == ["cisi", "other"]
    assert run('past_deadline && echo past || echo open') == "open\n"  # no deadline
    assert run('past_deadline && echo past || echo open', STOP_AT="@1000") == "past\n"
    fixed = run('echo "$STOP_AT"; past_deadline && echo past || echo open', STOP_AT="+30").split()
    assert fixed[1] == "open" and fixed[0].startswith("@")
    assert float(fixed[0][1:]) == pytest.approx(__import__("time").time() + 1800, abs=60)
    with pytest.raises(subprocess.CalledProcessError):
        run('echo "the step would start"', STOP_AT="tonight")


@pytest.mark.e2e  # the long runs' shell steps in child processes
def test_a_stopped_mine_parks_the_embeddings_of_its_adapter_only(tmp_path):
    """``park_embeddings RUN`` copies the embedding-cache folders whose fingerprint names RUN's
    adapter (not another model's) into PARKED/embeddings-RUN; on a bare machine
    ``unpark_embeddings RUN`` merges them back, parts byte for byte, and keeps parts already there."""
    import os
    import subprocess
    import sys

    from alignir.encoders.embedders.adapters import adapter_hash

    keep, cache, parked = tmp_path / "keep", tmp_path / "runs" / "cache", tmp_path / "parked"
    (keep / "r").mkdir(parents=True)
    (keep / "r" / "adapter_config.json").write_text('{"r": 16}')
    (keep / "r" / "adapter_model.safetensors").write_bytes(b"weights")
    for fp, sha in (("ours", adapter_hash(keep / "r")), ("other", "0" * 64)):
        (cache / fp / "document").mkdir(parents=True)
        (cache / fp / "fingerprint.json").write_text(json.dumps({"adapter_sha256": sha}))
        (cache / fp / "document" / f"part-all-000001-{fp}.npz").write_bytes(fp.encode() * 10)
    root = Path(__file__).resolve().parents[1]

    def run(call: str) -> str:
        env = {**os.environ, "RUNS": str(tmp_path / "runs"), "PARKED": str(parked), "KEEP": str(keep),
               "EMBED_CACHE": str(cache), "PYTHON": sys.executable}
        script = f'ROOT="{root}"; source "{root}/benchmarks/training/run_lib.sh"; {call}'
        return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout

    assert "parked 1 embedding parts" in run("park_embeddings r")
    assert sorted(p.name for p in (parked / "embeddings-r").iterdir()) == ["ours"]
    ours = sorted(p.relative_to(cache).as_posix() for p in (cache / "ours").rglob("*") if p.is_file())
    import shutil

    shutil.rmtree(tmp_path / "runs")  # the machine starts bare
    (cache / "ours" / "document").mkdir(parents=True)
    (cache / "ours" / "document" / "part-all-000002-new.npz").write_bytes(b"encoded here")
    assert "restored" in run("unpark_embeddings r")
    got = sorted(p.relative_to(cache).as_posix() for p in (cache / "ours").rglob("*") if p.is_file())
    assert got == sorted(ours + ["ours/document/part-all-000002-new.npz"])
    assert (cache / "ours" / "document" / "part-all-000001-ours.npz").read_bytes() == b"ours" * 10
    assert not (cache / "other").exists()
    with pytest.raises(subprocess.CalledProcessError):
        run("park_embeddings missing")  # no adapter
    assert run("unpark_embeddings missing") == ""  # nothing parked: nothing to do
