"""CLI: ``alignir train METHOD`` — LoRA training of the trained embedders (encoders/train/).

Examples (CPU toy scale)::

    alignir train infonce --data datasets/scifact --out runs/infonce --steps 50
    alignir train autoregembed --stage ic  --data datasets/scifact --out runs/are-ic
    alignir train autoregembed --stage cda --data datasets/scifact --out runs/are-cda --init-adapter runs/are-ic
    alignir train llm2comp --stage ctkd --data datasets/scifact --out runs/l2c-ctkd   # corpus text
    alignir train gircse --data datasets/scifact --out runs/gircse --set K=5 --set lam=1 --set instruction=scifact

Multi-stage recipes (each stage in OUT/STAGE, started from the previous stage's adapter; rerunning
the same command resumes the unfinished stage)::

    alignir train autoregembed --stages ic,cda,contrastive --data datasets/scifact --out runs/are
    alignir train llm2comp --stages ctkd,ucl,scl --data datasets/scifact --out runs/l2c --set bidirectional=false
    alignir train llm2comp --stages ucl,scl --init-adapter runs/l2c/ctkd --data datasets/scifact --out runs/l2c-cl

No labelled data: ``--data-mix title,crop`` trains pair stages on title<->abstract pairs and
independent crops of the corpus (``--corpus DIR`` once per corpus; default the --data folder).

The aligned-token map of a trained adapter (no LLM training: the texts are encoded once, a d×d map
before the LM head trains on their vectors in minutes; docs/training.md)::

    alignir train sparse-map --init-adapter builtin:smollm2-135m-alignir-v3 --data datasets/scifact \
        --corpus corpora/wordnet --corpus corpora/foldoc --set breadth=0.5 --steps 300 --out runs/v3-map

GPU paper scale: ``--dtype bf16 --grad-accum 8 --grad-checkpointing --max-length 512``. InfoNCE
with more in-batch negatives than memory holds: ``--batch-size 256 --set grad_cache=64`` (gradient
caching, 64 texts per sub-batch; docs/training.md).
"""
from __future__ import annotations

import json
from typing import Optional

import typer

from alignir.retrieval.commands.common import parse_key_values

METHOD_HELP = ("infonce | autoregembed (stages ic, ic-text, cda, contrastive) | llm2comp (rc, nll, ctkd, ucl, scl) "
               "| gircse (icr) | sparse-map (the aligned-token map of --init-adapter)")


def _parse_set(items: list[str]) -> dict:
    return parse_key_values(items, "--set")


def _parse_stage_options(items: list[str]) -> dict[str, dict]:
    """``["cda.steps=200", "contrastive.lr=1e-4"]`` -> {"cda": {"steps": 200}, "contrastive": {"lr": 1e-4}}."""
    out: dict[str, dict] = {}
    for stage_key, value in _parse_set(items).items():
        stage, dot, key = stage_key.partition(".")
        if not dot or not stage or not key:
            raise typer.BadParameter(f"--stage-option expects STAGE.FIELD=VALUE, got {stage_key!r}")
        out.setdefault(stage, {})[key] = value
    return out


