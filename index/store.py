"""The index directory: one folder holding everything a search needs, written atomically.

Layout (all paths relative to the index folder)::

    manifest.json      format, encoder fingerprint + hash, params (K, M, λ, weighting,
                       folding...), counts, dims, sha256 + size of every other file
    doc_ids.parquet    column ``doc_id`` (string): row i = doc number i
    dense.npy          the encoder's vectors h [n, d], float32 or float16 — what a
                       re-sparsify (new K/M/λ/weighting, “A Text is Worth Several Tokens” eq.14-16) starts from
    pc1.npy            the corpus first principal component u1 (“A Text is Worth Several Tokens” eq.14), optional
    sparse/            ``index.sparse.SparseIndex.save`` output, optional
    lexical/           ``index.lexical.LexicalLeg.save`` output (BM25 word-term postings +
                       vocab.json), optional; its parameters in ``manifest["lexical"]``
    faiss/             ``index.dense.DenseIndex.save`` output, optional
    extra/NAME.npy     any further arrays the caller stores

Atomic commit: everything is written into a hidden temp folder next to the target,
checksummed, fsynced, then swapped into place — with ``renameat2(RENAME_EXCHANGE)``
where the kernel offers it (one atomic step), otherwise by renaming the old index to a
backup, the new one into place, and deleting the backup (an interrupted swap is undone
by the next ``open_index`` / write). On any failure the temp folder is removed and the
previous index is untouched. Nothing is pickled: arrays load with
``allow_pickle=False``, metadata is JSON, the table is parquet.
"""
from __future__ import annotations

from alignir.errors import AlignirError, InvalidInputError

import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alignir.index.io import fsync_path, save_npy, sha256_file

log = logging.getLogger(__name__)

FORMAT_NAME = "alignir-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DOC_IDS = "doc_ids.parquet"
DENSE_VECTORS = "dense.npy"
PC1 = "pc1.npy"
SPARSE_DIR = "sparse"
LEXICAL_DIR = "lexical"
FAISS_DIR = "faiss"
EXTRA_DIR = "extra"
#: keys of manifest.json that the store computes; callers may not set them
RESERVED = ("format", "format_version", "created", "encoder_hash", "counts", "dims",
            "files", "components", "dense_dtype", "dense_index", "lexical", "manifest_sha256")

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


# ---------------------------------------------------------------------------------
# errors


class IndexStoreError(AlignirError):
    """Base class of the index-directory errors."""


class NotAnIndexError(IndexStoreError, ValueError):
    """The path does not exist, or is not an alignir index folder."""


class CorruptIndexError(IndexStoreError, ValueError):
    """A file is missing, altered (checksum) or inconsistent with the manifest."""


class UnsupportedFormatError(IndexStoreError, ValueError):
    """The index was written by a newer alignir (format version too high)."""


class FingerprintMismatch(IndexStoreError, ValueError):
    """The query encoder differs from the encoder that built the index."""

    def __init__(self, differences: dict[str, tuple[Any, Any]]):
        self.differences = differences
        lines = [f"  {k}: index={a!r}, query encoder={b!r}" for k, a, b in
                 ((k, *v) for k, v in sorted(differences.items()))]
        super().__init__("the query encoder does not match the encoder that built this index "
                         "(queries must be encoded the same way as the documents); differing "
                         "fields:\n" + "\n".join(lines))


class IndexWriteError(IndexStoreError, OSError):
    """Writing the index failed (disk full, permissions...); nothing was changed."""


class IndexReadError(IndexStoreError, OSError):
    """An index file could not be read (permissions, I/O error)."""


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


_RENAME_EXCHANGE = 2
_libc: Any = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux renameat2(RENAME_EXCHANGE); False if unsupported."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fn = _libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


