"""The interface every training method implements, and what they share."""
from __future__ import annotations

from alignir.errors import InvalidInputError

from typing import Any

import torch

from alignir.encoders.train.data import Pair, normal_query

__all__ = ["Method", "pair_texts", "in_batch_candidates", "check_finite"]


class Method:
    """One training method/stage. The trainer owns the (peft) model and the optimizer.

    ``STAGES`` maps stage name -> data kind ("pairs" or "texts"); ``DEFAULTS`` maps stage name ->
    hyper-parameter defaults (the paper's values where it gives them).
    """

    name = "base"
    STAGES: dict[str, str] = {}
    DEFAULTS: dict[str, dict[str, Any]] = {}
    #: name of the soft-token tensor saved in the adapter (None: no soft tokens)
    soft_key: str | None = None

    def __init__(self, model, loaded, stage: str, hp: dict[str, Any], extra: dict[str, torch.Tensor],
                 max_length: int = 128, target_length: int = 128) -> None:
        if stage not in self.STAGES:
            raise InvalidInputError(f"unknown stage {stage!r} for method {self.name!r}; use one of {list(self.STAGES)}")
        defaults = dict(self.DEFAULTS.get(stage, {}))
        unknown = sorted(set(hp) - set(defaults))
        if unknown:
            raise InvalidInputError(f"unknown hyper-parameter(s) {unknown} for {self.name}/{stage}; known: {sorted(defaults)}")
        self.model = model
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.stage = stage
        self.hp = {**defaults, **hp}
        self.max_length = int(max_length)
        self.target_length = int(target_length)
        self.soft: torch.nn.Parameter | None = None
        self.setup(extra)

    @property
    def data_kind(self) -> str:
        return self.STAGES[self.stage]

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def setup(self, extra: dict[str, torch.Tensor]) -> None:
        """Create trainable extras (soft tokens), reference models, ..."""

    def extra_parameters(self) -> list[torch.nn.Parameter]:
        return [self.soft] if self.soft is not None else []

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        return {self.soft_key: self.soft.detach()} if self.soft is not None and self.soft_key else {}

    def embedder_options(self) -> dict[str, Any]:
        """Options the matching embedder needs to read this adapter (stored in the adapter config)."""
        return {}

    def embedder_family(self) -> str:
        return self.name

    def loss(self, batch: list) -> tuple[torch.Tensor, dict[str, float]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, batch: list, scale: float = 1.0) -> dict[str, float]:
        """Accumulate ``scale`` × d loss / d parameters of ``batch`` into the parameters' ``.grad``
        and return the loss parts (:meth:`loss`'s logs). The trainer calls this once per
        micro-batch (``scale`` = 1 / grad_accum); a method that computes its gradient another way
        (InfoNCE's gradient cache) overrides it."""
        loss, logs = self.loss(batch)
        check_finite(loss, logs)
        (loss * scale).backward()
        return logs


def check_finite(loss: torch.Tensor, logs: dict[str, float]) -> None:
    """Refuse a non-finite loss before its backward (FloatingPointError naming the parts)."""
    if not torch.isfinite(loss):
        raise FloatingPointError(f"non-finite loss {float(loss)}: {logs}")


def pair_texts(batch: list[Pair]) -> tuple[list[str], list[str], list[int]]:
    """(queries, documents, positive row per query): documents = all positives then all hard negatives."""
    queries = [p.query for p in batch]
    docs = [p.positive for p in batch] + [n for p in batch for n in p.negatives]
    return queries, docs, list(range(len(batch)))


def in_batch_candidates(batch: list[Pair], docs: list[str]) -> torch.Tensor | None:
    """C(q) of a contrastive loss over ``docs`` (:func:`pair_texts`' layout: column i is query i's
    positive): every document except those judged relevant to query i's text other than its own
    positive — another positive of the same query (or of an id with the same text), or a relevant
    document that is in the batch for another query. Such a document is not a negative of query
    i. None when no column is masked (every document a candidate)."""
    relevant: dict[str, set[str]] = {}
    for p in batch:
        relevant.setdefault(normal_query(p.query), set()).update((p.positive, *p.relevant))
    cand = torch.ones(len(batch), len(docs), dtype=torch.bool)
    for i, p in enumerate(batch):
        rel = relevant[normal_query(p.query)]
        for j, d in enumerate(docs):
            if j != i and d in rel:
                cand[i, j] = False
    return None if bool(cand.all()) else cand
