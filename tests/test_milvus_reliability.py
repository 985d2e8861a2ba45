"""A Milvus collection is searched only when whole and this index folder's: an export killed
part-way is refused until resumed, damaged Milvus Lite storage is refused in one line, two
folders whose names sanitise alike get their own collections (and --recreate never drops the
other's), a dropped connection is reconnected once, and connection failures name their cause.
On a tiny random Llama and a local Milvus Lite database."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from benchmarks.faults.fault_milvus import killed_export

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from alignir.retrieval.config import SparseConfig  # noqa: E402
from alignir.retrieval.indexer import build_index  # noqa: E402
from alignir.retrieval.milvus import COMPLETE, connect, default_collection_name, export_index
from alignir.errors import CollectionMismatch, IncompleteCollection, MilvusError
from alignir.retrieval.searcher import Searcher  # noqa: E402

from conftest import ROOT, TINY_CORPUS, assert_same_hits, write_corpus  # noqa: E402

pytestmark = [pytest.mark.milvus, pytest.mark.usefixtures("one_thread")]

TEXTS = TINY_CORPUS + [t.upper() for t in TINY_CORPUS]
QUERIES = ["light and carbon in plants", "supersonic wind tunnel", "proteins fold"]
CONFIG = SparseConfig().with_changes(doc_k=24, query_m=5)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("milvus-rel")
    corpus = write_corpus(root / "corpus.jsonl", TEXTS)
    build_index(corpus, root / "idx", model="tiny", sparse=CONFIG, loaded=tiny_model, cache_dir=root / "cache",
                progress=False)
    return root


def _ids(hits):
    return [(h.id, round(h.score, 4)) for h in hits]


def _assert_searched_as_folder(built, tiny_model, uri: str) -> None:
    """The collection at ``uri`` answers the dense queries as the index folder does."""
    folder = Searcher.open(built / "idx", loaded=tiny_model)
    milvus = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    try:
        for a, b in zip(folder.batch_search(QUERIES, k=5, mode="dense"), milvus.batch_search(QUERIES, k=5, mode="dense")):
            assert_same_hits(a, b)  # upper-cased copies tie with their originals: any order among them
    finally:
        milvus.close()


def _killed_export(index, uri, after: int, method: str = "insert") -> subprocess.CompletedProcess:
    return killed_export(index, uri, after, method)


@pytest.mark.e2e  # exports killed in child Python processes
@pytest.mark.parametrize("after,method", [(0, "insert"), (3, "insert"), (len(TEXTS), "alter_collection_properties")])
def test_an_interrupted_export_is_refused_until_resumed(built, tiny_model, tmp_path, after, method):
    """Killed after 0, 3 or all inserts (before the completion mark): search names the rows it
    holds and how to resume; the resumed export is searched as the folder.

    Milvus Lite serves from a thread of the exporting process and writes its vector index files
    in place (no rename), so a kill can also leave one of them torn: then the search is refused in
    one line that names ``--recreate``, and the export with it is searched as the folder."""
    uri = str(tmp_path / "k.db")
    proc = _killed_export(built / "idx", uri, after if method == "insert" else 0, method)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    with pytest.raises((IncompleteCollection, MilvusError)) as e:
        Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    assert "\n" not in str(e.value)
    if isinstance(e.value, IncompleteCollection):
        e.match(rf"interrupted at {after} of {len(TEXTS)} rows; re-run `alignir export milvus` to resume")
        summary = export_index(built / "idx", uri, progress=False)
        assert summary["already_there"] == after and summary["count"] == len(TEXTS)
    else:  # the kill tore Milvus Lite's own files: what test_damaged_lite_storage_... checks, met by chance
        assert "export it again with --recreate" in str(e.value), str(e.value)
        summary = export_index(built / "idx", uri, recreate=True, progress=False)
        assert summary["created"] and summary["count"] == len(TEXTS)
    _assert_searched_as_folder(built, tiny_model, uri)


@pytest.mark.e2e  # an export killed in a child Python process
def test_info_backend_milvus_refuses_an_interrupted_export(built, tmp_path):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    uri = str(tmp_path / "k.db")
    assert _killed_export(built / "idx", uri, 2).returncode == -signal.SIGKILL
    res = CliRunner().invoke(app, ["info", "--index", str(built / "idx"), "--no-verify", "--backend", "milvus",
                                   "--uri", uri])
    assert res.exit_code == 1
    assert f"export was interrupted at 2 of {len(TEXTS)} rows" in res.output
    export_index(built / "idx", uri, progress=False)
    res = CliRunner().invoke(app, ["info", "--index", str(built / "idx"), "--no-verify", "--backend", "milvus",
                                   "--uri", uri])
    assert res.exit_code == 0, res.output
    assert f"milvus     {default_collection_name(built / 'idx')} at {uri}: {len(TEXTS)} rows, whole" in res.output


def _collection_dir(uri: str, name: str):
    found = [p for p in (os.path.join(uri, "collections", name),) if os.path.isdir(p)]
    assert found, os.listdir(os.path.join(uri, "collections"))
    return found[0]


def _fresh(built, tmp_path, tag):
    """A whole export at a new .db, its Milvus Lite server stopped (as when the exporting process ends)."""
    from milvus_lite.server_manager import server_manager_instance

    uri = str(tmp_path / f"{tag}.db")
    export_index(built / "idx", uri, progress=False)
    server_manager_instance.release_server(uri)
    return uri, default_collection_name(built / "idx")


@pytest.mark.e2e  # the alignir command in a child process
@pytest.mark.parametrize("damage", ["empty-manifest", "delete-data", "truncate-data", "garbage-manifest",
                                    "empty-index"])
def test_damaged_lite_storage_is_refused_in_one_line(built, tiny_model, tmp_path, damage):
    """Damaged storage files of the collection never answer (fewer) hits successfully.
    ``empty-index``: a vector index file left empty, as a kill while Milvus Lite writes it leaves
    it; the export again with ``--recreate`` is searched as the folder."""
    uri, name = _fresh(built, tmp_path, damage)
    root = _collection_dir(uri, name)
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    data = [f for f in files if f.endswith(".parquet") and "delta" not in os.path.basename(f)]
    manifests = [f for f in files if os.path.basename(f) == "manifest.json"]
    if damage == "empty-manifest":
        open(manifests[0], "w").close()
    elif damage == "garbage-manifest":
        with open(manifests[0], "w") as fh:
            fh.write("{not json")
    elif damage == "empty-index":
        indexes = [f for f in files if f.endswith(".idx")]
        assert indexes, files
        for f in indexes:
            open(f, "w").close()
    elif damage == "delete-data":
        for f in data:
            os.remove(f)
    else:
        for f in data:
            with open(f, "r+b") as fh:
                fh.truncate(os.path.getsize(f) // 2)
    with pytest.raises((MilvusError, CollectionMismatch)) as e:
        s = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
        try:
            s.search(QUERIES[0], k=5, mode="dense")
        finally:
            s.close()
    assert "\n" not in str(e.value)
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(uri)
    proc = _cli("info", "--index", built / "idx", "--no-verify", "--backend", "milvus", "--uri", uri)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "damaged" in proc.stderr or "Parquet" in proc.stderr
    if damage == "empty-index":
        summary = export_index(built / "idx", uri, recreate=True, progress=False)
        assert summary["created"] and summary["count"] == len(TEXTS)
        _assert_searched_as_folder(built, tiny_model, uri)


def _cli(*args) -> subprocess.CompletedProcess:
    alignir = os.path.join(os.path.dirname(sys.executable), "alignir")
    return subprocess.run([alignir, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_folders_with_colliding_names_get_their_own_collections(built, tiny_model, tmp_path):
    """x/adi-v1 and x/adi_v1 sanitise alike; each gets its collection, and --recreate from one
    never drops the other's (it names the owner)."""
    a, b = tmp_path / "x" / "adi-v1", tmp_path / "x" / "adi_v1"
    a.parent.mkdir()
    shutil.copytree(built / "idx", a)
    shutil.copytree(built / "idx", b)
    assert default_collection_name(a) != default_collection_name(b)
    assert default_collection_name(a).startswith("alignir_adi_v1_")
    uri = str(tmp_path / "c.db")
    sa = export_index(a, uri, progress=False)
    sb = export_index(b, uri, progress=False)
    assert sa["collection"] != sb["collection"] and sb["created"]
    with pytest.raises(CollectionMismatch, match=f"belongs to the index folder {a.resolve()}"):
        export_index(b, uri, sa["collection"], recreate=True, progress=False)
    with pytest.raises(CollectionMismatch, match="belongs to the index folder"):
        export_index(b, uri, sa["collection"], progress=False)
    Searcher.open(a, loaded=tiny_model, backend="milvus", uri=uri).close()  # a's collection is intact
    again = export_index(a, uri, recreate=True, progress=False)  # its own: dropped and exported again
    assert again["created"] and again["count"] == len(TEXTS)


