"""The stored texts of an index's documents (``build-index --store-text``): title and text per
document number, so that a searcher can return a hit's text (``Searcher.doc``) and the index
can be extended or re-calibrated without its corpus file.

A part of the index folder (``index.parts.Part``, one entry per document), stored as one
parquet file (``texts.parquet``: columns ``title``, ``text``, row groups of 1024 documents) that
the store checksums. Nothing holds all the texts in memory: an opened index reads a document's
row group when asked for it (:class:`StoredTexts`), a streaming build writes them from its spool
(:class:`SpooledTexts`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alignir.errors import InvalidInputError
from alignir.index.parts import check_empty_folder

TEXTS_FILE = "texts.parquet"


@dataclass
class DocTexts:
    """Title and text of each document, by document number."""

    titles: list[str]
    texts: list[str]

    def __post_init__(self) -> None:
        self.titles, self.texts = [str(t) for t in self.titles], [str(t) for t in self.texts]
        if len(self.titles) != len(self.texts):
            raise InvalidInputError(f"{len(self.titles)} titles for {len(self.texts)} texts")

    @classmethod
    def of(cls, docs: Sequence[Any]) -> "DocTexts":
        """From objects with ``title`` and ``text`` attributes (retrieval.beir.Document)."""
        return cls([d.title for d in docs], [d.text for d in docs])

    @property
    def n_docs(self) -> int:
        return len(self.texts)

    def get(self, number: int) -> tuple[str, str]:
        """(title, text) of document ``number``."""
        return self.titles[int(number)], self.texts[int(number)]

    def describe(self) -> dict[str, Any]:
        return {"n_docs": self.n_docs}

    def save(self, folder: str | Path) -> None:
        _write(check_empty_folder(folder), [(self.titles, self.texts)])

    @classmethod
    def load(cls, folder: str | Path, entry: Mapping[str, Any] | None = None, *, mmap: bool = True) -> "DocTexts":
        """The stored texts, read from the file on demand (:class:`StoredTexts`)."""
        return StoredTexts(Path(folder) / TEXTS_FILE, mmap=mmap)


class StoredTexts(DocTexts):
    """The texts part of an index as stored: ``get`` reads the parquet row group holding the
    document (at most :data:`ROW_GROUP` documents, the last one read kept), so opening an index
    never reads every document's text into memory."""

    def __init__(self, path: Path, mmap: bool = True) -> None:  # not the dataclass fields: a file
        if not path.is_file():
            raise InvalidInputError(f"{path.parent}: the stored texts {TEXTS_FILE} are missing")
        self.path = path
        self._file = pq.ParquetFile(path, memory_map=mmap)
        names = self._file.schema_arrow.names
        if names != ["title", "text"]:
            raise InvalidInputError(f"{path} must have the columns title, text; has {names}")
        meta = self._file.metadata
        self._first = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        self._lock = threading.Lock()
        self._held: tuple[int, list[str], list[str]] = (-1, [], [])

    @property
    def n_docs(self) -> int:
        return int(self._first[-1])

    def get(self, number: int) -> tuple[str, str]:
        number = int(number)
        if not 0 <= number < self.n_docs:
            raise IndexError(f"document {number} of {self.n_docs}")
        group = int(np.searchsorted(self._first, number, side="right")) - 1
        with self._lock:
            held = self._held
            if held[0] != group:
                held = self._held = (group, *self._group(group))
        at = number - int(self._first[group])
        return held[1][at], held[2][at]

    def _group(self, group: int) -> tuple[list[str], list[str]]:
        table = self._file.read_row_group(group)
        return table.column("title").to_pylist(), table.column("text").to_pylist()

    def save(self, folder: str | Path) -> None:
        _write(check_empty_folder(folder), (self._group(g) for g in range(len(self._first) - 1)))

    def __repr__(self) -> str:
        return f"StoredTexts({self.path}, n_docs={self.n_docs})"


class SpooledTexts(DocTexts):
    """The texts part of a build that streamed its corpus: the documents stay in a spool file
    (``index.spool.TextSpool``: ``len``, ``get(number)``, ``chunks(size)``) and are written to the
    index a chunk at a time, never all in memory."""

    def __init__(self, spool: Any, chunk: int = 1024) -> None:  # not the dataclass fields: a spool
        #: documents per parquet row group when saving (the build's batch: as much text in memory)
        self.spool, self.chunk = spool, int(chunk)

    @property
    def n_docs(self) -> int:
        return len(self.spool)

    def get(self, number: int) -> tuple[str, str]:
        return self.spool.get(int(number))

    def save(self, folder: str | Path) -> None:
        _write(check_empty_folder(folder), self.spool.chunks(self.chunk))

    def __repr__(self) -> str:
        return f"SpooledTexts(n_docs={self.n_docs})"


_SCHEMA = pa.schema([("title", pa.string()), ("text", pa.string())])
#: documents per parquet row group: what reading one document's text reads
ROW_GROUP = 1024


def _write(folder: Path, chunks: Iterable[tuple[Sequence[str], Sequence[str]]]) -> None:
    """``texts.parquet`` of (titles, texts) chunks, one row group (or more) per chunk."""
    with pq.ParquetWriter(folder / TEXTS_FILE, _SCHEMA) as writer:
        for titles, texts in chunks:
            writer.write_table(pa.table({"title": pa.array(list(titles), pa.string()),
                                         "text": pa.array(list(texts), pa.string())}, schema=_SCHEMA),
                               row_group_size=ROW_GROUP)
