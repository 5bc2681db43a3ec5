"""``SwiGLU``: a drop-in for the LLaMA feed-forward (``gate_proj``, ``up_proj``, ``down_proj``), and
with another gate activation for its relatives (Gemma's GeGLU feed-forward: ``gelu_tanh``);
``PackedSwiGLU``: the same with the gate and up projections packed in one ``gate_up_proj`` (Phi-3)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..ops.activations import activation_reference, check_activation
from ..ops.swiglu import swiglu, swiglu_packed
from ._modules import established, plain_linears
from .tensor_parallel import tensor_parallel_forward


def _bias_free_linears(projections) -> bool:
    return plain_linears(projections, bias_free=True)


def _fill_new(module, inputs, dim, hidden_dim, out_dim, recompute, activation, device, dtype) -> None:
    """A new gated feed-forward's options and bias-free projections: ``inputs`` (name -> its
    width in hidden widths, from dim), then ``down_proj`` (hidden_dim -> out_dim or dim)."""
    if dim <= 0 or hidden_dim <= 0:
        raise ValueError(f"dim and hidden_dim must be positive, got {dim}, {hidden_dim}")
    module.activation = check_activation(activation)
    for name, widths in inputs.items():
        setattr(module, name, nn.Linear(dim, widths * hidden_dim, bias=False, device=device, dtype=dtype))
    module.down_proj = nn.Linear(hidden_dim, out_dim or dim, bias=False, device=device, dtype=dtype)
    module.recompute = recompute


def _sharing(cls, projections, recompute, activation):
    """A ``cls`` holding the given bias-free projections (name -> nn.Linear, not copies)."""
    activation = check_activation(activation)
    for name, proj in projections.items():
        if not isinstance(proj, nn.Linear) or proj.bias is not None:
            raise ValueError(f"{name} must be a bias-free nn.Linear, got {proj}")
    layer = cls.__new__(cls)
    nn.Module.__init__(layer)
    for name, proj in projections.items():
        setattr(layer, name, proj)
    layer.recompute, layer.activation = recompute, activation
    return layer


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` with bias-free projections, fused.

    Submodules and state-dict keys are those of Hugging Face ``LlamaMLP``
    (``gate_proj.weight``, ``up_proj.weight``, ``down_proj.weight``), so its checkpoints load
    unchanged. ``recompute`` and ``activation`` as in ``fusedmlp.swiglu``:
    ``activation="gelu_tanh"`` is the feed-forward of Gemma models (``GemmaMLP``, the same keys).
    Where a projection is no longer a plain bias-free ``nn.Linear`` (PEFT wrapped it in a LoRA
    layer after ``fusedmlp.patch``, or a hook was put on it), the forward calls the projections
    themselves, unfused, so their result stays theirs and their hooks run.
    """

    def __init__(self, dim: int, hidden_dim: int, out_dim: Optional[int] = None, recompute: bool = False,
                 device=None, dtype=None, activation: str = "silu"):
        super().__init__()
        _fill_new(self, {"gate_proj": 1, "up_proj": 1}, dim, hidden_dim, out_dim, recompute, activation, device, dtype)

    @classmethod
    def from_projections(cls, gate_proj: nn.Linear, up_proj: nn.Linear, down_proj: nn.Linear,
                         recompute: bool = False, activation: str = "silu") -> "SwiGLU":
        """A SwiGLU sharing existing bias-free projections (not copies)."""
        return _sharing(cls, {"gate_proj": gate_proj, "up_proj": up_proj, "down_proj": down_proj}, recompute,
                        activation)

    tp_mesh = None  # the device mesh once ``tensor_parallel`` has sharded this layer
    activation = "silu"  # the gate's activation (class default: instances pickled before it existed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_mesh is not None:
            return tensor_parallel_forward(self, x)
        modules = self._modules
        projections = (modules["gate_proj"], modules["up_proj"], modules["down_proj"])
        gate, up, down = projections
        if not established(self, projections, _bias_free_linears):
            # a projection wrapped since (PEFT LoRA): run them as they are
            return down(activation_reference(gate(x), self.activation) * up(x))
        return swiglu(x, gate.weight, up.weight, down.weight, recompute=self.recompute, activation=self.activation)

    def extra_repr(self) -> str:
        act = "" if self.activation == "silu" else f", activation={self.activation!r}"
        return f"recompute={self.recompute}{act}"


class PackedSwiGLU(nn.Module):
    """``down_proj(up * act(gate))`` with ``gate, up = gate_up_proj(x).chunk(2, -1)``, bias-free,
    fused (``fusedmlp.swiglu_packed``): Phi-3's ``Phi3MLP``, whose state-dict keys it keeps
    (``gate_up_proj.weight`` ``[2*hidden, dim]``, ``down_proj.weight``). ``recompute`` and
    ``activation`` (default silu) as in ``fusedmlp.swiglu``. A projection wrapped or hooked since
    (PEFT after ``fusedmlp.patch``) is run as it is, unfused. ``tensor_parallel`` shards it: each
    rank holds the matching rows of both halves, ``[gate_r; up_r]``, and columns of ``down_proj``."""

    def __init__(self, dim: int, hidden_dim: int, out_dim: Optional[int] = None, recompute: bool = False,
                 device=None, dtype=None, activation: str = "silu"):
        super().__init__()
        _fill_new(self, {"gate_up_proj": 2}, dim, hidden_dim, out_dim, recompute, activation, device, dtype)

    @classmethod
    def from_projections(cls, gate_up_proj: nn.Linear, down_proj: nn.Linear, recompute: bool = False,
                         activation: str = "silu") -> "PackedSwiGLU":
        """A PackedSwiGLU sharing existing bias-free projections (not copies)."""
        layer = _sharing(cls, {"gate_up_proj": gate_up_proj, "down_proj": down_proj}, recompute, activation)
        if gate_up_proj.out_features != 2 * down_proj.in_features:
            raise ValueError(f"gate_up_proj must have 2 * down_proj.in_features = {2 * down_proj.in_features} "
                             f"outputs, got {gate_up_proj.out_features}")
        return layer

    tp_mesh = None  # the device mesh once ``tensor_parallel`` has sharded this layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_mesh is not None:
            return tensor_parallel_forward(self, x)
        gate_up, down = self._modules["gate_up_proj"], self._modules["down_proj"]
        if not established(self, (gate_up, down), _bias_free_linears):
            gate, up = gate_up(x).chunk(2, dim=-1)  # wrapped since (PEFT LoRA): run them as they are
            return down(up * activation_reference(gate, self.activation))
        return swiglu_packed(x, gate_up.weight, down.weight, recompute=self.recompute, activation=self.activation)

    def extra_repr(self) -> str:
        return f"recompute={self.recompute}, activation={self.activation!r}"
