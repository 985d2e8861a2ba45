"""An index served by a real embedded Milvus (Milvus Lite, a local .db file): every mode returns
the folder index's ids and scores, the sparse leg equals our kernel on signed queries, an
export killed mid-insert resumes, a collection of another index or encoder is refused, a bad URI
or a missing client is one clear line. On a tiny random Llama (fast), and every mode on ADI
with the real SmolLM2 (marked `model`); benchmarks/milvus/bench_milvus.py measures the same on more
collections."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from alignir.errors import AlignirError  # noqa: E402
from alignir.index.store import open_index  # noqa: E402
from alignir.errors import FingerprintMismatch
from alignir.retrieval.indexer import build_index, resparsify  # noqa: E402
from alignir.retrieval.milvus import MilvusCollection, connect, default_collection_name, export_index, index_manifest
from alignir.errors import CollectionMismatch, MilvusError
from alignir.retrieval.milvus_search import MilvusSearcher  # noqa: E402
from alignir.retrieval.searcher import MODES, Searcher  # noqa: E402

from conftest import MILVUS_QUERIES as QUERIES  # noqa: E402
from conftest import MILVUS_TEXTS as TEXTS  # noqa: E402
from conftest import ROOT, assert_same_hits, milvus_config, write_corpus  # noqa: E402

pytestmark = [pytest.mark.milvus, pytest.mark.usefixtures("one_thread")]

CONFIG = milvus_config()  # log1p docs, raw (signed) query weights


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("milvus")
    corpus = write_corpus(root / "corpus.jsonl", TEXTS)
    build_index(corpus, root / "idx", model="tiny", sparse=CONFIG, loaded=tiny_model, cache_dir=root / "cache",
                progress=False)
    return root


@pytest.fixture(scope="module")
def exported(built):
    uri = str(built / "m.db")
    summary = export_index(built / "idx", uri, progress=False)
    return uri, summary


@pytest.fixture(scope="module")
def searchers(built, exported, tiny_model):
    folder = Searcher.open(built / "idx", loaded=tiny_model)
    milvus = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=exported[0])
    yield folder, milvus
    milvus.close()


_same = assert_same_hits  # (want, got): the same ranking up to float32 rounding and near ties


def test_export_summary_and_manifest_property(built, exported):
    uri, summary = exported
    stored = open_index(built / "idx")
    assert summary["documents"] == summary["inserted"] == summary["count"] == len(TEXTS) == stored.n_docs
    assert summary["collection"] == default_collection_name(built / "idx")
    assert summary["collection"].startswith("alignir_idx_")
    assert summary["lexical"] and not summary["texts"]
    c = MilvusCollection.open(uri, summary["collection"], expect=index_manifest(stored))
    try:
        assert c.manifest == index_manifest(stored) and c.has_lexical
    finally:
        c.close()
    again = export_index(built / "idx", uri, progress=False)  # a re-run has nothing to insert
    assert again["inserted"] == 0 and again["already_there"] == again["count"] == len(TEXTS)


def test_queries_have_signed_sparse_weights(searchers):
    """The default raw query weighting gives surface tokens negative logits: the exact signed path is tested."""
    Q = searchers[0].encode(QUERIES).legs["sparse"]
    assert any(Q[i].data.min() < 0 for i in range(Q.shape[0]) if Q[i].nnz)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fusion", [None, "rrf", "minmax"])
def test_every_mode_equals_the_folder_index(searchers, mode, fusion):
    folder, milvus = searchers
    for k in (1, 5, len(TEXTS)):
        want = folder.batch_search(QUERIES, k=k, mode=mode, fusion=fusion)
        got = milvus.batch_search(QUERIES, k=k, mode=mode, fusion=fusion)
        for a, b in zip(want, got):
            _same(a, b)


def test_server_side_rrf_equals_the_folder_index(searchers, exported):
    """server_fusion=True (one Milvus hybrid_search per fused set) on distinct documents, no filter."""
    folder, _ = searchers
    server = MilvusSearcher.from_searcher(folder, uri=exported[0], server_fusion=True)
    try:
        for mode in [m for m in MODES if "+" in m or m == "hybrid"]:
            for k in (1, 5, len(TEXTS)):
                want = folder.batch_search(QUERIES, k=k, mode=mode, fusion="rrf")
                got = server.batch_search(QUERIES, k=k, mode=mode, fusion="rrf")
                for a, b in zip(want, got):
                    _same(a, b)
        # queries Milvus takes whole (no empty or signed leg vector) are fused there: their hits
        # carry no per-leg scores, the mark of the server-side path
        fused = server.batch_search(QUERIES, k=5, mode="dense+bm25", fusion="rrf")
        assert any(hits and not any(h.leg_scores for h in hits) for hits in fused)
    finally:
        server.close()


def test_the_backend_supplies_its_legs_and_the_searcher_runs_the_same_plan(searchers):
    """The Milvus searcher holds Milvus legs (the Leg protocol) under the folder's leg names and
    runs the searcher's own code over them: the same plan for every mode, no leg code of its own."""
    from alignir.retrieval.legs import Leg
    from alignir.retrieval.milvus_legs import MilvusLeg

    folder, milvus = searchers
    assert list(milvus.legs) == list(folder.legs) == ["dense", "sparse", "bm25"]
    assert all(isinstance(leg, Leg) and isinstance(leg, MilvusLeg) for leg in milvus.legs.values())
    assert not {"_leg_lists", "leg_lists", "encode"} & set(vars(MilvusSearcher))
    for mode in MODES:
        for kw in ({}, {"fusion": "rrf"}, {"alpha": 0.3}):
            assert milvus.plan(mode, **kw) == folder.plan(mode, **kw)


