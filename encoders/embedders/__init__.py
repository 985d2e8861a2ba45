"""Embedder families and the factory ``get_embedder(name, model, **options)``.

The registry maps names to ``"module:Class"`` strings and imports a family only when it is asked
for, so a missing optional dependency of one family never breaks the others. Every class is
constructed as ``Class(loaded: LoadedModel, **options)``.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import importlib
import inspect
from typing import Any

from alignir.encoders.embedders.base import Embedder

__all__ = ["Embedder", "EMBEDDERS", "get_embedder", "register_embedder", "embedder_class"]

EMBEDDERS: dict[str, str] = {
    # training-free (“A Text is Worth Several Tokens” §2)
    "prompteol": "alignir.encoders.embedders.prompteol:PromptEOLEmbedder",
    "last": "alignir.encoders.embedders.prompteol:LastTokenEmbedder",
    "mean": "alignir.encoders.embedders.prompteol:MeanEmbedder",
    "weighted-mean": "alignir.encoders.embedders.prompteol:WeightedMeanEmbedder",
    "echo": "alignir.encoders.embedders.prompteol:EchoEmbedder",
    # trained (AutoRegEmbed, LLM2Comp, GIRCSE)
    "autoregembed": "alignir.encoders.embedders.autoregembed:AutoRegEmbedEmbedder",
    "llm2comp": "alignir.encoders.embedders.llm2comp:LLM2CompEmbedder",
    "gircse": "alignir.encoders.embedders.gircse:GircseEmbedder",
    # PromptEOL read through an InfoNCE-trained LoRA adapter (the contrastive baseline)
    "infonce": "alignir.encoders.embedders.infonce:InfoNCEEmbedder",
    # public retrieval-trained LLM embedders read as published (encoders.pretrained)
    "pretrained": "alignir.encoders.embedders.pretrained:PretrainedEmbedder",
}


def register_embedder(name: str, target: str) -> None:
    """Add or replace a family: ``target`` is ``"package.module:ClassName"``."""
    if ":" not in target:
        raise InvalidInputError(f"embedder target must look like 'module:Class', got {target!r}")
    EMBEDDERS[name] = target


def embedder_class(name: str) -> type[Embedder]:
    """Import and return the class registered under ``name``."""
    if name not in EMBEDDERS:
        raise InvalidInputError(f"unknown embedder {name!r}; known: {', '.join(sorted(EMBEDDERS))}")
    module, _, cls = EMBEDDERS[name].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise InvalidInputError(f"embedder {name!r} is registered but its module {module} does not exist yet") from e
        raise
    try:
        return getattr(mod, cls)
    except AttributeError:
        raise InvalidInputError(f"embedder {name!r}: module {module} has no class {cls}") from None


def get_embedder(name: str, model: Any, **options: Any) -> Embedder:
    """Build an embedder. ``model`` is a LoadedModel or a model spec for ``load_model``
    (then the options ``device`` and ``dtype`` go to the loader).

    ``precision`` (option): "fp32" (default) or "int8" — dynamic int8 Linear layers in the
    transformer, adapter merged first, LM head fp32 (encoders.quantize); the caller's model is
    not changed, and the precision is part of the encoder fingerprint.

    ``text_form`` (option, every family): "off" (default here: an index that records none reads
    texts as given) or "auto" (runs of capitals read in sentence case; what new encoders get
    through encoders.shipped.resolve_shipped); part of the fingerprint when not "off"
    (encoders.text_form).

    The embedder runs on torch; ``encoders.onnx_runtime.apply_runtime`` moves its transformer
    to ONNX Runtime (what ``alignir.Encoder``, ``build_index`` and ``Searcher`` do by default on
    a CPU)."""
    cls = embedder_class(name)
    from alignir.encoders.models import LoadedModel, load_model
    from alignir.encoders.quantize import apply_precision, check_precision
    from alignir.encoders.text_form import check_text_form

    precision = check_precision(options.pop("precision", None))  # a bad value fails before any load
    text_form = check_text_form(options.pop("text_form", "off"))
    if isinstance(model, str):
        model = load_model(model, device=options.pop("device", "auto"), dtype=options.pop("dtype", None))
    elif not isinstance(model, LoadedModel):
        raise InvalidInputError(f"model must be a LoadedModel or a model spec string, got {type(model).__name__}")
    _check_options(name, cls, model, options)
    embedder = apply_precision(cls(model, **options), precision)
    embedder.text_form = text_form
    return embedder


def _check_options(name: str, cls: type, model: Any, options: dict[str, Any]) -> None:
    """An option the family's constructor does not take is the user's error, named with the ones it does."""
    signature = inspect.signature(cls)
    try:
        signature.bind(model, **options)
    except TypeError:
        takes = [p.name for p in list(signature.parameters.values())[1:] if p.kind == p.KEYWORD_ONLY]
        unknown = sorted(set(options) - set(takes))
        raise InvalidInputError(f"embedder {name!r} has no option {', '.join(map(repr, unknown))}; "
                                f"its options: {', '.join(takes)}") from None
