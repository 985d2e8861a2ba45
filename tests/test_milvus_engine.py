"""An index served by the Milvus 2.5 C++ engine (PyPI milvus-lite 2.5.1's `milvus` binary, run as
a loopback gRPC server by retrieval/milvus_engine.py): every mode returns the folder index's ids
and scores; the engine keeps no collection properties, so the export's record (manifest, owner,
completion mark) lives in the alignir_meta collection and is checked as properties are; an
interrupted export, a foreign, stale or altered record, a server killed mid-export or mid-search
and a restarted server are refused or recovered as with Milvus Lite. One engine per test process
(the ``milvus_engine`` fixture); the cases that kill it start their own. Skipped, with the
reason, where the engine cannot be had."""
from __future__ import annotations

import json
import shutil
import signal

import pytest

pytest.importorskip("pymilvus")

from alignir.errors import CollectionMismatch, IncompleteCollection, MilvusError  # noqa: E402
from alignir.index.store import open_index  # noqa: E402
from alignir.retrieval import milvus_meta as meta  # noqa: E402
from alignir.retrieval.indexer import build_index, resparsify  # noqa: E402
from alignir.retrieval.milvus import (COMPLETE, PROPERTY, MilvusCollection, connect,  # noqa: E402
                                      default_collection_name, export_index, index_manifest)
from alignir.retrieval.milvus_engine import MilvusEngine, unavailable_reason  # noqa: E402
from alignir.retrieval.milvus_search import MilvusSearcher  # noqa: E402
from alignir.retrieval.searcher import MODES, Searcher, modes_for  # noqa: E402
from benchmarks.faults.fault_milvus import killed_export  # noqa: E402
from benchmarks.milvus.engine_parity import compare, near_tie  # noqa: E402

from conftest import MILVUS_QUERIES as QUERIES  # noqa: E402
from conftest import MILVUS_TEXTS as TEXTS  # noqa: E402
from conftest import assert_same_hits, milvus_config, write_corpus  # noqa: E402

pytestmark = [pytest.mark.milvus, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("engine")
    corpus = write_corpus(root / "corpus.jsonl", TEXTS)
    build_index(corpus, root / "idx", model="tiny", sparse=milvus_config(), loaded=tiny_model,
                cache_dir=root / "cache", progress=False)
    return root


@pytest.fixture(scope="module")
def exported(built, milvus_engine):
    return milvus_engine.uri, export_index(built / "idx", milvus_engine.uri, progress=False)


@pytest.fixture(scope="module")
def searchers(built, exported, tiny_model):
    folder = Searcher.open(built / "idx", loaded=tiny_model)
    engine = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=exported[0])
    yield folder, engine
    engine.close()


@pytest.fixture
def own_engine(tmp_path):
    """An engine of this test alone (the test kills or restarts it)."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    engine = MilvusEngine(tmp_path / "engine").start()
    yield engine
    engine.stop()


def _copy(built, tmp_path, name="idx"):
    """The index copied to a folder of this test: its own default collection name."""
    shutil.copytree(built / "idx", tmp_path / name)
    return tmp_path / name


def _record(uri, name):
    client = connect(uri)
    try:
        return meta.read(client, name), client.describe_collection(name).get("properties") or {}
    finally:
        client.close()


def _same_as_folder(folder, engine, k=5, modes=("dense",)):
    """Every query ranks alike in the folder and the engine (ties in any order)."""
    for mode in modes:
        for a, b in zip(folder.batch_search(QUERIES, k=k, mode=mode), engine.batch_search(QUERIES, k=k, mode=mode)):
            assert_same_hits(a, b)
    return True


def test_the_engine_starts_on_a_free_port_and_stops(tmp_path):
    import socket

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    engine = MilvusEngine(tmp_path / "e").start()
    port = engine.port
    assert engine.running and engine.uri == f"http://127.0.0.1:{port}"
    engine.stop()
    assert not engine.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_connections_to_the_engine_use_keepalive_settings_it_accepts(milvus_engine):
    """The engine answers pymilvus' 10-s idle pings with GOAWAY "too_many_pings" as Milvus Lite
    does: its connections, the start-up probe's shared channel included, ping every 6 min at most."""
    from alignir.retrieval.milvus import LITE_GRPC_OPTIONS

    client = connect(milvus_engine.uri)
    try:
        opts = client._get_connection()._grpc_options
    finally:
        client.close()
    assert {k: opts.get(k) for k in LITE_GRPC_OPTIONS} == LITE_GRPC_OPTIONS