class _ConstLeg:
    """A registered leg Milvus cannot serve: every document scores 1."""

    name = "const"
    needs_model = False
    explains = False

    def __init__(self, n: int) -> None:
        self.n = n

    def encode(self, ctx):
        return np.zeros((len(ctx.texts), 1), dtype=np.float32)

    def search(self, encoded, k, allowed=None, threads=None):
        docs = np.arange(self.n) if allowed is None else np.asarray(allowed)
        docs = np.tile(docs[:k], (encoded.shape[0], 1)).astype(np.int64)
        return docs, np.ones(docs.shape, dtype=np.float32)

    def explain(self, query_row, doc_number):
        return []


def test_a_leg_milvus_cannot_serve_is_refused_before_any_query(built, exported, tiny_model, monkeypatch):
    """A registered custom leg (or a built-in name registered with another class) is refused by
    name when a Milvus searcher is opened: before connecting, before the model loads. A searcher
    given only the legs Milvus holds is served."""
    import alignir.encoders.models as models
    from alignir.errors import LegNotServedError
    from alignir.retrieval.legs import leg_factories, register_leg, unregister_leg

    register_leg("const", lambda stored, sparsifier: _ConstLeg(stored.n_docs))
    try:
        folder = Searcher.open(built / "idx", loaded=tiny_model)
        assert list(folder.legs) == ["dense", "sparse", "bm25", "const"] and folder.search("plants", mode="const")
        served = Searcher(folder.index, folder.embedder, folder.sparsifier, folder.fusion,
                          legs={k: v for k, v in folder.legs.items() if k != "const"})
        m = MilvusSearcher.from_searcher(served, uri=exported[0])
        try:
            _same(folder.search(QUERIES[0], k=5, mode="dense+sparse+bm25"), m.search(QUERIES[0], k=5,
                                                                                   mode="dense+sparse+bm25"))
        finally:
            m.close()
        monkeypatch.setattr(MilvusCollection, "open", lambda *a, **kw: pytest.fail("Milvus was contacted"))
        monkeypatch.setattr(models, "load_model", lambda *a, **kw: pytest.fail("the model was loaded"))
        with pytest.raises(LegNotServedError, match="the milvus backend cannot search the leg 'const'") as e:
            Searcher.open(built / "idx", backend="milvus", uri=exported[0])
        assert (e.value.leg, e.value.backend, e.value.served) == ("const", "milvus", ("dense", "sparse", "bm25"))
        with pytest.raises(LegNotServedError, match="'const'"):
            MilvusSearcher.from_searcher(folder, uri=exported[0])
    finally:
        unregister_leg("const")
    dense = leg_factories()["dense"]
    register_leg("dense", lambda stored, sparsifier: type("OtherDense", (_ConstLeg,), {"name": "dense"})(1),
                 replace=True)
    try:
        with pytest.raises(LegNotServedError, match="'dense'"):
            Searcher.open(built / "idx", backend="milvus", uri=exported[0])
    finally:
        register_leg("dense", dense, replace=True)


