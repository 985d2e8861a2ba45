"""Long documents as passages: the exact document top-k of a passage search
(MaxP / FirstP / sum of the N best, against a brute force over every passage row of real FAISS
and numba indexes), the passage map through the index folder, a long-document index built with
a real (tiny) model through the Python API and the CLI: search, explain, filters, deletes,
resparsify, Pyserini export."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from alignir.index.dense import DenseIndex
from alignir.index.passages import PassageMap, parse_aggregation
from alignir.index.sparse import SparseIndex
from alignir.retrieval.legs import DenseLeg, SparseLeg
from alignir.retrieval.passage_leg import PassageLeg

from conftest import assert_same_ranking, share_model_cache, TINY_CORPUS, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- brute force

def _brute(S: np.ndarray, pmap: PassageMap, how: str, n: int, allowed=None, matched=None) -> list[list[tuple[int, float]]]:
    """Per query: documents by aggregated score over ALL their passage rows (``matched``: the
    rows a leg can return at all, e.g. those sharing a term; others are not passages of the list)."""
    out = []
    docs = range(pmap.n_docs) if allowed is None else sorted(allowed)
    for qi in range(S.shape[0]):
        scored = []
        for d in docs:
            rows = np.flatnonzero(pmap.doc == d)
            if how == "firstp":
                rows = rows[:1]
            if matched is not None:
                rows = rows[matched[qi, rows]]
            if not len(rows):
                continue
            s = np.sort(S[qi, rows].astype(np.float64))[::-1]
            scored.append((d, float(s[0] if how != "sumk" else s[:n].sum())))
        out.append(sorted(scored, key=lambda ds: (-ds[1], ds[0])))
    return out


def _corpus(seed: int = 0):
    """20 documents; document 0 has 60 passages that all point at the query direction (so the
    first rows fetched are all its own: the search must deepen to find k documents)."""
    rng = np.random.default_rng(seed)
    counts = np.r_[60, rng.integers(1, 5, size=19)]
    pmap = PassageMap.from_counts(counts)
    Q = rng.normal(size=(4, 16)).astype(np.float32)
    X = rng.normal(size=(pmap.n_rows, 16)).astype(np.float32)
    X[:60] += 8 * Q[0] / np.linalg.norm(Q[0])
    D = sp.random(pmap.n_rows, 40, density=0.15, random_state=seed, format="lil", dtype=np.float32)
    D[:60, :5] = 2.0  # document 0's passages share the query's first terms
    D = sp.csr_matrix(D)
    D.data = D.data + 0.05
    Qs = sp.random(4, 40, density=0.2, random_state=seed + 1, format="lil", dtype=np.float32)
    Qs[0, :5] = 1.0
    return pmap, Q, X, sp.csr_matrix(D), sp.csr_matrix(Qs)


@pytest.mark.parametrize("spec", ["maxp", "firstp", "sum1", "sum2", "sum5"])
@pytest.mark.parametrize("k", [1, 3, 7, 20, 25])
def test_document_top_k_equals_brute_force_over_all_passages(spec, k):
    pmap, Q, X, D, Qs = _corpus()
    how, n = parse_aggregation(spec)
    dense = PassageLeg(DenseLeg(DenseIndex.build(X, kind="flat")), pmap)
    sparse = PassageLeg(SparseLeg(SparseIndex.from_csr(D), None), pmap)
    S_dense = Q @ X.T
    S_sparse = (Qs @ D.T).toarray()
    for leg, q, S, matched in ((dense, Q, S_dense, None), (sparse, Qs, S_sparse, S_sparse > 0)):
        for allowed in (None, np.array([0, 2, 3, 5, 8, 13])):
            docs, scores = leg.search(q, k, allowed=allowed, aggregate=spec)
            want = _brute(S, pmap, how, n, allowed, matched)
            for qi in range(q.shape[0]):
                got = [(int(d), float(s)) for d, s in zip(docs[qi], scores[qi]) if d >= 0]
                top = want[qi][:k]
                assert [d for d, _ in got] == [d for d, _ in top], (leg.name, spec, k, qi)
                np.testing.assert_allclose([s for _, s in got], [s for _, s in top], rtol=1e-5, atol=1e-5)
    # document 0 really crowds the first rows: MaxP had to look past them
    assert set(pmap.doc[np.argsort(-S_dense[0])[:60]].tolist()) == {0}


def test_deleted_documents_lose_all_their_passages():
    pmap, Q, X, D, Qs = _corpus(1)
    dense_index, sparse_index = DenseIndex.build(X, kind="flat"), SparseIndex.from_csr(D)
    gone = [0, 4]
    dense_index.remove(pmap.rows_of(gone))
    sparse_index.delete(pmap.rows_of(gone))
    keep = [d for d in range(pmap.n_docs) if d not in gone]
    for leg, q, S, matched in ((PassageLeg(DenseLeg(dense_index), pmap), Q, Q @ X.T, None),
                               (PassageLeg(SparseLeg(sparse_index, None), pmap), Qs, (Qs @ D.T).toarray(),
                                (Qs @ D.T).toarray() > 0)):
        docs, scores = leg.search(q, 10)
        want = _brute(S, pmap, "maxp", 1, keep, matched)
        for qi in range(q.shape[0]):
            got = [int(d) for d in docs[qi] if d >= 0]
            assert not set(got) & set(gone)
            assert got == [d for d, _ in want[qi][:10]]


def test_best_passage_is_the_max_row():
    pmap, Q, X, D, Qs = _corpus(2)
    leg = PassageLeg(DenseLeg(DenseIndex.build(X, kind="flat")), pmap)
    S = Q @ X.T
    ids = [f"doc{i}" for i in range(pmap.n_docs)]
    for d in (0, 3, 7):
        rows = pmap.rows_of([d])
        m = leg.best_passage(Q[1], d, ids)
        best = int(rows[np.argmax(S[1, rows])])
        assert (m.row, m.id, m.ordinal) == (best, f"doc{d}#{best - rows[0]}", best - rows[0])
        assert m.score == pytest.approx(float(S[1, best]), rel=1e-5)


def test_aggregation_spellings():
    assert parse_aggregation(None) == ("maxp", 1) and parse_aggregation("FirstP") == ("firstp", 1)
    assert parse_aggregation("sum4") == ("sumk", 4) and parse_aggregation("sumk") == ("sumk", 3)
    for bad in ("meanp", "sum0", "sum", "max"):
        with pytest.raises(ValueError, match="maxp, firstp or sumN"):
            parse_aggregation(bad)


# ----------------------------------------------------------------------------- the index folder

def test_passage_map_round_trips_through_the_folder(tmp_path):
    from alignir.index.store import open_index, read_manifest, replace_part, write_index
    from alignir.index.lexical import LexicalLeg

    pmap, Q, X, D, Qs = _corpus(3)
    ids = [f"doc{i}" for i in range(pmap.n_docs)]
    with_spans = PassageMap.from_counts(pmap.counts, np.arange(pmap.n_rows) * 10, np.arange(pmap.n_rows) * 10 + 7)
    lexical = LexicalLeg(SparseIndex.from_csr(sp.random(pmap.n_docs, 5, density=0.5, format="csr",
                                                        dtype=np.float32, random_state=0)), list("abcde"))
    parts = {"sparse": SparseIndex.from_csr(D), "dense": DenseIndex.build(X), "lexical": lexical,
             "passages": with_spans}
    write_index(tmp_path / "idx", {"encoder": {"m": 1}}, ids, X, parts=parts)
    m = read_manifest(tmp_path / "idx")
    assert m["counts"] == {"docs": pmap.n_docs, "rows": pmap.n_rows}
    assert m["parts"]["passages"] == {"path": "passages", "rows": pmap.n_rows, "docs": pmap.n_docs, "spans": True}
    for sel in (None, ("sparse",), ()):
        st = open_index(tmp_path / "idx", parts=sel)
        back = st.passages
        assert np.array_equal(back.doc, pmap.doc) and np.array_equal(back.ordinal, pmap.ordinal)
        assert np.array_equal(back.start, with_spans.start) and back.span(5) == (50, 57)
        assert st.n_docs == pmap.n_docs and st.n_rows == pmap.n_rows
    # rows and documents are checked part by part
    with pytest.raises(ValueError, match=r"holds 20 rows, the index has \d+ rows \(passages\)"):
        write_index(tmp_path / "bad", {"encoder": {"m": 1}}, ids, X,
                    parts={**parts, "sparse": SparseIndex.from_csr(D[:20])})
    with pytest.raises(ValueError, match="dense_vectors must be"):
        write_index(tmp_path / "bad", {"encoder": {"m": 1}}, ids, X[:20], parts=parts)
    with pytest.raises(ValueError, match="cannot be replaced"):
        replace_part(tmp_path / "idx", "passages", PassageMap.from_counts(np.ones(pmap.n_docs, int)))
    replace_part(tmp_path / "idx", "sparse", SparseIndex.from_csr(D * 2))  # a row part keeps its rows
    assert open_index(tmp_path / "idx").sparse.n_docs == pmap.n_rows
    # an index without the part: one row per document, as before
    write_index(tmp_path / "old", {"encoder": {"m": 1}}, ids, X[:pmap.n_docs],
                parts={"sparse": SparseIndex.from_csr(D[:pmap.n_docs])})
    st = open_index(tmp_path / "old")
    assert st.passages is None and st.n_rows == st.n_docs and "rows" not in st.manifest["counts"]


# ----------------------------------------------------------------------------- a real index

LONG = [" ".join(TINY_CORPUS[i:] + TINY_CORPUS[:i]) * 2 for i in range(len(TINY_CORPUS))]
SHORT = ["Wind tunnels measure heating.", "Plants make glucose."]
QUERIES = ["supersonic flow heating in a wind tunnel", "interest rates and the stock market", "proteins fold"]


@pytest.fixture(scope="module")
def long_index(tmp_path_factory, tiny_model):
    from alignir.retrieval.indexer import build_index

    root = tmp_path_factory.mktemp("passages")
    corpus = write_corpus(root / "corpus.jsonl", LONG + SHORT)
    stages: list[str] = []
    m = build_index(corpus, root / "idx", model="tiny", loaded=tiny_model, cache_dir=root / "cache",
                    embedder_options={"max_length": 64}, progress=False, on_stage=stages.append)
    return root, m, stages


def test_auto_splits_long_documents_and_says_so(long_index, tiny_model):
    from alignir.encoders.embedders import get_embedder
    from alignir.index.store import open_index

    root, m, stages = long_index
    st = m["build"]["passages"]
    window = get_embedder("prompteol", tiny_model, max_length=64).text_budget("document")
    assert st["window"] == window and st["stride"] == window // 2
    assert st["split_documents"] == len(LONG) and st["documents"] == len(LONG) + len(SHORT)
    assert m["counts"] == {"docs": 8, "rows": st["rows"]} and st["rows"] > 8
    assert st["token_factor"] > 1.5
    assert any(f"{len(LONG)} of 8 documents exceed" in s and f"-> {st['rows']} passages" in s for s in stages)
    stored = open_index(root / "idx", parts=("sparse",))  # the map comes with any row part
    pmap = stored.passages
    assert pmap.n_rows == stored.n_rows == stored.dense_vectors.shape[0] == stored.sparse.n_docs == st["rows"]
    assert pmap.counts[-2:].tolist() == [1, 1]  # the short documents stay whole
    texts = [json.loads(line)["text"] for line in open(root / "corpus.jsonl")]
    for r in range(pmap.n_rows):   # spans are the passages' text in the document
        start, end = pmap.span(r)
        assert 0 <= start < end <= len(texts[pmap.doc[r]])
    assert pmap.span(pmap.first_row[-1]) == (0, len(SHORT[-1]))
    full = open_index(root / "idx")
    assert full.lexical.n_docs == 8 and full.dense.n_docs == st["rows"]


def test_off_and_old_folders_have_one_row_per_document(long_index, tiny_model, tmp_path):
    from alignir.index.store import open_index
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    root, _, _ = long_index
    m = build_index(root / "corpus.jsonl", tmp_path / "off", model="tiny", loaded=tiny_model, passages="off",
                    cache_dir=root / "cache", embedder_options={"max_length": 64}, progress=False)
    assert "passages" not in m["parts"] and m["counts"] == {"docs": 8}
    stored = open_index(tmp_path / "off")
    assert stored.passages is None and stored.n_rows == 8
    hits = Searcher.open(tmp_path / "off", loaded=tiny_model).search(QUERIES[0], k=3, mode="dense", explain=True)
    assert len(hits) == 3 and all(h.passages is None for h in hits)


def test_searcher_maxp_equals_brute_force_over_the_stored_rows(long_index, tiny_model):
    from alignir.retrieval.searcher import Searcher

    root, _, _ = long_index
    s = Searcher.open(root / "idx", loaded=tiny_model)
    pmap, n = s.index.passages, s.index.n_rows
    batch = s.encode(QUERIES)
    rows = {"dense": s.index.dense.search(batch.legs["dense"], n), "sparse": s.index.sparse.search(batch.legs["sparse"], n)}
    for spec in ("maxp", "firstp", "sum2"):
        how, kk = parse_aggregation(spec)
        lists = s.leg_lists(QUERIES, ["dense", "sparse"], k=5, encoded=batch, passage_agg=spec)
        for leg, (r, sc) in rows.items():
            for qi in range(len(QUERIES)):
                S = np.full((1, n), -np.inf)
                ok = r[qi] >= 0
                S[0, r[qi][ok]] = sc[qi][ok]
                want = _brute(S, pmap, how, kk, matched=np.isfinite(S))[0][:5]
                got = sorted(lists[leg][qi].items(), key=lambda ds: (-ds[1], ds[0]))
                assert [d for d, _ in got] == [d for d, _ in want], (leg, spec, qi)
                np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-5, atol=1e-6)


def test_quality_harness_scores_a_passage_index_by_documents(long_index, tiny_model, tmp_path):
    """benchmarks/quality/bench_quality.py's Harness (sparse_defaults.py's too) re-sparsifies the stored
    rows; on a passage index its runs are documents scored by their best passage, equal to the
    Searcher's MaxP legs."""
    from benchmarks.quality.bench_quality import Harness

    from alignir.retrieval.config import IndexConfig
    from alignir.retrieval.searcher import Searcher

    root, m, _ = long_index
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text((root / "corpus.jsonl").read_text())
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n"
                                                for i, q in enumerate(QUERIES)))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                             + "".join(f"q{i}\td0\t1\n" for i in range(len(QUERIES))))
    h = Harness(str(root / "idx"), str(beir), "test", None, loaded=tiny_model)
    cfg = IndexConfig.from_manifest(m)
    s = Searcher.open(root / "idx", loaded=tiny_model)
    lists = s.leg_lists(QUERIES, ["dense", "sparse"], k=5)
    for leg, run in (("sparse", h.sparse_run(cfg.sparse)), ("dense", h.dense_run(**cfg.dense.build_options()))):
        for i in range(len(QUERIES)):
            want = sorted(((s.index.doc_ids[d], v) for d, v in lists[leg][i].items()), key=lambda ds: (-ds[1], ds[0]))
            got = list(run[f"q{i}"].items())[:5]
            assert_same_ranking(got, want, rtol=1e-5, where=(leg, i))  # the rotated long texts tie


