"""An alignir index served by Milvus: one collection per index, exported from the folder and
searched leg by leg with the same scores as our own kernels.

The collection holds, per live document (primary key = the document id)::

    id          VARCHAR      the document id
    doc_number  INT64        the document's number in the folder index (tie-break, filters)
    dense       FLOAT_VECTOR T(h) as the dense index scores it (the index's centring /
                             whitening and L2 normalisation applied), FLAT + IP: IP = our score
    sparse      SPARSE_FLOAT_VECTOR  the aligned-token weights exactly as stored (dequantised)
                             (“A Text is Worth Several Tokens” eq.15), SPARSE_INVERTED_INDEX + IP,
                             drop ratio 0: IP with the eq.16 query vector = our sparse score
    bm25        SPARSE_FLOAT_VECTOR  the BM25 document weights of the lexical leg (retrieval/bm25.py);
                             IP with the query's term counts = our BM25 score (only with the leg)
                             (a document without terms, e.g. only stopwords, holds the
                             placeholder term ``NO_TERM``, which no query has: Milvus stores
                             no empty sparse vector)
    title, text VARCHAR      optional (``store_text``)

An index with passages (``build-index --passages``) is exported one entity per passage: ``id``
is the passage id ``docid#N``, ``doc_number`` the document's number (filters act on
documents), ``row`` the passage's row in the folder index and ``ordinal`` N; ``dense`` and
``sparse`` hold the passage's vectors, ``bm25`` its whole document's BM25 weights (BM25 scores
documents: it is searched over the first passages only). A search scores passages in Milvus
and aggregates them to documents client-side (MaxP, FirstP or sumN: index.passages), the
exact document top-k as the folder computes it.

The index's manifest (encoder fingerprint, sparse config, term-map hash, dense transform,
lexical parameters) is stored as the collection property ``alignir.manifest``; a searcher
compares it with the folder it encodes queries with and refuses a mismatch. Where collection
properties are not kept (the Milvus 2.5 engine, retrieval/milvus_engine.py), the same entries
go in a metadata collection and are read back and checked the same way (retrieval/milvus_meta.py).

Milvus takes only non-negative sparse weights. Documents' aligned-token weights are non-negative
with the relu/log1p weightings (the default); an index with raw (signed) document weights cannot
be exported. Query weights may be negative (raw query weighting: a surface token with a negative
logit): :meth:`MilvusCollection.search_sparse` then scores q = q⁺ - q⁻ exactly by deepening
the q⁺ search until no unseen document can enter the top k (see there).

URIs: a local path ending in ``.db`` is an embedded Milvus Lite database (a folder);
``http(s)://host:port`` is a Milvus server or cluster. Credentials come only from the
environment: ``MILVUS_TOKEN`` or ``MILVUS_USER`` + ``MILVUS_PASSWORD``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.errors import AlignirError, CollectionMismatch, IncompleteCollection, InvalidInputError, MilvusError
from alignir.retrieval import milvus_meta as meta

__all__ = ["MilvusCollection", "check_uri", "connect", "export_index",
           "index_manifest", "default_collection_name"]

FORMAT = "alignir-milvus"
FORMAT_VERSION = 1
PROPERTY = "alignir.manifest"
#: the index folder that exported the collection (its resolved path): --recreate drops only its own
OWNER = "alignir.folder"
#: written last, after every insert and the flush: ``{"rows": N}`` (a collection without it is
#: an interrupted export)
COMPLETE = "alignir.complete"
#: Milvus' largest top-k / query window (real Milvus: topk <= 16384)
MAX_LIMIT = 16384
ID_MAX_LENGTH = 1024
TEXT_MAX_LENGTH = 65535
FIELDS = {"dense": "dense", "sparse": "sparse", "bm25": "bm25"}  # leg -> vector field
#: the one term of a document without any (e.g. only stopwords: an empty BM25 vector), which
#: Milvus cannot store empty; no query has it (the largest index Milvus takes), so it matches nothing
NO_TERM = 2**32 - 2


#: the loggers of the Milvus client, Milvus Lite and gRPC (and their children)
CLIENT_LOGGERS = ("pymilvus", "milvus_lite", "grpc")
_client_log_level: int | None = None


def set_client_log_level(level: int | None) -> None:
    """Set the Milvus libraries' log level (the CLI: their tracebacks and warnings only with -v),
    now and again after pymilvus configures its own loggers at import."""
    global _client_log_level
    _client_log_level = level
    _apply_client_log_level()


def _apply_client_log_level() -> None:
    if _client_log_level is None:
        return
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in CLIENT_LOGGERS]
    for name in {*CLIENT_LOGGERS, *names}:
        logging.getLogger(name).setLevel(_client_log_level)


def _milvus() -> Any:
    try:
        import pymilvus
    except ImportError:
        raise MilvusError("the Milvus backend needs pymilvus (and milvus-lite for local .db files): "
                          "pip install 'alignir[milvus]'") from None
    _apply_client_log_level()  # pymilvus sets its loggers' levels when first imported
    return pymilvus


def _client_errors() -> tuple[type[BaseException], ...]:
    """What the client raises for a server-side or connection failure (not our bugs)."""
    import grpc
    from pymilvus.exceptions import MilvusException

    return (MilvusException, grpc.RpcError)


def _one_line(e: Exception) -> str:
    msg = getattr(e, "message", None) or str(e)
    return " ".join(str(msg).split())


def check_uri(uri: Any, must_exist: bool = False) -> bool:
    """Check a Milvus URI without connecting (and that pymilvus is installed); returns whether
    it is a local Milvus Lite database. ``must_exist``: a local database must already exist
    (searching; an export creates it)."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidInputError("the Milvus URI is empty: give a local path ending in .db or http(s)://host:port")
    _milvus()
    scheme, sep, _ = uri.partition("://")
    if sep:
        if scheme.lower() not in ("http", "https", "tcp"):
            raise InvalidInputError(f"Milvus URI {uri!r}: a server is http(s)://host:port, a local Milvus Lite "
                                    f"database a path ending in .db")
        return False
    if not uri.endswith(".db"):
        raise InvalidInputError(f"Milvus URI {uri!r}: a local Milvus Lite database must end in .db; "
                                f"a server is http(s)://host:port")
    parent = os.path.dirname(os.path.abspath(uri))
    if not os.path.isdir(parent):
        try:
            os.stat(parent)
        except PermissionError:
            raise MilvusError(f"cannot open the Milvus Lite database {uri}: its folder {parent} cannot be reached "
                              f"(permission denied)") from None
        except OSError:
            pass
        raise InvalidInputError(f"Milvus URI {uri!r}: the folder {parent} does not exist")
    if must_exist and not os.path.exists(uri):
        raise MilvusError(f"no Milvus Lite database at {uri}: export the index first "
                          f"(alignir export milvus --index DIR --uri {uri})")
    return True


