"""Common inference shell of the trained embedders (AutoRegEmbed, LLM2Comp, GIRCSE): options, adapter by
path, batching, fingerprint. Training code builds on it, never the reverse.

As in the prompt families (encoders.embedders.prompteol): empty or whitespace-only texts get an
all-zero vector (they contain nothing to retrieve by; counted in ``last_stats["n_empty"]``), and
lone surrogate code points become U+FFFD."""
from __future__ import annotations

from alignir.errors import InvalidInputError

from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from alignir.encoders.embedders.base import Embedder, clean_text
from alignir.encoders.embedders.adapters import adapter_dir, adapter_hash, load_adapter, read_sparse_map
from alignir.encoders.embedders.generative import init_soft_tokens

__all__ = ["TrainedEmbedder"]

#: options every embedder accepts (docs/interfaces.md); family options are declared per class
COMMON_OPTIONS = ("max_length", "batch_tokens", "batch_size", "instruction", "adapter", "progress")


class TrainedEmbedder(Embedder):
    """Base of AutoRegEmbed / LLM2Comp / GIRCSE embedders.

    Subclasses set ``family``, ``soft_key`` (name of their trained soft-token tensor in the
    adapter, or None), ``OPTIONS`` (defaults of their own options) and implement ``embed_batch``.
    """

    soft_key: str | None = None
    OPTIONS: dict[str, Any] = {}
    #: option values an adapter implies when its saved ``embedder_options`` lack them (adapters
    #: trained before the option existed read the way they were trained)
    LEGACY_OPTIONS: dict[str, Any] = {}

    def __init__(self, loaded, *, adapter: str | None = None, max_length: int = 512, batch_tokens: int | None = None,
                 batch_size: int = 8, instruction: str | None = None, progress: bool = False, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise InvalidInputError(f"unknown option(s) {unknown} for embedder {self.family!r}; "
                             f"known: {sorted(set(self.OPTIONS) | set(COMMON_OPTIONS))}")
        if int(max_length) < 1 or int(batch_size) < 1:
            raise InvalidInputError(f"max_length and batch_size must be >= 1, got {max_length}, {batch_size}")
        if batch_tokens is not None and int(batch_tokens) < 1:
            raise InvalidInputError(f"batch_tokens must be >= 1, got {batch_tokens}")
        self.loaded = loaded
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.batch_tokens = int(batch_tokens) if batch_tokens else None
        self.instruction = instruction
        self.progress = progress
        self.last_stats: dict[str, Any] = {}
        self.adapter = str(adapter) if adapter else None
        self.adapter_meta: dict[str, Any] = {}
        extra: dict[str, torch.Tensor] = {}
        if self.adapter:
            self.model, extra, self.adapter_meta = load_adapter(loaded.model, self.adapter, loaded.identity)
            self.adapter_sha = adapter_hash(self.adapter)
            self.sparse_map, self.sparse_map_sha = read_sparse_map(adapter_dir(self.adapter), self.dim)
        else:
            self.model = loaded.model
            self.adapter_sha = None
        trained = dict(self.adapter_meta.get("embedder_options", {}))
        if self.adapter:
            trained = {**self.LEGACY_OPTIONS, **trained}
        if self.instruction is None and (self.adapter_meta.get("hp") or {}).get("instruction"):
            self.instruction = self.adapter_meta["hp"]["instruction"]  # the query instruction it was trained with
        self.options = {**self.OPTIONS, **{k: v for k, v in trained.items() if k in self.OPTIONS}, **options}
        self.validate_options()
        self.soft: torch.Tensor | None = None
        if self.soft_key is not None:
            n = int(self.options["k"])
            if self.soft_key in extra:
                soft = extra[self.soft_key]
                if soft.shape[0] != n:
                    raise InvalidInputError(f"adapter {self.adapter!r} was trained with k={soft.shape[0]} {self.soft_key}, "
                                     f"but k={n} was requested")
                self.soft = soft
            else:
                self.soft = init_soft_tokens(self.model, n)

    # -- subclass hooks
    def validate_options(self) -> None:
        """Raise ValueError on bad option values."""

    def embed_batch(self, texts: list[str], role: str) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def text_length(self, text: str) -> int:
        return len(text)

    # -- Embedder API
    def _encode(self, texts: list[str], role: str, **kw) -> np.ndarray:
        if role not in ("query", "document"):
            raise InvalidInputError(f"role must be 'query' or 'document', got {role!r}")
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise InvalidInputError(f"texts must be strings; rows {bad[:10]} are not")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        live = [i for i, t in enumerate(texts) if t.strip()]  # empty texts keep their zero row
        self.last_stats = {"n_texts": len(texts), "n_empty": len(texts) - len(live)}
        if not live:
            return out
        texts = [clean_text(t) for t in texts]
        order = sorted(live, key=lambda i: -len(texts[i]))  # similar lengths per batch
        batches, cur = [], []
        for i in order:
            cur.append(i)
            longest = min(self.max_length, max(len(texts[j]) for j in cur) // 3 + 16)  # rough token estimate
            full = len(cur) >= self.batch_size or (self.batch_tokens and len(cur) * longest >= self.batch_tokens)
            if full:
                batches.append(cur)
                cur = []
        if cur:
            batches.append(cur)
        show = self.progress and len(batches) > 1
        with torch.no_grad():
            for b in tqdm(batches, desc=f"{self.family} {role}s", disable=not show):
                z = self.embed_batch([texts[i] for i in b], role)
                out[b] = z.float().cpu().numpy()
        return out

    def fingerprint(self) -> dict[str, Any]:
        fp = {
            "family": self.family,
            "model": dict(self.loaded.identity),
            "adapter_sha256": self.adapter_sha,
            "max_length": self.max_length,
            "instruction": self.instruction,
            "options": {k: self.options[k] for k in sorted(self.options)},
        }
        dtype = str(self.loaded.dtype).replace("torch.", "")
        if dtype != "float32":  # fp32 (the CPU default) leaves existing fingerprints as they were
            fp["dtype"] = dtype
        if self.sparse_map_sha:
            fp["sparse_map_sha256"] = self.sparse_map_sha
        fp.update(self.text_form_fingerprint())
        return fp
