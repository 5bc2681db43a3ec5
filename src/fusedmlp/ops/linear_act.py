"""Fused Linear + bias + activation: validation, launch, autograd and the torch.library ops.

    fusedmlp.linear_act(x, weight, bias=None, activation="gelu_tanh", save_preact=False)
        y = act(x @ weight.T + bias)

Forward: one kernel (GEMM + bias + activation on the tile; on compute capability 9.0 with
16-bit data the fastest of the forms ``LINEAR_FORWARD_FORMS``, timed on the first call of each
shape: the Triton TMA kernel; the Gluon ping-pong kernel, kernels/pingpong.py, alternating
tiles between its two consumers or both on each tile; and up to K = 512 the resident-x kernel,
which keeps each program's rows of x in shared memory (not for gelu); on a GPU with IEEE
products, fp32 at PyTorch's "highest" matmul precision and fp64, the GEMM runs on cuBLAS
instead, ``_cublas_fwd``). Backward (kernels/linear_act.py): one streaming kernel forms
``dpre = g * act'(pre)`` and the per-row-block db partials (reduced in a fixed order:
deterministic), then ``dx = dpre @ W`` and ``dW = dpre.T @ x`` run on cuBLAS.
The identity has no stream: dpre is g itself and db its column sum (PyTorch's, deterministic).
``FUSEDMLP_FUSED_DGRAD=1`` (read at import; or ``fusedmlp.ops.linear_act.FUSED_DGRAD``)
switches dx to the fused dgrad kernel, which forms dpre on the tile inside its main loop and
writes it on the side for dW; it measured several times slower than the default on an H200
(kernels/linear_act.py gives the figures), so it is off by default.

What the backward keeps (the ``save_preact`` switch):
- ``save_preact=True``: the pre-activation ``[..., out]``.
- ``save_preact=False`` (default), activations whose derivative is a function of the output
  (identity, relu, squared_relu, sigmoid): the output y, which the next layer usually
  keeps anyway as its input, so the fused layer adds no activation memory of its own.
- ``save_preact=False``, the others (gelu, gelu_tanh, silu): nothing but x; the backward
  recomputes pre (one more GEMM), chunk by chunk: on compute capability 9.0 with 16-bit data
  (eager) in ``linear_act_dpre_recompute_pingpong_kernel``, whose epilogue forms dpre from g
  and the recomputed tile (pre never written, no dpre stream; ``recompute_dpre``), elsewhere
  with the forward kernel followed by the stream.
The backward walks the rows in up to 4 chunks when its ``[rows, out]`` transients (dpre, a
recomputed pre) would exceed 256 MiB, so that they exist one chunk at a time.

Under torch.compile the same implementations run as custom ops:
    fusedmlp::linear_act(x, weight, bias, act, store_pre) -> (y, pre)
    fusedmlp::linear_act_backward(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx)
        -> (dx, dpre, db)
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from ..kernels.configs import (
    LINEAR_CONFIGS,
    LINEAR_FP32_CONFIGS,
    LINEAR_DGRAD_BLOCK_M,
    LINEAR_DGRAD_CONFIGS,
    LINEAR_DGRAD_TMA_CONFIGS,
    LINEAR_DPRE_CONFIGS,
    LINEAR_DPRE_IN_PLACE_CONFIGS,
    LINEAR_DPRE_RECOMPUTE_CONFIG,
    LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG,
    LINEAR_DPRE_RECOMPUTE_NARROW_MAX_K,
    LINEAR_COOPERATIVE_CONFIG,
    LINEAR_PINGPONG_CONFIG,
    LINEAR_RESIDENT_ACTIVATIONS,
    LINEAR_RESIDENT_BIAS_FIRST,
    LINEAR_RESIDENT_CONFIG,
    LINEAR_RESIDENT_CONSUMERS,
    LINEAR_RESIDENT_MAX_K,
    LINEAR_TMA_CONFIGS,
    LINEAR_WIDE_COOPERATIVE_CONFIG,
    Launcher,
)
from ..kernels.linear_act import (
    linear_act_dgrad_kernel,
    linear_act_dgrad_tma_kernel,
    linear_act_dpre_kernel,
    linear_act_dpre_recompute_pingpong_kernel,
    linear_act_fwd_kernel,
    linear_act_fwd_pingpong_kernel,
    linear_act_fwd_resident_kernel,
    linear_act_fwd_tma_kernel,
)
from ._common import (
    acc_dtypes,
    autocast_dtype,
    CallPlans,
    autotune_m_key,
    backward_row_chunks,
    call_autocast,
    cdiv,
    check_bool,
    check_linear_inputs,
    contiguous_bias,
    dot_meta,
    exact_key,
    FastestForm,
    gemms_on_cublas,
    grad_needed,
    kernel_backward,
    launch_pingpong,
    num_sms,
    persistent_grid,
    pingpong_device,
    pingpong_eligible,
    reuse_saved_once,
    tma_eligible,
    use_triton,
)
from .activations import (
    DERIVATIVE_FROM_OUTPUT,
    activation_grad_from_output_reference,
    activation_grad_reference,
    activation_reference,
    check_activation,
)

__all__ = ["linear_act", "linear_act_reference", "linear_act_forward_impl"]

_FWD_KEY = ["M_KEY", "N", "K", "ACT", "HAS_BIAS", "STORE_PRE"]
_DGRAD_KEY = ["M_KEY", "N", "K", "ACT", "FROM_OUTPUT", "HAS_BIAS", "STORE_DPRE"]
_DGRAD_FIXED = {"BLOCK_M": LINEAR_DGRAD_BLOCK_M}
_fwd_launcher = Launcher(linear_act_fwd_kernel, LINEAR_CONFIGS, key=_FWD_KEY, fp32_configs=LINEAR_FP32_CONFIGS)
_fwd_tma_launcher = Launcher(linear_act_fwd_tma_kernel, LINEAR_TMA_CONFIGS, key=_FWD_KEY)
_dgrad_launcher = Launcher(linear_act_dgrad_kernel, LINEAR_DGRAD_CONFIGS, key=_DGRAD_KEY, fixed=_DGRAD_FIXED)
_DPRE_KEY = ["M_KEY", "N", "ACT", "FROM_OUTPUT", "HAS_BIAS", "STORE_DPRE", "IN_PLACE"]
_dpre_launcher = Launcher(linear_act_dpre_kernel, LINEAR_DPRE_CONFIGS, key=_DPRE_KEY, fixed=_DGRAD_FIXED)
# written over its input: one config, never tuned (a tuner's timing runs would overwrite it first)
_dpre_in_place_launcher = Launcher(linear_act_dpre_kernel, LINEAR_DPRE_IN_PLACE_CONFIGS, key=_DPRE_KEY,
                                   fixed=_DGRAD_FIXED)
# a training loop's repeated calls replay their launches (ops/_common.py CallPlans): the forward's,
# the recomputing dpre kernel's and the dpre stream's
_fwd_plans, _dpre_recompute_plans, _stream_plans = CallPlans(), CallPlans(), CallPlans()
# dx through the fused dgrad kernel instead of dpre stream + cuBLAS (see the module docstring)
FUSED_DGRAD = os.environ.get("FUSEDMLP_FUSED_DGRAD", "0") not in ("", "0")
_dgrad_tma_launcher = Launcher(linear_act_dgrad_tma_kernel, LINEAR_DGRAD_TMA_CONFIGS, key=_DGRAD_KEY,
                               fixed=_DGRAD_FIXED)
# The forward's forms on compute capability 9.0 (as the GLU forward's, ops/glu.py): the Triton
# TMA kernel, the ping-pong kernel alternating tiles, cooperative or cooperative on wide tiles
# (configs.py), and at K <= LINEAR_RESIDENT_MAX_K without pre stored the resident-x kernel (x's
# rows kept in shared memory, three consumers; not with gelu, whose long epilogue it runs 1.1-1.2x
# slower than the alternating form: LINEAR_RESIDENT_ACTIVATIONS). The first call of each shape key
# times those offered. Where nothing is timed the rule is the resident form where it is offered
# (on an H200 it beat the alternating form at every K <= 512 measured, with every activation it is
# offered for), else the alternating form (the fastest with gelu_tanh at every K measured).
LINEAR_FORWARD_PINGPONG_FORMS = {"alternating": LINEAR_PINGPONG_CONFIG, "cooperative": LINEAR_COOPERATIVE_CONFIG,
                                 "wide": LINEAR_WIDE_COOPERATIVE_CONFIG}
LINEAR_FORWARD_FORMS = ("tma", *LINEAR_FORWARD_PINGPONG_FORMS, "resident")
linear_forward_form = FastestForm(fields=("device", "dtype", "m_key", "n", "k", "activation", "bias", "store_pre"),
                                  name="linear_forward")


def linear_act_reference(x, weight, bias=None, activation="gelu_tanh"):
    """Plain PyTorch: ``act(x @ weight.T + bias)``."""
    return activation_reference(torch.nn.functional.linear(x, weight, bias), check_activation(activation))


# --------------------------------------------------------------------------------------
# Kernel launches
# --------------------------------------------------------------------------------------
def _cublas_fwd(x, weight, bias, act, store_pre):
    """(y, pre) with the GEMM on cuBLAS (``gemms_on_cublas``: fp32 at "highest", fp64): the
    bias in cuBLAS's epilogue, relu too where nothing else is kept (``torch._addmm_activation``,
    whose gelu is not the same function on every device: not used), else the activation as
    one elementwise pass over the pre-activation."""
    if act == "relu" and bias is not None and not store_pre:
        return torch._addmm_activation(bias, x, weight.t()), x.new_empty((0,))
    pre = torch.nn.functional.linear(x, weight, bias)
    if act == "identity":  # y is pre: a kept pre must not be y itself (the backward writes over it)
        return pre, (pre.clone() if store_pre else pre.new_empty((0,)))
    return activation_reference(pre, act), (pre if store_pre else pre.new_empty((0,)))


def _launch_fwd(x, weight, bias, act, store_pre):
    if gemms_on_cublas(x):
        return _cublas_fwd(x, weight, bias, act, store_pre)
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, n) if store_pre else (0,), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y, pre
    common = dict(M=m, N=n, K=k, M_KEY=autotune_m_key(m), ACT=act, HAS_BIAS=bias is not None, STORE_PRE=store_pre)
    b_ptr = bias if bias is not None else y
    outputs = (y, pre) if store_pre else (y,)
    plan = (exact_key(x), exact_key(weight), exact_key(bias), y.data_ptr(), pre.data_ptr(), act, store_pre)
    if _fwd_plans.launch(plan):  # a training loop's repeated call
        return y, pre
    if tma_eligible(x, weight, *outputs):
        pre_or_y = pre if store_pre else y

        def launch(form):
            if form == "tma":
                return _fwd_tma_launcher.launch(
                    persistent_grid(num_sms(x), m, n), x_desc=x, w_desc=weight, b_ptr=b_ptr, y_desc=y,
                    pre_desc=pre_or_y, **common, **dot_meta(x.dtype), memo=plan,
                )
            if form == "resident":
                return _launch_fwd_resident(x, weight, b_ptr, y, common)
            return _launch_fwd_pingpong(x, weight, b_ptr, y, pre_or_y, common, form)

        key = (x.device.index, x.dtype, common["M_KEY"], n, k, act, bias is not None, store_pre)
        forms = _forward_forms(x, n, k, act, store_pre)
        with _fwd_plans.filing(plan):
            linear_forward_form.run(key, forms, "resident" if "resident" in forms else "alternating", launch)
        return y, pre
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    _fwd_launcher.launch(
        grid, x, weight, b_ptr, y, pre if store_pre else y,
        stride_xm=x.stride(0), stride_xk=x.stride(1), stride_wn=weight.stride(0), stride_wk=weight.stride(1),
        stride_ym=y.stride(0), stride_pm=pre.stride(0) if store_pre else 0,
        **common, **dot_meta(x.dtype), dtype=x.dtype,
    )
    return y, pre


def _forward_forms(x, n, k, act, store_pre):
    """The forward's forms that a call's device, shape and activation admit
    (``LINEAR_FORWARD_FORMS``): the TMA kernel alone off compute capability 9.0; the resident-x
    kernel only up to ``LINEAR_RESIDENT_MAX_K``, for ``LINEAR_RESIDENT_ACTIVATIONS``, without pre
    stored, and with a column tile per consumer."""
    if not pingpong_device(x):
        return ("tma",)
    resident = (k <= LINEAR_RESIDENT_MAX_K and act in LINEAR_RESIDENT_ACTIVATIONS and not store_pre
                and cdiv(n, LINEAR_RESIDENT_CONFIG["BLOCK_N"]) >= LINEAR_RESIDENT_CONSUMERS)
    return tuple(form for form in LINEAR_FORWARD_FORMS if resident or form != "resident")


def resident_row_shares(m: int, n: int, sms: int, block_m: int = LINEAR_RESIDENT_CONFIG["BLOCK_M"]) -> int:
    """Programs per row block (``block_m`` rows; the config's 128) of the resident-x forward (its
    HSPLIT): about one program per SM where there are fewer row blocks than SMs (each reads the
    block's x once), one otherwise; no share with fewer column tiles than the kernel has
    consumers (each unit's x is freed by one arrival per consumer)."""
    block_n = LINEAR_RESIDENT_CONFIG["BLOCK_N"]
    tiles_n = cdiv(n, block_n)
    shares = max(1, min(tiles_n // LINEAR_RESIDENT_CONSUMERS, round(sms / cdiv(m, block_m))))
    # the last share is the shortest
    while shares > 1 and tiles_n - (shares - 1) * cdiv(tiles_n, shares) < LINEAR_RESIDENT_CONSUMERS:
        shares -= 1
    return shares


def _launch_fwd_resident(x, weight, b_ptr, y, common):
    m, n, k = common["M"], common["N"], common["K"]
    sms = num_sms(x)
    shares = resident_row_shares(m, n, sms)
    launch_pingpong(linear_act_fwd_resident_kernel, LINEAR_RESIDENT_CONFIG, m, n, sms, {"x_desc": x},
                    {"w_desc": weight}, {"y_desc": y}, units=cdiv(m, LINEAR_RESIDENT_CONFIG["BLOCK_M"]) * shares,
                    b_ptr=b_ptr, M=m, N=n, HSPLIT=shares, ACT=common["ACT"], HAS_BIAS=common["HAS_BIAS"],
                    BIAS_FIRST=common["ACT"] in LINEAR_RESIDENT_BIAS_FIRST,
                    K_TILES=cdiv(k, LINEAR_RESIDENT_CONFIG["BLOCK_K"]))


def _launch_fwd_pingpong(x, weight, b_ptr, y, pre, common, form):
    launch_pingpong(
        linear_act_fwd_pingpong_kernel, LINEAR_FORWARD_PINGPONG_FORMS[form], common["M"], common["N"], num_sms(x),
        {"x_desc": x}, {"w_desc": weight}, {"y_desc": y, "pre_desc": pre},
        b_ptr=b_ptr, **{k: v for k, v in common.items() if k != "M_KEY"},
    )


def _launch_backward(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx, dpre_out=None):
    m, n = g.shape
    k = weight.shape[1]
    in_place = dpre_out is not None
    # the fused dgrad reads each tile of ``a`` once per K tile: it cannot write dpre over it
    fused_dgrad = FUSED_DGRAD and compute_dx and not in_place
    store_dpre = store_dpre or (compute_dx and not fused_dgrad) or in_place  # the cuBLAS dgrad reads it
    dpre = dpre_out if in_place else torch.empty((m, n) if store_dpre else (0,), dtype=g.dtype, device=g.device)
    acc_torch = acc_dtypes(g.dtype)[1]
    db_partial = torch.empty(
        (cdiv(m, LINEAR_DGRAD_BLOCK_M), n) if has_bias else (0,), dtype=acc_torch, device=g.device
    )
    if m == 0 or n == 0:
        dx = torch.zeros((m, k) if compute_dx else (0,), dtype=g.dtype, device=g.device)
        return dx, dpre, torch.zeros((n,) if has_bias else (0,), dtype=acc_torch, device=g.device)
    a = g if act == "identity" else a  # identity reads no activation
    common = dict(M=m, N=n, M_KEY=autotune_m_key(m), ACT=act, FROM_OUTPUT=from_output,
                  HAS_BIAS=has_bias, STORE_DPRE=store_dpre)
    db_ptr = db_partial if has_bias else g
    dpre_ptr = dpre if store_dpre else g
    if fused_dgrad:
        dx = _launch_fused_dgrad(g, a, weight, dpre_ptr, db_ptr, common)
    else:
        grid = lambda meta: (cdiv(m, LINEAR_DGRAD_BLOCK_M) * cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        # everything the stream's arguments come from: its key as a call plan and as a memo
        plan = (exact_key(g), exact_key(a), exact_key(dpre), db_partial.data_ptr(), act, from_output, has_bias,
                store_dpre, in_place)
        _stream_plans.run(plan, lambda: (_dpre_in_place_launcher if in_place else _dpre_launcher).launch(
            grid, g, a, dpre_ptr, db_ptr,
            stride_gm=g.stride(0), stride_gn=g.stride(1), stride_am=a.stride(0), stride_an=a.stride(1),
            stride_dpm=dpre.stride(0) if store_dpre else 0,
            **common, IN_PLACE=in_place, ACC_DTYPE=acc_dtypes(g.dtype)[0], dtype=g.dtype, memo=plan,
        ))
        dx = torch.mm(dpre, weight) if compute_dx else g.new_empty((0,))
    # Fixed-order reduction of the per-row-block partials: same bits on every run.
    db = db_partial.sum(dim=0) if has_bias else db_partial
    return dx, dpre, db


def _launch_fused_dgrad(g, a, weight, dpre_ptr, db_ptr, common):
    """dx = (g * act'(a)) @ weight in one kernel; dpre and db partials written on the side."""
    m, n = g.shape
    k = weight.shape[1]
    dx = torch.empty((m, k), dtype=g.dtype, device=g.device)
    if k == 0:
        return dx
    store_dpre = common["STORE_DPRE"]
    if tma_eligible(g, a, weight, dx, *((dpre_ptr,) if store_dpre else ())):
        _dgrad_tma_launcher.launch(
            persistent_grid(num_sms(g), m, k, "BLOCK_M", "BLOCK_K"),
            g_desc=g, a_desc=a, w_desc=weight, dx_desc=dx,
            dpre_desc=dpre_ptr, db_partial_ptr=db_ptr, K=k,
            **common, **dot_meta(g.dtype),
        )
        return dx
    grid = lambda meta: (cdiv(m, LINEAR_DGRAD_BLOCK_M) * cdiv(k, meta["BLOCK_K"]),)  # noqa: E731
    _dgrad_launcher.launch(
        grid, g, a, weight, dx, dpre_ptr, db_ptr,
        stride_gm=g.stride(0), stride_gn=g.stride(1), stride_am=a.stride(0), stride_an=a.stride(1),
        stride_wn=weight.stride(0), stride_wk=weight.stride(1), stride_dxm=dx.stride(0),
        stride_dpm=dpre_ptr.stride(0) if store_dpre else 0, K=k,
        **common, **dot_meta(g.dtype), dtype=g.dtype,
    )
    return dx


def dpre_recompute_config(k: int) -> dict:
    """The tiles of ``linear_act_dpre_recompute_pingpong_kernel`` for a reduction of length k
    (configs.py: 64 columns where the epilogue is the bound, 128 where the main loop is)."""
    return LINEAR_DPRE_RECOMPUTE_NARROW_CONFIG if k <= LINEAR_DPRE_RECOMPUTE_NARROW_MAX_K else LINEAR_DPRE_RECOMPUTE_CONFIG


def recompute_dpre(x, weight, bias, g, act, has_bias):
    """(dpre, db) with pre recomputed on the tile (``linear_act_dpre_recompute_pingpong_kernel``):
    dpre = g * act'(x @ weight.T + bias) in g's dtype, db its column sums in fp32 if has_bias;
    None where that kernel does not apply (not a 16-bit tensor on compute capability 9.0 with
    TMA layouts, or empty), and the caller recomputes pre with the forward instead."""
    m, n = g.shape
    if m == 0 or n == 0 or x.shape[1] == 0 or not pingpong_device(g):  # (allocating nothing; the layouts below)
        return None
    config = dpre_recompute_config(x.shape[1])
    dpre = torch.empty((m, n), dtype=g.dtype, device=g.device)
    db_partial = torch.empty((cdiv(m, config["BLOCK_M"]), n) if has_bias else (0,), dtype=torch.float32,
                             device=g.device)
    plan = (exact_key(x), exact_key(weight), exact_key(bias), exact_key(g), dpre.data_ptr(), db_partial.data_ptr(),
            act, has_bias)
    if not _dpre_recompute_plans.launch(plan):  # (a plan's tensors were eligible)
        if not pingpong_eligible(x, weight, g):
            return None
        with _dpre_recompute_plans.filing(plan):
            launch_pingpong(
                linear_act_dpre_recompute_pingpong_kernel, config, m, n, num_sms(g), {"x_desc": x},
                {"w_desc": weight}, {"g_desc": g, "dpre_desc": dpre}, b_ptr=bias if bias is not None else g,
                db_partial_ptr=db_partial if has_bias else g, M=m, N=n, K=x.shape[1], ACT=act,
                HAS_BIAS=bias is not None, STORE_DB=has_bias,
            )
    # Fixed-order reduction of the per-row-block partials: same bits on every run.
    return dpre, (db_partial.sum(dim=0) if has_bias else None)


# --------------------------------------------------------------------------------------
# Implementations shared by both autograd paths (Triton or the reference)
# --------------------------------------------------------------------------------------
def linear_act_forward_impl(x, weight, bias, act: str, store_pre: bool):
    """(y, pre): y = act(x @ weight.T + bias); pre if store_pre, else an empty tensor. x is 2-D."""
    if use_triton(x):
        return _launch_fwd(x, weight, bias, act, store_pre)
    pre = torch.nn.functional.linear(x, weight, bias)
    return activation_reference(pre, act), (pre if store_pre else pre.new_empty((0,)))


def _backward_impl(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx, dpre_out=None):
    """(dx, dpre, db): dpre = g * act'(a) (a = pre, or y if from_output); dx = dpre @ weight if
    compute_dx; dpre returned if store_dpre; db = dpre.sum(0) in fp32 (fp64) if has_bias.
    ``dpre_out``: dpre is written there and returned (it may be ``a`` itself: the saved
    pre-activation, which the stream reads at each position before writing it)."""
    if use_triton(g):
        return _launch_backward(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx, dpre_out)
    dpre = g.to(acc_dtypes(g.dtype)[1])
    if act != "identity":
        grad_fn = activation_grad_from_output_reference if from_output else activation_grad_reference
        dpre = dpre * grad_fn(a.to(dpre.dtype), act)
    rounded = dpre.to(g.dtype)  # the GEMM operands are in the data dtype, as in the kernel
    if dpre_out is not None:  # the kernel's contract: the result in dpre_out's memory
        rounded = dpre_out.copy_(rounded)
    dx = rounded @ weight if compute_dx else g.new_empty((0,))
    db = dpre.sum(0) if has_bias else dpre.new_empty((0,))
    return dx, (rounded if store_dpre or dpre_out is not None else g.new_empty((0,))), db


@torch.library.custom_op("fusedmlp::linear_act_backward", mutates_args=())
def _backward_op(
    g: torch.Tensor, a: torch.Tensor, weight: torch.Tensor, act: str, from_output: bool, has_bias: bool,
    store_dpre: bool, compute_dx: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward_impl(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx)


@_backward_op.register_fake
def _(g, a, weight, act, from_output, has_bias, store_dpre, compute_dx):
    m, n = g.shape
    return (
        g.new_empty((m, weight.shape[1]) if compute_dx else (0,)),
        g.new_empty((m, n) if store_dpre else (0,)),
        g.new_empty((n,) if has_bias else (0,), dtype=acc_dtypes(g.dtype)[1]),
    )


def saved_mode(act: str, store_pre: bool) -> str:
    """What the backward reads for act': "pre" (saved), "output" (y, saved) or "recompute"."""
    if store_pre:
        return "pre"
    return "output" if act in DERIVATIVE_FROM_OUTPUT else "recompute"


def backward_formula(grad_y, x, weight, bias, saved, act, mode, needs, traced, recompute_pre=None, extra_terms=None,
                     dgrad=None, in_place=False):
    """(dx, dW, db), None where ``needs`` says it is not wanted; rows walked in chunks.
    ``traced``: the formula runs under torch.compile's tracing, so it calls the custom ops (the
    tracer must not reach a kernel launch with fake tensors). ``in_place`` (mode "pre", eager):
    dpre is written over the saved pre-activation, so it costs no memory and the rows are not
    chunked (the backward of a graph can then run only once). The identity has act' = 1:
    dpre is g itself, nothing is streamed and db is g's column sum.

    Ops built on this one (LoRA) pass ``recompute_pre(rows)``, their pre-activation of a row
    slice when it is recomputed, ``extra_terms(rows, dpre)``, run once per chunk with that
    chunk's dpre (kept then even where dW is not wanted) for their own gradients, and
    ``dgrad``: the ``[out, in]`` matrix dx is taken against (``dx = dpre @ dgrad``; ``weight``
    by default), or a function ``dgrad(rows, dpre)`` giving a chunk's dx, run after
    ``extra_terms`` (then dx is never formed inside the opt-in fused dgrad kernel)."""
    needs_x, needs_w, needs_b = needs
    has_bias = bias is not None and needs_b
    if not (needs_x or needs_w or has_bias or extra_terms is not None):
        return None, None, None
    backward = torch.ops.fusedmlp.linear_act_backward if traced else _backward_impl
    forward = torch.ops.fusedmlp.linear_act if traced else linear_act_forward_impl
    # pre recomputed on the tile, never written (eager, default recompute, dpre for cuBLAS)
    tile_recompute = (mode == "recompute" and recompute_pre is None and dgrad is None and extra_terms is None
                      and not traced and use_triton(x))
    if recompute_pre is None:
        recompute_pre = lambda rows: forward(x[rows], weight, bias, "identity", False)[0]  # noqa: E731
    if dgrad is None:
        dgrad = weight
    in_place = in_place and mode == "pre" and not traced
    # dx formed inside the (opt-in) dgrad kernel, against a matrix
    fused_dx = needs_x and FUSED_DGRAD and not in_place and not callable(dgrad)
    streamless = act == "identity" and not fused_dx  # dpre = g
    store_dpre = needs_w or extra_terms is not None or (needs_x and not fused_dx)
    grad_x = grad_w = db = None
    transient_row_bytes = 0 if (in_place or streamless) else weight.shape[0] * x.element_size() * (
        2 if mode == "recompute" else 1)  # dpre (+ pre)
    chunks = backward_row_chunks(x.shape[0], LINEAR_DGRAD_BLOCK_M, transient_row_bytes)
    if needs_x and len(chunks) > 1:
        grad_x = x.new_empty(x.shape)
    for start, stop in chunks:
        rows = slice(start, stop)
        dx_rows = None
        if streamless:
            dpre = grad_y[rows]
            db_rows = dpre.sum(0, dtype=acc_dtypes(dpre.dtype)[1]) if has_bias else None
        elif tile_recompute and not fused_dx and (
                fused := recompute_dpre(x[rows], weight, bias, grad_y[rows], act, has_bias)) is not None:
            dpre, db_rows = fused
        else:
            if mode == "recompute":
                a = recompute_pre(rows)  # pre, one chunk at a time
            else:
                a = saved[rows] if saved is not None else grad_y[rows]
            dx_rows, dpre, db_rows = backward(
                grad_y[rows], a, weight if callable(dgrad) else dgrad, act, mode == "output", has_bias, store_dpre,
                fused_dx,
                *((a,) if in_place else ()),
            )
            del a
        if extra_terms is not None:
            extra_terms(rows, dpre)
        if needs_x:
            if not fused_dx:
                dx_rows = dgrad(rows, dpre) if callable(dgrad) else dpre @ dgrad
            if len(chunks) == 1:
                grad_x = dx_rows  # one chunk: its dx is the gradient, no copy
            else:
                grad_x[rows] = dx_rows
        if needs_w:  # accumulated over the chunks in a fixed order
            grad_w = dpre.t() @ x[rows] if grad_w is None else grad_w.addmm_(dpre.t(), x[rows])
        if has_bias:  # fp32 (fp64) across chunks, rounded once
            db = db_rows if db is None else db + db_rows
        del dpre, dx_rows  # one chunk's transients alive at a time
    return grad_x, grad_w, (db.to(x.dtype) if has_bias else None)


# --------------------------------------------------------------------------------------
# Eager path (autograd.Function) and traced path (custom op with registered autograd)
# --------------------------------------------------------------------------------------
def tensor_to_save(act, mode, y, pre):
    if mode == "pre":
        return pre
    if mode == "output" and act != "identity":
        return y
    return None


class _LinearActFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, act, store_pre):
        y, pre = linear_act_forward_impl(x, weight, bias, act, store_pre)
        ctx.act, ctx.mode = act, saved_mode(act, store_pre)
        ctx.save_for_backward(x, weight, bias, tensor_to_save(act, ctx.mode, y, pre))
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, weight, bias, saved = ctx.saved_tensors
        # the saved pre-activation is this Function's own: its backward writes dpre over it
        in_place = reuse_saved_once(ctx, "fusedmlp.linear_act", ctx.mode == "pre", "save_preact=True",
                                    "save_preact=False")
        grads = backward_formula(grad_y, x, weight, bias, saved, ctx.act, ctx.mode, ctx.needs_input_grad[:3], False,
                                 in_place=in_place)
        return (*grads, None, None)


@torch.library.custom_op("fusedmlp::linear_act", mutates_args=())
def _linear_act_op(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], act: str, store_pre: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return linear_act_forward_impl(x, weight, bias, act, store_pre)


@_linear_act_op.register_fake
def _(x, weight, bias, act, store_pre):
    shape = (x.shape[0], weight.shape[0])
    return x.new_empty(shape), x.new_empty(shape if store_pre else (0,))


def _setup_context(ctx, inputs, output):
    x, weight, bias, act, store_pre = inputs
    y, pre = output
    ctx.set_materialize_grads(False)  # pre never receives a gradient: no zero tensor for it
    ctx.act, ctx.mode = act, saved_mode(act, store_pre)
    ctx.save_for_backward(x, weight, bias, tensor_to_save(act, ctx.mode, y, pre))


def _op_backward(ctx, grad_y, grad_pre):
    if grad_y is None:
        return None, None, None, None, None
    x, weight, bias, saved = ctx.saved_tensors
    grads = backward_formula(grad_y, x, weight, bias, saved, ctx.act, ctx.mode, ctx.needs_input_grad[:3], True)
    return (*grads, None, None)


torch.library.register_autograd("fusedmlp::linear_act", _op_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def linear_act(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Optional[str] = "gelu_tanh",
    save_preact: bool = False,
) -> torch.Tensor:
    """Fused ``act(x @ weight.T + bias)``, forward and backward.

    Args:
        x: ``[..., in]`` input, any leading shape; fp16, bf16, fp32 or fp64; any strides.
        weight: ``[out, in]`` (an ``nn.Linear`` weight).
        bias: optional ``[out]``.
        activation: one of identity, relu, squared_relu, gelu (erf), gelu_tanh, sigmoid,
            silu; None means identity.
        save_preact: True keeps the pre-activation for the backward, which (in eager mode)
            writes its gradient over it: no transient of that size, and a graph that can be
            differentiated once (a second backward with ``retain_graph=True`` raises). False
            (default) keeps the output instead when the activation's derivative is a
            function of it (identity, relu, squared_relu, sigmoid), and otherwise nothing but
            x: the backward then recomputes the pre-activation (one more GEMM).

    Returns:
        ``[..., out]`` tensor of x's dtype; inside ``torch.autocast``, of the autocast dtype (tensor
        arguments cast as for ``F.linear``).
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(linear_act, dtype, x, weight, bias, activation, save_preact)
    act = check_activation(activation)
    check_linear_inputs(x, weight, bias)
    check_bool(save_preact, "save_preact")
    bias = contiguous_bias(bias)
    x2d = x.reshape(-1, weight.shape[1])  # a view whenever the leading dims allow it
    if not grad_needed(x2d, weight, bias):  # inference: no pre-activation to keep
        y = (torch.ops.fusedmlp.linear_act(x2d, weight, bias, act, False) if torch.compiler.is_compiling()
             else linear_act_forward_impl(x2d, weight, bias, act, False))[0]
    elif torch.compiler.is_compiling():
        y, _ = torch.ops.fusedmlp.linear_act(x2d, weight, bias, act, save_preact)
    else:
        y = _LinearActFunction.apply(x2d, weight, bias, act, save_preact)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], weight.shape[0])
