"""Checks that need no model, run before any model load or conversion (which takes seconds to
minutes): the model an index's manifest names against the encoder fingerprint it records, the
base model an adapter records, the precision. (The search options are checked by
retrieval.searcher.check_search_options.)"""
from __future__ import annotations

from typing import Any, Mapping

from alignir.errors import AlignirError, InvalidInputError
from alignir.errors import CorruptIndexError

__all__ = ["check_manifest_model", "check_adapter_base", "check_before_loading"]


def check_manifest_model(fingerprint: Mapping[str, Any], spec: Mapping[str, Any], model: str | None = None) -> None:
    """Refuse, before loading it, a registered model whose known weights' sha256 differs from the
    model the index's encoder fingerprint records (a manifest whose ``embedder.model`` was
    changed and resealed, or ``model`` naming another registered model): loading it (a GGUF
    conversion may take minutes) would only end in a fingerprint mismatch."""
    from alignir.encoders.models import REGISTERED_MODELS
    from alignir.encoders.shipped import SHIPPED

    name = model or spec.get("model")
    name = SHIPPED[name].base_model if name in SHIPPED else name
    reg = REGISTERED_MODELS.get(name) if isinstance(name, str) else None
    recorded = (fingerprint.get("model") or {}) if isinstance(fingerprint, Mapping) else {}
    want = recorded.get("sha256") if isinstance(recorded, Mapping) else None
    if reg is None or not isinstance(recorded, Mapping):
        return
    other_registered = recorded.get("name") in REGISTERED_MODELS and recorded.get("name") != name
    known = reg.sha256() if want else None
    if other_registered or (known and known != want):
        want = str(want or "?")
        known = str(known or "?")
        what = f"--model {model!r}" if model else f"its manifest's embedder.model {name!r}"
        error = InvalidInputError if model else CorruptIndexError
        raise error(f"the index was built by the model {recorded.get('name')!r} (weights sha256 {want[:12]}…), but "
                    f"{what} is another model (sha256 {known[:12]}…): its queries would not match the index")


def check_before_loading(manifest: Mapping[str, Any], spec: Mapping[str, Any], model: str | None,
                         precision: str | None) -> None:
    """What :meth:`Searcher.open` checks between reading the index and loading its model: the
    precision asked for and the model the manifest (or ``model``) names."""
    if precision is not None:
        from alignir.encoders.quantize import check_precision

        check_precision(precision)
    check_manifest_model(manifest.get("encoder", {}), spec, model)
    check_adapter_base(spec, model)


def check_adapter_base(spec: Mapping[str, Any], model: str | None = None) -> None:
    """Refuse, before loading it, a registered model that is not the registered model the
    index's adapter (``spec["options"]["adapter"]``) was trained on, as its ``alignir_train.json``
    records (an adapter without that record, or not readable here, is checked after loading)."""
    from alignir.encoders.embedders.adapters import read_meta
    from alignir.encoders.models import REGISTERED_MODELS
    from alignir.encoders.shipped import SHIPPED

    adapter = (spec.get("options") or {}).get("adapter")
    name = model or spec.get("model")
    name = SHIPPED[name].base_model if name in SHIPPED else name
    if not adapter or name not in REGISTERED_MODELS:
        return
    try:
        base = (read_meta(adapter).get("base_model") or {}).get("name")
    except (OSError, ValueError, AlignirError):
        return
    if base in REGISTERED_MODELS and base != name:
        what = f"--model {model!r}" if model else f"the index's manifest (embedder.model {name!r})"
        error = InvalidInputError if model else CorruptIndexError
        raise error(f"the adapter {adapter!r} was trained on {base!r}, but {what} names {name!r}: refused before "
                    f"loading it")
