"""Gated-linear-unit kernels (GEGLU, SwiGLU): the fused forward and the fused elementwise backward.

With ``x [M, K]`` and two weights ``W1, W2 [OUT, K]`` (the two halves of GEGLU's packed
``nn.Linear(K, 2*OUT)`` weight, or SwiGLU's up and gate projections) and optional biases:

    x1 = x @ W1.T + b1,  x2 = x @ W2.T + b2,  y = x1 * act(x2)                          [M, OUT]

GEGLU is ``act = gelu_tanh`` with ``[W1; W2]`` the packed weight; SwiGLU is ``act = silu``
with ``W1 = up_proj``, ``W2 = gate_proj``. A program owns the output tile (rows, cols) and
accumulates the matching x1 and x2 tiles in one main loop that reads each x tile once.
Bias, activation and gating are applied in registers; ``h = [x1 | x2]`` reaches memory only
when the caller stores it for the backward (``[M, 2*OUT]``, packed like GEGLU's h).

Backward, with g = dL/dy, t = act(x2), t' = act'(x2):

    dh[:, :OUT] = g * t,   dh[:, OUT:] = g * x1 * t',   db = dh.sum(0)

``glu_bwd_dh_kernel`` produces ``dh`` and per-row-block partial sums of ``db`` in one pass
for the recompute mode: the h tiles are recomputed with the same main loop from the g that
it reads (memory-optimal: only x was saved; on Hopper ``glu_bwd_dh_recompute_pingpong_kernel``
does it). SwiGLU's recompute mode, whose g = gy @ Wd is a product too, takes h from cuBLAS
instead and then the kept-h kernels below (ops/glu.py, ``_h_on_cublas``: the Triton kernel
that formed g and both products on one tile was the slower). The
remaining products (``dW = dh.T @ x``, ``dx = dh @ [W1; W2]``) are plain GEMMs done by the
host. Partial db sums are reduced on the host in a fixed order: no atomics, so db has the
same bits on every run. With h stored (the store mode), the work is a pure stream over g
and h, and ``glu_bwd_stream_kernel`` does it, in place when the caller allows; with h stored
and g = gy @ Wd (SwiGLU's down projection's input gradient, ``gy [M, KG]``, ``Wd [KG, OUT]``),
``glu_bwd_dh_rotating_kernel`` (Hopper) forms g on the tile and reads h there, so g never
reaches memory, and also writes ``z = x1 * t`` (the down projection's input, which its weight
gradient needs) (``glu_bwd_dh_wide_pingpong_kernel``: the same on tiles
twice as wide, for a long KG).

The kernels come in two forms with one epilogue: pointer-based (any strides; the
interpreter, fp32/fp64 and pre-Hopper GPUs; one program per tile) and ``*_tma`` (tensor
descriptors for aligned 16-bit inputs on Hopper; persistent: PROGRAMS_PER_SM programs per SM walk the
tiles in grouped order, so no wave of programs is left partly empty); on compute capability
9.0 the forward runs as ``glu_fwd_pingpong_kernel`` (Gluon, pingpong.py). The TMA forms take
each weight half, and h and dh, as separate descriptors, so that a tile crossing OUT is
clipped by the copy engine instead of spilling into the other half.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .activations import activation, activation_value_and_grad
from .gemm import persistent_tile, stream_row_block, tile_indices, xwT_mainloop, xwT_mainloop_tma
from .pingpong import (
    consumer_barriers, pingpong_consumer, pingpong_glu_dh_recompute_consumer, pingpong_glu_dh_wide_consumer,
    pingpong_loader, pingpong_setup, rotating_glu_dh_consumer,
)


@triton.jit
def _add_glu_bias(x1, x2, b1_ptr, b2_ptr, cols, mask_cols, HAS_BIAS: tl.constexpr, ACC_DTYPE: tl.constexpr):
    if HAS_BIAS:
        x1 += tl.load(b1_ptr + cols, mask=mask_cols, other=0.0).to(ACC_DTYPE)[None, :]
        x2 += tl.load(b2_ptr + cols, mask=mask_cols, other=0.0).to(ACC_DTYPE)[None, :]
    return x1, x2


@triton.jit
def _glu_h_tiles(
    x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, rows, cols, mask_rows, mask_cols, K,
    stride_xm, stride_xk, stride_w1n, stride_w1k, stride_w2n, stride_w2k,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """(x1, x2) tiles of the pre-activations for output columns ``cols``, in registers."""
    x1, x2 = xwT_mainloop(
        x_ptr, w1_ptr, w2_ptr, rows, mask_rows, cols, mask_cols, cols, mask_cols,
        K, stride_xm, stride_xk, stride_w1n, stride_w1k, stride_w2n, stride_w2k,
        BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_K, True, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    return _add_glu_bias(x1, x2, b1_ptr, b2_ptr, cols, mask_cols, HAS_BIAS, ACC_DTYPE)


@triton.jit
def _glu_h_tiles_tma(
    x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, row_start, col_start, OUT, K,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``_glu_h_tiles`` through descriptors; also returns the tile's columns and their mask."""
    x1, x2 = xwT_mainloop_tma(
        x_desc, w1_desc, w2_desc, row_start, col_start, col_start, K,
        BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_K, True, ACC_DTYPE, DOT_PRECISION, UPCAST, False,
    )
    cols = col_start + tl.arange(0, BLOCK_N)
    mask_cols = cols < OUT
    x1, x2 = _add_glu_bias(x1, x2, b1_ptr, b2_ptr, cols, mask_cols, HAS_BIAS, ACC_DTYPE)
    return x1, x2, cols, mask_cols


