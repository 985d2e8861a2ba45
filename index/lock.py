"""One writer at a time per index: an advisory lock (``fcntl.flock``) on ``.NAME.lock`` beside
the index folder (the folder itself is swapped atomically, so it cannot carry the lock). Held
from the moment a writer reads the index to the moment its new version is swapped in; readers
never take it. The lock file holds the writer's pid, for the message a second writer gets."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from alignir.errors import IndexBusyError

__all__ = ["lock_path", "writer_lock"]


def lock_path(index: str | Path) -> Path:
    """The lock file of an index (symlinks resolved: every path to one index shares its lock)."""
    target = Path(os.path.realpath(Path(index).expanduser()))
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def writer_lock(index: str | Path, wait: bool = False) -> Iterator[None]:
    """Hold the index's writer lock for the block. ``wait=False``: fail at once with
    :class:`IndexBusyError` when another writer holds it; ``wait=True``: block until it is free."""
    path = lock_path(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise IndexBusyError(f"another alignir process{who} is writing {path.parent / path.name[1:-5]}; "
                                 f"wait for it to finish, or pass --wait to queue behind it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
