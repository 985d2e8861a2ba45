"""peft LoRA adapters of the trained embedders (training side): create, save, continue, freeze.

Reading adapters (load by path, metadata, fingerprint) is inference code in
``alignir.encoders.embedders.adapters`` and is re-exported here.
"""
from __future__ import annotations

import contextlib
import json
import textwrap
from pathlib import Path
from typing import Any

import torch

from alignir.encoders.embedders.adapters import (EXTRA_FILE, META_FILE, SPARSE_MAP_FILE, adapter_dir, adapter_hash,
                                                 load_adapter, read_extra, read_meta)
from alignir.encoders.train.teacher import ALIGNIR_PREFIX, GEMMA_TEACHERS
from alignir.errors import InvalidInputError

__all__ = [
    "EXTRA_FILE",
    "META_FILE",
    "DEFAULT_TARGETS",
    "add_lora",
    "save_adapter",
    "load_adapter",
    "load_trainable_adapter",
    "adapter_hash",
    "read_meta",
    "frozen",
    "package_adapter",
    "gemma_teacher",
    "derivative_notice",
    "write_derivative_notice",
]

#: attention q/k/v/o + MLP projections (LLM2Comp App. 2.1 names q, v, o, up, down, gate)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def add_lora(model: torch.nn.Module, r: int = 16, alpha: int = 32, dropout: float = 0.0,
             target_modules: tuple[str, ...] | list[str] | None = None):
    """Wrap ``model`` (in place) with a fresh trainable LoRA adapter; returns the PeftModel."""
    from peft import LoraConfig, get_peft_model

    if r < 1:
        raise InvalidInputError(f"LoRA rank must be >= 1, got {r}")
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in (target_modules or DEFAULT_TARGETS) if t in names]
    if not targets:
        raise InvalidInputError(f"none of the LoRA target modules {list(target_modules or DEFAULT_TARGETS)} exist in the model")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    return get_peft_model(model, cfg)


