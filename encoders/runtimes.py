"""The names of the runtimes an encoder's transformer can run on, checked without importing torch
(a BM25-only search checks its options and never loads a model). What each one does:
encoders.onnx_runtime."""
from __future__ import annotations

import os

from alignir.errors import InvalidInputError

__all__ = ["RUNTIMES", "RUNTIME_ENV", "check_runtime"]

#: "auto": ONNX Runtime where it applies, torch elsewhere; "torch"; "onnx": ONNX Runtime or an error
RUNTIMES = ("auto", "torch", "onnx")
#: the environment variable that sets the runtime when a caller gives none
RUNTIME_ENV = "ALIGNIR_RUNTIME"


def check_runtime(runtime: str | None) -> str:
    """``runtime``, or ``$ALIGNIR_RUNTIME`` when it is None, or "auto"; anything outside
    :data:`RUNTIMES` is an InvalidInputError."""
    given = os.environ.get(RUNTIME_ENV) if runtime is None else runtime
    r = "auto" if given is None or not str(given).strip() else str(given).strip().lower()
    if r not in RUNTIMES:
        where = f" (from ${RUNTIME_ENV})" if runtime is None else ""
        raise InvalidInputError(f"unknown runtime {given!r}{where}; use one of {', '.join(RUNTIMES)}")
    return r
