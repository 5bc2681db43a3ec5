"""The minimal LoRA epilogue as a standalone pointwise kernel.

With ``out [M, N]`` (the base layer's output), an optional ``bias [N]``, ``lora_out [M, N]``
(the low-rank path's output) and a scalar multiplier s:

    y = act(out + bias + s * lora_out)                                              [M, N]

One read of each input and one write: the three PyTorch ops it replaces (add, multiply-add,
activation) each make a round trip through memory. ``fusedmlp.lora_linear`` fuses this into
the GEMM's epilogue instead; this kernel is the piece on its own, with a CUDA C++ twin
(csrc/add_mul_act.cu) to compare code generation on the same job.

Tiles are [BLOCK_M, BLOCK_N]: the bias tile is loaded once per program and broadcast over its
rows, and no index needs a division. Math in fp32 (fp64 for fp64 inputs).
"""

import triton
import triton.language as tl

from .activations import activation


@triton.jit
def add_mul_act_kernel(
    out_ptr, bias_ptr, lora_ptr, y_ptr,
    M, N, MULTIPLIER,
    stride_om, stride_on, stride_lm, stride_ln, stride_ym,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y = act(out + bias + MULTIPLIER * lora_out); y has unit column stride."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    z = tl.load(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, mask=mask, other=0.0).to(ACC_DTYPE)
    lora = tl.load(lora_ptr + rows[:, None] * stride_lm + cols[None, :] * stride_ln, mask=mask, other=0.0)
    z += lora.to(ACC_DTYPE) * MULTIPLIER
    if HAS_BIAS:
        z += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(ACC_DTYPE)[None, :]
    y = activation(z, ACT)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
