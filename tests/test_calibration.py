"""The collection-level fusion calibration (retrieval/calibration.py): pseudo-queries, the mean
agreement against hand-computed values, its storage in the manifest (build, calibrate, add-lexical,
resparsify) and the "calibrated" fusion falling back to BM25 when a leg is noise."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from alignir.errors import InvalidInputError
from alignir.index.store import read_manifest, update_params, verify_index
from alignir.retrieval import fusion
from alignir.retrieval.calibration import (MEASURE, FusionCalibration, calibrate, mean_agreement,
                                           pseudo_queries)
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.fusion_guard import FusionGuard
from alignir.retrieval.indexer import build_index, calibrate_index, resparsify
from alignir.retrieval.searcher import Searcher
from alignir.retrieval.fusion_plan import CALIBRATED_GATE, calibrated_weights

from conftest import write_corpus

TEXTS = [
    "Aircraft wings. The lift of a swept wing at high speed depends on the boundary layer.",
    "Heat transfer. Heat flows through the boundary layer of a hot plate in a supersonic stream.",
    "Library catalogues. Indexing languages help readers find books in a large library catalogue.",
    "Medicine. Cells of the kidney respond to the hormone by changing the flow of water.",
    "Shock waves. A normal shock wave forms ahead of a blunt body moving faster than sound.",
    "Information retrieval. Relevance feedback improves the ranking of documents for a query.",
    "Blood pressure. High blood pressure damages the kidney over years of treatment.",
    "Buckling. Thin cylindrical shells buckle under axial compression at low loads.",
]


def test_pseudo_queries_are_deterministic_crops():
    texts = ["one two three four five six seven eight", "a b", "alpha beta gamma delta", "x y z"]
    q = pseudo_queries(texts, n=10, words=3, seed=1)
    assert q == pseudo_queries(texts, n=10, words=3, seed=1)
    assert len(q) == 3  # "a b" has fewer than 3 words: never a source
    for crop in q:
        words = crop.split()
        assert len(words) == 3
        assert any(" " + crop + " " in " " + t + " " for t in texts)  # consecutive words of one text
    assert pseudo_queries(texts, n=2, words=20, seed=0)[0] in texts  # shorter than the crop: the whole text
    with pytest.raises(InvalidInputError, match="n must be a positive integer"):
        pseudo_queries(texts, n=0)


def test_mean_agreement_hand_computed():
    p = fusion.AgreeParams(k=2, depth=2, symmetric=False, chance="none", tau=0.5)
    lists = {
        "bm25": [{"a": 3, "c": 2, "x": 1}, {"a": 2, "b": 1}, {}],
        "dense": [{"a": 1.0, "b": 0.5}, {"b": 2.0, "a": 1.0}, {"a": 1.0}],
        "sparse": [{}, {"z": 1.0, "y": 0.5}, {"a": 1.0}],
    }
    # query 1: dense top-2 {a, b} vs bm25 top-2 {a, c}: 1/2; query 2: {b, a} vs {a, b}: 1;
    # query 3: empty anchor, not counted. sparse: empty list 0, disjoint 0.
    assert mean_agreement(lists, n_docs=100, params=p) == {"dense": 0.75, "sparse": 0.0}
    # corpus chance, symmetric, depth 2 of 4 documents: c = 2/4; query 1: o = 1/2 -> 0; query 2: o = 1 -> 1
    p2 = fusion.AgreeParams(k=2, depth=2, symmetric=True, chance="corpus")
    assert mean_agreement(lists, n_docs=4, params=p2)["dense"] == pytest.approx(0.5)
    with pytest.raises(InvalidInputError, match="bm25"):
        mean_agreement({"dense": [{}]}, n_docs=4)
    with pytest.raises(InvalidInputError, match="2 lists for 1"):
        mean_agreement({"bm25": [{"a": 1}], "dense": [{}, {}]}, n_docs=4)


def test_calibrated_weights_gate_each_leg():
    cal = FusionCalibration(agreement={"dense": 0.0, "sparse": CALIBRATED_GATE.tau / 2}, queries=8)
    assert calibrated_weights(("dense", "sparse", "bm25"), [0.2, 0.2, 0.6], cal) == pytest.approx([0.0, 0.1, 0.6])
    cal = FusionCalibration(agreement={"dense": 0.9}, queries=8)  # sparse not calibrated: kept
    assert calibrated_weights(("dense", "sparse", "bm25"), [0.2, 0.2, 0.6], cal) == [0.2, 0.2, 0.6]
    assert FusionCalibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    assert FusionCalibration.from_dict(None) is None


@pytest.fixture()
def built(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.jsonl", TEXTS)
    build_index(corpus, tmp_path / "idx", model="tiny", sparse=SparseConfig.paper(doc_k=24, query_m=5),
                loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    return tmp_path / "idx"


def test_build_stores_the_calibration_and_calibrate_reproduces_it(built, tiny_model):
    m = read_manifest(built)
    stored = m["params"]["fusion_calibration"]
    texts = TEXTS
    s = Searcher.open(built, loaded=tiny_model)
    # the stored values are the mean agreement of the index's own legs on the pseudo-queries
    queries = pseudo_queries(texts)
    assert stored["queries"] == len(queries) == len(TEXTS)
    lists = s.leg_lists(queries, ("dense", "sparse", "bm25"), k=MEASURE.anchor_depth)
    assert stored["agreement"] == mean_agreement(lists, s.index.n_docs)
    assert calibrate(s, texts).to_dict() == stored
    update_params(built, {"fusion_calibration": None})
    assert Searcher.open(built, loaded=tiny_model).calibration is None
    verify_index(built, read_manifest(built))  # a params-only update carries every file over
    assert calibrate_index(built, loaded=tiny_model) == stored  # from the corpus the manifest records
    assert resparsify(built, loaded=tiny_model, doc_k=12)["params"]["fusion_calibration"]["queries"] == len(TEXTS)


def test_calibrate_needs_the_corpus(built, tiny_model, tmp_path):
    other = write_corpus(tmp_path / "other.jsonl", TEXTS[:3])
    with pytest.raises(InvalidInputError, match="lacks 5 indexed"):
        calibrate_index(built, other, loaded=tiny_model)
    (tmp_path / "corpus.jsonl").unlink()
    with pytest.raises(InvalidInputError, match="gone or changed"):
        calibrate_index(built, loaded=tiny_model)
    # a re-sparsify without the corpus drops the (now stale) calibration instead of keeping it
    assert resparsify(built, loaded=tiny_model, doc_k=12)["params"]["fusion_calibration"] is None


def test_calibrated_fusion_falls_back_to_bm25_when_the_legs_are_noise(built, tiny_model):
    """With the LLM legs' stored agreement at 0 (a leg that is noise on the collection) the
    default dense+sparse+bm25 ranking is BM25's; at or above the gate's tau it is the fixed
    z-score fusion with each leg's weight times this query's guard (fusion_guard), which is
    z-score exactly when the guard is off."""
    s = Searcher.open(built, loaded=tiny_model)
    q = "boundary layer of a wing"
    n = s.index.n_docs
    bm25 = [h.doc_number for h in s.search(q, k=n, mode="bm25")]
    s.calibration = FusionCalibration(agreement={"dense": 0.0, "sparse": 0.0}, queries=8)
    assert [h.doc_number for h in s.search(q, k=len(bm25), mode="dense+sparse+bm25", depth=n)] == bm25
    s.calibration = FusionCalibration(agreement={"dense": 0.9, "sparse": CALIBRATED_GATE.tau}, queries=8)
    p = s.plan("dense+sparse+bm25", depth=n)
    lists = s.leg_lists([q], p.legs, k=n)
    w = p.query_weights([lists[leg][0] for leg in p.legs], n)
    assert w == pytest.approx([0.2 * f for f in p.guard.factors(p.legs, [lists[leg][0] for leg in p.legs],
                                                                  s.calibration, n)[:2]] + [0.6])
    got = s.search(q, k=n, mode="dense+sparse+bm25", depth=n)
    want = s.search(q, k=n, mode="dense+sparse+bm25", depth=n, fusion="zscore", weights=dict(zip(p.legs, w)))
    assert [h.doc_number for h in got] == [h.doc_number for h in want]
    assert [h.score for h in got] == pytest.approx([h.score * sum(w) for h in want])  # weights given are normalised
    unguarded = replace(p, guard=FusionGuard(ratio=0)).fuse([lists[leg][0] for leg in p.legs], n)
    zscore = s.search(q, k=n, mode="dense+sparse+bm25", depth=n, fusion="zscore")
    assert fusion.ranked(unguarded, n) == [(h.doc_number, h.score) for h in zscore]


def test_cli_calibrate(built, tmp_path):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    update_params(built, {"fusion_calibration": None})
    r = CliRunner().invoke(app, ["calibrate", "--index", str(built)])
    # the tiny test model is not loadable by name: a clear one-line error, nothing written
    assert r.exit_code != 0 and "tiny" in r.output
    assert read_manifest(built)["params"]["fusion_calibration"] is None
    r = CliRunner().invoke(app, ["calibrate", "--index", str(tmp_path / "nope")])
    assert r.exit_code != 0 and "nope" in r.output


def test_a_build_and_an_add_calibrate_with_their_own_encoder(tmp_path, tiny_model, monkeypatch):
    """The calibration after a build or an add encodes its pseudo-queries with the encoder that
    wrote the index (no second encoder, which on ONNX Runtime is a second session), and stores
    what a searcher opened from the folder measures, query instruction included."""
    from alignir.retrieval.encoder import Encoder
    from alignir.retrieval.indexer import add_documents

    opened: list[str] = []
    for_stored = Encoder.for_stored.__func__

    def counting(cls, stored, path, **kw):
        opened.append(str(path))
        return for_stored(cls, stored, path, **kw)

    monkeypatch.setattr(Encoder, "for_stored", classmethod(counting))
    corpus = write_corpus(tmp_path / "corpus.jsonl", TEXTS[:5])
    idx = tmp_path / "idx"
    build_index(corpus, idx, model="tiny", sparse=SparseConfig.paper(doc_k=24, query_m=5), loaded=tiny_model,
                embedder_options={"instruction": "scifact"}, cache_dir=tmp_path / "cache", progress=False)
    assert opened == []
    stored = read_manifest(idx)["params"]["fusion_calibration"]
    assert stored is not None
    assert calibrate(Searcher.open(idx, loaded=tiny_model), TEXTS[:5]).to_dict() == stored
    opened.clear()
    more = [{"_id": f"new{i}", "title": "", "text": t} for i, t in enumerate(TEXTS[5:])]
    add_documents(idx, more, loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    assert len(opened) == 1  # the add's own encoder (for the new documents) only
    after = read_manifest(idx)["params"]["fusion_calibration"]
    assert after["queries"] == len(TEXTS)
    assert calibrate(Searcher.open(idx, loaded=tiny_model), TEXTS).to_dict() == after
