"""Gradient caching: a contrastive loss over a batch larger than its activations fit in memory.

Gao, Zhang, Han & Callan, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" (RepL4NLP 2021, GradCache). A contrastive loss depends on the model only through the
embeddings of the batch's texts, so its gradient splits in two:

1. embed every text without autograd, ``sub_batch`` texts at a time (no activations kept);
2. make those embeddings leaf tensors, compute the whole loss on them and backpropagate it to
   d loss / d embedding (the loss's graph is a few [B, M] score matrices);
3. embed each sub-batch again with autograd and backpropagate its cached embedding gradient
   (``torch.autograd.backward(emb, grad_tensors=...)``) into the parameters.

The parameters' gradient is the full batch's (chain rule), while the activations held at once
are one sub-batch's. The cost is a second forward of every text. The second forward of a
sub-batch replays the random state of its first (dropout masks), as GradCache's ``RandContext``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

import torch

from alignir.encoders.train.base import check_finite
from alignir.errors import InvalidInputError

__all__ = ["check_sub_batch", "RandomState", "cached_backward"]

T = TypeVar("T")


def check_sub_batch(value: object) -> int:
    """The texts per sub-batch of ``--set grad_cache=N``: an integer >= 0 (0 or None: off)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"grad_cache must be a whole number of texts per sub-batch (>= 1; 0 = off), "
                                f"got {value!r}")
    return int(value)


class RandomState:
    """The CPU generator's state and that of the CUDA ``device`` (when one is given), captured
    at construction; :meth:`replayed` runs a block from that state and leaves the generators as
    they were before the block."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.cuda = device is not None and device.type == "cuda"
        self.index = (device.index if device.index is not None else torch.cuda.current_device()) if self.cuda else None
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = torch.cuda.get_rng_state(self.index) if self.cuda else None

    @contextmanager
    def replayed(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=[self.index] if self.cuda else []):
            torch.set_rng_state(self.cpu_state)
            if self.cuda:
                torch.cuda.set_rng_state(self.cuda_state, self.index)
            yield


def cached_backward(groups: Sequence[Sequence[T]], embed: Callable[[list[T], int], torch.Tensor],
                    objective: Callable[[list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]],
                    sub_batch: int, scale: float = 1.0,
                    device: torch.device | None = None) -> dict[str, float]:
    """Accumulate ``scale`` × d objective / d parameters into the parameters' ``.grad``, holding the
    activations of ``sub_batch`` texts at a time; returns the objective's logs.

    ``groups``: the texts of each role (e.g. queries, documents); ``embed(texts, g)``: the
    differentiable embeddings [n, d] of texts of group ``g``; ``objective(embeddings)``: the loss
    and its logs from one [n_g, d] tensor per group. ``device``: where the model runs (its CUDA
    generator is replayed too)."""
    n = check_sub_batch(sub_batch)
    if n < 1:
        raise InvalidInputError("cached_backward needs sub_batch >= 1")
    plan = [(g, list(texts[i:i + n])) for g, texts in enumerate(groups) for i in range(0, len(texts), n)]
    states: list[RandomState] = []
    firsts: list[torch.Tensor] = []
    with torch.no_grad():
        for g, chunk in plan:
            states.append(RandomState(device))
            firsts.append(embed(chunk, g))
    leaves = []
    for g in range(len(groups)):
        parts = [e for (h, _), e in zip(plan, firsts) if h == g]
        leaves.append(torch.cat(parts).detach().requires_grad_() if parts else None)
    loss, logs = objective(leaves)
    check_finite(loss, logs)
    (loss * scale).backward()
    offset = [0] * len(groups)
    for (g, chunk), state in zip(plan, states):
        start, offset[g] = offset[g], offset[g] + len(chunk)
        grad = leaves[g].grad
        if grad is None:  # the objective does not depend on this group
            continue
        with state.replayed():
            again = embed(chunk, g)
        torch.autograd.backward(again, grad_tensors=grad[start:start + len(chunk)].to(again.dtype))
    return logs
