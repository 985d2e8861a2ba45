"""Writing an index folder atomically: :class:`IndexWriter` builds it in a temp folder beside
the target, checksums and seals the manifest (``index.manifest_io``), fsyncs and swaps it in
(``renameat2(RENAME_EXCHANGE)`` where the kernel offers it, else two renames whose interruption
``index.folder.recover`` undoes). :func:`write_index` writes a whole index; :func:`replace_parts`
/ :func:`replace_part` / :func:`update_params` rewrite one, carrying every other file over."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alignir.errors import IndexChangedError, IndexStoreError, IndexWriteError, InvalidInputError, NotAnIndexError
from alignir.index.folder import (DENSE_VECTORS, DOC_IDS, EXTRA_DIR, MANIFEST, PC1, describe_oserror, list_files,
                                  recover)
from alignir.index.manifest_io import (FORMAT_NAME, FORMAT_VERSION, MANIFEST_CHECKSUM, RESERVED, fingerprint_hash,
                                       read_manifest, seal_manifest, verify_index)
from alignir.index.parts import PASSAGES, Part, PartSpec, json_clean, part_spec, registered_parts
from alignir.io import exchange_paths, fsync_dir, fsync_path, save_npy, sha256_file, umask

__all__ = ["IndexWriter", "write_index", "replace_part", "replace_parts", "update_params"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

#: set to False to force the two-rename swap (tests use it to cover that path)
USE_RENAME_EXCHANGE = True


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
            for rel in list_files(tmp):
                if rel == MANIFEST:
                    continue
                files[rel] = {"sha256": sha256_file(tmp / rel), "bytes": (tmp / rel).stat().st_size}
            full = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
            full["files"] = files
            full = seal_manifest(full)
            with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
                json.dump(full, f, indent=2, sort_keys=False, ensure_ascii=False)
                f.write("\n")
            if self.fsync:
                for dirpath, _dirs, names in os.walk(tmp):
                    for name in names:
                        fsync_path(Path(dirpath) / name)
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
                    f"{describe_oserror(e)} [{e.filename or w.path.parent}]. "
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