#: set to False to force the two-rename swap (tests use it to cover that path)
USE_RENAME_EXCHANGE = True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
            os.chmod(self.tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; an index is shared

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
                    _fsync_path(Path(dirpath), directory=True)
            self._swap()
        self.committed = True
        self.tmp = None
        return self.path

    def _swap(self) -> None:
        assert self.tmp is not None
        parent = self.path.parent
        if self.path.exists():
            if USE_RENAME_EXCHANGE and _exchange(self.tmp, self.path):
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
            _fsync_path(parent, directory=True)
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
    sparse_index: Any = None,
    dense_index: Any = None,
    pc1: np.ndarray | None = None,
    extra_arrays: Mapping[str, np.ndarray] | None = None,
    dense_dtype: str = "float32",
    fsync: bool = True,
    lexical: Any = None,
) -> Path:
    """Write a complete index folder at ``path`` atomically (replacing an older index).

    ``manifest``: at least ``{"encoder": fingerprint}``; usually also ``"params"``
    (K, M, lambda, weighting, folding...). The store adds format, encoder hash,
    counts, dims, components and checksums. ``sparse_index`` / ``dense_index``:
    objects with ``save(dir)`` (``SparseIndex`` / ``DenseIndex``), or None.
    ``lexical``: an :class:`index.lexical.LexicalLeg` (BM25 word-term postings), or None;
    its ``params`` go to ``manifest["lexical"]``.
    ``dense_dtype``: ``"float32"`` (exact re-sparsify) or ``"float16"`` (half size).
    Raises ValueError on inconsistent inputs (before anything is written),
    :class:`IndexWriteError` on I/O failure (nothing changed).
    """
    full = _base_manifest(manifest)
    ids = list(doc_ids)
    n = len(ids)
    if n == 0:
        raise InvalidInputError("cannot write an index with 0 documents")
    vec = np.asarray(dense_vectors)
    if vec.ndim != 2 or vec.shape[0] != n:
        raise InvalidInputError(f"dense_vectors must be [n_docs={n}, d], got shape {vec.shape}")
    if dense_dtype not in ("float32", "float16"):
        raise InvalidInputError(f"dense_dtype must be 'float32' or 'float16', got {dense_dtype!r}")
    if not np.isfinite(vec).all():
        raise InvalidInputError("dense_vectors contain NaN or infinite values")
    if dense_dtype == "float16" and np.abs(vec).max(initial=0) > np.finfo(np.float16).max:
        raise InvalidInputError("dense_vectors exceed the float16 range; store them as float32")
    vec = vec.astype(dense_dtype, copy=False)
    for name, obj, attr in (("sparse_index", sparse_index, "n_docs"), ("dense_index", dense_index, "n_docs"),
                            ("lexical", lexical, "n_docs")):
        if obj is not None and int(getattr(obj, attr)) != n:
            raise InvalidInputError(f"{name} holds {getattr(obj, attr)} documents, doc_ids has {n}")
    if pc1 is not None:
        pc1 = np.asarray(pc1, dtype=np.float32)
        if pc1.shape != (vec.shape[1],):
            raise InvalidInputError(f"pc1 must have shape ({vec.shape[1]},), got {pc1.shape}")
    extras = {_check_name(k): np.asarray(v) for k, v in (extra_arrays or {}).items()}

    components: dict[str, Any] = {"doc_ids": DOC_IDS, "dense_vectors": DENSE_VECTORS}
    full.update({
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "encoder_hash": fingerprint_hash(full["encoder"]),
        "dense_dtype": dense_dtype,
        "counts": {"docs": n},
        "dims": {"dense": int(vec.shape[1])},
    })
    with IndexWriter(path, fsync=fsync) as w:
        w.save_doc_ids(ids)
        w.save_array(DENSE_VECTORS, vec)
        if pc1 is not None:
            w.save_array(PC1, pc1)
            components["pc1"] = PC1
        if sparse_index is not None:
            _save_component(w, SPARSE_DIR, sparse_index)
            components["sparse"] = SPARSE_DIR
            _describe_sparse(full, sparse_index)
        if dense_index is not None:
            _save_component(w, FAISS_DIR, dense_index)
            components["faiss"] = FAISS_DIR
            full["counts"]["dense_live"] = int(getattr(dense_index, "n_live", n))
            full["dims"]["faiss"] = int(dense_index.dim)
            full["dense_index"] = {"kind": str(dense_index.kind)}
        if lexical is not None:
            _save_component(w, LEXICAL_DIR, lexical)
            components["lexical"] = LEXICAL_DIR
            _describe_lexical(full, lexical)
        if extras:
            components["extra"] = {}
            for name, arr in extras.items():
                w.save_array(f"{EXTRA_DIR}/{name}.npy", arr)
                components["extra"][name] = f"{EXTRA_DIR}/{name}.npy"
        full["components"] = components
        return w.commit(full)


