"""The BM25 lexical leg: weights equal to bm25s, the index-folder component (mmap, checksums,
resparsify), the bm25 / fused modes of the Searcher, missing-leg errors, filters."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from alignir.index.store import open_index, replace_part
from alignir.errors import CorruptIndexError
from alignir.retrieval import fusion
from alignir.retrieval.bm25 import BM25, QueryVectorizer, bm25_weights, lexical_leg
from alignir.retrieval.config import FusionConfig, SparseConfig
from alignir.retrieval.indexer import add_lexical, build_index, resparsify
from alignir.retrieval.searcher import Searcher, parse_mode
from alignir.retrieval.fusion_plan import fuse_legs

from conftest import share_model_cache, TINY_CORPUS, write_corpus, write_queries

DOCS = TINY_CORPUS + [
    "Plants need light; light drives photosynthesis in green plants and algae.",
    "Interest rates, interest rates and more interest rates moved the market.",
    "The wind tunnel measured heating of the plate at supersonic speed.",
    "and the of to",  # only stopwords: length 0 after analysis
]
QUERIES = ["light plants plants", "interest rates stock market", "supersonic wind tunnel heating",
           "protein folding amino acids", "zzzunknown words only"]


def _bm25s_scores(texts, queries):
    """bm25s's own score of every (query, document) pair, through retrieval.bm25.BM25."""
    ref = BM25().index([str(i) for i in range(len(texts))], texts, show_progress=False)
    out = np.zeros((len(queries), len(texts)), dtype=np.float32)
    for i, words in enumerate(ref.analyzer.words(queries)):
        ids = ref._model.get_tokens_ids(words)
        if ids:
            out[i] = ref._model.get_scores_from_ids(ids)
    return out, ref


def _leg_scores(leg, queries):
    Q = QueryVectorizer(leg.vocab, leg.params)(queries)
    docs, scores = leg.index.search(Q, leg.n_docs)
    out = np.zeros((len(queries), leg.n_docs), dtype=np.float32)
    for i in range(len(queries)):
        keep = docs[i] >= 0
        out[i, docs[i][keep]] = scores[i][keep]
    return out, docs, scores


# ------------------------------------------------------------------ equal to bm25s


def test_leg_scores_equal_bm25s():
    leg = lexical_leg(DOCS)
    ours, docs, scores = _leg_scores(leg, QUERIES)
    ref, _ = _bm25s_scores(DOCS, QUERIES)
    assert ref[:4].max() > 0 and not ref[4].any()  # the last query has no known word
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    # ranking: by score, ties by doc number; only documents sharing a word come back
    for i in range(len(QUERIES)):
        expected = [j for j in sorted(range(len(DOCS)), key=lambda j: (-ref[i, j], j)) if ref[i, j] > 0]
        got = [int(d) for d in docs[i] if d >= 0]
        assert got == expected


def test_repeated_query_words_count_like_bm25s():
    leg = lexical_leg(DOCS)
    once, _, _ = _leg_scores(leg, ["plants"])
    twice, _, _ = _leg_scores(leg, ["plants plants"])
    ref, _ = _bm25s_scores(DOCS, ["plants plants"])
    np.testing.assert_allclose(twice, 2 * once, rtol=1e-6)
    np.testing.assert_allclose(twice, ref, rtol=1e-6)


def test_doc_weights_bitwise_equal_bm25s_matrix():
    leg = lexical_leg(DOCS)
    _, ref = _bm25s_scores(DOCS, ["x"])
    m = ref._model.scores
    csc = sp.csc_matrix((m["data"], m["indices"], m["indptr"]),
                        shape=(m["num_docs"], len(m["indptr"]) - 1)).tocoo()
    term = {i: t for t, i in ref._model.vocab_dict.items()}
    col = np.array([leg.vocab.index(term[c]) for c in csc.col])
    theirs = sp.csr_matrix((csc.data, (csc.row, col)), shape=(len(DOCS), leg.n_terms))
    ours = sp.vstack([sp.csr_matrix((w, t, [0, len(t)]), shape=(1, leg.n_terms))
                      for t, w in (leg.index.doc_vector(d) for d in range(len(DOCS) - 1))]
                     + [sp.csr_matrix((1, leg.n_terms), dtype=np.float32)])
    assert (ours != theirs).nnz == 0 and ours.nnz == theirs.nnz