#: gRPC keepalive for a server with gRPC's default ping policy: a local Milvus Lite (its Python gRPC
#: server) and the Milvus 2.5 engine (retrieval/milvus_engine.py, a C++ gRPC server built without
#: keepalive settings) answer pings more often than every 5 minutes on an idle channel with GOAWAY
#: "too_many_pings" (pymilvus pings every 10 s), which broke a connection left idle while queries
#: were encoded. A server on this machine (a loopback address) gets them too: it may be that engine
#: started from a shell, and a loopback connection has no network to watch. A remote Milvus server
#: accepts pymilvus' pings and keeps its defaults.
LITE_GRPC_OPTIONS = {"grpc.keepalive_time_ms": 360_000, "grpc.keepalive_permit_without_calls": False}
def _loopback(uri: str) -> bool:
    import ipaddress
    from urllib.parse import urlparse

    host = urlparse(uri).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def grpc_options(uri: str) -> dict[str, Any] | None:
    """The gRPC channel options :func:`connect` passes for ``uri``: :data:`LITE_GRPC_OPTIONS` for a
    local ``.db`` or a server on a loopback address (the engine's), else None (pymilvus' own)."""
    if "://" not in uri or _loopback(uri):
        return dict(LITE_GRPC_OPTIONS)
    return None


def connect(uri: str, timeout: float = 10.0, must_exist: bool = False) -> Any:
    """A ``pymilvus.MilvusClient`` for ``uri`` (``*.db`` → Milvus Lite, ``http(s)://`` → a
    server); token / user + password from ``MILVUS_TOKEN`` / ``MILVUS_USER`` + ``MILVUS_PASSWORD``.
    Any failure is one :class:`MilvusError` line naming the URI and the cause when it can be told
    (a read-only file system, a path that is not a Milvus Lite database, the pid holding its lock,
    a server that does not answer; see :func:`check_uri`)."""
    local = check_uri(uri, must_exist)
    if local:
        _check_local(uri)
    pm = _milvus()
    kw: dict[str, Any] = {}
    if os.environ.get("MILVUS_TOKEN"):
        kw["token"] = os.environ["MILVUS_TOKEN"]
    elif os.environ.get("MILVUS_USER"):
        kw["user"] = os.environ["MILVUS_USER"]
        kw["password"] = os.environ.get("MILVUS_PASSWORD", "")
    options = grpc_options(uri)
    if options:
        kw["grpc_options"] = options
    lite_log = logging.getLogger("milvus_lite.server_manager")  # logs its own traceback when a .db cannot open
    was = lite_log.disabled
    lite_log.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pm.MilvusClient(uri=uri, timeout=timeout, **kw)
    except Exception as e:  # pymilvus raises MilvusException and grpc errors alike
        cause = _local_cause(uri) if local else _server_cause(uri, e)
        raise MilvusError(f"cannot connect to Milvus at {uri}: {cause or _one_line(e)}") from None
    finally:
        lite_log.disabled = was


def _check_local(uri: str) -> None:
    """Refuse, before connecting, a local database Milvus Lite cannot open, naming why."""
    cause = _local_cause(uri, locked=False)
    if cause:
        raise MilvusError(f"cannot open the Milvus Lite database {uri}: {cause}")


