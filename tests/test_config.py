"""retrieval.config: UNSET vs None, validation with one clear message, allowed values defined
once, IndexConfig saved whole in the manifest and read back (also from older manifests)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from alignir.errors import InvalidInputError
from alignir.retrieval.config import (UNSET, DenseConfig, FusionConfig, IndexConfig, LexicalConfig,
                                      SparseConfig)

ROOT = Path(__file__).resolve().parents[1]


def test_unset_is_not_given_and_none_is_a_value():
    base = SparseConfig(quantize="uint8", pc1_remove=0.5)
    assert base.with_changes(doc_k=UNSET, quantize=UNSET, pc1_remove=UNSET) == base
    changed = base.with_changes(doc_k=8, quantize=None, pc1_remove=None)
    assert (changed.doc_k, changed.quantize, changed.pc1_remove) == (8, None, None)
    assert repr(UNSET) == "UNSET" and not UNSET
    with pytest.raises(InvalidInputError, match="no setting"):
        base.with_changes(K=8)
    with pytest.raises(InvalidInputError, match="doc_k"):
        base.with_changes(doc_k=None)  # None is a value, and not an allowed K


@pytest.mark.parametrize("make, message", [
    (lambda: SparseConfig(doc_k=0), "doc_k"),
    (lambda: SparseConfig(doc_k="8"), "doc_k"),
    (lambda: SparseConfig(doc_k=True), "doc_k"),
    (lambda: SparseConfig(query_m=-1), "query_m"),
    (lambda: SparseConfig(pc1_lambda=float("nan")), "pc1_lambda"),
    (lambda: SparseConfig(doc_weighting="binary"), "doc_weighting must be one of"),
    (lambda: SparseConfig(query_weighting="sqrt"), "query_weighting must be one of"),
    (lambda: SparseConfig(quantize="int4"), "quantize must be one of"),
    (lambda: SparseConfig(fold="yes"), "fold"),
    (lambda: DenseConfig(kind="ivf"), "kind must be one of"),
    (lambda: DenseConfig(whiten="svd"), "whiten must be one of"),
    (lambda: DenseConfig(options={"nlists": 4}), "unknown dense option"),
    (lambda: DenseConfig(options={"hnsw_m": 0}), "hnsw_m"),
    (lambda: LexicalConfig(b=1.5), "b must be"),
    (lambda: LexicalConfig(k1=-1), "k1 must be"),
    (lambda: FusionConfig(method="max"), "fusion method must be one of"),
    (lambda: FusionConfig(alpha=2), "alpha"),
    (lambda: FusionConfig(depth=0), "depth"),
    (lambda: IndexConfig(sparse={"doc_k": 8}), "IndexConfig.sparse must be a SparseConfig"),
])
def test_bad_values_are_one_clear_error(make, message):
    with pytest.raises(InvalidInputError, match=message):
        make()


def test_each_allowed_value_list_is_defined_once():
    import alignir.encoders.aligned as aligned
    import alignir.encoders.weightings as weightings
    import alignir.index.dense as dense
    import alignir.index.sparse as sparse
    import alignir.retrieval.config as config
    import alignir.retrieval.fusion as fusion

    assert config.DOC_WEIGHTINGS is weightings.DOC_WEIGHTINGS is aligned.DOC_WEIGHTINGS
    assert config.QUERY_WEIGHTINGS is weightings.QUERY_WEIGHTINGS is aligned.QUERY_WEIGHTINGS
    assert config.FUSION_METHODS is fusion.FUSION_METHODS
    assert sparse.QUANTIZE == (None, "uint8", "uint16")
    for kind in dense.KINDS:
        DenseConfig(kind=kind)
    for whiten in dense.WHITENINGS:
        DenseConfig(whiten=whiten)
    for method in fusion.FUSION_METHODS:
        FusionConfig(method=method)
    sources = "".join(p.read_text() for d in ("encoders", "index", "retrieval") for p in (ROOT / d).rglob("*.py"))
    assert sources.count('("raw", "relu", "log1p")') == 1 and sources.count('("binary", "raw", "relu", "log1p")') == 1


def test_index_config_is_frozen_and_round_trips_through_json():
    cfg = IndexConfig(sparse=SparseConfig.paper(doc_k=32), dense=DenseConfig(kind="hnsw", options={"hnsw_m": 16}),
                      lexical=LexicalConfig(k1=1.2, b=0.75), fusion=FusionConfig(method="zscore", alpha=0.3))
    back = IndexConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and hash(back) == hash(cfg)
    assert IndexConfig.from_dict({**cfg.to_dict(), "lexical": None}).lexical is None
    assert IndexConfig.from_dict({"sparse": {"doc_k": 9, "future_knob": 1}}).sparse.doc_k == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sparse = SparseConfig()  # type: ignore[misc]
    assert DenseConfig.from_options("flat", {"center": True, "normalize": True}) == DenseConfig()
    assert DenseConfig().build_options() == {"kind": "flat", "normalize": True, "center": True, "whiten": None}


def test_an_older_manifest_gives_its_config_back():
    from alignir.index.store import read_manifest

    m = read_manifest(ROOT / "tests" / "data" / "index_format1" / "index")
    cfg = IndexConfig.from_manifest(m)
    assert cfg.sparse == SparseConfig.from_dict(m["params"]["sparse"])
    assert cfg.dense == DenseConfig(kind="flat", normalize=False, center=None)
    assert cfg.lexical == LexicalConfig(k1=0.9, b=0.4, stem=True, stopwords="en")
    assert cfg.fusion == FusionConfig()


def test_build_saves_the_config_and_every_writer_keeps_it(tmp_path, tiny_model):
    from conftest import TINY_CORPUS, write_corpus

    from alignir.index.store import read_manifest, replace_part
    from alignir.retrieval.indexer import add_lexical, build_index, resparsify
    from alignir.retrieval.searcher import Searcher

    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    cfg = IndexConfig(sparse=SparseConfig.paper(doc_k=24, query_m=5), dense=DenseConfig(normalize=False),
                      lexical=LexicalConfig(k1=1.1, b=0.5), fusion=FusionConfig(method="zscore", alpha=0.25))
    idx = tmp_path / "idx"
    m = build_index(corpus, idx, model="tiny", config=cfg, loaded=tiny_model, cache_dir=tmp_path / "cache",
                    progress=False)
    assert IndexConfig.from_manifest(m) == cfg and m["params"]["config"] == cfg.to_dict()
    assert m["parts"]["dense"]["normalize"] is False and m["parts"]["lexical"]["params"]["k1"] == 1.1
    s = Searcher.open(idx, loaded=tiny_model)
    assert s.fusion == cfg.fusion  # the saved fusion is the searcher's default
    assert Searcher.open(idx, loaded=tiny_model, fusion=FusionConfig()).fusion == FusionConfig()
    m = resparsify(idx, loaded=tiny_model, doc_k=12, quantize=None, query_m=UNSET)
    assert IndexConfig.from_manifest(m) == dataclasses.replace(cfg, sparse=cfg.sparse.with_changes(doc_k=12))
    m = add_lexical(idx, k1=0.8, loaded=tiny_model)
    assert IndexConfig.from_manifest(m).lexical == LexicalConfig(k1=0.8, b=0.4)
    replace_part(idx, "lexical", None)
    assert IndexConfig.from_manifest(read_manifest(idx)).lexical is None
    # build_index's own keywords replace their part of the config
    m = build_index(corpus, tmp_path / "j", model="tiny", config=cfg, lexical=False, dense_kind="hnsw",
                    loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    got = IndexConfig.from_manifest(m)
    assert got.lexical is None and got.dense == DenseConfig(kind="hnsw", normalize=False) and got.fusion == cfg.fusion
