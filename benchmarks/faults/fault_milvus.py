"""Milvus attacks of the fault campaign (benchmarks/faults/fault_campaign.py --attacks milvus,milvus_engine):
``milvus`` against Milvus Lite 3.x (a local ``.db``), ``milvus_engine`` against the Milvus 2.5 C++
engine run as a loopback server (:func:`run_engine`).

No model is needed: the queries are stored documents' own vectors (dense: the vector the dense
index scores, sparse: the aligned-token row, bm25: the BM25 row), searched in the folder index and
in the collection exported from it. Each case ends ``ok`` (the collection answered exactly as the
folder), ``clear`` (alignir refused with one of its errors) or ``wrong`` (answered, differently:
a silent wrong answer); ``data_lost`` when no command the error advises (resume; for damaged
storage --recreate, else an export into another collection, which Milvus Lite needs when it can
neither read nor drop a collection's broken files) makes a collection that answers as the folder.

Result file: benchmarks/results/faults.json, through the campaign.
Command: python -m benchmarks.faults.fault_campaign --index INDEX --attacks milvus
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import numpy as np

from alignir.errors import AlignirError

N_QUERIES = 5
K = 10


def _queries(stored) -> dict:
    import scipy.sparse as sp

    from alignir.retrieval.milvus import _live_numbers

    live = _live_numbers(stored)
    rows = live[np.linspace(0, len(live) - 1, N_QUERIES).astype(int)]
    sparse = sp.vstack([sp.csr_matrix((w, t, [0, len(t)]), shape=(1, stored.sparse.n_terms))
                        for t, w in (stored.sparse.doc_vector(int(r)) for r in rows)]).tocsr()
    out = {"dense": np.asarray(stored.dense_vectors[rows], dtype=np.float32), "sparse": sparse}  # h, untransformed
    if stored.lexical is not None:
        lex = stored.lexical.index
        out["bm25"] = sp.vstack([sp.csr_matrix((np.ones_like(w), t, [0, len(t)]), shape=(1, lex.n_terms))
                                 for t, w in (lex.doc_vector(int(r)) for r in rows)]).tocsr()
    return out


def folder_answers(stored, queries: dict) -> dict:
    out = {}
    for leg, q in queries.items():
        part = {"dense": stored.dense, "sparse": stored.sparse}.get(leg) or stored.lexical.index
        docs, scores = part.search(q, K)
        out[leg] = [[int(d) for d in row if d >= 0] for row in docs]
    return out


def milvus_answers(stored, uri: str, queries: dict, collection: str | None = None) -> dict:
    """Open the collection as a search does (same index, whole) and search every leg."""
    from alignir.retrieval.milvus_search import open_collection

    c = open_collection(stored, uri, collection)
    try:
        out = {}
        for leg, q in queries.items():
            hits = (c.search_dense(stored.dense.transform_queries(q), K) if leg == "dense"
                    else c.search_sparse(q, K, field=leg))
            out[leg] = [[d for d, _ in sorted(h.items(), key=lambda x: (-x[1], x[0]))] for h in hits]
        return out
    finally:
        c.close()


def _same(a: dict, b: dict) -> bool:
    """Same top-k documents per query and leg (order inside float32 near-ties may differ)."""
    return all(set(x) == set(y) for leg in a for x, y in zip(a[leg], b[leg]))


def _release(uri: str) -> None:
    """Stop this process's Milvus Lite server of ``uri`` (a new process would start afresh)."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(uri)


def classify(stored, uri: str, queries: dict, expected: dict, collection: str | None = None) -> str:
    _release(uri)
    try:
        got = milvus_answers(stored, uri, queries, collection)
    except (AlignirError, OSError):
        return "clear"
    return "ok" if _same(got, expected) else "wrong"


def _export(index: Path, uri: str, **kw) -> None:
    from alignir.retrieval.milvus import export_index

    export_index(index, uri, progress=False, **kw)
    _release(uri)


def killed_export(index: Path, uri: str, after: int, method: str = "insert") -> subprocess.CompletedProcess:
    """Run ``export_index`` (one row per insert) in a child that SIGKILLs itself before its call
    number ``after`` of ``pymilvus.MilvusClient.<method>``."""
    script = textwrap.dedent(f"""
        import os, signal
        import pymilvus
        from alignir.retrieval.milvus import export_index
        calls = []
        real = pymilvus.MilvusClient.{method}
        def wrapped(self, *a, **kw):
            if len(calls) == {after}:
                os.kill(os.getpid(), signal.SIGKILL)
            calls.append(1)
            return real(self, *a, **kw)
        pymilvus.MilvusClient.{method} = wrapped
        export_index({str(index)!r}, {uri!r}, batch_size=1, progress=False)
    """)
    return subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600)


