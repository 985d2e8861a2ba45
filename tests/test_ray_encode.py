"""Encoding on Ray (encoders/ray_pool.py, build_index(ray=...)) on a local cluster of 2 CPUs, one
per test module: the vectors equal a single process's and the index built from them ranks the
same in every mode; an actor killed while the build runs loses nothing (its chunks are encoded
again by the other actor, the restarted one takes work again); and the same with the real
SmolLM2 on ADI. Without ray installed the module is skipped."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'alignir[ray]')")

from alignir.encoders.cache import EmbeddingCache  # noqa: E402
from alignir.encoders.models import load_model  # noqa: E402
from alignir.encoders.ray_pool import RayOptions  # noqa: E402
from alignir.errors import RayEncodeError  # noqa: E402
from alignir.index.store import open_index  # noqa: E402
from alignir.retrieval.config import SparseConfig  # noqa: E402
from alignir.retrieval.indexer import build_index  # noqa: E402
from alignir.retrieval.searcher import MODES, Searcher  # noqa: E402

from conftest import ADI, TINY_CORPUS, share_model_cache, write_corpus  # noqa: E402

# a local Ray cluster with actor processes: end to end (scripts/test.sh --fast leaves it out)
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_thread")]

SPARSE = SparseConfig(doc_k=24, query_m=5)
QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel", "proteins fold"]
#: 48 distinct documents from the tiny corpus's sentences
TEXTS = [f"{TINY_CORPUS[i % len(TINY_CORPUS)]} {TINY_CORPUS[(i * 5 + 1) % len(TINY_CORPUS)]} #{i}" for i in range(48)]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs for this module (its own ports and session folder). Ray's
    memory monitor is off in it: on a machine whose memory other processes fill past 95 %, it
    would kill the actors again and again and fail the tests for what they do not test (the
    loss of an actor is tested here with SIGKILL)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_memory_monitor_refresh_ms", "0")  # read when the raylet starts
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_loaded(tiny_folder):
    """The tiny model loaded from its folder, as each actor loads it."""
    return load_model(str(tiny_folder), device="cpu")


def _rankings(index: Path, loaded, queries: list[str]) -> dict[str, list[list[str]]]:
    with Searcher.open(index, loaded=loaded, runtime="torch") as s:
        return {mode: [[h.id for h in hits] for hits in s.batch_search(queries, k=10, mode=mode)] for mode in MODES}


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _actor_pids() -> list[int]:
    """Process ids of this process's encoder actors (descendants of this process only, so that
    other test workers' clusters are left alone)."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if b"EncodeActor" in cmd and _descends(int(p.name), os.getpid()):
                found.append(int(p.name))
    return sorted(found)


def _build_with_kill(source: Path, index: Path, cache: Path, **kw) -> tuple[dict, int]:
    """build_index(ray=...) in a thread; once its first cache part is written, SIGKILL one encoder
    actor. Returns (the manifest, the pid killed)."""
    out: dict = {}

    def run() -> None:
        try:
            out["manifest"] = build_index(source, index, cache_dir=cache, progress=False, **kw)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    killed = 0
    end = time.monotonic() + 600
    while t.is_alive() and not killed and time.monotonic() < end:
        if any(cache.rglob("part-*.npz")):
            pids = _actor_pids()
            if pids:
                killed = pids[-1]
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.01)
    t.join()
    if "error" in out:
        raise out["error"]
    return out["manifest"], killed