def _local_cause(uri: str, locked: bool = True) -> str | None:
    """Why Milvus Lite cannot open the database folder ``uri`` (None: no cause found)."""
    path = os.path.abspath(uri)
    if os.path.exists(path) and not os.path.isdir(path):
        return "it is not a Milvus Lite database (a file; Milvus Lite keeps a database in a folder)"
    if os.path.isdir(path):
        entries = set(os.listdir(path))
        if entries and not entries & {"LOCK", "collections", "databases"}:
            return f"it is not a Milvus Lite database (a folder without its LOCK or collections/: {sorted(entries)[:3]})"
    target = path if os.path.exists(path) else os.path.dirname(path)
    if not os.access(target, os.W_OK):
        ro = _read_only_fs(target)
        return (f"{target} is on a read-only file system" if ro else f"{target} is not writable (permission denied)") + \
            " (Milvus Lite writes its lock and log beside the data even to search)"
    if locked:
        pid = _lock_holder(os.path.join(path, "LOCK"))
        if pid is not None:
            return (f"the database is locked by pid {pid} (Milvus Lite serves a .db to one process at a time; "
                    f"for concurrent clients run a Milvus server)")
    return None


def _read_only_fs(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _lock_holder(lock_path: str) -> int | None:
    """The pid holding a flock on ``lock_path`` (Linux /proc/locks), else None."""
    try:
        st = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        cols = line.split()
        if len(cols) < 6 or "->" in cols[1]:
            continue
        try:
            pid, dev_ino = int(cols[4]), cols[5].split(":")
            if int(dev_ino[2]) == st.st_ino and pid != os.getpid():
                return pid
        except (ValueError, IndexError):
            continue
    return None


def _server_cause(uri: str, e: Exception) -> str:
    """A server connection failure in words: "unreachable" when nothing answers at host:port."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    host, port = parts.hostname or "localhost", parts.port or 19530
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as err:
        return f"the server is unreachable ({host}:{port}: {err.strerror or err})"
    return _one_line(e)


def folder_identity(index_dir: Any) -> str:
    """The index folder as a collection records its owner: its resolved absolute path."""
    return os.path.realpath(os.path.abspath(str(index_dir)))


def default_collection_name(index_dir: Any) -> str:
    """A valid collection name unique to the index folder: ``alignir_`` + the folder's name
    (letters, digits, underscores) + ``_`` + 8 hex digits of the sha256 of its resolved path
    (``x/adi-v1`` and ``x/adi_v1`` sanitise alike but hash apart)."""
    ident = folder_identity(index_dir)
    name = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(ident))
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return ("alignir_" + name)[:255 - 9] + "_" + digest


# ----------------------------------------------------------------------------- the manifest


def _sha256_arrays(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes() if a.dtype.kind != "U" else "\x00".join(a.tolist()).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def index_manifest(stored: Any) -> dict[str, Any]:
    """What a collection must agree on with the folder that encodes its queries: the encoder
    fingerprint, the sparse config, the term map, the dense transform and the lexical leg."""
    dense = stored.dense
    t = dense.transform
    lexical = stored.lexical
    extra = stored.extra
    term_map = (_sha256_arrays(np.asarray(extra["token_to_term"]), np.asarray(extra["term_strings"]))
                if "token_to_term" in extra else None)
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "encoder_hash": stored.manifest.get("encoder_hash"),
        "embedder": stored.manifest.get("embedder"),
        "sparse": stored.params.get("sparse", {}),
        "term_map": {"kind": stored.params.get("term_map", "identity"), "sha256": term_map},
        "pc1_sha256": None if stored.pc1 is None else _sha256_arrays(np.asarray(stored.pc1)),
        "dense": {"dim": int(dense.dim), "normalize": bool(dense.params.normalize),
                  "transform_sha256": _sha256_arrays(*(a for a in (t.mean, t.matrix) if a is not None))},
        "lexical": None if lexical is None else {
            "params": lexical.params, "vocab_sha256": _sha256_arrays(np.asarray(lexical.vocab, dtype=np.str_))},
        "n_docs": int(stored.n_docs),
        "content_sha256": _content_digest(stored.manifest),
        **({} if stored.passages is None else {"passages": stored.passages.describe()}),
    }


def _content_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 over the checksums of every file of the index (its manifest's ``files``): any
    rebuild, re-sparsify or new leg changes it, so a collection never serves another version."""
    files = manifest.get("files", {})
    listing = sorted((rel, str(meta.get("sha256"))) for rel, meta in files.items())
    return hashlib.sha256(json.dumps(listing).encode("utf-8")).hexdigest()


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += _diff(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(f"{prefix}{k}")
    return out


# ----------------------------------------------------------------------------- export


def _live_numbers(stored: Any) -> np.ndarray:
    """The live rows (= documents without passages)."""
    live = np.asarray(stored.sparse.live_doc_numbers(), dtype=np.int64)
    dead = stored.dense.deleted
    return live[~dead[live]]


def _sparse_dict(terms: np.ndarray, weights: np.ndarray, what: str, doc_id: str) -> dict[int, float]:
    w = np.asarray(weights, dtype=np.float32)
    if w.size and w.min() < 0:
        raise InvalidInputError(f"document {doc_id!r} has negative {what} weights (e.g. {float(w.min()):.4g}); "
                                f"Milvus sparse vectors hold only non-negative weights: re-sparsify the index "
                                f"with doc_weighting 'log1p' or 'relu' before exporting")
    keep = w != 0
    if not keep.any():  # Milvus refuses an empty sparse vector: a term no query has matches nothing
        return {NO_TERM: 1.0}
    return dict(zip(np.asarray(terms)[keep].tolist(), w[keep].tolist()))


def _schema(client: Any, dim: int, lexical: bool, store_text: bool, passages: bool = False) -> tuple[Any, Any]:
    pm = _milvus()
    dt = pm.DataType
    s = client.create_schema(auto_id=False, enable_dynamic_field=False,
                             description=meta.describe("alignir index (its record: the alignir.manifest property, "
                                                       f"or the {meta.META} collection)"))
    s.add_field("id", dt.VARCHAR, is_primary=True, max_length=ID_MAX_LENGTH)
    s.add_field("doc_number", dt.INT64)
    if passages:
        s.add_field("row", dt.INT64)
        s.add_field("ordinal", dt.INT64)
    s.add_field("dense", dt.FLOAT_VECTOR, dim=dim)
    s.add_field("sparse", dt.SPARSE_FLOAT_VECTOR)
    if lexical:
        s.add_field("bm25", dt.SPARSE_FLOAT_VECTOR)
    if store_text:
        s.add_field("title", dt.VARCHAR, max_length=TEXT_MAX_LENGTH)
        s.add_field("text", dt.VARCHAR, max_length=TEXT_MAX_LENGTH)
    ip = client.prepare_index_params()
    ip.add_index("dense", index_type="FLAT", metric_type="IP")
    exact = {"drop_ratio_build": 0.0}
    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params=exact)
    if lexical:
        ip.add_index("bm25", index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params=exact)
    return s, ip


def _clip_utf8(text: str, limit: int = TEXT_MAX_LENGTH) -> str:
    raw = text.encode("utf-8", "replace")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _existing_numbers(client: Any, name: str, n_docs: int, key: str = "doc_number") -> set[int]:
    """Doc numbers (``key="row"``: rows of a passage collection) already in the collection
    (read in windows of numbers)."""
    have: set[int] = set()
    for lo in range(0, n_docs, MAX_LIMIT):
        hi = min(n_docs, lo + MAX_LIMIT)
        # Strong: a server must show the rows a killed run inserted seconds ago (its default,
        # Bounded, may not), or a resume would insert them again
        rows = client.query(name, filter=f"{key} >= {lo} and {key} < {hi}",
                            output_fields=[key], limit=hi - lo, consistency_level="Strong")
        have.update(int(r[key]) for r in rows)
    return have


def export_index(index_dir: Any, uri: str, collection: str | None = None, *, recreate: bool = False,
                 contents: Mapping[str, tuple[str, str]] | None = None, batch_size: int = 256,
                 progress: bool = True, verify: bool = True, shards: int | None = None) -> dict[str, Any]:
    """Copy an index folder into a Milvus collection (created when missing); returns a summary.

    Resumable: when the collection exists and holds the same index (its ``alignir.manifest``
    property equals this index's), only the documents it lacks are inserted; a collection of
    another index is refused unless ``recreate`` (drop and start over). ``contents``: doc id ->
    (title, text) to store the texts too (one with none of the live ids is an error; documents it
    lacks get empty texts, counted as ``missing_contents`` with a warning; a title or text longer
    than Milvus' VARCHAR limit of 65,535 bytes is stored cut at a character boundary, counted as
    ``clipped_texts`` with a warning, while the index still scores the whole). ``shards``: the new
    collection's shard count (Milvus' ``num_shards``, fixed at creation; a cluster spreads
    inserts over them, Milvus Lite has one).
    Run one export per collection at a time (two concurrent runs may insert a document twice)."""
    from tqdm.auto import tqdm

    from alignir.index.reader import open_index

    stored = open_index(index_dir, verify=verify)
    if stored.sparse is None or stored.dense is None:
        raise InvalidInputError(f"{index_dir}: the index lacks its sparse or dense part; rebuild it")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 64):
        raise InvalidInputError(f"shards must be an integer from 1 to 64, got {shards!r}")
    pmap = stored.passages  # a passage collection's ids are doc_id#ordinal, a few bytes longer
    ids = stored.doc_ids if pmap is None else (pmap.passage_id(r, stored.doc_ids) for r in range(pmap.n_rows))
    long_ids = [d for d in ids if len(d.encode("utf-8")) > ID_MAX_LENGTH]
    if long_ids:
        raise InvalidInputError(f"{len(long_ids)} {'document' if pmap is None else 'passage'} ids are longer than "
                                f"{ID_MAX_LENGTH} bytes (Milvus' primary key limit), e.g. {long_ids[0][:60]!r}...")
    missing = None
    if contents is not None:
        from alignir.retrieval.export import missing_contents

        rows = _live_numbers(stored)
        docs = rows if stored.passages is None else np.unique(stored.passages.doc[rows])
        missing = missing_contents(stored.doc_ids, docs, contents, "title and text")
    name = collection or default_collection_name(index_dir)
    manifest = index_manifest(stored)
    owner = folder_identity(index_dir)
    client = connect(uri)
    try:
        created = False
        rec = meta.read(client, name) if client.has_collection(name) else None
        if rec is not None and rec.unrecorded:
            client.load_collection(name)
            if _count(client, name) == 0:  # an export stopped between creating the collection and recording it
                client.drop_collection(name)
                rec = None
        if rec is not None:
            _check_owner(rec.values, name, uri, owner, recreate)
        if recreate and rec is not None:
            client.drop_collection(name)
            meta.forget(client, name)
            rec = None
        if rec is not None:
            _check_manifest(_manifest_of(rec.values, name, uri), manifest, name, uri)
            store_text = "text" in {f["name"] for f in client.describe_collection(name)["fields"]}
            if contents is not None and not store_text:
                raise InvalidInputError(f"collection {name} was created without texts; use --recreate to add them")
        else:
            store_text = contents is not None
            schema, ip = _schema(client, int(stored.dense.dim), stored.lexical is not None, store_text,
                                 passages=stored.passages is not None)
            rec = meta.create(client, name, schema, ip, {PROPERTY: json.dumps(manifest, sort_keys=True), OWNER: owner},
                              **({} if shards is None else {"num_shards": shards}))
            created = True
        if store_text and contents is None:
            raise InvalidInputError(f"collection {name} stores texts: give the corpus to resume the export")
        client.load_collection(name)
        live = _live_numbers(stored)
        key = "doc_number" if stored.passages is None else "row"
        have = set() if created else _existing_numbers(client, name, stored.n_rows, key)
        todo = np.array([d for d in live.tolist() if d not in have], dtype=np.int64)
        bar = tqdm(total=len(live), initial=len(live) - len(todo), desc=f"export to Milvus {name}",
                   unit="doc", disable=not progress)
        clipped: list[str] = []
        if len(todo) and not created and COMPLETE in rec.values:
            rec = meta.update(client, name, rec, drop=[COMPLETE])  # rows went missing: whole again only at the end
        for start in range(0, len(todo), batch_size):
            nums = todo[start:start + batch_size]
            rows = _rows(stored, nums, contents if store_text else None, clipped)
            client.insert(name, rows)
            bar.update(len(nums))
        bar.close()
        if len(todo):
            client.flush(name)
        count = _count(client, name)
        if count != len(live):
            raise IncompleteCollection(f"collection {name} at {uri} holds {count} rows after the export of "
                                       f"{len(live)}: its storage lost or duplicated rows; export it again "
                                       f"with --recreate")
        # last: whole (and owned by this folder, also when an older export recorded no owner)
        meta.update(client, name, rec, {COMPLETE: json.dumps({"rows": int(count)}), OWNER: owner})
        if clipped:
            warnings.warn(f"{len(clipped)} stored texts were longer than Milvus' {TEXT_MAX_LENGTH:,} bytes and were "
                          f"cut (e.g. {clipped[0]!r}); the index scores them whole", stacklevel=2)
    except _client_errors() as e:
        raise MilvusError(f"Milvus at {uri} ({name}): {_one_line(e)}{_damaged_hint(uri, recreate)}") from None
    finally:
        client.close()
    unit = {} if stored.passages is None else {"passages": int(len(live)),
                                               "documents": int(np.unique(stored.passages.doc[live]).size)}
    return {"uri": uri, "collection": name, "documents": int(len(live)), "inserted": int(len(todo)),
            "already_there": int(len(live) - len(todo)), "count": count, "created": created,
            "lexical": stored.lexical is not None, "texts": store_text, **unit,
            **({} if missing is None else {"missing_contents": missing}),
            **({"clipped_texts": len(clipped)} if store_text else {})}


