"""Fused Linear + bias + activation: the forward GEMM with its epilogue, and the fused dgrad.

With ``x [M, K]``, ``W [N, K]`` (an ``nn.Linear(K, N)`` weight) and optional ``b [N]``:

    pre = x @ W.T + b,   y = act(pre)                                                   [M, N]

Forward: ``x @ W.T`` through the shared main loop, then bias and activation on the tile in
registers; ``pre`` is written only when the caller saves it for the backward.

Backward, with g = dL/dy:

    dpre = g * act'(pre)      dx = dpre @ W  [M, K]      dW = dpre.T @ x      db = dpre.sum(0)

With ``save_preact=False`` and an activation whose derivative needs pre, pre is recomputed:
on Hopper by ``linear_act_dpre_recompute_pingpong_kernel``, the forward's main loop with an
epilogue that reads g and writes dpre (and the db partials), so pre never goes to memory;
elsewhere by the forward kernel, then the stream below.

Two designs for dx, both here:

- ``linear_act_dpre_kernel`` (the default): one streaming pass over g and the saved
  activation (``pre``, or the output ``y`` for activations whose derivative is a function of
  it) writes dpre and per-row-block column sums of it (the db partials, reduced on the host in
  a fixed order: deterministic, no atomics); ``dx`` and ``dW`` then run on cuBLAS.
- ``linear_act_dgrad_kernel`` (opt-in, ``FUSEDMLP_FUSED_DGRAD=1``): ``dx`` with dpre formed on
  the tile inside the GEMM's main loop. Each step loads ``[BLOCK_M, BLOCK_N]`` tiles of g and
  of the saved activation, multiplies in act' in registers and feeds the product straight to
  the tensor cores against a ``[BLOCK_N, BLOCK_K]`` tile of W: no ``g * act'(pre)`` round trip
  before the GEMM. The programs of the first K tile (``tile_k == 0``) also write each dpre
  tile (``STORE_DPRE``, for the weight gradient) and the db partials. Its cost: every K tile
  of a row block recomputes act' for the same ``[BLOCK_M, N]`` slab, and its A operand comes
  from registers. Measured on an H200 (bf16, tokens=16384, ``save_preact=True``, backward in
  4 row chunks): 24.2 ms against eager PyTorch's 5.93 ms at 4096 -> 14336 (4.1x), 0.93 against
  0.18 ms at 512 -> 1792 (5.1x), so it is not the default.

Two forms as everywhere: plain pointers (any strides; interpreter, fp32/fp64, pre-Hopper) and
persistent tensor-descriptor kernels for aligned 16-bit data on Hopper. On compute capability
9.0 the forward runs as ``linear_act_fwd_pingpong_kernel`` (Gluon, pingpong.py), whose
epilogue overlaps the next tile's main loop, or at a short K as ``linear_act_fwd_resident_kernel``
(x's rows kept in shared memory, three consumers). ``dgrad_pingpong_kernel`` is a plain input
gradient ``a @ W + tail_a @ tail_W`` on the same machinery (weights as stored), for the ops whose
dx is a sum of two products (LoRA, SwiGLU).
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .activations import activation, activation_grad
from .gemm import grouped_tile, persistent_tile, stream_row_block, tile_indices, xwT_mainloop, xwT_mainloop_tma
from .pingpong import (
    consumer_barriers,
    pingpong_consumer,
    pingpong_dpre_consumer,
    pingpong_loader,
    pingpong_setup,
    resident_consumer,
    resident_loader,
    resident_setup,
)


@triton.jit
def _bias_act_epilogue(acc, b_ptr, cols, mask_cols, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """(pre, act(pre)) from the accumulator tile."""
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=mask_cols, other=0.0).to(ACC_DTYPE)[None, :]
    return acc, activation(acc, ACT)


@triton.jit
def linear_act_fwd_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, pre_ptr,
    M, N, K, M_KEY,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_pm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """y[M, N] = act(x @ W.T + b); also pre[M, N] if STORE_PRE. y, pre: unit column stride."""
    rows, cols, mask_rows, mask_cols, _ = tile_indices(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc, _ = xwT_mainloop(
        x_ptr, w_ptr, w_ptr, rows, mask_rows, cols, mask_cols, cols, mask_cols,
        K, stride_xm, stride_xk, stride_wn, stride_wk, stride_wn, stride_wk,
        BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_K, False, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    pre, y = _bias_act_epilogue(acc, b_ptr, cols, mask_cols, ACT, HAS_BIAS, ACC_DTYPE)
    mask = mask_rows[:, None] & mask_cols[None, :]
    if STORE_PRE:
        tl.store(pre_ptr + rows[:, None] * stride_pm + cols[None, :], pre.to(pre_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def linear_act_fwd_tma_kernel(
    x_desc, w_desc, b_ptr, y_desc, pre_desc,
    M, N, K, M_KEY,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr,  # configs.py: _configs
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``linear_act_fwd_kernel`` on tensor descriptors, persistent over PROGRAMS_PER_SM programs per SM."""
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles_m * num_tiles_n, tl.num_programs(0), flatten=FLATTEN):
        _, row_start, col_start = persistent_tile(tile_id, num_tiles_m, num_tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc, _ = xwT_mainloop_tma(
            x_desc, w_desc, w_desc, row_start, col_start, col_start, K,
            BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_K, False, ACC_DTYPE, DOT_PRECISION, UPCAST, False,
        )
        cols = col_start + tl.arange(0, BLOCK_N)
        pre, y = _bias_act_epilogue(acc, b_ptr, cols, cols < N, ACT, HAS_BIAS, ACC_DTYPE)
        if STORE_PRE:
            pre_desc.store([row_start, col_start], pre.to(pre_desc.dtype))
        y_desc.store([row_start, col_start], y.to(y_desc.dtype))


@gluon.jit
def linear_act_fwd_pingpong_kernel(
    x_desc, w_desc, b_ptr, y_desc, pre_desc,
    M, N, K,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LINEAR_PINGPONG_CONFIG
):
    """``linear_act_fwd_kernel`` as a warp-specialised ping-pong kernel (pingpong.py), one
    program per SM: two consumer warpgroups alternate tiles, each one's epilogue running
    during the other's main loop (COOPERATIVE: both on each tile of twice the rows, each
    weight tile feeding 256 rows). Block shapes come from the descriptors; 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, COOPERATIVE)
    gl.warp_specialize([
        (pingpong_consumer, (b_ptr, b_ptr, y_desc, pre_desc, pre_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 0, ACT, HAS_BIAS, STORE_PRE, False, False, GROUP_M, STAGES,
                             COOPERATIVE, 0)),
        (pingpong_consumer, (b_ptr, b_ptr, y_desc, pre_desc, pre_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 1, ACT, HAS_BIAS, STORE_PRE, False, False, GROUP_M, STAGES,
                             COOPERATIVE, 0)),
        (pingpong_loader, (x_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, False, x_desc, w_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def linear_act_fwd_resident_kernel(
    x_desc, w_desc, b_ptr, y_desc,
    M, N, HSPLIT,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, BIAS_FIRST: gl.constexpr, K_TILES: gl.constexpr,
    STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LINEAR_RESIDENT_CONFIG
):
    """``y = act(x @ W.T + b)`` for a short K (at most ``LINEAR_RESIDENT_MAX_K``) with each
    program's rows of x kept in shared memory (pingpong.py, ``resident_consumer``): a program
    owns a 128-row block at a time (or a share of its column tiles, ``HSPLIT`` programs per row
    block, where row blocks are fewer than SMs), copies its x rows once ([128, K]: 128 KB at
    K = 512) and streams only W's tiles, so per output element half the L2-to-SM bytes of the
    ping-pong kernel's 128 x 128 tiles move. Three consumers take turns over the block's tiles:
    two epilogues run under each main loop, which at K = 512 is as long as a gelu_tanh
    epilogue. 128 KB of x leaves room for a 5-stage W ring and one [128, 64] output buffer,
    which the consumers take in turn. Against the alternating ping-pong kernel (H200, bf16,
    CUDA graphs, gelu_tanh with bias): 53.6 against 55.1 us at 16384 x 512 -> 1792, 211.8
    against 228.7 at 65536 rows (benchmarks/NOTES.md, "The linear forward at K = 512: x
    resident with three consumers"); with BIAS_FIRST, the accumulator starting from the bias
    (configs.py, ``LINEAR_RESIDENT_BIAS_FIRST``: the activations where that measured faster),
    52.5 against 54.4 us. y alone (no pre); 16-bit data."""
    CONSUMERS: gl.constexpr = 3  # configs.py: LINEAR_RESIDENT_CONSUMERS, which the host's shares respect
    x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, turn, buffer_turn = resident_setup(
        x_desc, w_desc, y_desc, K_TILES, STAGES, CONSUMERS)
    gl.warp_specialize([
        (resident_consumer, (b_ptr, y_desc, x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, turn, buffer_turn,
                             M, N, HSPLIT, 0, CONSUMERS, ACT, HAS_BIAS, BIAS_FIRST, K_TILES, STAGES)),
        (resident_consumer, (b_ptr, y_desc, x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, turn, buffer_turn,
                             M, N, HSPLIT, 1, CONSUMERS, ACT, HAS_BIAS, BIAS_FIRST, K_TILES, STAGES)),
        (resident_consumer, (b_ptr, y_desc, x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, turn, buffer_turn,
                             M, N, HSPLIT, 2, CONSUMERS, ACT, HAS_BIAS, BIAS_FIRST, K_TILES, STAGES)),
        (resident_loader, (x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N, HSPLIT, K_TILES,
                           STAGES)),
    ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def dgrad_pingpong_kernel(
    a_desc, w_kn_desc, tail_a_desc, tail_w_kn_desc, dx_desc,
    M, N, K, R,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: DGRAD_PINGPONG_CONFIG
):
    """A backward's input gradient ``dx [M, N] = a @ W + tail_a @ tail_W`` (a ``[M, K]``,
    W ``[K, N]`` and tail_W ``[R, N]``: layers' weights as stored, read as ``[K, N]`` tiles;
    tail_a ``[M, R]``) as one ping-pong kernel (pingpong.py, ``W_KN``) whose last
    ``cdiv(R, BLOCK_K)`` K steps read tail_a and tail_W (rows of tail_W past R read as zeros;
    R = 0: no tail). One accumulator, so dx is rounded once, where cuBLAS takes two products
    (mm, then addmm over the rounded first). Serves LoRA's dx = dpre @ W + d_xa @ A (the rank-r
    term as a few tail steps: ops/lora.py) and SwiGLU's dx = d_up @ W_up + d_gate @ W_gate
    (ops/swiglu.py). 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(a_desc, w_kn_desc, dx_desc, STAGES, False, 1,
                                                                COOPERATIVE)
    # identity, no bias, nothing but dx stored: the bias and second-output arguments are unused
    gl.warp_specialize([
        (pingpong_consumer, (dx_desc, dx_desc, dx_desc, dx_desc, dx_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 0, "identity", False, False, False, True, GROUP_M,
                             STAGES, COOPERATIVE, R)),
        (pingpong_consumer, (dx_desc, dx_desc, dx_desc, dx_desc, dx_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 1, "identity", False, False, False, True, GROUP_M,
                             STAGES, COOPERATIVE, R)),
        (pingpong_loader, (a_desc, w_kn_desc, w_kn_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M,
                           STAGES, False, True, tail_a_desc, tail_w_kn_desc, R)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def linear_act_dpre_recompute_pingpong_kernel(
    x_desc, w_desc, b_ptr, g_desc, dpre_desc, db_partial_ptr,
    M, N, K,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_DB: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LINEAR_DPRE_RECOMPUTE_CONFIG
):
    """The backward's dpre = g * act'(x @ W.T + b) when only x was saved (``save_preact=False``
    with an activation whose derivative needs pre), as a ping-pong kernel (pingpong.py): the
    forward's main loop recomputes pre on the tile, g ``[M, N]`` is read into the consumer's
    buffer before it and dpre written over it, so the epilogue's traffic (g in, dpre out)
    overlaps the other consumer's main loop. Replaces the recompute forward (which wrote pre)
    and ``linear_act_dpre_kernel`` (which read it back). db partials as that kernel's, over
    row blocks of the config's BLOCK_M. 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, dpre_desc, STAGES, False, 1, False)
    g_ready = consumer_barriers()
    gl.warp_specialize([
        (pingpong_dpre_consumer, (w_desc, b_ptr, g_desc, dpre_desc, db_partial_ptr, a_bufs, b_bufs, c_bufs,
                                  ready, empty, turn, g_ready, M, N, K, 0, ACT, HAS_BIAS, STORE_DB, GROUP_M, STAGES)),
        (pingpong_dpre_consumer, (w_desc, b_ptr, g_desc, dpre_desc, db_partial_ptr, a_bufs, b_bufs, c_bufs,
                                  ready, empty, turn, g_ready, M, N, K, 1, ACT, HAS_BIAS, STORE_DB, GROUP_M, STAGES)),
        (pingpong_loader, (x_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, False, x_desc, w_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@triton.jit
def _dpre_tile(g, a_ptrs, mask, ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """g * act'(a) for a loaded g tile; ``a`` (pre, or y if FROM_OUTPUT) is read unless act is identity."""
    if ACT == "identity":
        dpre = g.to(ACC_DTYPE)
    else:
        a = tl.load(a_ptrs, mask=mask, other=0.0)
        dpre = g.to(ACC_DTYPE) * activation_grad(a.to(ACC_DTYPE), ACT, FROM_OUTPUT)
    return dpre


@triton.jit
def linear_act_dpre_kernel(
    g_ptr, a_ptr, dpre_ptr, db_partial_ptr,
    M, N, M_KEY,
    stride_gm, stride_gn, stride_am, stride_an, stride_dpm,
    ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_DPRE: tl.constexpr,
    IN_PLACE: tl.constexpr,
    BLOCK_M: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """dpre[M, N] = g * act'(a) (if STORE_DPRE) and db_partial[tile_m, :] = its column sums (if HAS_BIAS).

    A stream, each byte read or written once: a program owns BLOCK_M rows x BLOCK_N columns
    and walks them SUB_M rows at a time, so that few registers are live and many programs
    share an SM (as ``glu_bwd_stream_kernel``). ``db_partial`` is ``[cdiv(M, BLOCK_M), N]`` in
    the accumulator dtype, summed in a fixed order (deterministic); rows past M read g = 0.
    IN_PLACE: dpre may be ``a`` itself (the saved pre-activation, dead once read): each element
    is written where it was read, with a barrier between a step's loads and its stores.
    """
    tile_m, cols, mask_cols = stream_row_block(N, BLOCK_N)
    db_rows = tl.zeros([SUB_M, BLOCK_N], dtype=ACC_DTYPE)  # reduced across rows once, at the end
    for sub_start in tl.range(0, BLOCK_M, SUB_M):
        rows = tile_m.to(tl.int64) * BLOCK_M + sub_start + tl.arange(0, SUB_M)
        mask = (rows < M)[:, None] & mask_cols[None, :]
        g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn, mask=mask, other=0.0,
                    eviction_policy="evict_first")
        dpre = _dpre_tile(g, a_ptr + rows[:, None] * stride_am + cols[None, :] * stride_an, mask,
                          ACT, FROM_OUTPUT, ACC_DTYPE)
        if IN_PLACE:
            tl.debug_barrier()
        if STORE_DPRE:
            tl.store(dpre_ptr + rows[:, None] * stride_dpm + cols[None, :], dpre.to(dpre_ptr.dtype.element_ty),
                     mask=mask)
        if HAS_BIAS:
            db_rows += dpre
    if HAS_BIAS:
        tl.store(db_partial_ptr + tile_m.to(tl.int64) * N + cols, tl.sum(db_rows, axis=0), mask=mask_cols)


@triton.jit
def _dpre_side_outputs(dpre, dpre_ptrs, mask, db_partial_ptr, tile_m, offs_n, mask_n, N,
                       HAS_BIAS: tl.constexpr, STORE_DPRE: tl.constexpr):
    """Write the dpre tile and its column sums (the db partials of row block ``tile_m``)."""
    if STORE_DPRE:
        tl.store(dpre_ptrs, dpre.to(dpre_ptrs.dtype.element_ty), mask=mask)
    if HAS_BIAS:
        tl.store(db_partial_ptr + tile_m.to(tl.int64) * N + offs_n, tl.sum(dpre, axis=0), mask=mask_n)


@triton.jit
def linear_act_dgrad_kernel(
    g_ptr, a_ptr, w_ptr, dx_ptr, dpre_ptr, db_partial_ptr,
    M, N, K, M_KEY,
    stride_gm, stride_gn, stride_am, stride_an, stride_wn, stride_wk, stride_dxm, stride_dpm,
    ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_DPRE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """dx[M, K] = (g * act'(a)) @ W, with ``a`` = pre (or y if FROM_OUTPUT); first-K-tile side outputs.

    The output tile is (rows, K columns); the loop runs over N, the reduction dimension.
    ``db_partial`` is ``[cdiv(M, BLOCK_M), N]`` in the accumulator dtype. Rows past M and
    columns past N load g = 0, so they add nothing to dx or the partials.
    """
    tile_m, tile_k = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(K, BLOCK_K), GROUP_M)
    rows = tile_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_k = tile_k.to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_rows = rows < M
    mask_k = cols_k < K
    first_k_tile = tile_k == 0
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=ACC_DTYPE)
    for n_start in range(0, N, BLOCK_N):
        offs_n = n_start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        mask = mask_rows[:, None] & mask_n[None, :]
        g = tl.load(g_ptr + rows[:, None] * stride_gm + offs_n[None, :] * stride_gn, mask=mask, other=0.0)
        dpre = _dpre_tile(g, a_ptr + rows[:, None] * stride_am + offs_n[None, :] * stride_an, mask,
                          ACT, FROM_OUTPUT, ACC_DTYPE)
        if first_k_tile:
            _dpre_side_outputs(dpre, dpre_ptr + rows[:, None] * stride_dpm + offs_n[None, :], mask,
                               db_partial_ptr, tile_m, offs_n, mask_n, N, HAS_BIAS, STORE_DPRE)
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + cols_k[None, :] * stride_wk,
                    mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        if UPCAST:
            lhs = dpre.to(dx_ptr.dtype.element_ty).to(tl.float32)
            w = w.to(tl.float32)
        else:  # the tensor cores take the operands in the data's dtype, as cuBLAS would
            lhs = dpre.to(w.dtype)
        acc = tl.dot(lhs, w, acc, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    mask_dx = mask_rows[:, None] & mask_k[None, :]
    tl.store(dx_ptr + rows[:, None] * stride_dxm + cols_k[None, :], acc.to(dx_ptr.dtype.element_ty), mask=mask_dx)


@triton.jit
def linear_act_dgrad_tma_kernel(
    g_desc, a_desc, w_desc, dx_desc, dpre_desc, db_partial_ptr,
    M, N, K, M_KEY,
    ACT: tl.constexpr, FROM_OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_DPRE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr,  # configs.py: _configs
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``linear_act_dgrad_kernel`` on descriptors, persistent over PROGRAMS_PER_SM programs per SM.

    W's [BLOCK_N, BLOCK_K] tiles of the row-major [N, K] weight are the dot's right operand as
    loaded. Tiles past M, N or K read zeros and their stores are clipped by the copy engine.
    """
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_k = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles_m * num_tiles_k, tl.num_programs(0), flatten=FLATTEN):
        tile_m, row_start, k_start = persistent_tile(tile_id, num_tiles_m, num_tiles_k, BLOCK_M, BLOCK_K, GROUP_M)
        first_k_tile = k_start == 0
        acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=ACC_DTYPE)
        for n_start in range(0, N, BLOCK_N):
            g = g_desc.load([row_start, n_start]).to(ACC_DTYPE)
            if ACT == "identity":
                dpre = g
            else:
                dpre = g * activation_grad(a_desc.load([row_start, n_start]).to(ACC_DTYPE), ACT, FROM_OUTPUT)
            lhs = dpre.to(dx_desc.dtype)
            if first_k_tile:
                if STORE_DPRE:
                    dpre_desc.store([row_start, n_start], lhs)
                if HAS_BIAS:
                    offs_n = n_start + tl.arange(0, BLOCK_N)
                    tl.store(db_partial_ptr + tile_m.to(tl.int64) * N + offs_n, tl.sum(dpre, axis=0), mask=offs_n < N)
            w = w_desc.load([n_start, k_start])
            if UPCAST:
                lhs = lhs.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(lhs, w, acc, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        dx_desc.store([row_start, k_start], acc.to(dx_desc.dtype))
