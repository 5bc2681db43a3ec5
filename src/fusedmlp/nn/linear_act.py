"""``FusedLinear``: a drop-in for ``nn.Linear`` followed by an activation; and the pair
``fusedmlp.patch`` makes of a Sequential's ``Linear`` and activation (``PairedActivation``)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.activations import activation_reference, check_activation
from ..ops.linear_act import linear_act
from ._modules import is_plain


class FusedLinear(nn.Linear):
    """``act(x @ weight.T + bias)`` in one fused kernel (forward and backward).

    A subclass of ``nn.Linear``: same parameters, same state-dict keys, same initialisation,
    so checkpoints load unchanged and ``isinstance(layer, nn.Linear)`` still holds.
    ``activation`` is one of identity, relu, squared_relu, gelu, gelu_tanh, sigmoid, silu
    (None = identity); ``save_preact`` as in ``fusedmlp.linear_act``.

    A wrapper that treats it as an ``nn.Linear`` and adds to its output (PEFT's LoRA layers)
    adds after the activation. The FusedLinear of a ``patch``ed Sequential is one of a pair
    (``PairedActivation``) and then stays right: see there.
    """

    _pair: Optional["_Pair"] = None  # set by fusedmlp.patch (rule 3)

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
        if self._pair is not None and not self._pair.intact():
            return F.linear(x, self.weight, self.bias)  # the PairedActivation after it applies the activation
        return linear_act(x, self.weight, self.bias, self.activation, self.save_preact)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}, save_preact={self.save_preact}"


class _Pair:
    """Where ``patch`` put a FusedLinear and the PairedActivation standing for the activation
    module it absorbed: ``parent._modules[linear_key]`` and ``parent._modules[act_key]``."""

    __slots__ = ("parent", "linear_key", "act_key", "linear", "act")

    def __init__(self, parent: nn.Module, linear_key: str, act_key: str, linear: FusedLinear,
                 act: "PairedActivation"):
        self.parent, self.linear_key, self.act_key, self.linear, self.act = parent, linear_key, act_key, linear, act

    def intact(self) -> bool:
        """Both modules in their places and neither hooked (nor given a per-instance forward):
        then the Sequential calls the FusedLinear and the PairedActivation in turn and nothing
        observes the value between them."""
        modules = self.parent._modules
        return (modules.get(self.linear_key) is self.linear and modules.get(self.act_key) is self.act
                and is_plain(self.linear) and is_plain(self.act))


class PairedActivation(nn.Module):
    """Stands where ``fusedmlp.patch`` found an activation module right after a ``Linear`` of a
    Sequential that it turned into a ``FusedLinear`` (rule 3): the identity while the pair is
    intact, since the FusedLinear's output already has the activation.

    Once the pair is broken, the FusedLinear returns ``x @ W.T + b`` and this module applies
    the activation, so the Sequential computes what it did before patching and every module
    sees the values it saw then. The pair is broken while the FusedLinear is no longer in its
    place (PEFT wraps it in a LoRA layer, which adds its term to the linear's output before
    this module runs; another module put there) or while either module carries a hook or a
    per-instance ``forward``. No parameters or buffers: the state dict is the Sequential's
    before patching. Not caught: a slice of the Sequential that splits a standing pair (the
    FusedLinear alone still applies the activation, this module alone does not).
    """

    _pair: Optional[_Pair] = None  # set by ``pair``; a PairedActivation without one is its activation

    def __init__(self, activation: str):
        super().__init__()
        self.activation = check_activation(activation)

    @staticmethod
    def pair(parent: nn.Module, linear_key: str, linear: FusedLinear, act_key: str,
             activation: str) -> "PairedActivation":
        """The PairedActivation for ``parent[act_key]``, paired with ``linear`` at ``parent[linear_key]``."""
        act = PairedActivation(activation)
        linear._pair = act._pair = _Pair(parent, linear_key, act_key, linear, act)
        return act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._pair is not None and self._pair.intact():
            return x
        return activation_reference(x, self.activation)

    def extra_repr(self) -> str:
        return f"activation={self.activation}"