def save_adapter(peft_model, out_dir: str | Path, extra: dict[str, torch.Tensor] | None, meta: dict[str, Any]) -> Path:
    """Write adapter weights, extra soft-token tensors and the training config to ``out_dir``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out))
    save_file({k: v.detach().float().cpu().contiguous() for k, v in (extra or {}).items()}, str(out / EXTRA_FILE))
    (out / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    return out


def load_trainable_adapter(model: torch.nn.Module, path: str | Path):
    """Wrap ``model`` in place with the adapter at ``path``, trainable (continue a previous stage)."""
    from peft import PeftModel

    p = adapter_dir(path)
    pm = PeftModel.from_pretrained(model, str(p), is_trainable=True)
    w = model.get_input_embeddings().weight
    return pm, read_extra(p, w.device, torch.float32), read_meta(p)


@contextlib.contextmanager
def frozen(model):
    """Context in which ``model`` runs without its LoRA adapter: the frozen LLM g_φ / decoder D.

    peft's ``disable_adapter`` re-enables the adapter on exit with ``requires_grad=True`` on its
    LoRA weights, which would silently unfreeze a frozen reference model (AutoRegEmbed p_ref);
    every parameter's ``requires_grad`` is restored to what it was on entry.
    """
    fn = getattr(model, "disable_adapter", None)
    if not callable(fn):
        yield model
        return
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        with fn():
            yield model
    finally:
        for p, rg in flags:
            if p.requires_grad != rg:
                p.requires_grad_(rg)


def package_adapter(src: str | Path, dest: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Copy a trained adapter into ``dest`` for shipping, its LoRA weights cast to ``dtype``
    (fp16 halves the fp32 training weights; the soft-token extras keep fp32). The copy's
    alignir_train.json says what was cast and the sha256 of the training run's own folder, so
    a shipped adapter names the run it came from. ``dest`` must not exist or be empty."""
    from safetensors.torch import load_file, save_file

    from alignir.encoders.embedders.adapters import adapter_dir

    p = adapter_dir(src)
    out = Path(dest)
    if out.exists() and any(out.iterdir()):
        raise InvalidInputError(f"{out} is not empty: package into a new folder")
    if not (p / "adapter_model.safetensors").is_file():
        raise InvalidInputError(f"adapter {str(src)!r} has no adapter_model.safetensors to package")
    meta = read_meta(p)
    if not meta:
        raise InvalidInputError(f"adapter {str(src)!r} has no {META_FILE}: a shipped adapter must say how it was trained")
    out.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(p / "adapter_model.safetensors"))
    cast = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in weights.items()}
    save_file(cast, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out / "adapter_config.json").write_bytes((p / "adapter_config.json").read_bytes())
    if (p / EXTRA_FILE).is_file():
        (out / EXTRA_FILE).write_bytes((p / EXTRA_FILE).read_bytes())
    else:
        save_file({}, str(out / EXTRA_FILE), metadata={"format": "pt"})
    src_dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in weights.values()})
    meta["weights_dtype"] = f"{str(dtype).removeprefix('torch.')} (cast from the {'/'.join(src_dtypes)} " \
                            "training weights for shipping)"
    meta["packaged_from_sha256"] = adapter_hash(p)
    (out / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    write_derivative_notice(out)
    return out


NOTICE_FILE = "NOTICE"


def gemma_teacher(spec: str | None) -> str | None:
    """The name of the Gemma model behind teacher ``spec`` when its outputs make a student a Model
    Derivative of Gemma (the Gemma Terms of Use count a model trained by distillation from a Gemma
    model's outputs as one), else None. ``alignir:NAME`` counts when that shipped model's own folder
    owes the notice (trained on Gemma, or taught by a Gemma model); a teacher named neither in
    :data:`~alignir.encoders.train.teacher.GEMMA_TEACHERS` nor as a shipped model counts when its
    name or path says "gemma" (a hub id or a local copy), so an unknown Gemma teacher is not missed."""
    name = str(spec or "").strip()
    if not name:
        return None
    if name.lower().startswith(ALIGNIR_PREFIX):
        from alignir.encoders.shipped import SHIPPED, adapter_dir

        shipped = name[len(ALIGNIR_PREFIX):]
        if shipped in SHIPPED:
            return f"{shipped} (an alignir model)" if derivative_notice(adapter_dir(shipped)) else None
    if name.lower() in GEMMA_TEACHERS:
        return GEMMA_TEACHERS[name.lower()]
    return name if "gemma" in name.lower() else None


def derivative_notice(folder: str | Path) -> str | None:
    """The NOTICE an adapter folder must carry when its base model's licence asks derivatives for
    one (Gemma), or when it was distilled from a teacher under such terms (the Gemma Terms of Use
    count a model trained on a Gemma model's outputs as a Model Derivative too: the ``teacher`` of
    its alignir_train.json, :func:`gemma_teacher`), naming what was
    modified (from its adapter_config.json and whether a map before the LM head is beside it); None
    when neither applies."""
    from alignir.encoders.models import GEMMA_TERMS, REGISTERED_MODELS

    folder = Path(folder)
    meta = read_meta(folder)
    base = (meta.get("base_model") or {}).get("name")
    registered = REGISTERED_MODELS.get(base or "")
    hp = meta.get("hp") if isinstance(meta.get("hp"), dict) else {}
    if registered is not None and registered.derivative_notice is not None:
        head = registered.derivative_notice
    elif (teacher := gemma_teacher(hp.get("teacher"))) is not None:
        head = textwrap.fill(f"This adapter is a LoRA adapter on {base or 'its base model'} trained by distillation "
                             f"from the outputs of {teacher}, and so a Model Derivative of Gemma.", width=100)
        head += "\n\n" + GEMMA_TERMS
    else:
        return None
    cfg = json.loads((folder / "adapter_config.json").read_text())
    modules = ", ".join(sorted(cfg.get("target_modules") or []))
    modified = (f"Modified from the base model: LoRA weights (r {cfg.get('r')}, alpha {cfg.get('lora_alpha')}) "
                f"on {modules}, trained by alignir")
    if (folder / SPARSE_MAP_FILE).is_file():
        modified += f"; a map before the LM head ({SPARSE_MAP_FILE}), fitted by alignir"
    modified += " (how: the alignir_*.json records beside this file; docs/training.md of the alignir repository)."
    return head + "\n" + textwrap.fill(modified, width=100) + "\n"


def write_derivative_notice(folder: str | Path) -> Path | None:
    """Write :func:`derivative_notice` into ``folder/NOTICE`` where one is due; its path, or None."""
    text = derivative_notice(folder)
    if text is None:
        return None
    path = Path(folder) / NOTICE_FILE
    path.write_text(text)
    return path