def test_bm25_weights_formula():
    # doc 0: term 0 twice, term 1 once (dl 3); doc 1: term 1 once (dl 1); avgdl 2, N 2
    W = bm25_weights([[0, 1, 0], [1]], 3, k1=0.9, b=0.4).toarray()
    idf0, idf1 = np.log(1 + (2 - 1 + 0.5) / 1.5), np.log(1 + (2 - 2 + 0.5) / 2.5)
    norm0, norm1 = 0.9 * (0.6 + 0.4 * 3 / 2), 0.9 * (0.6 + 0.4 * 1 / 2)
    expected = [[idf0 * 2 / (2 + norm0), idf1 * 1 / (1 + norm0), 0], [0, idf1 / (1 + norm1), 0]]
    np.testing.assert_allclose(W, expected, rtol=1e-6)
    assert W.dtype == np.float32
    with pytest.raises(ValueError, match="token ids"):
        bm25_weights([[3]], 3)


def test_vectorizer_ignores_unknown_words_and_rejects_unknown_analyser():
    leg = lexical_leg(DOCS)
    Q = QueryVectorizer(leg.vocab, leg.params)(["zzzunknown plants", "zzzunknown"])
    assert Q.shape == (2, leg.n_terms) and Q[0].nnz == 1 and Q[1].nnz == 0
    assert leg.vocab[Q[0].indices[0]] == "plant"
    with pytest.raises(ValueError, match="analyser"):
        QueryVectorizer(leg.vocab, {**leg.params, "stemmer": "snowball"})


# ------------------------------------------------------------------ index folder


@pytest.fixture()
def corpus_file(tmp_path):
    return write_corpus(tmp_path / "corpus.jsonl", DOCS[:-1])