def test_search_returns_documents_and_explain_names_the_passage(long_index, tiny_model):
    from alignir.retrieval.searcher import Searcher

    root, _, _ = long_index
    s = Searcher.open(root / "idx", loaded=tiny_model)
    texts = [json.loads(line)["text"] for line in open(root / "corpus.jsonl")]
    for mode in ("dense", "sparse", "hybrid", "dense+sparse+bm25"):
        hits = s.search(QUERIES[0], k=8, mode=mode, explain=True)
        assert len({h.id for h in hits}) == len(hits) and {h.id for h in hits} <= {f"d{i}" for i in range(8)}
        for h in hits:
            for leg in ("dense", "sparse"):
                if (leg in mode or mode == "hybrid") and h.leg_scores.get(leg) is not None:
                    m = h.passages[leg]
                    assert m.id.startswith(h.id + "#") and m.id == f"{h.id}#{m.ordinal}"
                    assert m.score == pytest.approx(h.leg_scores[leg], rel=1e-4, abs=1e-5)  # MaxP: the best passage
                    assert texts[h.doc_number][m.start:m.end]
        sparse_hits = [h for h in hits if h.leg_scores.get("sparse") is not None]
        for h in sparse_hits[:3]:  # the explanation is the matched passage's terms
            assert sum(c.contribution for c in h.explanation) == pytest.approx(h.passages["sparse"].score,
                                                                               rel=1e-4, abs=1e-5)
        assert hits[0].to_dict()["passages"]


