"""The disk cache of teacher vectors (encoders.train.teacher.CachedTeacher): round-trip through
its shards, resume after a shard a kill left half-written, keys that separate roles, prompts and
teachers, and the trainer using it transparently (same losses with a cold and a warm cache)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders.train.teacher import (CachedTeacher, DenseTeacher, SentenceTransformerTeacher, make_teacher,
                                            resolve_teacher, st_identity, teacher_key)
from alignir.encoders.train.trainer import train
from alignir.errors import InvalidInputError

from conftest import TINY_CORPUS, TRAIN_QUERIES, train_config

pytestmark = pytest.mark.usefixtures("one_thread")


class Prompted:
    """A teacher whose roles read texts differently (a prompt per role), counting what it encodes."""

    def __init__(self, base: DenseTeacher, prompts: dict[str, str]) -> None:
        self.base, self.prompts, self.encoded = base, prompts, []
        self.identity = "prompted|" + base.identity

    def prompt(self, role: str) -> str:
        return self.prompts[role]

    def embed(self, texts, role="document"):
        self.encoded.extend((role, t) for t in texts)
        return self.base.embed([self.prompts[role] + t for t in texts])


def test_round_trip_through_shards(tiny_bert, tmp_path):
    teacher = DenseTeacher(str(tiny_bert))
    texts = TINY_CORPUS + TRAIN_QUERIES[:1]
    assert len(set(texts)) == 7
    cache = CachedTeacher(teacher, tmp_path, shard_size=3)
    got = cache.embed(texts, "document")
    want = teacher.embed(texts).numpy().astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got.numpy(), want)  # fp16-rounded, as stored
    cache.flush()
    shards = sorted(p.name for p in cache.folder.glob("*.keys.npy"))
    assert shards == ["000000.keys.npy", "000001.keys.npy", "000002.keys.npy"]  # 3 + 3 + 1 rows
    again = CachedTeacher(DenseTeacher(str(tiny_bert)), tmp_path, shard_size=3)
    assert len(again) == 7
    again.teacher.embed = None  # a hit must not reach the model
    np.testing.assert_array_equal(again.embed(texts[::-1], "document").numpy(), want[::-1])
    assert again.hits == 7 and again.misses == 0
    meta = json.loads((cache.folder / "teacher.json").read_text())
    assert meta["identity"] == teacher.identity


def test_resume_after_a_partial_shard(tiny_bert, tmp_path):
    base = Prompted(DenseTeacher(str(tiny_bert)), {"query": "", "document": ""})
    cache = CachedTeacher(base, tmp_path, shard_size=2)
    cache.embed(TINY_CORPUS[:4], "document")  # two complete shards
    folder = cache.folder
    # a kill after the vectors of shard 2 were written but before its keys
    np.save(folder / "000002.vecs.npy", np.zeros((2, 16), np.float16))
    # and a shard whose keys file is cut short
    (folder / "000003.keys.npy").write_bytes(b"\x93NUMPY garbage")
    np.save(folder / "000003.vecs.npy", np.zeros((2, 16), np.float16))
    fresh = Prompted(DenseTeacher(str(tiny_bert)), {"query": "", "document": ""})
    resumed = CachedTeacher(fresh, tmp_path, shard_size=2)
    assert len(resumed) == 4
    out = resumed.embed(TINY_CORPUS[:6], "document")
    assert fresh.encoded == [("document", t) for t in TINY_CORPUS[4:6]]  # only the missing texts
    resumed.flush()
    assert (folder / "000004.keys.npy").is_file()  # appended after the broken shards, never over a complete one
    third = CachedTeacher(Prompted(DenseTeacher(str(tiny_bert)), {"query": "", "document": ""}), tmp_path)
    assert len(third) == 6
    np.testing.assert_array_equal(third.embed(TINY_CORPUS[:6], "document").numpy(), out.numpy())


def test_key_separates_role_prompt_and_teacher(tiny_bert, tmp_path):
    assert teacher_key("t", "query", "q: ", "x") != teacher_key("t", "document", "q: ", "x")
    assert teacher_key("t", "query", "q: ", "x") != teacher_key("t", "query", "", "x")
    assert teacher_key("t", "query", "", "x") != teacher_key("u", "query", "", "x")
    base = Prompted(DenseTeacher(str(tiny_bert)), {"query": "search: ", "document": "passage: "})
    cache = CachedTeacher(base, tmp_path)
    text = TRAIN_QUERIES[0]
    q, d = cache.embed([text], "query"), cache.embed([text], "document")
    assert not torch.equal(q, d)  # one text, two roles, two vectors
    assert base.encoded == [("query", text), ("document", text)]
    cache.embed([text, text], "query")
    assert len(base.encoded) == 2
    # another max_length is another teacher: another folder, nothing shared
    other = CachedTeacher(DenseTeacher(str(tiny_bert), max_length=8), tmp_path)
    assert other.folder != cache.folder and len(other) == 0
    with pytest.raises(ValueError, match="role"):
        cache.embed([text], "passage")


def test_a_folder_of_another_teacher_is_refused(tiny_bert, tmp_path):
    cache = CachedTeacher(DenseTeacher(str(tiny_bert)), tmp_path)
    (cache.folder / "teacher.json").write_text(json.dumps({"identity": "someone else"}))
    with pytest.raises(ValueError, match="belongs to"):
        CachedTeacher(DenseTeacher(str(tiny_bert)), tmp_path)


def test_infonce_distils_through_the_cache_with_the_same_losses(tiny_model, tiny_bert, data_files, tmp_path):
    """`--set teacher_cache=DIR`: the first run fills the cache, a second run reads it, both log the
    same losses; the cache holds every text the teacher saw."""
    hp = {"teacher": str(tiny_bert), "distill": 0.5, "teacher_cache": str(tmp_path / "cache")}
    cold = train(train_config(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=3, hp=hp),
                 loaded=tiny_model, return_method=True)
    teacher = cold["method_obj"].teacher
    assert isinstance(teacher, CachedTeacher) and teacher.misses > 0
    teacher.flush()
    warm = train(train_config(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], steps=3, hp=hp),
                 loaded=tiny_model, return_method=True)
    assert warm["method_obj"].teacher.misses == 0 and warm["method_obj"].teacher.hits > 0

    def rows(summary):
        return [(r["infonce"], r["distill"]) for r in map(json.loads, open(Path(summary["out"]) / "loss_log.jsonl"))
                if "distill" in r]

    assert rows(cold) == rows(warm) and len(rows(cold)) == 3


def test_make_teacher_picks_the_loader(tiny_bert, tmp_path, monkeypatch):
    assert isinstance(make_teacher(str(tiny_bert)), DenseTeacher)
    assert make_teacher(str(tiny_bert), max_length=12).max_length == 12
    monkeypatch.delenv("ALIGNIR_MODELS", raising=False)
    assert resolve_teacher("embeddinggemma-300m") == "google/embeddinggemma-300m"
    (tmp_path / "embeddinggemma-300m").mkdir()
    monkeypatch.setenv("ALIGNIR_MODELS", str(tmp_path))
    assert resolve_teacher("EmbeddingGemma-300M") == str(tmp_path / "embeddinggemma-300m")


def _save_st_folder(tiny_bert: Path, folder: Path, max_seq_length: int):
    """The tiny BERT as a sentence-transformers folder (Transformer + mean Pooling + Normalize)
    with the role prompts ``find: `` and ``text: ``; returns the model it saved."""
    st = pytest.importorskip("sentence_transformers")
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    model = st.SentenceTransformer(modules=[Transformer(str(tiny_bert), max_seq_length=max_seq_length),
                                            Pooling(16, pooling_mode="mean"), Normalize()],
                                   prompts={"query": "find: ", "document": "text: "})
    model.save(str(folder))
    return model


def test_a_sentence_transformers_folder_reads_roles_with_its_prompts(tiny_bert, tmp_path):
    """A sentence-transformers folder (Transformer + mean Pooling + Normalize) with role prompts:
    the teacher prepends the role's prompt and returns the model's normalised embedding."""
    folder = tmp_path / "st"
    model = _save_st_folder(tiny_bert, folder, max_seq_length=64)
    teacher = make_teacher(str(folder))
    assert isinstance(teacher, SentenceTransformerTeacher) and teacher.prompt("query") == "find: "
    got = teacher.embed(TRAIN_QUERIES[:2], "query")
    want = model.encode(["find: " + t for t in TRAIN_QUERIES[:2]], convert_to_tensor=True, normalize_embeddings=True)
    torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, teacher.embed(TRAIN_QUERIES[:2], "document"))
    assert teacher.max_length == 64


@pytest.mark.slow
def test_the_embeddinggemma_teacher_ranks_a_paraphrase_first():
    """`teacher=embeddinggemma-300m` with $ALIGNIR_MODELS holding the reassembled folder
    (scripts/fetch_embeddinggemma.sh): its query and document prompts, 768-d normalised vectors."""
    import os

    folder = Path(os.environ.get("ALIGNIR_MODELS", "/nonexistent")) / "embeddinggemma-300m"
    if not (folder / "config_sentence_transformers.json").is_file():
        pytest.skip("EmbeddingGemma-300M is not in $ALIGNIR_MODELS (scripts/fetch_embeddinggemma.sh)")
    pytest.importorskip("sentence_transformers")
    teacher = make_teacher("embeddinggemma-300m")
    assert isinstance(teacher, SentenceTransformerTeacher) and teacher.max_length == 128
    assert teacher.prompt("query") == "task: search result | query: "
    q = teacher.embed(["how do plants make sugar from light"], "query")
    d = teacher.embed(["Photosynthesis turns sunlight, water and carbon dioxide into glucose.",
                       "The stock market fell as interest rates rose.", "Supersonic flow over a wedge."], "document")
    assert int((q @ d.T).argmax()) == 0 and d.shape == (3, 768)
    torch.testing.assert_close(d.norm(dim=1), torch.ones(3))


def test_precompute_fills_the_cache_a_run_then_reads(tiny_model, tiny_bert, data_files, tmp_path, capsys):
    """scripts/precompute_teacher.py caches exactly the mix's (role, text) pairs; a second call
    finds nothing to do; training on that mix then computes no teacher vector."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("precompute_teacher", Path(__file__).resolve().parents[1]
                                                  / "scripts" / "precompute_teacher.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = ["--teacher", str(tiny_bert), "--cache", str(tmp_path / "cache"), "--data", data_files["pairs"],
            "--batch", "4", "--shard-size", "5"]
    want = mod.mix_texts(data_files["pairs"], None, None, 1, [0])
    assert {r for r, _ in want} == {"query", "document"} and len(want) == 12  # 6 queries + 6 distinct documents
    assert mod.main(args) == 0
    assert "12 to compute" in capsys.readouterr().out
    assert mod.main(args) == 0
    assert "0 to compute" in capsys.readouterr().out
    cache = CachedTeacher(DenseTeacher(str(tiny_bert)), tmp_path / "cache")
    assert len(cache) == 12 and all(cache.contains(t, r) for r, t in want)
    hp = {"teacher": str(tiny_bert), "distill": 0.5, "teacher_cache": str(tmp_path / "cache")}
    run = train(train_config(tmp_path / "run", "infonce", "contrastive", data_files["pairs"], steps=2, hp=hp),
                loaded=tiny_model, return_method=True)
    assert run["method_obj"].teacher.misses == 0