def test_ray_vectors_and_rankings_equal_one_process(cluster, tmp_path, tiny_folder, tiny_loaded):
    source = write_corpus(tmp_path / "corpus.jsonl", TEXTS)
    kw = dict(model=str(tiny_folder), sparse=SPARSE, loaded=tiny_loaded, progress=False, runtime="torch")
    build_index(source, tmp_path / "one", cache_dir=tmp_path / "c1", **kw)
    m = build_index(source, tmp_path / "ray", cache_dir=tmp_path / "c2", ray=RayOptions("auto", chunk_texts=5), **kw)
    assert m["build"]["ray"]["actors"] == 2 and m["build"]["ray"]["chunks"] >= len(TEXTS) // 5
    one, on_ray = open_index(tmp_path / "one"), open_index(tmp_path / "ray")
    assert list(one.doc_ids) == list(on_ray.doc_ids)
    enc = Searcher.open(tmp_path / "one", loaded=tiny_loaded, runtime="torch").embedder
    v1, f1 = EmbeddingCache(tmp_path / "c1").lookup(enc, TEXTS, "document")
    v2, f2 = EmbeddingCache(tmp_path / "c2").lookup(enc, TEXTS, "document")
    assert f1.all() and f2.all()
    np.testing.assert_allclose(v2, v1, rtol=1e-5, atol=1e-6)
    assert _rankings(tmp_path / "ray", tiny_loaded, QUERIES) == _rankings(tmp_path / "one", tiny_loaded, QUERIES)


def test_an_actor_killed_mid_build_loses_nothing(cluster, tmp_path, tiny_folder, tiny_loaded):
    texts = TEXTS + [t + " again" for t in TEXTS]
    source = write_corpus(tmp_path / "corpus.jsonl", texts)
    kw = dict(model=str(tiny_folder), sparse=SPARSE, loaded=tiny_loaded, runtime="torch")
    build_index(source, tmp_path / "one", cache_dir=tmp_path / "c1", progress=False, **kw)
    m, killed = _build_with_kill(source, tmp_path / "ray", tmp_path / "c2",
                                 ray=RayOptions("auto", chunk_texts=1, in_flight=1), **kw)
    assert killed, "no actor was found to kill"
    assert m["counts"]["docs"] == len(texts)
    enc = Searcher.open(tmp_path / "one", loaded=tiny_loaded, runtime="torch").embedder
    v1, _ = EmbeddingCache(tmp_path / "c1").lookup(enc, texts, "document")
    v2, found = EmbeddingCache(tmp_path / "c2").lookup(enc, texts, "document")
    assert found.all()
    np.testing.assert_allclose(v2, v1, rtol=1e-5, atol=1e-6)
    assert _rankings(tmp_path / "ray", tiny_loaded, QUERIES) == _rankings(tmp_path / "one", tiny_loaded, QUERIES)


def test_a_killed_actor_comes_back_and_takes_chunks_again(cluster, tmp_path, tiny_folder, tiny_loaded):
    """SIGKILL one actor between two encodes: its chunk in flight (if any) goes to the other one,
    and once Ray has restarted it (model loaded again) it is asked for work again; every call
    returns every row, equal to one process's vectors."""
    from alignir.encoders.cache import dense_fingerprint, fingerprint_key
    from alignir.encoders.ray_pool import EncoderRecipe, RayEncodePool

    enc = Searcher.open(_tiny_index(tmp_path, tiny_folder, tiny_loaded), loaded=tiny_loaded, runtime="torch").embedder
    ref = enc.encode_documents(TEXTS)
    recipe = EncoderRecipe(model=str(tiny_folder), family="prompteol", runtime="torch")
    with RayEncodePool(recipe, RayOptions("auto", chunk_texts=2, in_flight=1),
                       expected_key=fingerprint_key(dense_fingerprint(enc))) as pool:
        killed = pool.pids[1]
        os.kill(killed, signal.SIGKILL)
        end = time.monotonic() + 300
        while pool.stats["restarts"] == 0 and time.monotonic() < end:
            got = np.full_like(ref, np.nan)
            for rows, vec, _ in pool.encode_chunks(TEXTS, "document"):
                got[rows] = vec
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
            time.sleep(0.2)
        assert pool.stats["restarts"] >= 1 and pool.pids[1] not in (0, killed), (pool.stats, pool.pids)
        before = pool.stats["chunks"]
        got = np.full_like(ref, np.nan)
        for rows, vec, _ in pool.encode_chunks(TEXTS, "document"):
            got[rows] = vec
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        assert pool.stats["chunks"] - before == len(TEXTS) // 2