def test_fetch_refuses_a_wheel_of_another_sha256(tmp_path):
    from alignir.retrieval.milvus_engine import WHEEL, fetch

    wheel = tmp_path / WHEEL
    wheel.write_bytes(b"not the milvus-lite wheel")
    with pytest.raises(MilvusError, match="sha256|Linux x86_64") as e:
        fetch(tmp_path / "engine", wheel=wheel)
    assert "\n" not in str(e.value) and not (tmp_path / "engine").exists()
    assert "not fetched" in unavailable_reason(tmp_path / "engine") or "Linux" in unavailable_reason(tmp_path / "engine")


def test_the_record_lives_in_the_meta_collection(built, exported):
    """No collection properties are kept: manifest, owner and mark are read back from alignir_meta."""
    uri, summary = exported
    stored = open_index(built / "idx")
    assert summary["documents"] == summary["inserted"] == summary["count"] == len(TEXTS)
    assert summary["collection"] == default_collection_name(built / "idx")
    rec, props = _record(uri, summary["collection"])
    assert not props and rec.where == "meta" and rec.token
    assert json.loads(rec.values[PROPERTY]) == index_manifest(stored)
    assert json.loads(rec.values[COMPLETE]) == {"rows": len(TEXTS)}
    c = MilvusCollection.open(uri, summary["collection"], expect=index_manifest(stored), rows=len(TEXTS))
    try:
        assert c.manifest == index_manifest(stored) and c.rows == len(TEXTS)
    finally:
        c.close()
    again = export_index(built / "idx", uri, progress=False)
    assert again["inserted"] == 0 and again["already_there"] == again["count"] == len(TEXTS)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fusion", [None, "rrf", "minmax"])
def test_every_mode_equals_the_folder_index(searchers, mode, fusion):
    folder, engine = searchers
    for k in (1, 5, len(TEXTS)):
        for a, b in zip(folder.batch_search(QUERIES, k=k, mode=mode, fusion=fusion),
                        engine.batch_search(QUERIES, k=k, mode=mode, fusion=fusion)):
            assert_same_hits(a, b)


def test_leg_scores_and_filters_equal_the_folder(searchers):
    folder, engine = searchers
    n = folder.index.n_docs
    want, got = folder.leg_lists(QUERIES, k=n), engine.leg_lists(QUERIES, k=n)
    for leg in ("sparse", "dense", "bm25"):
        for a, b in zip(want[leg], got[leg]):
            assert set(a) == set(b), leg
            assert [b[d] for d in a] == pytest.approx(list(a.values()), rel=1e-5, abs=1e-6)
    allowed = ["d1", "d3", "d7", "d12", "d20"]
    for mode in ("sparse", "dense", "bm25", "dense+sparse+bm25"):
        for a, b in zip(folder.batch_search(QUERIES, k=10, mode=mode, allowed_ids=allowed),
                        engine.batch_search(QUERIES, k=10, mode=mode, allowed_ids=allowed)):
            assert {h.id for h in b} <= set(allowed)
            assert_same_hits(a, b)


