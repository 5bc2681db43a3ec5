"""GEGLU projection: validation, kernel launch, autograd and the torch.library ops.

    fusedmlp.geglu(x, weight, bias=None, *, recompute=True)
        h = x @ weight.T + bias;  y = h[..., :out] * gelu_tanh(h[..., out:])

``weight`` is the packed ``[2*out, in]`` weight of one ``nn.Linear(in, 2*out)``.

In eager mode the kernels run under an ``autograd.Function``. Under ``torch.compile`` the
same implementations run as two torch.library custom ops, so ``fullgraph=True`` traces
through them (fake implementations give shapes, the autograd formula is registered); the
dispatcher round trip of a custom op costs tens of microseconds of host time per call, which
eager mode does without:

    fusedmlp::geglu(x, weight, bias, store_h) -> (y, h)
        h is the [M, 2*out] pre-activation if store_h, else an empty tensor.
    fusedmlp::geglu_backward_dh(grad_y, x, weight, bias, h) -> (dh, db)
        the fused elementwise backward: recomputes h from x when h is None; db in fp32
        (fp64 for fp64 inputs), for accumulation over row chunks.

Backward memory modes: ``recompute=True`` saves only x (weight and bias are parameters) and
recomputes h inside the backward kernel; ``recompute=False`` saves h too (2*out values per
row), so the backward kernel only streams h and g. Then ``dW = dh.T @ x`` and
``dx = dh @ weight`` run on cuBLAS (through aten, so torch.compile sees them). The backward
walks the rows in up to 4 chunks (``_backward_row_chunks``) so that only one chunk's dh
exists at a time; dW accumulates over the chunks in its own dtype (one rounding per chunk),
db in fp32.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from triton.tools.tensor_descriptor import TensorDescriptor

from ..kernels.configs import (
    GLU_BWD_BLOCK_M,
    GLU_BWD_CONFIGS,
    GLU_BWD_TMA_CONFIGS,
    GLU_GEMM_CONFIGS,
    GLU_TMA_CONFIGS,
    Launcher,
)
from ..kernels.glu import geglu_bwd_dh_kernel, geglu_bwd_dh_tma_kernel, geglu_fwd_kernel, geglu_fwd_tma_kernel
from ._common import (
    acc_dtypes,
    autotune_m_key,
    check_same_dtype_device,
    check_tensor,
    dot_meta,
    num_sms,
    tma_eligible,
    use_triton,
)
from .activations import activation_grad_reference, activation_reference

__all__ = ["geglu", "geglu_reference"]

_TUNE_KEY = ["M_KEY", "OUT", "K", "HAS_BIAS"]
_BWD_FIXED = {"BLOCK_M": GLU_BWD_BLOCK_M}
_fwd_launcher = Launcher(geglu_fwd_kernel, GLU_GEMM_CONFIGS, key=_TUNE_KEY + ["STORE_H"])
_fwd_tma_launcher = Launcher(geglu_fwd_tma_kernel, GLU_TMA_CONFIGS, key=_TUNE_KEY + ["STORE_H"])
_bwd_launcher = Launcher(geglu_bwd_dh_kernel, GLU_BWD_CONFIGS, key=_TUNE_KEY + ["RECOMPUTE"], fixed=_BWD_FIXED)
_bwd_tma_launcher = Launcher(geglu_bwd_dh_tma_kernel, GLU_BWD_TMA_CONFIGS, key=_TUNE_KEY, fixed=_BWD_FIXED)


# --------------------------------------------------------------------------------------
# Reference (float64 oracle in tests, and the CPU path without the Triton interpreter)
# --------------------------------------------------------------------------------------
def geglu_reference(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Plain PyTorch: ``x1 * gelu_tanh(x2)`` with ``[x1 | x2] = x @ weight.T + bias``."""
    h = torch.nn.functional.linear(x, weight, bias)
    x1, x2 = h.chunk(2, dim=-1)
    return x1 * activation_reference(x2, "gelu_tanh")


