"""Reading trained LoRA adapters (inference side): load by path or shipped name, metadata, fingerprint.

An adapter directory holds peft's ``adapter_config.json`` + ``adapter_model.safetensors``, plus
``alignir_extra.safetensors`` (trained soft-token embeddings: AutoRegEmbed compress tokens,
LLM2Comp memory tokens) and ``alignir_train.json`` (method, stage, hyper-parameters, base model,
training data). It may also hold a trained aligned-token map (``alignir_sparse_map.safetensors``
and its training record ``alignir_sparse_map.json``, encoders.train.sparse_map): it changes the
aligned tokens, not the dense vectors, so it stays out of the adapter's hash and enters the
embedder's fingerprint on its own (``sparse_map_sha256``). Writing adapters is training code
(``alignir.encoders.train.adapter``).
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch

from alignir.errors import InvalidInputError
from alignir.io import sha256_file

log = logging.getLogger(__name__)

__all__ = ["EXTRA_FILE", "META_FILE", "SPARSE_MAP_FILE", "SPARSE_MAP_META", "SPARSE_MAP_KEY", "adapter_dir",
           "read_meta", "read_extra", "read_sparse_map", "load_adapter", "adapter_hash", "training_cost",
           "check_base_model"]

EXTRA_FILE = "alignir_extra.safetensors"
META_FILE = "alignir_train.json"
#: the trained map A [d, d] the aligned tokens are read through (E_g·A·h), and its training record
SPARSE_MAP_FILE = "alignir_sparse_map.safetensors"
SPARSE_MAP_META = "alignir_sparse_map.json"
SPARSE_MAP_KEY = "sparse_map"
_HASHED = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", EXTRA_FILE, META_FILE)


def read_meta(path: str | Path) -> dict[str, Any]:
    """The training config saved with an adapter (a folder, ``~/...`` or ``builtin:NAME``; {} when
    there is none)."""
    from alignir.encoders.shipped import resolve_adapter

    p = resolve_adapter(path) / META_FILE
    return json.loads(p.read_text()) if p.is_file() else {}


def training_cost(path: str | Path) -> dict[str, Any]:
    """What training made the adapter at ``path`` (a folder or ``builtin:NAME``): its stages,
    oldest first, following each stage's ``init_adapter`` back to the first, with steps, examples
    seen (steps × batch × grad_accum), CPU-seconds (process time, every thread) and data mix each,
    and their totals. A total is None when a stage predates the field (it did not record it).

    An ``init_adapter`` recorded as a relative path that no longer resolves is looked up as a
    sibling folder of the stage (the ``--stages`` layout OUT/STAGE).
    """
    from alignir.encoders.shipped import BUILTIN_PREFIX

    stages: list[dict[str, Any]] = []
    seen: set[Path] = set()
    p: Path | None = adapter_dir(path)
    while p is not None:
        if p.resolve() in seen:
            raise InvalidInputError(f"adapter {str(path)!r}: its init_adapter chain loops at {p}")
        seen.add(p.resolve())
        meta = read_meta(p)
        if not meta:
            raise InvalidInputError(f"adapter {str(p)!r} has no {META_FILE}: its training is unknown")
        cfg = meta.get("config", {})
        batch = cfg.get("batch_size")
        examples = meta.get("examples_seen")
        if examples is None and batch is not None:
            examples = meta.get("steps", 0) * batch * cfg.get("grad_accum", 1)
        stages.append({"adapter": str(p), "method": meta.get("method"), "stage": meta.get("stage"),
                       "steps": meta.get("steps"), "examples_seen": examples,
                       "cpu_seconds": meta.get("train_cpu_seconds"), "data": (meta.get("data") or {}).get("mix")})
        init = cfg.get("init_adapter")
        if init and not str(init).startswith(BUILTIN_PREFIX) and not (Path(init) / "adapter_config.json").is_file():
            init = p.parent / Path(init).name
        p = adapter_dir(init) if init else None
    stages.reverse()

    def total(key: str) -> Any:
        vals = [s[key] for s in stages]
        return None if any(v is None for v in vals) else sum(vals)

    return {"stages": stages, "steps": total("steps"), "examples_seen": total("examples_seen"),
            "cpu_seconds": total("cpu_seconds")}


def read_extra(path: str | Path, device, dtype) -> dict[str, torch.Tensor]:
    """The adapter's trained soft-token tensors (compress / memory tokens), {} when none."""
    from safetensors.torch import load_file

    f = Path(path) / EXTRA_FILE
    if not f.is_file():
        return {}
    return {k: v.to(device=device, dtype=dtype) for k, v in load_file(str(f)).items()}