def test_server_side_rrf_of_a_batch_equals_the_folder(tiny_model, milvus_engine, tmp_path):
    """RRF fused in the engine for a batch of queries: each query is ranked as when sent alone
    (a batched hybrid search of this engine carries ranks over between queries), and as the folder
    ranks it where no leg holds a near tie (the engine orders tied documents its own way)."""
    texts = [t for t in TEXTS if t != t.upper()]  # upper-cased copies tie with their originals in BM25
    build_index(write_corpus(tmp_path / "c.jsonl", texts), tmp_path / "idx", model="tiny", sparse=milvus_config(),
                loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    export_index(tmp_path / "idx", milvus_engine.uri, progress=False)
    folder = Searcher.open(tmp_path / "idx", loaded=tiny_model)
    server = MilvusSearcher.from_searcher(folder, uri=milvus_engine.uri, server_fusion=True)
    compared = 0
    try:
        for mode in ("dense+sparse", "dense+bm25", "dense+sparse+bm25"):
            legs = mode.split("+")
            lists = folder.leg_lists(QUERIES, legs=legs, k=folder.plan(mode, fusion="rrf").depth)
            for k in (1, 5, len(texts)):
                batch = server.batch_search(QUERIES, k=k, mode=mode, fusion="rrf")
                want = folder.batch_search(QUERIES, k=k, mode=mode, fusion="rrf")
                for i, query in enumerate(QUERIES):
                    alone = server.batch_search([query], k=k, mode=mode, fusion="rrf")[0]
                    assert [(h.id, h.score) for h in batch[i]] == [(h.id, h.score) for h in alone], (mode, k, i)
                    if not near_tie({leg: lists[leg][i] for leg in legs}, legs):
                        assert_same_hits(want[i], batch[i])
                        compared += 1
        fused = server.batch_search(QUERIES, k=5, mode="dense+bm25", fusion="rrf")
        assert sum(1 for hits in fused if hits and not any(h.leg_scores for h in hits)) >= 2  # fused in Milvus
    finally:
        server.close()
    assert compared >= 9


def test_cli_export_and_search_against_the_engine(built, milvus_engine, tmp_path):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    idx = _copy(built, tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["export", "milvus", "--index", str(idx), "--uri", milvus_engine.uri])
    assert r.exit_code == 0, r.output
    assert '"count": %d' % len(TEXTS) in r.output
    r = runner.invoke(app, ["info", "--index", str(idx), "--no-verify", "--backend", "milvus",
                            "--uri", milvus_engine.uri])
    assert r.exit_code == 0 and f"{len(TEXTS)} rows, whole" in r.output, r.output


@pytest.mark.e2e  # exports killed in child Python processes
@pytest.mark.parametrize("after,method", [(0, "insert"), (3, "insert"), (0, "upsert"), (1, "upsert")])
def test_an_interrupted_export_is_refused_until_resumed(built, tiny_model, milvus_engine, tmp_path, after, method):
    """Killed before insert 0 or 3, before the record is written (upsert 0: the collection
    exists, empty and unrecorded) or before the completion mark (upsert 1: every row in)."""
    idx = _copy(built, tmp_path)
    uri = milvus_engine.uri
    proc = killed_export(idx, uri, after, method)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    held = {"insert": after, "upsert": 0 if after == 0 else len(TEXTS)}[method]
    with pytest.raises(IncompleteCollection, match=rf"interrupted at {held} of {len(TEXTS)} rows; re-run"):
        Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    summary = export_index(idx, uri, progress=False)
    assert summary["already_there"] == held and summary["count"] == len(TEXTS)
    folder = Searcher.open(idx, loaded=tiny_model)
    engine = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    try:
        assert _same_as_folder(folder, engine, k=len(TEXTS))
    finally:
        engine.close()


def test_a_foreign_collection_is_refused_and_never_dropped(built, milvus_engine):
    uri = milvus_engine.uri
    client = connect(uri)
    client.create_collection("theirs", dimension=4)
    client.close()
    for recreate in (False, True):
        with pytest.raises(CollectionMismatch, match="not exported by alignir"):
            export_index(built / "idx", uri, "theirs", recreate=recreate, progress=False)
    client = connect(uri)
    assert client.has_collection("theirs")
    client.close()


def test_a_stale_record_is_ignored(built, tiny_model, milvus_engine, tmp_path):
    """The collection is dropped behind alignir's back and another made under its name: the
    old row of alignir_meta does not vouch for it (its token differs)."""
    idx = _copy(built, tmp_path)
    uri = milvus_engine.uri
    name = export_index(idx, uri, progress=False)["collection"]
    client = connect(uri)
    client.drop_collection(name)
    client.create_collection(name, dimension=4)
    client.close()
    with pytest.raises(CollectionMismatch, match="not exported by alignir"):
        Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    client = connect(uri)
    client.drop_collection(name)
    client.close()
    assert export_index(idx, uri, progress=False)["created"]  # a new export: a new token, a new row
    Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri).close()


