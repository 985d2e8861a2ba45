"""Encoder batch budgets per device: how many padded tokens (and rows) one forward may take.

On a CPU a small batch keeps the working set in cache and costs nothing in throughput, so the
budget is fixed (4,096 padded tokens, 64 rows). On a GPU throughput grows with the batch until
memory or the kernels saturate, so the budget is sized to the free memory: an inference forward
(no gradients) holds about one layer's activations at a time — the residual stream, q/k/v, the
attention output and the MLP's gate/up/activation — which is ``(4·d + 3·I)`` values per token
(d hidden size, I the MLP width), doubled for the transient copies. A quarter of the free memory
goes to that, capped at :data:`GPU_MAX_TOKENS` tokens and :data:`GPU_MAX_ROWS` rows; texts are
length-sorted before batching (encoders.embedders.prompteol), so padding stays small.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["CPU_BATCH_TOKENS", "CPU_MAX_ROWS", "GPU_MAX_TOKENS", "GPU_MAX_ROWS", "batch_budget",
           "activation_bytes_per_token"]

CPU_BATCH_TOKENS = 4096
CPU_MAX_ROWS = 64
GPU_MAX_TOKENS = 262_144
GPU_MAX_ROWS = 1024
#: share of the free GPU memory one batch's activations may take
GPU_MEMORY_SHARE = 0.25


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