def test_recreate_refuses_a_collection_alignir_did_not_export(built, tmp_path):
    uri = str(tmp_path / "f.db")
    client = connect(uri)
    client.create_collection("theirs", dimension=4)
    client.close()
    with pytest.raises(CollectionMismatch, match="not exported by alignir"):
        export_index(built / "idx", uri, "theirs", recreate=True, progress=False)
    client = connect(uri)
    assert client.has_collection("theirs")
    client.close()


def test_a_completed_collection_that_lost_rows_is_refused(built, tiny_model, tmp_path):
    """The live row count is checked against the completion mark at open (Strong consistency)."""
    uri, name = _fresh(built, tmp_path, "lost")
    client = connect(uri)
    client.delete(name, filter="doc_number in [0, 1]")
    client.close()
    with pytest.raises(IncompleteCollection, match=rf"holds {len(TEXTS) - 2} rows, but its export completed "
                                                  rf"with {len(TEXTS)}"):
        Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    export_index(built / "idx", uri, progress=False)  # a resume puts them back and marks it whole again
    client = connect(uri)
    props = client.describe_collection(name)["properties"]
    client.close()
    assert json.loads(props[COMPLETE]) == {"rows": len(TEXTS)}
    Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri).close()


def test_a_dropped_connection_is_reconnected_once(built, tiny_model, tmp_path):
    """The Milvus Lite server behind the connection stops between two searches (a dropped
    channel): the next search reconnects once and answers as before."""
    from milvus_lite.server_manager import server_manager_instance

    uri, _ = _fresh(built, tmp_path, "drop")
    milvus = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    try:
        first = milvus.search(QUERIES[0], k=5, mode="dense")
        server_manager_instance.release_server(uri)
        assert _ids(milvus.search(QUERIES[0], k=5, mode="dense")) == _ids(first)
    finally:
        milvus.close()