def _reference_dh(grad_y: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """dh = [g * t | g * x1 * t'] in the accumulator dtype (fp32, or fp64 for fp64 inputs)."""
    x1, x2 = h.to(acc_dtypes(h.dtype)[1]).chunk(2, dim=-1)
    g = grad_y.to(x1.dtype)
    return torch.cat([g * activation_reference(x2, "gelu_tanh"), g * x1 * activation_grad_reference(x2, "gelu_tanh")], -1)


# --------------------------------------------------------------------------------------
# Kernel launches
# --------------------------------------------------------------------------------------
def _descriptor(t):
    # The block shape is a placeholder: the config's pre-hook sets the real one before launch.
    return TensorDescriptor.from_tensor(t, [16, 16])


def _persistent_grid(x, m, out):
    sms = num_sms(x)
    return lambda meta: (min(sms, triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(out, meta["BLOCK_N"])),)


def _launch_fwd(x, weight, bias, store_h):
    m, k = x.shape
    out = weight.shape[0] // 2
    y = torch.empty((m, out), dtype=x.dtype, device=x.device)
    h = torch.empty((m, 2 * out) if store_h else (0,), dtype=x.dtype, device=x.device)
    if m == 0 or out == 0:
        return y, h
    halves = (weight[:out], weight[out:]) + ((h[:, :out], h[:, out:]) if store_h else ())
    if tma_eligible(x, y, *halves):
        w1, w2 = halves[:2]
        h1, h2 = halves[2:] if store_h else (y, y)
        _fwd_tma_launcher.launch(
            _persistent_grid(x, m, out),
            x_desc=_descriptor(x), w1_desc=_descriptor(w1), w2_desc=_descriptor(w2),
            b_ptr=bias if bias is not None else y, y_desc=_descriptor(y),
            h1_desc=_descriptor(h1), h2_desc=_descriptor(h2),
            M=m, OUT=out, K=k, M_KEY=autotune_m_key(m), NUM_SMS=num_sms(x),
            HAS_BIAS=bias is not None, STORE_H=store_h,
            **dot_meta(x.dtype),
        )
        return y, h
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(out, meta["BLOCK_N"]),)  # noqa: E731
    _fwd_launcher.launch(
        grid,
        x, weight, bias if bias is not None else y, y, h if store_h else y,
        m, out, k, autotune_m_key(m),
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), h.stride(0) if store_h else 0,
        HAS_BIAS=bias is not None, STORE_H=store_h,
        **dot_meta(x.dtype),
        fp64=x.dtype == torch.float64,
    )
    return y, h


def _launch_bwd_dh(grad_y, x, weight, bias, h):
    m, k = x.shape
    out = weight.shape[0] // 2
    recompute = h is None
    acc_torch = acc_dtypes(x.dtype)[1]
    dh = torch.empty((m, 2 * out), dtype=x.dtype, device=x.device)
    num_tiles_m = triton.cdiv(m, GLU_BWD_BLOCK_M)
    db_partial = torch.empty((num_tiles_m, 2 * out) if bias is not None else (0,), dtype=acc_torch, device=x.device)
    if m == 0 or out == 0:
        db = torch.zeros((2 * out,) if bias is not None else (0,), dtype=acc_torch, device=x.device)
        return dh, db
    dh_halves = (dh[:, :out], dh[:, out:])
    w_halves = (weight[:out], weight[out:])
    if recompute and tma_eligible(x, grad_y, *w_halves, *dh_halves):
        _bwd_tma_launcher.launch(
            _persistent_grid(x, m, out),
            g_desc=_descriptor(grad_y), x_desc=_descriptor(x),
            w1_desc=_descriptor(w_halves[0]), w2_desc=_descriptor(w_halves[1]),
            b_ptr=bias if bias is not None else dh,
            dh1_desc=_descriptor(dh_halves[0]), dh2_desc=_descriptor(dh_halves[1]),
            db_partial_ptr=db_partial if bias is not None else dh,
            M=m, OUT=out, K=k, M_KEY=autotune_m_key(m), NUM_SMS=num_sms(x),
            HAS_BIAS=bias is not None,
            **dot_meta(x.dtype),
        )
    else:
        _launch_bwd_dh_pointers(grad_y, x, weight, bias, h, dh, db_partial)
    # Fixed-order reduction of the per-row-block partials: same bits on every run.
    db = db_partial.sum(dim=0) if bias is not None else db_partial
    return dh, db


