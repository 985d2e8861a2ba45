"""Encoder precision: fp32 (as loaded) or int8 (int8 Linear layers in the transformer, for CPUs).

int8 replaces the ``nn.Linear`` layers inside the transformer backbone (attention q/k/v/o, MLP
gate/up) by :class:`alignir.encoders.int8_linear.Int8Linear`: int8 weights with one scale per
output channel times int8 activations with one scale per *token*, accumulated exactly in int32
(``torch._int_mm``). A token's result depends on that token alone, not on the other texts of its
batch. (torch's dynamic quantisation, one activation scale per call, does not have that property:
on 48 MED abstracts its vectors had cosine 0.9982 mean / 0.9950 min to fp32, per token has
0.9997 / 0.9994 at the same speed; and torch.ao.quantization is deprecated.)
Embeddings, norms and the LM head E_g stay fp32, so the aligned tokens (“A Text is Worth Several
Tokens” §2, eq.15-16: the top entries of E_g·h) are read through the exact head; only h moves.

Two parts stay fp32 because int8 ruined them (measured on SmolLM2 with the per-call scheme, 10 ADI
documents + 10 queries, cosine of int8 vs fp32 vectors: all Linear layers int8 0.930 mean / 0.872
min; per token, the down-projections int8 too: 0.9991 / 0.9977 on the 48 MED abstracts, kept fp32):

- the MLP down-projections (:data:`FP32_LINEARS`): their inputs carry a few channels hundreds of
  times larger than the rest (“massive activations”), and one activation scale per call leaves
  the other channels a handful of int8 levels (without them: 0.983 / 0.969);
- the fixed prompt prefix (instruction + template head, encoders.prefix_cache): its first
  token is the attention sink whose activations are the largest of all; an int8 embedder runs
  the prefix once through the fp32 backbone and keeps its KV cache (prefix_cache on), so the
  int8 layers only see the text's tokens (both: 0.9945 / 0.984).

The down-projections hold a quarter of a Llama layer's Linear FLOPs, which caps the speed-up.
The prompt families also smooth the q/k/v and gate/up inputs before quantising
(encoders.smoothing, SmoothQuant; fixed calibration texts): 0.9987 / 0.997. Their smoothing
(migration strength) was chosen on those same ADI texts; MED is the held-out check.

The projections that read one input (a layer's q/k/v; its gate/up) share one quantisation of
it, and for a short query one GEMM (``int8_linear.SharedInputInt8``): equal results bit for bit,
fewer passes (single-query int8 encoding 1.04× faster on SmolLM2, 1.03× on Gemma3, paired, same
run: ``bench_query_encode.py --configs ...,int8-separate``; document batches unchanged).

A trained LoRA adapter is merged into its (private) copy of the weights first, then the merged
weights are quantised: one int8 matrix per layer, no fp32 low-rank side path.

The caller's LoadedModel is never changed (it may serve an fp32 encoder and the sparsifier
too): without an adapter the embedder gets a copy of the module *structure* that shares every
fp32 tensor with the caller's model, and quantisation replaces the copy's Linear modules by
new int8 ones (memory cost: the int8 weights only).

The precision is part of the model identity (``identity["precision"] = "int8"``), so it is in
every encoder fingerprint: int8 encodings are cached apart from fp32 ones and an int8 index
refuses an fp32 query encoder (``retrieval.manifest.check_encoder``). fp32 leaves the identity
untouched, so fp32 fingerprints (and caches, and existing indexes) stay what they were.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Any

import torch

from alignir.encoders.int8_linear import Int8Linear, Int8Slice, SharedInputInt8
from alignir.encoders.smoothing import ALPHA, CALIBRATION_TEXTS, input_maxima, smooth, smoothing_groups
from alignir.errors import InvalidInputError

__all__ = ["PRECISIONS", "DEFAULT_PRECISION", "FP32_LINEARS", "INT8_SCHEME", "check_precision", "precision_of",
           "quantize_module", "to_int8", "apply_precision"]

PRECISIONS = ("fp32", "int8")
DEFAULT_PRECISION = "fp32"

#: names of the Linear layers kept fp32 in int8 encoders: the MLP output projections (Llama,
#: Gemma, Qwen: ``down_proj``; OPT/Phi-style: ``fc2``)
FP32_LINEARS = ("down_proj", "fc2")

#: what an int8 encoder is, recorded in its model identity (so in fingerprints and caches):
#: change it whenever the int8 recipe changes. The prompt families also smooth (+ prefix fp32).
INT8_SCHEME = "int8-per-token-x-per-channel;fp32:lm_head,embeddings,norms," + ",".join(FP32_LINEARS)


def check_precision(precision: str | None) -> str:
    """``None`` -> fp32; anything outside :data:`PRECISIONS` is an InvalidInputError."""
    p = DEFAULT_PRECISION if precision is None else str(precision).strip().lower()
    if p not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return p


def precision_of(obj: Any) -> str:
    """The precision an embedder (or a LoadedModel, or a fingerprint's ``model`` identity)
    runs at: ``identity["precision"]``, fp32 when absent."""
    identity = obj if isinstance(obj, dict) else getattr(getattr(obj, "loaded", obj), "identity", {})
    return str((identity or {}).get("precision", DEFAULT_PRECISION))


def quantize_module(module: torch.nn.Module, keep_fp32: tuple[str, ...] = FP32_LINEARS,
                    shared_inputs: bool = True) -> torch.nn.Module:
    """Replace every ``nn.Linear`` under ``module`` whose name does not end in one of
    ``keep_fp32`` by an :class:`Int8Linear` (per-channel int8 weights, per-token int8
    activations), in place; returns ``module``. The projections of a decoder layer that read
    one input (q/k/v; gate/up: ``smoothing_groups``) become the members of one
    :class:`SharedInputInt8` (equal results, one quantisation and one GEMM per group) unless
    ``shared_inputs`` is false."""
    for layer in list(module.modules()) if shared_inputs else []:
        groups = smoothing_groups(layer)
        where = {id(child): (parent, name) for parent in layer.modules()
                 for name, child in parent.named_children()} if groups else {}
        for _, lins, _ in groups:
            named = [where[id(lin)] for lin in lins if id(lin) in where]
            if len(named) != len(lins) or any(name in keep_fp32 for _, name in named):
                continue
            group = SharedInputInt8(lins)
            for i, (parent, name) in enumerate(named):
                setattr(parent, name, Int8Slice(group, i))
    targets = [(parent, name, child) for parent in module.modules() for name, child in parent.named_children()
               if isinstance(child, torch.nn.Linear) and name not in keep_fp32]
    for parent, name, child in targets:
        setattr(parent, name, Int8Linear(child))
    return module


def _structure_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module``'s module tree sharing every parameter and buffer with it: replacing
    a submodule of the copy (as quantisation does) leaves ``module`` untouched."""
    memo = {id(t): t for t in itertools.chain(module.parameters(), module.buffers())}
    return copy.deepcopy(module, memo)


def _merged(model: torch.nn.Module) -> torch.nn.Module:
    """A peft model with its LoRA weights merged into its base weights (the base model), or
    ``model`` unchanged when it is not a peft model."""
    merge = getattr(model, "merge_and_unload", None)
    return merge() if callable(merge) else model


def _calibrate(embedder: Any) -> None:
    """Run the calibration texts through the (still fp32) embedder, both roles, after the
    prompt prefixes are cached (the int8 layers never see the prefix, so neither does
    calibration)."""
    with torch.inference_mode():
        for role in ("document", "query"):
            embedder._prefix_cache(role)
    embedder.encode_documents(list(CALIBRATION_TEXTS), progress=False)
    embedder.encode_queries(list(CALIBRATION_TEXTS), progress=False)


def to_int8(embedder: Any, shared_inputs: bool = True) -> Any:
    """Make ``embedder`` run at int8, in place, and return it (see the module docstring;
    ``shared_inputs=False``: separate int8 layers, the A/B of ``bench_query_encode.py``).

    Two embedder shapes are known: the prompt families (``encoders.embedders.prompteol``,
    including PromptEOL read through a LoRA adapter, which keeps its peft model in ``_peft``)
    run ``_backbone``; the trained families (``encoders.train.embedder_base``) run ``model``.
    """
    from alignir.encoders.models import backbone

    loaded = embedder.loaded
    if precision_of(loaded) == "int8":
        return embedder
    if loaded.device.type != "cpu":
        raise InvalidInputError(f"precision int8 runs on the CPU only (int8 Linear layers); the model is on "
                                f"{loaded.device}: use --device cpu")
    if loaded.dtype != torch.float32:
        raise InvalidInputError(f"precision int8 quantises an fp32 model; this one is {loaded.dtype}")
    if isinstance(getattr(embedder, "_backbone", None), torch.nn.Module):
        peft = getattr(embedder, "_peft", None)
        if peft is not None:  # load_adapter made a private copy: merge it, keep it fp32 for the prefix
            embedder._peft = _merged(peft)
            embedder._backbone = backbone(embedder._peft)
        fp32 = embedder._prefix_backbone = embedder._backbone
        embedder.prefix_cache = True  # the prompt prefix runs fp32, once (module docstring)
        layers = list(getattr(fp32, "layers", []))
        maxima = input_maxima(layers, lambda: _calibrate(embedder))
        int8 = _structure_copy(fp32)
        smooth(list(getattr(int8, "layers", [])), maxima)
        embedder._backbone = quantize_module(int8, shared_inputs=shared_inputs)
        scheme = f"{INT8_SCHEME};smoothquant-a{ALPHA}:qkv,gate-up;fp32-prompt-prefix"
    elif isinstance(getattr(embedder, "model", None), torch.nn.Module):
        model = embedder.model
        model = _structure_copy(model) if model is loaded.model else _merged(model)
        quantize_module(backbone(model), shared_inputs=shared_inputs)
        embedder.model = model
        scheme = INT8_SCHEME
    else:
        raise InvalidInputError(f"precision int8 is not supported by the embedder family {embedder.family!r}")
    embedder.loaded = dataclasses.replace(loaded, identity={**loaded.identity, "precision": "int8",
                                                           "int8_scheme": scheme})
    return embedder


def apply_precision(embedder: Any, precision: str | None) -> Any:
    """``embedder`` at ``precision`` (fp32: as built; int8: :func:`to_int8`)."""
    return to_int8(embedder) if check_precision(precision) == "int8" else embedder
