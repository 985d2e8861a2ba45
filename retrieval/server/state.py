"""The index a server answers from: one open :class:`Searcher` per index version, swapped when
the folder is (``alignir add``/``delete``/``resparsify``/``build-index`` replace it atomically),
without a restart and with one query encoder for the life of the process (each new version's
searcher reuses the loaded model: ``Searcher.open(encoder=...)``).

Every request takes one :class:`Snapshot` and answers from it alone, so a response never mixes
two versions. The version is checked on every request (a ``stat`` of the manifest): a request
that starts after a swap has finished answers from the new version."""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from alignir.errors import AlignirError, NotReadyError
from alignir.index.manifest_io import MANIFEST_CHECKSUM
from alignir.retrieval.searcher import Searcher

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Snapshot:
    """One index version and its searcher."""

    searcher: Searcher
    version: str
    stamp: tuple[int, int, int]

    @property
    def needs_model(self) -> bool:
        return any(leg.needs_model for leg in self.searcher.legs.values())


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path / MANIFEST)
    return st.st_ino, st.st_mtime_ns, st.st_size


def version_of(searcher: Searcher) -> str:
    """A version's name: the start of its manifest's checksum (every write changes it)."""
    return str(searcher.index.manifest.get(MANIFEST_CHECKSUM, ""))[:16] or "unversioned"


class IndexHolder:
    """The current :class:`Snapshot` of the index at ``path``; ``open_options``: passed to
    ``Searcher.open`` (device, runtime...)."""

    def __init__(self, path: str | Path, open_options: Mapping[str, Any] | None = None,
                 retry_seconds: float = 1.0) -> None:
        self.path = Path(path)
        self.options = dict(open_options or {})
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._failed_at = 0.0
        self._error: str | None = None
        #: versions opened since start (the first included)
        self.versions_opened = 0
        self.model_ready = threading.Event()

    def open(self) -> Snapshot:
        """Open the index (no model yet: :meth:`load_model`)."""
        with self._lock:
            try:
                stamp = _stamp(self.path)
            except OSError:  # not an index: Searcher.open says so in its words
                stamp = None
            return self._reopen(stamp)

    @property
    def is_open(self) -> bool:
        return self._snapshot is not None

    def load_model(self) -> None:
        """Load the query encoder of the current version (a no-op for an index without model legs),
        and run one search of each leg (the first loads the compiled sparse kernels: seconds)."""
        snap = self.current()
        searcher = snap.searcher
        if snap.needs_model:
            searcher.encode(["warm up"], [n for n, leg in searcher.legs.items() if leg.needs_model])
        for leg in searcher.legs:
            searcher.search("warm up", k=1, mode=leg)
        self.model_ready.set()

    @property
    def error(self) -> str | None:
        """Why the last reopen failed (None: the current version is the folder's)."""
        return self._error

    def current(self) -> Snapshot:
        """The snapshot of the folder's version now (reopened if the folder was swapped)."""
        snap = self._snapshot
        if snap is None:
            raise NotReadyError(f"{self.path}: the index is not open yet")
        try:
            stamp = _stamp(self.path)
        except OSError:  # mid-swap (rename, then rename): the old version answers
            return snap
        if stamp == snap.stamp:
            return snap
        with self._lock:
            snap = self._snapshot
            assert snap is not None
            if stamp == snap.stamp:
                return snap
            if self._error is not None and time.monotonic() - self._failed_at < self.retry_seconds:
                raise NotReadyError(self._error)
            try:
                return self._reopen(stamp)
            except (AlignirError, OSError) as e:
                self._error = f"{self.path}: the new version of the index could not be opened: {_one_line(e)}"
                self._failed_at = time.monotonic()
                log.error(self._error)
                raise NotReadyError(self._error) from None

    def refresh(self) -> Snapshot:
        """Reopen now if the folder changed (after a write of this server)."""
        return self.current()

    def _reopen(self, stamp: tuple[int, int, int] | None) -> Snapshot:
        old = self._snapshot
        encoder = old.searcher.query_encoder if old is not None else None
        options = dict(self.options)
        if encoder is not None:  # the loaded model goes on: no second model, no second ONNX session
            options = {k: v for k, v in options.items() if k not in ("model", "precision", "runtime", "device")}
        searcher = Searcher.open(self.path, encoder=encoder, **options)
        snap = Snapshot(searcher, version_of(searcher), stamp or _stamp(self.path))
        self._snapshot, self._error = snap, None
        self.versions_opened += 1
        log.info("serving %s version %s (%d documents)", self.path, snap.version, searcher.index.n_docs)
        return snap


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__

