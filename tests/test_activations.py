"""Every epilogue activation and its derivative against float64 PyTorch (autograd for a')."""

import pytest
import torch
import triton
import triton.language as tl
from helpers import rel_err

from fusedmlp.kernels.activations import ACTIVATIONS, activation, activation_value_and_grad
from fusedmlp.ops.activations import activation_grad_reference, activation_reference, check_activation


@triton.jit
def _apply_kernel(z_ptr, value_ptr, value_only_ptr, grad_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(z_ptr + offs, mask=mask, other=0.0)
    value, grad = activation_value_and_grad(z, ACT)
    tl.store(value_ptr + offs, value, mask=mask)
    tl.store(value_only_ptr + offs, activation(z, ACT), mask=mask)
    tl.store(grad_ptr + offs, grad, mask=mask)


def _inputs(device):
    # Wide range (saturation of sigmoid/GELU, large negatives) plus a dense sweep near 0.
    z = torch.cat([torch.randn(900, dtype=torch.float64) * 4, torch.linspace(-30, 30, 123, dtype=torch.float64)])
    return z.to(device)


def _autograd_reference(z64, name):
    z = z64.clone().requires_grad_()
    value = activation_reference(z, name)
    (grad,) = torch.autograd.grad(value.sum(), z)
    return value.detach(), grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_triton_activation(device, name, dtype):
    z64 = _inputs(device)
    z = z64.to(dtype)
    value, value_only, grad = (torch.full_like(z, float("nan")) for _ in range(3))  # poisoned
    n = z.numel()
    _apply_kernel[(triton.cdiv(n, 256),)](z, value, value_only, grad, n, ACT=name, BLOCK=256)
    ref_value, ref_grad = _autograd_reference(z.to(torch.float64), name)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert rel_err(value, ref_value) < tol
    assert rel_err(value_only, ref_value) < tol
    assert rel_err(grad, ref_grad) < tol


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_reference_grad_formulas(name):
    z64 = _inputs("cpu")
    _, ref_grad = _autograd_reference(z64, name)
    assert rel_err(activation_grad_reference(z64, name), ref_grad) < 1e-13


def test_check_activation():
    assert check_activation(None) == "identity"
    assert check_activation("silu") == "silu"
    with pytest.raises(ValueError, match="activation must be one of"):
        check_activation("swish")


def test_gelu_tail_is_relatively_accurate_in_fp32(device):
    """gelu(z) = z Phi(z) element by element, where Phi is tiny too: the fp32 normal CDF has no
    cancellation there (0.5 (1 + erf(z / sqrt(2))) is 4% off at z = -5 and 0 from z = -5.5)."""
    z = torch.linspace(-5.0, 10.0, 3001, dtype=torch.float32, device=device)
    value, value_only, grad = (torch.full_like(z, float("nan")) for _ in range(3))
    _apply_kernel[(triton.cdiv(z.numel(), 256),)](z, value, value_only, grad, z.numel(), ACT="gelu", BLOCK=256)
    ref = activation_reference(z.to(torch.float64), "gelu")
    nonzero = ref != 0
    for out in (value, value_only):
        worst = ((out.double() - ref).abs()[nonzero] / ref.abs()[nonzero]).max().item()
        assert worst < 1e-5, worst
