"""Opening an index folder: :func:`open_index` validates the manifest, verifies the files'
checksums, loads the doc ids, dense vectors, PC1, extra arrays and every stored part (through
``index.parts``) into a :class:`StoredIndex`. An open that races a writer's swap opens the new
version instead of calling a healthy index corrupt."""
from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alignir.errors import CorruptIndexError, IndexReadError, InvalidInputError, NotAnIndexError, UnsupportedFormatError
from alignir.index.folder import MANIFEST
from alignir.index.manifest_io import check_fingerprint, read_manifest, verify_index
from alignir.index.parts import PASSAGES, Part, part_spec

__all__ = ["StoredIndex", "open_index"]

log = logging.getLogger(__name__)


@dataclass
class StoredIndex:
    """An opened index folder. ``dense_vectors`` is memory-mapped when opened with
    ``mmap=True``; ``parts`` holds the loaded parts by name (``index.parts``); ``sparse`` /
    ``dense`` / ``lexical`` are the built-in ones, None when the index has no such part
    (``lexical``: absent from indexes built before it existed or with ``--no-lexical``)."""

    path: Path
    manifest: dict[str, Any]
    doc_ids: list[str]
    dense_vectors: np.ndarray
    pc1: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    parts: dict[str, Part] = field(default_factory=dict)

    _numbers: dict[str, int] | None = field(default=None, repr=False)

    @property
    def sparse(self) -> Any:
        """The aligned-token postings (``index.sparse.SparseIndex``), or None."""
        return self.parts.get("sparse")

    @property
    def dense(self) -> Any:
        """The FAISS index (``index.dense.DenseIndex``), or None."""
        return self.parts.get("dense")

    @property
    def lexical(self) -> Any:
        """The BM25 word postings (``index.lexical.LexicalLeg``), or None."""
        return self.parts.get("lexical")

    @property
    def passages(self) -> Any:
        """The passage map (``index.passages.PassageMap``: the document of every row), or
        None when every row is one document."""
        return self.parts.get(PASSAGES)

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def n_rows(self) -> int:
        """Rows of the dense vectors and the row parts (passages; = documents without them)."""
        return int(self.dense_vectors.shape[0])

    def doc_numbers(self, ids: Sequence[str]) -> np.ndarray:
        """Doc numbers (row indices, int64) of document ids; unknown ids raise ValueError."""
        if self._numbers is None:
            self._numbers = {d: i for i, d in enumerate(self.doc_ids)}
        missing = [d for d in ids if d not in self._numbers]
        if missing:
            raise InvalidInputError(f"unknown document id(s): {missing[:5]}")
        return np.fromiter((self._numbers[d] for d in ids), dtype=np.int64, count=len(ids))

    @property
    def fingerprint(self) -> dict[str, Any]:
        return self.manifest["encoder"]

    @property
    def params(self) -> dict[str, Any]:
        return self.manifest.get("params", {})

    def check_fingerprint(self, fingerprint: Mapping[str, Any]) -> None:
        check_fingerprint(self.manifest, fingerprint)


def open_index(path: str | Path, verify: bool = True, mmap: bool = True,
               parts: Iterable[str] | None = None, *, load_sparse: bool | None = None,
               load_dense: bool | None = None, load_lexical: bool | None = None) -> StoredIndex:
    """Open an index folder: validate the manifest, verify checksums (``verify``), load
    the doc ids, dense vectors, PC1, extra arrays, and the stored parts (``parts``: the
    names to load, None: all; see ``index.parts``). ``mmap``: memory-map the dense vectors
    and every part that can be (``Part.load(mmap=...)``) instead of reading them.
    Errors: :class:`NotAnIndexError`, :class:`CorruptIndexError`,
    :class:`UnsupportedFormatError` (also for a part this alignir has no class for).

    A writer may swap a new version in while this reads: when reading fails and the manifest
    has changed meanwhile, the new version is opened (once) instead of calling a healthy
    index corrupt.

    ``load_sparse`` / ``load_dense`` / ``load_lexical=False`` (deprecated): leave that part out,
    as ``parts=`` without its name does."""
    path = Path(path).absolute()
    if isinstance(parts, str):
        raise InvalidInputError("parts must be a collection of part names, e.g. ('sparse',), not a string")
    wanted = None if parts is None else frozenset(parts)
    legacy = {"sparse": load_sparse, "dense": load_dense, "lexical": load_lexical}
    skip = {name for name, flag in legacy.items() if flag is False}
    if any(flag is not None for flag in legacy.values()):
        warnings.warn("open_index(load_sparse=, load_dense=, load_lexical=) is deprecated: pass "
                      "parts=(names to load)", DeprecationWarning, stacklevel=2)
    if skip:
        wanted = _AllBut(skip) if wanted is None else wanted - skip
    before = _manifest_bytes(path)
    try:
        return _open_once(path, verify, mmap, wanted)
    except (CorruptIndexError, NotAnIndexError, IndexReadError):
        if _manifest_bytes(path) == before:
            raise
        log.info("%s was replaced while it was being opened: opening the new version", path)
        return _open_once(path, verify, mmap, wanted)