def _dense_rows(dense: Any, vectors: np.ndarray, nums: np.ndarray) -> np.ndarray:
    """The vectors the dense index scores: read back from FAISS for flat / HNSW (exact, whatever
    the dtype of dense.npy); T(h) recomputed for IVF-PQ, whose stored codes are lossy."""
    if dense.kind in ("flat", "hnsw"):
        return dense.reconstruct(nums)
    return dense.transform_queries(np.asarray(vectors[nums], dtype=np.float32))


def _rows(stored: Any, nums: np.ndarray, contents: Mapping[str, tuple[str, str]] | None,
          clipped: list[str] | None = None) -> list[dict]:
    """The entities of rows ``nums`` (documents, or passages in an index with passages); the ids of
    rows whose stored title or text had to be cut are appended to ``clipped``."""
    dense = _dense_rows(stored.dense, stored.dense_vectors, nums)
    pmap = stored.passages
    rows = []
    for i, r in enumerate(nums.tolist()):
        d = r if pmap is None else int(pmap.doc[r])
        doc_id = stored.doc_ids[d]
        row = {"id": doc_id if pmap is None else pmap.passage_id(r, stored.doc_ids), "doc_number": d,
               "dense": dense[i].tolist(), "sparse": _sparse_dict(*stored.sparse.doc_vector(r), "aligned-token", doc_id)}
        if pmap is not None:
            row["row"], row["ordinal"] = r, int(pmap.ordinal[r])
        if stored.lexical is not None:
            row["bm25"] = _sparse_dict(*stored.lexical.index.doc_vector(d), "BM25", doc_id)
        if contents is not None:
            title, text = contents.get(doc_id, ("", ""))
            if pmap is not None and pmap.span(r) is not None:  # the passage's span of title + " " + text
                start, end = pmap.span(r)
                whole = f"{title} {text}".strip()
                title, text = (title if int(pmap.ordinal[r]) == 0 else ""), whole[start:end]
            row["title"], row["text"] = _clip_utf8(title), _clip_utf8(text)
            if clipped is not None and (row["title"] != title or row["text"] != text):
                clipped.append(row["id"])
        rows.append(row)
    return rows


