"""Encoder batch budgets per device: how many padded tokens (and rows) one forward may take.

On a CPU a small batch keeps the working set in cache and costs nothing in throughput, so the
budget is fixed (4,096 padded tokens, 64 rows). On a GPU throughput grows with the batch until
memory or the kernels saturate, so the budget is sized to the free memory: an inference forward
(no gradients) holds about one layer's activations at a time — the residual stream, q/k/v, the
attention output and the MLP's gate/up/activation — which is ``(4·d + 3·I)`` values per token
(d hidden size, I the MLP width), doubled for the transient copies. A quarter of the free memory
goes to that, capped at :data:`GPU_MAX_TOKENS` tokens and :data:`GPU_MAX_ROWS` rows; texts are
length-sorted before batching (encoders.embedders.prompteol), so padding stays small.

A training batch is fixed by the data order, but its forward need not be one padded block: its
texts can go through in groups of similar length, each padded only to its own longest, the
embeddings put back in order afterwards (the same vectors: padding is masked). On a CPU a
forward's fixed cost is a few padded tokens' worth, so :func:`length_groups` splits wherever that
saves more padding than the extra forward costs; on a GPU padding is nearly free and the batch
stays whole.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import torch

__all__ = ["CPU_BATCH_TOKENS", "CPU_MAX_ROWS", "GPU_MAX_TOKENS", "GPU_MAX_ROWS", "batch_budget",
           "activation_bytes_per_token", "FORWARD_OVERHEAD_TOKENS", "forward_overhead_tokens", "length_groups",
           "in_length_groups"]

CPU_BATCH_TOKENS = 4096
CPU_MAX_ROWS = 64
GPU_MAX_TOKENS = 262_144
GPU_MAX_ROWS = 1024
#: share of the free GPU memory one batch's activations may take
GPU_MEMORY_SHARE = 0.25
#: a differentiable forward's fixed cost in padded tokens, by device type (others: the batch stays whole)
FORWARD_OVERHEAD_TOKENS = {"cpu": 32}


def activation_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Bytes of activations one token holds at the peak of an inference forward (see module doc)."""
    d = int(getattr(config, "hidden_size", 0) or 0)
    inner = int(getattr(config, "intermediate_size", 0) or 4 * d)
    elem = torch.empty((), dtype=dtype).element_size()
    return max(1, 2 * (4 * d + 3 * inner) * elem)


def batch_budget(model: torch.nn.Module, device: torch.device, free_bytes: int | None = None) -> tuple[int, int]:
    """(batch_tokens, max_rows) for encoding with ``model`` on ``device``.

    ``free_bytes``: the device's free memory (read from CUDA when None; a parameter so the rule
    can be checked without a GPU)."""
    if torch.device(device).type != "cuda":
        return CPU_BATCH_TOKENS, CPU_MAX_ROWS
    if free_bytes is None:
        free_bytes, _total = torch.cuda.mem_get_info(torch.device(device))
    dtype = next(model.parameters()).dtype
    per_token = activation_bytes_per_token(getattr(model, "config", None), dtype)
    tokens = int(GPU_MEMORY_SHARE * free_bytes) // per_token
    return max(CPU_BATCH_TOKENS, min(GPU_MAX_TOKENS, tokens)), GPU_MAX_ROWS


def forward_overhead_tokens(device: torch.device | str) -> int | None:
    """:data:`FORWARD_OVERHEAD_TOKENS` of ``device``'s type; None where a batch stays one forward."""
    return FORWARD_OVERHEAD_TOKENS.get(torch.device(device).type)


def length_groups(lengths: list[int], overhead_tokens: int | None) -> list[list[int]]:
    """The indices of ``lengths`` in groups of one forward each: the split of the length-sorted
    order with the fewest padded tokens plus ``overhead_tokens`` per group (exact, by dynamic
    programming over the cut points). ``overhead_tokens`` None: one group, in the given order."""
    n = len(lengths)
    if overhead_tokens is None or n < 2:
        return [list(range(n))] if n else []
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    sorted_len = [int(lengths[i]) for i in order]
    best = [0] + [None] * n  # best[j]: the cheapest split of the j shortest texts
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # the last group is order[i:j], padded to its longest, sorted_len[j - 1]
            cost = best[i] + sorted_len[j - 1] * (j - i) + overhead_tokens
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


Rows = TypeVar("Rows", torch.Tensor, tuple)


def in_length_groups(lengths: list[int], device: torch.device | str, forward: Callable[[list[int]], Rows],
                     forwards_per_group: int = 1) -> Rows:
    """``forward(indices)`` (one row per index, in that order: a tensor or a tuple of tensors) run
    once per :func:`length_groups` group of ``lengths`` on ``device``, its rows put back together in
    the order of ``lengths``. ``forwards_per_group``: how many model forwards one call makes (a
    generator's prefill plus its steps), each paying the device's fixed cost."""
    overhead = forward_overhead_tokens(device)
    groups = length_groups(lengths, None if overhead is None else overhead * max(1, int(forwards_per_group)))
    parts = [forward(group) for group in groups]
    flat = [i for g in groups for i in g]  # the text of each row; its argsort puts rows back in order
    in_order = flat == sorted(flat)

    def join(pieces: list[torch.Tensor]) -> torch.Tensor:
        rows = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        return rows if in_order else rows[torch.argsort(torch.tensor(flat, device=rows.device))]

    if isinstance(parts[0], tuple):
        return tuple(join([p[k] for p in parts]) for k in range(len(parts[0])))
    return join(parts)
