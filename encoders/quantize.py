"""Encoder precision: fp32 (as loaded) or int8 (dynamic int8 quantisation of the transformer's
Linear layers, for CPUs).

int8 here is torch's dynamic quantisation: the weights of every ``nn.Linear`` inside the
transformer backbone (attention q/k/v/o and MLP projections) are stored as int8 with one scale
per output channel; activations are quantised per batch on the fly, accumulation is int32.
Embeddings, norms and the LM head E_g stay fp32, so the aligned tokens (“A Text is Worth
Several Tokens” §2, eq.15-16: the top entries of E_g·h) are read through the exact head.

A trained LoRA adapter is merged into the weights first, then the merged weights are quantised
(one int8 matrix per layer instead of an int8 base + an fp32 low-rank side path).

The precision is part of the model identity (``identity["precision"] = "int8"``), so it is in
every encoder fingerprint: int8 encodings are cached apart from fp32 ones and an int8 index
refuses an fp32 query encoder (see ``retrieval.manifest.check_encoder``). fp32 leaves the
identity untouched, so fp32 fingerprints (and caches) stay what they were.
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import torch

from alignir.errors import InvalidInputError

__all__ = ["PRECISIONS", "DEFAULT_PRECISION", "check_precision", "precision_of", "prepare_loaded",
           "quantize_embedder", "quantize_module"]

PRECISIONS = ("fp32", "int8")
DEFAULT_PRECISION = "fp32"


def check_precision(precision: str | None) -> str:
    """``None`` -> fp32; anything outside :data:`PRECISIONS` is an InvalidInputError."""
    p = DEFAULT_PRECISION if precision is None else str(precision).lower()
    if p not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return p


def precision_of(loaded: Any) -> str:
    """The precision a LoadedModel runs at (fp32 unless :func:`prepare_loaded` made it int8)."""
    return str(getattr(loaded, "identity", {}).get("precision", DEFAULT_PRECISION))


def quantize_module(module: torch.nn.Module) -> torch.nn.Module:
    """Replace every ``nn.Linear`` under ``module`` by a dynamically quantised int8 Linear
    (per-output-channel weight scales), in place; returns ``module``."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's deprecation notice is not the user's business
        warnings.simplefilter("ignore")
        quantize_dynamic(module, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    return module


def prepare_loaded(loaded: Any, precision: str | None) -> Any:
    """The LoadedModel an embedder of ``precision`` is built on.

    fp32: ``loaded`` itself. int8: a copy with its own copy of the model (the caller's model is
    never changed: it may serve fp32 encoders and the sparsifier) and ``identity["precision"]``
    set; :func:`quantize_embedder` quantises it once the embedder (and its adapter) is built.
    ``None``: ``loaded`` as it is.
    """
    if precision is None:
        return loaded
    p = check_precision(precision)
    if p == precision_of(loaded):
        return loaded
    if precision_of(loaded) != DEFAULT_PRECISION:
        raise InvalidInputError(f"model {loaded.name!r} is already {precision_of(loaded)}; load it again for {p}")
    if loaded.device.type != "cpu":
        raise InvalidInputError(f"precision int8 runs on the CPU only (dynamic quantisation); the model is on "
                                f"{loaded.device}: use --device cpu")
    if loaded.dtype != torch.float32:
        raise InvalidInputError(f"precision int8 quantises an fp32 model; this one is {loaded.dtype}")
    model = copy.deepcopy(loaded.model)
    head = model.get_output_embeddings().weight.detach()
    identity = {**loaded.identity, "precision": p}
    return dataclasses.replace(loaded, model=model, lm_head=head, identity=identity)


def _merge_peft(model: torch.nn.Module) -> torch.nn.Module:
    """A peft model with its LoRA weights merged into the base weights (the base model), or
    ``model`` unchanged when it is not a peft model."""
    merge = getattr(model, "merge_and_unload", None)
    return merge() if callable(merge) else model


def quantize_embedder(embedder: Any) -> Any:
    """Quantise, in place, the transformer an embedder built by :func:`prepare_loaded` runs
    (int8 only; fp32 embedders are returned untouched).

    Adapters are merged first: the PromptEOL-with-adapter family keeps its peft model in
    ``_peft``, the trained families in ``model``. Only the backbone is quantised (the LM head is
    outside it), so ``loaded.lm_head`` stays the fp32 E_g.
    """
    from alignir.encoders.models import backbone

    if precision_of(embedder.loaded) != "int8":
        return embedder
    if getattr(embedder, "_peft", None) is not None:
        embedder._peft = _merge_peft(embedder._peft)
        embedder._backbone = backbone(embedder._peft)
    if isinstance(getattr(embedder, "model", None), torch.nn.Module):
        embedder.model = _merge_peft(embedder.model)
    root = embedder.loaded.model
    quantize_module(backbone(root))
    if hasattr(embedder, "_backbone"):
        embedder._backbone = backbone(getattr(embedder, "_peft", None) or root)
    embedder.precision = "int8"
    return embedder