def test_filter_and_delete_act_on_documents(long_index, tiny_model, tmp_path):
    import shutil

    from alignir.index.store import open_index
    from alignir.retrieval.indexer import delete_documents, resparsify
    from alignir.retrieval.searcher import Searcher

    root, _, _ = long_index
    idx = tmp_path / "idx"
    shutil.copytree(root / "idx", idx)
    s = Searcher.open(idx, loaded=tiny_model)
    allowed = ["d1", "d4", "d6"]
    for mode in ("dense", "sparse", "bm25", "dense+sparse+bm25"):
        hits = s.search(QUERIES[1], k=8, mode=mode, allowed_ids=allowed)
        assert hits and {h.id for h in hits} <= set(allowed)
    before = {mode: [h.id for h in s.search(QUERIES[1], k=8, mode=mode)] for mode in ("dense", "sparse", "bm25")}
    delete_documents(idx, ["d1", "d6"])
    stored = open_index(idx)
    rows = stored.passages.rows_of(stored.doc_numbers(["d1", "d6"]))
    assert stored.dense.deleted[rows].all() and not np.isin(rows, stored.sparse.live_doc_numbers()).any()
    s = Searcher.open(idx, loaded=tiny_model)
    for mode in ("dense", "sparse", "bm25", "dense+sparse+bm25"):
        ids = [h.id for h in s.search(QUERIES[1], k=8, mode=mode)]
        assert not {"d1", "d6"} & set(ids)
        if mode in before:
            assert ids == [d for d in before[mode] if d not in ("d1", "d6")]
    with pytest.raises(ValueError, match="not live|already deleted"):
        delete_documents(idx, ["d1"])
    # resparsify keeps the rows: the deleted passages stay out, searches still return documents
    m = resparsify(idx, loaded=tiny_model, doc_k=16)
    assert m["parts"]["sparse"]["n_postings"] <= 16 * m["counts"]["rows"]
    ids = [h.id for h in Searcher.open(idx, loaded=tiny_model).search(QUERIES[0], k=8, mode="sparse")]
    assert ids and len(set(ids)) == len(ids) and not {"d1", "d6"} & set(ids)


