"""Encoding on a Ray cluster: actors that hold the model, fed chunks of texts.

One actor per GPU of the cluster (or, without GPUs, one per ``cpus_per_actor`` cores) loads the
encoder once. :meth:`RayEncodePool.encode_chunks` is an ``EmbeddingCache.encode_cached`` runner:
the texts the cache lacks are cut into chunks, each actor has at most ``in_flight`` of them at
a time, and every finished chunk is handed back at once, so the cache writes it as a part
(encoders/cache.py). A build or encode killed midway resumes like a single-process one: what
was written is not encoded again. A chunk whose actor dies (killed, out of memory, its node lost)
goes back to the front of the queue and is encoded by the next free actor; Ray restarts the dead
actor, which takes chunks again once its model is loaded.

The actors build their encoder from an :class:`EncoderRecipe` (model spec, family, options,
dtype, runtime); each one's dense fingerprint must equal this process's, so vectors from the
cluster are exactly the ones a single process would cache under that fingerprint. Every node
needs alignir and the model files at the same paths as the driver.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from alignir.errors import RayEncodeError

log = logging.getLogger(__name__)

__all__ = ["EncoderRecipe", "RayOptions", "RayEncodePool", "import_ray"]

#: texts per chunk (one cache part each): an actor on a few cores takes seconds per chunk; one on
#: a GPU needs large chunks to stay busy
CPU_CHUNK_TEXTS = 128
GPU_CHUNK_TEXTS = 2048
#: the smallest chunk a short input is cut into, so that every actor gets work
MIN_CHUNK_TEXTS = 4
#: seconds between two questions to an actor that Ray is restarting
WAKE_POLL_SECONDS = 0.5
#: environment variables passed from this process to the actors (model cache, hub settings)
ENV_PREFIXES = ("ALIGNIR_", "HF_", "TRANSFORMERS_")


def import_ray() -> Any:
    """The ray module, or RayEncodeError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayEncodeError("encoding on Ray needs the ray package: pip install 'alignir[ray]'") from None
    return ray


