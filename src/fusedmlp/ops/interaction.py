"""DLRM's dot interaction as one fused kernel each way (kernels/interaction.py).

    fusedmlp.dot_interaction(dense, embedded) -> [B, D + (F + 1) F / 2]
        dense [B, D] (the bottom MLP's output), embedded [B, F, D] (one vector per table);
        the output is dense, then the dot products of every pair of the F + 1 vectors below
        the diagonal, row by row: the input of DLRM's top MLP (367 wide for F = 26, D = 16).

Under torch.compile: ``fusedmlp::dot_interaction(dense, embedded)`` and
``fusedmlp::dot_interaction_backward(dense, embedded, grad)`` (custom ops with fake
implementations and a registered autograd formula).
"""

from __future__ import annotations

import torch

from ..kernels.interaction import dot_interaction_bwd_kernel, dot_interaction_fwd_kernel
from ..kernels.launch import launch
from ._common import (
    aligned_rows_empty,
    autocast_dtype,
    call_autocast,
    cdiv,
    check_same_dtype_device,
    check_tensor,
    dot_meta,
    dot_width,
    kernel_backward,
    next_power_of_2,
    use_triton,
)

__all__ = ["dot_interaction", "dot_interaction_reference"]

# Rows per program: at most 16, fewer when the [rows, V_PAD, max(V_PAD, D_PAD)] operand tiles
# of the batched dots would pass 64 KiB of shared memory (many features, fp32/fp64).
_MAX_BLOCK_B = 16
_TILE_BYTES = 64 * 1024


def dot_interaction_reference(dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch: bmm of the stacked vectors, the strictly lower triangle, concatenated after dense."""
    vectors = torch.cat([dense.unsqueeze(1), embedded], dim=1)
    gram = torch.bmm(vectors, vectors.transpose(1, 2))
    rows, cols = torch.tril_indices(vectors.shape[1], vectors.shape[1], offset=-1, device=dense.device)
    return torch.cat([dense, gram[:, rows, cols]], dim=1)


def output_width(features: int, dim: int) -> int:
    return dim + (features + 1) * features // 2


def _meta(features: int, dim: int, dtype) -> dict:
    meta = dot_meta(dtype)
    v_pad, d_pad = dot_width(features + 1), dot_width(dim)
    row_bytes = v_pad * max(v_pad, d_pad) * dtype.itemsize
    block_b = max(1, min(_MAX_BLOCK_B, next_power_of_2(_TILE_BYTES // row_bytes + 1) // 2))
    return dict(F=features, D=dim, V_PAD=v_pad, D_PAD=d_pad, BLOCK_B=block_b,
                DOT_PRECISION=meta["DOT_PRECISION"], UPCAST=meta["UPCAST"], num_warps=4)


def _unit_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _forward_impl(dense, embedded):
    batch, features, dim = embedded.shape
    # rows padded to 16 bytes: the top MLP's cuBLAS products read them in place
    out = aligned_rows_empty(dense, batch, output_width(features, dim))
    if batch == 0:
        return out
    dense, embedded = _unit_last(dense), _unit_last(embedded)
    meta = _meta(features, dim, dense.dtype)
    launch(dot_interaction_fwd_kernel, (cdiv(batch, meta["BLOCK_B"]),), dense, embedded, out, batch,
           dense.stride(0), embedded.stride(0), embedded.stride(1), out.stride(0), **meta)
    return out


def _backward_impl(dense, embedded, grad):
    batch, features, dim = embedded.shape
    d_dense, d_emb = dense.new_empty(dense.shape), embedded.new_empty(embedded.shape)
    if batch == 0:
        return d_dense, d_emb
    dense, embedded, grad = _unit_last(dense), _unit_last(embedded), _unit_last(grad)
    meta = _meta(features, dim, dense.dtype)
    launch(dot_interaction_bwd_kernel, (cdiv(batch, meta["BLOCK_B"]),), dense, embedded, grad, d_dense, d_emb,
           batch, dense.stride(0), embedded.stride(0), embedded.stride(1), grad.stride(0), d_dense.stride(0),
           d_emb.stride(0), d_emb.stride(1), **meta)
    return d_dense, d_emb


@torch.library.custom_op("fusedmlp::dot_interaction", mutates_args=())
def _interaction_op(dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
    return _forward_impl(dense, embedded)


@_interaction_op.register_fake
def _(dense, embedded):
    return aligned_rows_empty(dense, dense.shape[0], output_width(embedded.shape[1], embedded.shape[2]))


@torch.library.custom_op("fusedmlp::dot_interaction_backward", mutates_args=())
def _interaction_backward_op(dense: torch.Tensor, embedded: torch.Tensor,
                             grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward_impl(dense, embedded, grad)


@_interaction_backward_op.register_fake
def _(dense, embedded, grad):
    return dense.new_empty(dense.shape), embedded.new_empty(embedded.shape)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _op_backward(ctx, grad):
    dense, embedded = ctx.saved_tensors
    return torch.ops.fusedmlp.dot_interaction_backward(dense, embedded, grad)


torch.library.register_autograd("fusedmlp::dot_interaction", _op_backward, setup_context=_setup_context)


class _InteractionFunction(torch.autograd.Function):
    """The eager path: the same kernels without the custom op's dispatcher round trip."""

    @staticmethod
    def forward(ctx, dense, embedded):
        ctx.save_for_backward(dense, embedded)
        return _forward_impl(dense, embedded)

    @staticmethod
    @kernel_backward
    def backward(ctx, grad):
        dense, embedded = ctx.saved_tensors
        return _backward_impl(dense, embedded, grad)


def dot_interaction(dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
    """DLRM's dot interaction in one kernel (forward and backward).

    Args:
        dense: ``[B, D]`` (the bottom MLP's output); fp16, bf16, fp32 or fp64.
        embedded: ``[B, F, D]``, one D-wide vector per categorical feature, same dtype and device.

    Returns:
        ``[B, D + (F + 1) F / 2]``: dense, then ``<v_i, v_j>`` for i > j over the vectors
        ``v = [dense, embedded[:, 0], ..., embedded[:, F-1]]``, row by row. On the kernel path
        it is a view whose rows are padded to a multiple of 16 bytes (368 elements for 367),
        so that the top MLP's GEMMs take it in place; ``.contiguous()`` gives packed rows.
        Inside ``torch.autocast`` both inputs are cast to the autocast dtype (as ``bmm``'s are).
    """
    if (dtype := autocast_dtype(dense)) is not None:  # under torch.autocast: cast as bmm's inputs are
        return call_autocast(dot_interaction, dtype, dense, embedded)
    check_tensor(dense, "dense", ndim=2)
    check_tensor(embedded, "embedded", ndim=3)
    check_same_dtype_device("dense", dense, embedded=embedded)
    if embedded.shape[0] != dense.shape[0] or embedded.shape[2] != dense.shape[1]:
        raise ValueError(f"embedded must be [B, F, D] with dense's B and D ({tuple(dense.shape)}), "
                         f"got {tuple(embedded.shape)}")
    if embedded.shape[1] == 0 or dense.shape[1] == 0:
        raise ValueError("dot_interaction needs at least one embedded vector and a non-empty width")
    if not use_triton(dense):
        return dot_interaction_reference(dense, embedded)
    if torch.compiler.is_compiling():
        return torch.ops.fusedmlp.dot_interaction(dense, embedded)
    return _InteractionFunction.apply(dense, embedded)