@pytest.fixture()
def built(tmp_path, corpus_file, tiny_model):
    build_index(corpus_file, tmp_path / "idx", model="tiny", sparse=SparseConfig.paper(doc_k=24, query_m=5),
                loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    return tmp_path / "idx"


def test_store_round_trip_mmap_and_params(built):
    st = open_index(built)
    leg = st.lexical
    assert leg is not None and leg.n_docs == st.n_docs == len(DOCS) - 1
    entry = st.manifest["parts"]["lexical"]
    assert entry["params"]["k1"] == 0.9 and entry["params"]["b"] == 0.4 and leg.params == entry["params"]
    assert entry["n_terms"] == leg.n_terms and entry["path"] == "lexical"
    assert "lexical/vocab.json" in st.manifest["files"]
    assert isinstance(leg.index._segments[0].weights, np.memmap)
    fresh = lexical_leg(DOCS[:-1])
    assert leg.vocab == fresh.vocab
    np.testing.assert_array_equal(_leg_scores(leg, QUERIES)[0], _leg_scores(fresh, QUERIES)[0])
    assert open_index(built, parts=("sparse", "dense")).lexical is None


def test_corrupt_vocab_or_postings_detected(built):
    vocab = built / "lexical" / "vocab.json"
    text = vocab.read_text()
    vocab.write_text(text.replace('"plant"', '"plank"'))
    with pytest.raises(CorruptIndexError, match="checksum"):
        open_index(built)
    vocab.write_text(text)
    open_index(built)
    post = next((built / "lexical" / "postings").glob("seg*_weights.npy"))
    raw = bytearray(post.read_bytes())
    raw[-1] ^= 0xFF
    post.write_bytes(bytes(raw))
    with pytest.raises(CorruptIndexError, match="checksum"):
        open_index(built)


def test_resparsify_keeps_lexical_leg(built, tiny_model):
    before = open_index(built)
    files = {k: v for k, v in before.manifest["files"].items() if k.startswith("lexical/")}
    resparsify(built, loaded=tiny_model, doc_k=12)
    after = open_index(built)
    assert after.params["sparse"]["doc_k"] == 12
    assert after.lexical is not None and after.manifest["parts"]["lexical"] == before.manifest["parts"]["lexical"]
    assert {k: v for k, v in after.manifest["files"].items() if k.startswith("lexical/")} == files


def test_no_lexical_build_then_add_and_remove(tmp_path, corpus_file, tiny_model):
    idx = tmp_path / "plain"
    build_index(corpus_file, idx, model="tiny", sparse=SparseConfig.paper(doc_k=24, query_m=5),
                loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False, lexical=False)
    st = open_index(idx)
    assert st.lexical is None and "lexical" not in st.manifest["parts"]
    s = Searcher.open(idx, loaded=tiny_model)
    for mode in ("bm25", "dense+bm25", "dense+sparse+bm25"):
        with pytest.raises(ValueError, match="--lexical"):
            s.search(QUERIES[0], mode=mode)
    assert s.search(QUERIES[0], mode="hybrid")
    add_lexical(idx, loaded=tiny_model)  # from the corpus recorded in the manifest
    s = Searcher.open(idx, loaded=tiny_model)
    ref, _ = _bm25s_scores(DOCS[:-1], QUERIES[:1])
    hits = s.search(QUERIES[0], k=3, mode="bm25")
    expected = np.sort(ref[0][ref[0] > 0])[::-1][:3]
    np.testing.assert_allclose([h.score for h in hits], expected, rtol=1e-6)
    replace_part(idx, "lexical", None)
    assert open_index(idx).lexical is None


# ------------------------------------------------------------------ modes and fusion


def test_parse_mode():
    assert parse_mode("hybrid") == ("dense", "sparse")
    assert parse_mode("bm25+dense") == ("dense", "bm25")
    assert parse_mode("dense+sparse+bm25") == ("dense", "sparse", "bm25")
    for bad in ("bm25+bm25", "dense+", "splade", ""):
        with pytest.raises(ValueError, match="mode"):
            parse_mode(bad)


def _manual_minmax(lists, weights):
    """Σ_i w_i · (s_i - min_i) / (max_i - min_i), missing -> 0 (hand computation)."""
    docs = set().union(*lists)
    out = {}
    for d in docs:
        total = 0.0
        for run, w in zip(lists, weights):
            lo, hi = min(run.values()), max(run.values())
            total += w * ((run[d] - lo) / (hi - lo) if d in run else 0.0)
        out[d] = total
    return out


def test_three_legs_fused_as_hand_computation(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    q = QUERIES[2]
    legs = s.leg_lists([q], ("dense", "sparse", "bm25"), k=s.index.n_docs)
    lists = [legs[leg][0] for leg in ("dense", "sparse", "bm25")]
    assert all(lists)
    for weights, w in ((None, [1 / 3] * 3), ({"dense": 2, "sparse": 1, "bm25": 1}, [0.5, 0.25, 0.25])):
        hits = s.search(q, k=s.index.n_docs, mode="dense+sparse+bm25", fusion="minmax",
                        weights=weights, depth=s.index.n_docs)
        manual = _manual_minmax(lists, w)
        assert [h.doc_number for h in hits] == [d for d, _ in fusion.ranked(manual)]
        for h in hits:
            assert h.score == pytest.approx(manual[h.doc_number], abs=1e-9)
            assert h.dense_score == lists[0].get(h.doc_number)
            assert h.sparse_score == lists[1].get(h.doc_number)
            assert h.bm25_score == lists[2].get(h.doc_number)
    rrf = s.search(q, k=5, mode="dense+sparse+bm25", fusion="rrf", depth=s.index.n_docs)
    manual = {}
    for run in lists:
        for rank, (d, _) in enumerate(fusion.ranked(run), start=1):
            manual[d] = manual.get(d, 0.0) + 1.0 / (60 + rank)
    assert [h.doc_number for h in rrf] == [d for d, _ in fusion.ranked(manual)][:5]
    # alpha given in a leg set weighs dense, the others share the rest
    a = s.search(q, k=s.index.n_docs, mode="dense+sparse+bm25", alpha=0.6, depth=s.index.n_docs)
    manual = _manual_minmax(lists, [0.6, 0.2, 0.2])
    assert [h.doc_number for h in a] == [d for d, _ in fusion.ranked(manual)]


def _manual_zscore(lists, weights):
    """Σ_i w_i · (s_i - mean_i) / std_i (population std); a doc missing from list i gets
    list i's lowest z-score (hand computation)."""
    stats = [(np.mean(list(r.values())), np.std(list(r.values())), min(r.values())) for r in lists]
    return {d: sum(w * ((r.get(d, lo) - m) / sd) for r, w, (m, sd, lo) in zip(lists, weights, stats))
            for d in set().union(*lists)}


def test_leg_sets_with_bm25_zscore_option_keeps_the_fixed_weights(built, tiny_model):
    from alignir.retrieval.fusion_plan import LEG_SET_WEIGHTS

    s = Searcher.open(built, loaded=tiny_model)
    q = QUERIES[2]
    legs = s.leg_lists([q], ("dense", "sparse", "bm25"), k=s.index.n_docs)
    for mode, expect in (("dense+sparse+bm25", [0.2, 0.2, 0.6]), ("dense+bm25", [0.4, 0.6]),
                         ("sparse+bm25", [0.4, 0.6])):
        names = mode.split("+")
        assert LEG_SET_WEIGHTS["zscore"][tuple(names)] == dict(zip(names, expect))
        hits = s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs, fusion="zscore")
        manual = _manual_zscore([legs[leg][0] for leg in names], expect)
        assert [h.doc_number for h in hits] == [d for d, _ in fusion.ranked(manual)]
        assert [h.score for h in hits] == pytest.approx([manual[h.doc_number] for h in hits], abs=1e-9)
    # any explicit weights replace the base weights; hybrid and legs without BM25 keep theirs
    eq = s.search(q, k=5, mode="dense+bm25", fusion="zscore", weights={"dense": 1, "bm25": 1})
    assert eq != s.search(q, k=5, mode="dense+bm25", fusion="zscore")
    assert s.search(q, k=5, mode="dense+sparse") == s.search(q, k=5, mode="dense+sparse", fusion="minmax")


def test_leg_sets_with_bm25_default_to_calibrated_else_agree(built, tiny_model):
    """The default: "calibrated" (z-score, each LLM leg's weight gated by the index's stored
    agreement with BM25, fusion_plan.calibrated_weights, times each query's guard,
    fusion_guard.CALIBRATED_GUARD) on an index with a calibration; on one
    without (built before it) "agree", each LLM leg gated per query by its agreement with the
    BM25 leg (fusion.agree over the leg lists with LEG_SET_WEIGHTS["agree"] and LEG_SET_AGREE)."""
    from alignir.index.store import update_params
    from alignir.retrieval.fusion_guard import CALIBRATED_GUARD
    from alignir.retrieval.fusion_plan import LEG_SET_AGREE, LEG_SET_DEFAULTS, LEG_SET_WEIGHTS, calibrated_weights

    s = Searcher.open(built, loaded=tiny_model)
    assert s.calibration is not None and set(s.calibration.agreement) == {"dense", "sparse"}
    for q in QUERIES:
        legs = s.leg_lists([q], ("dense", "sparse", "bm25"), k=s.index.n_docs)
        for mode in ("dense+sparse+bm25", "dense+bm25", "sparse+bm25"):
            names = tuple(mode.split("+"))
            base = LEG_SET_WEIGHTS["calibrated"][names]
            assert LEG_SET_DEFAULTS[names] == ("calibrated", base)
            runs = [legs[leg][0] for leg in names]
            w = calibrated_weights(names, [base[leg] / sum(base.values()) for leg in names], s.calibration)
            w = [x * f for x, f in zip(w, CALIBRATED_GUARD.factors(names, runs, s.calibration, s.index.n_docs))]
            hits = s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs)
            keep = [i for i, r in enumerate(runs) if r]
            manual = (dict(fusion.ranked(runs[keep[0]])) if len(keep) == 1  # one list: as it is
                      else fusion.zscore([runs[i] for i in keep], weights=[w[i] for i in keep]))
            assert [h.doc_number for h in hits] == list(manual)
            assert [h.score for h in hits] == pytest.approx(list(manual.values()), abs=1e-12)
            assert hits == s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs, fusion="calibrated")
    update_params(built, {"fusion_calibration": None})  # an index from before the calibration
    s = Searcher.open(built, loaded=tiny_model)
    assert s.calibration is None
    for q in QUERIES:
        legs = s.leg_lists([q], ("dense", "sparse", "bm25"), k=s.index.n_docs)
        for mode in ("dense+sparse+bm25", "dense+bm25", "sparse+bm25"):
            names = tuple(mode.split("+"))
            base = LEG_SET_WEIGHTS["agree"][names]
            runs = [legs[leg][0] for leg in names]
            w = [base[leg] / sum(base.values()) for leg in names]
            hits = s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs)
            if not runs[-1]:  # no query word in the BM25 vocabulary: plain z-score of the rest
                continue
            manual = fusion.agree(runs, weights=w, params=LEG_SET_AGREE[names])
            assert [h.doc_number for h in hits] == list(manual)
            assert [h.score for h in hits] == pytest.approx(list(manual.values()), abs=1e-12)
            assert hits == s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs, fusion="agree")
            assert hits == s.search(q, k=s.index.n_docs, mode=mode, depth=s.index.n_docs, fusion="calibrated")
    for method in ("agree", "calibrated"):
        with pytest.raises(ValueError, match=f"{method}.*bm25"):
            s.search(QUERIES[0], k=5, mode="dense+sparse", fusion=method)


