"""The index directory: one folder holding everything a search needs, written atomically.

Layout (all paths relative to the index folder)::

    manifest.json      format, encoder fingerprint + hash, params (K, M, λ, weighting,
                       folding...), counts, dims, one entry per part (``parts``: its
                       sub-folder + what its ``describe()`` returned), sha256 + size of
                       every other file, and its own sha256
    doc_ids.parquet    column ``doc_id`` (string): row i = doc number i
    dense.npy          the encoder's vectors h [rows, d], float32 or float16 — what a
                       re-sparsify (new K/M/λ/weighting, “A Text is Worth Several Tokens” eq.14-16) starts from
    pc1.npy            the corpus first principal component u1 (“A Text is Worth Several Tokens” eq.14), optional
    sparse/            part "sparse": ``index.sparse.SparseIndex.save`` output, optional
    faiss/             part "dense": ``index.dense.DenseIndex.save`` output, optional
    lexical/           part "lexical": ``index.lexical.LexicalLeg.save`` output (BM25
                       word-term postings + vocab.json), optional
    passages/          part "passages": ``index.passages.PassageMap.save`` output (the
                       document of every row when documents are split into passages),
                       optional: without it every row is one document

Rows and documents: the dense vectors and the "row" parts (sparse, dense) hold one row per
encoded text, the "doc" parts (lexical) one entry per document (``index.parts``). They are
the same unless the index has the passages part; then ``counts["rows"]`` records the rows.
    extra/NAME.npy     any further arrays the caller stores

The store knows no part by name: it saves and loads whatever ``index.parts`` registers
(``Part``: ``save(folder)``, ``load(folder, entry, mmap=...)``, ``n_docs``, ``describe()``).
Format 1 (before parts had a protocol) named the parts in ``components`` and kept their
sizes in ``counts`` / ``dims``; such indexes open unchanged and are rewritten as format 2
by the next write.

Atomic commit: everything is written into a hidden temp folder next to the target,
checksummed, fsynced, then swapped into place — with ``renameat2(RENAME_EXCHANGE)``
where the kernel offers it (one atomic step), otherwise by renaming the old index to a
backup, the new one into place, and deleting the backup (an interrupted swap is undone
by the next ``open_index`` / write). On any failure the temp folder is removed and the
previous index is untouched. Nothing is pickled: arrays load with
``allow_pickle=False``, metadata is JSON, the table is parquet.
"""
from __future__ import annotations

from alignir.errors import (CorruptIndexError, FingerprintMismatch, IndexChangedError, IndexReadError, IndexStoreError,
                            IndexWriteError, InvalidInputError, NotAnIndexError, UnsupportedFormatError)

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alignir.io import exchange_paths, fsync_dir, fsync_path, save_npy, sha256_file, umask
from alignir.index.parts import PASSAGES, Part, PartSpec, json_clean, part_spec, registered_parts

log = logging.getLogger(__name__)

FORMAT_NAME = "alignir-index"
FORMAT_VERSION = 2  # 2: parts under manifest["parts"]; 1 is still read
MANIFEST = "manifest.json"
DOC_IDS = "doc_ids.parquet"
DENSE_VECTORS = "dense.npy"
PC1 = "pc1.npy"
EXTRA_DIR = "extra"
#: keys of manifest.json that the store computes; callers may not set them
RESERVED = ("format", "format_version", "created", "encoder_hash", "counts", "dims",
            "files", "components", "parts", "dense_dtype", "dense_index", "lexical", "manifest_sha256")

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


_ERRNO_HINTS = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for this filesystem or process limit",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only filesystem",
}


# ---------------------------------------------------------------------------------
# fingerprints


