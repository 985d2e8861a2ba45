"""Multi-stage recipes: run a method's stages in order, each starting from the previous stage's adapter.

``run_stages(cfg, ["ic", "cda", "contrastive"])`` trains ``OUT/ic``, then ``OUT/cda`` with
``init_adapter=OUT/ic``, then ``OUT/contrastive`` from ``OUT/cda``; every stage folder holds its own
adapter, config, data description, logs and checkpoint, so rerunning the same command resumes the
unfinished stage and reports the finished ones. ``OUT/stages.json`` lists the chain.

Per-stage settings: hyper-parameters ``KEY=VALUE`` go to every stage that has KEY (an error if none
has it), ``STAGE.KEY=VALUE`` to that stage only; ``stage_opts[STAGE]`` overrides TrainConfig fields
(steps, lr, batch_size, data_mix, weight_decay, ...) for that stage.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from alignir.encoders.train.trainer import TrainConfig, method_class, train
from alignir.errors import InvalidInputError

__all__ = ["run_stages", "stage_configs", "split_stage_hp", "STAGE_FIELDS"]

#: TrainConfig fields a stage may override (the others describe the whole run)
STAGE_FIELDS = ("steps", "lr", "batch_size", "grad_accum", "weight_decay", "warmup_ratio", "data", "data_mix", "corpora",
                "split", "n_negatives", "max_examples", "max_length", "target_length", "eval_examples", "eval_every",
                "eval_batch_size", "save_every")


def split_stage_hp(method: str, stages: list[str], hp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Distribute ``hp`` over ``stages`` (``KEY`` to every stage that has it, ``STAGE.KEY`` to one)."""
    cls = method_class(method)
    out: dict[str, dict[str, Any]] = {s: {} for s in stages}
    for key, value in hp.items():
        stage, dot, name = key.partition(".")
        if dot:
            if stage not in out:
                raise InvalidInputError(f"hyper-parameter {key!r} names stage {stage!r}, which is not in {stages}")
            out[stage][name] = value
            continue
        takers = [s for s in stages if key in cls.DEFAULTS.get(s, {})]
        if not takers:
            raise InvalidInputError(f"unknown hyper-parameter {key!r} for {method} stages {stages}")
        for s in takers:
            out[s][key] = value
    return out


def stage_configs(cfg: TrainConfig, stages: list[str], stage_opts: dict[str, dict[str, Any]] | None = None) -> list[TrainConfig]:
    """One TrainConfig per stage, chained through ``init_adapter`` (the first keeps ``cfg.init_adapter``)."""
    if not stages:
        raise InvalidInputError("no stages given")
    if len(set(stages)) != len(stages):
        raise InvalidInputError(f"a stage appears twice in {stages}")
    cls = method_class(cfg.method)
    for s in stages:
        if s not in cls.STAGES:
            raise InvalidInputError(f"unknown stage {s!r} for {cfg.method}; use some of {list(cls.STAGES)}")
    stage_opts = stage_opts or {}
    for s, opts in stage_opts.items():
        if s not in stages:
            raise InvalidInputError(f"settings given for stage {s!r}, which is not in {stages}")
        bad = sorted(set(opts) - set(STAGE_FIELDS))
        if bad:
            raise InvalidInputError(f"stage {s!r}: {bad} cannot be set per stage; per-stage settings: {', '.join(STAGE_FIELDS)}")
    hps = split_stage_hp(cfg.method, stages, cfg.hp)
    out, prev = [], cfg.init_adapter
    for s in stages:
        c = dataclasses.replace(cfg, stage=s, out=str(Path(cfg.out) / s), init_adapter=prev, hp=hps[s],
                                **stage_opts.get(s, {}))
        if cls.STAGES[s] == "texts" and "data_mix" not in stage_opts.get(s, {}):
            c.data_mix = None  # a pair mix does not apply to raw-text stages
        out.append(c)
        prev = c.out
    return out


def run_stages(cfg: TrainConfig, stages: list[str], stage_opts: dict[str, dict[str, Any]] | None = None,
               loaded=None) -> list[dict[str, Any]]:
    """Train ``stages`` in order (see the module docstring); returns the summaries of the stages
    this call reached: the chain stops at a stage that was paused (``stop_after``, whose budget of
    steps is shared by the stages of one call) or stopped by a signal."""
    configs = stage_configs(cfg, stages, stage_opts)
    for c in configs:
        c.validate()
    if loaded is None:
        from alignir.encoders.models import load_model

        loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    chain = {"method": cfg.method, "stages": stages, "dirs": [c.out for c in configs], "final": configs[-1].out}
    (Path(cfg.out) / "stages.json").write_text(json.dumps(chain, indent=1))
    summaries: list[dict[str, Any]] = []
    budget = cfg.stop_after or None  # --stop-after counts the steps of this invocation, across its stages
    for c in configs:
        if budget is not None:
            if budget <= 0:
                break  # the pause fell on a stage boundary: the next stage starts on the next invocation
            c.stop_after = budget
        summary = train(c, loaded=loaded)
        summaries.append(summary)
        if summary.get("interrupted"):
            break  # a later stage must not start from an unfinished adapter
        if budget is not None:
            budget -= int(summary.get("steps_run", 0))
    return summaries