def test_hybrid_unchanged_by_the_leg(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    lists = s.leg_lists([QUERIES[0]], ("dense", "sparse"), k=100)
    for alpha in (0.3, 0.5):
        hy = s.search(QUERIES[0], k=8, mode="hybrid", alpha=alpha)
        old = fusion.fuse([lists["dense"][0], lists["sparse"][0]], method="minmax", alpha=alpha)
        assert [(h.doc_number, h.score) for h in hy] == fusion.ranked(old, 8)
        assert all(h.bm25_score is None for h in hy)


def test_bm25_mode_skips_the_model_and_matches_bm25s(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    batch = s.encode(QUERIES, legs=("bm25",))
    assert set(batch.legs) == {"bm25"} and batch.legs["bm25"].shape[0] == len(QUERIES)
    ref, _ = _bm25s_scores(DOCS[:-1], QUERIES)
    for i, hits in enumerate(s.batch_search(QUERIES, k=20, mode="bm25", encoded=batch)):
        expected = [j for j in sorted(range(ref.shape[1]), key=lambda j: (-ref[i, j], j)) if ref[i, j] > 0]
        assert [h.doc_number for h in hits] == expected
        assert [h.bm25_score for h in hits] == pytest.approx([ref[i, j] for j in expected], rel=1e-6)
    hits = s.search(QUERIES[0], k=2, mode="bm25", explain=True)
    assert {c.string for c in hits[0].explanation} <= {"light", "plant"}
    assert sum(c.contribution for c in hits[0].explanation) == pytest.approx(hits[0].score, rel=1e-6)


def test_allowed_ids_hold_for_the_bm25_leg(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    allowed = {"d3", "d6"}
    for mode in ("bm25", "dense+bm25", "sparse+bm25", "dense+sparse+bm25"):
        hits = s.search(QUERIES[0], k=20, mode=mode, allowed_ids=allowed)
        assert hits and {h.id for h in hits} <= allowed


def test_fuse_legs_drops_empty_lists():
    cfg = FusionConfig(method="minmax")
    assert fuse_legs([{1: 2.0, 2: 1.0}, {}, {}], [1 / 3] * 3, cfg) == {1: 2.0, 2: 1.0}
    two = fuse_legs([{1: 2.0, 2: 1.0}, {}, {2: 5.0, 3: 1.0}], [0.5, 0.25, 0.25], cfg)
    assert two == fusion.fuse([{1: 2.0, 2: 1.0}, {2: 5.0, 3: 1.0}], method="minmax", weights=[0.5, 0.25])


def test_weights_validated(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    with pytest.raises(ValueError, match="missing"):
        s.search(QUERIES[0], mode="dense+bm25", weights={"dense": 1.0})
    with pytest.raises(ValueError, match="unknown"):
        s.search(QUERIES[0], mode="dense+bm25", weights={"dense": 1.0, "bm25": 1, "splade": 1})
    with pytest.raises(ValueError, match=">= 0"):
        s.search(QUERIES[0], mode="dense+bm25", weights={"dense": -1.0, "bm25": 1})
    # one leg needs no weight; hybrid keeps alpha whatever the weights
    w = {"dense": 0.9, "sparse": 0.05, "bm25": 0.05}
    assert s.search(QUERIES[0], mode="bm25", weights=w) == s.search(QUERIES[0], mode="bm25")
    assert s.search(QUERIES[0], mode="hybrid", weights=w) == s.search(QUERIES[0], mode="hybrid")


# ------------------------------------------------------------------ CLI


def test_cli_lexical_cycle(tmp_path, monkeypatch, tiny_folder):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    hf = tiny_folder  # the run's one copy of tiny_model, so its ONNX export is made once
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", DOCS[:-1])
    write_queries(beir / "queries.jsonl", QUERIES[:4])
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq0\td6\t1\nq1\td1\t1\nq2\td2\t1\nq3\td4\t1\n")
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a], catch_exceptions=False)  # noqa: E731
    idx = tmp_path / "idx"
    assert run("build-index", beir, "--index", idx, "--model", hf, "--no-lexical").exit_code == 0
    r = run("search", "plants", "--index", idx, "--mode", "dense+bm25")
    assert r.exit_code != 0 and "--lexical" in r.output and "Traceback" not in r.output
    r = run("eval", "--index", idx, "--dataset", beir, "--json")
    assert r.exit_code == 0 and set(json.loads(r.stdout)["metrics"]) == {"hybrid", "sparse", "dense"}
    r = run("add-lexical", "--index", idx)
    assert r.exit_code == 0, r.output
    assert "bm25" in run("info", "--index", idx).output
    r = run("search", "light plants", "--index", idx, "--mode", "dense+sparse+bm25", "--json",
            "--weights", "dense=1,sparse=1,bm25=2")
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)["hits"]
    assert hits[0]["bm25_score"] is not None and {"dense_score", "sparse_score"} <= set(hits[0])
    r = run("eval", "--index", idx, "--dataset", beir, "--json", "--bm25")
    metrics = json.loads(r.stdout)["metrics"]
    assert set(metrics) == {"hybrid", "sparse", "dense", "bm25", "dense+bm25", "sparse+bm25",
                            "dense+sparse+bm25", "bm25s"}
    assert metrics["bm25"] == metrics["bm25s"]
    assert run("delete", "d1", "--index", idx).exit_code == 0  # q1's relevant document
    out = tmp_path / "after.trec"
    r = run("eval", "--index", idx, "--dataset", beir, "--json", "--bm25", "--mode", "bm25", "--run", out)
    metrics = json.loads(r.stdout)["metrics"]
    assert metrics["bm25"] == metrics["bm25s"]  # the anchor ranks the index's live documents, as the leg does
    assert "d1" not in out.with_name("after.bm25s.trec").read_text().split()
    r = run("eval", "--index", idx, "--dataset", beir, "--mode", "bm25+bm25")
    assert r.exit_code != 0 and "unknown mode" in r.output