def test_the_connection_is_opened_after_the_queries_are_encoded(built, tiny_model, tmp_path, monkeypatch):
    """A searcher holds no Milvus connection while it encodes queries (an idle channel was
    dropped during a long encoding)."""
    from alignir.retrieval import milvus as mv

    uri, _ = _fresh(built, tmp_path, "late")
    milvus = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    assert milvus.milvus.client is None
    events = []
    real_encode, real_connect = type(milvus).encode, mv.connect
    monkeypatch.setattr(type(milvus), "encode", lambda self, *a, **kw: events.append("encode") or real_encode(self, *a, **kw))
    monkeypatch.setattr(mv, "connect", lambda *a, **kw: events.append("connect") or real_connect(*a, **kw))
    try:
        milvus.search(QUERIES[0], k=5, mode="dense")
    finally:
        milvus.close()
    assert events == ["encode", "connect"]


def test_lite_connections_use_keepalive_settings_its_server_accepts(tmp_path):
    client = connect(str(tmp_path / "ka.db"))
    try:
        opts = client._get_connection()._grpc_options
    finally:
        client.close()
    assert opts["grpc.keepalive_time_ms"] >= 300_000 and opts["grpc.keepalive_permit_without_calls"] is False


def test_loopback_servers_get_the_lite_keepalive_settings():
    """A remote http(s) server keeps pymilvus' keepalive (10-s pings, which a Milvus server
    accepts); one on a loopback address gets Milvus Lite's (the engine, started by a MilvusEngine
    or from a shell, is reached on 127.0.0.1)."""
    from alignir.retrieval.milvus import LITE_GRPC_OPTIONS, grpc_options

    for uri in ("http://127.0.0.1:19530", "http://localhost:19530", "https://[::1]:443", "local.db"):
        assert grpc_options(uri) == LITE_GRPC_OPTIONS, uri
    for uri in ("http://10.0.0.7:19530", "https://milvus.example.com:443", "http://localhost.example.com:1"):
        assert grpc_options(uri) is None, uri