def test_a_fully_cached_run_needs_neither_the_teacher_weights_nor_their_package(tiny_bert, tmp_path):
    texts = TINY_CORPUS[:3]
    warm = CachedTeacher(DenseTeacher(str(tiny_bert)), tmp_path, shard_size=2)
    want = warm.embed(texts, "document").numpy()
    warm.flush()
    # a teacher named by a registered package that is not installed: its identity is the same
    # folder name, so the cache is found; a hit must not look for the package or load weights
    moved = tmp_path / "copy" / tiny_bert.name
    cold = DenseTeacher(str(moved))
    assert cold.identity == warm.teacher.identity
    cached = CachedTeacher(cold, tmp_path)
    np.testing.assert_array_equal(cached.embed(texts, "document").numpy(), want)
    assert cold._model is None and cached.misses == 0
    with pytest.raises(OSError):  # the first miss loads the (missing) weights and says so
        cached.embed(["a text the cache has never seen"], "document")


def test_a_teacher_cache_seeded_from_an_anchor_run_serves_its_vectors(tmp_path):
    """precompute_teacher.py --seed-from-anchor: the document vectors a dense anchor run cached
    (benchmarks/quality/anchors.py --cache) go into the teacher cache under the teacher's own identity
    and prompt, so a run with that teacher reads them without the model."""
    import importlib.util

    from alignir.encoders.cache import EmbeddingCache
    from benchmarks.quality.anchors import AnchorEmbedder

    spec = importlib.util.spec_from_file_location("precompute_teacher", Path(__file__).resolve().parents[1]
                                                  / "scripts" / "precompute_teacher.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def encode(texts, role):
        return np.stack([np.array([len(t), t.count("e"), 1.0, -0.5], dtype=np.float32) for t in texts])

    cached_docs, other = TINY_CORPUS[:4], TINY_CORPUS[4:6]
    EmbeddingCache(tmp_path / "anchor").encode_cached(AnchorEmbedder("embeddinggemma-300m", 512, encode), cached_docs,
                                                      "document", shard_size=2, progress=False)
    got = mod.anchor_vectors(str(tmp_path / "anchor"), "embeddinggemma-300m", 512, cached_docs + other)
    assert sorted(got) == sorted(cached_docs)
    assert mod.anchor_vectors(str(tmp_path / "anchor"), "embeddinggemma-300m", 128, cached_docs) == {}  # another cut
    replay = mod.ReplayTeacher("embeddinggemma-300m", 512, got)
    assert replay.identity == st_identity("embeddinggemma-300m", 512)
    assert replay.prompt("document") == "title: none | text: "
    seeded = CachedTeacher(replay, tmp_path / "teacher")
    seeded.embed(cached_docs, "document")
    seeded.flush()
    reader = CachedTeacher(mod.ReplayTeacher("embeddinggemma-300m", 512, {}), tmp_path / "teacher")
    assert all(reader.contains(t, "document") for t in cached_docs)
    np.testing.assert_array_equal(reader.embed(cached_docs, "document").numpy(),
                                  encode(cached_docs, "document").astype(np.float16).astype(np.float32))
    assert reader.misses == 0
    with pytest.raises(ValueError):
        replay.embed(cached_docs[:1], "query")


def test_a_sentence_transformers_teacher_loads_only_at_a_cache_miss(tiny_bert, tmp_path, monkeypatch):
    """The EmbeddingGemma teacher's identity comes from its registered settings, so a cache filled
    under that identity serves a run on a machine without its folder; the first miss loads."""
    monkeypatch.setenv("ALIGNIR_MODELS", str(tmp_path / "no-models-here"))
    teacher = make_teacher("embeddinggemma-300m", max_length=512)
    assert teacher.identity == st_identity("embeddinggemma-300m", 512) and teacher._model is None
    assert teacher.prompt("document") == "title: none | text: "
    texts = TINY_CORPUS[:3]
    vectors = torch.nn.functional.normalize(torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1, dim=1)

    class Replay:  # the same identity and prompts, its vectors given: fills the cache as a first run would
        identity, prompt = teacher.identity, teacher.prompt

        def embed(self, batch, role="document"):
            return vectors[[texts.index(t) for t in batch]]

    seeded = CachedTeacher(Replay(), tmp_path / "cache")
    seeded.embed(texts, "document")
    seeded.flush()
    cached = CachedTeacher(make_teacher("embeddinggemma-300m", max_length=512), tmp_path / "cache")
    torch.testing.assert_close(cached.embed(texts, "document"), vectors.half().float())
    assert cached.teacher._model is None and cached.misses == 0
    # the first miss loads the teacher and says why it cannot: the hub id is offline here, or (as in a
    # plain test install) sentence-transformers is absent, which a warm cache never needed
    with pytest.raises((OSError, InvalidInputError)):
        cached.embed(["a text the cache has never seen"], "document")


def test_a_sentence_transformers_folder_gives_its_identity_before_loading(tiny_bert, tmp_path):
    """A saved folder's prompts (and max_seq_length where stored) are read from its config files:
    with them the teacher has its identity without loading its weights."""
    _save_st_folder(tiny_bert, tmp_path / "st", max_seq_length=48)
    teacher = make_teacher(str(tmp_path / "st"), max_length=40)  # prompts from the folder's config
    assert teacher._model is None and teacher.prompt("query") == "find: " and teacher.prompt("document") == "text: "
    assert teacher.identity == st_identity("st", 40)
    teacher.embed(["a first text"], "query")
    assert teacher.model.max_seq_length == 40
    # sentence-transformers >= 6 keeps max_seq_length out of sentence_bert_config.json: then the
    # folder is loaded to read it, and the identity is the same as the stored length gives
    assert make_teacher(str(tmp_path / "st")).identity == st_identity("st", 48)