def _launch_bwd_dh_pointers(grad_y, x, weight, bias, h, dh, db_partial):
    m, k = x.shape
    out = weight.shape[0] // 2
    recompute = h is None
    grid = lambda meta: (triton.cdiv(m, GLU_BWD_BLOCK_M) * triton.cdiv(out, meta["BLOCK_N"]),)  # noqa: E731
    _bwd_launcher.launch(
        grid,
        grad_y, x, weight, bias if bias is not None else dh, dh if recompute else h, dh,
        db_partial if bias is not None else dh,
        m, out, k, autotune_m_key(m),
        grad_y.stride(0), grad_y.stride(1), x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
        0 if recompute else h.stride(0), dh.stride(0),
        HAS_BIAS=bias is not None, RECOMPUTE=recompute,
        **dot_meta(x.dtype),
        fp64=x.dtype == torch.float64,
    )


# --------------------------------------------------------------------------------------
# Implementations shared by both autograd paths (Triton when use_triton, else the reference)
# --------------------------------------------------------------------------------------
def _forward_impl(x, weight, bias, store_h):
    """(y, h): h is the [M, 2*out] pre-activation if store_h, else an empty tensor."""
    if use_triton(x):
        return _launch_fwd(x, weight, bias, store_h)
    h = torch.nn.functional.linear(x, weight, bias)
    x1, x2 = h.chunk(2, dim=-1)
    y = x1 * activation_reference(x2, "gelu_tanh")
    return y, (h if store_h else h.new_empty((0,)))


def _backward_dh_impl(grad_y, x, weight, bias, h):
    """(dh, db): the fused elementwise backward; db in the accumulator dtype."""
    if use_triton(x):
        return _launch_bwd_dh(grad_y, x, weight, bias, h)
    if h is None:
        h = torch.nn.functional.linear(x, weight, bias)
    dh_acc = _reference_dh(grad_y, h)
    db = dh_acc.sum(0) if bias is not None else dh_acc.new_empty((0,))
    return dh_acc.to(x.dtype), db


# The backward runs in row chunks, so that its dh transient ([rows, 2*out], the largest
# buffer of the backward) lives one chunk at a time: up to BWD_MAX_CHUNKS chunks of at least
# BWD_MIN_CHUNK_ROWS rows (GEMMs of that height still run at full speed).
BWD_MAX_CHUNKS = 4
BWD_MIN_CHUNK_ROWS = 4096


def _backward_row_chunks(m: int) -> list[tuple[int, int]]:
    rows = max(BWD_MIN_CHUNK_ROWS, triton.cdiv(m, BWD_MAX_CHUNKS))
    rows = triton.cdiv(rows, GLU_BWD_BLOCK_M) * GLU_BWD_BLOCK_M  # whole row blocks: aligned slices
    return [(start, min(start + rows, m)) for start in range(0, max(m, 1), rows)]


def _backward(grad_y, x, weight, bias, h, needs, backward_dh):
    """(dx, dW, db) or None where ``needs`` says it is not wanted; ``backward_dh`` is the
    elementwise kernel's entry (the custom op when traced, the implementation in eager)."""
    needs_x, needs_w, needs_b = needs
    grad_x = x.new_empty(x.shape) if needs_x else None
    grad_w = db = None
    for start, stop in _backward_row_chunks(x.shape[0]):
        rows = slice(start, stop)
        dh, db_rows = backward_dh(grad_y[rows], x[rows], weight, bias, None if h is None else h[rows])
        if needs_x:
            torch.mm(dh, weight, out=grad_x[rows])
        if needs_w:  # one packed [2*out, in] tensor, accumulated over the chunks in a fixed order
            grad_w = dh.t() @ x[rows] if grad_w is None else grad_w.addmm_(dh.t(), x[rows])
        if bias is not None:  # summed in fp32 (fp64) across chunks, rounded once
            db = db_rows if db is None else db + db_rows
        del dh  # before the next chunk allocates its own: one dh alive at a time
    grad_b = db.to(x.dtype) if (bias is not None and needs_b) else None
    return grad_x, grad_w, grad_b


# --------------------------------------------------------------------------------------
# Eager path: an autograd.Function (a few microseconds of host time per call)
# --------------------------------------------------------------------------------------
class _GEGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store_h):
        y, h = _forward_impl(x, weight, bias, store_h)
        # recompute mode saves x only (weight and bias are the layer's parameters, not activations)
        ctx.save_for_backward(x, weight, bias, h if store_h else None)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, bias, h = ctx.saved_tensors
        grads = _backward(grad_y, x, weight, bias, h, ctx.needs_input_grad[:3], _backward_dh_impl)
        return (*grads, None)


