"""Embedding cache: dense vectors keyed by (encoder fingerprint, role, text sha1).

The text is the one the transformer reads (``Embedder.read_texts``: runs of capitals in
sentence case under ``text_form="auto"``, encoders.text_form), and the fingerprint leaves the
text form out: a natural text reads the same either way and keeps its cached vector, and a
text in capitals shares the vector of its sentence-case form.

Encoding is the dominant cost on CPU (DESIGN §1), so a corpus is encoded once per encoder and
every later K / M / λ / weighting is a re-sparsify of cached vectors.

Layout under ``root`` (default ``$ALIGNIR_CACHE/embeddings``)::

    <fp>/fingerprint.json              the embedder's fingerprint (fp = its sha256, 32 hex)
    <fp>/<role>/part-<tag>-<seq>-<rand>.npz   keys uint8 [n, 20] (sha1 of the text), vectors float32 [n, d]

- Checkpoints: a long encode writes a part every ``shard_size`` new texts (temp file + rename,
  so a part is either complete or absent). A killed encode loses at most the part in progress;
  the next call encodes only what is missing.
- Multi-process / multi-machine encodes: ``shard_id`` / ``shard_num`` (as Pyserini) make a call
  encode only its contiguous slice of the input. Processes sharing a root need nothing more (part
  names never collide); separate roots are joined with :meth:`EmbeddingCache.merge`.
- No pickle: parts are plain ``.npz`` arrays read with ``allow_pickle=False``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from alignir.encoders.embedders.base import TRUNCATION_WARNING, Embedder
from alignir.encoders.models import cache_dir
from alignir.checks import check_texts
from alignir.errors import InvalidInputError
from alignir.io import atomic_write, atomic_write_json

log = logging.getLogger(__name__)

__all__ = ["EmbeddingCache", "encode_cached", "fingerprint_key", "text_key", "shard_rows"]

ROLES = ("query", "document")
#: encodes texts elsewhere: ``(texts, role)`` -> ``(rows, vectors, n_truncated)`` per finished chunk
Runner = Callable[[list[str], str], Iterable[tuple[Sequence[int], np.ndarray, int]]]
#: texts per written part: on a CPU a part is minutes of work; beside a GPU a part is one step of
#: the embedder's tokenizer/GPU pipeline, and a small part would leave the GPU idle
CPU_SHARD_TEXTS = 256
GPU_SHARD_TEXTS = 8192
_KEY_BYTES = 20  # sha1


def dense_fingerprint(embedder: Any) -> dict[str, Any]:
    """The fingerprint the cache keys an embedder's vectors by: what changes the dense vectors
    (``Embedder.dense_fingerprint``; an adapter's sparse map does not)."""
    fn = getattr(embedder, "dense_fingerprint", None)
    return fn() if fn is not None else embedder.fingerprint()


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """Stable 32-hex key of a JSON-serialisable fingerprint."""
    try:
        blob = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except TypeError as e:
        raise InvalidInputError(f"embedder fingerprint is not JSON-serialisable: {e}") from None
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def read_texts(embedder: Any, texts: list[str]) -> list[str]:
    """The texts as ``embedder`` reads them (the cache's keys); unchanged for an embedder
    without a text form."""
    fn = getattr(embedder, "read_texts", None)
    return texts if fn is None else fn(texts)


def text_key(text: str) -> bytes:
    """sha1 of the text's UTF-8 bytes (lone surrogates kept via surrogatepass)."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


def shard_rows(n: int, shard_id: int, shard_num: int) -> np.ndarray:
    """Rows of an n-row input that shard ``shard_id`` of ``shard_num`` handles (contiguous)."""
    if not (isinstance(shard_num, int) and shard_num >= 1):
        raise InvalidInputError(f"shard_num must be a positive int, got {shard_num!r}")
    if not (isinstance(shard_id, int) and 0 <= shard_id < shard_num):
        raise InvalidInputError(f"shard_id must be in [0, {shard_num}), got {shard_id!r}")
    return np.array_split(np.arange(n), shard_num)[shard_id]


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise InvalidInputError(f"role must be one of {ROLES}, got {role!r}")


#: a ``.part-*.tmp`` older than this is left over from a killed checkpoint (a live write takes < 1 s)
STALE_TEMP_SECONDS = 600


def _quarantine(part: Path, error: BaseException) -> None:
    """Move a damaged cache part aside (``*.corrupt``, kept for inspection); its texts are
    re-encoded by the next build, which says so."""
    target = part.with_name(part.name + ".corrupt")
    with contextlib.suppress(OSError):
        os.replace(part, target)
    log.warning("embedding cache part %s is damaged (%s): moved aside to %s; its texts will be re-encoded",
                part, type(error).__name__, target.name)


def _remove_stale_temps(folder: Path) -> None:
    """Delete the temporary files of checkpoints that were killed mid-write."""
    now = time.time()
    for tmp in folder.glob(".part-*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                tmp.unlink()


class _RoleIndex:
    """In-memory map text sha1 -> (part file, row) for one (fingerprint, role) folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.where: dict[bytes, tuple[str, int]] = {}
        self.parts: set[str] = set()
        self.dim: int | None = None

    def refresh(self) -> None:
        if not self.folder.is_dir():
            return
        _remove_stale_temps(self.folder)
        for name in sorted(os.listdir(self.folder)):
            if not (name.startswith("part-") and name.endswith(".npz")) or name in self.parts:
                continue
            try:
                with np.load(self.folder / name, allow_pickle=False) as z:
                    keys = z["keys"]
                    vectors = z["vectors"] if "vectors" in z.files else None  # read whole: checks its CRC
                    dim = int(vectors.shape[1]) if vectors is not None else None
            except FileNotFoundError:  # removed by a concurrent compact: skip
                continue
            except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, OSError) as e:
                _quarantine(self.folder / name, e)
                continue
            if keys.ndim != 2 or keys.shape[1] != _KEY_BYTES:
                raise InvalidInputError(f"corrupt cache part {self.folder / name}: keys shape {keys.shape}")
            if dim is not None:
                if self.dim is not None and dim != self.dim:
                    raise InvalidInputError(f"cache part {name} has dim {dim}, others have {self.dim}")
                self.dim = dim
            for r, k in enumerate(keys):
                self.where.setdefault(k.tobytes(), (name, r))
            self.parts.add(name)

    def gather(self, keys: list[bytes], dim: int) -> np.ndarray:
        out = np.empty((len(keys), dim), dtype=np.float32)
        by_part: dict[str, list[tuple[int, int]]] = {}
        for i, k in enumerate(keys):
            part, row = self.where[k]
            by_part.setdefault(part, []).append((i, row))
        for part, pairs in by_part.items():
            with np.load(self.folder / part, allow_pickle=False) as z:
                vec = z["vectors"]
            dst, src = np.array(pairs).T
            out[dst] = vec[src]
        return out


