"""Input checks shared by index/ and encoders/ (neither may import the other)."""
from __future__ import annotations

from typing import Any

import numpy as np

from alignir.errors import InvalidInputError

__all__ = ["int_ids"]


def int_ids(ids: Any, n: int, name: str, unit: str = "ids") -> np.ndarray:
    """``ids`` as a flat int64 array, every entry in ``[0, n)``.

    ``unit`` names what the ids are in the error message ("token ids", "doc numbers"). Raises
    :class:`InvalidInputError` on a non-integer dtype or an id out of range (showing up to five).
    """
    a = np.asarray(ids).ravel()
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(a.dtype, np.integer):
        raise InvalidInputError(f"{name} must be integer {unit}, got dtype {a.dtype}")
    a = a.astype(np.int64)
    bad = a[(a < 0) | (a >= n)]
    if bad.size:
        raise InvalidInputError(f"{name} has {unit} outside [0, {n}): {bad[:5].tolist()}")
    return a