def _count(client: Any, name: str) -> int:
    rows = client.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")
    return int(rows[0]["count(*)"])


def _damaged_hint(uri: str, recreate: bool) -> str:
    """What to do when Milvus Lite fails on a collection's files (a server's errors are its own)."""
    if "://" in uri:
        return ""
    if recreate:
        return ("; Milvus Lite cannot read (nor drop) this collection's damaged files: export into another "
                "collection (--collection NAME) or a new .db")
    return "; if its files are damaged, export it again with --recreate (or into another collection: --collection NAME)"


def _check_owner(props: Mapping[str, str], name: str, uri: str, owner: str, recreate: bool) -> None:
    """Refuse to resume or drop a collection that another index folder exported (its OWNER
    entry names it); with ``recreate``, also one alignir did not export."""
    theirs = props.get(OWNER)
    if theirs is not None and theirs != owner:
        raise CollectionMismatch(f"collection {name} at {uri} belongs to the index folder {theirs}, not {owner}: "
                                 f"{'--recreate would drop it; ' if recreate else ''}export this index into "
                                 f"another collection (--collection NAME, or the default name)")
    if recreate and props.get(PROPERTY) is None:
        raise CollectionMismatch(f"collection {name} at {uri} was not exported by alignir: --recreate does not "
                                 f"drop it; export into another collection (--collection NAME)")


