"""peft LoRA adapters of the trained embedders: create, save, load by path, fingerprint.

An adapter directory holds peft's ``adapter_config.json`` + ``adapter_model.safetensors``, plus
``alignir_extra.safetensors`` (trained soft-token embeddings: AutoRegEmbed compress tokens,
LLM2Comp memory tokens) and ``alignir_train.json`` (method, stage, hyper-parameters, base model).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError
from alignir.index.io import sha256_file

import contextlib
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import torch

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

EXTRA_FILE = "alignir_extra.safetensors"
META_FILE = "alignir_train.json"
_HASHED = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", EXTRA_FILE, META_FILE)

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


def read_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path) / META_FILE
    return json.loads(p.read_text()) if p.is_file() else {}


def _read_extra(path: Path, device, dtype) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    f = path / EXTRA_FILE
    if not f.is_file():
        return {}
    return {k: v.to(device=device, dtype=dtype) for k, v in load_file(str(f)).items()}


def _check_dir(path: str | Path) -> Path:
    from alignir.encoders.shipped import resolve_adapter

    p = resolve_adapter(path)
    if not (p / "adapter_config.json").is_file():
        raise InvalidInputError(f"adapter {str(path)!r} is not a peft adapter directory (no adapter_config.json)")
    return p


def load_adapter(model: torch.nn.Module, path: str | Path):
    """A frozen copy of ``model`` with the adapter at ``path`` applied (the shared model is untouched).

    Returns (peft_model in eval mode, extra tensors, meta dict).
    """
    from peft import PeftModel

    p = _check_dir(path)
    base = copy.deepcopy(model)
    pm = PeftModel.from_pretrained(base, str(p), is_trainable=False).eval()
    w = base.get_input_embeddings().weight
    return pm, _read_extra(p, w.device, w.dtype), read_meta(p)


def load_trainable_adapter(model: torch.nn.Module, path: str | Path):
    """Wrap ``model`` in place with the adapter at ``path``, trainable (continue a previous stage)."""
    from peft import PeftModel

    p = _check_dir(path)
    pm = PeftModel.from_pretrained(model, str(p), is_trainable=True)
    w = model.get_input_embeddings().weight
    return pm, _read_extra(p, w.device, torch.float32), read_meta(p)


def adapter_hash(path: str | Path) -> str:
    """sha256 over the adapter's config, weights, extra tensors and training config."""
    p = _check_dir(path)
    h = hashlib.sha256()
    for name in _HASHED:
        f = p / name
        if f.is_file():
            h.update(name.encode() + b"\0" + sha256_file(f).encode() + b"\n")
    return h.hexdigest()


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