def test_pyserini_export_writes_one_passage_per_line(long_index, tmp_path):
    from alignir.index.store import open_index
    from alignir.retrieval.export import export_documents
    from alignir.retrieval.indexer import read_source

    root, _, _ = long_index
    contents = {d: doc.contents for d, doc in read_source(root / "corpus.jsonl").items()}
    out = export_documents(root / "idx", tmp_path / "ps", contents=contents)
    pmap = open_index(root / "idx").passages
    lines = [json.loads(line) for f in sorted((tmp_path / "ps").glob("docs-*.jsonl")) for line in open(f)]
    assert out["docs"] == 8 and out["passages"] == len(lines) == pmap.n_rows
    assert [r["id"] for r in lines] == [f"d{d}#{o}" for d, o in zip(pmap.doc, pmap.ordinal)]
    for r, rec in enumerate(lines):
        start, end = pmap.span(r)
        assert rec["contents"] == contents[f"d{pmap.doc[r]}"][start:end] and rec["vector"]


# ----------------------------------------------------------------------------- the CLI

@pytest.mark.e2e  # an index built through the CLI
def test_cli_builds_searches_and_explains_a_long_document_index(tmp_path, tiny_folder, monkeypatch):
    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    folder = tiny_folder  # the run's one copy of tiny_model, so its ONNX export is made once
    corpus = write_corpus(tmp_path / "corpus.jsonl", LONG + SHORT)
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    r = invoke("build-index", corpus, "--index", tmp_path / "idx", "--model", folder, "--max-length", "64",
               "--passages", "24:12", "--doc-k", "16")
    assert r.exit_code == 0, r.output
    assert "documents exceed" in r.output and "as " in r.output and "passages into" in r.output
    info = json.loads(invoke("info", "--index", tmp_path / "idx", "--json").stdout)
    assert info["build"]["passages"]["window"] == 24 and info["build"]["passages"]["stride"] == 12
    assert info["parts"]["passages"]["rows"] == info["counts"]["rows"]
    for agg in ("maxp", "firstp", "sum2"):
        r = invoke("search", QUERIES[0], "--index", tmp_path / "idx", "--mode", "dense+sparse+bm25", "--json",
                   "--explain", "--passage-agg", agg)
        assert r.exit_code == 0, r.output
        hits = json.loads(r.stdout)["hits"]
        assert hits and len({h["id"] for h in hits}) == len(hits)
        assert all(h["passages"]["sparse"]["id"].startswith(h["id"] + "#") for h in hits if "sparse" in h["passages"])
    r = invoke("search", QUERIES[0], "--index", tmp_path / "idx", "--explain")
    assert r.exit_code == 0 and "passage" in r.output
    r = invoke("search", QUERIES[0], "--index", tmp_path / "idx", "--passage-agg", "meanp")
    assert r.exit_code != 0 and "maxp, firstp or sumN" in r.output
    r = invoke("build-index", corpus, "--index", tmp_path / "bad", "--model", folder, "--max-length", "64",
               "--passages", "500")
    assert r.exit_code != 0 and "exceeds the encoder's text budget" in r.output
    r = invoke("delete", "d0", "d7", "--index", tmp_path / "idx")
    assert r.exit_code == 0, r.output
    r = invoke("search", QUERIES[0], "--index", tmp_path / "idx", "--json", "--top", "8")
    assert {h["id"] for h in json.loads(r.stdout)["hits"]} <= {f"d{i}" for i in range(1, 7)}


