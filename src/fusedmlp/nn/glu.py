"""``GEGLU``: a drop-in for ``nn.Linear(in, 2*out)`` followed by split-and-gate."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..ops.activations import check_activation
from ..ops.glu import geglu
from .tensor_parallel import tensor_parallel_forward


class GEGLU(nn.Module):
    """``y = x1 * gelu_tanh(x2)`` with ``[x1 | x2] = x @ weight.T + bias``, in one fused kernel.

    Parameters and state-dict keys are those of ``nn.Linear(in_features, 2 * out_features)``
    (``weight [2*out, in]``, ``bias [2*out]``), so checkpoints of such a layer load unchanged.
    ``recompute=True`` keeps only the input for the backward (memory-optimal); False also
    keeps the pre-activation for a cheaper backward. ``activation`` is the gate's activation
    (``gelu_tanh`` by default; ``gelu`` for exact-erf GEGLU layers).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recompute: bool = True,
                 activation: str = "gelu_tanh", device=None, dtype=None):
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"in_features and out_features must be positive, got {in_features}, {out_features}")
        self.in_features = in_features
        self.out_features = out_features
        self.recompute = recompute
        self.activation = check_activation(activation)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((2 * out_features, in_features), **factory))
        self.bias = nn.Parameter(torch.empty(2 * out_features, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's initialisation, so a fresh GEGLU matches a fresh Linear in distribution.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear, recompute: bool = True, activation: str = "gelu_tanh") -> "GEGLU":
        """Wrap the packed weights of an existing ``nn.Linear(in, 2*out)`` (shared, not copied)."""
        if linear.out_features % 2:
            raise ValueError(f"linear.out_features must be even (2*out), got {linear.out_features}")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features = linear.in_features
        layer.out_features = linear.out_features // 2
        layer.recompute = recompute
        layer.activation = check_activation(activation)
        layer.weight = linear.weight
        layer.bias = linear.bias
        return layer

    tp_mesh = None  # the device mesh once ``tensor_parallel`` has sharded this layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_mesh is not None:
            return tensor_parallel_forward(self, x)
        return geglu(x, self.weight, self.bias, recompute=self.recompute, activation=self.activation)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, recompute={self.recompute}, activation={self.activation}")