# --------------------------------------------------------------------------------------
# Traced path: torch.library ops, so torch.compile(fullgraph=True) sees through the call
# --------------------------------------------------------------------------------------
@torch.library.custom_op("fusedmlp::geglu", mutates_args=())
def _geglu_op(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], store_h: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward_impl(x, weight, bias, store_h)


@_geglu_op.register_fake
def _(x, weight, bias, store_h):
    m = x.shape[0]
    out = weight.shape[0] // 2
    return x.new_empty((m, out)), x.new_empty((m, 2 * out) if store_h else (0,))


@torch.library.custom_op("fusedmlp::geglu_backward_dh", mutates_args=())
def _geglu_backward_dh_op(
    grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
    h: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward_dh_impl(grad_y, x, weight, bias, h)


@_geglu_backward_dh_op.register_fake
def _(grad_y, x, weight, bias, h):
    m = x.shape[0]
    two_out = weight.shape[0]
    db = x.new_empty((two_out,) if bias is not None else (0,), dtype=acc_dtypes(x.dtype)[1])
    return x.new_empty((m, two_out)), db


def _geglu_setup_context(ctx, inputs, output):
    x, weight, bias, store_h = inputs
    _, h = output
    # h is an internal output that never receives a gradient: without this, autograd would
    # materialise a zero [M, 2*out] grad_h for it in every backward.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, weight, bias, h if store_h else None)


def _geglu_op_backward(ctx, grad_y, grad_h):
    x, weight, bias, h = ctx.saved_tensors
    if grad_y is None:  # y did not reach the loss
        return None, None, None, None
    grads = _backward(grad_y, x, weight, bias, h, ctx.needs_input_grad[:3], torch.ops.fusedmlp.geglu_backward_dh)
    return (*grads, None)


torch.library.register_autograd("fusedmlp::geglu", _geglu_op_backward, setup_context=_geglu_setup_context)


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def _validate(x, weight, bias) -> None:
    check_tensor(x, "x", min_ndim=1)
    check_tensor(weight, "weight", ndim=2)
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
    check_same_dtype_device("x", x, weight=weight, bias=bias)
    two_out, in_features = weight.shape
    if two_out % 2 != 0:
        raise ValueError(
            f"weight must be the packed [2*out, in] GEGLU weight (an even number of rows), got shape {tuple(weight.shape)}"
        )
    if x.shape[-1] != in_features:
        raise ValueError(
            f"x has {x.shape[-1]} features in its last dimension but weight expects in={in_features} "
            f"(weight shape {tuple(weight.shape)})"
        )
    if bias is not None and bias.shape[0] != two_out:
        raise ValueError(f"bias must have 2*out = {two_out} elements, got {bias.shape[0]}")


def geglu(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, *, recompute: bool = True
) -> torch.Tensor:
    """Fused GEGLU projection: ``x1 * gelu_tanh(x2)`` with ``[x1 | x2] = x @ weight.T + bias``.

    Args:
        x: ``[..., in]`` input, any leading shape; fp16, bf16, fp32 or fp64; any strides.
        weight: ``[2*out, in]`` packed weight of one ``nn.Linear(in, 2*out)`` (rows ``[:out]``
            give x1, rows ``[out:]`` give x2).
        bias: optional ``[2*out]``.
        recompute: True (default) saves only ``x`` for the backward and recomputes the
            pre-activation there; False also saves it (``[..., 2*out]``), trading memory for
            a cheaper backward.

    Returns:
        ``[..., out]`` tensor of x's dtype.
    """
    _validate(x, weight, bias)
    if not isinstance(recompute, bool):
        raise TypeError(f"recompute must be a bool, got {type(recompute).__name__}")
    in_features = weight.shape[1]
    out = weight.shape[0] // 2
    x2d = x.reshape(-1, in_features)  # a view whenever the leading dims allow it
    if torch.compiler.is_compiling():
        y, _ = torch.ops.fusedmlp.geglu(x2d, weight, bias, not recompute)
    else:  # eager: the custom op's dispatch costs tens of microseconds of host time per call
        y = _GEGLUFunction.apply(x2d, weight, bias, not recompute)
    return y.reshape(*x.shape[:-1], out)