@dataclass(frozen=True)
class EncoderRecipe:
    """What an actor needs to build the same encoder as this process: the model spec that
    ``load_model`` takes, the embedder family and options, the dtype of the weights and the
    runtime ("auto" | "torch" | "onnx")."""

    model: str
    family: str
    options: dict[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    runtime: str | None = None

    def build(self, device: str) -> Any:
        """The embedder, loaded on ``device``."""
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model
        from alignir.encoders.onnx_runtime import apply_runtime

        loaded = load_model(self.model, device=device, dtype=self.dtype)
        return apply_runtime(get_embedder(self.family, loaded, progress=False, **dict(self.options)), self.runtime)


@dataclass(frozen=True)
class RayOptions:
    """Where and how to encode on Ray. ``address``: "auto" (the cluster this process is connected
    to, else the one ``ray start`` runs on this machine or ``$RAY_ADDRESS`` names), "local" (start
    one in this process, on this machine's cores and GPUs) or a cluster address (``HOST:PORT`` or
    ``ray://HOST:PORT``). ``actors``: how many (default: one per GPU, else one per
    ``cpus_per_actor`` cores); ``in_flight``: chunks queued at each actor; ``chunk_texts``: texts
    per chunk (default by device); ``start_timeout``: seconds for the actors to load the model."""

    address: str = "auto"
    actors: int | None = None
    cpus_per_actor: int = 1
    in_flight: int = 2
    chunk_texts: int | None = None
    max_restarts: int = 3
    start_timeout: float = 600.0

    @classmethod
    def of(cls, value: "str | RayOptions") -> "RayOptions":
        if isinstance(value, RayOptions):
            return value
        if not isinstance(value, str) or not value.strip():
            raise RayEncodeError(f"ray must be 'auto', 'local' or a cluster address, got {value!r}")
        return cls(address=value.strip())

    def check(self) -> "RayOptions":
        """RayEncodeError now, before any model loads, when ray is not installed or a HOST:PORT
        address does not answer. Returns self."""
        import_ray()
        if self.address not in ("auto", "local"):
            _check_reachable(self.address)
        return self

    def __post_init__(self) -> None:
        for name in ("cpus_per_actor", "in_flight", "max_restarts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "max_restarts" else 1):
                raise RayEncodeError(f"ray option {name} must be a positive integer, got {v!r}")
        for name in ("actors", "chunk_texts"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise RayEncodeError(f"ray option {name} must be a positive integer, got {v!r}")


class EncodeActor:
    """The actor's body: an embedder loaded once, encoding chunks of texts."""

    def __init__(self, recipe: EncoderRecipe, device: str, threads: int, env: dict[str, str]) -> None:
        os.environ.update(env)
        import torch

        torch.set_num_threads(threads)
        from alignir.encoders.cache import dense_fingerprint, fingerprint_key

        self.embedder = recipe.build(device)
        if hasattr(self.embedder, "warn_truncation"):
            self.embedder.warn_truncation = False  # the driver warns once for the whole input
        self.key = fingerprint_key(dense_fingerprint(self.embedder))

    def ready(self) -> tuple[str, int]:
        """(the dense fingerprint key, the actor's process id)."""
        return self.key, os.getpid()

    def encode(self, texts: list[str], role: str) -> tuple[np.ndarray, int]:
        """(vectors float32 [n, d], texts truncated) of ``texts`` as ``role``."""
        e = self.embedder
        vec = e.encode_queries(texts) if role == "query" else e.encode_documents(texts)
        truncated = int(getattr(e, "last_stats", {}).get("n_truncated", 0))
        return np.asarray(vec, dtype=np.float32), truncated


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """RayEncodeError when nothing listens at a HOST:PORT address (ray.init would retry for
    minutes)."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise RayEncodeError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT, 'auto' or 'local'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayEncodeError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def connect(address: str) -> bool:
    """Connect this process to a Ray cluster; True when this call did it (so close() disconnects)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": False}
    if address == "local":
        ray.init(**kw)
        return True
    if address != "auto":
        _check_reachable(address)
    try:
        ray.init(address=address, **kw)
    except ConnectionError as e:
        where = "no running Ray cluster found (start one with `ray start --head`, or use --ray local)" \
            if address == "auto" else f"cannot connect to the Ray cluster at {address}"
        raise RayEncodeError(f"{where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return True


class RayEncodePool:
    """Actors holding the encoder of ``recipe`` on a Ray cluster (see the module docstring).
    ``expected_key``: this process's dense fingerprint key; an actor whose key differs is an error.
    Use as a context manager, or call :meth:`close`."""

    def __init__(self, recipe: EncoderRecipe, options: "RayOptions | str" = "auto", *,
                 expected_key: str | None = None, device: str = "auto") -> None:
        self.options = opts = RayOptions.of(options)
        self.ray = ray = import_ray()
        self._connected = connect(opts.address)
        try:
            resources = ray.cluster_resources()
            gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
            if gpus:
                n, actor_opts, self.device = opts.actors or gpus, {"num_gpus": 1, "num_cpus": 1}, "cuda"
            else:
                cpus = max(1, int(resources.get("CPU", 1)))
                n = opts.actors or max(1, cpus // opts.cpus_per_actor)
                actor_opts, self.device = {"num_cpus": opts.cpus_per_actor}, "cpu"
            env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
            remote = ray.remote(EncodeActor).options(max_restarts=opts.max_restarts, max_task_retries=0,
                                                     **actor_opts)
            self.actors = [remote.remote(recipe, self.device, opts.cpus_per_actor, env) for _ in range(n)]
            self.pids: list[int] = [0] * n
            #: actors Ray is restarting -> since when (monotonic seconds)
            self._down: dict[int, float] = {}
            self._dead: set[int] = set()
            self._await_ready(expected_key)
        except BaseException:
            self.close()
            raise
        #: chunks encoded, chunks lost with their actor and encoded again, actors seen restarted
        self.stats = {"chunks": 0, "retried": 0, "restarts": 0}
        self.resources = {k: resources[k] for k in ("CPU", "GPU") if k in resources}

    def _await_ready(self, expected_key: str | None) -> None:
        """Wait until every actor has loaded the encoder and check its fingerprint. An actor killed
        while loading (for memory, its node lost) is waited for while Ray restarts it; one whose
        loading raised is an error at once; one gone for good is left out if others started."""
        ray = self.ray
        pending = {a.ready.remote(): i for i, a in enumerate(self.actors)}
        tries = [0] * len(self.actors)
        end = time.monotonic() + self.options.start_timeout
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, end - time.monotonic()))
            if not done:
                raise RayEncodeError(f"only {len(self.actors) - len(pending) - len(self._dead)} of {len(self.actors)} "
                                     f"Ray actors started within {self.options.start_timeout:.0f} s "
                                     f"(cluster: {ray.cluster_resources()})")
            i = pending.pop(done[0])
            try:
                key, pid = ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                tries[i] += 1
                if getattr(e, "actor_init_failed", False):
                    raise RayEncodeError(f"a Ray actor could not load the encoder: {_cause(e)}") from None
                if tries[i] <= self.options.max_restarts:
                    log.warning("Ray actor %d was lost while loading the encoder (%s): waiting for its restart",
                                i, _cause(e))
                    time.sleep(WAKE_POLL_SECONDS)
                    pending[self.actors[i].ready.remote()] = i
                else:
                    self._dead.add(i)
                continue
            except ray.exceptions.RayError as e:
                raise RayEncodeError(f"a Ray actor could not load the encoder: {_cause(e)}") from None
            if expected_key is not None and key != expected_key:
                raise RayEncodeError(f"the Ray actors' encoder differs from this process's (dense fingerprint "
                                     f"{key} != {expected_key}): every node needs the same model files and alignir")
            self.pids[i] = pid
        if len(self._dead) == len(self.actors):
            raise RayEncodeError(f"no Ray actor could be started: each was lost {self.options.max_restarts + 1} "
                                 "times while loading the encoder (out of memory?)")

    def __enter__(self) -> "RayEncodePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the actors (and disconnect, when this pool connected)."""
        for a in getattr(self, "actors", []):
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # already gone
                pass
        self.actors = []
        if getattr(self, "_connected", False):
            self.ray.shutdown()
            self._connected = False

    def summary(self) -> dict[str, Any]:
        """What the pool did, for a build's manifest: address, actors, device and :attr:`stats`."""
        return {"address": self.options.address, "actors": len(self.actors), "device": self.device, **self.stats}

    def chunk_size(self, n: int) -> int:
        """Texts per chunk for an input of ``n`` texts: the option, else by device, but small
        enough that every actor has ``in_flight`` chunks."""
        if self.options.chunk_texts:
            return self.options.chunk_texts
        size = GPU_CHUNK_TEXTS if self.device == "cuda" else CPU_CHUNK_TEXTS
        share = math.ceil(n / max(1, len(self.actors) * self.options.in_flight))
        return max(MIN_CHUNK_TEXTS, min(size, share))

    def encode_chunks(self, texts: list[str], role: str) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """(row numbers into ``texts``, their vectors, texts truncated) for every chunk, in the
        order they finish; every row comes back exactly once. A chunk lost with its actor is
        encoded again elsewhere; RayEncodeError once no actor is left or a chunk was lost
        ``max_restarts + 1`` times."""
        ray = self.ray
        size = self.chunk_size(len(texts))
        chunks = [np.arange(s, min(s + size, len(texts))) for s in range(0, len(texts), size)]
        queue = deque(range(len(chunks)))
        lost = [0] * len(chunks)
        # actors taking chunks, and those Ray is restarting (a ready() call each, answered once it is back)
        slots = {i: self.options.in_flight for i in range(len(self.actors)) if i not in self._down and i not in self._dead}
        running: dict[Any, tuple[int, int]] = {}  # ref -> (actor, chunk)
        waking = {self.actors[a].ready.remote(): a for a in self._down}
        retryable = _retryable(ray)
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
        while queue or running:
            for a in list(slots):
                while queue and slots[a] > 0:
                    c = queue.popleft()
                    rows = chunks[c]
                    ref = self.actors[a].encode.remote([texts[i] for i in rows], role)
                    running[ref] = (a, c)
                    slots[a] -= 1
            if not running and not waking:
                raise RayEncodeError("every Ray actor is gone (their restarts used up): "
                                     f"{len(queue)} chunks of {len(chunks)} not encoded")
            done, _ = ray.wait([*running, *waking], num_returns=1)
            ref = done[0]
            if ref in waking:
                a = waking.pop(ref)
                try:
                    self.pids[a] = ray.get(ref)[1]
                    slots[a] = self.options.in_flight
                    del self._down[a]
                    self.stats["restarts"] += 1
                    log.warning("Ray actor %d is back (pid %d)", a, self.pids[a])
                except unavailable:  # still restarting (loading the model): ask again shortly
                    if time.monotonic() - self._down[a] < self.options.start_timeout:
                        time.sleep(WAKE_POLL_SECONDS)
                        waking[self.actors[a].ready.remote()] = a
                    else:
                        log.warning("Ray actor %d did not come back within %.0f s", a, self.options.start_timeout)
                        self._down.pop(a, None)
                        self._dead.add(a)
                except retryable:
                    log.warning("Ray actor %d is gone for good", a)
                    self._down.pop(a, None)
                    self._dead.add(a)
                continue
            a, c = running.pop(ref)
            try:
                vec, truncated = ray.get(ref)
            except retryable as e:
                lost[c] += 1
                if lost[c] > self.options.max_restarts:
                    raise RayEncodeError(f"a chunk of {len(chunks[c])} texts was lost with its Ray actor "
                                         f"{lost[c]} times: {_cause(e)}") from None
                queue.appendleft(c)
                self.stats["retried"] += 1
                if a in slots:  # the first of its chunks to fail: wait for Ray to restart it
                    del slots[a]
                    self._down[a] = time.monotonic()
                    waking[self.actors[a].ready.remote()] = a
                    log.warning("Ray actor %d (pid %d) died (%s): its chunks go to the other actors",
                                a, self.pids[a], _cause(e))
                continue
            except ray.exceptions.RayTaskError as e:
                raise RayEncodeError(f"a Ray actor failed to encode: {_cause(e)}") from None
            if a in slots:
                slots[a] += 1
            self.stats["chunks"] += 1
            yield chunks[c], vec, truncated


def _retryable(ray: Any) -> tuple[type, ...]:
    """The errors that mean a chunk was lost with its actor or worker (not a failure of the
    encoder itself)."""
    ex = ray.exceptions
    names = ("RayActorError", "ActorUnavailableError", "WorkerCrashedError", "ObjectLostError",
             "OutOfMemoryError", "NodeDiedError")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


def _cause(e: BaseException) -> str:
    """One line about a Ray error."""
    cause = getattr(e, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else e).strip()
    line = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), type(e).__name__)
    return line[:300]

