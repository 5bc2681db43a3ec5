"""``SwiGLU``: a drop-in for the LLaMA feed-forward (``gate_proj``, ``up_proj``, ``down_proj``)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.swiglu import swiglu
from ._modules import established, plain_linears
from .tensor_parallel import tensor_parallel_forward


def _bias_free_linears(projections) -> bool:
    return plain_linears(projections, bias_free=True)


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` with bias-free projections, fused.

    Submodules and state-dict keys are those of Hugging Face ``LlamaMLP``
    (``gate_proj.weight``, ``up_proj.weight``, ``down_proj.weight``), so its checkpoints load
    unchanged. ``recompute`` as in ``fusedmlp.swiglu``. Where a projection is no longer a plain
    bias-free ``nn.Linear`` (PEFT wrapped it in a LoRA layer after ``fusedmlp.patch``, or a hook
    was put on it), the forward calls the projections themselves, unfused, so their result
    stays theirs and their hooks run.
    """

    def __init__(self, dim: int, hidden_dim: int, out_dim: Optional[int] = None, recompute: bool = False,
                 device=None, dtype=None):
        super().__init__()
        if dim <= 0 or hidden_dim <= 0:
            raise ValueError(f"dim and hidden_dim must be positive, got {dim}, {hidden_dim}")
        factory = {"device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False, **factory)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False, **factory)
        self.down_proj = nn.Linear(hidden_dim, out_dim or dim, bias=False, **factory)
        self.recompute = recompute

    @classmethod
    def from_projections(cls, gate_proj: nn.Linear, up_proj: nn.Linear, down_proj: nn.Linear,
                         recompute: bool = False) -> "SwiGLU":
        """A SwiGLU sharing existing bias-free projections (not copies)."""
        for name, proj in (("gate_proj", gate_proj), ("up_proj", up_proj), ("down_proj", down_proj)):
            if not isinstance(proj, nn.Linear) or proj.bias is not None:
                raise ValueError(f"{name} must be a bias-free nn.Linear, got {proj}")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.gate_proj, layer.up_proj, layer.down_proj = gate_proj, up_proj, down_proj
        layer.recompute = recompute
        return layer

    tp_mesh = None  # the device mesh once ``tensor_parallel`` has sharded this layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_mesh is not None:
            return tensor_parallel_forward(self, x)
        modules = self._modules
        projections = (modules["gate_proj"], modules["up_proj"], modules["down_proj"])
        gate, up, down = projections
        if not established(self, projections, _bias_free_linears):
            return down(F.silu(gate(x)) * up(x))  # a projection wrapped since (PEFT LoRA): run them as they are
        return swiglu(x, gate.weight, up.weight, down.weight, recompute=self.recompute)

    def extra_repr(self) -> str:
        return f"recompute={self.recompute}"
