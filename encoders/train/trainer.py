"""The LoRA training loop shared by all methods: data, optimizer, schedule, log, checkpoint, resume.

CPU toy scale: fp32, a few steps, small batches. GPU paper scale: ``dtype="bf16"``,
``grad_accum`` for the effective batch, ``grad_checkpointing=True``. Each micro-batch's gradient
comes from ``Method.backward`` (the loss's backward; InfoNCE's ``grad_cache`` computes it with
gradient caching, so one batch holds more in-batch negatives than its activations fit). Output directory:
the final adapter (peft files + soft tokens + ``alignir_train.json``), ``loss_log.jsonl`` (one
line per optimizer step), ``eval_log.jsonl`` (loss on ``eval_examples`` held-out examples before
training, every ``eval_every`` steps and at the end: one batch's loss is noisy, this one is the
training curve) and ``checkpoint/`` (latest state, for ``resume``). SIGTERM or Ctrl-C stops a run
after the step in flight with a checkpoint (encoders/train/stopping.py), like ``stop_after``.
"""
from __future__ import annotations

from alignir.environment import describe_environment
from alignir.errors import InvalidInputError
from alignir.io import replace_dir

import copy
import json
import logging
import random
import shutil
import time
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from alignir.encoders.train.adapter import META_FILE, add_lora, load_trainable_adapter, read_meta, save_adapter
from alignir.encoders.train.data import Pair, batch_indices, describe_texts, load_texts, normal_query
from alignir.encoders.train.framing import frame_queries
from alignir.encoders.train.text_variants import vary_text_forms
from alignir.encoders.train.mix import load_mix
from alignir.encoders.train.stopping import stop_on_signals

log = logging.getLogger(__name__)

__all__ = ["TrainConfig", "METHODS", "method_class", "train", "trainable_sha256", "DEFAULT_LR"]

METHODS = {
    "infonce": "alignir.encoders.train.infonce:InfoNCEMethod",
    "autoregembed": "alignir.encoders.train.autoregembed:AutoRegEmbedMethod",
    "llm2comp": "alignir.encoders.train.llm2comp:LLM2CompMethod",
    "gircse": "alignir.encoders.train.gircse:GircseMethod",
}

#: learning rates of the papers (AutoRegEmbed App. A; LLM2Comp App. 2.1; GIRCSE App. C)
DEFAULT_LR = {
    ("infonce", "contrastive"): 1e-4,
    ("autoregembed", "ic"): 2e-5, ("autoregembed", "ic-text"): 2e-5, ("autoregembed", "cda"): 5e-6,
    ("autoregembed", "contrastive"): 1e-4,  # §4.1 gives none; its InfoNCE baselines' best (App. A)
    ("llm2comp", "rc"): 1e-4, ("llm2comp", "nll"): 1e-4, ("llm2comp", "ctkd"): 1e-4,
    ("llm2comp", "ucl"): 3e-5, ("llm2comp", "scl"): 1e-4,  # App. 2.1: pretext 1e-4, UCL 3e-5, SCL 1e-4
    ("gircse", "icr"): 1e-5,
}