def register(app: typer.Typer) -> None:
    """Attach ``alignir train`` to the main app."""

    @app.command("train", help=f"Train a LoRA adapter. METHOD: {METHOD_HELP}.")
    def train_cmd(
        method: str = typer.Argument(..., help=METHOD_HELP),
        data: str = typer.Option(..., help="BEIR folder, triples .jsonl, or raw text (.txt/.jsonl/BEIR corpus)"),
        out: str = typer.Option(..., help="output adapter directory (also holds loss_log.jsonl, checkpoint/)"),
        stage: Optional[str] = typer.Option(None, help="training stage (default: the method's first)"),
        stages: Optional[str] = typer.Option(None, help="run these stages in order, e.g. ic,cda,contrastive: each in "
                                             "OUT/STAGE, started from the previous stage's adapter"),
        stage_option: list[str] = typer.Option([], "--stage-option", help="STAGE.FIELD=VALUE: a setting for one stage of "
                                               "--stages (steps, lr, batch_size, data_mix, weight_decay, ...)"),
        data_mix: Optional[str] = typer.Option(None, help="pair sources: supervised (qrels train split), title "
                                               "(title<->abstract), crop (independent crops); caps: title=2000"),
        corpus: list[str] = typer.Option([], "--corpus", help="a BEIR folder whose corpus feeds the title/crop pairs "
                                         "and raw-text stages (repeat; default: the --data folder)"),
        model: str = typer.Option("smollm2-135m", help="model spec for encoders.models.load_model"),
        steps: int = typer.Option(100, min=1),
        batch_size: int = typer.Option(4, min=1),
        grad_accum: int = typer.Option(1, min=1),
        lr: Optional[float] = typer.Option(None, help="default: the paper's learning rate for the stage"),
        weight_decay: float = typer.Option(0.0),
        warmup_ratio: float = typer.Option(0.1),
        lora_r: int = typer.Option(16, min=1),
        lora_alpha: int = typer.Option(32, min=1),
        lora_dropout: float = typer.Option(0.0),
        max_length: int = typer.Option(128, min=1, help="max input tokens per text"),
        target_length: int = typer.Option(128, min=1, help="max decoder target tokens"),
        split: str = typer.Option("train", help="qrels split of a BEIR folder"),
        negatives: int = typer.Option(1, min=0, help="BM25 hard negatives per pair (BEIR data)"),
        max_examples: Optional[int] = typer.Option(None, help="use only the first N queries / texts"),
        query_frames: float = typer.Option(0.0, min=0.0, max=1.0, help="share of the training queries framed as "
                                           "requests ('What is known about X?'); held-out ones never are"),
        text_forms: float = typer.Option(0.0, min=0.0, max=1.0, help="share of the training queries whose pairs are "
                                         "read in capitals or lower case without punctuation (query, documents or "
                                         "both); held-out ones never are"),
        seed: int = typer.Option(0),
        device: str = typer.Option("auto"),
        dtype: Optional[str] = typer.Option(None, help="fp32 | bf16 | fp16 (default fp32 on CPU)"),
        grad_checkpointing: bool = typer.Option(False, "--grad-checkpointing"),
        init_adapter: Optional[str] = typer.Option(None, help="continue from a previous stage's adapter"),
        save_every: int = typer.Option(0, min=0, help="checkpoint every N steps (0: only at the end)"),
        stop_after: Optional[int] = typer.Option(None, min=1, help="pause after N steps of this invocation (checkpoint "
                                                 "saved; the same command continues): a long run in time slices"),
        stop_at: Optional[str] = typer.Option(None, help="pause before a step that would end past this time: HH:MM "
                                              "(its next occurrence, local time), +MINUTES from now or @UNIX_SECONDS "
                                              "(checkpoint saved; the same command continues)"),
        resume: bool = typer.Option(True, "--resume/--no-resume", help="resume from OUT/checkpoint if present"),
        resume_changed_data: bool = typer.Option(False, "--resume-changed-data", help="resume even though the training "
                                                 "examples differ from the checkpoint's (the data order is kept; the "
                                                 "change is recorded in the run's data_changes)"),
        eval_examples: int = typer.Option(0, min=0, help="hold out N examples; log their loss (eval_log.jsonl)"),
        eval_every: int = typer.Option(0, min=0, help="held-out loss every N steps (0: before and after only)"),
        eval_batch_size: int = typer.Option(0, min=0, help="held-out loss in chunks of N examples (0: --batch-size); "
                                            "one N for runs of different batch sizes makes their losses comparable"),
        threads: Optional[int] = typer.Option(None, help="torch CPU threads"),
        set_: list[str] = typer.Option([], "--set", help="method hyper-parameter KEY=VALUE (tau, beta, lam, K, k, ...); "
                                       "with --stages, STAGE.KEY=VALUE sets one stage's"),
    ) -> None:
        import torch

        from alignir.encoders.train.stages import run_stages
        from alignir.encoders.train.trainer import TrainConfig, train

        if method == "sparse-map":
            _sparse_map(data, out, model, init_adapter, split, list(corpus), steps, lr, seed, eval_every, device,
                        threads, _parse_set(set_))
            return
        if stages and stage:
            raise typer.BadParameter("give --stage or --stages, not both")
        if stage_option and not stages:
            raise typer.BadParameter("--stage-option needs --stages")
        if threads:
            torch.set_num_threads(threads)
        cfg = TrainConfig(
            method=method, data=data, out=out, stage=stage, model=model, steps=steps, batch_size=batch_size,
            grad_accum=grad_accum, lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, lora_r=lora_r,
            lora_alpha=lora_alpha, lora_dropout=lora_dropout, max_length=max_length, target_length=target_length,
            split=split, n_negatives=negatives, data_mix=data_mix, corpora=list(corpus) or None,
            max_examples=max_examples, query_frames=query_frames, text_forms=text_forms, seed=seed, device=device, dtype=dtype,
            grad_checkpointing=grad_checkpointing, init_adapter=init_adapter, save_every=save_every, resume=resume,
            resume_changed_data=resume_changed_data,
            stop_after=stop_after, stop_at=_parse_stop_at(stop_at),
            eval_examples=eval_examples, eval_every=eval_every, eval_batch_size=eval_batch_size,
            hp=_parse_set(set_),
        )
        names: list[str] | None = None
        try:
            if stages:
                names = [x.strip() for x in stages.split(",") if x.strip()]
                summary = run_stages(cfg, names, _parse_stage_options(stage_option))
            else:
                summary = train(cfg)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
        typer.echo(json.dumps(summary, indent=1, default=str))
        _report_pause(summary, names)