@triton.jit
def _glu_dh(g, x1, x2, ACT: tl.constexpr):
    """(dh1, dh2, z) = (g * act(x2), g * x1 * act'(x2), x1 * act(x2))."""
    act_x2, dact_x2 = activation_value_and_grad(x2, ACT)
    return g * act_x2, g * x1 * dact_x2, x1 * act_x2


@triton.jit
def _store_dh_z(dh_ptr, z_ptr, rows, cols, mask, OUT, stride_dhm, stride_zm, dh1, dh2, z, STORE_Z: tl.constexpr,
                X2_FIRST: tl.constexpr):
    """The pointer kernels' stores of a [rows, cols] tile: dh = [dh1 | dh2] (X2_FIRST: [dh2 | dh1])
    and, if STORE_Z, z."""
    dh_ptrs = dh_ptr + rows[:, None] * stride_dhm + cols[None, :]
    if X2_FIRST:
        dh1, dh2 = dh2, dh1
    tl.store(dh_ptrs, dh1.to(dh_ptr.dtype.element_ty), mask=mask)
    tl.store(dh_ptrs + OUT, dh2.to(dh_ptr.dtype.element_ty), mask=mask)
    if STORE_Z:
        tl.store(z_ptr + rows[:, None] * stride_zm + cols[None, :], z.to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_db_partials(db_partial_ptr, tile_m, cols, mask_cols, OUT, db1, db2):
    """Column sums of row block ``tile_m``'s dh (db1 of dh1, db2 of dh2) into its row of the [tiles_m, 2*OUT] partials."""
    partial_ptrs = db_partial_ptr + tile_m.to(tl.int64) * (2 * OUT) + cols
    tl.store(partial_ptrs, db1, mask=mask_cols)
    tl.store(partial_ptrs + OUT, db2, mask=mask_cols)


@triton.jit
def glu_fwd_kernel(
    x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, y_ptr, h_ptr,
    M, OUT, K, M_KEY,
    stride_xm, stride_xk, stride_w1n, stride_w1k, stride_w2n, stride_w2k, stride_ym, stride_hm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_H: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """y[M, OUT] = x1 * act(x2); also h[M, 2*OUT] = [x1 | x2] if STORE_H (the store memory mode).

    y and h have unit column stride (the host allocates them). ``M_KEY`` is only an autotune
    key (M rounded up to a power of two).
    """
    rows, cols, mask_rows, mask_cols, _ = tile_indices(M, OUT, BLOCK_M, BLOCK_N, GROUP_M)
    x1, x2 = _glu_h_tiles(
        x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, rows, cols, mask_rows, mask_cols, K,
        stride_xm, stride_xk, stride_w1n, stride_w1k, stride_w2n, stride_w2k,
        HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    mask = mask_rows[:, None] & mask_cols[None, :]
    if STORE_H:
        h_ptrs = h_ptr + rows[:, None] * stride_hm + cols[None, :]
        tl.store(h_ptrs, x1.to(h_ptr.dtype.element_ty), mask=mask)
        tl.store(h_ptrs + OUT, x2.to(h_ptr.dtype.element_ty), mask=mask)
    y = x1 * activation(x2, ACT)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def glu_bwd_dh_kernel(
    g_ptr, x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, dh_ptr, db_partial_ptr,
    M, OUT, K, M_KEY,
    stride_gm, stride_gn, stride_xm, stride_xk,
    stride_w1n, stride_w1k, stride_w2n, stride_w2k, stride_dhm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, X2_FIRST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """dh[M, 2*OUT] = [g * t | g * x1 * t'] (X2_FIRST: the halves swapped, [g * x1 * t' | g * t]);
    db_partial[tile_m, :] = [dh1 | dh2][tile rows].sum(0) if HAS_BIAS.

    The recompute mode's kernel: the h tiles come from the main loop over x and W1, W2 (bias
    added), as in the forward (a stored h goes to ``glu_bwd_stream_kernel``); g ``[M, OUT]`` is
    read. db partials are summed from the unrounded dh values; rows past M have g = 0 and so
    contribute nothing. ``db_partial`` is ``[cdiv(M, BLOCK_M), 2*OUT]`` fp32 (fp64 for fp64
    inputs); dh has unit column stride.
    """
    rows, cols, mask_rows, mask_cols, tile_m = tile_indices(M, OUT, BLOCK_M, BLOCK_N, GROUP_M)
    mask = mask_rows[:, None] & mask_cols[None, :]
    x1, x2 = _glu_h_tiles(
        x_ptr, w1_ptr, w2_ptr, b1_ptr, b2_ptr, rows, cols, mask_rows, mask_cols, K,
        stride_xm, stride_xk, stride_w1n, stride_w1k, stride_w2n, stride_w2k,
        HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    g_ptrs = g_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn
    g = tl.load(g_ptrs, mask=mask, other=0.0).to(ACC_DTYPE)
    dh1, dh2, _ = _glu_dh(g, x1, x2, ACT)
    _store_dh_z(dh_ptr, dh_ptr, rows, cols, mask, OUT, stride_dhm, 0, dh1, dh2, dh1, False, X2_FIRST)  # no z
    if HAS_BIAS:
        _store_db_partials(db_partial_ptr, tile_m, cols, mask_cols, OUT, tl.sum(dh1, axis=0), tl.sum(dh2, axis=0))


@triton.jit
def glu_bwd_stream_kernel(
    g_ptr, h_ptr, dh_ptr, z_ptr, db_partial_ptr,
    M, OUT,
    stride_gm, stride_gn, stride_hm, stride_dhm, stride_zm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_Z: tl.constexpr, X2_FIRST: tl.constexpr,
    BLOCK_M: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """The store mode's backward: ``glu_bwd_dh_kernel``'s outputs from g and the stored h, one pass.

    dh[M, 2*OUT] = [g * t | g * x1 * t'] (X2_FIRST: [g * x1 * t' | g * t]), z = x1 * t if
    STORE_Z, and the db partials of each BLOCK_M-row block (``[cdiv(M, BLOCK_M), 2*OUT]``, the
    accumulator dtype, in [db1 | db2] order) if HAS_BIAS.

    Each byte is read or written once, so the kernel is bound by memory bandwidth, and what
    keeps the bandwidth up is many programs in flight per SM: while one waits for its loads,
    others store. A program owns BLOCK_M rows x BLOCK_N columns but holds only SUB_M rows of
    each operand at a time (a whole 128 x 128 tile of g, x1 and x2 in fp32 took most of an
    SM's registers, one program per SM, and its loads and stores did not overlap). The db
    partials are summed in a fixed order: deterministic.

    dh may be h itself and z may be g (the backward reuses their memory): each element is
    written at a position its own step read (X2_FIRST: the other half's, same row and column),
    and a barrier between a step's loads and its stores keeps that safe whatever the compiler
    assumes about pointers it cannot tell apart.
    dh, h and z have unit column stride; g any strides.
    """
    tile_m, cols, mask_cols = stream_row_block(OUT, BLOCK_N)
    # db sums kept per (row, column) and reduced once at the end: a reduction across rows at
    # every step made the kernel 18% slower (H200, GEGLU at 65536 x 4096: 0.952 against 0.807 ms)
    db1_rows = tl.zeros([SUB_M, BLOCK_N], dtype=ACC_DTYPE)
    db2_rows = tl.zeros([SUB_M, BLOCK_N], dtype=ACC_DTYPE)
    for sub_start in tl.range(0, BLOCK_M, SUB_M):
        rows = tile_m.to(tl.int64) * BLOCK_M + sub_start + tl.arange(0, SUB_M)
        mask = (rows < M)[:, None] & mask_cols[None, :]
        h_ptrs = h_ptr + rows[:, None] * stride_hm + cols[None, :]
        x1 = tl.load(h_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        g_ptrs = g_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn
        g = tl.load(g_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        dh1, dh2, z = _glu_dh(g, x1, x2, ACT)
        tl.debug_barrier()
        _store_dh_z(dh_ptr, z_ptr, rows, cols, mask, OUT, stride_dhm, stride_zm, dh1, dh2, z, STORE_Z, X2_FIRST)
        if HAS_BIAS:
            db1_rows += dh1
            db2_rows += dh2
    if HAS_BIAS:
        _store_db_partials(db_partial_ptr, tile_m, cols, mask_cols, OUT,
                           tl.sum(db1_rows, axis=0), tl.sum(db2_rows, axis=0))


@triton.jit
def glu_fwd_tma_kernel(
    x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, y_desc, h1_desc, h2_desc,
    M, OUT, K, M_KEY,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_H: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr,  # configs.py: _configs
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``glu_fwd_kernel`` on tensor descriptors, persistent over PROGRAMS_PER_SM programs per SM.

    h1/h2 describe h[:, :OUT] and h[:, OUT:] (STORE_H).
    """
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(OUT, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles_m * num_tiles_n, tl.num_programs(0), flatten=FLATTEN):
        _, row_start, col_start = persistent_tile(tile_id, num_tiles_m, num_tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        x1, x2, _, _ = _glu_h_tiles_tma(
            x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, row_start, col_start, OUT, K,
            HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, ACC_DTYPE, DOT_PRECISION, UPCAST,
        )
        if STORE_H:
            h1_desc.store([row_start, col_start], x1.to(h1_desc.dtype))
            h2_desc.store([row_start, col_start], x2.to(h2_desc.dtype))
        y = x1 * activation(x2, ACT)
        y_desc.store([row_start, col_start], y.to(y_desc.dtype))


@gluon.jit
def glu_fwd_pingpong_kernel(
    x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, y_desc, h1_desc, h2_desc,
    M, OUT, K,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_H: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: GLU_PINGPONG_CONFIG
):
    """``glu_fwd_tma_kernel`` as a warp-specialised ping-pong kernel (pingpong.py): each ring
    stage holds the x tile and the W1 and W2 tiles side by side, and each consumer runs one MMA
    over both (PAIRED) whose accumulator's column halves are x1 and x2; block shapes come from
    the descriptors (BLOCK_N per weight); 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w1_desc, y_desc, STAGES, True, 1, COOPERATIVE)
    gl.warp_specialize([
        (pingpong_consumer, (b1_ptr, b2_ptr, y_desc, h1_desc, h2_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, OUT, K, 0, ACT, HAS_BIAS, STORE_H, True, False, GROUP_M, STAGES,
                             COOPERATIVE, 0)),
        (pingpong_consumer, (b1_ptr, b2_ptr, y_desc, h1_desc, h2_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, OUT, K, 1, ACT, HAS_BIAS, STORE_H, True, False, GROUP_M, STAGES,
                             COOPERATIVE, 0)),
        (pingpong_loader, (x_desc, w1_desc, w2_desc, a_bufs, b_bufs, ready, empty, M, OUT, K, GROUP_M,
                           STAGES, True, False, x_desc, w1_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def glu_bwd_dh_rotating_kernel(
    gy_desc, wd_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc,
    M, OUT, KG,
    ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: GLU_DH_ROTATING_CONFIG
):
    """The backward's dh with h kept and g = gy @ Wd formed on the tile (SwiGLU: the down
    projection's input gradient), g never reaching memory: ``gy [M, KG]``; ``Wd [KG, OUT]``,
    row-major, so that its ``[BLOCK_K, BLOCK_N]`` tiles are the MMA's right operand as loaded;
    h1 / h2 / dh1 / dh2 describe the halves of h and dh ([M, 2*OUT]), z ``[M, OUT]``. dh may be
    h itself: each tile's h is read before its outputs are written. No bias (SwiGLU has none);
    16-bit data.

    Three consumers take turns over the tiles (``rotating_glu_dh_consumer``) where the
    ping-pong kernels have two: at a short KG (up to ``GLU_DH_PINGPONG_MAX_K``) a tile's main
    loop is short against its epilogue's chain (h's copy, the epilogue, the stores), so two
    epilogues run under each main loop. Two ``[BLOCK_M, BLOCK_N]`` buffers per consumer (z goes
    out over dh1's) keep the ring at 5 stages. Against two consumers with three buffers each
    (H200, 16384 x 512 -> 1792, CUDA graphs): 111.9 against 118.5 us, 428.3 against 472.9 at
    65536 tokens (benchmarks/NOTES.md, "The dh kernel at d = 512: what bounds it")."""
    CONSUMERS: gl.constexpr = 3
    # two output buffers per consumer
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(gy_desc, wd_desc, dh1_desc, STAGES, False, 2, False,
                                                                CONSUMERS)
    h_ready = consumer_barriers(CONSUMERS)
    gl.warp_specialize([
        (rotating_glu_dh_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                                    turn, h_ready, M, OUT, KG, 0, CONSUMERS, ACT, STORE_Z, GROUP_M, STAGES)),
        (rotating_glu_dh_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                                    turn, h_ready, M, OUT, KG, 1, CONSUMERS, ACT, STORE_Z, GROUP_M, STAGES)),
        (rotating_glu_dh_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                                    turn, h_ready, M, OUT, KG, 2, CONSUMERS, ACT, STORE_Z, GROUP_M, STAGES)),
        (pingpong_loader, (gy_desc, wd_desc, wd_desc, a_bufs, b_bufs, ready, empty, M, OUT, KG, GROUP_M, STAGES,
                           False, True, gy_desc, wd_desc, 0)),
    ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def glu_bwd_dh_wide_pingpong_kernel(
    gy_desc, wd_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc,
    M, OUT, KG,
    ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: GLU_DH_WIDE_PINGPONG_CONFIG
):
    """``glu_bwd_dh_rotating_kernel``'s work with two consumers alternating on tiles of g twice
    as wide as h's and dh's descriptor blocks (``[BLOCK_K, 2 * HALF_N]`` tiles of Wd,
    ``[BLOCK_M, HALF_N]`` of h, dh and z), the epilogue in two column halves
    (``pingpong_glu_dh_wide_consumer``): for a long KG, where the narrow tiles' main loop reads
    too much from L2 to keep up with cuBLAS."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(gy_desc, wd_desc, dh1_desc, STAGES, False, 3, False)
    h_ready = consumer_barriers()
    gl.warp_specialize([
        (pingpong_glu_dh_wide_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs,
                                         ready, empty, turn, h_ready, M, OUT, KG, 0, ACT, STORE_Z, GROUP_M, STAGES)),
        (pingpong_glu_dh_wide_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs,
                                         ready, empty, turn, h_ready, M, OUT, KG, 1, ACT, STORE_Z, GROUP_M, STAGES)),
        (pingpong_loader, (gy_desc, wd_desc, wd_desc, a_bufs, b_bufs, ready, empty, M, OUT, KG, GROUP_M, STAGES,
                           False, True, gy_desc, wd_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def glu_bwd_dh_recompute_pingpong_kernel(
    g_desc, x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, dh1_desc, dh2_desc, db_partial_ptr,
    M, OUT, K,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: GLU_DH_RECOMPUTE_PINGPONG_CONFIG
):
    """The recompute mode's backward dh (``glu_bwd_dh_tma_kernel``'s work) as a
    ping-pong kernel (pingpong.py): x1 and x2 recomputed by the GLU forward's main loop (W1's
    and W2's tiles side by side, one MMA per stage), g ``[M, OUT]`` read into the consumer's
    buffer before it and dh1 written over it, so the epilogue's traffic (g in, dh out: three
    times the forward's y) overlaps the other consumer's main loop. db partials as the Triton
    kernel's (BLOCK_M must be ``GLU_BWD_BLOCK_M``). 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w1_desc, dh1_desc, STAGES, True, 2, False)
    g_ready = consumer_barriers()
    gl.warp_specialize([
        (pingpong_glu_dh_recompute_consumer, (g_desc, b1_ptr, b2_ptr, dh1_desc, dh2_desc, db_partial_ptr,
                                              a_bufs, b_bufs, c_bufs, ready, empty, turn, g_ready, M, OUT, K,
                                              0, ACT, HAS_BIAS, GROUP_M, STAGES)),
        (pingpong_glu_dh_recompute_consumer, (g_desc, b1_ptr, b2_ptr, dh1_desc, dh2_desc, db_partial_ptr,
                                              a_bufs, b_bufs, c_bufs, ready, empty, turn, g_ready, M, OUT, K,
                                              1, ACT, HAS_BIAS, GROUP_M, STAGES)),
        (pingpong_loader, (x_desc, w1_desc, w2_desc, a_bufs, b_bufs, ready, empty, M, OUT, K, GROUP_M,
                           STAGES, True, False, x_desc, w1_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@triton.jit
def glu_bwd_dh_tma_kernel(
    g_desc, x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, dh1_desc, dh2_desc, db_partial_ptr,
    M, OUT, K, M_KEY,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr,  # configs.py: _configs
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``glu_bwd_dh_kernel`` on tensor descriptors, persistent over PROGRAMS_PER_SM programs per SM.

    ``g_desc`` is g [M, OUT]; dh1/dh2 describe the two column halves of dh. Rows past
    M load as zeros (g = 0), so they add nothing to the db partials.
    """
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(OUT, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles_m * num_tiles_n, tl.num_programs(0), flatten=FLATTEN):
        tile_m, row_start, col_start = persistent_tile(tile_id, num_tiles_m, num_tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        x1, x2, cols, mask_cols = _glu_h_tiles_tma(
            x_desc, w1_desc, w2_desc, b1_ptr, b2_ptr, row_start, col_start, OUT, K,
            HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, ACC_DTYPE, DOT_PRECISION, UPCAST,
        )
        g = g_desc.load([row_start, col_start]).to(ACC_DTYPE)
        dh1, dh2, _ = _glu_dh(g, x1, x2, ACT)
        dh1_desc.store([row_start, col_start], dh1.to(dh1_desc.dtype))
        dh2_desc.store([row_start, col_start], dh2.to(dh2_desc.dtype))
        if HAS_BIAS:
            _store_db_partials(db_partial_ptr, tile_m, cols, mask_cols, OUT, tl.sum(dh1, axis=0), tl.sum(dh2, axis=0))
