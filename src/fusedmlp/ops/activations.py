"""Plain-PyTorch reference of every activation and its derivative.

The oracle for the Triton epilogues (tests run it in float64) and the CPU fallback. The names
match ``fusedmlp.kernels.activations.ACTIVATIONS``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..kernels.activations import ACTIVATIONS, DERIVATIVE_FROM_OUTPUT

__all__ = [
    "ACTIVATIONS",
    "DERIVATIVE_FROM_OUTPUT",
    "check_activation",
    "activation_reference",
    "activation_grad_reference",
    "activation_grad_from_output_reference",
]


def check_activation(name) -> str:
    if name is None:
        return "identity"
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} (or None), got {name!r}")
    return name


def activation_reference(z: torch.Tensor, name: str) -> torch.Tensor:
    if name == "identity":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "squared_relu":
        return torch.relu(z).square()
    if name == "gelu":
        return F.gelu(z)
    if name == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if name == "sigmoid":
        return torch.sigmoid(z)
    if name == "silu":
        return F.silu(z)
    raise ValueError(f"unknown activation {name!r}")


def activation_grad_reference(z: torch.Tensor, name: str) -> torch.Tensor:
    """a'(z), written out (not autograd) so it also runs inside a backward."""
    if name == "identity":
        return torch.ones_like(z)
    if name == "relu":
        return (z > 0).to(z.dtype)
    if name == "squared_relu":
        return 2.0 * torch.relu(z)
    if name == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
        return cdf + z * torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
    if name == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        u = c * (z + 0.044715 * z**3)
        t = torch.tanh(u)
        return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * z * z)
    if name == "sigmoid":
        s = torch.sigmoid(z)
        return s * (1.0 - s)
    if name == "silu":
        s = torch.sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    raise ValueError(f"unknown activation {name!r}")


def activation_grad_from_output_reference(y: torch.Tensor, name: str) -> torch.Tensor:
    """a'(z) from y = a(z), for the activations in DERIVATIVE_FROM_OUTPUT."""
    if name == "identity":
        return torch.ones_like(y)
    if name == "relu":
        return (y > 0).to(y.dtype)
    if name == "squared_relu":
        return 2.0 * torch.sqrt(torch.relu(y))
    if name == "sigmoid":
        return y * (1.0 - y)
    raise ValueError(f"the derivative of {name!r} is not a function of its output")
