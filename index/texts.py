"""The stored texts of an index's documents (``build-index --store-text``): title and text per
document number, so that a searcher can return a hit's text (``Searcher.doc``) and the index
can be extended or re-calibrated without its corpus file.

A part of the index folder (``index.parts.Part``, one entry per document), stored as one
parquet file (``texts.parquet``: columns ``title``, ``text``) that the store checksums.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

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
        folder = check_empty_folder(folder)
        table = pa.table({"title": pa.array(self.titles, pa.string()), "text": pa.array(self.texts, pa.string())})
        pq.write_table(table, folder / TEXTS_FILE)

    @classmethod
    def load(cls, folder: str | Path, entry: Mapping[str, Any] | None = None, *, mmap: bool = True) -> "DocTexts":
        path = Path(folder) / TEXTS_FILE
        if not path.is_file():
            raise InvalidInputError(f"{path.parent}: the stored texts {TEXTS_FILE} are missing")
        table = pq.read_table(path, memory_map=mmap)
        if table.column_names != ["title", "text"]:
            raise InvalidInputError(f"{path} must have the columns title, text; has {table.column_names}")
        return cls(table.column("title").to_pylist(), table.column("text").to_pylist())
