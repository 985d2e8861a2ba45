"""The Milvus backend gives the folder's hits and scores where an audit found it did not (a leg
that finds nothing, exact ties, filters given as an iterator, passage searches past Milvus'
top-k limit), and checks its input as the folder does, on the client-side fusion (the default)
and, where they apply, on the server-side RRF (``server_fusion=True``). Tiny random Llama +
Milvus Lite."""
from __future__ import annotations


import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from alignir.errors import AlignirError, InvalidInputError  # noqa: E402
from alignir.retrieval.config import SparseConfig  # noqa: E402
from alignir.retrieval.indexer import build_index, delete_documents  # noqa: E402
from alignir.retrieval.milvus import export_index  # noqa: E402
from alignir.retrieval.milvus_search import MilvusSearcher  # noqa: E402
from alignir.retrieval.searcher import Searcher  # noqa: E402

from conftest import TINY_CORPUS, assert_same_ranking, write_corpus  # noqa: E402

pytestmark = [pytest.mark.milvus, pytest.mark.usefixtures("one_thread")]

CONFIG = SparseConfig().with_changes(doc_k=24, query_m=5)
TEXTS = TINY_CORPUS + [t.upper() for t in TINY_CORPUS]  # d0..d11, no two identical
QUERIES = ["light and carbon in plants", "supersonic wind tunnel", "proteins fold", "zzzz qqqq"]


def _same(want, got, where=None):
    assert_same_ranking([(h.id, h.score) for h in got], [(h.id, h.score) for h in want], rtol=1e-5,
                        min_scale=1.0, where=where)


def _build(root, tiny_model, texts, **kw):
    corpus = write_corpus(root / "corpus.jsonl", texts)
    build_index(corpus, root / "idx", model="tiny", loaded=tiny_model, cache_dir=root / "cache", sparse=CONFIG,
                progress=False, **kw)
    return root / "idx"


