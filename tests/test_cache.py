"""Embedding cache: hits, resume after an interrupted encode, sharded encodes + merge, compaction."""
import json

import numpy as np
import pytest

from conftest import TINY_CORPUS
from alignir.encoders.cache import EmbeddingCache, encode_cached, fingerprint_key, shard_rows, text_key
from alignir.encoders.embedders import get_embedder
from alignir.encoders.embedders.base import Embedder

TEXTS = [f"{s} (variant {i})" for i in range(5) for s in TINY_CORPUS]  # 30 distinct texts


class Counting(Embedder):
    """The real tiny embedder, counting the texts it encodes; can stop after N calls like a kill."""

    def __init__(self, inner, stop_after: int | None = None):
        self.inner, self.loaded, self.family = inner, inner.loaded, inner.family
        self.n_texts, self.n_calls, self.stop_after = 0, 0, stop_after
        self.calls: list[list[int]] = []  # character lengths of the texts of each call

    def fingerprint(self):
        return self.inner.fingerprint()

    def _encode(self, texts, role, **kw):
        if self.stop_after is not None and self.n_calls >= self.stop_after:
            raise KeyboardInterrupt("simulated kill")
        self.n_calls += 1
        self.n_texts += len(texts)
        self.calls.append([len(t) for t in texts])
        return self.inner._encode(texts, role, **kw)


@pytest.fixture(scope="module")
def emb(tiny_model):
    return get_embedder("mean", tiny_model, progress=False)


@pytest.fixture(scope="module")
def direct(emb):
    return emb.encode_documents(TEXTS)


def test_miss_then_hit(tmp_path, emb, direct):
    cache = EmbeddingCache(tmp_path)
    c = Counting(emb)
    v1 = cache.encode_cached(c, TEXTS, "document", shard_size=8, progress=False)
    np.testing.assert_allclose(v1, direct, rtol=1e-4, atol=1e-5)
    assert c.n_texts == 30 and cache.last_stats["n_parts_written"] == 4  # ceil(30 / 8)
    # a fresh cache object on the same root (another process) hits everything
    c2 = Counting(emb)
    v2 = EmbeddingCache(tmp_path).encode_cached(c2, TEXTS[::-1] + TEXTS[:3], "document", progress=False)
    assert c2.n_texts == 0
    np.testing.assert_array_equal(v2, np.concatenate([v1[::-1], v1[:3]]))
    # roles are separate entries; fingerprint stored beside the parts
    c3 = Counting(emb)
    cache.encode_cached(c3, TEXTS[:4], "query", progress=False)
    assert c3.n_texts == 4
    fp = fingerprint_key(emb.fingerprint())
    assert json.loads((tmp_path / fp / "fingerprint.json").read_text()) == emb.fingerprint()


def test_parts_are_encoded_longest_first(tmp_path, emb, direct):
    c = Counting(emb)
    v = EmbeddingCache(tmp_path).encode_cached(c, TEXTS, "document", shard_size=7, progress=False)
    assert [len(x) for x in c.calls] == [7, 7, 7, 7, 2]
    assert sorted((n for call in c.calls for n in call), reverse=True) == [n for call in c.calls for n in call]
    assert min(c.calls[0]) == sorted(map(len, TEXTS), reverse=True)[6]
    np.testing.assert_allclose(v, direct, rtol=1e-4, atol=1e-5)  # input order is kept


def test_duplicates_encoded_once(tmp_path, emb, direct):
    c = Counting(emb)
    v = encode_cached(c, [TEXTS[0], TEXTS[1], TEXTS[0]], "document", cache=tmp_path, progress=False)
    assert c.n_texts == 2
    np.testing.assert_array_equal(v[0], v[2])


