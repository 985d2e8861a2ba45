"""Low-level file helpers shared by the whole package: sha256 of a file, ``.npy`` saves whose
I/O errors keep their errno, fsync of a path, and atomic file replacement (temp file in the
same folder + fsync + ``os.replace``), so a reader never sees a half-written file and a crash
leaves either the old or the new version.

No other alignir module is imported here (only ``alignir.errors``), so any module — index/,
encoders/, retrieval/ — may import this one without a cycle.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

__all__ = ["sha256_file", "save_npy", "write_npy", "fsync_path", "atomic_write", "atomic_write_bytes",
           "atomic_write_text", "atomic_write_json", "atomic_save_npy", "replace_path"]


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


def write_npy(f: IO[bytes], array: np.ndarray, what: str = "array") -> None:
    """Write ``array`` in .npy format to the open binary file ``f`` (no pickle, errno kept)."""
    arr = np.asarray(array)
    if arr.dtype == object:
        raise InvalidInputError(f"{what}: object arrays cannot be stored (they would need pickle)")
    np.lib.format.write_array(_Sink(f), arr, allow_pickle=False)


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` without pickle whose I/O errors carry their errno (disk full...)."""
    arr = np.asarray(array)
    if arr.dtype == object:  # checked before the file is created
        raise InvalidInputError(f"{path}: object arrays cannot be stored (they would need pickle)")
    with open(path, "wb") as f:
        write_npy(f, arr, str(path))


def fsync_path(path: str | Path, directory: bool = False) -> None:
    """fsync a file (or, with ``directory``, a folder's entries) by path."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fsync_path(folder, directory=True)
    except OSError:  # some filesystems refuse a directory fsync: the rename is still atomic
        pass


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", fsync: bool = True,
                 encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; when the block ends without an exception
    it is flushed, fsynced and renamed over ``path`` (``os.replace``: atomic on POSIX), and the
    folder is fsynced. On an exception the temp file is removed and ``path`` is untouched.
    ``mode``: ``"wb"`` or ``"w"`` (text, ``encoding`` defaults to UTF-8)."""
    if mode not in ("wb", "w"):
        raise InvalidInputError(f"atomic_write mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; keep the usual file mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(path.parent)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
    arr = np.asarray(array)
    if arr.dtype == object:
        raise InvalidInputError(f"{path}: object arrays cannot be stored (they would need pickle)")
    with atomic_write(path, "wb", fsync=fsync) as f:
        write_npy(f, arr, str(path))


def replace_path(src: str | Path, dst: str | Path, fsync: bool = True) -> None:
    """Move the finished file or folder ``src`` over ``dst`` (same filesystem) with
    ``os.replace``, then fsync the destination folder. A folder ``dst`` must be absent or
    empty (POSIX rename)."""
    os.replace(src, dst)
    if fsync:
        _fsync_dir(Path(dst).parent)