def _attacked_copy(index: Path, base: Path) -> tuple[Any, dict, dict, int, str]:
    """Copy ``index`` to ``base`` and read what every attack checks against: the stored index, its
    queries, the folder's answers, the rows an export must hold and the collection's name."""
    from alignir.index.store import open_index
    from alignir.retrieval.milvus import default_collection_name, expected_rows

    shutil.copytree(index, base)
    stored = open_index(base)
    queries = _queries(stored)
    return stored, queries, folder_answers(stored, queries), expected_rows(stored), default_collection_name(base)


def run(index: Path, work: Path, count: Callable[..., None], kills: int = 6) -> None:
    """Every Milvus attack on a copy of ``index`` under ``work``; ``count(attack, outcome, lost)``."""
    from alignir.index.store import open_index
    from alignir.retrieval.milvus import default_collection_name

    base = work / "mv-idx"
    stored, queries, expected, rows, name = _attacked_copy(index, base)

    def recovered(uri: str, recreate: bool = False) -> bool:
        try:
            _export(base, uri, recreate=recreate)
            return classify(stored, uri, queries, expected) == "ok"
        except (AlignirError, OSError):
            return False

    def rebuilt_elsewhere(uri: str) -> bool:
        """The export into another collection of the same .db (what the error advises when Milvus
        Lite can neither read nor drop a damaged collection) searches as the folder."""
        try:
            _export(base, uri, collection=name + "_new")
            return classify(stored, uri, queries, expected, collection=name + "_new") == "ok"
        except (AlignirError, OSError):
            return False

    # a whole export answers as the folder (the reference case)
    uri = str(work / "whole.db")
    _export(base, uri)
    count("milvus: whole export", classify(stored, uri, queries, expected))

    # kill the export at spread-out inserts, before its flush and before the completion mark
    points = [("insert", int(a)) for a in np.linspace(0, rows - 1, kills).astype(int)]
    for method, after in points + [("flush", 0), ("alter_collection_properties", 0)]:
        uri = str(work / f"kill-{method}-{after}.db")
        rc = killed_export(base, uri, after, method).returncode
        if rc != -signal.SIGKILL:
            raise RuntimeError(f"the export was to be killed at {method} #{after}, it ended with {rc}")
        outcome = classify(stored, uri, queries, expected)
        count("milvus: kill export, search without resuming", outcome, lost=not recovered(uri))

    # damaged storage: every file of the collection, emptied, deleted, truncated, byte-flipped
    reference = work / "pristine.db"
    _export(base, str(reference))
    files = sorted(p.relative_to(reference) for p in (reference / "collections" / name).rglob("*") if p.is_file())
    rng = random.Random(0)
    for rel in files:
        for how in ("empty", "delete", "truncate", "flip"):
            uri = work / "damaged.db"
            shutil.rmtree(uri, ignore_errors=True)
            shutil.copytree(reference, uri)
            p = uri / rel
            data = p.read_bytes()
            if how == "empty":
                p.write_bytes(b"")
            elif how == "delete":
                p.unlink()
            elif how == "truncate":
                p.write_bytes(data[: len(data) // 2])
            elif data:
                b = bytearray(data)
                b[rng.randrange(len(b))] ^= 0x01
                p.write_bytes(bytes(b))
            outcome = classify(stored, str(uri), queries, expected)
            by_recreate = recovered(str(uri), recreate=True)
            elsewhere = not by_recreate and rebuilt_elsewhere(str(uri))
            count(f"milvus: damaged storage ({how})", outcome, lost=not (by_recreate or elsewhere),
                  rebuilt_by_recreate=by_recreate, rebuilt_in_another_collection=elsewhere)

    # two folders whose names sanitise alike: each its own collection; --recreate never drops the other's
    from alignir.errors import CollectionMismatch

    x = work / "x"
    a, b = x / "adi-v1", x / "adi_v1"
    x.mkdir()
    shutil.copytree(base, a)
    shutil.copytree(base, b)
    uri = str(work / "collide.db")
    for i, (first, second) in enumerate(((a, b), (b, a))):
        shutil.rmtree(uri, ignore_errors=True)
        _export(first, uri)
        _export(second, uri)
        refused = 0
        for recreate in (False, True):
            try:
                _export(second, uri, collection=default_collection_name(first), recreate=recreate)
            except CollectionMismatch:
                refused += 1
        stored_first = open_index(first)
        outcome = classify(stored_first, uri, queries, expected)
        count("milvus: colliding folder names", "clear" if outcome == "ok" and refused == 2 else outcome,
              lost=outcome != "ok")

    # a .db this user cannot write (run as nobody): a one-line error, the database untouched
    uri = work / "ro.db"
    _export(base, str(uri))
    os.chmod(work, 0o755)
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            "import sys\nfrom alignir.retrieval.milvus import connect\n"
                            f"try:\n    connect({str(uri)!r})\nexcept Exception as e:\n"
                            "    print(type(e).__name__, e)\n    sys.exit(1)\n"],
                           capture_output=True, text=True, timeout=300)
    one_line = probe.returncode == 1 and probe.stdout.startswith("MilvusError") and probe.stdout.count("\n") == 1
    clear = one_line and "not writable" in probe.stdout and "Traceback" not in probe.stderr
    count("milvus: read-only .db", "clear" if clear else "wrong", lost=classify(stored, str(uri), queries, expected) != "ok")

    # a dropped connection mid-search: the server stops between two searches of one collection
    from alignir.retrieval.milvus_search import open_collection

    uri = str(work / "drop.db")
    _export(base, uri)
    for _ in range(3):
        c = open_collection(stored, uri)
        try:
            qt = stored.dense.transform_queries(queries["dense"])
            first = c.search_dense(qt, K)
            _release(uri)
            try:
                again = c.search_dense(qt, K)
                outcome = "ok" if [set(h) for h in again] == [set(h) for h in first] else "wrong"
            except (AlignirError, OSError):
                outcome = "clear"
        finally:
            c.close()
        count("milvus: dropped connection mid-search", outcome, lost=classify(stored, uri, queries, expected) != "ok")


