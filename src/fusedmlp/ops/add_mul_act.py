"""``fused_add_mul_activation``: the minimal LoRA epilogue as one pointwise kernel, in Triton
and as a CUDA C++ twin.

    fusedmlp.fused_add_mul_activation(out, bias, lora_out, multiplier, activation="relu", *, backend="triton")
        y = act(out + bias + multiplier * lora_out)

``backend="triton"``: kernels/add_mul_act.py (CUDA tensors, or CPU tensors under the Triton
interpreter; CPU tensors otherwise take the PyTorch reference). ``backend="cuda"``:
csrc/add_mul_act.cu, compiled with ``torch.utils.cpp_extension.load_inline`` on first use
(needs a CUDA GPU and nvcc; the build is cached by PyTorch under
``~/.cache/torch_extensions``); fp16, bf16 and fp32.

The backward (d_out = g * act'(pre), d_lora = multiplier * d_out, d_bias = its column sums)
is plain PyTorch on the recomputed pre-activation: this op is the forward epilogue on its
own, the fused LoRA backward lives in ``fusedmlp.lora_linear``.

Under torch.compile: ``fusedmlp::add_mul_act(out, bias, lora_out, multiplier, act, backend)``.
"""

from __future__ import annotations

import functools
import math
import shutil
from pathlib import Path
from typing import Optional

import torch

from ..kernels.add_mul_act import add_mul_act_kernel
from ..kernels.launch import launch
from ._common import (acc_dtypes, cdiv, check_finite_number, check_same_dtype_device, check_tensor, contiguous_bias,
                      has_tangent, use_triton)
from .activations import ACTIVATIONS, activation_grad_reference, activation_reference, check_activation

__all__ = ["fused_add_mul_activation", "add_mul_act_reference", "cuda_extension"]

BACKENDS = ("triton", "cuda")
_BLOCK_M, _BLOCK_N = 16, 128  # 2048 elements per program: enough bytes in flight per SM


def add_mul_act_reference(out, bias, lora_out, multiplier, activation="relu"):
    """Plain PyTorch: ``act(out + bias + multiplier * lora_out)``."""
    pre = out + multiplier * lora_out
    if bias is not None:
        pre = pre + bias
    return activation_reference(pre, check_activation(activation))


@functools.lru_cache(maxsize=None)
def cuda_extension():
    """The compiled CUDA twin (built on first call, then cached by PyTorch on disk)."""
    if not torch.cuda.is_available():
        raise RuntimeError("fused_add_mul_activation(backend='cuda') needs a CUDA GPU; none is available. "
                           "Use backend='triton' (the default).")
    from torch.utils.cpp_extension import CUDA_HOME, load_inline

    if CUDA_HOME is None and shutil.which("nvcc") is None:
        raise RuntimeError("fused_add_mul_activation(backend='cuda') compiles its kernel with nvcc on first use, "
                           "and no CUDA toolkit was found (set CUDA_HOME). Use backend='triton' (the default).")
    source = (Path(__file__).resolve().parent.parent / "csrc" / "add_mul_act.cu").read_text()
    declaration = ("torch::Tensor add_mul_act(torch::Tensor out, c10::optional<torch::Tensor> bias, "
                   "torch::Tensor lora, double multiplier, int64_t act);")
    return load_inline(name="fusedmlp_add_mul_act", cpp_sources=declaration, cuda_sources=source,
                       functions=["add_mul_act"], extra_cuda_cflags=["-O3"], verbose=False)


def _launch_triton(out, bias, lora_out, multiplier, act):
    m, n = out.shape
    y = torch.empty((m, n), dtype=out.dtype, device=out.device)
    if m == 0 or n == 0:
        return y
    grid = (cdiv(m, _BLOCK_M), cdiv(n, _BLOCK_N))
    launch(
        add_mul_act_kernel, grid, out, bias if bias is not None else out, lora_out, y, m, n, multiplier,
        out.stride(0), out.stride(1), lora_out.stride(0), lora_out.stride(1), y.stride(0),
        ACT=act, HAS_BIAS=bias is not None, ACC_DTYPE=acc_dtypes(out.dtype)[0],
        BLOCK_M=_BLOCK_M, BLOCK_N=_BLOCK_N, num_warps=4,
    )
    return y


