"""``FusedLinear``: a drop-in for ``nn.Linear`` followed by an activation."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..ops.activations import check_activation
from ..ops.linear_act import linear_act


class FusedLinear(nn.Linear):
    """``act(x @ weight.T + bias)`` in one fused kernel (forward and backward).

    A subclass of ``nn.Linear``: same parameters, same state-dict keys, same initialisation,
    so checkpoints load unchanged and ``isinstance(layer, nn.Linear)`` still holds.
    ``activation`` is one of identity, relu, squared_relu, gelu, gelu_tanh, sigmoid, silu
    (None = identity); ``save_preact`` as in ``fusedmlp.linear_act``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: Optional[str] = "gelu_tanh", save_preact: bool = False, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = check_activation(activation)
        self.save_preact = save_preact

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: Optional[str] = "gelu_tanh",
                    save_preact: bool = False) -> "FusedLinear":
        """A FusedLinear sharing ``linear``'s parameters (not copies)."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight = linear.weight
        layer.bias = linear.bias
        layer.activation = check_activation(activation)
        layer.save_preact = save_preact
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_act(x, self.weight, self.bias, self.activation, self.save_preact)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}, save_preact={self.save_preact}"