def read_sparse_map(path: str | Path, dim: int) -> tuple[torch.Tensor | None, str | None]:
    """The adapter's aligned-token map A (float32 [dim, dim]) and its file's sha256; (None, None)
    when it has none. InvalidInputError when A does not fit the model's hidden size ``dim``."""
    from safetensors.torch import load_file

    f = Path(path) / SPARSE_MAP_FILE
    if not f.is_file():
        return None, None
    tensors = load_file(str(f))
    A = tensors.get(SPARSE_MAP_KEY)
    if A is None or tuple(A.shape) != (dim, dim):
        got = "no tensor" if A is None else f"shape {tuple(A.shape)}"
        raise InvalidInputError(f"{f} must hold {SPARSE_MAP_KEY!r} of shape [{dim}, {dim}] (the model's hidden "
                                f"size), it has {got}")
    if not torch.isfinite(A).all():
        raise InvalidInputError(f"{f}: {SPARSE_MAP_KEY!r} has non-finite values")
    return A.float(), sha256_file(f)


def adapter_dir(path: str | Path) -> Path:
    """The adapter folder of a path or a shipped model name; InvalidInputError if it is none."""
    from alignir.encoders.shipped import resolve_adapter

    p = resolve_adapter(path)
    if not (p / "adapter_config.json").is_file():
        raise InvalidInputError(f"adapter {str(path)!r} is not a peft adapter directory (no adapter_config.json)")
    return p


#: identity fields that must agree between an adapter's recorded base model and the model it is
#: loaded onto (its shape); the weights' sha256 is compared too, but only warned about
_BASE_FIELDS = ("arch", "vocab", "dim")


def check_base_model(path: str | Path, meta: dict[str, Any], identity: dict[str, Any] | None) -> None:
    """InvalidInputError when the adapter at ``path`` was trained on a base model of another shape
    (architecture, vocabulary, hidden size) than the one of ``identity`` (a LoadedModel's); a
    warning when only the weight files' sha256 differ (another model of the same shape, whose
    vectors would be meaningless, or the same weights in another file format: a GGUF file and
    the safetensors converted from it hash differently). An adapter that records no base model
    (``meta["base_model"]``) is not checked."""
    base = meta.get("base_model")
    if not isinstance(base, dict) or not identity:
        return
    diff = [f for f in _BASE_FIELDS if f in base and f in identity and base[f] != identity[f]]
    if diff:
        raise InvalidInputError(
            f"adapter {str(path)!r} was trained on another base model: it records "
            f"{base.get('name')!r} ({', '.join(f'{f}={base[f]!r}' for f in diff)}), the model given is "
            f"{identity.get('name')!r} ({', '.join(f'{f}={identity[f]!r}' for f in diff)})")
    if base.get("sha256") and identity.get("sha256") and base["sha256"] != identity["sha256"]:
        log.warning("adapter %r was trained on %r (weights sha256 %s…), the model given is %r (sha256 %s…): "
                    "unless these are the same weights in another format, its vectors are meaningless",
                    str(path), base.get("name"), str(base["sha256"])[:12], identity.get("name"),
                    str(identity["sha256"])[:12])


def load_adapter(model: torch.nn.Module, path: str | Path, identity: dict[str, Any] | None = None):
    """A frozen copy of ``model`` with the adapter at ``path`` applied (the shared model is untouched).

    ``identity`` (the LoadedModel's): checked against the base model the adapter records first
    (:func:`check_base_model`). Returns (peft_model in eval mode, extra tensors, meta dict).
    """
    from peft import PeftModel

    p = adapter_dir(path)
    if not any((p / f).is_file() for f in ("adapter_model.safetensors", "adapter_model.bin")):
        raise InvalidInputError(f"adapter {str(path)!r} has no weights (adapter_model.safetensors); a recorded "
                                f"run's weights that left git: python scripts/kept_adapters.py restore {p.name}")
    check_base_model(path, read_meta(p), identity)
    base = copy.deepcopy(model)
    pm = PeftModel.from_pretrained(base, str(p), is_trainable=False).eval()
    w = base.get_input_embeddings().weight
    return pm, read_extra(p, w.device, w.dtype), read_meta(p)


def adapter_hash(path: str | Path) -> str:
    """sha256 over the adapter's config, weights, extra tensors and training config."""
    p = adapter_dir(path)
    h = hashlib.sha256()
    for name in _HASHED:
        f = p / name
        if f.is_file():
            h.update(name.encode() + b"\0" + sha256_file(f).encode() + b"\n")
    return h.hexdigest()