def _forward_impl(out, bias, lora_out, multiplier, act, backend):
    if backend == "cuda":
        # the CUDA kernel takes unit column strides; other layouts are copied once
        out, lora_out = (t if t.stride(-1) == 1 else t.contiguous() for t in (out, lora_out))
        bias = None if bias is None else bias.contiguous()
        return cuda_extension().add_mul_act(out, bias, lora_out, multiplier, ACTIVATIONS.index(act))
    if use_triton(out):
        return _launch_triton(out, bias, lora_out, multiplier, act)
    return add_mul_act_reference(out, bias, lora_out, multiplier, act)


@torch.library.custom_op("fusedmlp::add_mul_act", mutates_args=())
def _add_mul_act_op(out: torch.Tensor, bias: Optional[torch.Tensor], lora_out: torch.Tensor, multiplier: float,
                    act: str, backend: str) -> torch.Tensor:
    return _forward_impl(out, bias, lora_out, multiplier, act, backend)


@_add_mul_act_op.register_fake
def _(out, bias, lora_out, multiplier, act, backend):
    return out.new_empty(out.shape)


def _setup_context(ctx, inputs, output):
    out, bias, lora_out, multiplier, act, _ = inputs
    ctx.multiplier, ctx.act = multiplier, act
    ctx.save_for_backward(out, bias, lora_out)


def _backward(ctx, grad_y):
    out, bias, lora_out = ctx.saved_tensors
    acc = acc_dtypes(out.dtype)[1]
    pre = out.to(acc) + ctx.multiplier * lora_out.to(acc)
    if bias is not None:
        pre = pre + bias.to(acc)
    dpre = grad_y.to(acc) * activation_grad_reference(pre, ctx.act)
    needs_out, needs_bias, needs_lora = ctx.needs_input_grad[:3]
    return (dpre.to(out.dtype) if needs_out else None,
            dpre.sum(0).to(out.dtype) if needs_bias and bias is not None else None,
            (dpre * ctx.multiplier).to(out.dtype) if needs_lora else None,
            None, None, None)


torch.library.register_autograd("fusedmlp::add_mul_act", _backward, setup_context=_setup_context)


def fused_add_mul_activation(
    out: torch.Tensor,
    bias: Optional[torch.Tensor],
    lora_out: torch.Tensor,
    multiplier: float,
    activation: Optional[str] = "relu",
    *,
    backend: str = "triton",
) -> torch.Tensor:
    """``act(out + bias + multiplier * lora_out)`` in one pointwise kernel.

    Args:
        out: ``[..., N]`` base-layer output; fp16, bf16, fp32 (fp64 with the Triton backend).
        bias: optional ``[N]``.
        lora_out: same shape as ``out`` (the low-rank path's output).
        multiplier: a Python number (LoRA's scale).
        activation: identity, relu, squared_relu, gelu, gelu_tanh, sigmoid or silu (None = identity).
        backend: ``"triton"`` or ``"cuda"`` (the C++ twin, compiled with nvcc on first use).

    Returns:
        A new tensor of ``out``'s shape and dtype.
    """
    act = check_activation(activation)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    check_tensor(out, "out", min_ndim=1)
    check_tensor(lora_out, "lora_out", min_ndim=1)
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
    check_same_dtype_device("out", out, lora_out=lora_out, bias=bias)
    if lora_out.shape != out.shape:
        raise ValueError(f"lora_out must have out's shape {tuple(out.shape)}, got {tuple(lora_out.shape)}")
    if bias is not None and bias.shape[0] != out.shape[-1]:
        raise ValueError(f"bias must have {out.shape[-1]} elements (out's last dimension), got {bias.shape[0]}")
    check_finite_number(multiplier, "multiplier")
    if backend == "cuda" and out.dtype == torch.float64:
        raise TypeError("backend='cuda' takes float16, bfloat16 or float32; use backend='triton' for float64")
    if backend == "cuda" and not out.is_cuda:
        raise ValueError("backend='cuda' needs CUDA tensors; out is on " + str(out.device))
    if has_tangent(out, bias, lora_out):
        raise NotImplementedError("fused_add_mul_activation has no forward-mode derivative (jvp); "
                                  "forward-mode AD would drop its inputs' tangents")
    n = out.shape[-1]
    rows = out.numel() // n if n else math.prod(out.shape[:-1])  # (reshape(-1, 0) is ambiguous)
    y = _add_mul_act_op(out.reshape(rows, n), contiguous_bias(bias), lora_out.reshape(rows, n), float(multiplier),
                        act, backend)
    return y.reshape(out.shape)