# ----------------------------------------------------------------------------- the Milvus 2.5 engine


def run_engine(index: Path, work: Path, count: Callable[..., None], kills: int = 6) -> None:
    """The ``milvus_engine`` attacks: the same kinds of case against the Milvus 2.5 C++ engine
    (retrieval/milvus_engine.py, a fresh server per case), whose export record lives in the
    alignir_meta collection: interrupted exports (killed before an insert, the flush, the record
    or the completion mark), the server killed mid-export and mid-search, stopped or killed and
    restarted, a foreign, stale or altered record, rows deleted after the export."""
    import json

    import pymilvus

    from alignir.retrieval import milvus_meta as meta
    from alignir.retrieval.milvus import COMPLETE, PROPERTY, connect
    from alignir.retrieval.milvus_engine import MilvusEngine, unavailable_reason
    from alignir.retrieval.milvus_search import open_collection

    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    base = work / "engine-idx"
    stored, queries, expected, rows, name = _attacked_copy(index, base)
    started: list[MilvusEngine] = []

    def engine() -> MilvusEngine:
        """A fresh server over its own data folder (stopped at the end whatever happens)."""
        started.append(MilvusEngine(work / f"engine-{len(started)}").start())
        return started[-1]

    def recovered(uri: str, recreate: bool = False) -> bool:
        try:
            _export(base, uri, recreate=recreate)
            return classify(stored, uri, queries, expected) == "ok"
        except (AlignirError, OSError):
            return False

    def client_do(uri: str, fn: Callable) -> Any:
        client = connect(uri)
        try:
            return fn(client)
        finally:
            client.close()

    try:
        e = engine()
        _export(base, e.uri)
        count("milvus engine: whole export", classify(stored, e.uri, queries, expected))
        e.stop()

        points = [("insert", int(a)) for a in np.linspace(0, rows - 1, kills).astype(int)]
        for method, after in points + [("flush", 0), ("upsert", 0), ("upsert", 1)]:  # upsert 0: the record, 1: the mark
            e = engine()
            rc = killed_export(base, e.uri, after, method).returncode
            if rc != -signal.SIGKILL:
                raise RuntimeError(f"the export was to be killed at {method} #{after}, it ended with {rc}")
            count("milvus engine: kill export, search without resuming", classify(stored, e.uri, queries, expected),
                  lost=not recovered(e.uri))
            e.stop()

        for after in np.linspace(0, rows // 2, 3).astype(int):  # the server dies under an export
            e = engine()
            real, calls = pymilvus.MilvusClient.insert, []

            def insert(self, *a, _after=int(after), _e=e, _real=real, _calls=calls, **kw):
                if len(_calls) == _after:
                    _e.kill()
                _calls.append(1)
                return _real(self, *a, **kw)

            pymilvus.MilvusClient.insert = insert
            try:
                _export(base, e.uri, batch_size=1)  # one row per insert: the kill lands at row `after`
                outcome = "wrong"  # an export that reports success over a dead server
            except (AlignirError, OSError):
                outcome = "clear"
            finally:
                pymilvus.MilvusClient.insert = real
            e.start()
            after_restart = classify(stored, e.uri, queries, expected)
            count("milvus engine: server killed mid-export", "wrong" if "wrong" in (outcome, after_restart) else "clear",
                  lost=not recovered(e.uri))
            e.stop()

        for how in ("kill", "stop"):  # the server dies (or is stopped) between two searches, then comes back
            e = engine()
            _export(base, e.uri)
            c = open_collection(stored, e.uri)
            try:
                qt = stored.dense.transform_queries(queries["dense"])
                first = c.search_dense(qt, K)
                e.kill() if how == "kill" else e.stop()
                try:
                    again = c.search_dense(qt, K)
                    outcome = "ok" if [set(h) for h in again] == [set(h) for h in first] else "wrong"
                except (AlignirError, OSError):
                    outcome = "clear"
                e.start()
                back = c.search_dense(qt, K)  # the same collection object reconnects
                outcome = "wrong" if [set(h) for h in back] != [set(h) for h in first] else outcome
            except (AlignirError, OSError):
                outcome = "clear"
            finally:
                c.close()
            count(f"milvus engine: server {'killed' if how == 'kill' else 'stopped'} mid-search, restarted", outcome,
                  lost=classify(stored, e.uri, queries, expected) != "ok")
            e.stop()

        e = engine()  # killed right after a whole export, restarted: its data is still whole
        _export(base, e.uri)
        e.kill()
        e.start()
        outcome = classify(stored, e.uri, queries, expected)
        count("milvus engine: killed after the export, restarted", outcome, lost=outcome != "ok" and not recovered(e.uri))
        e.stop()

        e = engine()  # a foreign collection under the export's name: refused, never dropped
        client_do(e.uri, lambda c: c.create_collection(name, dimension=4))
        for recreate in (False, True):
            try:
                _export(base, e.uri, recreate=recreate)
                outcome = "wrong"
            except AlignirError:
                outcome = "clear"
            kept = client_do(e.uri, lambda c: c.has_collection(name))
            count("milvus engine: foreign collection of the same name", outcome, lost=not kept)
        e.stop()

        e = engine()  # dropped behind alignir's back, another made under its name: the old row is stale
        _export(base, e.uri)
        client_do(e.uri, lambda c: (c.drop_collection(name), c.create_collection(name, dimension=4)))
        outcome = classify(stored, e.uri, queries, expected)
        client_do(e.uri, lambda c: c.drop_collection(name))
        count("milvus engine: stale record", outcome, lost=not recovered(e.uri))
        e.stop()

        def edits():
            yield "another encoder", lambda v: {**v, PROPERTY: json.dumps({**json.loads(v[PROPERTY]), "encoder_hash": "x"})}
            yield "another version", lambda v: {**v, PROPERTY: json.dumps({**json.loads(v[PROPERTY]), "content_sha256": "x"})}
            yield "fewer rows marked", lambda v: {**v, COMPLETE: json.dumps({"rows": rows - 1})}
            yield "mark removed", lambda v: {k: x for k, x in v.items() if k != COMPLETE}
            yield "mark garbled", lambda v: {**v, COMPLETE: "{not json"}
            yield "manifest garbled", lambda v: {**v, PROPERTY: "{not json"}

        for what, edit in edits():  # the record altered in alignir_meta; --recreate (or a resume) makes it whole
            e = engine()
            _export(base, e.uri)

            def alter(c, edit=edit):
                rec = meta.read(c, name)
                meta._put(c, name, rec.token, edit(rec.values))

            client_do(e.uri, alter)
            outcome = classify(stored, e.uri, queries, expected)
            count(f"milvus engine: altered record ({what})", outcome, lost=not (recovered(e.uri) or
                                                                             recovered(e.uri, recreate=True)))
            e.stop()

        e = engine()  # rows deleted after a whole export: refused until a resume puts them back
        _export(base, e.uri)
        client_do(e.uri, lambda c: c.delete(name, filter="doc_number in [0, 1]"))
        count("milvus engine: rows deleted after the export", classify(stored, e.uri, queries, expected),
              lost=not recovered(e.uri))
        e.stop()
    finally:
        for e in started:
            e.stop()
