"""What an index's manifest says about the encoder that built it, checked on the way in:
the embedder spec that rebuilds the query encoder, the encoder fingerprint a query encoder must
match, and the term map of the sparse side. Used by the build code and the searcher alike (the
searcher never imports the build code)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from alignir.encoders.terms import TermMap
from alignir.index.manifest_io import check_fingerprint
from alignir.errors import CorruptIndexError, InvalidInputError, PrecisionMismatch
from alignir.retrieval.config import MODEL_LEGS, index_legs

log = logging.getLogger(__name__)

__all__ = ["embedder_spec", "check_encoder", "doc_encoder_fingerprint", "normalize_fingerprint",
           "term_map_arrays", "term_map_from_arrays"]


def embedder_spec(manifest: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """The manifest's ``embedder`` entry (family, model spec, options), or CorruptIndexError
    naming what is missing (never a KeyError from deep inside a search); an index built
    without a model (``legs=["bm25"]``) has none: InvalidInputError saying so."""
    spec = manifest.get("embedder")
    legs = index_legs(manifest)
    if spec is None and legs and not any(leg in MODEL_LEGS for leg in legs):
        raise InvalidInputError(f"{path} was built without a model (its legs: {', '.join(legs)}): it has no "
                                f"encoder; search it with mode='bm25'")
    if not isinstance(spec, dict) or not spec:
        raise CorruptIndexError(f"{path}: manifest.json does not say which encoder built the index "
                                f"(no 'embedder' entry); rebuild it or restore the manifest")
    for key in ("family", "model"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise CorruptIndexError(f"{path}: manifest.json lacks 'embedder.{key}'; rebuild the index or restore "
                                    f"the manifest")
    if not isinstance(spec.get("options", {}), dict):
        raise CorruptIndexError(f"{path}: manifest.json's 'embedder.options' is not an object")
    return spec


def doc_encoder_fingerprint(embedder: Any) -> dict[str, Any]:
    """The embedder's fingerprint as an index records it (see :func:`normalize_fingerprint`)."""
    return normalize_fingerprint(embedder.fingerprint())


def normalize_fingerprint(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """Drop what may differ between the document and the query encoder without changing the
    vectors: query-side options (a query instruction may change per task) and the model's
    location and name when its content hash identifies it (a moved or renamed copy of the same
    weights is the same model)."""
    fp = dict(fingerprint)
    fp.pop("query_instruction", None)
    model = fp.get("model")
    if isinstance(model, dict) and model.get("sha256"):
        fp["model"] = {k: v for k, v in model.items() if k not in ("source", "name")}
    return fp


def check_encoder(stored: Any, embedder: Any, allow_precision_mismatch: bool = False) -> None:
    """Refuse a query/re-sparsify encoder whose fingerprint differs from the index's
    (errors.FingerprintMismatch names the differing fields; errors.PrecisionMismatch
    when only the precision differs, encoders.quantize).

    ``allow_precision_mismatch``: accept an encoder that differs in its precision only (an
    fp32 query encoder on an int8 index or the reverse), with a warning: its vectors differ
    slightly from the ones the index was built with."""
    stored_fp = normalize_fingerprint(stored.fingerprint)
    query_fp = _without_unrecorded_tokenizer(stored_fp, doc_encoder_fingerprint(embedder))
    a, b = _precision(stored_fp), _precision(query_fp)
    if a != b:
        if not allow_precision_mismatch:
            check_fingerprint({"encoder": _without_precision(stored_fp)}, _without_precision(query_fp))
            raise PrecisionMismatch(a, b)
        log.warning("the query encoder is %s, the index's encoder %s (allowed): query vectors differ slightly "
                    "from the documents' encoding", b, a)
        stored_fp, query_fp = _without_precision(stored_fp), _without_precision(query_fp)
    check_fingerprint({"encoder": stored_fp}, query_fp)


def _without_unrecorded_tokenizer(stored_fp: dict[str, Any], query_fp: dict[str, Any]) -> dict[str, Any]:
    """``query_fp`` without its model's tokenizer hash when the index's fingerprint has none.

    Model folders' tokenizer files joined their identity after indexes had been built from
    them (encoders.models); such an index still opens, with a warning that its tokenizer cannot
    be verified (rebuild it to record the hash)."""
    stored_model, query_model = stored_fp.get("model"), query_fp.get("model")
    if not (isinstance(stored_model, dict) and isinstance(query_model, dict)):
        return query_fp
    if "tokenizer_sha256" not in query_model or "tokenizer_sha256" in stored_model:
        return query_fp
    log.warning("this index records no hash of its model's tokenizer files (built before alignir hashed "
                "them): the query tokenizer cannot be checked against the one that built it; rebuild "
                "the index to record it")
    return {**query_fp, "model": {k: v for k, v in query_model.items() if k != "tokenizer_sha256"}}


def _precision(fp: dict[str, Any]) -> str:
    model = fp.get("model")
    return str(model.get("precision", "fp32")) if isinstance(model, dict) else "fp32"


#: the model identity's precision fields (encoders.quantize)
PRECISION_KEYS = ("precision", "int8_scheme")


def _without_precision(fp: dict[str, Any]) -> dict[str, Any]:
    model = fp.get("model")
    if isinstance(model, dict):
        return {**fp, "model": {k: v for k, v in model.items() if k not in PRECISION_KEYS}}
    return fp


def term_map_arrays(term_map: TermMap) -> dict[str, np.ndarray]:
    """The term map as plain arrays for the index folder (no pickle: a unicode array)."""
    return {"token_to_term": term_map.token_to_term,
            "term_strings": np.asarray(term_map.term_strings, dtype=np.str_)}


def term_map_from_arrays(extra: dict[str, np.ndarray], kind: str) -> TermMap:
    return TermMap(np.asarray(extra["token_to_term"]), tuple(str(s) for s in extra["term_strings"]),
                   kind)