def expected_rows(stored: Any) -> int:
    """The rows a whole export of the opened index folder holds (its live documents or passages)."""
    return int(len(_live_numbers(stored)))


def _check_whole(client: Any, name: str, uri: str, props: Mapping[str, Any], rows: int | None) -> int:
    """The collection's live row count (Strong consistency), checked against the completion
    property and the folder's ``rows``: an interrupted export or damaged storage is refused."""
    count = _count(client, name)
    done = props.get(COMPLETE)
    want = rows
    if done is None:
        total = want if want is not None else "?"
        raise IncompleteCollection(f"collection {name} at {uri}: export was interrupted at {count} of {total} rows; "
                                   f"re-run `alignir export milvus` to resume")
    try:
        marked = int(json.loads(done)["rows"])
    except (ValueError, TypeError, KeyError):
        raise IncompleteCollection(f"collection {name} at {uri}: its {COMPLETE} property is not valid "
                                   f"({done!r}); export it again with --recreate") from None
    if count != marked or (want is not None and marked != want):
        raise IncompleteCollection(f"collection {name} at {uri} holds {count} rows, but its export completed with "
                                   f"{marked}{'' if want is None else f' of the folder’s {want}'}: its storage was "
                                   f"damaged or changed; export it again with --recreate")
    return count


def _manifest_of(props: Mapping[str, str], name: str, uri: str) -> dict[str, Any]:
    """The manifest a collection's record holds (its PROPERTY entry), parsed."""
    raw = props.get(PROPERTY)
    if raw is None:
        raise CollectionMismatch(f"collection {name} at {uri} was not exported by alignir (no {PROPERTY} property)")
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise CollectionMismatch(f"collection {name} at {uri}: its {PROPERTY} property is not valid JSON") from None


def _check_manifest(got: Mapping[str, Any], want: Mapping[str, Any], name: str, uri: str) -> None:
    if got.get("format") != FORMAT or int(got.get("format_version", 0)) > FORMAT_VERSION:
        raise CollectionMismatch(f"collection {name} at {uri} has format {got.get('format')!r} "
                                 f"v{got.get('format_version')}, this alignir reads {FORMAT} v{FORMAT_VERSION}")
    fields = _diff(got, want)
    if not fields:
        return
    if set(fields) <= {"content_sha256", "n_docs"}:
        raise CollectionMismatch(f"collection {name} at {uri} holds another version of this index (the folder "
                                 f"was rebuilt or changed since the export: {', '.join(fields)} differ); "
                                 f"export it again with --recreate")
    raise CollectionMismatch(f"collection {name} at {uri} holds another index or encoder than the folder "
                             f"(differing: {', '.join(fields)}); export this index into another collection "
                             f"(--collection) or replace that one with --recreate")


# ----------------------------------------------------------------------------- search