#: ``--set`` keys of ``alignir train sparse-map`` that belong to the fit, not to SparseMapConfig
FIT_KEYS = ("pairs_per_corpus", "held_out", "transfer_pairs")


def _sparse_map(data: str, out: str, model: str, init_adapter: Optional[str], split: str, corpora: list[str], steps: int,
                lr: Optional[float], seed: int, eval_every: int, device: str, threads: Optional[int],
                hp: dict) -> None:
    """``alignir train sparse-map``: retrieval.sparse_map_fit on the adapter of --init-adapter
    (a folder or builtin:NAME) over --model, the base model it was trained on; --set takes
    SparseMapConfig fields (batch_size, hard_negatives, random_negatives, identity_weight,
    function_weight, breadth, spread) and pairs_per_corpus / held_out / transfer_pairs."""
    from dataclasses import fields

    import torch

    from alignir.encoders.embedders.adapters import adapter_dir, read_meta
    from alignir.encoders.train.sparse_map import SparseMapConfig
    from alignir.retrieval.sparse_map_fit import fit_sparse_map

    if not init_adapter:
        raise typer.BadParameter("sparse-map trains the map of an adapter: give --init-adapter DIR or builtin:NAME")
    if threads:
        torch.set_num_threads(threads)
    fit_keys = {k: hp.pop(k) for k in FIT_KEYS if k in hp}
    known = {f.name for f in fields(SparseMapConfig)} - {"steps", "seed", "lr"}
    unknown = sorted(set(hp) - known)
    if unknown:
        raise typer.BadParameter(f"sparse-map does not take --set {', '.join(unknown)}; it takes "
                                 f"{', '.join(sorted(known | set(FIT_KEYS)))} "
                                 "(and --steps, --lr, --seed)")
    try:
        family = read_meta(adapter_dir(init_adapter)).get("method") or "infonce"
        cfg = SparseMapConfig(steps=steps, seed=seed, **({"lr": lr} if lr else {}), **hp)
        record = fit_sparse_map(data, out, model=model, family=family, adapter=init_adapter, split=split,
                                corpora=corpora, config=cfg, eval_every=eval_every or 100, device=device,
                                **fit_keys)
    except (ValueError, TypeError) as e:  # InvalidInputError is a ValueError
        raise typer.BadParameter(str(e)) from None
    typer.echo(json.dumps(record, indent=1, default=str))


def _parse_stop_at(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``--stop-at``: "HH:MM" (its next occurrence in local time), "+MINUTES" or "@UNIX_SECONDS" (a
    deadline fixed once for a chain of commands) -> a Unix time."""
    import datetime as dt
    import time

    if value is None:
        return None
    now = time.time() if now is None else now
    text = value.strip()
    if text.startswith("@"):
        try:
            return float(text[1:])
        except ValueError:
            raise typer.BadParameter(f"--stop-at {value!r}: @UNIX_SECONDS needs a number") from None
    if text.startswith("+"):
        try:
            minutes = float(text[1:])
        except ValueError:
            raise typer.BadParameter(f"--stop-at {value!r}: +MINUTES needs a number, e.g. +90") from None
        if minutes <= 0:
            raise typer.BadParameter(f"--stop-at {value!r}: the minutes must be > 0")
        return now + 60.0 * minutes
    try:
        at = dt.datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise typer.BadParameter(f"--stop-at {value!r}: give HH:MM (local time) or +MINUTES") from None
    today = dt.datetime.fromtimestamp(now)
    when = dt.datetime.combine(today.date(), at)
    if when.timestamp() <= now:
        when += dt.timedelta(days=1)
    return when.timestamp()


def _report_pause(summary: dict | list[dict], stage_names: list[str] | None) -> None:
    """Say where an unfinished run stopped and how to continue; a signal's stop exits 128 + signal."""
    last = summary[-1] if isinstance(summary, list) else summary
    if last.get("interrupted"):
        from alignir.encoders.train.stopping import signal_exit_code

        flag = "--stop-at" if last.get("paused") == "stop_at" else "--stop-after"
        why = f"stopped by {last['signal']}" if last.get("signal") else f"paused ({flag})"
        typer.secho(f"{why} at step {last['steps']} of {last['method']}/{last['stage']}; checkpoint saved in "
                    f"{last['out']}/checkpoint: rerun the same command to continue", err=True, fg=typer.colors.YELLOW)
        if last.get("signal"):
            raise typer.Exit(signal_exit_code(last["signal"]))
    elif stage_names and len(summary) < len(stage_names):
        typer.secho(f"paused (--stop-after) after stage {last['stage']}; rerun the same command to start "
                    f"{stage_names[len(summary)]}", err=True, fg=typer.colors.YELLOW)
