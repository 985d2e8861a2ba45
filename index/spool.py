"""Append-only spool files of a build that streams its corpus.

A build reads its documents batch by batch; what it must see again once the corpus has been
read (the encoder's rows, for the PC1 fit, the aligned-token projection and the FAISS index;
the documents' texts, for the calibration's pseudo-queries and the stored-texts part) is
appended here instead of being kept in memory, and read back from disk: the rows as one
memory-mapped float32 array, the texts one document at a time.

The files live in a hidden folder beside the index (:func:`spool_folder`), on the same disk,
named like the store's temp folders (``.NAME.tmp-PID-spool-*``) so that
``index.store.recover`` removes it if the building process dies; it is removed when the build
ends, whether it succeeded or not.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from array import array
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from alignir.errors import InvalidInputError

__all__ = ["RowSpool", "TextSpool", "spool_folder"]


@contextlib.contextmanager
def spool_folder(index_dir: str | Path) -> Iterator[Path]:
    """A fresh hidden folder beside ``index_dir`` for the block (removed at its end)."""
    target = Path(os.path.realpath(Path(index_dir).expanduser()))
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-spool-", dir=target.parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class RowSpool:
    """float32 rows of one width appended to a file; :meth:`array` maps them back."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "wb")
        self.n_rows = 0
        self.dim: int | None = None

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or (self.dim is not None and rows.shape[1] != self.dim):
            raise InvalidInputError(f"rows must be [n, {self.dim or 'd'}], got shape {rows.shape}")
        self.dim = int(rows.shape[1])
        self._file.write(rows.tobytes())
        self.n_rows += int(rows.shape[0])

    def array(self, dim: int | None = None) -> np.ndarray:
        """Every row appended, as a read-only memory map [n_rows, d] (``dim``: the width when
        no row was appended)."""
        self._file.close()
        width = self.dim if self.dim is not None else int(dim or 0)
        if self.n_rows == 0 or width == 0:
            return np.zeros((self.n_rows, width), dtype=np.float32)
        return np.memmap(self.path, dtype=np.float32, mode="r", shape=(self.n_rows, width))

    def close(self) -> None:
        self._file.close()


class TextSpool:
    """Title and text of each document appended to a file (UTF-8), read back by number.
    Only the byte offsets stay in memory (two per document)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "w+b")
        self._offsets = array("q", [0])
        self._dirty = False

    def append(self, title: str, text: str) -> None:
        for s in (title, text):
            data = s.encode("utf-8", "surrogatepass")
            self._file.write(data)
            self._offsets.append(self._offsets[-1] + len(data))
        self._dirty = True

    def __len__(self) -> int:
        return (len(self._offsets) - 1) // 2

    def get(self, number: int) -> tuple[str, str]:
        """(title, text) of document ``number``."""
        n = len(self)
        if not -n <= number < n:
            raise IndexError(f"document {number} of {n}")
        i = 2 * (number % n)
        start, mid, end = self._offsets[i], self._offsets[i + 1], self._offsets[i + 2]
        data = self._read(start, end - start)
        return _decode(data[:mid - start]), _decode(data[mid - start:])

    def chunks(self, size: int) -> Iterator[tuple[list[str], list[str]]]:
        """(titles, texts) of ``size`` documents at a time, in order."""
        for first in range(0, len(self), size):
            pairs = [self.get(i) for i in range(first, min(first + size, len(self)))]
            yield [t for t, _ in pairs], [x for _, x in pairs]

    def contents(self) -> "Contents":
        """The documents' encoded texts (``title + " " + text``, stripped) as a sequence."""
        return Contents(self)

    def _read(self, start: int, size: int) -> bytes:
        if self._dirty:
            self._file.flush()
            self._dirty = False
        return os.pread(self._file.fileno(), size, start)

    def close(self) -> None:
        self._file.close()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


class Contents(Sequence[str]):
    """``f"{title} {text}".strip()`` of every document of a :class:`TextSpool` (what BEIR
    encodes, retrieval.beir.Document.contents), read from disk on access."""

    def __init__(self, spool: TextSpool) -> None:
        self.spool = spool

    def __len__(self) -> int:
        return len(self.spool)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        title, text = self.spool.get(i)
        return f"{title} {text}".strip()

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):  # one document in memory at a time, however long
            yield self[i]