def test_leg_scores_equal_the_kernels(searchers):
    """Each leg's full top list (ids and raw scores): sparse = our numba kernel, dense = FAISS flat,
    bm25 = the lexical kernel."""
    folder, milvus = searchers
    n = folder.index.n_docs
    want = folder.leg_lists(QUERIES, k=n)
    got = milvus.leg_lists(QUERIES, k=n)
    for leg in ("sparse", "dense", "bm25"):
        for a, b in zip(want[leg], got[leg]):
            assert set(a) == set(b), leg
            np.testing.assert_allclose([b[d] for d in a], list(a.values()), rtol=1e-5, atol=1e-6)


def test_allowed_ids_become_a_filter(searchers):
    folder, milvus = searchers
    allowed = ["d1", "d3", "d7", "d12", "d20"]
    for mode in ("sparse", "dense", "bm25", "hybrid", "dense+sparse+bm25"):
        for fusion in (None, "rrf"):
            want = folder.batch_search(QUERIES, k=10, mode=mode, fusion=fusion, allowed_ids=allowed)
            got = milvus.batch_search(QUERIES, k=10, mode=mode, fusion=fusion, allowed_ids=allowed)
            for a, b in zip(want, got):
                assert {h.id for h in b} <= set(allowed)
                _same(a, b)
    assert milvus.search(QUERIES[0], k=3, allowed_ids=[]) == []


def test_signed_sparse_search_is_exact(built, exported):
    """Random queries with negative weights at every k: the kernel's top list, to float32."""
    stored = open_index(built / "idx")
    c = MilvusCollection.open(exported[0], exported[1]["collection"])
    rng = np.random.default_rng(0)
    try:
        for field, index in (("sparse", stored.sparse), ("bm25", stored.lexical.index)):
            n_terms = index.n_terms
            rows = []
            for _ in range(6):
                terms = rng.choice(n_terms, size=12, replace=False)
                rows.append(sp.csr_matrix((rng.normal(size=12).astype(np.float32), (np.zeros(12), terms)),
                                          shape=(1, n_terms)))
            Q = sp.vstack(rows).tocsr()
            for k in (1, 3, stored.n_docs):
                docs, scores = index.search(Q, k)
                got = c.search_sparse(Q, k, field=field)
                for i in range(Q.shape[0]):
                    keep = docs[i] >= 0
                    want = dict(zip(docs[i][keep].tolist(), scores[i][keep].tolist()))
                    assert set(got[i]) == set(want), (field, k, i)
                    np.testing.assert_allclose([got[i][d] for d in want], list(want.values()), rtol=1e-5, atol=1e-5)
    finally:
        c.close()