@contextlib.contextmanager
def _one_truncation_warning(embedder: Embedder, role: str, n: int, stats: dict[str, int]) -> Iterator[None]:
    """While a corpus is encoded in parts, the embedder's own per-call truncation warning is off;
    afterwards one warning gives the total (``stats["n_truncated"]``, summed by the caller)."""
    switch = hasattr(embedder, "warn_truncation")
    before = getattr(embedder, "warn_truncation", None)
    if switch:
        embedder.warn_truncation = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if switch:
            embedder.warn_truncation = before  # type: ignore[attr-defined]
    if stats.get("n_truncated"):
        log.warning(TRUNCATION_WARNING, stats["n_truncated"], n, role,
                    getattr(embedder, "max_length", "?"))


class EmbeddingCache:
    """Content-addressed store of dense embeddings. See the module docstring."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else cache_dir() / "embeddings"
        self._indexes: dict[tuple[str, str], _RoleIndex] = {}
        #: what the last encode_cached call did: n_texts, n_unique, n_cached, n_encoded, n_parts_written
        self.last_stats: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def folder(self, fingerprint: dict[str, Any] | str, role: str) -> Path:
        _check_role(role)
        fp = fingerprint if isinstance(fingerprint, str) else fingerprint_key(fingerprint)
        return self.root / fp / role

    def _index(self, fp: str, role: str) -> _RoleIndex:
        key = (fp, role)
        if key not in self._indexes:
            self._indexes[key] = _RoleIndex(self.folder(fp, role))
        idx = self._indexes[key]
        idx.refresh()
        return idx

    def _write_fingerprint(self, fp: str, fingerprint: dict[str, Any]) -> None:
        path = self.root / fp / "fingerprint.json"
        if path.is_file():
            return
        atomic_write_json(path, fingerprint, sort_keys=True, indent=1)

    @staticmethod
    def _write_part(folder: Path, tag: str, seq: int, keys: list[bytes], vectors: np.ndarray) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        name = f"part-{tag}-{seq:06d}-{uuid.uuid4().hex[:8]}.npz"
        karr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), _KEY_BYTES)
        with atomic_write(folder / name, "wb") as fh:
            np.savez(fh, keys=karr, vectors=np.ascontiguousarray(vectors, dtype=np.float32))
        return name

    # ------------------------------------------------------------------ public API

    def lookup(self, embedder: Embedder, texts: Sequence[str], role: str) -> tuple[np.ndarray, np.ndarray]:
        """(vectors [n, d] float32 with NaN rows where missing, found bool [n]) — no encoding."""
        _check_role(role)
        texts = read_texts(embedder, check_texts(texts))
        fp = fingerprint_key(dense_fingerprint(embedder))
        idx = self._index(fp, role)
        keys = [text_key(t) for t in texts]
        found = np.array([k in idx.where for k in keys], dtype=bool)
        out = np.full((len(texts), embedder.dim), np.nan, dtype=np.float32)
        if found.any():
            out[found] = idx.gather([k for k, f in zip(keys, found) if f], embedder.dim)
        return out, found

    def encode_cached(
        self,
        embedder: Embedder,
        texts: Sequence[str],
        role: str,
        shard_size: int | None = None,
        shard_id: int | None = None,
        shard_num: int | None = None,
        progress: bool = True,
        runner: Runner | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts`` (float32 [n, d], input order), encoding only what is not cached.

        New vectors are written every ``shard_size`` texts, so an interrupted call resumes
        (default: :data:`CPU_SHARD_TEXTS` on a CPU, where a part is minutes of work, and
        :data:`GPU_SHARD_TEXTS` beside a GPU, where a small part would starve it).
        Uncached texts are encoded longest first (by characters): a part holds texts of similar
        length, which keeps the padding in the embedder's length-sorted batches small.
        With ``shard_id``/``shard_num`` only the rows ``shard_rows(n, shard_id, shard_num)`` are
        encoded and returned (in that order); run every shard, then call without them (or
        :meth:`merge` roots first) to read the whole input from the cache.
        ``runner``: encodes the uncached texts elsewhere instead of with ``embedder`` (a callable
        ``(texts, role)`` yielding ``(rows, vectors, n_truncated)`` per finished chunk, in any
        order, each written as a part: encoders.ray_pool); ``shard_size`` is then the runner's.
        """
        _check_role(role)
        texts = read_texts(embedder, check_texts(texts))
        if shard_size is None:
            on_gpu = getattr(getattr(getattr(embedder, "loaded", None), "device", None), "type", "cpu") == "cuda"
            shard_size = GPU_SHARD_TEXTS if on_gpu else CPU_SHARD_TEXTS
        if not isinstance(shard_size, int) or shard_size < 1:
            raise InvalidInputError(f"shard_size must be a positive int, got {shard_size!r}")
        if (shard_id is None) != (shard_num is None):
            raise InvalidInputError("give both shard_id and shard_num, or neither")
        if shard_num is not None:
            rows = shard_rows(len(texts), shard_id, shard_num)  # type: ignore[arg-type]
            texts = [texts[i] for i in rows]
            tag = f"s{shard_id:03d}of{shard_num:03d}"
        else:
            tag = "all"
        fingerprint = dense_fingerprint(embedder)
        fp = fingerprint_key(fingerprint)
        idx = self._index(fp, role)
        keys = [text_key(t) for t in texts]
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts):
            if k not in idx.where and k not in todo:
                todo[k] = t
        stats = {"n_texts": len(texts), "n_unique": len(set(keys)), "n_cached": 0, "n_encoded": len(todo),
                 "n_parts_written": 0}
        stats["n_cached"] = stats["n_unique"] - len(todo)
        if todo:
            self._write_fingerprint(fp, fingerprint)
            folder = self.folder(fp, role)
            # longest first, so each checkpoint part holds texts of similar length (little
            # padding in the embedder's batches; an out-of-memory shows at the start, not after
            # an hour); vectors are stored by text key, so input order is restored on gather
            pending = sorted(todo.items(), key=lambda kv: -len(kv[1]))
            what = "queries" if role == "query" else "documents"
            bar = tqdm(total=len(pending), desc=f"encode+cache {what}", unit="text", disable=not progress)
            seq = len([p for p in idx.parts if p.startswith(f"part-{tag}-")])
            stats["n_truncated"] = 0
            with _one_truncation_warning(embedder, role, len(pending), stats):
                seq = self._encode_parts(embedder, role, pending, shard_size, folder, tag, seq, stats, bar,
                                         runner)
            bar.close()
            idx.refresh()
        self.last_stats = stats
        return idx.gather(keys, embedder.dim) if keys else np.zeros((0, embedder.dim), dtype=np.float32)

    def _encode_parts(self, embedder: Embedder, role: str, pending: list[tuple[bytes, str]], shard_size: int,
                      folder: Path, tag: str, seq: int, stats: dict[str, int], bar: Any,
                      runner: Runner | None = None) -> int:
        """Encode ``pending`` (key, text) in parts of ``shard_size`` (or as ``runner`` cuts them),
        each written as it is done; returns the next part number."""
        texts = [t for _, t in pending]
        pieces = runner(texts, role) if runner is not None else _in_process(embedder, texts, role, shard_size)
        for rows, vec, truncated in pieces:
            vec = np.asarray(vec, dtype=np.float32)
            if vec.shape != (len(rows), embedder.dim):
                raise InvalidInputError(f"embedder returned shape {vec.shape}, expected {(len(rows), embedder.dim)}")
            self._write_part(folder, tag, seq, [pending[i][0] for i in rows], vec)
            seq += 1
            stats["n_parts_written"] += 1
            stats["n_truncated"] += int(truncated)
            bar.update(len(rows))
        return seq

    def merge(self, sources: Sequence[str | os.PathLike]) -> int:
        """Copy every part from other cache roots (e.g. one per machine) into this root.

        Fingerprints must agree where both roots have one. Returns the number of parts copied.
        """
        copied = 0
        for src in sources:
            src = Path(src).expanduser()
            if not src.is_dir():
                raise InvalidInputError(f"cache root {src} does not exist")
            if src.resolve() == self.root.resolve():
                continue
            for fp_dir in sorted(p for p in src.iterdir() if p.is_dir()):
                fp_src = fp_dir / "fingerprint.json"
                if not fp_src.is_file():
                    continue
                fingerprint = json.loads(fp_src.read_text())
                if fingerprint_key(fingerprint) != fp_dir.name:
                    raise InvalidInputError(f"{fp_src} does not hash to its folder name {fp_dir.name}")
                self._write_fingerprint(fp_dir.name, fingerprint)
                for role in ROLES:
                    rdir = fp_dir / role
                    if not rdir.is_dir():
                        continue
                    dst = self.folder(fp_dir.name, role)
                    dst.mkdir(parents=True, exist_ok=True)
                    for part in sorted(rdir.glob("part-*.npz")):
                        if (dst / part.name).exists():
                            continue
                        with open(part, "rb") as src, atomic_write(dst / part.name, "wb") as fh:
                            shutil.copyfileobj(src, fh)
                        copied += 1
        return copied

    def compact(self, embedder: Embedder | dict[str, Any] | str, role: str) -> int:
        """Join all parts of one (fingerprint, role) into a single part (duplicates dropped) and
        remove stale temp files. Run it when no other process is reading or writing there (their
        in-memory indexes would point at removed parts). Returns rows kept."""
        if isinstance(embedder, Embedder):
            fp = fingerprint_key(dense_fingerprint(embedder))
        else:
            fp = embedder if isinstance(embedder, str) else fingerprint_key(embedder)
        idx = self._index(fp, role)
        folder = self.folder(fp, role)
        if not idx.where:
            return 0
        keys = list(idx.where)
        vec = idx.gather(keys, int(idx.dim or 0))
        old = sorted(idx.parts)
        self._write_part(folder, "compact", 0, keys, vec)
        for name in old:
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
        for tmp in folder.glob(".part-*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._indexes.pop((fp, role), None)
        return len(keys)

    def fingerprints(self) -> dict[str, dict[str, Any]]:
        """All fingerprints stored under this root, by key."""
        out = {}
        if self.root.is_dir():
            for p in sorted(self.root.iterdir()):
                f = p / "fingerprint.json"
                if f.is_file():
                    out[p.name] = json.loads(f.read_text())
        return out


def _in_process(embedder: Embedder, texts: list[str], role: str,
                shard_size: int) -> Iterator[tuple[range, np.ndarray, int]]:
    """The default runner: ``embedder`` in this process, ``shard_size`` texts at a time."""
    for start in range(0, len(texts), shard_size):
        chunk = texts[start : start + shard_size]
        vec = embedder.encode_queries(chunk) if role == "query" else embedder.encode_documents(chunk)
        yield range(start, start + len(chunk)), vec, int(getattr(embedder, "last_stats", {}).get("n_truncated", 0))


def encode_cached(
    embedder: Embedder,
    texts: Sequence[str],
    role: str,
    cache: EmbeddingCache | str | os.PathLike | None = None,
    **kw: Any,
) -> np.ndarray:
    """Functional form of :meth:`EmbeddingCache.encode_cached` (``cache``: instance, root or None)."""
    c = cache if isinstance(cache, EmbeddingCache) else EmbeddingCache(cache)
    return c.encode_cached(embedder, texts, role, **kw)