def _tiny_index(tmp_path: Path, tiny_folder, tiny_loaded) -> Path:
    build_index(write_corpus(tmp_path / "small.jsonl", TEXTS[:6]), tmp_path / "small", model=str(tiny_folder),
                sparse=SPARSE, loaded=tiny_loaded, progress=False, runtime="torch", cache_dir=tmp_path / "c0")
    return tmp_path / "small"


def test_errors_are_one_line(cluster, tmp_path, tiny_folder, tiny_loaded):
    from alignir.encoders.ray_pool import EncoderRecipe, RayEncodePool

    bad = EncoderRecipe(model=str(tmp_path / "no-such-model"), family="prompteol", runtime="torch")
    with pytest.raises(RayEncodeError, match="could not load the encoder") as e:
        RayEncodePool(bad, RayOptions("auto", actors=1))
    assert "\n" not in str(e.value)
    good = EncoderRecipe(model=str(tiny_folder), family="prompteol", runtime="torch")
    with pytest.raises(RayEncodeError, match="differs from this process's"):
        RayEncodePool(good, RayOptions("auto", actors=1), expected_key="0" * 32)
    with pytest.raises(RayEncodeError, match="must be a positive integer"):
        RayOptions("auto", in_flight=0)


def test_an_unreachable_address_is_one_line(tmp_path):
    """Checked before ray.init (which would retry for minutes): nothing listens on port 9."""
    from alignir.encoders.ray_pool import _check_reachable

    with pytest.raises(RayEncodeError, match="cannot reach the Ray cluster at 127.0.0.1:9"):
        _check_reachable("127.0.0.1:9")
    with pytest.raises(RayEncodeError, match="is not HOST:PORT"):
        _check_reachable("nowhere")


@pytest.mark.model
def test_smollm2_on_adi_an_actor_killed_mid_batch_ranks_the_same(cluster, tmp_path, smollm2, adi_smollm2):
    """The real SmolLM2 with build_index's defaults (as ``adi_smollm2`` was built); one actor is
    SIGKILLed while it encodes a chunk: that chunk is encoded again, and every ADI query ranks
    as in the single-process index in every mode."""
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    share_model_cache(tmp_path / "cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
        m, killed = _build_with_kill(ADI, tmp_path / "ray", tmp_path / "cache" / "embeddings",
                                     model="smollm2-135m", loaded=smollm2, ray="auto")
    assert killed and m["build"]["ray"]["retried"] >= 1, m["build"]["ray"]
    queries = [json.loads(line)["text"] for line in (ADI / "queries.jsonl").read_text().splitlines() if line.strip()]
    one, on_ray = open_index(adi_smollm2), open_index(tmp_path / "ray")
    assert list(one.doc_ids) == list(on_ray.doc_ids)
    assert _rankings(tmp_path / "ray", smollm2, queries) == _rankings(adi_smollm2, smollm2, queries)


@pytest.mark.parametrize("command", ["encode", "build-index"])
def test_the_cli_refuses_an_unreachable_cluster_in_one_line_before_loading_a_model(command, tmp_path):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    source = write_corpus(tmp_path / "corpus.jsonl", TEXTS[:3])
    args = [command, str(source), "--model", str(tmp_path / "no-such-model"), "--ray", "127.0.0.1:9"]
    if command == "build-index":
        args += ["--index", str(tmp_path / "idx")]
    r = CliRunner().invoke(app, args)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 1 and len(lines) == 1, r.output
    assert lines[0].startswith("error: cannot reach the Ray cluster at 127.0.0.1:9"), r.output
    assert not (tmp_path / "idx").exists()
