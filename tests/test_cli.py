"""The `alignir` CLI: bad input (clear message, exit != 0, nothing written), atomic builds under
SIGKILL, and the full build/search/explain/resparsify/info/eval cycle — on a tiny random Llama
saved as an HF folder, and on ADI with the real SmolLM2 (marked `model`). A test that builds an
index or starts a child process is marked `e2e` (the full run, not `scripts/test.sh --fast`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignir.retrieval.cli import app
from conftest import ADI, share_model_cache, share_onnx_exports

ROOT = Path(__file__).resolve().parents[1]

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def write_lines(path: Path, lines: list[str | bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write((line if isinstance(line, bytes) else line.encode()) + b"\n")
    return path


def doc(i: int, text: str = "retrieval of documents about plants") -> str:
    return json.dumps({"_id": f"d{i}", "title": f"doc {i}", "text": f"{text} {i}"})


@pytest.fixture()
def env(tmp_path, monkeypatch, onnx_exports):
    """The test's folder; its own ``$ALIGNIR_CACHE`` (``cache``) with the run's ONNX exports."""
    monkeypatch.setenv("ALIGNIR_CACHE", str(share_onnx_exports(tmp_path / "cache", onnx_exports)))
    return tmp_path


# ---------------------------------------------------------------- bad input, nothing written

BAD_CORPORA = {
    "malformed json": ([doc(0), "{not json", doc(2)], "line 2"),
    "duplicate ids": ([doc(0), doc(0)], "duplicate"),
    "missing text": ([doc(0), json.dumps({"_id": "x", "title": "t"})], "text"),
    "empty corpus": ([], "empty"),
    "non-utf8": ([doc(0), b'{"_id": "b", "text": "caf\xe9"}'], "line 2"),
}


@pytest.mark.parametrize("case", sorted(BAD_CORPORA))
def test_bad_corpus_stops_before_writing(env, case, tiny_folder):
    lines, needle = BAD_CORPORA[case]
    corpus = write_lines(env / "corpus.jsonl", lines)
    r = invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder)
    assert r.exit_code != 0
    assert needle in r.output.lower() or needle in r.output
    assert "Traceback" not in r.output
    assert not (env / "idx").exists()


@pytest.mark.e2e
def test_skip_bad_continues_and_reports(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(0), "{broken", doc(2), doc(3)])
    r = invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder, "--skip-bad")
    assert r.exit_code == 0, r.output
    assert "skipped line 2" in r.output
    assert "indexed 3 documents" in r.output


def test_missing_source_and_foreign_index_dir(env, tiny_folder):
    r = invoke("build-index", env / "nope", "--index", env / "idx", "--model", tiny_folder)
    assert r.exit_code != 0 and "does not exist" in r.output
    foreign = env / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"meow")
    corpus = write_lines(env / "corpus.jsonl", [doc(0), doc(1)])
    r = invoke("build-index", corpus, "--index", foreign, "--model", tiny_folder)
    assert r.exit_code != 0 and "not an alignir index" in r.output
    assert sorted(p.name for p in foreign.iterdir()) == ["cat.jpg"]
    r = invoke("search", "plants", "--index", foreign)
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_unknown_model_is_named(env):
    corpus = write_lines(env / "corpus.jsonl", [doc(0)])
    r = invoke("build-index", corpus, "--index", env / "idx", "--model", "no-such-model")
    assert r.exit_code != 0 and "no-such-model" in r.output
    assert not (env / "idx").exists()


# ---------------------------------------------------------------- full cycle on the tiny model

@pytest.mark.e2e
def test_tiny_cycle(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants and light", "stock market rates", "supersonic flow", "protein folding"])])
    idx = env / "idx"
    r = invoke("build-index", corpus, "--index", idx, "--model", tiny_folder, "--doc-k", "16")
    assert r.exit_code == 0, r.output
    for mode in ("hybrid", "sparse", "dense"):
        r = invoke("search", "plants light", "--index", idx, "--mode", mode, "--json", "--explain")
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["query"] == "plants light" and out["hits"]
        assert [h["rank"] for h in out["hits"]] == list(range(1, len(out["hits"]) + 1))
    r = invoke("search", "  ", "--index", idx)
    assert r.exit_code != 0 and "empty" in r.output
    r = invoke("resparsify", "--index", idx, "--doc-k", "4")
    assert r.exit_code == 0, r.output
    info = json.loads(invoke("info", "--index", idx, "--json").stdout)
    assert info["params"]["sparse"]["doc_k"] == 4
    assert info["parts"]["sparse"]["n_postings"] <= 4 * 4
    assert "documents  4" in invoke("info", "--index", idx).output


@pytest.mark.e2e
def test_sparse_flags_carry_the_sparse_config_names_and_the_old_ones_warn(env, tiny_folder):
    """--doc-k/--query-m/--pc1-lambda set SparseConfig's doc_k/query_m/pc1_lambda; the earlier
    --k/--m/--lambda, hidden from --help, set the same with one deprecation line each."""
    corpus = write_lines(env / "corpus.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants and light", "stock market rates", "supersonic flow", "protein folding"])])
    idx = env / "idx"
    r = invoke("build-index", corpus, "--index", idx, "--model", tiny_folder,
               "--doc-k", "16", "--query-m", "3", "--pc1-lambda", "0.5")
    assert r.exit_code == 0 and "deprecated" not in r.output, r.output

    def sparse() -> dict:
        return json.loads((idx / "manifest.json").read_text())["params"]["sparse"]
    assert (sparse()["doc_k"], sparse()["query_m"], sparse()["pc1_lambda"]) == (16, 3, 0.5)
    r = invoke("resparsify", "--index", idx, "--k", "8", "--m", "2", "--lambda", "0.25")
    assert r.exit_code == 0, r.output
    assert (sparse()["doc_k"], sparse()["query_m"], sparse()["pc1_lambda"]) == (8, 2, 0.25)
    notices = [line for line in r.stderr.splitlines() if "deprecated" in line]
    assert notices == [f"warning: {old} is deprecated and will be removed; use {new}"
                       for old, new in (("--k", "--doc-k"), ("--m", "--query-m"), ("--lambda", "--pc1-lambda"))]
    r = runner.invoke(app, ["resparsify", "--index", str(idx), "--doc-k", "4", "--k", "4"])
    assert r.exit_code == 2 and "give only --doc-k" in r.output, r.output
    assert sparse()["doc_k"] == 8
    for command in ("build-index", "resparsify"):
        shown = invoke(command, "--help").output
        assert "--doc-k" in shown and "--pc1-lambda" in shown and "--lambda" not in shown.replace("--pc1-lambda", "")


@pytest.mark.e2e
def test_fusion_option_calibrated_default_agree_and_zscore(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants and light", "stock market rates", "supersonic flow", "protein folding", "plants grow"])])
    idx = env / "idx"
    assert invoke("build-index", corpus, "--index", idx, "--model", tiny_folder, "--doc-k", "16").exit_code == 0

    def hits(*extra):
        r = invoke("search", "plants light", "--index", idx, "--mode", "dense+sparse+bm25", "--json", *extra)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["hits"]
    assert hits() == hits("--fusion", "calibrated")       # calibrated is the leg-set default
    assert hits("--fusion", "zscore") == hits("--fusion", "zscore", "--weights", "dense=0.2,sparse=0.2,bm25=0.6")
    for method in ("agree", "calibrated"):
        r = invoke("search", "plants", "--index", idx, "--mode", "hybrid", "--fusion", method)
        assert r.exit_code == 1 and method in r.output and "bm25" in r.output
    stored = json.loads(invoke("info", "--index", idx, "--json").stdout)["params"]["fusion_calibration"]
    assert stored["queries"] == 5 and set(stored["agreement"]) == {"dense", "sparse"}
    from alignir.index.store import update_params

    update_params(idx, {"fusion_calibration": None})  # an index from before the calibration: agree
    assert hits() == hits("--fusion", "agree")
    r = invoke("calibrate", "--index", idx)  # measures it again, the same values
    assert r.exit_code == 0 and "5 pseudo-queries" in r.output, r.output
    assert json.loads(invoke("info", "--index", idx, "--json").stdout)["params"]["fusion_calibration"] == stored
    assert "agreement with bm25 on 5 pseudo-queries: dense" in invoke("info", "--index", idx).output
    r = invoke("beir", env / "nowhere", "--fusion", "borda")  # checked before anything is built
    assert r.exit_code == 1 and "fusion method must be one of" in r.output
    assert not (env / "indexes").exists()


@pytest.mark.e2e
def test_search_explain_prints_the_plan_and_eval_records_it(env, tiny_folder):
    """--explain shows the fusion plan in force (rule, weights, gate, calibration and their
    sources); --json --explain and `alignir eval --json` carry it as a dict, the one
    Searcher.plan resolves."""
    from alignir.retrieval.searcher import Searcher

    texts = ["plants and light", "stock market rates", "supersonic flow", "protein folding", "plants grow"]
    corpus = write_lines(env / "corpus.jsonl", [doc(i, t) for i, t in enumerate(texts)])
    idx = env / "idx"
    assert invoke("build-index", corpus, "--index", idx, "--model", tiny_folder, "--doc-k", "16").exit_code == 0
    r = invoke("search", "plants light", "--index", idx, "--mode", "dense+sparse+bm25", "--explain")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("fusion plan for dense+sparse+bm25: calibrated (")
    shown = {line.split()[0]: line for line in lines[1:7]}
    assert set(shown) == {"rule", "weights", "gate", "calibration", "guard", "depth"}
    assert "agreement with bm25 is >= " in shown["guard"] and "[alignir default:" in shown["guard"]
    assert "[alignir default:" in shown["rule"] and "dense 0.2, sparse 0.2, bm25 0.6" in shown["weights"]
    assert "[calibration: the index's agreement with bm25 on 5 pseudo-queries" in shown["calibration"]
    r = invoke("search", "plants light", "--index", idx, "--mode", "dense+bm25", "--fusion", "rrf",
               "--weights", "dense=1,bm25=3", "--json", "--explain")
    plan = json.loads(r.stdout)["plan"]
    with Searcher.open(idx) as s:
        assert plan == json.loads(json.dumps(s.plan("dense+bm25", fusion="rrf", weights={"dense": 1, "bm25": 3})
                                             .to_dict()))
    assert plan["rule"] == "rrf" and plan["rrf_weights"] == {"dense": 1.0, "bm25": 3.0}
    assert plan["sources"]["rule"]["source"] == plan["sources"]["weights"]["source"] == "user"
    assert "plan" not in json.loads(invoke("search", "plants", "--index", idx, "--json").stdout)
    beir = env / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(corpus.read_text())
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "plants"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    from alignir.index.store import update_params

    update_params(idx, {"fusion_calibration": None})  # an index without a calibration: the agree fallback
    r = invoke("eval", "--index", idx, "--dataset", beir, "--mode", "hybrid,dense+sparse+bm25", "--json")
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plan"]
    assert set(plans) == {"hybrid", "dense+sparse+bm25"}
    assert (plans["hybrid"]["rule"], plans["hybrid"]["alpha"]) == ("minmax", 0.5)
    three = plans["dense+sparse+bm25"]
    assert (three["rule"], three["requested"], three["calibration"]) == ("agree", "calibrated", None)
    assert three["sources"]["rule"]["source"] == "fallback" and "no stored calibration" in three["fallback"]


# ---------------------------------------------------------------- SIGKILL mid-build

@pytest.mark.e2e
def test_killed_build_leaves_old_index_usable(env, tiny_folder):
    small = write_lines(env / "small.jsonl", [doc(i) for i in range(3)])
    big = write_lines(env / "big.jsonl", [doc(i, "a longer text " * 30) for i in range(400)])
    idx = env / "idx"
    assert invoke("build-index", small, "--index", idx, "--model", tiny_folder).exit_code == 0
    before = invoke("search", "plants", "--index", idx, "--mode", "sparse", "--json").stdout
    cmd = [sys.executable, "-m", "alignir.retrieval.cli", "build-index", str(big), "--index", str(idx),
           "--model", str(tiny_folder), "--no-resume"]
    child_env = {**os.environ, "ALIGNIR_CACHE": str(env / "cache")}
    for delay in (1.0, 3.0, 6.0):
        p = subprocess.Popen(cmd, env=child_env, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        # The kill may land before the swap (the old index must be untouched) or after it (the
        # process can still be shutting down when the new index is already in place; then the
        # new index must be whole): never anything in between.
        info = invoke("info", "--index", idx, "--json")
        assert info.exit_code == 0, info.output
        n_docs = json.loads(info.stdout)["counts"]["docs"]
        assert n_docs in (3, 400), n_docs
        if n_docs == 400:
            hits = json.loads(invoke("search", "plants", "--index", idx, "--mode", "sparse", "--json").stdout)
            assert len(hits["hits"]) == 10
            break
        after = invoke("search", "plants", "--index", idx, "--mode", "sparse", "--json")
        assert after.exit_code == 0, after.output
        assert after.stdout == before
        assert not [x for x in idx.parent.iterdir() if x.name.startswith(idx.name) and x != idx
                    and not x.name.startswith(".")]
    assert invoke("info", "--index", idx).exit_code == 0


# ---------------------------------------------------------------- trained embedders end to end

TRAINED = [("infonce", "contrastive", "pairs", {}), ("autoregembed", "ic", "pairs", {"k": 2}),
           ("llm2comp", "ctkd", "texts", {"k": 2}), ("gircse", "icr", "pairs", {"K": 2})]


@pytest.mark.e2e
@pytest.mark.parametrize("method,stage,data,hp", TRAINED, ids=[m for m, *_ in TRAINED])
def test_train_then_index_and_search_with_the_adapter(env, tiny_folder, data_files, method, stage, data, hp):
    """`alignir train` → `build-index --embedder METHOD --adapter DIR` → search, all from the CLI."""
    adapter = env / "adapter"
    sets = [x for k, v in hp.items() for x in ("--set", f"{k}={v}")]
    res = invoke("train", method, "--stage", stage, "--data", data_files[data], "--model", tiny_folder,
                 "--out", adapter, "--steps", "2", "--batch-size", "3", "--max-length", "32", *sets)
    assert res.exit_code == 0, res.output
    corpus = write_lines(env / "c.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants grow in soil", "stock markets fell", "rivers flow to the sea", "cells divide"])])
    idx, plain = env / "idx", env / "plain"
    res = invoke("build-index", corpus, "--index", idx, "--model", tiny_folder, "--embedder", method,
                 "--adapter", adapter, "--max-length", "32")
    assert res.exit_code == 0, res.output
    untrained = "prompteol" if method == "infonce" else method  # InfoNCE reads PromptEOL through its adapter
    assert invoke("build-index", corpus, "--index", plain, "--model", tiny_folder, "--embedder", untrained,
                  "--max-length", "32").exit_code == 0
    hits = json.loads(invoke("search", "plants", "--index", idx, "--mode", "hybrid", "--json").stdout)
    assert {h["id"] for h in hits["hits"]} == {"d0", "d1", "d2", "d3"}
    # the adapter is part of the index's encoder identity (a different encoder than the untrained one)
    info = json.loads(invoke("info", "--index", idx, "--json").stdout)
    base = json.loads(invoke("info", "--index", plain, "--json").stdout)
    assert "adapter_sha256" in json.dumps(info) and info["encoder_hash"] != base["encoder_hash"]
    # `alignir beir --adapter` (build + eval in one go) scores the same index the same way
    beir = env / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(corpus.read_text())
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "plants"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    one_go = invoke("beir", beir, "--index", env / "idx-beir", "--model", tiny_folder, "--embedder", method,
                    "--adapter", adapter, "--max-length", "32", "--mode", "dense", "--no-bm25", "--json")
    assert one_go.exit_code == 0, one_go.output
    two_step = invoke("eval", "--index", idx, "--dataset", beir, "--mode", "dense", "--json")
    assert json.loads(one_go.stdout)["metrics"] == json.loads(two_step.stdout)["metrics"]


@pytest.mark.e2e
def test_embedder_options_reach_the_index_and_its_queries(env, tiny_folder):
    """`--embedder-option` sets a family option (LLM2Comp's causal readout, GIRCSE's test-time K) for
    build-index and beir: stored in the manifest, part of the encoder identity, used by search; a key the
    family lacks or one with its own flag is one clear line and nothing is written."""
    corpus = write_lines(env / "c.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants grow in soil", "stock markets fell", "rivers flow to the sea", "cells divide"])])
    built = {}
    for name, extra in {"bi": [], "causal": ["--embedder-option", "bidirectional=false"]}.items():
        r = invoke("build-index", corpus, "--index", env / name, "--model", tiny_folder, "--embedder", "llm2comp",
                   "--embedder-option", "k=2", *extra, "--max-length", "32")
        assert r.exit_code == 0, r.output
        built[name] = json.loads(invoke("info", "--index", env / name, "--json").stdout)
    assert built["causal"]["embedder"]["options"]["bidirectional"] is False
    assert built["causal"]["embedder"]["options"]["k"] == 2 and "bidirectional" not in built["bi"]["embedder"]["options"]
    assert built["causal"]["encoder_hash"] != built["bi"]["encoder_hash"]
    # the query side is built from the stored options
    from alignir.retrieval.searcher import Searcher

    searcher = Searcher.open(env / "causal")
    try:
        assert searcher.embedder.options["bidirectional"] is False and searcher.embedder.options["k"] == 2
    finally:
        searcher.close()
    hits = json.loads(invoke("search", "rivers flow", "--index", env / "causal", "--mode", "dense", "--json").stdout)
    assert len(hits["hits"]) == 4
    for bad, needle in [(["--embedder-option", "nonsense=1"], "nonsense"),
                        (["--embedder-option", "max_length=9"], "--max-length"),
                        (["--embedder-option", "K8"], "KEY=VALUE")]:
        r = invoke("build-index", corpus, "--index", env / "bad", "--model", tiny_folder, "--embedder", "gircse", *bad)
        assert r.exit_code != 0 and needle in r.output and "Traceback" not in r.output, r.output
        assert not (env / "bad").exists()
    r = invoke("build-index", corpus, "--index", env / "bad", "--model", tiny_folder, "--embedder-option", "foo=1")
    assert r.exit_code != 0 and "prompteol" in r.output and "foo" in r.output and "Traceback" not in r.output
    # `alignir beir` takes them too (and a default query instruction), into the index it builds
    beir = env / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(corpus.read_text())
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "plants"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    r = invoke("beir", beir, "--index", env / "idx-beir", "--model", tiny_folder, "--embedder", "gircse",
               "--embedder-option", "K=2", "--instruction", "scifact", "--max-length", "32", "--mode", "dense",
               "--no-bm25", "--json")
    assert r.exit_code == 0, r.output
    options = json.loads(invoke("info", "--index", env / "idx-beir", "--json").stdout)["embedder"]["options"]
    assert options["K"] == 2 and options["instruction"] == "scifact"


# ---------------------------------------------------------------- ADI with the real SmolLM2

@pytest.mark.model
def test_adi_end_to_end_with_smollm2(env, smollm2):
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    (env / "cache" / "onnx").unlink()  # SmolLM2's ONNX export is kept with the run's converted models
    share_model_cache(env / "cache")
    idx = env / "adi"
    r = invoke("build-index", ADI, "--index", idx)  # the default model: the shipped trained embedder
    assert r.exit_code == 0, r.output
    from alignir.encoders.shipped import DEFAULT_MODEL

    assert f"builtin:{DEFAULT_MODEL}" in invoke("info", "--index", idx, "--json").stdout
    r = invoke("search", "information retrieval systems for documents", "--index", idx,
               "--explain", "--json")
    hits = json.loads(r.stdout)["hits"]
    assert len(hits) == 10 and all(h["matched"] for h in hits if h["sparse_score"])
    r = invoke("eval", "--index", idx, "--dataset", ADI, "--json", "--bm25", "--run", env / "adi.trec")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    for mode in ("hybrid", "sparse", "dense", "bm25"):
        assert 0.0 < res["metrics"][mode]["ndcg@10"] <= 1.0
    lines = (env / "adi.hybrid.trec").read_text().splitlines()
    assert lines and len(lines[0].split()) == 6
    # the README's main job: build + eval in one command (the encodings come from the cache)
    r = invoke("beir", ADI, "--index", env / "adi-beir", "--json")
    assert r.exit_code == 0, r.output
    main_job = json.loads(r.stdout)
    assert main_job["dataset"] == "adi" and main_job["queries"] > 0
    plan = main_job["plan"]  # each mode's fusion plan: the leg sets' default gated by the calibration
    three = plan["dense+sparse+bm25"]
    assert (three["rule"], three["sources"]["rule"]["source"]) == ("calibrated", "alignir default")
    assert set(three["calibration"]["agreement"]) == {"dense", "sparse"}
    assert three["sources"]["weights"]["source"] == "model default"  # the shipped model's own leg set
    hybrid = plan["hybrid"]  # the shipped model's hybrid
    assert (hybrid["rule"], hybrid["alpha"], hybrid["sources"]["alpha"]["source"]) == ("zscore", 0.7, "model default")
    for mode in ("dense", "sparse", "hybrid", "bm25"):
        assert main_job["metrics"][mode]["ndcg@10"] == pytest.approx(res["metrics"][mode]["ndcg@10"], abs=1e-9)
    r = invoke("resparsify", "--index", idx, "--doc-k", "64", "--pc1-lambda", "0.5")
    assert r.exit_code == 0, r.output
    assert json.loads(invoke("search", "indexing", "--index", idx, "--json").stdout)["hits"]


@pytest.mark.e2e
def test_sharded_encode_merge_then_build(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(i, t) for i, t in enumerate(
        ["plants and light", "stock market rates", "supersonic flow", "protein folding", "query logs"])])
    for shard in (0, 1):
        r = invoke("encode", corpus, "--model", tiny_folder, "--shard-id", shard, "--shard-num", 2,
                   "--cache-dir", env / f"shard{shard}")
        assert r.exit_code == 0, r.output
    r = invoke("cache-merge", env / "shard0", env / "shard1", "--cache-dir", env / "merged")
    assert r.exit_code == 0 and "copied" in r.output
    from alignir.encoders.cache import EmbeddingCache
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model
    from alignir.retrieval.indexer import read_source

    enc = get_embedder("prompteol", load_model(str(tiny_folder)), max_length=512)
    texts = read_source(corpus).texts()
    _, found = EmbeddingCache(env / "merged").lookup(enc, texts, "document")
    assert found.all(), "every document of both shards is in the merged cache"
    r = invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder,
               "--cache-dir", env / "merged")
    assert r.exit_code == 0, r.output


def test_search_arguments_are_checked_before_the_model_loads(env, tiny_folder, monkeypatch):
    """A bad --top or --weights fails at once (one line), without opening the index's model."""
    import alignir.retrieval.searcher as searcher_mod

    def no_open(*_a, **_k):
        raise AssertionError("Searcher.open must not run for bad arguments")

    monkeypatch.setattr(searcher_mod.Searcher, "open", classmethod(no_open))
    for args, msg in ((["--top", "0"], "--top must be at least 1"), (["--weights", "dense"], "weights")):
        r = runner.invoke(app, ["search", "plants", "--index", str(env), *args])
        assert r.exit_code == 1 and msg in r.output and "Traceback" not in r.output, r.output