def _save_component(w: IndexWriter, rel: str, obj: Any) -> None:
    target = w._inside(rel)
    with w._guard(f"writing {rel}/"):
        obj.save(target)


def _describe_lexical(manifest: dict[str, Any], leg: Any) -> None:
    manifest["lexical"] = dict(leg.params)
    manifest["dims"]["lexical_terms"] = int(leg.n_terms)
    manifest["counts"]["lexical_postings"] = int(leg.index.n_postings)


def _describe_sparse(manifest: dict[str, Any], sparse_index: Any) -> None:
    if hasattr(sparse_index, "n_terms"):
        manifest["dims"]["sparse_terms"] = int(sparse_index.n_terms)
    if hasattr(sparse_index, "n_postings"):
        manifest["counts"]["sparse_postings"] = int(sparse_index.n_postings)


# ---------------------------------------------------------------------------------
# reading


@dataclass
class StoredIndex:
    """An opened index folder. ``dense_vectors`` is memory-mapped when opened with
    ``mmap=True``; ``sparse`` / ``dense`` / ``lexical`` are None when the index has no such
    part (``lexical``: an :class:`index.lexical.LexicalLeg`, absent from indexes built before
    it existed or with ``--no-lexical``)."""

    path: Path
    manifest: dict[str, Any]
    doc_ids: list[str]
    dense_vectors: np.ndarray
    sparse: Any = None
    dense: Any = None
    pc1: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    lexical: Any = None

    _numbers: dict[str, int] | None = field(default=None, repr=False)

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

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
    """Every file and component path of the manifest must stay inside the index folder."""
    root = path.resolve()
    for rel in [*manifest["files"], *_paths_in(manifest["components"])]:
        target = (path / rel).resolve()
        if Path(rel).is_absolute() or (target != root and root not in target.parents):
            raise CorruptIndexError(f"{mpath}: the path {rel!r} points outside the index folder; "
                                    f"the manifest is corrupt or was tampered with")


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and validate ``manifest.json`` (format name and version), no checksums."""
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
    if stored_digest is None:
        log.warning("%s has no checksum of its own (written by an older alignir); re-sparsify to add one", mpath)
    elif stored_digest != manifest_digest(manifest):
        raise CorruptIndexError(f"{mpath} fails its own checksum: it was edited or damaged; the index is corrupt "
                                f"(restore the manifest, or rebuild the index)")
    for key in ("encoder", "files", "components", "counts"):
        if not isinstance(manifest.get(key), dict):
            raise CorruptIndexError(f"{mpath}: missing or invalid {key!r}")
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
               load_sparse: bool = True, load_dense: bool = True,
               load_lexical: bool = True) -> StoredIndex:
    """Open an index folder: validate the manifest, verify checksums (``verify``), load
    the doc ids, dense vectors (memory-mapped with ``mmap``), PC1, extra arrays, and the
    sparse / faiss / lexical parts. Errors: :class:`NotAnIndexError`, :class:`CorruptIndexError`,
    :class:`UnsupportedFormatError`.

    A writer may swap a new version in while this reads: when reading fails and the manifest
    has changed meanwhile, the new version is opened (once) instead of calling a healthy
    index corrupt."""
    path = Path(path).absolute()
    before = _manifest_bytes(path)
    try:
        return _open_once(path, verify, mmap, load_sparse, load_dense, load_lexical)
    except (CorruptIndexError, NotAnIndexError, IndexReadError):
        if _manifest_bytes(path) == before:
            raise
        log.info("%s was replaced while it was being opened: opening the new version", path)
        return _open_once(path, verify, mmap, load_sparse, load_dense, load_lexical)


def _manifest_bytes(path: Path) -> bytes | None:
    try:
        return (path / MANIFEST).read_bytes()
    except OSError:
        return None


def _open_once(path: Path, verify: bool, mmap: bool, load_sparse: bool, load_dense: bool,
               load_lexical: bool) -> StoredIndex:
    manifest = read_manifest(path)
    if verify:
        verify_index(path, manifest)
    comps = manifest["components"]
    n = manifest["counts"].get("docs")
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
    if len(doc_ids) != n or vectors.ndim != 2 or vectors.shape[0] != n:
        raise CorruptIndexError(f"{path}: manifest says {n} documents, doc ids have "
                                f"{len(doc_ids)}, dense vectors {vectors.shape}")
    sparse = dense = None
    if load_sparse and "sparse" in comps:
        from alignir.index.sparse import SparseIndex

        try:  # checksums were verified above (or verification was declined)
            sparse = SparseIndex.load(path / comps["sparse"], mmap=mmap, verify=False)
        except ValueError as e:
            raise CorruptIndexError(f"{path}: {e}") from e
        if int(sparse.n_docs) != n:
            raise CorruptIndexError(f"{path}: sparse index has {sparse.n_docs} docs, expected {n}")
    if load_dense and "faiss" in comps:
        from alignir.index.dense import DenseIndex

        try:
            dense = DenseIndex.load(path / comps["faiss"])
        except ValueError as e:
            raise CorruptIndexError(f"{path}: {e}") from e
        if dense.n_docs != n:
            raise CorruptIndexError(f"{path}: faiss index has {dense.n_docs} docs, expected {n}")
    lexical = None
    if load_lexical and "lexical" in comps:
        from alignir.index.lexical import LexicalLeg

        try:
            lexical = LexicalLeg.load(path / comps["lexical"], manifest.get("lexical"), mmap=mmap,
                                      verify=False)
        except ValueError as e:
            raise CorruptIndexError(f"{path}: {e}") from e
        if lexical.n_docs != n:
            raise CorruptIndexError(f"{path}: lexical index has {lexical.n_docs} docs, expected {n}")
    return StoredIndex(path, manifest, doc_ids, vectors, sparse, dense, pc1, extra, lexical)


# ---------------------------------------------------------------------------------
# re-sparsify


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # files are never modified in place, so sharing inodes is safe
    except OSError:
        shutil.copy2(src, dst)


class IndexChangedError(IndexStoreError):
    """The index changed between a writer's read and its swap (another writer got there first)."""


