"""The search-leg interface: a new leg plugs into the Searcher without editing it (a toy
brute-force leg over the stored dense vectors), hits carry per-leg scores, timings are per leg
name, and hits, query batches and timings name the legs (Hit.*_score for the built-in ones)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from alignir.encoders.aligned import TermContribution
from alignir.retrieval import fusion
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index
from alignir.retrieval.legs import Leg, QueryContext, register_leg, unregister_leg
from alignir.retrieval.searcher import Hit, QueryBatch, Searcher, Timings
from alignir.retrieval.fusion_plan import fuse_legs

from conftest import TINY_CORPUS

QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel"]


class RawDotLeg:
    """Toy leg: exact inner product of the query's h with the stored (raw, uncentred) document
    vectors, in numpy; it 'explains' a hit by the vector dimension that contributes most."""

    name = "rawdot"
    needs_model = True
    explains = True

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = np.asarray(vectors, dtype=np.float32)

    def encode(self, ctx: QueryContext) -> np.ndarray:
        return ctx.model_pass()[0]

    def search(self, encoded, k, allowed=None, threads=None):
        scores = encoded @ self.vectors.T
        if allowed is not None:
            mask = np.full(scores.shape[1], -np.inf, dtype=np.float32)
            mask[allowed] = 0.0
            scores = scores + mask
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(scores, order, axis=1).astype(np.float32)
        return np.where(np.isfinite(top), order, -1).astype(np.int64), top

    def explain(self, query_row, doc_number):
        parts = query_row * self.vectors[doc_number]
        j = int(np.argmax(parts))
        return [TermContribution(term=j, string=f"dim{j}", query_weight=float(query_row[j]),
                                 doc_weight=float(self.vectors[doc_number, j]), contribution=float(parts[j]))]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    from conftest import write_corpus

    root = tmp_path_factory.mktemp("legs")
    corpus = write_corpus(root / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, root / "idx", model="tiny", sparse=SparseConfig.paper(doc_k=24, query_m=5),
                loaded=tiny_model, cache_dir=root / "cache", progress=False)
    return root / "idx"


@pytest.fixture()
def rawdot():
    register_leg("rawdot", lambda stored, sparsifier: RawDotLeg(stored.dense_vectors))
    yield
    unregister_leg("rawdot")


def _brute(s: Searcher, q: str) -> dict[int, float]:
    h = s.embedder.encode_queries([q])[0]
    scores = (np.asarray(s.index.dense_vectors, np.float32) @ h).astype(np.float32)
    return {i: float(x) for i, x in enumerate(scores)}


def test_a_registered_leg_is_searched_fused_timed_and_explained(built, tiny_model, rawdot):
    s = Searcher.open(built, loaded=tiny_model)
    assert list(s.legs) == ["dense", "sparse", "bm25", "rawdot"] and isinstance(s.legs["rawdot"], Leg)
    n = s.index.n_docs
    for q in QUERIES:
        want = _brute(s, q)
        hits = s.search(q, k=n, mode="rawdot")
        assert [h.doc_number for h in hits] == [d for d, _ in fusion.ranked(want)]
        assert [h.score for h in hits] == [want[h.doc_number] for h in hits]
        assert all(h.leg_scores == {"rawdot": h.score} and h.dense_score is None for h in hits)
    # fused with a built-in leg, weighted by its name, as fuse_legs does by hand
    q = QUERIES[0]
    lists = s.leg_lists([q], ("sparse", "rawdot"), k=n)
    tm = Timings()
    hits = s.search(q, k=n, mode="rawdot+sparse", fusion="minmax", weights={"sparse": 1, "rawdot": 3},
                    depth=n, timings=tm, explain=True)
    from alignir.retrieval.config import FusionConfig

    manual = fuse_legs([lists["sparse"][0], lists["rawdot"][0]], [0.25, 0.75], FusionConfig(method="minmax"))
    assert [(h.doc_number, h.score) for h in hits] == fusion.ranked(manual, n)
    assert set(tm.legs) == {"sparse", "rawdot"} and tm.encode > 0
    for h in hits:  # the sparse leg comes first in the mode and explains
        assert h.leg_scores == {"sparse": lists["sparse"][0].get(h.doc_number),
                                "rawdot": lists["rawdot"][0].get(h.doc_number)}
        if h.sparse_score is not None:
            assert sum(c.contribution for c in h.explanation) == pytest.approx(h.sparse_score, rel=1e-5)
    # alone, the toy leg explains its own hits
    top = s.search(q, k=1, mode="rawdot", explain=True)[0]
    assert top.explanation[0].string.startswith("dim")
    assert top.to_dict()["rawdot_score"] == top.score and top.to_dict()["dense_score"] is None
    from alignir.retrieval.searcher import parse_mode

    assert parse_mode("rawdot+dense") == ("dense", "rawdot")  # what the CLI checks before opening
    # filters reach the new leg like the others
    allowed = {s.index.doc_ids[1], s.index.doc_ids[3]}
    assert {h.id for h in s.search(q, k=5, mode="rawdot+bm25", allowed_ids=allowed)} <= allowed


def test_without_registration_the_leg_is_unknown(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    with pytest.raises(ValueError, match="mode must be one of"):
        s.search(QUERIES[0], mode="rawdot")
    s2 = Searcher(s.index, s.embedder, s.sparsifier, legs={**s.legs, "rawdot": RawDotLeg(s.index.dense_vectors)})
    assert s2.search(QUERIES[0], k=3, mode="rawdot")  # or given to the constructor


def test_query_batches_and_hits_name_their_legs(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    batch = s.encode(QUERIES)
    assert set(batch.legs) == {"dense", "sparse", "bm25"}
    assert all(rows.shape[0] == len(QUERIES) for rows in batch.legs.values())
    mine = QueryBatch(legs={"dense": batch.legs["dense"], "sparse": batch.legs["sparse"]})
    assert s.batch_search(QUERIES, k=4, mode="hybrid", encoded=mine) == s.batch_search(QUERIES, k=4, mode="hybrid")
    with pytest.raises(TypeError):
        QueryBatch(batch.legs["dense"], batch.legs["sparse"], 0.0)  # legs by name only
    only_bm25 = s.encode(QUERIES, legs=("bm25",))
    assert set(only_bm25.legs) == {"bm25"}  # no model pass
    with pytest.raises(ValueError, match="lacks the dense vectors"):
        s.batch_search(QUERIES, mode="dense", encoded=only_bm25)
    hit = s.search(QUERIES[0], k=1, mode="dense+sparse+bm25")[0]
    assert (hit.dense_score, hit.sparse_score, hit.bm25_score) == (
        hit.leg_scores["dense"], hit.leg_scores["sparse"], hit.leg_scores["bm25"])
    with pytest.raises(AttributeError):
        hit.sparse_score = 1.0  # read-only: leg_scores is the record
    d = hit.to_dict()
    assert list(d) == ["id", "score", "rank", "doc_number", "sparse_score", "dense_score", "bm25_score"]
    json.dumps(d)
    dense_hit = s.search(QUERIES[0], k=1, mode="dense", explain=True)[0]  # explained by the sparse leg
    assert dense_hit.explanation is not None and dense_hit.leg_scores.keys() == {"dense"}
    assert isinstance(Hit("x", 1.0, 1, 0), Hit) and Hit("x", 1.0, 1, 0).bm25_score is None