@pytest.mark.e2e
def test_undecodable_query_bytes_are_one_line(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(i) for i in range(4)])
    assert invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder).exit_code == 0
    r = subprocess.run([sys.executable, "-m", "alignir.retrieval.cli", "search", "--index", str(env / "idx"),
                        b"retrieval \xff systems"], capture_output=True, env={**os.environ, "ALIGNIR_CACHE": str(env)})
    err = r.stderr.decode(errors="replace").strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "not valid text" in err[0], r.stderr


@pytest.mark.e2e
def test_a_renamed_copy_of_the_same_weights_is_the_same_model(env, tiny_folder):
    """--model PATH is compared by content (sha256 of the weights), not by the folder's name."""
    import shutil

    corpus = write_lines(env / "corpus.jsonl", [doc(i) for i in range(4)])
    assert invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder).exit_code == 0
    copy = shutil.copytree(tiny_folder, env / "another-name")
    r = runner.invoke(app, ["search", "plants", "--index", str(env / "idx"), "--model", str(copy), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hits"]


@pytest.mark.e2e
@pytest.mark.parametrize("key", ["family", "model"])
def test_a_manifest_without_its_embedder_key_is_one_line(env, tiny_folder, key):
    corpus = write_lines(env / "corpus.jsonl", [doc(i) for i in range(4)])
    assert invoke("build-index", corpus, "--index", env / "idx", "--model", tiny_folder).exit_code == 0
    mf = env / "idx" / "manifest.json"
    manifest = json.loads(mf.read_text())
    del manifest["embedder"][key]
    from alignir.index.manifest_io import seal_manifest

    mf.write_text(json.dumps(seal_manifest(manifest)))  # a well-formed manifest that lacks the key
    r = runner.invoke(app, ["search", "plants", "--index", str(env / "idx")])
    assert r.exit_code == 1 and f"embedder.{key}" in r.output and "Traceback" not in r.output, r.output


HOLD_LOCK = """
import sys, time
from alignir.index.lock import writer_lock
with writer_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.mark.e2e
def test_a_second_writer_is_refused_or_waits(env, tiny_folder):
    """Two writers on one index: while a real process holds the writer lock, resparsify fails at
    once with one line naming that process; with --wait it runs after the holder is done."""
    corpus = write_lines(env / "corpus.jsonl", [doc(i) for i in range(4)])
    idx = env / "idx"
    assert invoke("build-index", corpus, "--index", idx, "--model", tiny_folder).exit_code == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(idx), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = runner.invoke(app, ["resparsify", "--index", str(idx), "--doc-k", "8"])
        assert r.exit_code == 1 and f"pid {holder.pid}" in r.output and "--wait" in r.output, r.output
        assert json.loads((idx / "manifest.json").read_text())["params"]["sparse"]["doc_k"] != 8
    finally:
        holder.kill()
        holder.wait()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(idx), "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.perf_counter()
        r = runner.invoke(app, ["resparsify", "--index", str(idx), "--doc-k", "8", "--wait"])
        assert r.exit_code == 0, r.output
        assert time.perf_counter() - t0 > 1.0, "it queued behind the holder (which held the lock for 2 s)"
        assert json.loads((idx / "manifest.json").read_text())["params"]["sparse"]["doc_k"] == 8
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.e2e
def test_info_verifies_the_files_unless_told_not_to(env, tiny_folder):
    corpus = write_lines(env / "corpus.jsonl", [doc(i) for i in range(4)])
    idx = env / "idx"
    assert invoke("build-index", corpus, "--index", idx, "--model", tiny_folder).exit_code == 0
    assert runner.invoke(app, ["info", "--index", str(idx)]).exit_code == 0
    (idx / "dense.npy").unlink()
    r = runner.invoke(app, ["info", "--index", str(idx)])
    assert r.exit_code == 1 and "dense.npy" in r.output and "missing" in r.output, r.output
    assert runner.invoke(app, ["info", "--index", str(idx), "--no-verify"]).exit_code == 0


def test_cli_logging_hides_library_debug_lines():
    """bm25s sets its logger to DEBUG when imported ("Building index from IDs objects" on every
    index build); the CLI's log level holds for it too, imported before or after the setup."""
    import logging

    from alignir.retrieval.commands.common import setup_logging

    setup_logging(verbose=False)
    import bm25s  # noqa: F401  (its import sets its logger to DEBUG)

    logger = logging.getLogger("bm25s")
    keep = lambda level: all(f.filter(logging.LogRecord("bm25s", level, "", 0, "m", None, None))  # noqa: E731
                             for f in logger.filters)
    assert not keep(logging.DEBUG) and not keep(logging.INFO) and keep(logging.WARNING)
    setup_logging(verbose=True)
    assert keep(logging.INFO) and not keep(logging.DEBUG)
    assert len(logger.filters) == 1  # set up twice: one filter


def _commands(group, path=()):
    for name, cmd in getattr(group, "commands", {}).items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def test_help_lists_each_command_by_its_first_paragraph_on_one_line():
    import typer

    for path, cmd in _commands(typer.main.get_command(app)):
        first = cmd.help.split("\n\n")[0]
        assert "\n" not in first and cmd.short_help == first, path
        listing = runner.invoke(app, [*path[:-1], "--help"], env={"COLUMNS": "3000"})
        assert listing.exit_code == 0 and first in listing.output, path  # not cut at the source's line breaks
        page = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "3000"})
        for paragraph in cmd.help.split("\n\n"):
            assert paragraph in page.output, (path, paragraph)
