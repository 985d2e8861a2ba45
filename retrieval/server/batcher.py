"""Dynamic micro-batching of query encodes, as text-embeddings-inference and Triton do it: the
requests that need the model wait in one queue; a single worker thread takes the first, gathers
the others that arrive within ``max_wait`` seconds (up to ``max_batch`` queries), encodes them in
one model pass and hands each request its rows. ``max_batch=1`` turns batching off: each request
encodes its own queries, one at a time. Requests that need no model (BM25) never come here."""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Sequence

from alignir.retrieval.searcher import QueryBatch


@dataclass
class _Item:
    searcher: Any
    queries: list[str]
    future: Future = field(default_factory=Future)


def model_legs(searcher: Any) -> list[str]:
    """The searcher's legs that one model pass encodes (dense and sparse share it)."""
    return [name for name, leg in searcher.legs.items() if leg.needs_model]


class MicroBatcher:
    """Encodes the queries of concurrent requests together. ``lock``: held around every encode
    (shared with the server's writes that run the model: tokenizers and torch modules are not
    re-entrant)."""

    def __init__(self, max_batch: int = 32, max_wait: float = 0.002, lock: threading.Lock | None = None) -> None:
        self.max_batch, self.max_wait = max(1, int(max_batch)), max(0.0, float(max_wait))
        self.lock = lock or threading.Lock()
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        #: how many model passes ran and how many queries they held (for /info and the benchmark)
        self.passes = self.encoded = 0

    @property
    def batching(self) -> bool:
        return self.max_batch > 1

    def start(self) -> None:
        if self.batching and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alignir-encode", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def encode(self, searcher: Any, queries: Sequence[str]) -> QueryBatch:
        """The model legs' rows of ``queries`` on ``searcher`` (blocks until encoded)."""
        if not self.batching or self._thread is None:
            with self.lock:
                batch = searcher.encode(list(queries), model_legs(searcher))
            self.passes += 1
            self.encoded += len(queries)
            return batch
        item = _Item(searcher, list(queries))
        self._queue.put(item)
        return item.future.result()

    def _gather(self, first: _Item) -> tuple[list[_Item], bool]:
        """``first`` and whatever else arrives within max_wait (up to max_batch queries); and
        whether a stop was asked for meanwhile."""
        items, n = [first], len(first.queries)
        deadline = time.perf_counter() + self.max_wait
        while n < self.max_batch:
            left = deadline - time.perf_counter()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return items, True
            items.append(item)
            n += len(item.queries)
        return items, False

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            items, stop = self._gather(first)
            groups: dict[int, list[_Item]] = {}
            for item in items:  # one pass per index version (their sparse parts may differ)
                groups.setdefault(id(item.searcher), []).append(item)
            for group in groups.values():
                self._encode_group(group)
            if stop:
                return

    def _encode_group(self, group: list[_Item]) -> None:
        searcher = group[0].searcher
        texts = [q for item in group for q in item.queries]
        try:
            with self.lock:
                batch = searcher.encode(texts, model_legs(searcher))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting requests
            if len(group) == 1:
                group[0].future.set_exception(e)
                return
            for item in group:  # one bad request must not fail the others: each alone
                self._encode_group([item])
            return
        self.passes += 1
        self.encoded += len(texts)
        start = 0
        for item in group:
            stop = start + len(item.queries)
            rows = {name: value[start:stop] for name, value in batch.legs.items()}
            item.future.set_result(QueryBatch(legs=rows, seconds=batch.seconds))
            start = stop
