"""``FusedMLP``: a drop-in for an ``nn.Sequential`` of ``nn.Linear`` + activation layers."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ..ops.activations import check_activation
from ..ops.mlp import mlp
from ._modules import SquaredReLU, established, linear_stack


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
    the keys, the repr and ``unfuse``). Where the children stop computing that stack (a child
    replaced or appended afterwards, a Linear wrapped by PEFT) or carry a hook, the forward
    runs the children one by one instead, with a warning; a slice is a plain ``nn.Sequential``.

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
    def from_modules(cls, modules: Union[Sequence[nn.Module], Mapping[str, nn.Module]], activation: str,
                     last_activation: str, recompute: bool = False) -> "FusedMLP":
        """A FusedMLP holding ``modules`` themselves (the Linear layers and activation modules of
        a Sequential, in order, or a mapping of their names to them, which keeps the names and
        so the state-dict keys; parameters shared, not copied). The caller states the
        activations they compute (``fusedmlp.patch`` establishes them)."""
        layer = cls.__new__(cls)
        if isinstance(modules, Mapping):
            nn.Sequential.__init__(layer, OrderedDict(modules))
        else:
            nn.Sequential.__init__(layer, *modules)
        layer.activation, layer.last_activation = check_activation(activation), check_activation(last_activation)
        layer.recompute = recompute
        return layer

    def linears(self) -> list:
        return [m for m in self if isinstance(m, nn.Linear)]

    def _stack_linears(self, children: tuple) -> Optional[list]:
        """The Linear layers to fuse, or None where ``children`` do not compute this stack."""
        stack = linear_stack(children)
        if stack is not None and (stack[1] or self.activation, stack[2]) == (self.activation, self.last_activation):
            return stack[0]
        warnings.warn("FusedMLP: its children no longer compute the fused stack, or carry hooks "
                      f"(activation={self.activation}, last_activation={self.last_activation}); "
                      "running them one by one", stacklevel=6)
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linears = established(self, tuple(self._modules.values()), self._stack_linears)
        if linears is None:
            return super().forward(x)
        return mlp(x, [lin.weight for lin in linears], [lin.bias for lin in linears], self.activation,
                   self.last_activation, self.recompute)

    def __getitem__(self, index):
        if isinstance(index, slice):  # part of the stack: a plain Sequential of those modules
            return nn.Sequential(OrderedDict(list(self._modules.items())[index]))
        return super().__getitem__(index)

    def unfuse(self) -> nn.Sequential:
        """A plain ``nn.Sequential`` of the same modules (sharing the parameters)."""
        return nn.Sequential(OrderedDict(self._modules))

    def extra_repr(self) -> str:
        return f"activation={self.activation}, last_activation={self.last_activation}, recompute={self.recompute}"