@pytest.mark.e2e  # the export runs in a child Python process
def test_an_export_killed_mid_insert_resumes(built, tiny_model, tmp_path):
    """SIGKILL the exporting process after 3 of 10 batches; the re-run inserts only the rest, the
    count is the number of documents (no duplicates) and every mode equals the folder."""
    uri = str(tmp_path / "killed.db")
    script = textwrap.dedent(f"""
        import os, signal
        import pymilvus
        from alignir.retrieval.milvus import export_index
        calls = []
        real = pymilvus.MilvusClient.insert
        def insert(self, *a, **kw):
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            calls.append(1)
            return real(self, *a, **kw)
        pymilvus.MilvusClient.insert = insert
        export_index({str(built / 'idx')!r}, {uri!r}, batch_size=3, progress=False)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    again = export_index(built / "idx", uri, batch_size=3, progress=False)
    n = len(TEXTS)
    assert again["created"] is False
    assert again["already_there"] + again["inserted"] == n == again["count"]
    assert 0 < again["already_there"] <= 9
    folder = Searcher.open(built / "idx", loaded=tiny_model)
    milvus = Searcher.open(built / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    try:
        for mode in ("sparse", "dense", "bm25", "dense+sparse+bm25"):
            for a, b in zip(folder.batch_search(QUERIES, k=n, mode=mode), milvus.batch_search(QUERIES, k=n, mode=mode)):
                _same(a, b)
    finally:
        milvus.close()
    fresh = export_index(built / "idx", uri, batch_size=50, recreate=True, progress=False)
    assert fresh["created"] and fresh["inserted"] == fresh["count"] == n


def test_another_index_or_encoder_is_refused(built, exported, tiny_model, tiny_model_bos, tmp_path):
    uri, summary = exported
    name = summary["collection"]
    other = tmp_path / "idx"
    shutil.copytree(built / "idx", other)
    # the same index copied elsewhere is the same index
    MilvusSearcher.open(other, uri=uri, collection=name, loaded=tiny_model).close()
    resparsify(other, loaded=tiny_model, doc_k=12)
    with pytest.raises(CollectionMismatch, match="doc_k") as e:
        Searcher.open(other, loaded=tiny_model, backend="milvus", uri=uri, collection=name)
    assert "\n" not in str(e.value)
    with pytest.raises(CollectionMismatch, match="belongs to the index folder"):  # another folder's collection
        export_index(other, uri, name, progress=False)
    # an index of another encoder
    bos = tmp_path / "bos"
    build_index(built / "corpus.jsonl", bos, model="tiny-bos", sparse=CONFIG, loaded=tiny_model_bos,
                cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(CollectionMismatch, match="encoder_hash"):
        Searcher.open(bos, loaded=tiny_model_bos, backend="milvus", uri=uri, collection=name)
    # a query encoder that is not the index's is refused by the folder check, as without Milvus
    with pytest.raises(FingerprintMismatch):
        Searcher.open(built / "idx", loaded=tiny_model_bos, backend="milvus", uri=uri)


def test_store_text_keeps_titles_and_texts(built, tmp_path):
    uri = str(tmp_path / "t.db")
    contents = {f"d{i}": (f"title {i}", t) for i, t in enumerate(TEXTS)}
    summary = export_index(built / "idx", uri, "with_text", contents=contents, progress=False)
    assert summary["texts"] and summary["count"] == len(TEXTS)
    client = connect(uri)
    try:
        rows = client.query("with_text", filter='id in ["d4"]', output_fields=["title", "text", "doc_number"])
    finally:
        client.close()
    assert rows[0]["title"] == "title 4" and rows[0]["text"] == TEXTS[4] and rows[0]["doc_number"] == 4
    with pytest.raises(AlignirError, match="texts"):
        export_index(built / "idx", uri, "with_text", progress=False)


def test_store_text_over_the_varchar_limit_is_cut_and_reported(built, tmp_path):
    uri = str(tmp_path / "t.db")
    contents = {f"d{i}": (f"title {i}", t) for i, t in enumerate(TEXTS)}
    contents["d2"] = ("title 2", "\u00e9" * 40_000)  # 80,000 bytes of UTF-8; Milvus VARCHAR holds 65,535
    with pytest.warns(UserWarning, match="1 stored texts were longer than Milvus' 65,535 bytes"):
        summary = export_index(built / "idx", uri, "long_text", contents=contents, progress=False)
    assert summary["clipped_texts"] == 1 and summary["count"] == len(TEXTS)
    client = connect(uri)
    try:
        rows = client.query("long_text", filter='id in ["d2", "d3"]', output_fields=["id", "text"])
    finally:
        client.close()
    got = {r["id"]: r["text"] for r in rows}
    assert got["d2"] == "\u00e9" * 32_767 and got["d3"] == TEXTS[3]  # cut at a character boundary


@pytest.mark.parametrize("uri, match", [
    ("", "empty"),
    ("index.sqlite", "end in .db"),
    ("/no/such/folder/x.db", "does not exist"),
    ("ftp://host:19530", "http"),
])
def test_bad_uri_is_one_line(uri, match):
    with pytest.raises(AlignirError, match=match) as e:
        connect(uri)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw, match", [({"batch_size": 0}, "batch_size"), ({"shards": 0}, "shards"),
                                       ({"shards": True}, "shards")])
def test_bad_export_options_are_refused_before_connecting(built, tmp_path, kw, match):
    with pytest.raises(AlignirError, match=match):
        export_index(built / "idx", str(tmp_path / "never.db"), progress=False, **kw)
    assert not (tmp_path / "never.db").exists()


def test_milvus_problems_are_found_before_the_model_loads(built, exported, tmp_path, monkeypatch):
    import alignir.encoders.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **kw: pytest.fail("the model was loaded"))
    with pytest.raises(MilvusError, match="no Milvus Lite database.*export the index first"):
        Searcher.open(built / "idx", backend="milvus", uri=str(tmp_path / "missing.db"))
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(MilvusError, match="no collection 'nope'"):
        Searcher.open(built / "idx", backend="milvus", uri=exported[0], collection="nope")


def test_missing_collection_and_unreachable_server(built, exported):
    with pytest.raises(MilvusError, match="no collection 'nope'.*alignir export milvus"):
        MilvusCollection.open(exported[0], "nope")
    with pytest.raises(MilvusError, match="cannot connect to Milvus at http://127.0.0.1:9") as e:
        connect("http://127.0.0.1:9", timeout=2)
    assert "\n" not in str(e.value)


def test_missing_pymilvus_is_one_clear_line(built, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pymilvus", None)  # what `import pymilvus` does when not installed
    with pytest.raises(MilvusError, match=r"pip install 'alignir\[milvus\]'"):
        export_index(built / "idx", str(tmp_path / "x.db"), progress=False)


def test_cli_export_then_bad_uri(built, tmp_path):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["export", "milvus", "--index", str(built / "idx"), "--uri", str(tmp_path / "c.db"),
                            "--collection", "cli"])
    assert r.exit_code == 0, r.output
    assert '"count": %d' % len(TEXTS) in r.output
    r = runner.invoke(app, ["export", "milvus", "--index", str(built / "idx"), "--uri", str(tmp_path / "c.txt")])
    assert r.exit_code == 1 and r.output.strip().count("\n") == 0 and "end in .db" in r.output
    r = runner.invoke(app, ["search", "plants", "--index", str(built / "idx"), "--backend", "milvus"])
    assert r.exit_code == 1 and "--uri" in r.output
    r = runner.invoke(app, ["search", "plants", "--index", str(built / "idx"), "--uri", "x.db"])
    assert r.exit_code == 1 and "--backend milvus" in r.output


def test_searcher_open_checks_the_backend(built, tiny_model):
    with pytest.raises(AlignirError, match="backend"):
        Searcher.open(built / "idx", loaded=tiny_model, backend="elastic")
    with pytest.raises(AlignirError, match="uri"):
        Searcher.open(built / "idx", loaded=tiny_model, backend="milvus")



def test_cli_search_and_eval_through_milvus_equal_the_folder(tmp_path, tiny_folder, monkeypatch):
    """The whole CLI path on a tiny HF model folder: build-index, export milvus, then search and
    eval with --backend milvus print what the folder prints."""
    import json

    from typer.testing import CliRunner

    from alignir.retrieval.cli import app
    from conftest import share_model_cache, write_queries

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    model_dir = tiny_folder  # the run's one copy of tiny_model, so its ONNX export is made once
    beir = tmp_path / "beir"
    beir.mkdir()
    write_corpus(beir / "corpus.jsonl", TEXTS)
    write_queries(beir / "queries.jsonl", QUERIES[:4])
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t2\n"
                                             "q2\td8\t1\nq3\td4\t1\n")
    runner = CliRunner()

    def run(*args):
        r = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.output

    idx, uri = tmp_path / "idx", tmp_path / "cli.db"
    run("build-index", beir, "--index", idx, "--model", model_dir, "--doc-k", 24, "--query-m", 5)
    run("export", "milvus", "--index", idx, "--uri", uri, "--store-text", "--batch-size", 7)
    for mode in ("dense+sparse+bm25", "sparse"):
        args = ("search", QUERIES[0], "--index", idx, "--mode", mode, "--top", 8, "--json", "--device", "cpu")
        folder = json.loads(run(*args))["hits"]
        milvus = json.loads(run(*args, "--backend", "milvus", "--uri", uri))["hits"]
        as_hits = lambda hits: [SimpleNamespace(id=h["id"], score=h["score"]) for h in hits]  # noqa: E731
        _same(as_hits(folder), as_hits(milvus))
    ev = ("eval", "--index", idx, "--dataset", beir, "--json", "--mode", "all")
    folder = json.loads(run(*ev))
    closed, real_close = [], MilvusSearcher.close
    monkeypatch.setattr(MilvusSearcher, "close", lambda self: (closed.append(1), real_close(self))[-1])
    milvus = json.loads(run(*ev, "--backend", "milvus", "--uri", uri))
    assert closed == [1]  # eval releases the connection (Milvus Lite holds the .db until then)
    assert milvus["backend"] == {"name": "milvus", "uri": str(uri), "collection": default_collection_name(idx)}
    assert set(milvus["metrics"]) == set(folder["metrics"]) == set(MODES)
    for mode, values in folder["metrics"].items():
        for metric, v in values.items():
            assert milvus["metrics"][mode][metric] == pytest.approx(v, abs=1e-9), (mode, metric)


@pytest.mark.e2e  # the holder is a child Python process
def test_a_db_held_by_another_process_is_one_line(tmp_path, capfd):
    """Milvus Lite opens a .db in one process at a time: a second process gets one line, no traceback."""
    uri = str(tmp_path / "held.db")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom alignir.retrieval.milvus import connect\n"
                               f"c = connect({uri!r})\nprint('held', flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        capfd.readouterr()
        with pytest.raises(MilvusError, match=f"locked by pid {holder.pid}") as e:
            connect(uri)
        assert "\n" not in str(e.value)
        assert "Traceback" not in capfd.readouterr().err
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.model
def test_adi_with_smollm2_every_mode_equals_the_folder(tmp_path, smollm2, adi_smollm2):
    """ADI, the real SmolLM2, the default config (signed raw query weights): every mode, and every
    fused set with RRF fused inside Milvus, returns the folder's top-100 ids in order and its
    scores for all 35 queries; nDCG@10 is therefore equal too."""
    import shutil

    from alignir.retrieval.beir import load_beir

    from conftest import ADI as adi

    shutil.copytree(adi_smollm2, tmp_path / "adi")  # the export records itself in the index
    uri = str(tmp_path / "adi.db")
    assert export_index(tmp_path / "adi", uri, progress=False)["count"] == 82
    folder = Searcher.open(tmp_path / "adi", loaded=smollm2)
    milvus = MilvusSearcher.from_searcher(folder, uri=uri)
    queries = load_beir(adi).queries
    texts = [queries[q] for q in sorted(queries)]
    batch = folder.encode(texts)
    try:
        for mode in MODES:
            for fusion in (None, "rrf") if "+" in mode or mode == "hybrid" else (None,):
                want = folder.batch_search(texts, k=100, mode=mode, fusion=fusion, encoded=batch)
                got = milvus.batch_search(texts, k=100, mode=mode, fusion=fusion, encoded=batch)
                for a, b in zip(want, got):
                    _same(a, b)
    finally:
        milvus.close()
