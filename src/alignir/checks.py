"""Input checks shared by index/, encoders/ and retrieval/ (index/ and encoders/ may not import
each other); numpy only, no numba or torch."""
from __future__ import annotations

from typing import Any

import numpy as np

from alignir.errors import InvalidInputError

__all__ = ["check_texts", "int_ids", "doc_numbers_for_add"]


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    """``texts`` as a new list, every item a ``str``.

    Raises :class:`InvalidInputError` for a single string (``list("abc")`` would be three texts),
    for something that is not a sequence, and for an item that is not a ``str``, naming its
    position and type (bytes: decode them first). ``name`` is what the messages call the input.
    """
    if isinstance(texts, (str, bytes, bytearray)):
        raise InvalidInputError(f"{name} must be a sequence of strings, not a single string")
    try:
        out = list(texts)
    except TypeError:
        raise InvalidInputError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            hint = " (decode bytes to str first)" if isinstance(t, (bytes, bytearray)) else ""
            raise InvalidInputError(f"{name}[{i}] is {type(t).__name__}, expected str{hint}")
    return out


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


def doc_numbers_for_add(doc_numbers: Any, n_rows: int, next_number: int) -> np.ndarray:
    """The int64 doc numbers of ``n_rows`` rows being added to an index.

    ``None`` numbers them ``next_number, next_number + 1, ...``. Given numbers must be integers,
    one per row, non-negative and distinct; whether they are already live is the index's check.
    """
    if doc_numbers is None:
        return np.arange(next_number, next_number + n_rows, dtype=np.int64)
    nums = np.asarray(doc_numbers if isinstance(doc_numbers, np.ndarray) else list(doc_numbers))
    if nums.size and not np.issubdtype(nums.dtype, np.integer):
        raise InvalidInputError(f"doc_numbers must be integers, got dtype {nums.dtype}")
    nums = nums.astype(np.int64).ravel()
    if nums.shape[0] != n_rows:
        raise InvalidInputError(f"got {nums.shape[0]} doc_numbers for {n_rows} rows")
    if nums.size and nums.min() < 0:
        raise InvalidInputError(f"doc number {int(nums.min())} is negative")
    uniq, counts = np.unique(nums, return_counts=True)
    if (counts > 1).any():
        raise InvalidInputError(f"duplicate doc numbers in add: {uniq[counts > 1][:5].tolist()}")
    return nums