def method_class(name: str):
    import importlib

    if name not in METHODS:
        raise InvalidInputError(f"unknown training method {name!r}; use one of {sorted(METHODS)}")
    mod, _, cls = METHODS[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


@dataclass
class TrainConfig:
    method: str
    data: str
    out: str
    stage: str | None = None  # default: the method's first stage
    model: str = "smollm2-135m"
    steps: int = 100
    batch_size: int = 4
    grad_accum: int = 1
    lr: float | None = None  # default: the paper's (DEFAULT_LR)
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    max_length: int = 128
    target_length: int = 128
    split: str = "train"
    n_negatives: int = 1
    data_mix: str | None = None  # pair sources: "supervised,title,crop" (caps: "title=2000"); None: supervised
    corpora: list[str] | None = None  # corpora of the unsupervised sources / raw-text stages (default: [data])
    max_examples: int | None = None
    query_frames: float = 0.0  # share of the training pairs whose query is framed as a request (framing.py)
    text_forms: float = 0.0  # share of the training queries read in capitals or lower case (text_variants.py)
    seed: int = 0
    device: str = "auto"
    dtype: str | None = None  # None: fp32 on CPU, bf16/fp16 on CUDA
    grad_checkpointing: bool = False
    init_adapter: str | None = None  # continue from a previous stage (IC -> CDA, CTKD -> UCL -> SCL)
    save_every: int = 0  # steps between checkpoints (0: only at the end)
    resume: bool = True
    resume_changed_data: bool = False  # resume even when the examples differ from the checkpoint's (recorded)
    progress: bool = True
    stop_after: int | None = None  # pause after this many steps of this run (checkpoint saved, no final adapter)
    stop_at: float | None = None  # pause before a step that would end past this Unix time (checkpoint saved)
    eval_examples: int = 0  # hold out this many examples (seeded); their loss is logged without gradients
    eval_every: int = 0  # steps between held-out evaluations (0: only before the first and after the last step)
    #: examples per chunk of the held-out loss (0: batch_size). A contrastive loss depends on how many
    #: candidates a chunk holds, so runs of different batch sizes compare at one chunk size
    eval_batch_size: int = 0
    hp: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        cls = method_class(self.method)
        if self.stage is None:
            self.stage = next(iter(cls.STAGES))
        if self.stage not in cls.STAGES:
            raise InvalidInputError(f"unknown stage {self.stage!r} for {self.method}; use one of {list(cls.STAGES)}")
        for nm in ("steps", "batch_size", "grad_accum", "lora_r", "max_length", "target_length"):
            if int(getattr(self, nm)) < 1:
                raise InvalidInputError(f"{nm} must be >= 1, got {getattr(self, nm)}")
        if self.lr is not None and self.lr <= 0:
            raise InvalidInputError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup_ratio < 1:
            raise InvalidInputError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not Path(self.data).exists():
            raise InvalidInputError(f"training data {self.data!r} does not exist")
        if isinstance(self.corpora, (str, Path)):  # one corpus (e.g. --stage-option scl.corpora=DIR), not its characters
            self.corpora = [str(self.corpora)]
        for c in self.corpora or []:
            if not Path(c).exists():
                raise InvalidInputError(f"corpus {c!r} does not exist")
        if self.max_examples is not None and int(self.max_examples) < 1:
            raise InvalidInputError(f"max_examples must be >= 1 (or unset for all), got {self.max_examples}")
        if int(self.n_negatives) < 0:
            raise InvalidInputError(f"n_negatives must be >= 0, got {self.n_negatives}")
        if self.data_mix is not None and not isinstance(self.data_mix, str):
            raise InvalidInputError(f"data_mix must be a spec such as 'supervised,title=2000,crop=2000', "
                                    f"got {self.data_mix!r}")
        if not 0.0 <= float(self.query_frames) <= 1.0:
            raise InvalidInputError(f"query_frames must be a share in [0, 1], got {self.query_frames}")
        if self.query_frames and cls.STAGES[self.stage] != "pairs":
            raise InvalidInputError(f"stage {self.method}/{self.stage} trains on raw texts; query framing applies "
                                    f"to pair stages only")
        if not 0.0 <= float(self.text_forms) <= 1.0:
            raise InvalidInputError(f"text_forms must be a share in [0, 1], got {self.text_forms}")
        if self.text_forms and cls.STAGES[self.stage] != "pairs":
            raise InvalidInputError(f"stage {self.method}/{self.stage} trains on raw texts; text-form variants "
                                    f"apply to pair stages only")
        if self.eval_examples < 0 or self.eval_every < 0 or self.eval_batch_size < 0:
            raise InvalidInputError(f"eval_examples, eval_every and eval_batch_size must be >= 0, got "
                                    f"{self.eval_examples}, {self.eval_every}, {self.eval_batch_size}")


def negative_candidates(batch: list[Pair]) -> int:
    """How many (query, document) pairs of a batch a contrastive loss can use as negatives: hard
    negatives and other examples' documents that are not relevant to the query (base.in_batch_candidates)."""
    from alignir.encoders.train.base import in_batch_candidates, pair_texts

    _, docs, _ = pair_texts(batch)
    cand = in_batch_candidates(batch, docs)
    return sum(1 for i, p in enumerate(batch) for j, d in enumerate(docs)
               if j != i and d != p.positive and (cand is None or bool(cand[i, j])))


def check_negatives(data: list[Pair], batch_size: int) -> None:
    """Refuse pair data on which no batch can hold a negative (every loss 0, nothing learnt):
    no example has hard negatives and a batch holds one example, or one positive for all."""
    if any(p.negatives for p in data):
        return
    if batch_size < 2 or len({p.positive for p in data}) < 2:
        raise InvalidInputError(f"none of the {len(data)} training examples has a hard negative and "
                                f"{'batch_size is 1' if batch_size < 2 else 'they share one positive'}: no batch "
                                f"holds a negative candidate, so the contrastive loss would be 0 with no "
                                f"gradient; add negatives (or --negatives N with BEIR data) or more examples")


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _lr_lambda(total: int, warmup: int):
    def f(step: int) -> float:  # linear warm-up, then linear decay to 0
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


def _load_data(cfg: TrainConfig, kind: str) -> tuple[list, dict]:
    """(examples, description of the data for the saved config)."""
    if kind == "pairs":
        return load_mix(cfg.data, cfg.data_mix, cfg.split, n_negatives=cfg.n_negatives, seed=cfg.seed,
                        max_examples=cfg.max_examples, corpora=cfg.corpora)
    if cfg.data_mix:
        raise InvalidInputError(f"stage {cfg.method}/{cfg.stage} trains on raw texts; a data mix applies to pair stages only")
    texts: list[str] = []
    for src in cfg.corpora or [cfg.data]:
        texts.extend(load_texts(src, max_texts=cfg.max_examples))
    desc = describe_texts(cfg.data, texts)
    if cfg.corpora:
        desc["corpora"] = list(cfg.corpora)
    return texts, desc


def trainable_sha256(peft_model, extra: dict[str, torch.Tensor]) -> str:
    """sha256 of every trained tensor (LoRA weights by name + soft tokens) as float32: equal hashes
    mean a stage starts exactly where the previous one ended."""
    import hashlib

    from peft import get_peft_model_state_dict

    h = hashlib.sha256()
    tensors = {f"lora:{k}": v for k, v in get_peft_model_state_dict(peft_model).items()}
    tensors.update({f"extra:{k}": v for k, v in extra.items()})
    for k in sorted(tensors):
        h.update(k.encode() + b"\0" + tensors[k].detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def split_heldout(data: list, n: int, seed: int) -> tuple[list, list]:
    """(train, held-out): ``n`` examples drawn with a seeded permutation are held out (order kept).

    Pairs are held out a whole query at a time (all pairs whose query has the same text,
    ``data.normal_query``), so no held-out query also trains: queries are drawn in a seeded order
    and each is taken if its pairs still fit in ``n``. With one pair per query this is the plain
    permutation of the examples."""
    if n <= 0:
        return data, []
    if n >= len(data):
        raise InvalidInputError(f"eval_examples={n} leaves no training data (only {len(data)} examples)")
    groups: dict[Any, list[int]] = {}
    for i, x in enumerate(data):
        groups.setdefault(normal_query(x.query) if isinstance(x, Pair) else i, []).append(i)
    members = list(groups.values())
    held: set[int] = set()
    for g in np.random.default_rng([seed, 1]).permutation(len(members)):
        if len(held) + len(members[int(g)]) <= n:
            held.update(members[int(g)])
        if len(held) == n:
            break
    return [x for i, x in enumerate(data) if i not in held], [x for i, x in enumerate(data) if i in held]


def heldout_loss(method, held: list, batch_size: int, seed: int) -> dict[str, float]:
    """Mean of the method's loss logs over ``held`` in fixed chunks of about ``batch_size`` (the
    in-batch negatives of a training step), without gradients and without touching the training
    RNG (dropout views are drawn from their own seeded stream)."""
    n_chunks = max(1, len(held) // batch_size)
    bounds = np.linspace(0, len(held), n_chunks + 1).round().astype(int)
    agg: dict[str, float] = {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for a, b in zip(bounds[:-1], bounds[1:]):
            _, logs = method.loss(held[a:b])
            for k, v in logs.items():
                agg[k] = agg.get(k, 0.0) + v * (b - a) / len(held)
    return agg


#: settings that may change between a run and its resumption (where output goes, how often to
#: save / evaluate, progress bars); every other TrainConfig field must match the checkpoint's
RESUME_FREE = frozenset({"out", "resume", "resume_changed_data", "progress", "save_every", "eval_every", "stop_after", "stop_at",
                         "device"})


def _as_resumed(config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's (or a run's) config as the resume check compares it: a setting the
    checkpoint predates counts as its default (added settings default to the behaviour before
    them), and the held-out chunk size as the one used (0 means batch_size), so that the held-out
    log of a resumed run never mixes chunk sizes while "0" and the batch size itself both match."""
    defaults: dict[str, Any] = {}
    for f in fields(TrainConfig):
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            defaults[f.name] = f.default_factory()
    out = {**json.loads(json.dumps(defaults, default=str)), **config}
    out["eval_batch_size"] = out.get("eval_batch_size") or out.get("batch_size")
    return out


def check_resumable(ckpt: Path, cfg: TrainConfig, data_sha256: str | None = None) -> str | None:
    """Refuse to resume from ``ckpt`` when ``cfg`` differs from the config the checkpoint was
    made with: the optimizer, the schedule (learning rate, total steps) and the data order come
    from the checkpoint, so a changed setting would be recorded but not used. Likewise when the
    examples (``data_sha256``, :func:`examples_sha256`) differ from the checkpoint's: an edited
    pairs file or corpus would silently shift the data order (checkpoints that predate the
    hash are not checked). With ``cfg.resume_changed_data`` changed examples are accepted and the
    checkpoint's hash is returned, for the run to record the change (else None)."""
    meta_file = ckpt / META_FILE
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    saved = meta.get("config")
    if saved is None:
        raise InvalidInputError(f"{ckpt} holds no training config, so it cannot be checked for resuming; "
                                f"start over with --no-resume")
    saved, now = _as_resumed(saved), _as_resumed(json.loads(json.dumps(asdict(cfg), default=str)))
    diff = sorted(k for k in set(saved) | set(now) if k not in RESUME_FREE and saved.get(k) != now.get(k))
    lr_then = meta.get("lr")
    lr_now = cfg.lr or DEFAULT_LR.get((cfg.method, cfg.stage), 1e-4)
    if not diff and lr_then is not None and float(lr_then) != float(lr_now):
        diff = ["lr"]  # the same config, but the method's default learning rate changed meanwhile
        saved, now = {**saved, "lr": lr_then}, {**now, "lr": lr_now}
    if diff:
        shown = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in diff)
        raise InvalidInputError(f"cannot resume {ckpt.parent}: its checkpoint was made with other settings ({shown}); "
                                f"rerun with the checkpoint's settings, or start over with --no-resume")
    data_then = meta.get("data_sha256")
    if data_sha256 and data_then and data_then != data_sha256:
        if cfg.resume_changed_data:
            return data_then
        raise InvalidInputError(f"cannot resume {ckpt.parent}: its training examples changed since the checkpoint "
                                f"(sha256 {data_then[:12]}… -> {data_sha256[:12]}…: an edited pairs file or corpus?); "
                                f"restore them, resume with them anyway (--resume-changed-data), or start over with --no-resume")
    return None


def examples_sha256(data: list, held: list) -> str:
    """sha256 of the training and held-out examples in order (pairs or raw texts): a resumed run's
    data order is the checkpoint's, so it must see the same examples."""
    import hashlib

    h = hashlib.sha256()
    for part in (data, held):
        for ex in part:
            row = asdict(ex) if hasattr(ex, "__dataclass_fields__") else ex
            h.update(json.dumps(row, ensure_ascii=False, sort_keys=True).encode("utf-8", "surrogatepass") + b"\n")
        h.update(b"\x00")
    return h.hexdigest()


def _save_checkpoint(ckpt: Path, method, peft_model, opt, sched, step: int, meta: dict, seconds: float,
                     cpu_seconds: float = 0.0) -> None:
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_adapter(peft_model, tmp, method.extra_tensors(), meta)
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "torch_rng": torch.get_rng_state()}, tmp / "trainer_state.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "seconds": seconds, "cpu_seconds": cpu_seconds}))
    replace_dir(tmp, ckpt)


def train(cfg: TrainConfig, loaded=None, return_method: bool = False) -> dict[str, Any]:
    """Run one training stage; returns a summary (steps, seconds, final loss, output dir, and
    ``steps_run``: the steps this call ran). A run paused by ``stop_after`` or ``stop_at`` (``paused``:
    which of the two) or stopped by a signal
    returns ``interrupted: True`` (``signal``: its name, or None for a pause) after checkpointing.

    ``loaded`` (an ``encoders.models.LoadedModel``) is used when given — its model is copied,
    never modified — else ``cfg.model`` is loaded. ``return_method`` adds the live Method object
    (its ``model`` is the trained peft model) to the summary under ``"method_obj"``.
    """
    cfg.validate()
    from alignir.encoders.models import load_model

    _seed_all(cfg.seed)
    if loaded is None:
        loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    cls = method_class(cfg.method)
    kind = cls.STAGES[cfg.stage]
    examples, data_desc = _load_data(cfg, kind)
    data, held = split_heldout(examples, cfg.eval_examples, cfg.seed)
    if kind == "pairs":
        check_negatives(data, cfg.batch_size)
    if cfg.query_frames:  # the training pairs only: held-out losses stay those of unframed queries
        data, data_desc["query_frames"] = frame_queries(data, float(cfg.query_frames), cfg.seed)
    if cfg.text_forms:  # likewise: held-out pairs stay in their natural form
        data, data_desc["text_forms"] = vary_text_forms(data, float(cfg.text_forms), cfg.seed)
    data_desc = {**data_desc, "train": len(data), "heldout": len(held)}
    data_sha = examples_sha256(data, held)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint"

    model = copy.deepcopy(loaded.model)
    model.train()
    if cfg.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    extra: dict[str, torch.Tensor] = {}
    resume_from = ckpt if (cfg.resume and (ckpt / "trainer_state.json").is_file()) else None
    data_then = check_resumable(resume_from, cfg, data_sha) if resume_from is not None else None
    if resume_from is not None:
        peft_model, extra, _ = load_trainable_adapter(model, resume_from)
    elif cfg.init_adapter:
        peft_model, extra, _ = load_trainable_adapter(model, cfg.init_adapter)
        _warn_if_map(cfg.init_adapter)
    else:
        peft_model = add_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout)
    peft_model.train()

    method = cls(peft_model, loaded, cfg.stage, dict(cfg.hp), extra, cfg.max_length, cfg.target_length)
    if resume_from is not None and getattr(method, "ref", None) is not None:
        # p_ref must be the model as the stage *started*, not the resumed state
        from alignir.encoders.embedders.generative import init_soft_tokens

        base = copy.deepcopy(loaded.model)
        if cfg.init_adapter:
            ref, ref_extra, _ = load_trainable_adapter(base, cfg.init_adapter)
        else:
            ref, ref_extra = add_lora(base, cfg.lora_r, cfg.lora_alpha), {}  # fresh LoRA == base model
        method.ref = ref.eval()
        for p in method.ref.parameters():
            p.requires_grad_(False)
        soft = ref_extra.get(method.soft_key)
        method.ref_soft = (soft if soft is not None else init_soft_tokens(base, int(method.hp["k"]))).float().to(method.device)
    params = [p for p in peft_model.parameters() if p.requires_grad] + method.extra_parameters()
    lr = cfg.lr or DEFAULT_LR.get((cfg.method, cfg.stage), 1e-4)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg.steps, int(cfg.warmup_ratio * cfg.steps)))
    start, seconds_before, cpu_before = 0, 0.0, 0.0
    if resume_from is not None:
        state = torch.load(resume_from / "trainer_state.pt", weights_only=True)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        progress = json.loads((resume_from / "trainer_state.json").read_text())
        start, seconds_before = int(progress["step"]), float(progress.get("seconds", 0.0))
        cpu_before = float(progress.get("cpu_seconds", 0.0))
        finished = out / META_FILE
        if start >= cfg.steps and finished.is_file():  # nothing left to do: report the finished run
            done = json.loads(finished.read_text())
            return _summary(out, cfg, done["steps"], done["train_seconds"], done.get("final", {}),
                            done.get("heldout"), method if return_method else None, already_complete=True,
                            steps_run=0)

    meta = {
        "method": cfg.method, "stage": cfg.stage, "hp": method.hp, "config": asdict(cfg), "lr": lr,
        "base_model": dict(loaded.identity), "embedder": method.embedder_family(),
        "embedder_options": method.embedder_options(), "n_examples": len(data), "data": data_desc,
        "data_sha256": data_sha,
        "init_adapter_final_sha256": read_meta(cfg.init_adapter).get("final_weights_sha256") if cfg.init_adapter else None,
    }
    if start == 0:
        meta["start_weights_sha256"] = trainable_sha256(peft_model, method.extra_tensors())
    elif (resume_from / META_FILE).is_file():
        before = json.loads((resume_from / META_FILE).read_text())
        meta["start_weights_sha256"] = before.get("start_weights_sha256")
        changes = list(before.get("data_changes", []))
        if data_then is not None:  # the steps from `start` on drew other examples than the steps before
            changes.append({"step": start, "from_sha256": data_then, "to_sha256": data_sha})
            warnings.warn(f"resuming {out} at step {start} with changed training examples "
                          f"(sha256 {data_then[:12]}… -> {data_sha[:12]}…); recorded in the run's data_changes",
                          stacklevel=2)
        if changes:
            meta["data_changes"] = changes
    log_path = out / "loss_log.jsonl"
    eval_path = out / "eval_log.jsonl"
    if start == 0:
        for p in (log_path, eval_path):
            if p.exists():
                p.unlink()
    else:  # a run killed between checkpoints logged steps that the resume now runs again
        for p in (log_path, eval_path):
            _drop_rows_after(p, start)
    # a resumed run continues the held-out curve of the steps before it (its first point is step 0)
    evals: list[dict[str, float]] = ([json.loads(x) for x in eval_path.read_text().splitlines() if x.strip()]
                                     if start > 0 and eval_path.is_file() else [])

    def run_eval(step: int) -> None:
        if not held:
            return
        row = {"step": step, **heldout_loss(method, held, cfg.eval_batch_size or cfg.batch_size, cfg.seed)}
        evals.append(row)
        with open(eval_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")

    if start == 0:
        run_eval(0)
    batches = batch_indices(len(data), cfg.batch_size, cfg.seed, start * cfg.grad_accum)
    t0 = time.perf_counter() - seconds_before  # seconds count the whole run across resumes
    c0 = time.process_time() - cpu_before  # CPU seconds of this process (all its threads), likewise
    last: dict[str, float] = {}
    bar = tqdm(range(start, cfg.steps), desc=f"train {cfg.method}/{cfg.stage}", disable=not cfg.progress,
               initial=start, total=cfg.steps)
    with open(log_path, "a") as log, stop_on_signals() as stop:
        for step in bar:
            step_started = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            agg: dict[str, float] = {}
            for _ in range(cfg.grad_accum):
                batch = [data[i] for i in next(batches)]
                if kind == "pairs" and not negative_candidates(batch):
                    raise InvalidInputError(f"step {step}: no example of this batch has a negative candidate (no hard "
                                            f"negatives, every other document relevant to it): its contrastive loss "
                                            f"is 0 with no gradient; add negatives or raise batch_size")
                try:
                    logs = method.backward(batch, 1.0 / cfg.grad_accum)
                except FloatingPointError as e:
                    raise FloatingPointError(f"step {step}: {e}") from None
                for k, v in logs.items():
                    agg[k] = agg.get(k, 0.0) + v / cfg.grad_accum
            if cfg.max_grad_norm and cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            sched.step()
            last = {"step": step + 1, **agg, "lr": sched.get_last_lr()[0], "seconds": time.perf_counter() - t0,
                    "cpu_seconds": time.process_time() - c0}
            log.write(json.dumps(last) + "\n")
            log.flush()
            bar.set_postfix(loss=f"{agg.get('loss', float('nan')):.4f}")
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                run_eval(step + 1)
            if step + 1 < cfg.steps:
                # a pause (--stop-after, or --stop-at: the next step, as long as this one, would end past
                # it) or a stop signal checkpoints here too, so that the same command continues exactly;
                # read once, so a signal arriving after the save waits for the next step
                took = time.perf_counter() - step_started
                paused = ("stop_after" if cfg.stop_after and step + 1 - start >= cfg.stop_after else
                          "stop_at" if cfg.stop_at and time.time() + took > cfg.stop_at else None)
                halt = bool(stop) or paused is not None
                if halt or (cfg.save_every and (step + 1) % cfg.save_every == 0):
                    _save_checkpoint(ckpt, method, peft_model, opt, sched, step + 1, meta, time.perf_counter() - t0,
                                     time.process_time() - c0)
                if halt:
                    bar.close()
                    return _summary(out, cfg, step + 1, last["seconds"], last, None, interrupted=True,
                                    steps_run=step + 1 - start, signal=stop.signal,
                                    paused=None if stop.signal else paused)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    run_eval(cfg.steps)
    meta.update({"steps": cfg.steps, "train_seconds": seconds, "train_cpu_seconds": cpu_seconds,
                 "examples_seen": cfg.steps * cfg.batch_size * cfg.grad_accum, "final": last,
                 "final_weights_sha256": trainable_sha256(peft_model, method.extra_tensors()),
                 # the machine that finished the run: its seconds depend on it
                 "environment": describe_environment(str(next(peft_model.parameters()).device))})
    if held:
        meta["heldout"] = {"n": len(held), "first": evals[0] if evals else None, "last": evals[-1]}
    peft_model.eval()
    save_adapter(peft_model, out, method.extra_tensors(), meta)
    _save_checkpoint(ckpt, method, peft_model, opt, sched, cfg.steps, meta, seconds, cpu_seconds)
    return _summary(out, cfg, cfg.steps, seconds, last, meta.get("heldout"), method if return_method else None,
                    steps_run=cfg.steps - start)


def _drop_rows_after(path: Path, step: int) -> None:
    """Keep the rows of a jsonl step log up to ``step``: those after it were not checkpointed, and a
    line cut short by the kill does not parse."""
    if not path.is_file():
        return
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    kept = [x for x in lines if _row_step(x) <= step]
    if len(kept) < len(lines):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        tmp.replace(path)


def _row_step(line: str) -> float:
    """The step of one log line, or infinity for a line that is not a whole JSON row."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return float("inf")


def _summary(out: Path, cfg: TrainConfig, steps: int, seconds: float, final: dict, heldout: dict | None,
             method_obj: Any = None, **flags: Any) -> dict[str, Any]:
    """What :func:`train` returns for a completed stage (``method_obj`` added when given)."""
    summary = {"out": str(out), "steps": steps, "train_seconds": seconds, "final": final,
               "method": cfg.method, "stage": cfg.stage, "heldout": heldout, **flags}
    if method_obj is not None:
        summary["method_obj"] = method_obj
    return summary


def _warn_if_map(adapter: str) -> None:
    """An aligned-token map (encoders.train.sparse_map) belongs to the vectors it was fitted on:
    training the LoRA weights moves them, so the map is not carried into the new adapter."""
    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE, adapter_dir

    if (adapter_dir(adapter) / SPARSE_MAP_FILE).is_file():
        log.warning("%s carries an aligned-token map; it is not carried into the trained adapter (fit a new one "
                    "with `alignir train sparse-map --init-adapter OUT`)", adapter)