@pytest.fixture(scope="module")
def flat(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("audit_milvus_flat")
    idx = _build(root, tiny_model, TEXTS)
    uri = str(root / "flat.db")
    export_index(idx, uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    milvus = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    server = MilvusSearcher.from_searcher(folder, uri=uri, server_fusion=True)
    yield root, folder, milvus, server
    server.close()
    milvus.close()


def test_rrf_when_one_leg_finds_nothing_keeps_the_folder_scores(flat):
    """The folder's fuse_legs drops an empty leg list and returns the other leg's raw scores;
    Milvus' hybrid_search RRF-scores the single remaining list instead (here: the BM25 leg finds
    nothing among the allowed documents), so RRF is fused client-side by default."""
    _, folder, milvus, _ = flat
    allowed = ["d3", "d4"]  # no word of QUERIES[0] / QUERIES[1] in either
    assert all(not run for run in folder.leg_lists(QUERIES[:2], ["bm25"], k=10, allowed_ids=allowed)["bm25"])
    want = folder.batch_search(QUERIES[:2], k=5, mode="dense+bm25", fusion="rrf", allowed_ids=allowed)
    got = milvus.batch_search(QUERIES[:2], k=5, mode="dense+bm25", fusion="rrf", allowed_ids=allowed)
    for i, (a, b) in enumerate(zip(want, got)):
        _same(a, b, i)


def test_rrf_when_deleted_documents_held_the_query_words_keeps_the_folder_scores(tmp_path, tiny_model):
    """The same without a filter: the only documents with the query's BM25 words were deleted
    (the vocabulary keeps the words, so the query vector is not empty: Milvus fuses it)."""
    idx = _build(tmp_path, tiny_model, TEXTS)
    delete_documents(idx, ["d2", "d8"])  # the two wind-tunnel documents
    uri = str(tmp_path / "del.db")
    export_index(idx, uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    milvus = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    try:
        q = ["supersonic wind tunnel"]
        assert folder.encode(q, ["bm25"]).legs["bm25"].nnz > 0
        assert not folder.leg_lists(q, ["bm25"], k=10)["bm25"][0]
        for mode in ("dense+bm25", "dense+sparse+bm25"):
            _same(folder.search(q[0], k=5, mode=mode, fusion="rrf"), milvus.search(q[0], k=5, mode=mode, fusion="rrf"),
                  mode)
    finally:
        milvus.close()


@pytest.mark.parametrize("server", [False, True])
def test_rrf_allowed_ids_as_an_iterator_filters_every_query(flat, server):
    """The server-side RRF handed ``allowed_ids`` to the client-side fallback (queries with an
    empty or signed sparse vector) first, which consumed an iterator; the server-side queries
    then saw no allowed document and got no hits at all."""
    _, folder, client, fused_in_milvus = flat
    milvus = fused_in_milvus if server else client
    allowed = ["d0", "d1", "d2", "d6", "d8"]
    want = folder.batch_search(QUERIES, k=3, mode="dense+bm25", fusion="rrf", allowed_ids=iter(allowed))
    got = milvus.batch_search(QUERIES, k=3, mode="dense+bm25", fusion="rrf", allowed_ids=iter(allowed))
    assert [len(h) for h in got] == [len(h) for h in want] == [3, 3, 3, 3]
    assert all({h.id for h in hits} <= set(allowed) for hits in got)
    if not server:  # the server-side RRF fuses a leg that finds nothing (query 2's BM25) as RRF
        for i, (a, b) in enumerate(zip(want, got)):
            _same(a, b, i)


@pytest.mark.parametrize("server", [False, True])
@pytest.mark.parametrize("case", ["fewer rows", "more rows", "no dense"])
def test_rrf_checks_the_encoded_batch_like_the_folder(flat, case, server):
    """The server-side RRF path never checked ``encoded`` against the queries: a short batch was
    an IndexError traceback, a long one silently used, one without dense vectors a TypeError.
    The folder (and Milvus' other paths) raise InvalidInputError."""
    _, folder, client, fused_in_milvus = flat
    milvus = fused_in_milvus if server else client
    texts = QUERIES[:3]
    encoded = {"fewer rows": lambda: folder.encode(texts[:2]), "more rows": lambda: folder.encode(QUERIES),
               "no dense": lambda: folder.encode(texts, ["sparse", "bm25"])}[case]()
    with pytest.raises(InvalidInputError, match="encoded batch"):
        folder.batch_search(texts, k=3, mode="dense+bm25", fusion="rrf", encoded=encoded)
    with pytest.raises(InvalidInputError, match="encoded batch"):
        milvus.batch_search(texts, k=3, mode="dense+bm25", fusion="rrf", encoded=encoded)


def test_rrf_exact_duplicate_documents_get_the_folder_scores(tmp_path, tiny_model):
    """Milvus ranks exactly tied documents (duplicates, common in real corpora) in its own order
    inside each leg, ours by doc number, so the server-side RRF gives the copies other fused
    scores and another copy enters the top k (not a float near-tie): the default fuses client-side.
    Milvus' batched dense scores of identical documents may still differ by one float32 ulp
    (0.60511798 vs 0.60511792 here), which RRF turns into other ranks, so copies may trade places
    and fused scores: the top k holds the folder's texts. The capitals copies are near
    duplicates here, read as given (text form "off"): under "auto" the LLM reads them as the
    originals, so they join the exact ties, and an ulp between tied copies of two texts decides
    which text RRF keeps at the k-th place."""
    texts = TINY_CORPUS + [t.upper() for t in TINY_CORPUS] + [TINY_CORPUS[2]] * 2
    idx = _build(tmp_path, tiny_model, texts, text_form="off")
    uri = str(tmp_path / "dup.db")
    export_index(idx, uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    milvus = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    try:
        for mode in ("hybrid", "dense+bm25", "dense+sparse+bm25"):
            want = folder.batch_search(QUERIES, k=6, mode=mode, fusion="rrf")
            got = milvus.batch_search(QUERIES, k=6, mode=mode, fusion="rrf")
            for i, (a, b) in enumerate(zip(want, got)):
                assert sorted(texts[h.doc_number] for h in b) == sorted(texts[h.doc_number] for h in a), (mode, i)
    finally:
        milvus.close()


LONG = [" ".join(TINY_CORPUS[i:] + TINY_CORPUS[:i]) * 2 for i in range(len(TINY_CORPUS))]


def test_passage_search_past_the_topk_limit_is_not_silently_cut(tmp_path, tiny_model, monkeypatch):
    """The passage row search capped its depth at Milvus' top-k limit (16384) without telling
    index.passages.search_documents, which took the capped answer for an exhausted leg and
    returned fewer documents than k, or the wrong ones, silently. Simulated with the limit
    lowered to 4 rows; a real collection hits it when a MaxP/sumN search needs more than 16,384
    passages (e.g. long documents, k=100). Now the folder's answer or a clear error."""
    import alignir.retrieval.milvus_legs as ml

    idx = _build(tmp_path, tiny_model, LONG + ["Wind tunnels measure heating.", "Plants make glucose."],
                 embedder_options={"max_length": 64})
    uri = str(tmp_path / "p.db")
    export_index(idx, uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    assert folder.index.passages is not None and folder.index.passages.n_rows > 8
    milvus = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    monkeypatch.setattr(ml, "MAX_LIMIT", 4)
    try:
        want = folder.search(QUERIES[1], k=8, mode="dense")
        try:
            got = milvus.search(QUERIES[1], k=8, mode="dense")
        except AlignirError as e:
            assert "more than Milvus returns in one search (4)" in str(e)  # a clear error is an acceptable answer
            return
        _same(want, got)
    finally:
        milvus.close()


@pytest.fixture(scope="module")
def passages(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("audit_milvus_passages")
    idx = _build(root, tiny_model, LONG + ["Wind tunnels measure heating.", "Plants make glucose."],
                 embedder_options={"max_length": 64})
    uri = str(root / "p.db")
    export_index(idx, uri, progress=False)
    folder = Searcher.open(idx, loaded=tiny_model)
    milvus = Searcher.open(idx, loaded=tiny_model, backend="milvus", uri=uri)
    yield folder, milvus
    milvus.close()


@pytest.mark.parametrize("agg", ["maxp", "firstp", "sum2"])
def test_passage_legs_in_milvus_equal_the_folder(passages, agg):
    """An index with passages: the Milvus legs score passages, aggregated to documents as the
    folder's do (every aggregation, a filter, every mode), and name the same best passages."""
    folder, milvus = passages
    assert folder.index.passages is not None and folder.index.passages.n_rows > folder.index.n_docs
    allowed = [folder.index.doc_ids[i] for i in (0, 2, 5, 6)]
    for mode in ("dense", "sparse", "bm25", "hybrid", "dense+sparse+bm25"):
        for kw in ({}, {"allowed_ids": allowed}):
            want = folder.batch_search(QUERIES, k=5, mode=mode, passage_agg=agg, **kw)
            got = milvus.batch_search(QUERIES, k=5, mode=mode, passage_agg=agg, **kw)
            for a, b in zip(want, got):
                _same(a, b, where=(mode, agg, bool(kw)))
    want = folder.search(QUERIES[0], k=3, mode="dense+sparse", explain=True, passage_agg=agg)
    got = milvus.search(QUERIES[0], k=3, mode="dense+sparse", explain=True, passage_agg=agg)
    assert [h.passages for h in got] == [h.passages for h in want] and all(h.passages for h in got)
    assert [h.explanation for h in got] == [h.explanation for h in want]


def test_passage_ids_over_the_primary_key_limit_are_refused_before_any_insert(tmp_path, tiny_model):
    """A document id that fits Milvus' 1,024-byte primary key can still give passage ids
    (``doc_id#ordinal``) that do not: the export used to fail partway with a Milvus error."""
    import json

    long_id = "x" * 1023
    corpus = tmp_path / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for i, text in enumerate(LONG):
            f.write(json.dumps({"_id": long_id if i == 0 else f"d{i}", "title": "", "text": text}) + "\n")
    build_index(corpus, tmp_path / "idx", model="tiny", loaded=tiny_model, cache_dir=tmp_path / "cache",
                sparse=CONFIG, progress=False, embedder_options={"max_length": 64})
    uri = str(tmp_path / "long.db")
    with pytest.raises(InvalidInputError, match="passage ids are longer than 1024 bytes"):
        export_index(tmp_path / "idx", uri, progress=False)


def test_a_milvus_searcher_reads_capital_queries_as_its_folder_searcher(flat):
    """The index's word forms (encoders.word_forms) reach the Milvus searcher, and so does a
    folder searcher's choice to read capital queries by the fold alone."""
    root, folder, milvus, server = flat
    assert folder.word_forms is not None and milvus.word_forms == folder.word_forms == server.word_forms
    held = folder.word_forms
    folder.word_forms = None
    try:
        alone = MilvusSearcher.from_searcher(folder, uri=str(root / "flat.db"))
        assert alone.word_forms is None
        alone.close()
    finally:
        folder.word_forms = held