def _check_generation(path: Path, current: Mapping[str, Any], expected: Mapping[str, Any] | None) -> None:
    if expected is not None and dict(current) != dict(expected):
        raise IndexChangedError(f"{path} changed while this write was being prepared (another writer?); "
                                f"nothing was written: run the command again")


def replace_sparse(path: str | Path, new_sparse: Any, new_params: Mapping[str, Any],
                   pc1: np.ndarray | None = None,
                   extra_arrays: Mapping[str, np.ndarray] | None = None,
                   fsync: bool = True, expected: Mapping[str, Any] | None = None) -> Path:
    """Atomically replace the sparse part (and optionally PC1 and named extra arrays,
    e.g. a new term map) of an index, merging ``new_params`` into
    ``manifest["params"]`` — the re-sparsify step (new K, M, λ, weighting, folding from
    the stored dense vectors, no re-encode). All other files are carried over (hard
    links when possible) after their checksums are verified, the lexical part included.
    ``expected``: the manifest the caller built ``new_sparse`` from; the swap is refused if
    the index has changed since (another writer)."""
    path = Path(path).absolute()
    old = read_manifest(path)
    _check_generation(path, old, expected)
    verify_index(path, old)
    n = old["counts"]["docs"]
    if int(new_sparse.n_docs) != n:
        raise InvalidInputError(f"new sparse index holds {new_sparse.n_docs} documents, the index has {n}")
    if not isinstance(new_params, Mapping):
        raise InvalidInputError("new_params must be a dict")
    if pc1 is not None:
        pc1 = np.asarray(pc1, dtype=np.float32)
        if pc1.shape != (old["dims"]["dense"],):
            raise InvalidInputError(f"pc1 must have shape ({old['dims']['dense']},), got {pc1.shape}")
    extras = {_check_name(k): np.asarray(v) for k, v in (extra_arrays or {}).items()}
    replaced = {f"{EXTRA_DIR}/{k}.npy" for k in extras}
    manifest = {k: v for k, v in old.items() if k != "files"}
    manifest["params"] = {**old.get("params", {}), **json.loads(json.dumps(dict(new_params)))}
    manifest["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest["counts"] = {k: v for k, v in old["counts"].items() if k != "sparse_postings"}
    manifest["dims"] = {k: v for k, v in old["dims"].items() if k != "sparse_terms"}
    comps = dict(old["components"])
    with IndexWriter(path, fsync=fsync) as w:
        for rel in old["files"]:
            if rel.startswith(SPARSE_DIR + "/") or (pc1 is not None and rel == PC1) or rel in replaced:
                continue
            with w._guard(f"carrying over {rel}"):
                _link_or_copy(path / rel, w._inside(rel))
        _save_component(w, SPARSE_DIR, new_sparse)
        comps["sparse"] = SPARSE_DIR
        _describe_sparse(manifest, new_sparse)
        if pc1 is not None:
            w.save_array(PC1, pc1)
            comps["pc1"] = PC1
        if extras:
            comps["extra"] = dict(comps.get("extra", {}))
            for name, arr in extras.items():
                w.save_array(f"{EXTRA_DIR}/{name}.npy", arr)
                comps["extra"][name] = f"{EXTRA_DIR}/{name}.npy"
        manifest["components"] = comps
        return w.commit(manifest)


def replace_lexical(path: str | Path, lexical: Any, fsync: bool = True,
                    expected: Mapping[str, Any] | None = None) -> Path:
    """Atomically add, replace (``lexical``: a :class:`index.lexical.LexicalLeg`) or remove
    (``lexical=None``) the lexical part of an index; every other file is carried over after
    its checksum is verified. ``expected``: as for :func:`replace_sparse`."""
    path = Path(path).absolute()
    old = read_manifest(path)
    _check_generation(path, old, expected)
    verify_index(path, old)
    n = old["counts"]["docs"]
    if lexical is not None and int(lexical.n_docs) != n:
        raise InvalidInputError(f"lexical index holds {lexical.n_docs} documents, the index has {n}")
    manifest = {k: v for k, v in old.items() if k not in ("files", "lexical")}
    manifest["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest["counts"] = {k: v for k, v in old["counts"].items() if k != "lexical_postings"}
    manifest["dims"] = {k: v for k, v in old["dims"].items() if k != "lexical_terms"}
    comps = {k: v for k, v in old["components"].items() if k != "lexical"}
    with IndexWriter(path, fsync=fsync) as w:
        for rel in old["files"]:
            if rel.startswith(LEXICAL_DIR + "/"):
                continue
            with w._guard(f"carrying over {rel}"):
                _link_or_copy(path / rel, w._inside(rel))
        if lexical is not None:
            _save_component(w, LEXICAL_DIR, lexical)
            comps["lexical"] = LEXICAL_DIR
            _describe_lexical(manifest, lexical)
        manifest["components"] = comps
        return w.commit(manifest)