@pytest.mark.parametrize("edit, error, match", [
    (lambda v: {**v, PROPERTY: json.dumps({**json.loads(v[PROPERTY]), "encoder_hash": "x"})},
     CollectionMismatch, "encoder_hash"),
    (lambda v: {**v, COMPLETE: json.dumps({"rows": 3})}, IncompleteCollection, "completed with 3"),
    (lambda v: {k: x for k, x in v.items() if k != COMPLETE}, IncompleteCollection, "interrupted"),
])
def test_an_altered_record_is_refused(built, tiny_model, milvus_engine, tmp_path, edit, error, match):
    idx = _copy(built, tmp_path)
    uri = milvus_engine.uri
    name = export_index(idx, uri, progress=False)["collection"]
    client = connect(uri)
    rec = meta.read(client, name)
    meta._put(client, name, rec.token, edit(rec.values))
    client.close()
    with pytest.raises(error, match=match) as e:
        Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    assert "\n" not in str(e.value)


def test_another_version_of_the_index_and_another_folder_are_refused(built, tiny_model, milvus_engine, tmp_path):
    uri = milvus_engine.uri
    a = _copy(built, tmp_path, "a")
    name = export_index(a, uri, progress=False)["collection"]
    b = _copy(built, tmp_path, "b")
    resparsify(b, loaded=tiny_model, doc_k=12)
    with pytest.raises(CollectionMismatch, match="doc_k"):
        Searcher.open(b, loaded=tiny_model, backend="milvus", uri=uri, collection=name)
    for recreate in (False, True):
        with pytest.raises(CollectionMismatch, match="belongs to the index folder"):
            export_index(b, uri, name, recreate=recreate, progress=False)
    again = export_index(a, uri, recreate=True, progress=False)  # its own folder: dropped and exported anew
    assert again["created"] and again["count"] == len(TEXTS)
    Searcher.open(a, loaded=tiny_model, backend="milvus", uri=uri).close()


def test_a_completed_collection_that_lost_rows_is_refused(built, tiny_model, milvus_engine, tmp_path):
    idx = _copy(built, tmp_path)
    uri = milvus_engine.uri
    name = export_index(idx, uri, progress=False)["collection"]
    client = connect(uri)
    client.delete(name, filter="doc_number in [0, 1]")
    client.close()
    with pytest.raises(IncompleteCollection, match=rf"holds {len(TEXTS) - 2} rows, but its export completed"):
        Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    assert export_index(idx, uri, progress=False)["inserted"] == 2
    assert json.loads(_record(uri, name)[0].values[COMPLETE]) == {"rows": len(TEXTS)}
    Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri).close()


def test_a_server_killed_mid_export_is_resumed(built, tiny_model, own_engine, tmp_path, monkeypatch):
    import pymilvus

    idx = _copy(built, tmp_path)
    calls, real = [], pymilvus.MilvusClient.insert

    def insert(self, *a, **kw):
        if len(calls) == 3:
            own_engine.kill()
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(pymilvus.MilvusClient, "insert", insert)
    with pytest.raises(MilvusError) as e:
        export_index(idx, own_engine.uri, batch_size=2, progress=False)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(pymilvus.MilvusClient, "insert", real)
    own_engine.start()
    with pytest.raises(IncompleteCollection, match=f"of {len(TEXTS)} rows"):
        Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=own_engine.uri)
    summary = export_index(idx, own_engine.uri, batch_size=2, progress=False)
    assert summary["count"] == len(TEXTS) and summary["already_there"] <= 6
    folder = Searcher.open(idx, loaded=tiny_model)
    engine = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=own_engine.uri)
    try:
        assert _same_as_folder(folder, engine, k=len(TEXTS))
    finally:
        engine.close()