def test_resume_after_kill(tmp_path, emb, direct):
    cache = EmbeddingCache(tmp_path)
    killed = Counting(emb, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        cache.encode_cached(killed, TEXTS, "document", shard_size=7, progress=False)
    assert killed.n_texts == 14  # two parts of 7 reached the disk
    resumed = Counting(emb)
    v = EmbeddingCache(tmp_path).encode_cached(resumed, TEXTS, "document", shard_size=7, progress=False)
    assert resumed.n_texts == 30 - 14
    np.testing.assert_allclose(v, direct, rtol=1e-4, atol=1e-5)


def test_shards_merge_and_compact(tmp_path, emb, direct):
    roots = [tmp_path / f"machine{i}" for i in range(3)]
    for i, root in enumerate(roots):
        c = Counting(emb)
        part = EmbeddingCache(root).encode_cached(c, TEXTS, "document", shard_id=i, shard_num=3, progress=False)
        rows = shard_rows(len(TEXTS), i, 3)
        assert c.n_texts == len(rows) == 10
        np.testing.assert_allclose(part, direct[rows], rtol=1e-4, atol=1e-5)
    merged = EmbeddingCache(tmp_path / "merged")
    assert merged.merge(roots) == 3
    assert merged.merge(roots) == 0  # idempotent
    c = Counting(emb)
    v = merged.encode_cached(c, TEXTS, "document", progress=False)
    assert c.n_texts == 0
    np.testing.assert_allclose(v, direct, rtol=1e-4, atol=1e-5)
    assert merged.compact(emb, "document") == 30
    folder = merged.folder(emb.fingerprint(), "document")
    assert len(list(folder.glob("part-*.npz"))) == 1
    after, found = EmbeddingCache(tmp_path / "merged").lookup(emb, TEXTS + ["never seen"], "document")
    assert found.tolist() == [True] * 30 + [False]
    np.testing.assert_array_equal(after[:30], v)
    assert np.isnan(after[30]).all()


def test_fingerprint_change_is_a_miss(tmp_path, tiny_model):
    a = Counting(get_embedder("mean", tiny_model, progress=False))
    b = Counting(get_embedder("mean", tiny_model, max_length=64, progress=False))
    cache = EmbeddingCache(tmp_path)
    cache.encode_cached(a, TEXTS[:5], "document", progress=False)
    cache.encode_cached(b, TEXTS[:5], "document", progress=False)
    assert a.n_texts == b.n_texts == 5
    assert len(cache.fingerprints()) == 2


def test_keys_and_bad_input(tmp_path, emb):
    assert text_key("a") != text_key("a ") and len(text_key("x\udcff")) == 20
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(ValueError, match="role must be one of"):
        cache.encode_cached(emb, ["a"], "passage")
    with pytest.raises(ValueError, match="both shard_id and shard_num"):
        cache.encode_cached(emb, ["a"], "document", shard_id=0)
    with pytest.raises(ValueError, match="shard_id must be in"):
        cache.encode_cached(emb, ["a"], "document", shard_id=3, shard_num=3)
    with pytest.raises(ValueError, match="texts\\[0\\] is bytes"):
        cache.encode_cached(emb, [b"a"], "document")
    with pytest.raises(ValueError, match="does not exist"):
        cache.merge([tmp_path / "nowhere"])
    assert cache.encode_cached(emb, [], "document").shape == (0, emb.dim)
    assert [len(shard_rows(10, i, 3)) for i in range(3)] == [4, 3, 3]


def test_a_damaged_part_is_quarantined_and_re_encoded(tmp_path, emb, direct, caplog):
    """A part whose bytes were damaged (Bad CRC-32 from the zip reader) no longer blocks every later
    build: it is moved aside as *.corrupt, said so, and its texts are encoded again."""
    cache = EmbeddingCache(tmp_path)
    cache.encode_cached(Counting(emb), TEXTS, "document", shard_size=8, progress=False)
    folder = cache.folder(emb.fingerprint(), "document")
    part = sorted(folder.glob("part-*.npz"))[0]
    raw = bytearray(part.read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 64] = bytes(b ^ 0xFF for b in raw[mid:mid + 64])  # inside the stored vectors
    part.write_bytes(bytes(raw))
    c = Counting(emb)
    with caplog.at_level("WARNING"):
        v = EmbeddingCache(tmp_path).encode_cached(c, TEXTS, "document", shard_size=8, progress=False)
    np.testing.assert_allclose(v, direct, rtol=1e-4, atol=1e-5)
    assert c.n_texts == 8, "exactly the damaged part's texts are re-encoded"
    assert (folder / (part.name + ".corrupt")).exists() and "damaged" in caplog.text


def test_a_killed_checkpoints_temp_file_is_removed(tmp_path, emb):
    import os
    import time

    from alignir.encoders import cache as cache_mod

    cache = EmbeddingCache(tmp_path)
    cache.encode_cached(Counting(emb), TEXTS[:3], "document", progress=False)
    folder = cache.folder(emb.fingerprint(), "document")
    old, fresh = folder / ".part-killed.tmp", folder / ".part-live.tmp"
    for f in (old, fresh):
        f.write_bytes(b"\0" * 4096)
    past = time.time() - cache_mod.STALE_TEMP_SECONDS - 5
    os.utime(old, (past, past))
    EmbeddingCache(tmp_path).encode_cached(Counting(emb), TEXTS[:3], "document", progress=False)
    assert not old.exists() and fresh.exists()  # a write in progress elsewhere is left alone


def test_truncation_is_one_warning_per_corpus_with_the_total(tmp_path, tiny_model, caplog):
    """Encoding a corpus in many parts logs one truncation warning with the total, not one per
    part; the embedder's own per-call warning is back on afterwards."""
    import logging

    emb = get_embedder("prompteol", tiny_model, progress=False, max_length=40)
    texts = [t + " and then some more words to be cut off at forty tokens, which is more than the template leaves room for in this test" for t in TEXTS[:9]]
    emb.encode_documents(texts)
    total = emb.last_stats["n_truncated"]
    assert total >= 5
    cache = EmbeddingCache(tmp_path)
    with caplog.at_level(logging.WARNING):
        caplog.clear()
        cache.encode_cached(emb, texts, "document", shard_size=2, progress=False)
    warned = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert warned == [f"{total} of {len(texts)} document texts truncated to max_length=40 tokens"]
    assert cache.last_stats["n_truncated"] == total and cache.last_stats["n_parts_written"] == 5
    assert emb.warn_truncation is True
    with caplog.at_level(logging.WARNING):
        caplog.clear()
        emb.encode_documents(texts[:2])
    assert sum("truncated" in r.getMessage() for r in caplog.records) == 1
