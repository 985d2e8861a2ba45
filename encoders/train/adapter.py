"""peft LoRA adapters of the trained embedders (training side): create, save, continue, freeze.

Reading adapters (load by path, metadata, fingerprint) is inference code in
``alignir.encoders.embedders.adapters`` and is re-exported here.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch

from alignir.encoders.embedders.adapters import (EXTRA_FILE, META_FILE, adapter_dir, adapter_hash, load_adapter,
                                                 read_extra, read_meta)
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
