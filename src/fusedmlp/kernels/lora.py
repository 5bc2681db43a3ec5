"""Fused LoRA linear forward: the base GEMM and the low-rank path in one kernel.

With ``x [M, K]``, the frozen base weight ``W [N, K]``, optional bias ``b [N]``, the adapter
``A [r, K]``, ``B [N, r]`` and the scale ``s = alpha / r``:

    xs  = s * (x @ A.T)                                                         [M, r]
    pre = x @ W.T + b + xs @ B.T,       y = act(pre)                            [M, N]

``LORA_IN_LOOP``: the rank-r product is accumulated by the shared main loop next to the base
accumulator, from the same x tile in shared memory (``PAIRED`` with a ``[BLOCK_M, R_PAD]``
second accumulator): x is read once for both W and A. Every column tile of a row block
recomputes that narrow product (``R_PAD / BLOCK_N`` more tensor-core work, 6% at r <= 16 with
256-wide tiles); the programs of column tile 0 write xs for the backward (``dB = dpre.T @ xs``).
Otherwise the host passes xs (computed by cuBLAS: with LoRA dropout, where A multiplies a
dropped-out copy of x, and for large base GEMMs, where this kernel with the narrow second
product in its loop measured slower than the extra read of x; ops/lora.py gives the figures)
and the kernel reads its ``[BLOCK_M, R_PAD]`` tile in the epilogue.

Epilogue: xs is rounded to the data dtype (to nearest, as PyTorch rounds ``x @ A.T``) and
its product with the ``[R_PAD, BLOCK_N]`` tile of ``B.T`` accumulates straight into the base
accumulator on the tensor cores; then bias and activation, as in ``linear_act``. ``pre`` is written only
when the backward keeps it.

The scale arrives as two fp32 numbers, ``s = SCALE_HI + SCALE_LO``, so that fp64 inputs keep
full precision (Triton passes Python floats as fp32).

On compute capability 9.0, with xs given and ranks whose rows TMA can read (``r`` a multiple of
8 in 16 bits), ``lora_fwd_pingpong_kernel`` runs the forward as linear_act's ping-pong kernel
(pingpong.py) with ``pre = [x | xs] @ [W | B].T + b``: the rank-r product is one more K step of
the main loop (``cdiv(r, BLOCK_K)``, the columns past r read as zeros), after x @ W.T.

Backward (ops/lora.py), with dpre = dL/dpre and ``d_xa = s * dpre @ B`` [M, r]:
``lora_dgrad_pingpong_kernel`` forms ``dx = dpre @ W + d_xa @ A`` in one main loop on Hopper
(W read as ``[K, N]`` tiles, d_xa and A as its last K steps), and ``lora_merge_kernel`` forms
the merged weight ``W + s * B @ A`` that dx is otherwise taken against, in one pass over W.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .activations import activation
from .gemm import persistent_tile, round_operand, tile_indices, xwT_mainloop, xwT_mainloop_tma
from .pingpong import pingpong_consumer, pingpong_loader, pingpong_setup


@triton.jit
def _lora_epilogue(
    acc, acc_xa, xs_ptr, stride_xsm, b_ptr, lora_b_ptr, stride_lbn, stride_lbr,
    rows, mask_rows, cols, mask_cols, R, SCALE_HI, SCALE_LO, first_col_tile,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, LORA_IN_LOOP: tl.constexpr, R_PAD: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """(pre, act(pre)) of one [BLOCK_M, BLOCK_N] tile; writes the xs tile from column tile 0."""
    offs_r = tl.arange(0, R_PAD)
    mask_r = offs_r < R
    xs_ptrs = xs_ptr + rows[:, None] * stride_xsm + offs_r[None, :]
    if LORA_IN_LOOP:
        xs = round_operand(acc_xa * SCALE_HI + acc_xa * SCALE_LO, xs_ptr.dtype.element_ty, UPCAST)
        if first_col_tile:
            tl.store(xs_ptrs, xs, mask=mask_rows[:, None] & mask_r[None, :])
    else:
        xs = tl.load(xs_ptrs, mask=mask_rows[:, None] & mask_r[None, :], other=0.0)
    # B.T tile [R_PAD, BLOCK_N]; ranks past r read 0
    lora_bt = tl.load(lora_b_ptr + cols[None, :] * stride_lbn + offs_r[:, None] * stride_lbr,
                      mask=mask_r[:, None] & mask_cols[None, :], other=0.0)
    if UPCAST:
        xs = xs.to(tl.float32)
        lora_bt = lora_bt.to(tl.float32)
    acc = tl.dot(xs, lora_bt, acc, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=mask_cols, other=0.0).to(ACC_DTYPE)[None, :]
    return acc, activation(acc, ACT)


@triton.jit
def lora_fwd_kernel(
    x_ptr, w_ptr, b_ptr, lora_a_ptr, lora_b_ptr, xs_ptr, y_ptr, pre_ptr,
    M, N, K, R, M_KEY, SCALE_HI, SCALE_LO,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_lan, stride_lak, stride_lbn, stride_lbr,
    stride_xsm, stride_ym, stride_pm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr, LORA_IN_LOOP: tl.constexpr,
    R_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """y[M, N] = act(x @ W.T + b + xs @ B.T), pre if STORE_PRE; xs [M, r] written (LORA_IN_LOOP) or read.

    Pointer form: any strides of x, W, A, B; xs, y and pre have unit column stride.
    """
    rows, cols, mask_rows, mask_cols, _ = tile_indices(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rank_rows = tl.arange(0, R_PAD).to(tl.int64)
    acc, acc_xa = xwT_mainloop(
        x_ptr, w_ptr, lora_a_ptr, rows, mask_rows, cols, mask_cols, rank_rows, rank_rows < R,
        K, stride_xm, stride_xk, stride_wn, stride_wk, stride_lan, stride_lak,
        BLOCK_M, BLOCK_N, R_PAD, BLOCK_K, LORA_IN_LOOP, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    pre, y = _lora_epilogue(
        acc, acc_xa, xs_ptr, stride_xsm, b_ptr, lora_b_ptr, stride_lbn, stride_lbr,
        rows, mask_rows, cols, mask_cols, R, SCALE_HI, SCALE_LO, tl.min(cols, axis=0) == 0,  # column tile 0
        ACT, HAS_BIAS, LORA_IN_LOOP, R_PAD, ACC_DTYPE, DOT_PRECISION, UPCAST,
    )
    mask = mask_rows[:, None] & mask_cols[None, :]
    if STORE_PRE:
        tl.store(pre_ptr + rows[:, None] * stride_pm + cols[None, :], pre.to(pre_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def lora_fwd_tma_kernel(
    x_desc, w_desc, lora_a_desc, b_ptr, lora_b_ptr, xs_ptr, y_desc, pre_desc,
    M, N, K, R, M_KEY, SCALE_HI, SCALE_LO,
    stride_lbn, stride_lbr, stride_xsm,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, STORE_PRE: tl.constexpr, LORA_IN_LOOP: tl.constexpr,
    R_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, PROGRAMS_PER_SM: tl.constexpr,  # configs.py: _configs
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``lora_fwd_kernel`` on tensor descriptors, persistent over PROGRAMS_PER_SM programs per SM.

    ``lora_a_desc`` has ``[R_PAD, BLOCK_K]`` tiles: rows past r read zeros. B and xs stay
    pointers: their ``r``-wide rows need not meet TMA's 16-byte stride alignment.
    """
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles_m * num_tiles_n, tl.num_programs(0), flatten=FLATTEN):
        _, row_start, col_start = persistent_tile(tile_id, num_tiles_m, num_tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc, acc_xa = xwT_mainloop_tma(
            x_desc, w_desc, lora_a_desc, row_start, col_start, 0, K,
            BLOCK_M, BLOCK_N, R_PAD, BLOCK_K, LORA_IN_LOOP, ACC_DTYPE, DOT_PRECISION, UPCAST, False,
        )
        rows = row_start.to(tl.int64) + tl.arange(0, BLOCK_M)
        cols = col_start + tl.arange(0, BLOCK_N)
        pre, y = _lora_epilogue(
            acc, acc_xa, xs_ptr, stride_xsm, b_ptr, lora_b_ptr, stride_lbn, stride_lbr,
            rows, rows < M, cols, cols < N, R, SCALE_HI, SCALE_LO, col_start == 0,
            ACT, HAS_BIAS, LORA_IN_LOOP, R_PAD, ACC_DTYPE, DOT_PRECISION, UPCAST,
        )
        if STORE_PRE:
            pre_desc.store([row_start, col_start], pre.to(pre_desc.dtype))
        y_desc.store([row_start, col_start], y.to(y_desc.dtype))


@gluon.jit
def lora_fwd_pingpong_kernel(
    x_desc, w_desc, xs_desc, lora_b_desc, b_ptr, y_desc, pre_desc,
    M, N, K, R,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LINEAR_PINGPONG_CONFIG
):
    """``lora_fwd_tma_kernel`` with xs given (``[M, R]``, ``s`` already applied) as a ping-pong
    kernel: ``pre = x @ W.T + xs @ B.T + b`` in one main loop whose last K steps read xs and
    ``B [N, R]`` (pingpong.py's tail steps), then linear_act's epilogue; 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, COOPERATIVE)
    gl.warp_specialize([
        (pingpong_consumer, (b_ptr, b_ptr, y_desc, pre_desc, pre_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 0, ACT, HAS_BIAS, STORE_PRE, False, False, GROUP_M, STAGES,
                             COOPERATIVE, R)),
        (pingpong_consumer, (b_ptr, b_ptr, y_desc, pre_desc, pre_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 1, ACT, HAS_BIAS, STORE_PRE, False, False, GROUP_M, STAGES,
                             COOPERATIVE, R)),
        (pingpong_loader, (x_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, False, xs_desc, lora_b_desc, R)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def lora_dgrad_pingpong_kernel(
    dpre_in_desc, w_kn_desc, d_xa_desc, lora_a_desc, dx_desc,
    M, N, K, R,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LORA_DGRAD_PINGPONG_CONFIG
):
    """The backward's ``dx [M, N] = dpre @ W + d_xa @ A`` (dpre ``[M, K]``, W ``[K, N]`` the
    frozen weight as stored, d_xa ``[M, R]`` with s applied, A ``[R, N]``) as a ping-pong
    kernel whose last K steps read d_xa and A (pingpong.py's tail with ``W_KN``; rows of A past
    R read as zeros): the low-rank term costs ``cdiv(R, BLOCK_K)`` K steps, no ``[M, N]``
    term in memory and no merged weight. 16-bit data."""
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(dpre_in_desc, w_kn_desc, dx_desc, STAGES, False, 1,
                                                                COOPERATIVE)
    # identity, no bias, nothing but dx stored: the bias and second-output arguments are unused
    gl.warp_specialize([
        (pingpong_consumer, (dx_desc, dx_desc, dx_desc, dx_desc, dx_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 0, "identity", False, False, False, True, GROUP_M,
                             STAGES, COOPERATIVE, R)),
        (pingpong_consumer, (dx_desc, dx_desc, dx_desc, dx_desc, dx_desc, a_bufs, b_bufs, c_bufs,
                             ready, empty, turn, M, N, K, 1, "identity", False, False, False, True, GROUP_M,
                             STAGES, COOPERATIVE, R)),
        (pingpong_loader, (dpre_in_desc, w_kn_desc, w_kn_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M,
                           STAGES, False, True, d_xa_desc, lora_a_desc, R)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@triton.jit
def lora_merge_kernel(
    w_ptr, lora_b_ptr, lora_a_ptr, out_ptr, N, K, R, SCALE_HI, SCALE_LO,
    stride_wn, stride_wk, stride_lbn, stride_lbr, stride_lar, stride_lak, stride_on,
    RANK_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """``out [N, K] = W + s * B @ A`` rounded once to W's dtype (as ``torch.addmm(W, B, A,
    alpha=s)``), one ``[BLOCK_N, BLOCK_K]`` tile a program: W read and out written once, the
    rank-r product on the tile in ``RANK_BLOCK``-wide slices of the rank. A memory-bound pass;
    addmm copies W into its output first, then reads and writes it again (twice the time)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_rows, mask_cols = rows < N, cols < K
    delta = tl.zeros((BLOCK_N, BLOCK_K), dtype=ACC_DTYPE)
    for rank_start in range(0, R, RANK_BLOCK):
        ranks = rank_start + tl.arange(0, RANK_BLOCK)
        mask_ranks = ranks < R
        lora_b = tl.load(lora_b_ptr + rows[:, None] * stride_lbn + ranks[None, :] * stride_lbr,
                         mask=mask_rows[:, None] & mask_ranks[None, :], other=0.0)
        lora_a = tl.load(lora_a_ptr + ranks[:, None] * stride_lar + cols[None, :] * stride_lak,
                         mask=mask_ranks[:, None] & mask_cols[None, :], other=0.0)
        if UPCAST:
            lora_b = lora_b.to(tl.float32)
            lora_a = lora_a.to(tl.float32)
        delta = tl.dot(lora_b, lora_a, delta, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    mask = mask_rows[:, None] & mask_cols[None, :]
    w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :] * stride_wk, mask=mask, other=0.0)
    merged = w.to(ACC_DTYPE) + (delta * SCALE_HI + delta * SCALE_LO)
    tl.store(out_ptr + rows[:, None] * stride_on + cols[None, :],
             round_operand(merged, out_ptr.dtype.element_ty, UPCAST), mask=mask)
