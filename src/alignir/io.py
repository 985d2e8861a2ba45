"""The one module for file writes that must not leave a half-written file behind, shared by the
whole package (index store, embedding cache, runs, BEIR download, model conversion, trainer):

* :func:`sha256_file` — hex sha256 of a file, read in pieces;
* :func:`save_npy` / :func:`write_npy` — ``.npy`` without pickle whose I/O errors keep their
  errno (disk full reads "No space left on device", not numpy's short-write message);
* :func:`fsync_path` — fsync a file or a folder's entries;
* :func:`atomic_write` (+ ``_bytes`` / ``_text`` / ``_json`` / :func:`atomic_save_npy`) —
  temp file in the same folder, flush + fsync, ``os.replace``: a reader sees the old or the
  new file, never part of one, and a failure removes the temp file;
* :func:`exchange_paths` / :func:`replace_dir` — put a finished folder in place of another
  (``renameat2(RENAME_EXCHANGE)`` where the kernel offers it, else rename-aside);
* :func:`file_lock` — an exclusive advisory lock on a file for the length of a block (one process
  at a time converts a model, exports an ONNX backbone, updates a memo).

Part of the core package: only ``alignir.errors`` is imported here, so index/, encoders/ and
retrieval/ all import this one without a cycle (and without torch).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

__all__ = ["sha256_file", "save_npy", "write_npy", "fsync_path", "fsync_dir", "atomic_write", "atomic_write_bytes",
           "atomic_write_text", "atomic_write_json", "atomic_save_npy", "exchange_paths", "replace_dir",
           "file_lock", "umask"]


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


def _plain(array: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(array)
    if arr.dtype == object:
        raise InvalidInputError(f"{what}: object arrays cannot be stored (they would need pickle)")
    return arr


def write_npy(f: IO[bytes], array: np.ndarray, what: str = "array") -> None:
    """Write ``array`` in .npy format to the open binary file ``f`` (no pickle, errno kept)."""
    np.lib.format.write_array(_Sink(f), _plain(array, what), allow_pickle=False)


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` without pickle whose I/O errors carry their errno (disk full...)."""
    arr = _plain(array, str(path))  # checked before the file is created
    with open(path, "wb") as f:
        write_npy(f, arr, str(path))


def fsync_path(path: str | Path, directory: bool = False) -> None:
    """fsync a file (or, with ``directory``, a folder's entries) by path."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | Path) -> None:
    """fsync a folder's entries where the filesystem allows it (some refuse a directory fsync,
    e.g. with EINVAL: the rename before it is still atomic, so that is not an error)."""
    try:
        fsync_path(folder, directory=True)
    except OSError:
        pass


def umask() -> int:
    """The process umask (read without changing it for longer than one call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", fsync: bool = True,
                 encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; when the block ends without an exception
    it is flushed, fsynced and renamed over ``path`` (``os.replace``: atomic on POSIX), and the
    folder is fsynced. On an exception the temp file is removed and ``path`` is untouched.
    ``mode``: ``"wb"`` or ``"w"`` (text, ``encoding`` defaults to UTF-8). The parent folder is
    created if needed."""
    if mode not in ("wb", "w"):
        raise InvalidInputError(f"atomic_write mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600; keep the usual file mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "wb", fsync=fsync) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str, fsync: bool = True) -> None:
    """Replace ``path`` with the UTF-8 ``text`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w", fsync=fsync) as f:
        f.write(text)


def atomic_write_json(path: str | Path, value: Any, fsync: bool = True, **dump: Any) -> None:
    """Replace ``path`` with ``value`` as JSON atomically (``dump``: ``json.dump`` options)."""
    with atomic_write(path, "w", fsync=fsync) as f:
        json.dump(value, f, **dump)
        f.write("\n")


def atomic_save_npy(path: str | Path, array: np.ndarray, fsync: bool = True) -> None:
    """Replace ``path`` with ``array`` in .npy format atomically (no pickle, errno kept)."""
    arr = _plain(array, str(path))
    with atomic_write(path, "wb", fsync=fsync) as f:
        write_npy(f, arr, str(path))


_RENAME_EXCHANGE = 2
_libc: Any = None


def exchange_paths(a: str | Path, b: str | Path) -> bool:
    """Atomically swap two existing paths with Linux ``renameat2(RENAME_EXCHANGE)``; False when
    the platform or filesystem does not offer it (the caller then renames in two steps)."""
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


def replace_dir(src: str | Path, dst: str | Path, fsync: bool = True, overwrite: bool = True) -> None:
    """Put the finished folder ``src`` in place of ``dst`` (same filesystem) and delete the
    previous ``dst``: one atomic exchange where the kernel offers it, else ``dst`` is renamed
    aside first (a crash between the two renames leaves it as ``.NAME.old-PID``, never lost).
    For folders whose readers tolerate that window (caches, checkpoints, downloads); the index
    store adds recovery of the backup on top (``index.store``). ``overwrite=False``: a
    non-empty ``dst`` is never replaced (``OSError`` ENOTEMPTY/EEXIST; an empty one is)."""
    src, dst = Path(src), Path(dst)
    old: Path | None = None
    if overwrite and (dst.exists() or dst.is_symlink()):
        if exchange_paths(src, dst):
            old = src  # now holds the previous folder
        else:
            old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dst, old)
            try:
                os.replace(src, dst)
            except BaseException:
                os.replace(old, dst)
                raise
    else:
        os.replace(src, dst)
    if fsync:
        fsync_dir(dst.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (POSIX ``flock``) on ``path`` for the block, waiting for
    another holder to release it. The file (and its folder) is created if needed; its content is
    never touched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