def test_a_milvus_lite_server_reached_over_http_gets_its_keepalive_settings(tmp_path):
    """Milvus Lite served over http on 127.0.0.1 (as the engine is): the connection carries the options."""
    from milvus_lite.server_manager import server_manager_instance as lite

    from alignir.retrieval.milvus import LITE_GRPC_OPTIONS

    uri = lite.start_and_get_uri(str(tmp_path / "served.db"))
    try:
        client = connect(uri)
        try:
            got = client._get_connection()._grpc_options
        finally:
            client.close()
    finally:
        lite.release_server(str(tmp_path / "served.db"))
    assert {k: got.get(k) for k in LITE_GRPC_OPTIONS} == LITE_GRPC_OPTIONS


def test_connection_errors_name_their_cause(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(64))
    with pytest.raises(MilvusError, match="not a Milvus Lite database"):
        connect(str(garbage))
    other = tmp_path / "other.db"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(MilvusError, match="not a Milvus Lite database"):
        connect(str(other))
    with pytest.raises(MilvusError, match=r"server is unreachable \(127\.0\.0\.1:9: "):
        connect("http://127.0.0.1:9", timeout=2)


@pytest.mark.e2e  # child Python processes as another user
def test_a_folder_this_user_cannot_write_is_named():
    """A .db in a folder the user cannot write (root runs the check as nobody: root writes anywhere)."""
    import tempfile
    from pathlib import Path

    top = Path(tempfile.mkdtemp(prefix="alignir-ro-"))  # pytest's own tmp folders are private to their user
    top.chmod(0o755)
    ro = top / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    script = ("import sys\nfrom alignir.errors import MilvusError\nfrom alignir.retrieval.milvus import connect\n"
              f"try:\n    connect({str(ro / 'x.db')!r})\nexcept MilvusError as e:\n    print(e)\n    sys.exit(3)\n")
    user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if user and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv to drop to another user")
    try:
        proc = subprocess.run([*user, sys.executable, "-c", script], cwd="/", capture_output=True, text=True,
                              timeout=300)
        hidden = top / "hidden"
        hidden.mkdir(mode=0o700)
        unreachable = subprocess.run([*user, sys.executable, "-c", script.replace(str(ro), str(hidden / "in"))],
                                     cwd="/", capture_output=True, text=True, timeout=300)
    finally:
        ro.chmod(0o755)
        shutil.rmtree(top)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "is not writable (permission denied)" in proc.stdout and proc.stdout.count("\n") == 1
    if user:  # the folder exists but cannot be reached: not "does not exist"
        assert unreachable.returncode == 3 and "cannot be reached (permission denied)" in unreachable.stdout, \
            unreachable.stdout + unreachable.stderr[-1000:]


def test_a_read_only_file_system_is_named(tmp_path, monkeypatch):
    """statvfs says read-only (a read-only mount; none can be made here without privileges the
    tests do not take, so the file system's answer is simulated): the error says so."""
    from alignir.retrieval import milvus as mv

    monkeypatch.setattr(mv.os, "access", lambda *a, **kw: False)
    monkeypatch.setattr(mv, "_read_only_fs", lambda path: True)
    with pytest.raises(MilvusError, match="read-only file system"):
        connect(str(tmp_path / "x.db"))



@pytest.mark.e2e  # the alignir command in a child process
def test_cli_export_prints_no_library_noise(built, tmp_path):
    """A successful export prints its JSON summary and nothing from the Milvus libraries."""
    proc = _cli("export", "milvus", "--index", built / "idx", "--uri", tmp_path / "n.db")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["count"] == len(TEXTS)
    assert "Traceback" not in proc.stderr and "Method not implemented" not in proc.stderr
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
