"""Low-level file helpers shared by every part of the index folder (and by the encoders' cache):
sha256 of a file, ``.npy`` saves whose I/O errors keep their errno, fsync of a path.

No other alignir module is imported here, so any module may import this one without a cycle.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["sha256_file", "save_npy", "fsync_path"]


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes, read in ``chunk``-byte pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


class _Sink:
    """A plain writer object, so numpy streams .npy data through Python's ``write``
    (which raises OSError with errno ENOSPC / EFBIG) instead of ``tofile``."""

    def __init__(self, f: Any) -> None:
        self.write = f.write


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` without pickle whose I/O errors carry their errno (disk full...)."""
    arr = np.asarray(array)
    if arr.dtype == object:
        raise InvalidInputError(f"{path}: object arrays cannot be stored (they would need pickle)")
    with open(path, "wb") as f:
        np.lib.format.write_array(_Sink(f), arr, allow_pickle=False)


def fsync_path(path: str | Path, directory: bool = False) -> None:
    """fsync a file (or, with ``directory``, a folder's entries) by path."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
