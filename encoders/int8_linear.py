"""An int8 Linear layer for CPU encoders: int8 weights (one scale per output channel) times int8
activations (one scale per token), accumulated exactly in int32.

Per token: each row x of the input is quantised with its own scale s_x = max|x| / 127, so a
token's result depends on that token alone — never on the other texts of its batch (one scale
per call, as torch's dynamic quantisation has, lets the largest token of a batch coarsen every
other one). Weights: W ≈ s_w · W_q with s_w = max|W_row| / 127 per output channel. Then

    y = (x_q · W_qᵀ) ⊙ (s_x s_wᵀ) + b,

with x_q · W_qᵀ computed by ``torch._int_mm`` (int8 × int8 → int32, exact).

Projections that read one input (a decoder layer's q/k/v, or its MLP gate/up) run as one
:class:`SharedInputInt8`: their weights stacked into one int8 matrix, the input quantised once
(and, for a short query, multiplied once). Weight scales are per output channel and activation
scales per token, so the result equals the separate layers' bit for bit; only the number of
passes falls (for q/k/v: three quantisations and three GEMM calls → one), which is what a short
query spends beside the GEMMs themselves.
"""
from __future__ import annotations

import threading
from typing import Sequence

import torch

__all__ = ["Int8Linear", "SharedInputInt8", "Int8Slice", "quantize_rows"]

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


def _version(x: torch.Tensor) -> int:
    """``x``'s in-place modification counter; inference tensors have none (they cannot be
    modified outside inference mode, and modules do not modify their inputs)."""
    return -1 if x.is_inference() else x._version


class SharedInputInt8(torch.nn.Module):
    """Linear layers reading one input, with their int8 weights stacked (module docstring). Each
    member is an :class:`Int8Slice`; the first member called with an input quantises it once and
    computes every member's output, the others take theirs. Up to :attr:`STACKED_MAX_ROWS` input
    rows (a query) that is one GEMM over the stacked weights; above it, one GEMM per member over
    its rows of them (torch's int8 GEMM slows down ~1.7x when 3,072 output columns meet ~1,000
    rows, where two GEMMs of 1,536 do not). The outputs are kept per thread, only until every
    member has taken its own, and recomputed whenever a member is called with another tensor (or
    the same one modified since), so any calling order gives the separate layers' results."""

    #: stacked GEMM up to this many rows; one GEMM per member above (measured: equal time up to
    #: 512 rows, 1.7x slower stacked at 1,024)
    STACKED_MAX_ROWS = 256

    def __init__(self, linears: Sequence[torch.nn.Linear]) -> None:
        super().__init__()
        ins = {lin.in_features for lin in linears}
        if len(ins) != 1:
            raise ValueError(f"layers reading one input share in_features; got {sorted(ins)}")
        self.in_features = ins.pop()
        q, scale = quantize_rows(torch.cat([lin.weight.detach().float() for lin in linears]))
        self.register_buffer("weight", q)                            # int8 [out, in], rows stacked
        self.register_buffer("weight_scale", scale.reshape(1, -1))   # fp32 [1, out]
        has_bias = any(lin.bias is not None for lin in linears)
        self.register_buffer("bias", torch.cat([lin.bias.detach().float() if lin.bias is not None
                                                else torch.zeros(lin.out_features) for lin in linears])
                             if has_bias else None)
        ends = torch.tensor([lin.out_features for lin in linears]).cumsum(0).tolist()
        self.bounds = list(zip([0] + ends[:-1], ends))
        self._local = threading.local()

    def _outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        rows = x.reshape(-1, self.in_features).float()
        xq, xs = quantize_rows(rows)
        spans = [(0, self.bounds[-1][1])] if rows.shape[0] <= self.STACKED_MAX_ROWS else self.bounds
        ys = []
        for a, b in spans:
            y = torch._int_mm(xq, self.weight[a:b].t()).float().mul_(xs).mul_(self.weight_scale[:, a:b])
            if self.bias is not None:
                y.add_(self.bias[a:b])
            ys.append(y)
        if len(spans) == 1:
            ys = [ys[0][:, a:b] for a, b in self.bounds]
        return [y.reshape(*x.shape[:-1], y.shape[-1]).to(x.dtype) for y in ys]

    def output(self, x: torch.Tensor, member: int) -> torch.Tensor:
        """Member ``member``'s output for input ``x``."""
        st, version = self._local, _version(x)
        if getattr(st, "x", None) is not x or st.version != version or member in st.served:
            st.x, st.version, st.served, st.ys = x, version, set(), self._outputs(x)
        st.served.add(member)
        y = st.ys[member]
        if len(st.served) == len(self.bounds):  # every member served: keep no tensor alive
            st.x = st.ys = None
        return y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, members={[b - a for a, b in self.bounds]}, int8"


class Int8Slice(torch.nn.Module):
    """One member of a :class:`SharedInputInt8`: a drop-in for the Linear layer it replaces."""

    def __init__(self, group: SharedInputInt8, member: int) -> None:
        super().__init__()
        self.group, self.member = group, member
        start, end = group.bounds[member]
        self.in_features, self.out_features = group.in_features, end - start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.output(x, self.member)

    def extra_repr(self) -> str:
        return f"member={self.member}, out_features={self.out_features}"