def fingerprint_hash(fingerprint: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an encoder fingerprint."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_fingerprint(manifest: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> None:
    """Raise :class:`FingerprintMismatch` naming every field (dotted for nested dicts)
    where the query encoder's ``fingerprint`` differs from ``manifest["encoder"]``."""
    stored = manifest.get("encoder")
    if not isinstance(stored, Mapping):
        raise CorruptIndexError("the manifest has no encoder fingerprint")
    # JSON round trip so tuples/lists and int/float spellings compare as stored
    query = json.loads(json.dumps(fingerprint, sort_keys=True))
    if fingerprint_hash(stored) == fingerprint_hash(query):
        return
    a, b = _flatten(stored), _flatten(query)
    missing = object()
    diffs = {k: (a.get(k, "<absent>"), b.get(k, "<absent>"))
             for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)}
    raise FingerprintMismatch(diffs or {"<structure>": (stored, query)})


# ---------------------------------------------------------------------------------
# low-level file helpers


_sha256 = sha256_file
_fsync_path = fsync_path


def _list_files(root: Path) -> list[str]:
    """Relative POSIX paths of all regular files under ``root``, sorted."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            out.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(out)


#: set to False to force the two-rename swap (tests use it to cover that path)
USE_RENAME_EXCHANGE = True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _siblings(path: Path, tag: str) -> list[tuple[Path, int]]:
    """Hidden work folders ``.{name}.{tag}-{pid}-*`` next to ``path``."""
    pat = re.compile(rf"^\.{re.escape(path.name)}\.{tag}-(\d+)-")
    out = []
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return out
    for p in entries:
        m = pat.match(p.name)
        if m and p.is_dir():
            out.append((p, int(m.group(1))))
    return out


def recover(path: str | Path) -> None:
    """Undo an interrupted write next to ``path``: if ``path`` is gone but a backup of
    the previous index survives, put it back; delete temp folders of dead writers."""
    path = Path(path)
    backups = [(p, pid) for p, pid in _siblings(path, "old") if not _pid_alive(pid)]
    if not path.exists() and backups:
        complete = [p for p, _ in backups if (p / MANIFEST).is_file()]
        if complete:
            os.rename(max(complete, key=lambda p: p.stat().st_mtime), path)
    for p, pid in _siblings(path, "tmp") + _siblings(path, "old"):
        if p.exists() and not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------------------
# writing


def _describe_oserror(e: OSError) -> str:
    if e.errno is None and "requested and" in str(e):  # numpy's short-write message
        return f"short write ({e}): disk full or file size limit"
    return _ERRNO_HINTS.get(e.errno or -1, e.strerror or str(e))


def _refuse_read_only(path: Path) -> None:
    """An index whose folder (or manifest) nobody may write to was made read-only on purpose:
    never replace it (checked on the mode bits, which bind root too, unlike os.access)."""
    for p in (path, path / MANIFEST):
        if p.exists() and not stat.S_IMODE(p.stat().st_mode) & 0o222:
            raise IndexWriteError(f"{path} is read-only ({p.name} has no write permission); "
                                  f"refusing to replace it: make it writable (chmod -R u+w) or write elsewhere")


class IndexWriter:
    """Build an index folder in a temp directory next to ``path``; :meth:`commit` swaps
    it in atomically. Use as a context manager: leaving the block without commit (or
    with an exception) removes the temp folder and leaves ``path`` as it was.

    ``path`` may not be an existing non-index folder (unless empty): the writer
    refuses to replace arbitrary data.
    """

    def __init__(self, path: str | Path, fsync: bool = True) -> None:
        # a symlinked index path is written through: the new index replaces the link's target
        # (the link stays a link), and the temp folder is made beside the target
        self.path = Path(os.path.realpath(Path(path).expanduser()))
        self.fsync = fsync
        self.committed = False
        self._existed = False
        self.tmp: Path | None = None
        with self._guard("preparing"):
            self._existed = self.path.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            recover(self.path)
            if self.path.exists():
                if not self.path.is_dir():
                    raise NotAnIndexError(f"{self.path} exists and is not a folder; refusing to replace it")
                if not (self.path / MANIFEST).is_file() and any(self.path.iterdir()):
                    raise NotAnIndexError(f"{self.path} exists and is not an alignir index "
                                          "(no manifest.json); refusing to replace it")
                _refuse_read_only(self.path)
                self._existed = True
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-{os.getpid()}-",
                                             dir=self.path.parent))
            os.chmod(self.tmp, 0o777 & ~umask())  # mkdtemp makes 0700; an index is shared

    # ---- content -----------------------------------------------------------------

    def file(self, rel: str) -> Path:
        """Absolute path for ``rel`` inside the temp folder (parents created)."""
        p = self._inside(rel)
        with self._guard(f"creating {rel}"):
            p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def directory(self, rel: str) -> Path:
        p = self._inside(rel)
        with self._guard(f"creating {rel}/"):
            p.mkdir(parents=True, exist_ok=True)
        return p

    def save_array(self, rel: str, array: np.ndarray) -> None:
        with self._guard(f"writing {rel}"):
            save_npy(self.file(rel), array)

    def save_doc_ids(self, doc_ids: Sequence[str]) -> None:
        ids = [str(x) if not isinstance(x, str) else x for x in doc_ids]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(x for x in ids if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            raise InvalidInputError(f"duplicate document id {dup!r}: document ids must be unique")
        table = pa.table({"doc_id": pa.array(ids, type=pa.string())})
        with self._guard(f"writing {DOC_IDS}"):
            pq.write_table(table, self.file(DOC_IDS))

    def _inside(self, rel: str) -> Path:
        if self.tmp is None or self.committed:
            raise RuntimeError("this IndexWriter is closed")
        p = (self.tmp / rel).resolve()
        if self.tmp.resolve() not in p.parents:
            raise InvalidInputError(f"{rel!r} is not a path inside the index")
        return p

    # ---- commit / abort ----------------------------------------------------------

    def commit(self, manifest: Mapping[str, Any]) -> Path:
        """Checksum every file, write ``manifest.json`` (``manifest`` plus ``files``),
        fsync, swap into place. Returns the index path."""
        if self.tmp is None or self.committed:
            raise RuntimeError("this IndexWriter is closed")
        tmp = self.tmp
        with self._guard("committing"):
            files = {}
            for rel in _list_files(tmp):
                if rel == MANIFEST:
                    continue
                files[rel] = {"sha256": _sha256(tmp / rel), "bytes": (tmp / rel).stat().st_size}
            full = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
            full["files"] = files
            full = seal_manifest(full)
            with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
                json.dump(full, f, indent=2, sort_keys=False, ensure_ascii=False)
                f.write("\n")
            if self.fsync:
                for dirpath, _dirs, names in os.walk(tmp):
                    for name in names:
                        _fsync_path(Path(dirpath) / name)
                    fsync_dir(dirpath)
            self._swap()
        self.committed = True
        self.tmp = None
        return self.path

    def _swap(self) -> None:
        assert self.tmp is not None
        parent = self.path.parent
        if self.path.exists():
            if USE_RENAME_EXCHANGE and exchange_paths(self.tmp, self.path):
                old = self.tmp  # now holds the previous index
            else:
                old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-{os.getpid()}-", dir=parent))
                os.rmdir(old)
                os.rename(self.path, old)
                try:
                    os.rename(self.tmp, self.path)
                except BaseException:
                    os.rename(old, self.path)
                    raise
        else:
            os.rename(self.tmp, self.path)
            old = None
        if self.fsync:
            fsync_dir(parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Remove the temp folder; the previous index (if any) stays as it was."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.committed:
            self.abort()

    class _Guard:
        def __init__(self, writer: "IndexWriter", what: str) -> None:
            self.writer, self.what = writer, what

        def __enter__(self) -> None:
            return None

        def __exit__(self, etype: Any, e: Any, tb: Any) -> bool:
            if e is None:
                return False
            self.writer.abort()
            if isinstance(e, OSError) and not isinstance(e, IndexStoreError):
                w = self.writer
                before = ("the previous index is intact" if w._existed
                          else "no index was created")
                raise IndexWriteError(
                    e.errno, f"could not write index {w.path} ({self.what}): "
                    f"{_describe_oserror(e)} [{e.filename or w.path.parent}]. "
                    f"Nothing was changed: {before}.") from e
            return False

    def _guard(self, what: str) -> "IndexWriter._Guard":
        return IndexWriter._Guard(self, what)


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name) or "/" in name:
        raise InvalidInputError(f"invalid array name {name!r}: use letters, digits, '_', '-', '.'")
    return name


def _base_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(manifest, Mapping):
        raise InvalidInputError("manifest must be a dict")
    clash = [k for k in RESERVED if k in manifest]
    if clash:
        raise InvalidInputError(f"manifest keys {clash} are computed by the store; do not pass them")
    enc = manifest.get("encoder")
    if not isinstance(enc, Mapping):
        raise InvalidInputError("manifest['encoder'] must be the encoder fingerprint dict")
    try:
        out = json.loads(json.dumps(dict(manifest)))
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"manifest must be JSON-serialisable: {e}") from e
    return out


def write_index(
    path: str | Path,
    manifest: Mapping[str, Any],
    doc_ids: Sequence[str],
    dense_vectors: np.ndarray,
    *,
    parts: Mapping[str, Part | None] | None = None,
    pc1: np.ndarray | None = None,
    extra_arrays: Mapping[str, np.ndarray] | None = None,
    dense_dtype: str = "float32",
    fsync: bool = True,
    sparse_index: Part | None = None,
    dense_index: Part | None = None,
    lexical: Part | None = None,
) -> Path:
    """Write a complete index folder at ``path`` atomically (replacing an older index).

    ``manifest``: at least ``{"encoder": fingerprint}``; usually also ``"params"``
    (K, M, lambda, weighting, folding...). The store adds format, encoder hash,
    counts, dims, components, the parts' entries and checksums. ``parts``: name -> part
    (``index.parts.Part``; names registered with ``index.parts.register_part``: built in are
    ``"sparse"`` (``SparseIndex``), ``"dense"`` (``DenseIndex``), ``"lexical"``
    (``LexicalLeg``)); each is saved into its sub-folder and ``describe()``d into
    ``manifest["parts"][name]``; None values are skipped. ``sparse_index`` / ``dense_index`` /
    ``lexical``: deprecated spellings of ``parts={"sparse": ..., "dense": ..., "lexical": ...}``.
    ``dense_dtype``: ``"float32"`` (exact re-sparsify) or ``"float16"`` (half size).
    Raises ValueError on inconsistent inputs (before anything is written),
    :class:`IndexWriteError` on I/O failure (nothing changed).
    """
    full = _base_manifest(manifest)
    ids = list(doc_ids)
    n = len(ids)
    if n == 0:
        raise InvalidInputError("cannot write an index with 0 documents")
    parts = _with_legacy_parts(parts, sparse=sparse_index, dense=dense_index, lexical=lexical)
    n_rows = _rows_of(parts, n)
    vec = np.asarray(dense_vectors)
    if vec.ndim != 2 or vec.shape[0] != n_rows:
        what = f"n_docs={n}" if n_rows == n else f"rows={n_rows} (passages)"
        raise InvalidInputError(f"dense_vectors must be [{what}, d], got shape {vec.shape}")
    if dense_dtype not in ("float32", "float16"):
        raise InvalidInputError(f"dense_dtype must be 'float32' or 'float16', got {dense_dtype!r}")
    if not np.isfinite(vec).all():
        raise InvalidInputError("dense_vectors contain NaN or infinite values")
    if dense_dtype == "float16" and np.abs(vec).max(initial=0) > np.finfo(np.float16).max:
        raise InvalidInputError("dense_vectors exceed the float16 range; store them as float32")
    vec = vec.astype(dense_dtype, copy=False)
    todo = _check_parts(parts, n, n_rows)
    if pc1 is not None:
        pc1 = _check_pc1(pc1, int(vec.shape[1]))
    extras = {_check_name(k): np.asarray(v) for k, v in (extra_arrays or {}).items()}

    components: dict[str, Any] = {"doc_ids": DOC_IDS, "dense_vectors": DENSE_VECTORS}
    full.update({
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created": _now(),
        "encoder_hash": fingerprint_hash(full["encoder"]),
        "dense_dtype": dense_dtype,
        "counts": {"docs": n, **({"rows": n_rows} if PASSAGES in parts and parts[PASSAGES] is not None else {})},
        "dims": {"dense": int(vec.shape[1])},
    })
    with IndexWriter(path, fsync=fsync) as w:
        w.save_doc_ids(ids)
        w.save_array(DENSE_VECTORS, vec)
        entries = {spec.name: _save_part(w, spec, obj) for spec, obj in todo}
        _save_store_arrays(w, components, pc1, extras)
        full["components"] = components
        full["parts"] = entries
        return w.commit(full)


def _with_legacy_parts(parts: Mapping[str, Part | None] | None, **legacy: Part | None) -> Mapping[str, Part | None]:
    """``parts`` plus the parts given by their old keyword names (deprecated, kept for callers
    written before ``parts=``)."""
    given = {k: v for k, v in legacy.items() if v is not None}
    if not given:
        return parts or {}
    warnings.warn("write_index(sparse_index=, dense_index=, lexical=) is deprecated: pass "
                  "parts={'sparse': ..., 'dense': ..., 'lexical': ...}", DeprecationWarning, stacklevel=3)
    if not isinstance(parts, Mapping) and parts is not None:
        raise InvalidInputError("parts must be a dict: part name -> part")
    both = sorted(set(given) & set(parts or {}))
    if both:
        raise InvalidInputError(f"part(s) {both} given twice (parts= and a keyword)")
    return {**(parts or {}), **given}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_pc1(pc1: np.ndarray, dim: int) -> np.ndarray:
    pc1 = np.asarray(pc1, dtype=np.float32)
    if pc1.shape != (dim,):
        raise InvalidInputError(f"pc1 must have shape ({dim},), got {pc1.shape}")
    return pc1


def _spec(name: str) -> PartSpec:
    try:
        return part_spec(name)
    except KeyError:
        known = ", ".join(sorted(registered_parts()))
        raise InvalidInputError(f"unknown index part {name!r} (registered parts: {known}; "
                                f"add one with index.parts.register_part)") from None


def _rows_of(parts: Mapping[str, Part | None] | None, n: int) -> int:
    """The row count of an index of ``n`` documents with these parts: the passage map's
    rows when there is one (it must cover the ``n`` documents), else ``n``."""
    pmap = (parts or {}).get(PASSAGES) if isinstance(parts, Mapping) else None
    if pmap is None:
        return n
    if int(pmap.n_docs) != n:
        raise InvalidInputError(f"the passage map covers {pmap.n_docs} documents, the index has {n}")
    return int(pmap.n_rows)  # type: ignore[attr-defined]


def _check_parts(parts: Mapping[str, Part | None], n: int, n_rows: int | None = None) -> list[tuple[PartSpec, Part]]:
    """The (spec, part) pairs to save, each checked: registered name, its class, ``n`` docs
    ("doc" parts) or ``n_rows`` rows ("row" parts; default ``n``)."""
    n_rows = n if n_rows is None else n_rows
    if not isinstance(parts, Mapping):
        raise InvalidInputError("parts must be a dict: part name -> part")
    out = []
    for name, obj in parts.items():
        spec = _spec(name)
        if obj is None:
            continue
        cls = spec.cls()
        if not isinstance(obj, cls):
            raise InvalidInputError(f"part {name!r} must be a {cls.__name__}, got {type(obj).__name__}")
        want = n if spec.unit == "doc" else n_rows
        if int(obj.n_docs) != want:
            what = "documents" if spec.unit == "doc" or n_rows == n else "rows (passages)"
            raise InvalidInputError(f"part {name!r} holds {obj.n_docs} {what.split()[0]}, the index has {want} {what}")
        out.append((spec, obj))
    return out


def _save_part(w: IndexWriter, spec: PartSpec, obj: Part) -> dict[str, Any]:
    """Save ``obj`` into its sub-folder of the temp index; returns its manifest entry."""
    target = w._inside(spec.folder)
    with w._guard(f"writing {spec.folder}/"):
        obj.save(target)
    entry = json_clean(obj.describe())
    if "path" in entry:
        raise InvalidInputError(f"part {spec.name!r}: describe() may not set 'path' (the store's key)")
    return {"path": spec.folder, **entry}


def _save_store_arrays(w: IndexWriter, components: dict[str, Any], pc1: np.ndarray | None,
                       extras: Mapping[str, np.ndarray]) -> None:
    """Write PC1 and the named extra arrays; record them in ``components``."""
    if pc1 is not None:
        w.save_array(PC1, pc1)
        components["pc1"] = PC1
    if extras:
        components["extra"] = dict(components.get("extra", {}))
        for name, arr in extras.items():
            w.save_array(f"{EXTRA_DIR}/{name}.npy", arr)
            components["extra"][name] = f"{EXTRA_DIR}/{name}.npy"


# ---------------------------------------------------------------------------------
# reading


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


#: the manifest's own checksum: sha256 of its canonical JSON without this key
MANIFEST_CHECKSUM = "manifest_sha256"
#: the first format whose manifests always carry that checksum (format 1 predates it: only there
#: may it be missing)
FIRST_SEALED_VERSION = 2


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical form (sorted keys, no spaces, without its checksum)."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def seal_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with its own checksum (what :func:`read_manifest` verifies)."""
    return {**{k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM},
            MANIFEST_CHECKSUM: manifest_digest(manifest)}


