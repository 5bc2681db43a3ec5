"""``FusedMLP``: a drop-in for an ``nn.Sequential`` of ``nn.Linear`` + activation layers."""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Sequence

import torch
from torch import nn

from ..ops.activations import check_activation
from ..ops.mlp import mlp


class SquaredReLU(nn.Module):
    """``relu(x) ** 2`` (PyTorch has no module for it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


def activation_module(name: str) -> Optional[nn.Module]:
    """The PyTorch module computing activation ``name`` (None for identity)."""
    return {
        "identity": lambda: None,
        "relu": nn.ReLU,
        "squared_relu": SquaredReLU,
        "gelu": nn.GELU,
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
        "sigmoid": nn.Sigmoid,
        "silu": nn.SiLU,
    }[name]()


class FusedMLP(nn.Sequential):
    """A stack of ``nn.Linear`` layers with activations, run as one fused kernel.

    ``FusedMLP([13, 512, 256, 64, 16])`` holds exactly the children of
    ``nn.Sequential(Linear(13, 512), ReLU(), Linear(512, 256), ReLU(), ..., Linear(64, 16))``
    (same initialisation, same state-dict keys ``0.weight``, ``0.bias``, ``2.weight``, ...), so
    checkpoints of the Sequential load unchanged; only ``forward`` differs: it calls
    ``fusedmlp.mlp`` with the Linear layers' parameters (the activation modules are there for
    the keys, the repr and ``unfuse``).

    Args:
        sizes: ``[in, hidden_1, ..., out]``, at least two entries.
        activation: after every layer but the last (see ``fusedmlp.mlp``; None = identity).
        last_activation: after the last layer (None = identity, no module).
        bias: whether the Linear layers have biases.
        recompute: keep only the input for the backward (see ``fusedmlp.mlp``).
    """

    def __init__(self, sizes: Sequence[int], activation: Optional[str] = "relu",
                 last_activation: Optional[str] = None, bias: bool = True, recompute: bool = False,
                 device=None, dtype=None):
        sizes = list(sizes)
        if len(sizes) < 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
            raise ValueError(f"sizes must list at least two positive ints (in, ..., out), got {sizes!r}")
        activation, last_activation = check_activation(activation), check_activation(last_activation)
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(n_in, n_out, bias=bias, device=device, dtype=dtype))
            module = activation_module(activation if i < len(sizes) - 2 else last_activation)
            if module is not None:
                layers.append(module)
        super().__init__(*layers)
        self.activation, self.last_activation, self.recompute = activation, last_activation, recompute

    @classmethod
    def from_modules(cls, modules: Sequence[nn.Module], activation: str, last_activation: str,
                     recompute: bool = False) -> "FusedMLP":
        """A FusedMLP holding ``modules`` themselves (the Linear layers and activation modules of
        a Sequential, in order; parameters shared, not copied). The caller states the
        activations they compute (``fusedmlp.patch`` establishes them)."""
        layer = cls.__new__(cls)
        nn.Sequential.__init__(layer, *modules)
        layer.activation, layer.last_activation = check_activation(activation), check_activation(last_activation)
        layer.recompute = recompute
        return layer

    def linears(self) -> list:
        return [m for m in self if isinstance(m, nn.Linear)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linears = self.linears()
        return mlp(x, [lin.weight for lin in linears], [lin.bias for lin in linears], self.activation,
                   self.last_activation, self.recompute)

    def unfuse(self) -> nn.Sequential:
        """A plain ``nn.Sequential`` of the same modules (sharing the parameters)."""
        return nn.Sequential(OrderedDict(self._modules))

    def extra_repr(self) -> str:
        return f"activation={self.activation}, last_activation={self.last_activation}, recompute={self.recompute}"