@dataclass
class MilvusCollection:
    """An exported index in Milvus, searched leg by leg. Every search returns, per query, a
    ``{doc number: raw score}`` dict of the leg's top k — the shape the folder index's legs
    return — restricted to ``allowed`` doc numbers when given (a ``doc_number in [...]``
    filter expression)."""

    client: Any
    name: str
    uri: str
    manifest: dict[str, Any]
    #: the live rows the collection held when opened (checked whole)
    rows: int | None = None

    @property
    def key(self) -> str:
        """The number a search returns: "doc_number", or "row" in a passage collection."""
        return "row" if self.manifest.get("passages") else "doc_number"

    @classmethod
    def open(cls, uri: str, name: str, expect: Mapping[str, Any] | None = None,
             rows: int | None = None) -> "MilvusCollection":
        """Connect, check that ``name`` exists, (with ``expect``, an :func:`index_manifest`)
        holds the same index and is whole: its export completed (the ``alignir.complete``
        property) and its live row count, read at Strong consistency, equals the completed
        export's and the folder's ``rows`` (else :class:`IncompleteCollection`); load it for search."""
        client = connect(uri, must_exist=True)
        try:
            count, props = _open_checked(client, uri, name, expect, rows)
            manifest = _manifest_of(props, name, uri)
        except AlignirError:
            client.close()
            raise
        except _client_errors() as e:
            client.close()
            raise MilvusError(f"Milvus at {uri} ({name}): {_one_line(e)}{_damaged_hint(uri, False)}") from None
        return cls(client, name, uri, manifest, count)

    @property
    def has_lexical(self) -> bool:
        return self.manifest.get("lexical") is not None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def release(self) -> None:
        """Close the connection until the next search reconnects (a searcher checks the
        collection at open, then encodes its queries before it needs Milvus again)."""
        self.close()

    def _connected(self) -> Any:
        """The client, reconnected (and the collection checked whole again) when released or dropped."""
        if self.client is None:
            client = connect(self.uri, must_exist=True)
            try:
                _open_checked(client, self.uri, self.name, None, self.rows)
            except AlignirError:
                client.close()
                raise
            except _client_errors() as e:
                client.close()
                raise MilvusError(f"Milvus at {self.uri} ({self.name}): {_one_line(e)}"
                                  f"{_damaged_hint(self.uri, False)}") from None
            self.client = client
        return self.client

    def _call(self, what: str, fn: Any) -> Any:
        """``fn(client)``, reconnecting once when the call fails (a dropped channel: an idle
        connection closed by the server, a restarted Milvus Lite); a second failure is one line."""
        try:
            return fn(self._connected())
        except _client_errors():
            self.close()
        try:
            return fn(self._connected())
        except _client_errors() as e:
            raise MilvusError(f"Milvus {what} at {self.uri} ({self.name}): {_one_line(e)}") from None

    # ---- low level
    def _search(self, field: str, data: list, limit: int, flt: str) -> list[dict[int, float]]:
        if not data:
            return []
        res = self._call(f"search ({field})", lambda c: c.search(
            self.name, data=data, anns_field=field, limit=int(limit), filter=flt, output_fields=[self.key],
            search_params=_params(field)))
        return [{int(h["entity"][self.key]): float(h["distance"]) for h in hits} for hits in res]

    # ---- legs
    def search_dense(self, Qt: np.ndarray, k: int, allowed: Sequence[int] | None = None,
                     first_only: bool = False) -> list[dict[int, float]]:
        """Top-k by IP of the transformed query vectors ``Qt`` (DenseIndex.transform_queries).
        In a passage collection the keys are rows; ``first_only``: only documents' first passages."""
        Qt = np.asarray(Qt, dtype=np.float32)
        k = _check_k(k)
        return self._search("dense", [row.tolist() for row in Qt], k, _and(_filter(allowed), _first(first_only)))

    def search_sparse(self, Q: sp.csr_matrix, k: int, allowed: Sequence[int] | None = None,
                      field: str = "sparse", first_only: bool = False) -> list[dict[int, float]]:
        """Top-k by IP of the sparse query rows ``Q`` against ``field`` ("sparse" or "bm25"):
        the documents sharing a term with the query, as our kernel returns them.

        A row with negative weights (q = q⁺ - q⁻, documents ≥ 0) is scored exactly: search q⁺
        at depth L, subtract q⁻'s scores of those candidates (a filtered q⁻ search), and stop
        when the k-th best is ≥ the L-th q⁺ score (no unseen document can do better: its score
        is at most its q⁺ score), else deepen L ×4. When q⁺ is exhausted, the documents
        reached only by q⁻ (negative scores) fill the rest."""
        k = _check_k(k)
        Q = sp.csr_matrix(Q, dtype=np.float32)
        base = _and(_filter(allowed), _first(first_only))
        out: list[dict[int, float] | None] = [None] * Q.shape[0]
        plain = [i for i in range(Q.shape[0]) if Q.indptr[i + 1] > Q.indptr[i] and Q[i].data.min() >= 0]
        for i, hits in zip(plain, self._search(field, [_row_dict(Q, i) for i in plain], k, base)):
            out[i] = hits
        for i in range(Q.shape[0]):
            if out[i] is None:
                out[i] = {} if Q.indptr[i + 1] == Q.indptr[i] else self._signed(field, Q, i, k, base)
        return out  # type: ignore[return-value]

    def _signed(self, field: str, Q: sp.csr_matrix, i: int, k: int, base: str) -> dict[int, float]:
        row = _row_dict(Q, i)
        pos = {t: w for t, w in row.items() if w > 0}
        neg = {t: -w for t, w in row.items() if w < 0}
        limit = min(MAX_LIMIT, max(4 * k, 64))
        while True:
            p = self._search(field, [pos], limit, base)[0] if pos else {}
            n = self._minus(field, neg, list(p), base) if p else {}
            scores = {d: s - n.get(d, 0.0) for d, s in p.items()}
            best = sorted(scores.values(), reverse=True)
            exhausted = len(p) < limit
            if exhausted or (len(best) >= k and best[k - 1] >= min(p.values())):
                break
            if limit >= MAX_LIMIT:
                raise MilvusError(f"a query with negative weights needs more than {MAX_LIMIT} candidates "
                                  f"from {self.name}.{field} to be exact")
            limit = min(MAX_LIMIT, limit * 4)
        if exhausted and (len(best) < k or best[k - 1] < 0):
            # documents reached only by q⁻ score -N(d) < 0: all of them may be needed
            rest = _and(base, f"{self.key} not in {sorted(p)}" if p else "")
            only_neg = self._search(field, [neg], MAX_LIMIT, rest)[0]
            if len(only_neg) >= MAX_LIMIT:  # we would need the *smallest* q⁻ scores: Milvus has no ascending IP
                raise MilvusError(f"a query with negative weights reaches more than {MAX_LIMIT} documents only "
                                  f"through them in {self.name}.{field}; its exact top {k} needs them all")
            for d, s in only_neg.items():
                scores[d] = -s
        # the top k, ties by doc number as our kernel breaks them
        return dict(sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k])

    def _minus(self, field: str, neg: dict[int, float], docs: list[int], base: str) -> dict[int, float]:
        if not neg:
            return {}
        return self._search(field, [neg], len(docs), _and(base, f"{self.key} in {sorted(docs)}"))[0]

    def hybrid_rrf(self, requests: Sequence[tuple[str, list]], limit: int, depth: int, rrf_k: int,
                   allowed: Sequence[int] | None = None) -> list[dict[int, float]]:
        """Milvus hybrid search fused by RRFRanker(rrf_k): ``requests`` = [(field, query
        vectors)], each leg's top ``depth``; equals our plain (unweighted) RRF of the legs'
        top-depth lists (retrieval.fusion.rrf), ties aside. One hybrid search per query: the
        Milvus 2.5 engine's RRF of a batch carries ranks over from one query to the next."""
        pm = _milvus()
        flt = _filter(allowed)
        out = []
        for i in range(len(requests[0][1]) if requests else 0):
            reqs = [pm.AnnSearchRequest(data=[data[i]], anns_field=field, param=_params(field), limit=int(depth),
                                        expr=flt or None) for field, data in requests]
            res = self._call("hybrid search", lambda c, reqs=reqs: c.hybrid_search(
                self.name, reqs, pm.RRFRanker(int(rrf_k)), limit=int(limit), output_fields=["doc_number"]))
            out.append({int(h["entity"]["doc_number"]): float(h["distance"]) for h in res[0]})
        return out