# ----------------------------------------------------------------------------- Milvus

@pytest.mark.milvus
def test_milvus_passage_collection_equals_the_folder(long_index, tiny_model, tmp_path):
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from alignir.retrieval.milvus import export_index
    from alignir.retrieval.searcher import Searcher

    root, _, _ = long_index
    uri = str(tmp_path / "m.db")
    summary = export_index(root / "idx", uri, progress=False)
    folder = Searcher.open(root / "idx", loaded=tiny_model)
    assert summary["passages"] == summary["count"] == folder.index.n_rows and summary["documents"] == 8
    milvus = Searcher.open(root / "idx", loaded=tiny_model, backend="milvus", uri=uri)
    try:
        for mode in ("dense", "sparse", "bm25", "hybrid", "dense+sparse+bm25"):
            for agg in ("maxp", "firstp", "sum2"):
                for allowed in (None, ["d0", "d2", "d5", "d7"]):
                    want = folder.batch_search(QUERIES, k=5, mode=mode, passage_agg=agg, allowed_ids=allowed)
                    got = milvus.batch_search(QUERIES, k=5, mode=mode, passage_agg=agg, allowed_ids=allowed)
                    for a, b in zip(want, got):
                        assert [h.id for h in a] == [h.id for h in b], (mode, agg)
                        np.testing.assert_allclose([h.score for h in b], [h.score for h in a], rtol=1e-4, atol=1e-5)
    finally:
        milvus.close()


def test_passage_config_spellings_and_round_trip():
    from alignir.retrieval.config import IndexConfig, PassageConfig

    assert PassageConfig.parse("auto") == PassageConfig() and PassageConfig.parse(None) == PassageConfig()
    assert PassageConfig.parse("off") == PassageConfig(split="off") == PassageConfig.parse("none")
    assert PassageConfig.parse("256") == PassageConfig(split="on", window=256, stride=128)
    assert PassageConfig.parse("256:64") == PassageConfig(split="on", window=256, stride=64)
    for bad in ("256:300", "-5", "x", "64:0"):
        with pytest.raises(ValueError, match="passages"):
            PassageConfig.parse(bad)
    with pytest.raises(ValueError, match="aggregation"):
        PassageConfig(aggregate="meanp")
    cfg = IndexConfig(passages=PassageConfig(split="on", window=96, stride=48, aggregate="sum2"))
    assert IndexConfig.from_dict(cfg.to_dict()) == cfg
    old = cfg.to_dict()
    del old["passages"]  # a config saved before passages existed: one row per document
    assert IndexConfig.from_dict(old).passages == PassageConfig(split="off")