def test_a_server_killed_mid_search_is_one_line_then_restarted(built, tiny_model, own_engine, tmp_path):
    """Killed between two searches: the next fails in one line (never fewer hits); once the
    server is restarted (same port and data) the same searcher answers as the folder."""
    idx = _copy(built, tmp_path)
    export_index(idx, own_engine.uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    engine = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=own_engine.uri)
    try:
        assert _same_as_folder(folder, engine)
        own_engine.kill()
        with pytest.raises(MilvusError) as e:
            engine.batch_search(QUERIES, k=5, mode="dense")
        assert "\n" not in str(e.value)
        own_engine.start()
        assert _same_as_folder(folder, engine)
        own_engine.restart()  # a clean stop and start: the data is kept, the searcher reconnects
        assert _same_as_folder(folder, engine, k=8, modes=("sparse", "bm25", "dense+sparse+bm25"))
    finally:
        engine.close()


def _every_mode_equals_the_folder(folder, uri, texts, k=100) -> list[dict]:
    """Every mode of the index and every fusion (client-side, and RRF fused in the engine)
    returns the folder's top-``k`` ids and scores for all ``texts`` (benchmarks.milvus.engine_parity.
    compare: assert_same_hits per query). RRF is held to it on the queries whose legs hold no
    near tie (a near tie swapped by float32 rounding is another rank, so another RRF score)."""
    rows = compare(folder, uri, texts, k)
    assert {r["mode"] for r in rows} == set(modes_for(folder.index))
    for row in rows:
        assert row["id_mismatches"] == 0, (row["mode"], row["fusion"], row["fused_in"], row.get("first_mismatch"))
        if row["plan"] != "rrf":
            assert row["compared"] == len(texts), row
    return rows


@pytest.mark.model
def test_adi_with_smollm2_every_mode_equals_the_folder(tmp_path, smollm2, adi_smollm2, milvus_engine):
    """ADI, the real SmolLM2, the default config: every mode and fusion returns the folder's
    top-100 ids and scores for all 35 queries."""
    from alignir.retrieval.beir import load_beir

    from conftest import ADI

    shutil.copytree(adi_smollm2, tmp_path / "adi")
    assert export_index(tmp_path / "adi", milvus_engine.uri, progress=False)["count"] == 82
    folder = Searcher.open(tmp_path / "adi", loaded=smollm2)
    queries = load_beir(ADI).queries
    rows = _every_mode_equals_the_folder(folder, milvus_engine.uri, [queries[q] for q in sorted(queries)])
    assert sum(r["compared"] for r in rows if r["fused_in"] == "engine") >= len(queries)


@pytest.mark.slow
def test_scifact_with_the_tiny_model_every_mode_equals_the_folder(tmp_path, tiny_model, milvus_engine):
    """SciFact whole (5,183 abstracts, all 1,109 queries) indexed with the tiny model and the
    default config: every mode and fusion through the engine returns the folder's top-100."""
    from alignir.retrieval.beir import read_queries

    from conftest import ADI

    data = ADI.parent / "scifact"
    if not data.is_dir():
        pytest.skip(f"{data} not found (set ALIGNIR_SHARED)")
    build_index(data, tmp_path / "idx", model="tiny", loaded=tiny_model, cache_dir=tmp_path / "cache",
                progress=False)
    summary = export_index(tmp_path / "idx", milvus_engine.uri, progress=False)
    assert summary["documents"] == 5183
    queries = read_queries(data / "queries.jsonl")
    assert len(queries) == 1109
    folder = Searcher.open(tmp_path / "idx", loaded=tiny_model)
    _every_mode_equals_the_folder(folder, milvus_engine.uri, [queries[q] for q in sorted(queries)])