def _open_checked(client: Any, uri: str, name: str, expect: Mapping[str, Any] | None,
                  rows: int | None) -> tuple[int, dict[str, str]]:
    """Check the collection ``name`` (exists, same index as ``expect``, whole) and load it; its
    row count and its record's entries."""
    if not client.has_collection(name):
        raise MilvusError(f"no collection {name!r} at {uri}: export the index first "
                          f"(alignir export milvus --index DIR --uri {uri} --collection {name})")
    rec = meta.read(client, name)
    if expect is not None and not rec.unrecorded:  # unrecorded: refused below as an interrupted export
        _check_manifest(_manifest_of(rec.values, name, uri), expect, name, uri)
    client.load_collection(name)
    return _check_whole(client, name, uri, rec.values, rows), rec.values


def _params(field: str) -> dict[str, Any]:
    return {"metric_type": "IP", "params": {} if field == "dense" else {"drop_ratio_search": 0.0}}


def _row_dict(Q: sp.csr_matrix, i: int) -> dict[int, float]:
    lo, hi = Q.indptr[i], Q.indptr[i + 1]
    return dict(zip(Q.indices[lo:hi].tolist(), Q.data[lo:hi].astype(np.float32).tolist()))


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    if k > MAX_LIMIT:
        raise InvalidInputError(f"k={k} exceeds Milvus' top-k limit {MAX_LIMIT}")
    return int(k)


def _filter(allowed: Iterable[int] | None) -> str:
    if allowed is None:
        return ""
    return f"doc_number in {sorted(int(d) for d in allowed)}"


def _first(first_only: bool) -> str:
    return "ordinal == 0" if first_only else ""


def _and(a: str, b: str) -> str:
    return " and ".join(f"({x})" for x in (a, b) if x)
