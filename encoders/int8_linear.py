"""An int8 Linear layer for CPU encoders: int8 weights (one scale per output channel) times int8
activations (one scale per token), accumulated exactly in int32 (issue #16 item 4).

Per token: each row x of the input is quantised with its own scale s_x = max|x| / 127, so a
token's result depends on that token alone — never on the other texts of its batch (one scale
per call, as torch's dynamic quantisation has, lets the largest token of a batch coarsen every
other one). Weights: W ≈ s_w · W_q with s_w = max|W_row| / 127 per output channel. Then

    y = (x_q · W_qᵀ) ⊙ (s_x s_wᵀ) + b,

with x_q · W_qᵀ computed by ``torch._int_mm`` (int8 × int8 → int32, exact).
"""
from __future__ import annotations

import torch

__all__ = ["Int8Linear", "quantize_rows"]

_LEVELS = 127.0


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantisation of each row of ``x`` [n, k]: (int8 [n, k], fp32 scales [n, 1])."""
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_(min=1e-12).div_(_LEVELS)
    return torch.div(x, scale).round_().clamp_(-_LEVELS, _LEVELS).to(torch.int8), scale


class Int8Linear(torch.nn.Module):
    """Drop-in replacement of an fp32 ``nn.Linear`` (see the module docstring); inference only."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        q, scale = quantize_rows(w)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", q.t().contiguous())         # int8 [in, out]
        self.register_buffer("weight_scale", scale.reshape(1, -1))   # fp32 [1, out]
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features).float()
        xq, xs = quantize_rows(rows)
        y = torch._int_mm(xq, self.weight_t).float().mul_(xs).mul_(self.weight_scale)  # in place: no temporaries
        if self.bias is not None:
            y.add_(self.bias)
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-token x per-channel"
