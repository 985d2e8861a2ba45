"""Weight-space interpolation of two LoRA adapters of one base model (a "model soup").

A model fine-tuned further on one domain gains there and drifts away elsewhere; the average of
its weights with its starting point's keeps much of the gain and much of the start's transfer
(Wortsman et al., "Robust fine-tuning of zero-shot models", §3, WiSE-FT: θ(α) = (1 − α)·θ₀ + α·θ₁).

For LoRA the weights to average are the merged updates ΔW = s·B·A (s = lora_alpha / r), not A
and B one by one (the product of averages is not the average of products). The interpolation

    ΔW(α) = (1 − α)·s₀·B₀A₀ + α·s₁·B₁A₁

is itself a LoRA update of rank r₀ + r₁, written exactly: A = [A₀; A₁], B = [(1 − α)s₀·B₀, α·s₁·B₁]
with lora_alpha = r (s = 1). The soft-token extras (compress / memory tokens), when present, are
interpolated linearly by the same α.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from alignir.encoders.embedders.adapters import EXTRA_FILE, META_FILE, adapter_dir, adapter_hash, read_meta
from alignir.errors import InvalidInputError

__all__ = ["interpolate_adapters"]

WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
#: adapter_config fields that must agree between the two adapters
_SAME_CONFIG = ("peft_type", "bias", "fan_in_fan_out", "use_dora", "use_rslora", "modules_to_save", "task_type")
#: training-record fields that decide how the adapter's vectors are read; they must agree
_SAME_META = ("embedder", "embedder_options", "method")


def _load(path: str | Path) -> tuple[Path, dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors.torch import load_file

    p = adapter_dir(path)
    if not (p / WEIGHTS_FILE).is_file():
        raise InvalidInputError(f"adapter {str(path)!r} has no {WEIGHTS_FILE}")
    config = json.loads((p / CONFIG_FILE).read_text())
    if config.get("peft_type") != "LORA":
        raise InvalidInputError(f"adapter {str(path)!r} is {config.get('peft_type')!r}, not a LoRA adapter")
    return p, config, load_file(str(p / WEIGHTS_FILE)), read_meta(p)


def _scale(config: dict[str, Any]) -> float:
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise InvalidInputError("adapters with per-module ranks (rank_pattern / alpha_pattern) are not supported")
    return float(config["lora_alpha"]) / float(config["r"])


def _check_same(a: tuple, b: tuple) -> None:
    (pa, ca, wa, ma), (pb, cb, wb, mb) = a, b
    for key in _SAME_CONFIG:
        if ca.get(key) != cb.get(key):
            raise InvalidInputError(f"{pa} and {pb} differ in adapter_config {key!r}: {ca.get(key)!r} vs {cb.get(key)!r}")
    if set(wa) != set(wb):
        only = sorted(set(wa) ^ set(wb))[:3]
        raise InvalidInputError(f"{pa} and {pb} adapt different modules (e.g. {only})")
    for key in _SAME_META:
        if ma.get(key) != mb.get(key):
            raise InvalidInputError(f"{pa} and {pb} differ in their training record's {key!r}: "
                                    f"{ma.get(key)!r} vs {mb.get(key)!r}; their vectors are not read the same way")
    query_a, query_b = (ma.get("hp") or {}).get("instruction"), (mb.get("hp") or {}).get("instruction")
    if query_a != query_b:
        raise InvalidInputError(f"{pa} and {pb} were trained with different query instructions: "
                                f"{query_a!r} vs {query_b!r}")
    base_a, base_b = (ma.get("base_model") or {}), (mb.get("base_model") or {})
    if base_a.get("sha256") and base_b.get("sha256") and base_a["sha256"] != base_b["sha256"]:
        raise InvalidInputError(f"{pa} and {pb} were trained on different base models "
                                f"({base_a.get('name')} vs {base_b.get('name')})")


def interpolate_adapters(start: str | Path, end: str | Path, weight: float, out: str | Path) -> Path:
    """Write to ``out`` the LoRA adapter whose merged update is (1 − weight)·ΔW(start) + weight·ΔW(end).

    ``weight`` 0 reproduces ``start``'s update, 1 ``end``'s (as a rank r₀ + r₁ adapter). The two
    must share the base model, the adapted modules, the embedder family and the query
    instruction; the output keeps ``end``'s weight dtype. The new
    alignir_train.json is ``end``'s, with stage ``interpolation``, no steps of its own, its
    ``init_adapter`` pointing at ``end`` (whose chain names the training) and an
    ``interpolation`` record of both sources (path, sha256, weight). ``out`` must not exist or be empty.
    """
    from safetensors.torch import load_file, save_file

    if not 0.0 <= weight <= 1.0:
        raise InvalidInputError(f"interpolation weight must be in [0, 1], got {weight}")
    dest = Path(out)
    if dest.exists() and any(dest.iterdir()):
        raise InvalidInputError(f"{dest} is not empty: interpolate into a new folder")
    a, b = _load(start), _load(end)
    _check_same(a, b)
    (pa, ca, wa, _), (pb, cb, wb, mb) = a, b
    sa, sb = (1.0 - weight) * _scale(ca), weight * _scale(cb)
    dtype = wb[next(iter(wb))].dtype
    merged: dict[str, torch.Tensor] = {}
    for key in sorted(wa):
        ta, tb = wa[key].float(), wb[key].float()
        if ".lora_A." in key:
            merged[key] = torch.cat([ta, tb], dim=0)
        elif ".lora_B." in key:
            merged[key] = torch.cat([sa * ta, sb * tb], dim=1)
        else:
            raise InvalidInputError(f"{pa}: tensor {key!r} is neither a LoRA A nor a LoRA B matrix")
        merged[key] = merged[key].to(dtype).contiguous()
    rank = int(ca["r"]) + int(cb["r"])
    config = dict(cb)
    config.update(r=rank, lora_alpha=rank, target_modules=sorted(set(ca["target_modules"]) | set(cb["target_modules"])))
    ea = load_file(str(pa / EXTRA_FILE)) if (pa / EXTRA_FILE).is_file() else {}
    eb = load_file(str(pb / EXTRA_FILE)) if (pb / EXTRA_FILE).is_file() else {}
    if set(ea) != set(eb) or any(ea[k].shape != eb[k].shape for k in ea):
        raise InvalidInputError(f"{pa} and {pb} carry different soft-token tensors ({sorted(ea)} vs {sorted(eb)})")
    extra = {k: ((1.0 - weight) * ea[k].float() + weight * eb[k].float()).contiguous() for k in ea}

    meta = dict(mb)
    meta.update(stage="interpolation", steps=0, examples_seen=0, train_cpu_seconds=0.0, train_seconds=0.0,
                config={**(mb.get("config") or {}), "init_adapter": str(end)},
                interpolation={"weight": weight, "rule": "(1 - weight) * dW(start) + weight * dW(end), exact",
                               "start": {"adapter": str(start), "sha256": adapter_hash(pa)},
                               "end": {"adapter": str(end), "sha256": adapter_hash(pb)}})
    for key in ("final", "heldout", "final_weights_sha256", "packaged_from_sha256", "weights_dtype"):
        meta.pop(key, None)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(merged, str(dest / WEIGHTS_FILE), metadata={"format": "pt"})
    (dest / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
    save_file(extra, str(dest / EXTRA_FILE), metadata={"format": "pt"})
    (dest / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    return dest