class _AllBut(frozenset):
    """Every part name except these (``name in _AllBut(x)`` is ``name not in x``)."""

    def __contains__(self, name: object) -> bool:
        return not super().__contains__(name)


def _manifest_bytes(path: Path) -> bytes | None:
    try:
        return (path / MANIFEST).read_bytes()
    except OSError:
        return None


def _open_once(path: Path, verify: bool, mmap: bool, wanted: frozenset[str] | None) -> StoredIndex:
    manifest = read_manifest(path)
    if verify:
        verify_index(path, manifest)
    comps = manifest["components"]
    n = manifest["counts"].get("docs")
    n_rows = manifest["counts"].get("rows", n)
    if PASSAGES in manifest["parts"] and wanted is not None and not isinstance(wanted, _AllBut):
        wanted = frozenset(wanted) | {PASSAGES}  # rows mean nothing without their documents
    try:
        table = pq.read_table(path / comps["doc_ids"])
        doc_ids = table.column("doc_id").to_pylist()
        vectors = np.load(path / comps["dense_vectors"], mmap_mode="r" if mmap else None,
                          allow_pickle=False)
        pc1 = np.load(path / comps["pc1"], allow_pickle=False) if "pc1" in comps else None
        extra = {name: np.load(path / rel, allow_pickle=False)
                 for name, rel in comps.get("extra", {}).items()}
    except (OSError, ValueError, KeyError, pa.ArrowException) as e:
        raise CorruptIndexError(f"{path}: cannot read the index ({e}); rebuild it") from e
    if len(doc_ids) != n or vectors.ndim != 2 or vectors.shape[0] != n_rows:
        raise CorruptIndexError(f"{path}: manifest says {n} documents ({n_rows} rows), doc ids have "
                                f"{len(doc_ids)}, dense vectors {vectors.shape}")
    loaded = {name: _load_part(path, name, entry, mmap, n, n_rows)
              for name, entry in manifest["parts"].items() if wanted is None or name in wanted}
    pmap = loaded.get(PASSAGES)
    if pmap is not None and int(pmap.n_rows) != n_rows:  # type: ignore[attr-defined]
        raise CorruptIndexError(f"{path}: the passage map has {pmap.n_rows} rows, the manifest says {n_rows}")  # type: ignore[attr-defined]
    return StoredIndex(path, manifest, doc_ids, vectors, pc1, extra, loaded)


def _load_part(path: Path, name: str, entry: Mapping[str, Any], mmap: bool, n: int, n_rows: int | None = None) -> Part:
    try:
        spec = part_spec(name)
    except KeyError:
        raise UnsupportedFormatError(
            f"{path} has a part {name!r} that this alignir does not know (written by a newer alignir "
            f"or a plugin that is not installed); open it with parts= naming the parts you need") from None
    try:  # checksums were verified by the caller (or verification was declined)
        part = spec.cls().load(path / entry["path"], entry, mmap=mmap)
    except ValueError as e:
        raise CorruptIndexError(f"{path}: {e}") from e
    except KeyError as e:  # the part's own metadata lacks a key
        raise CorruptIndexError(f"{path}: the {name} part's metadata lacks {e}; the index is corrupt") from e
    want = n if spec.unit == "doc" or n_rows is None else n_rows
    if int(part.n_docs) != want:
        raise CorruptIndexError(f"{path}: the {name} part has {part.n_docs} {spec.unit}s, expected {want}")
    return part
