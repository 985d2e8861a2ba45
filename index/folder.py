"""An index folder on disk, below the writer and the reader: the names of its files, the
listing of them, an I/O error in words, and the hidden work folders a writer makes beside it
(``.NAME.tmp-PID-*`` while writing, ``.NAME.old-PID-*`` during a two-rename swap) with
:func:`recover`, which undoes a write that was killed. The layout itself is described in
``index.store``."""
from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

__all__ = ["MANIFEST", "DOC_IDS", "DENSE_VECTORS", "PC1", "EXTRA_DIR", "describe_oserror", "list_files", "recover"]

MANIFEST = "manifest.json"
DOC_IDS = "doc_ids.parquet"
DENSE_VECTORS = "dense.npy"
PC1 = "pc1.npy"
EXTRA_DIR = "extra"

_ERRNO_HINTS = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for this filesystem or process limit",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only filesystem",
}


def describe_oserror(e: OSError) -> str:
    """What went wrong, in words (disk full, permission denied...)."""
    if e.errno is None and "requested and" in str(e):  # numpy's short-write message
        return f"short write ({e}): disk full or file size limit"
    return _ERRNO_HINTS.get(e.errno or -1, e.strerror or str(e))


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of all regular files under ``root``, sorted."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            out.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(out)


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
