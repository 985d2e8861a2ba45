"""The parts of an index folder: one small protocol every stored part implements, and a registry.

A part is one searchable structure over the collection's doc numbers (the aligned-token
postings, the FAISS index, the BM25 word postings, any later one). The store
(``index.store``) owns the folder: it gives each part an empty sub-folder of its temp copy,
then checksums every file, writes the one manifest and swaps the folder in atomically. A part
therefore only writes its files (no temp folder, no checksums, no manifest of its own) and
reads them back:

* ``save(folder)`` writes into ``folder`` (given, empty or absent);
* ``load(folder, entry, mmap=...)`` reads it back; ``entry`` is what ``describe()`` returned
  when the part was saved (the store keeps it in ``manifest["parts"][name]``);
* ``n_docs`` is the size of its doc-number space (must equal the index's document count);
* ``describe()`` is its JSON manifest entry (sizes, parameters a reader needs).

The registry maps a part name (the key in ``manifest["parts"]`` and ``StoredIndex.parts``) to
its class, default sub-folder and unit: "row" parts hold one entry per stored encoder row (the
dense and aligned-token parts: a passage each when the index splits documents into passages),
"doc" parts one per document (the BM25 part, the passage map itself). Without the
``passages`` part (``index.passages.PassageMap``) rows and documents are the same. Built-in parts are registered by import path, so opening an
index imports faiss only when it has a dense part; :func:`register_part` adds a new part
without editing the store.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from alignir.errors import InvalidInputError

__all__ = ["Part", "PartSpec", "register_part", "part_spec", "registered_parts", "check_empty_folder"]


@runtime_checkable
class Part(Protocol):
    """What the index store needs from a stored part (see the module docstring)."""

    @property
    def n_docs(self) -> int: ...

    def save(self, folder: Path) -> None: ...

    @classmethod
    def load(cls, folder: Path, entry: Mapping[str, Any] | None = None, *, mmap: bool = True) -> "Part": ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PartSpec:
    """A registered part: its name, its class (or ``"module:Class"``, imported on first use),
    the sub-folder of the index it is stored in and its unit ("row" | "doc", see above)."""

    name: str
    target: type | str
    folder: str
    unit: str = "row"

    def cls(self) -> type:
        if isinstance(self.target, str):
            module, _, attr = self.target.partition(":")
            return getattr(importlib.import_module(module), attr)
        return self.target


_REGISTRY: dict[str, PartSpec] = {}
#: names the store uses for its own files and manifest keys: no part may take them
_RESERVED = {"doc_ids", "dense_vectors", "pc1", "extra", "manifest.json", "doc_ids.parquet", "dense.npy",
             "pc1.npy"}


UNITS = ("row", "doc")
#: the part that maps rows to documents (index.passages.PassageMap)
PASSAGES = "passages"


def register_part(name: str, cls: type | str, folder: str | None = None, replace: bool = False,
                  unit: str = "row") -> PartSpec:
    """Register the part ``name`` stored by ``cls`` (a class implementing :class:`Part`, or
    ``"module:Class"``) in the sub-folder ``folder`` (default: ``name``); ``unit``: "row" (one
    entry per encoder row: its ``n_docs`` counts rows) or "doc" (per document). ``replace``:
    allow re-registering a name (tests, plugins that override a built-in)."""
    folder = folder or name
    if unit not in UNITS:
        raise InvalidInputError(f"part unit must be one of {UNITS}, got {unit!r}")
    for what, value in (("name", name), ("folder", folder)):
        if (not value or not value.replace("_", "").replace("-", "").isalnum() or value in _RESERVED):
            raise InvalidInputError(f"invalid part {what} {value!r}: use letters, digits, '_' and '-', "
                                    f"not one of the store's own names")
    taken = {s.folder: s.name for s in _REGISTRY.values() if s.name != name}
    if folder in taken:
        raise InvalidInputError(f"part folder {folder!r} is already used by part {taken[folder]!r}")
    if name in _REGISTRY and not replace:
        raise InvalidInputError(f"a part named {name!r} is already registered")
    spec = PartSpec(name, cls, folder, unit)
    _REGISTRY[name] = spec
    return spec


def unregister_part(name: str) -> None:
    """Remove a registered part (tests, plugins)."""
    _REGISTRY.pop(name, None)


def part_spec(name: str) -> PartSpec:
    """The registered part ``name``; :class:`KeyError` if there is none."""
    return _REGISTRY[name]


def registered_parts() -> dict[str, PartSpec]:
    """Every registered part by name (a copy)."""
    return dict(_REGISTRY)


def check_empty_folder(folder: str | Path) -> Path:
    """Create ``folder`` if needed and refuse a non-empty one: a part writes into a fresh folder
    (replacing files another reader may have memory-mapped would corrupt it; atomic replacement
    is the store's job)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise InvalidInputError(f"{folder} is not empty: a part is saved into a new or empty folder "
                                f"(index.store.write_index / replace_part replace parts atomically)")
    return folder


def json_clean(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as plain JSON data (what the manifest will hold after a round trip)."""
    return json.loads(json.dumps(dict(value)))


register_part("sparse", "alignir.index.sparse:SparseIndex", "sparse")
register_part("dense", "alignir.index.dense:DenseIndex", "faiss")
register_part("lexical", "alignir.index.lexical:LexicalLeg", "lexical", unit="doc")
register_part(PASSAGES, "alignir.index.passages:PassageMap", "passages", unit="doc")
register_part("texts", "alignir.index.texts:DocTexts", "texts", unit="doc")