def _paths_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for v in node.values():
            yield from _paths_in(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _paths_in(v)


def _check_inside(path: Path, mpath: Path, manifest: Mapping[str, Any]) -> None:
    """Every file, component and part path of the manifest must stay inside the index folder."""
    root = path.resolve()
    part_dirs = [e.get("path") for e in manifest["parts"].values()]
    for rel in [*manifest["files"], *_paths_in(manifest["components"]), *part_dirs]:
        if not isinstance(rel, str) or not rel:
            raise CorruptIndexError(f"{mpath}: invalid path {rel!r}; the manifest is corrupt")
        target = (path / rel).resolve()
        if Path(rel).is_absolute() or (target != root and root not in target.parents):
            raise CorruptIndexError(f"{mpath}: the path {rel!r} points outside the index folder; "
                                    f"the manifest is corrupt or was tampered with")


#: format 1 named each part by hand: components key -> (part name, its manifest entry)
def _v1_parts(m: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    comps, counts, dims = m["components"], m["counts"], m["dims"]
    found = {
        "sparse": ("sparse", {"n_terms": dims.get("sparse_terms"), "n_postings": counts.get("sparse_postings")}),
        "faiss": ("dense", {"kind": (m.get("dense_index") or {}).get("kind"), "dim": dims.get("faiss"),
                            "n_live": counts.get("dense_live")}),
        "lexical": ("lexical", {"params": m.get("lexical") or {}, "n_terms": dims.get("lexical_terms"),
                                "n_postings": counts.get("lexical_postings")}),
    }
    return {name: {"path": comps[key], **{k: v for k, v in entry.items() if v is not None}}
            for key, (name, entry) in found.items() if key in comps}


def _upgrade_v1(m: dict[str, Any]) -> dict[str, Any]:
    """A format-1 manifest in today's shape (parts under ``manifest["parts"]``); on disk it
    stays as written until the next write of the index."""
    out = {k: v for k, v in m.items() if k not in ("lexical", "dense_index")}
    out["parts"] = _v1_parts(m)
    out["components"] = {k: v for k, v in m["components"].items() if k not in ("sparse", "faiss", "lexical")}
    out["counts"] = {k: v for k, v in m["counts"].items() if k == "docs"}
    out["dims"] = {k: v for k, v in m["dims"].items() if k == "dense"}
    return out


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and validate ``manifest.json`` (format name and version, its own checksum), not the
    files' checksums. A format-1 manifest is returned in today's shape (see ``_upgrade_v1``)."""
    path = Path(path)
    if not path.exists():
        recover(path)
    if not path.exists():
        raise NotAnIndexError(f"no index at {path}: the folder does not exist")
    if not path.is_dir():
        raise NotAnIndexError(f"{path} is a file, not an index folder")
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise NotAnIndexError(f"{path} is not an alignir index (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except OSError as e:
        raise IndexReadError(e.errno, f"cannot read {mpath}: {_describe_oserror(e)}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptIndexError(f"{mpath} is not valid JSON ({e}); the index is corrupt") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise NotAnIndexError(f"{mpath} is not an alignir index manifest (format != {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptIndexError(f"{mpath}: invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{path} uses index format {version}, newer than this alignir supports "
            f"({FORMAT_VERSION}); upgrade alignir to open it")
    stored_digest = manifest.get(MANIFEST_CHECKSUM)
    if stored_digest is None and version >= FIRST_SEALED_VERSION:
        raise CorruptIndexError(f"{mpath} lacks its own checksum ({MANIFEST_CHECKSUM!r}), which every format-{version} "
                                f"manifest carries: it was edited or damaged; the index is corrupt (restore the "
                                f"manifest, or rebuild the index)")
    if stored_digest is None:
        log.warning("%s has no checksum of its own (format 1, written by an older alignir); re-sparsify to add one",
                    mpath)
    elif stored_digest != manifest_digest(manifest):
        raise CorruptIndexError(f"{mpath} fails its own checksum: it was edited or damaged; the index is corrupt "
                                f"(restore the manifest, or rebuild the index)")
    for key in ("encoder", "files", "components", "counts", "dims") + (("parts",) if version >= 2 else ()):
        if not isinstance(manifest.get(key), dict):
            raise CorruptIndexError(f"{mpath}: missing or invalid {key!r}")
    if version == 1:
        manifest = _upgrade_v1(manifest)
    if not all(isinstance(e, dict) for e in manifest["parts"].values()):
        raise CorruptIndexError(f"{mpath}: invalid part entry")
    _check_inside(path, mpath, manifest)
    return manifest


def verify_index(path: str | Path, manifest: Mapping[str, Any] | None = None) -> None:
    """Check that every file listed in the manifest exists with its size and sha256,
    and that no unlisted file is present. Raises :class:`CorruptIndexError`."""
    path = Path(path)
    manifest = manifest if manifest is not None else read_manifest(path)
    listed = manifest["files"]
    try:
        _verify_files(path, listed)
    except PermissionError as e:
        raise IndexReadError(e.errno, f"cannot read index {path}: {_describe_oserror(e)} "
                                      f"[{e.filename}]") from e


def _verify_files(path: Path, listed: Mapping[str, Any]) -> None:
    for rel, info in listed.items():
        p = path / rel
        if not p.is_file():
            raise CorruptIndexError(f"{path}: file {rel} is missing; the index is corrupt, rebuild it")
        if p.stat().st_size != info.get("bytes"):
            raise CorruptIndexError(f"{path}: file {rel} has {p.stat().st_size} bytes, the manifest "
                                    f"says {info.get('bytes')}; the index is corrupt, rebuild it")
        if _sha256(p) != info.get("sha256"):
            raise CorruptIndexError(f"{path}: checksum mismatch for {rel}; the index is corrupt, rebuild it")
    extra = [rel for rel in _list_files(path) if rel != MANIFEST and rel not in listed
             and not Path(rel).name.startswith(".")]
    if extra:
        raise CorruptIndexError(f"{path}: files not listed in the manifest: {extra[:5]}")


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


# ---------------------------------------------------------------------------------
# replacing one part


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # files are never modified in place, so sharing inodes is safe
    except OSError:
        shutil.copy2(src, dst)


def _check_generation(path: Path, current: Mapping[str, Any], expected: Mapping[str, Any] | None) -> None:
    if expected is not None and dict(current) != dict(expected):
        raise IndexChangedError(f"{path} changed while this write was being prepared (another writer?); "
                                f"nothing was written: run the command again")


def replace_part(path: str | Path, name: str, part: Part | None, *,
                 params: Mapping[str, Any] | None = None, pc1: np.ndarray | None = None,
                 extra_arrays: Mapping[str, np.ndarray] | None = None, fsync: bool = True,
                 expected: Mapping[str, Any] | None = None) -> Path:
    """Atomically add or replace the part ``name`` of an index (``part``), or remove it
    (``part=None``); every other file is carried over (hard links when possible) after its
    checksum is verified. In the same atomic step: ``params`` are merged into
    ``manifest["params"]``, ``pc1`` and the named ``extra_arrays`` (e.g. a new term map)
    replace the stored ones — what a re-sparsify needs (new K, M, λ, weighting, folding from
    the stored dense vectors, no re-encode). ``expected``: the manifest the caller built
    ``part`` from; the swap is refused (:class:`IndexChangedError`) if the index has changed
    since (another writer)."""
    return replace_parts(path, {name: part}, params=params, pc1=pc1, extra_arrays=extra_arrays, fsync=fsync,
                         expected=expected)


def replace_parts(path: str | Path, parts: Mapping[str, Part | None], *,
                  params: Mapping[str, Any] | None = None, pc1: np.ndarray | None = None,
                  extra_arrays: Mapping[str, np.ndarray] | None = None, fsync: bool = True,
                  expected: Mapping[str, Any] | None = None) -> Path:
    """:func:`replace_part` for several parts in one atomic step (e.g. a document deleted from
    every part at once)."""
    path = Path(path).absolute()
    if not isinstance(parts, Mapping) or (not parts and params is None):
        raise InvalidInputError("parts must be a non-empty dict: part name -> part (or None to remove it), "
                                "or empty with params to update")
    specs = {name: _spec(name) for name in parts}
    old = read_manifest(path)
    _check_generation(path, old, expected)
    verify_index(path, old)
    n = old["counts"]["docs"]
    if PASSAGES in parts:
        raise InvalidInputError("the passage map cannot be replaced (the rows of every part follow it): "
                                "rebuild the index")
    todo = _check_parts(parts, n, old["counts"].get("rows", n))
    if params is not None and not isinstance(params, Mapping):
        raise InvalidInputError("params must be a dict")
    if pc1 is not None:
        pc1 = _check_pc1(pc1, int(old["dims"]["dense"]))
    extras = {_check_name(k): np.asarray(v) for k, v in (extra_arrays or {}).items()}
    entries = dict(old["parts"])
    dropped: set[str] = set()
    for name, spec in specs.items():
        previous = entries.pop(name, None)
        dropped |= {spec.folder} | ({previous["path"]} if previous else set())
    replaced = {f"{EXTRA_DIR}/{k}.npy" for k in extras} | ({PC1} if pc1 is not None else set())
    manifest = {k: v for k, v in old.items() if k != "files"}
    if params is not None:
        manifest["params"] = {**old.get("params", {}), **json.loads(json.dumps(dict(params)))}
    manifest["format_version"] = FORMAT_VERSION
    manifest["created"] = _now()
    comps = dict(old["components"])
    with IndexWriter(path, fsync=fsync) as w:
        for rel in old["files"]:
            if rel in replaced or any(rel.startswith(d + "/") for d in dropped):
                continue
            with w._guard(f"carrying over {rel}"):
                _link_or_copy(path / rel, w._inside(rel))
        for s, obj in todo:
            entries[s.name] = _save_part(w, s, obj)
        _save_store_arrays(w, comps, pc1, extras)
        manifest["components"] = comps
        manifest["parts"] = entries
        return w.commit(manifest)


def update_params(path: str | Path, params: Mapping[str, Any], *, fsync: bool = True,
                  expected: Mapping[str, Any] | None = None) -> Path:
    """Atomically merge ``params`` into ``manifest["params"]`` (every file carried over, as
    :func:`replace_parts` with no part); ``expected`` as there."""
    return replace_parts(path, {}, params=params, fsync=fsync, expected=expected)
