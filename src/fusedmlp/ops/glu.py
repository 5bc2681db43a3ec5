"""Gated linear units: the shared GLU launch machinery, and the GEGLU projection op.

    fusedmlp.geglu(x, weight, bias=None, *, recompute=True, activation="gelu_tanh")
        h = x @ weight.T + bias;  y = h[..., :out] * gelu_tanh(h[..., out:])

``weight`` is the packed ``[2*out, in]`` weight of one ``nn.Linear(in, 2*out)``; its two row
halves are the two weights of the generic GLU kernels (kernels/glu.py), which SwiGLU
(ops/swiglu.py) drives with its separate gate and up projections.

In eager mode the kernels run under an ``autograd.Function``. Under ``torch.compile`` the
same implementations run as torch.library custom ops, so ``fullgraph=True`` traces through
them (fake implementations give shapes, the autograd formula is registered); the dispatcher
round trip of a custom op costs tens of microseconds of host time per call, which eager
mode does without:

    fusedmlp::geglu(x, weight, bias, act, store_h) -> (y, h)
        h is the [M, 2*out] pre-activation if store_h, else an empty tensor.
    fusedmlp::glu_backward_dh(g, x, w1, w2, b1, b2, h, act, wd, store_z) -> (dh, db, z)
        the fused elementwise backward of any GLU (``glu_backward_dh_impl``); db in fp32
        (fp64 for fp64 inputs), for accumulation over row chunks.

Backward memory modes: ``recompute=True`` saves only x (weight and bias are parameters) and
recomputes h inside the backward kernel; ``recompute=False`` saves h too (2*out values per
row), so the backward kernel only streams h and g, and in eager mode writes dh over h (h is
dead once read), so the backward allocates nothing of dh's size; the price is that such a
graph can be differentiated once (a second backward with ``retain_graph=True`` raises).
Then ``dW = dh.T @ x`` and ``dx = dh @ weight`` run on cuBLAS (through aten, so
torch.compile sees them). Where dh is a new tensor (recompute mode, and the store mode under
torch.compile, whose custom ops do not mutate their inputs), the backward walks the rows in
up to 4 chunks when dh would exceed 256 MiB (``backward_row_chunks``), so that only one
chunk's dh exists at a time; dW accumulates over the chunks in its own dtype (one rounding
per chunk), db in fp32. Where the rows are too few for 4 such chunks (under 16384) the
recompute mode splits the output's columns instead (``_dh_chunks``): a chunk of columns
[c0, c1) is the GLU of weight rows c0:c1 and out+c0:out+c1, so its dh comes from x alone,
its dW rows are written whole, and dx adds its two products (one rounding per product).
The recompute mode, the memory mode, also halves a dh of 64-256 MiB (by rows where both
halves have 4096 rows, else by columns): at d = 1024, N = 8192 that takes the step's peak
from 0.64x Liger-Kernel's to 0.46x for about 4% of its time (``GLU_RECOMPUTE_HALVES_BYTES``).
Above 256 MiB its row chunks hold at most 512 MiB where 4096-row chunks allow it, more than 4
of them (``GLU_RECOMPUTE_MAX_CHUNK_BYTES``: 0.5-1.5 GiB less at d >= 4096 with 32768+ rows, in
the same time within 0.6%).

A training loop's repeated calls (the same tensors, as the caching allocator hands them out
step after step) replay the forward's launch and the dh kernels' (the store mode's stream,
the dh kernel that forms g on its tile, the recomputing dh kernel) from call plans
(ops/_common.py ``CallPlans``), skipping the host work before them.

fp32 at PyTorch's "highest" matmul precision and fp64 on a GPU (``gemms_on_cublas``): the
products are cuBLAS's (h = x @ W.T + b, one product over a packed weight), y the GLU of h
as elementwise passes, and the recompute backward forms h the same way and streams dh over
it. Triton's CUDA-core dots had SwiGLU's forward at 1.8x eager's time, its store-mode step
at 1.24x (H100, 16384 x 512 -> 1792: 3.71 and 7.59 ms against 2.03 and 6.10; cuBLAS: 2.07
and 5.98 ms; benchmarks/NOTES.md, "The GLUs and LoRA at fp32 'highest' on cuBLAS").
fp32 at "high" keeps the kernels, on TF32 tensor cores, with tiles half as deep in K.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels.configs import (
    GLU_BWD_BLOCK_M,
    GLU_BWD_CONFIGS,
    GLU_BWD_TMA_CONFIGS,
    GLU_COOPERATIVE_CONFIG,
    GLU_COOPERATIVE_MIN_K,
    GLU_BWD_FP32_CONFIGS,
    GLU_FP32_CONFIGS,
    GLU_DH_PINGPONG_MAX_K,
    GLU_DH_ROTATING_CONFIG,
    GLU_DH_WIDE_PINGPONG_CONFIG,
    GLU_DH_WIDE_STREAM_ACTIVATIONS,
    GLU_DH_RECOMPUTE_PINGPONG_CONFIG,
    GLU_GEMM_CONFIGS,
    GLU_PINGPONG_CONFIG,
    GLU_STREAM_CONFIGS,
    GLU_TMA_CONFIGS,
    GLU_WIDE_COOPERATIVE_CONFIG,
    Launcher,
)
from ..kernels.glu import (
    glu_bwd_dh_kernel,
    glu_bwd_dh_rotating_kernel,
    glu_bwd_dh_wide_pingpong_kernel,
    glu_bwd_dh_recompute_pingpong_kernel,
    glu_bwd_dh_tma_kernel,
    glu_bwd_stream_kernel,
    glu_fwd_kernel,
    glu_fwd_pingpong_kernel,
    glu_fwd_tma_kernel,
)
from . import _common
from ._common import (
    acc_dtypes,
    autocast_dtype,
    autotune_m_key,
    backward_row_chunks,
    call_autocast,
    CallPlans,
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
from .activations import activation_grad_reference, activation_reference, check_activation

__all__ = ["geglu", "geglu_reference", "glu_forward_impl", "glu_backward_dh_impl"]

_TUNE_KEY = ["M_KEY", "OUT", "K", "HAS_BIAS", "ACT"]
_BWD_FIXED = {"BLOCK_M": GLU_BWD_BLOCK_M}
_fwd_launcher = Launcher(glu_fwd_kernel, GLU_GEMM_CONFIGS, key=_TUNE_KEY + ["STORE_H"],
                         fp32_configs=GLU_FP32_CONFIGS)
_fwd_tma_launcher = Launcher(glu_fwd_tma_kernel, GLU_TMA_CONFIGS, key=_TUNE_KEY + ["STORE_H"])
_bwd_launcher = Launcher(glu_bwd_dh_kernel, GLU_BWD_CONFIGS, key=_TUNE_KEY, fixed=_BWD_FIXED,
                         fp32_configs=GLU_BWD_FP32_CONFIGS)
_bwd_tma_launcher = Launcher(glu_bwd_dh_tma_kernel, GLU_BWD_TMA_CONFIGS, key=_TUNE_KEY, fixed=_BWD_FIXED)
# one config per case (with bias or not; dh written over h or not), never tuned: the stream
# may write over its inputs
_stream_launchers = {
    case: Launcher(glu_bwd_stream_kernel, configs, key=["OUT", "HAS_BIAS", "ACT", "STORE_Z"], fixed=_BWD_FIXED)
    for case, configs in GLU_STREAM_CONFIGS.items()
}
# the forward's launch and the dh kernels' (the store-mode stream, the store mode's dh with g
# formed on the tile, the recomputing dh kernel), replayed by a training loop's repeated calls
_fwd_plans, _stream_plans, _dh_tile_plans, _dh_recompute_plans = CallPlans(), CallPlans(), CallPlans(), CallPlans()

# The GLU forward on compute capability 9.0 has four forms that write the same y (and h):
# the alternating ping-pong kernel (two consumers on alternate tiles, one's epilogue beside
# the other's main loop), the cooperative one (both consumers on one tile of 2 x 128 rows,
# configs.py), its wide variant (2 x 64 rows, 128 columns per weight: one m64n256 MMA per K
# step; on an H100 up to 2.7% faster than the others at K = 4096) and the Triton TMA kernel.
# Their order depends on the device: on an H200 the cooperative form wins by 1-2% at
# K >= 2048 with y alone and loses elsewhere (the rule below); on an H100 it wins by 6-30%
# from K = 1024, h stored or not (benchmarks/NOTES.md, "The GLU forward's form on an H100").
# So the first call of each shape key times the four and keeps the fastest (ops/_common.py
# FastestForm); the rule serves where nothing is timed.
GLU_FORWARD_PINGPONG_FORMS = {"alternating": GLU_PINGPONG_CONFIG, "cooperative": GLU_COOPERATIVE_CONFIG,
                              "wide": GLU_WIDE_COOPERATIVE_CONFIG}
GLU_FORWARD_FORMS = ("tma", *GLU_FORWARD_PINGPONG_FORMS)
glu_forward_form = FastestForm(fields=("device", "dtype", "m_key", "out", "k", "activation", "bias", "store_h"),
                               name="glu_forward")

# --------------------------------------------------------------------------------------
# Reference (float64 oracle in tests, and the CPU path without the Triton interpreter)
# --------------------------------------------------------------------------------------
def geglu_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, activation: str = "gelu_tanh"
) -> torch.Tensor:
    """Plain PyTorch: ``x1 * act(x2)`` with ``[x1 | x2] = x @ weight.T + bias`` (act = gelu_tanh by default)."""
    h = torch.nn.functional.linear(x, weight, bias)
    x1, x2 = h.chunk(2, dim=-1)
    return x1 * activation_reference(x2, check_activation(activation))


def _glu_h_reference(x, w1, w2, b1, b2):
    linear = torch.nn.functional.linear
    return torch.cat([linear(x, w1, b1), linear(x, w2, b2)], dim=-1)


# --------------------------------------------------------------------------------------
# Kernel launches: any GLU y = (x @ w1.T + b1) * act(x @ w2.T + b2)
# --------------------------------------------------------------------------------------
def _bias_or(bias, placeholder):
    return bias if bias is not None else placeholder  # an unused pointer when HAS_BIAS is False


def _joined(first, second):
    """One view over ``first`` and ``second`` when both are views of one storage and second's
    rows follow first's in memory with the same strides (the two halves of one packed tensor,
    as GEGLU's weight and bias), else None. Two tensors of their own can lie back to back too
    (the caching allocator hands out neighbouring blocks): no view spans them."""
    if first.stride() != second.stride() or first.shape[1:] != second.shape[1:]:
        return None
    if first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr():
        return None
    if second.data_ptr() != first.data_ptr() + first.shape[0] * first.stride(0) * first.element_size():
        return None
    return first.as_strided((first.shape[0] + second.shape[0], *first.shape[1:]), first.stride())


def _cublas_h(x, w1, w2, b1, b2):
    """h = [x @ w1.T + b1 | x @ w2.T + b2] ([M, 2*out]) on cuBLAS (``gemms_on_cublas``: fp32 at
    "highest", fp64, where Triton's dots would run on CUDA cores at a fraction of cuBLAS's
    speed; and SwiGLU's recompute backward, ``_h_on_cublas``): one product where the weights
    are the halves of one packed weight (GEGLU's; as two half-width products the whole forward
    was 4-7% slower on an H100 in fp32), else each product written into its half of h."""
    packed = _joined(w1, w2)
    if packed is not None:
        bias = None if b1 is None else _joined(b1, b2)
        if b1 is not None and bias is None:
            bias = torch.cat([b1, b2])
        return torch.nn.functional.linear(x, packed, bias)
    out = w1.shape[0]
    h = torch.empty((x.shape[0], 2 * out), dtype=x.dtype, device=x.device)
    for half, w, b in ((h[:, :out], w1, b1), (h[:, out:], w2, b2)):
        if b is None:
            torch.mm(x, w.t(), out=half)
        else:
            torch.addmm(b, x, w.t(), out=half)
    return h


def _launch_fwd(x, w1, w2, b1, b2, act, store_h):
    if gemms_on_cublas(x):  # the products on cuBLAS, the GLU as elementwise passes over h
        h = _cublas_h(x, w1, w2, b1, b2)
        out = w1.shape[0]
        return h[:, :out] * activation_reference(h[:, out:], act), (h if store_h else h.new_empty((0,)))
    m, k = x.shape
    out = w1.shape[0]
    y = torch.empty((m, out), dtype=x.dtype, device=x.device)
    h = torch.empty((m, 2 * out) if store_h else (0,), dtype=x.dtype, device=x.device)
    if m == 0 or out == 0:
        return y, h
    plan = (exact_key(x), exact_key(w1), exact_key(w2), exact_key(b1), exact_key(b2), y.data_ptr(), h.data_ptr(),
            act, store_h)
    if _fwd_plans.launch(plan):  # a training loop's repeated call (CallPlans)
        return y, h
    h_halves = (h[:, :out], h[:, out:]) if store_h else ()
    common = dict(M=m, OUT=out, K=k, M_KEY=autotune_m_key(m), ACT=act, HAS_BIAS=b1 is not None, STORE_H=store_h)
    if tma_eligible(x, y, w1, w2, *h_halves):
        h1, h2 = h_halves if store_h else (y, y)
        b1_ptr, b2_ptr = _bias_or(b1, y), _bias_or(b2, y)

        def launch(form):
            if form == "tma":
                return _fwd_tma_launcher.launch(
                    persistent_grid(num_sms(x), m, out), x_desc=x, w1_desc=w1, w2_desc=w2, b1_ptr=b1_ptr,
                    b2_ptr=b2_ptr, y_desc=y, h1_desc=h1, h2_desc=h2, **common, **dot_meta(x.dtype), memo=plan,
                )
            return launch_pingpong(
                glu_fwd_pingpong_kernel, GLU_FORWARD_PINGPONG_FORMS[form], m, out, num_sms(x),
                {"x_desc": x}, {"w1_desc": w1, "w2_desc": w2}, {"y_desc": y, "h1_desc": h1, "h2_desc": h2},
                b1_ptr=b1_ptr, b2_ptr=b2_ptr, M=m, OUT=out, K=k, ACT=act, HAS_BIAS=b1 is not None, STORE_H=store_h,
            )

        # the H200's rule (configs.py) for where nothing is timed
        rule = "cooperative" if not store_h and k >= GLU_COOPERATIVE_MIN_K else "alternating"
        key = (x.device.index, x.dtype, common["M_KEY"], out, k, act, b1 is not None, store_h)
        with _fwd_plans.filing(plan):
            glu_forward_form.run(key, GLU_FORWARD_FORMS if pingpong_device(x) else ("tma",), rule, launch)
        return y, h
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]) * cdiv(out, meta["BLOCK_N"]),)  # noqa: E731
    _fwd_launcher.launch(
        grid,
        x, w1, w2, _bias_or(b1, y), _bias_or(b2, y), y, h if store_h else y,
        stride_xm=x.stride(0), stride_xk=x.stride(1), stride_w1n=w1.stride(0), stride_w1k=w1.stride(1),
        stride_w2n=w2.stride(0), stride_w2k=w2.stride(1), stride_ym=y.stride(0),
        stride_hm=h.stride(0) if store_h else 0,
        **common, **dot_meta(x.dtype), dtype=x.dtype,
    )
    return y, h


def _h_on_cublas(x, wd, store_z) -> bool:
    """Whether the recompute mode's dh starts from h recomputed by PyTorch's matmul (cuBLAS on
    a GPU), then takes the kept-h path with dh written over it (the same memory as a new dh):
    with fp32 at "highest" and fp64 (``gemms_on_cublas``), and whenever g = gy @ wd is formed
    too or z is wanted (SwiGLU's recompute mode). The recompute kernels serve the rest (GEGLU's
    case: g read, no z). A Triton kernel that formed g and both products on one tile (three
    accumulators) took 1.10-1.15x the time of this route at 16384 tokens, d = 1024-4096 (H200,
    bf16; benchmarks/NOTES.md, "SwiGLU's recompute dh from cuBLAS's h"), and was removed."""
    return gemms_on_cublas(x) or wd is not None or store_z


def _launch_bwd_dh(g, x, w1, w2, b1, b2, h, act, wd, store_z, dh=None, z=None, g_scratch=None, x2_first=False):
    m, k = x.shape
    if h is None and _h_on_cublas(x, wd, store_z):  # recompute mode: h from cuBLAS, then dh written over it
        h = _cublas_h(x, w1, w2, b1, b2)
        dh = h if dh is None else dh
    out = w1.shape[0]
    acc_torch = acc_dtypes(x.dtype)[1]
    if dh is None:
        dh = torch.empty((m, 2 * out), dtype=x.dtype, device=x.device)
    if z is None:
        z = torch.empty((m, out) if store_z else (0,), dtype=x.dtype, device=x.device)
    has_bias = b1 is not None
    db_partial = torch.empty(
        (cdiv(m, GLU_BWD_BLOCK_M), 2 * out) if has_bias else (0,), dtype=acc_torch, device=x.device
    )
    if m == 0 or out == 0:
        return dh, torch.zeros((2 * out,) if has_bias else (0,), dtype=acc_torch, device=x.device), z
    # the pointer kernels: one program per row block x column block
    grid = lambda meta: (cdiv(m, GLU_BWD_BLOCK_M) * cdiv(out, meta["BLOCK_N"]),)  # noqa: E731
    if h is not None:  # the store mode: a stream over g and h (g = gy @ wd on a ping-pong tile, or cuBLAS first)
        if wd is not None:
            tile_plan = (exact_key(g), exact_key(wd), exact_key(h), exact_key(dh), exact_key(z), act, has_bias,
                         store_z, x2_first)
            if _dh_tile_plans.launch(tile_plan):  # (filed where g was formed on the tile)
                return dh, db_partial, z
            dh_halves = dh_halves_of(dh, out, x2_first)
            z_or_any = z if store_z else dh_halves[0]
            narrow = g.shape[1] <= GLU_DH_PINGPONG_MAX_K  # 128 x 64 tiles of g, else 128 x 128
            on_tile = narrow or act not in GLU_DH_WIDE_STREAM_ACTIVATIONS
            if on_tile and not has_bias and pingpong_eligible(g, wd, h, *dh_halves, z_or_any):  # g formed on the tile
                with _dh_tile_plans.filing(tile_plan):
                    launch_pingpong(
                        glu_bwd_dh_rotating_kernel if narrow else glu_bwd_dh_wide_pingpong_kernel,
                        GLU_DH_ROTATING_CONFIG if narrow else GLU_DH_WIDE_PINGPONG_CONFIG,
                        m, out, num_sms(x), {"gy_desc": g}, {},
                        dh_kernel_descriptors(h, dh_halves, z_or_any), {"wd_desc": wd},
                        M=m, OUT=out, KG=g.shape[1], ACT=act, STORE_Z=store_z,
                    )
                return dh, db_partial, z
            g = g @ wd if g_scratch is None else torch.mm(g, wd, out=g_scratch)
        # everything the stream's arguments come from: its key as a call plan and as a memo
        plan = (exact_key(g), exact_key(h), exact_key(dh), exact_key(z), db_partial.data_ptr(), out, act, has_bias,
                store_z, x2_first)
        if not _stream_plans.launch(plan):
            with _stream_plans.filing(plan):
                _stream_launchers[has_bias, dh.data_ptr() == h.data_ptr()].launch(  # written over h or not
                    grid, g, h, dh, z if store_z else dh, db_partial if has_bias else dh,
                    M=m, OUT=out, stride_gm=g.stride(0), stride_gn=g.stride(1), stride_hm=h.stride(0),
                    stride_dhm=dh.stride(0), stride_zm=z.stride(0) if store_z else 0,
                    ACT=act, HAS_BIAS=has_bias, STORE_Z=store_z, X2_FIRST=x2_first,
                    ACC_DTYPE=acc_dtypes(x.dtype)[0], dtype=x.dtype, memo=plan,
                )
        return dh, _db_of(db_partial, has_bias), z
    # the recompute kernels: g read, no z (the rest took the kept-h path above)
    plan = (exact_key(x), exact_key(w1), exact_key(w2), exact_key(b1), exact_key(b2), exact_key(g), exact_key(dh),
            db_partial.data_ptr(), act, x2_first)
    if _dh_recompute_plans.launch(plan):  # (filed where the ping-pong kernel ran)
        return dh, _db_of(db_partial, has_bias), z
    dh_halves = dh_halves_of(dh, out, x2_first)
    if pingpong_eligible(x, w1, w2, g, *dh_halves):
        with _dh_recompute_plans.filing(plan):
            launch_pingpong(
                glu_bwd_dh_recompute_pingpong_kernel, GLU_DH_RECOMPUTE_PINGPONG_CONFIG, m, out, num_sms(x),
                {"x_desc": x}, {"w1_desc": w1, "w2_desc": w2},
                {"g_desc": g, "dh1_desc": dh_halves[0], "dh2_desc": dh_halves[1]},
                b1_ptr=_bias_or(b1, dh), b2_ptr=_bias_or(b2, dh), db_partial_ptr=db_partial if has_bias else dh,
                M=m, OUT=out, K=k, ACT=act, HAS_BIAS=has_bias,
            )
        return dh, _db_of(db_partial, has_bias), z
    common = dict(M=m, OUT=out, K=k, M_KEY=autotune_m_key(m), ACT=act, HAS_BIAS=has_bias)
    if tma_eligible(x, w1, w2, g, *dh_halves):
        _bwd_tma_launcher.launch(
            persistent_grid(num_sms(x), m, out),
            g_desc=g, x_desc=x, w1_desc=w1, w2_desc=w2, b1_ptr=_bias_or(b1, dh), b2_ptr=_bias_or(b2, dh),
            dh1_desc=dh_halves[0], dh2_desc=dh_halves[1], db_partial_ptr=db_partial if has_bias else dh,
            **common, **dot_meta(x.dtype),
        )
    else:
        _bwd_launcher.launch(
            grid,
            g, x, w1, w2, _bias_or(b1, dh), _bias_or(b2, dh), dh, db_partial if has_bias else dh,
            stride_gm=g.stride(0), stride_gn=g.stride(1),
            stride_xm=x.stride(0), stride_xk=x.stride(1), stride_w1n=w1.stride(0), stride_w1k=w1.stride(1),
            stride_w2n=w2.stride(0), stride_w2k=w2.stride(1), stride_dhm=dh.stride(0), X2_FIRST=x2_first,
            **common, **dot_meta(x.dtype), dtype=x.dtype,
        )
    return dh, _db_of(db_partial, has_bias), z


def dh_halves_of(dh, out, x2_first=False):
    """(where dh1 goes, where dh2 goes) in dh ``[M, 2*out]``: its halves in order, or swapped."""
    first, second = dh[:, :out], dh[:, out:]
    return (second, first) if x2_first else (first, second)


def dh_kernel_descriptors(h, dh_halves, z):
    """The output-shaped descriptor arguments of the dh kernels that read h (``launch_pingpong``'s
    out_descs): h's halves ``[M, 2*out]``, where dh1 and dh2 go (``dh_halves_of``) and z."""
    out = h.shape[1] // 2
    return {"h1_desc": h[:, :out], "h2_desc": h[:, out:], "dh1_desc": dh_halves[0], "dh2_desc": dh_halves[1],
            "z_desc": z}


def _db_of(db_partial, has_bias):
    """The fixed-order reduction of the per-row-block partials: same bits on every run."""
    return db_partial.sum(dim=0) if has_bias else db_partial


# --------------------------------------------------------------------------------------
# Implementations shared by the GLU ops and both autograd paths (Triton or the reference)
# --------------------------------------------------------------------------------------
def glu_forward_impl(x, w1, w2, b1, b2, act: str, store_h: bool):
    """(y, h): y = (x @ w1.T + b1) * act(x @ w2.T + b2); h = [x1 | x2] ([M, 2*out]) if store_h,
    else an empty tensor. x is 2-D; b1 and b2 are both given or both None."""
    if use_triton(x):
        return _launch_fwd(x, w1, w2, b1, b2, act, store_h)
    h = _glu_h_reference(x, w1, w2, b1, b2)
    x1, x2 = h.chunk(2, dim=-1)
    y = x1 * activation_reference(x2, act)
    return y, (h if store_h else h.new_empty((0,)))


def glu_backward_dh_impl(g, x, w1, w2, b1, b2, h, act: str, wd=None, store_z: bool = False, in_place=False,
                         z_out=None, x2_first=False):
    """(dh, db, z): the fused elementwise backward of a GLU.

    dh = [g * act(x2) | g * x1 * act'(x2)] ([M, 2*out], x's dtype), or with ``x2_first`` its
    halves swapped, [dh2 | dh1] (a weight packed as [W2; W1] then gets its gradient from one
    product, dh.T @ x: ``swiglu_packed``), with h = [x1 | x2]
    recomputed when ``h`` is None (on the dh kernel's tile where g is given and z not wanted,
    else by cuBLAS first: ``_h_on_cublas``); g = ``g`` [M, out], or ``g @ wd`` when ``wd``
    [KG, out] is given (``g`` is then [M, KG]; formed on the kernel's tile, except on GPUs
    without the ping-pong kernels, or beyond ``GLU_DH_PINGPONG_MAX_K`` for the activations of
    ``GLU_DH_WIDE_STREAM_ACTIVATIONS``, where cuBLAS forms it before the stream); db =
    [dh1 | dh2].sum(0) in fp32 (fp64 for fp64 inputs), empty without bias; z = x1 * act(x2) if
    ``store_z``, else empty.

    ``in_place`` (h given): dh is written over h, and z over ``z_out`` ([M, out]) or, without
    ``wd``, over g itself; these are returned as dh and z. With ``wd``, ``z_out`` is also
    where cuBLAS puts g if it forms it (z then overwrites it), so the backward allocates
    nothing. Safe because each element of dh and z depends only on the h and g elements at
    its own position, and each kernel reads its tile of them before it stores any output
    there. The stream is never autotuned: a tuner's timing runs would overwrite the inputs.
    """
    if in_place and (h is None or (wd is not None and z_out is None)):
        raise ValueError("in_place needs the stored h, and with wd a z_out for z (and g)")
    dh_out = h if in_place else None
    z_dest = (g if z_out is None else z_out) if in_place else None
    if use_triton(x):
        return _launch_bwd_dh(g, x, w1, w2, b1, b2, h, act, wd, store_z, dh_out, z_dest if store_z else None,
                              z_dest if wd is not None else None, x2_first)
    acc = acc_dtypes(x.dtype)[1]
    if h is None:
        h = _glu_h_reference(x, w1, w2, b1, b2)
    x1, x2 = h.to(acc).chunk(2, dim=-1)
    g = g.to(acc) @ wd.to(acc) if wd is not None else g.to(acc)
    act_x2 = activation_reference(x2, act)
    halves = [g * act_x2, g * x1 * activation_grad_reference(x2, act)]
    db = torch.cat([half.sum(0) for half in halves]) if b1 is not None else x1.new_empty((0,))
    dh = torch.cat(halves[::-1] if x2_first else halves, dim=-1)
    z = (x1 * act_x2).to(x.dtype) if store_z else x.new_empty((0,))
    if in_place:  # the same contract as the kernels': results in h's (and z_out's or g's) memory
        dh_out.copy_(dh)
        return dh_out, db, (z_dest.copy_(z) if store_z else z)
    return dh.to(x.dtype), db, z


@torch.library.custom_op("fusedmlp::glu_backward_dh", mutates_args=())
def _glu_backward_dh_op(
    g: torch.Tensor, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b1: Optional[torch.Tensor],
    b2: Optional[torch.Tensor], h: Optional[torch.Tensor], act: str, wd: Optional[torch.Tensor], store_z: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return glu_backward_dh_impl(g, x, w1, w2, b1, b2, h, act, wd, store_z)


@_glu_backward_dh_op.register_fake
def _(g, x, w1, w2, b1, b2, h, act, wd, store_z):
    m, out = x.shape[0], w1.shape[0]
    db = x.new_empty((2 * out,) if b1 is not None else (0,), dtype=acc_dtypes(x.dtype)[1])
    return x.new_empty((m, 2 * out)), db, x.new_empty((m, out) if store_z else (0,))


def glu_backward_dh(traced: bool):
    """The fused backward's entry: its custom op when ``traced`` (a backward formula that
    torch.compile traces: the op is opaque to the tracer, which must not reach the kernel
    launch with fake tensors), the plain implementation in eager mode."""
    return torch.ops.fusedmlp.glu_backward_dh if traced else glu_backward_dh_impl


# --------------------------------------------------------------------------------------
# GEGLU: the packed weight's halves are the two GLU weights
# --------------------------------------------------------------------------------------
def _halves(t, out):
    return (None, None) if t is None else (t[:out], t[out:])


def _geglu_forward_impl(x, weight, bias, act, store_h):
    out = weight.shape[0] // 2
    return glu_forward_impl(x, *_halves(weight, out), *_halves(bias, out), act, store_h)


def _backward(grad_y, x, weight, bias, h, act, needs, traced, in_place=False):
    """(dx, dW, db) or None where ``needs`` says it is not wanted, forming dh one chunk at a
    time (``_dh_chunks``: row ranges, or in recompute mode column ranges of the output) so that
    only one chunk's dh exists at a time. ``traced``: the formula runs under torch.compile's
    tracing (custom ops only). ``in_place``: dh is written over the stored h (no transient, so
    one chunk)."""
    needs_x, needs_w, needs_b = needs
    m, out = x.shape[0], weight.shape[0] // 2
    row_bytes = 0 if in_place else 2 * out * x.element_size()
    by_columns, chunks = _dh_chunks(m, out, row_bytes, h is None)
    if by_columns:
        return _backward_by_columns(grad_y, x, weight, bias, act, needs, traced, chunks)
    whole = len(chunks) == 1  # one piece: no row views (each costs host time in a small step)
    grad_x = x.new_empty(x.shape) if needs_x and not whole else None
    grad_w = db = None
    for start, stop in chunks:
        rows = slice(start, stop)
        g_rows, x_rows, h_rows = (grad_y, x, h) if whole else (grad_y[rows], x[rows], None if h is None else h[rows])
        if in_place:
            dh, db_rows, _ = glu_backward_dh_impl(g_rows, x_rows, *_halves(weight, out), *_halves(bias, out),
                                                  h_rows, act, in_place=True)
        else:
            dh, db_rows, _ = glu_backward_dh(traced)(
                g_rows, x_rows, *_halves(weight, out), *_halves(bias, out), h_rows, act, None, False,
            )
        if needs_x:
            if whole:
                grad_x = torch.mm(dh, weight)
            else:
                torch.mm(dh, weight, out=grad_x[rows])
        if needs_w:  # one packed [2*out, in] tensor, accumulated over the chunks in a fixed order
            grad_w = dh.t() @ x_rows if grad_w is None else grad_w.addmm_(dh.t(), x_rows)
        if bias is not None:  # summed in fp32 (fp64) across chunks, rounded once
            db = db_rows if db is None else db + db_rows
        del dh  # before the next chunk allocates its own: one dh alive at a time
    grad_b = db.to(x.dtype) if (bias is not None and needs_b) else None
    return grad_x, grad_w, grad_b


def _backward_by_columns(grad_y, x, weight, bias, act, needs, traced, chunks):
    """The recompute backward over column ranges [c0, c1) of the output: each chunk's dh is
    [dh1 | dh2] of those columns (the weight rows c0:c1 and out+c0:out+c1, recomputed on the
    kernel's tile), its dW rows are written whole, and dx adds the chunk's two products."""
    needs_x, needs_w, needs_b = needs
    out = weight.shape[0] // 2
    grad_x = x.new_empty(x.shape) if needs_x else None
    grad_w = x.new_empty(weight.shape) if needs_w else None
    db_halves = ([], [])  # each chunk's db of x1's columns, of x2's: one concatenation at the end
    for c0, c1 in chunks:
        halves = (slice(c0, c1), slice(out + c0, out + c1))
        w1, w2 = (weight[half] for half in halves)
        b1, b2 = (None, None) if bias is None else (bias[half] for half in halves)
        dh, db_cols, _ = glu_backward_dh(traced)(grad_y[:, c0:c1], x, w1, w2, b1, b2, None, act, None, False)
        dh1, dh2 = dh[:, :c1 - c0], dh[:, c1 - c0:]
        if needs_x:
            if c0 == 0:
                torch.mm(dh1, w1, out=grad_x)
            else:
                grad_x.addmm_(dh1, w1)
            grad_x.addmm_(dh2, w2)
        if needs_w:
            torch.mm(dh1.t(), x, out=grad_w[halves[0]])
            torch.mm(dh2.t(), x, out=grad_w[halves[1]])
        if bias is not None:
            db_halves[0].append(db_cols[:c1 - c0])
            db_halves[1].append(db_cols[c1 - c0:])
        del dh, dh1, dh2  # one chunk's dh alive at a time
    grad_b = torch.cat(db_halves[0] + db_halves[1]).to(x.dtype) if (bias is not None and needs_b) else None
    return grad_x, grad_w, grad_b


def _dh_chunks(m, out, row_bytes, columns_allowed):
    """(by_columns, ranges) of the backward's dh: the row ranges of ``backward_row_chunks``;
    or, where those rows are too few to split dh into ``BWD_MAX_CHUNKS`` chunks and
    ``columns_allowed`` (recompute mode: the kernel forms any column range of dh from x), column
    ranges of the output, as many as keep each chunk within ``BWD_COLUMN_CHUNK_BYTES``, in
    multiples of 128 columns (whole tiles of the dh kernel, 16-byte aligned views of g).
    In recompute mode a dh that those rules keep whole but that exceeds
    ``GLU_RECOMPUTE_HALVES_BYTES`` goes in two chunks: two row ranges (whole row blocks) where
    the rows number at least 2 * ``BWD_MIN_CHUNK_ROWS``, else two column ranges; and row chunks
    hold at most ``GLU_RECOMPUTE_MAX_CHUNK_BYTES`` where their rows allow it (more than
    ``BWD_MAX_CHUNKS`` chunks)."""
    dh_bytes = m * row_bytes
    if columns_allowed and dh_bytes > _common.BWD_CHUNK_BYTES:
        if out >= 256 and m < _common.BWD_MAX_CHUNKS * _common.BWD_MIN_CHUNK_ROWS:
            return True, column_ranges(out, cdiv(dh_bytes, _common.BWD_COLUMN_CHUNK_BYTES))
        count = max(_common.BWD_MAX_CHUNKS, cdiv(dh_bytes, _common.GLU_RECOMPUTE_MAX_CHUNK_BYTES))
        return False, backward_row_chunks(m, GLU_BWD_BLOCK_M, row_bytes, rows=cdiv(m, count))
    if columns_allowed and _common.GLU_RECOMPUTE_HALVES_BYTES < dh_bytes <= _common.BWD_CHUNK_BYTES:
        if m >= 2 * _common.BWD_MIN_CHUNK_ROWS:
            half = cdiv(cdiv(m, 2), GLU_BWD_BLOCK_M) * GLU_BWD_BLOCK_M
            return False, [(0, half), (half, m)]
        if out >= 256:
            return True, column_ranges(out, 2)
    return False, backward_row_chunks(m, GLU_BWD_BLOCK_M, row_bytes)


def column_ranges(out, count):
    """(c0, c1) ranges splitting ``out`` columns into about ``count`` chunks of whole 128-column
    multiples (the last one shorter)."""
    width = cdiv(cdiv(out, count), 128) * 128
    return [(c0, min(c0 + width, out)) for c0 in range(0, out, width)]


# --------------------------------------------------------------------------------------
# Eager path: an autograd.Function (a few microseconds of host time per call)
# --------------------------------------------------------------------------------------
class _GEGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, act, store_h):
        y, h = _geglu_forward_impl(x, weight, bias, act, store_h)
        ctx.act = act
        # recompute mode saves x only (weight and bias are the layer's parameters, not activations)
        ctx.save_for_backward(x, weight, bias, h if store_h else None)
        return y

    @staticmethod
    @kernel_backward
    def backward(ctx, grad_y):
        x, weight, bias, h = ctx.saved_tensors
        in_place = reuse_saved_once(ctx, "fusedmlp.geglu", h is not None)
        grads = _backward(grad_y, x, weight, bias, h, ctx.act, ctx.needs_input_grad[:3], False, in_place)
        return (*grads, None, None)


# --------------------------------------------------------------------------------------
# Traced path: torch.library ops, so torch.compile(fullgraph=True) sees through the call
# --------------------------------------------------------------------------------------
@torch.library.custom_op("fusedmlp::geglu", mutates_args=())
def _geglu_op(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], act: str, store_h: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return _geglu_forward_impl(x, weight, bias, act, store_h)


@_geglu_op.register_fake
def _(x, weight, bias, act, store_h):
    m = x.shape[0]
    out = weight.shape[0] // 2
    return x.new_empty((m, out)), x.new_empty((m, 2 * out) if store_h else (0,))


def _geglu_setup_context(ctx, inputs, output):
    x, weight, bias, act, store_h = inputs
    _, h = output
    # h is an internal output that never receives a gradient: without this, autograd would
    # materialise a zero [M, 2*out] grad_h for it in every backward.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, weight, bias, h if store_h else None)
    ctx.act = act


def _geglu_op_backward(ctx, grad_y, grad_h):
    x, weight, bias, h = ctx.saved_tensors
    if grad_y is None:  # y did not reach the loss
        return None, None, None, None, None
    grads = _backward(grad_y, x, weight, bias, h, ctx.act, ctx.needs_input_grad[:3], traced=True)
    return (*grads, None, None)


torch.library.register_autograd("fusedmlp::geglu", _geglu_op_backward, setup_context=_geglu_setup_context)


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def _validate(x, weight, bias) -> None:
    check_linear_inputs(x, weight, bias)
    if weight.shape[0] % 2 != 0:
        raise ValueError(
            f"weight must be the packed [2*out, in] GEGLU weight (an even number of rows), got shape {tuple(weight.shape)}"
        )


def geglu(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, *, recompute: bool = True,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    """Fused GEGLU projection: ``x1 * gelu_tanh(x2)`` with ``[x1 | x2] = x @ weight.T + bias``.

    Args:
        x: ``[..., in]`` input, any leading shape; fp16, bf16, fp32 or fp64; any strides.
        weight: ``[2*out, in]`` packed weight of one ``nn.Linear(in, 2*out)`` (rows ``[:out]``
            give x1, rows ``[out:]`` give x2).
        bias: optional ``[2*out]``.
        recompute: True (default) saves only ``x`` for the backward and recomputes the
            pre-activation there; False also saves it (``[..., 2*out]``), trading memory for
            a cheaper backward, which reuses the saved memory for dh (so it runs once per
            forward: ``retain_graph=True`` and a second backward raise).
        activation: the gate's activation, ``gelu_tanh`` (default, GEGLU as specified) or any
            other of ``fusedmlp.ACTIVATIONS`` (e.g. ``gelu`` for the exact-erf GEGLU of some
            models; ``silu`` gives a packed SwiGLU projection).

    Returns:
        ``[..., out]`` tensor of x's dtype; inside ``torch.autocast``, of the autocast dtype (tensor
        arguments cast as for ``F.linear``).
    """
    if (dtype := autocast_dtype(x)) is not None:  # under torch.autocast: cast as F.linear's inputs are
        return call_autocast(geglu, dtype, x, weight, bias, recompute=recompute, activation=activation)
    _validate(x, weight, bias)
    act = check_activation(activation)
    check_bool(recompute, "recompute")
    bias = contiguous_bias(bias)
    in_features = weight.shape[1]
    out = weight.shape[0] // 2
    x2d = x.reshape(-1, in_features)  # a view whenever the leading dims allow it
    if not grad_needed(x2d, weight, bias):  # inference: h is not kept
        y = (torch.ops.fusedmlp.geglu(x2d, weight, bias, act, False) if torch.compiler.is_compiling()
             else _geglu_forward_impl(x2d, weight, bias, act, False))[0]
    elif torch.compiler.is_compiling():
        y, _ = torch.ops.fusedmlp.geglu(x2d, weight, bias, act, not recompute)
    else:  # eager: the custom op's dispatch costs tens of microseconds of host time per call
        y = _GEGLUFunction.apply(x2d, weight, bias, act, not recompute)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], out)
