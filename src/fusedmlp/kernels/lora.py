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

On compute capability 9.0 ``lora_fwd_handoff_kernel`` forms xs once per row block on the
programs that hold a tile less and hands it to the row block's tiles through memory (large
GEMMs; its docstring), and ``lora_fwd_onchip_kernel`` forms it once per unit of a row block's
column tiles (its docstring), for ranks up to 16. With xs given and ranks whose rows TMA can read (``r`` a multiple of
8 in 16 bits), ``lora_fwd_pingpong_kernel`` runs the forward as linear_act's ping-pong kernel
(pingpong.py) with ``pre = [x | xs] @ [W | B].T + b``: the rank-r product is one more K step of
the main loop (``cdiv(r, BLOCK_K)``, the columns past r read as zeros), after x @ W.T.

Backward (ops/lora.py), with dpre = dL/dpre and ``d_xa = s * dpre @ B`` [M, r]:
linear_act.py's ``dgrad_pingpong_kernel`` forms ``dx = dpre @ W + d_xa @ A`` in one main loop
on Hopper (W read as ``[K, N]`` tiles, d_xa and A as its last K steps); where B trains,
``lora_dgrad_db_kernel`` is that kernel forming ``dB = dpre.T @ xs`` too, from the same dpre
tiles; ``lora_merge_kernel`` forms the merged weight ``W + s * B @ A`` that dx is otherwise
taken against, in one pass over W.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .activations import activation
from .gemm import grouped_tile, persistent_tile, round_operand, tile_indices, xwT_mainloop, xwT_mainloop_tma
from .pingpong import (
    _tma_load,
    _tma_store,
    accumulator_layout,
    free_stage,
    load_tile_steps,
    pingpong_consumer,
    pingpong_loader,
    pingpong_mainloop,
    pingpong_mainloop_with_rank,
    pingpong_setup,
    program_tiles,
    ring_mma_steps,
    tile_bias,
    tile_start,
    tma_store_tile,
)

# A barrier of the calling partition's warps: Triton 3.6 names it thread_barrier, later versions barrier.
_partition_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


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
def rank_unit(unit, n_tiles, segments, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """(first row, first column, tile count) of a unit of ``lora_fwd_onchip_kernel``: unit u
    is segment ``u % segments`` of row block ``u // segments``, the row block's column tiles
    cut into ``segments`` runs of ``cdiv(n_tiles, segments)`` (the host picks ``segments`` so
    that none is empty)."""
    per_unit = gl.cdiv(n_tiles, segments)
    first_tile = (unit % segments) * per_unit
    return (unit // segments) * BLOCK_M, first_tile * BLOCK_N, gl.minimum(n_tiles - first_tile, per_unit)


@gluon.jit
def onchip_loader(x_desc, w_desc, rank_a_desc, a_bufs, b_bufs, rank_bufs, ready, empty, M, N, K,
                  segments, STAGES: gl.constexpr):
    """Loader partition of ``lora_fwd_onchip_kernel``: the ring's x and W tiles in the
    consumers' order (the program's units, each unit's tiles in column order), and on the
    first tile of each unit A's ``[R_PAD, BLOCK_K]`` tile beside them (rows past r read
    zeros)."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    stage_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    k_tiles = gl.cdiv(K, BLOCK_K)
    n_tiles = gl.cdiv(N, BLOCK_N)
    count = 0
    for unit in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * segments, gl.num_programs(0)):
        row_start, first_col, unit_tiles = rank_unit(unit, n_tiles, segments, BLOCK_M, BLOCK_N)
        for t in range(unit_tiles):
            col_start = first_col + t * BLOCK_N
            for kk in range(k_tiles):
                stage, bar = free_stage(ready, empty, count, STAGES)
                if t == 0:
                    mbarrier.expect(bar, stage_bytes + rank_a_desc.block_type.nbytes)
                    _tma_load(rank_a_desc, [0, kk * BLOCK_K], bar, rank_bufs.index(stage))
                else:
                    mbarrier.expect(bar, stage_bytes)
                _tma_load(x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
                _tma_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage))
                count += 1


@gluon.jit
def onchip_consumer(
    b_ptr, y_desc, pre_desc, xs_out_desc, rank_b_desc, a_bufs, b_bufs, rank_bufs, c_bufs, xs_bufs, rank_b_bufs,
    ready, empty, turn, xs_ready, rank_b_ready, M, N, K, segments, SCALE_HI, SCALE_LO,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of ``lora_fwd_onchip_kernel``: every second tile of the
    program. A unit's first tile (whichever consumer has it) runs the main loop with A's tiles
    beside W's, rounds ``xs = s * x @ A.T`` into the unit's shared buffer (two, alternating by
    unit) and signals ``xs_ready``; it also writes xs out where its unit starts at column 0.
    Every tile of the unit waits for that signal after its own main loop, adds ``xs @ B.T``
    (one MMA, B's tile copied in during the main loop), then bias, activation and stores as
    ``pingpong_consumer``'s epilogue.

    The buffer of unit j is written again by unit j + 2's first tile, after that tile's main
    loop, and every tile of unit j has finished its epilogue by then: main loops run in tile
    order (the turns), and a consumer finishes a tile's epilogue before its next main loop."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    rank_layout: gl.constexpr = accumulator_layout(rank_b_desc.block_type.shape[1])
    c_buf = c_bufs.index(CONSUMER)
    rank_b_buf = rank_b_bufs.index(CONSUMER)
    rank_b_bar = rank_b_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    n_tiles = gl.cdiv(N, BLOCK_N)
    local_index = 0  # the program's tile count so far (both consumers count every tile)
    unit_index = 0
    mine = 0  # this consumer's tiles so far
    for unit in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * segments, gl.num_programs(0)):
        row_start, first_col, unit_tiles = rank_unit(unit, n_tiles, segments, BLOCK_M, BLOCK_N)
        xs_buf = xs_bufs.index(unit_index % 2)
        xs_bar = xs_ready.index(unit_index % 2)
        for t in range(unit_tiles):
            if local_index % 2 == CONSUMER:
                col_start = first_col + t * BLOCK_N
                # the previous tile's epilogue MMA has read this buffer (it waited for its result)
                mbarrier.expect(rank_b_bar, rank_b_desc.block_type.nbytes)
                _tma_load(rank_b_desc, [col_start, 0], rank_b_bar, rank_b_buf)
                if HAS_BIAS:
                    bias = tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
                if t == 0:
                    acc, acc_rank = pingpong_mainloop_with_rank(a_bufs, b_bufs, ready, empty, turn, local_index,
                                                                k_tiles, CONSUMER, STAGES, False, acc_layout,
                                                                False, True, rank_bufs, rank_layout)
                    xs = (acc_rank * SCALE_HI + acc_rank * SCALE_LO).to(xs_out_desc.dtype)
                    # an xs store out of this buffer two units ago is done: this consumer's by this wait,
                    # the other's by the output store that followed it in the same epilogue
                    tma.store_wait(0)
                    xs_buf.store(xs)
                    fence_async_shared()
                    _partition_barrier()  # every thread's part of xs is in the buffer
                    mbarrier.arrive(xs_bar, count=1)
                    if first_col == 0:
                        _tma_store(xs_out_desc, [row_start, 0], xs_buf)
                else:
                    acc = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, local_index, k_tiles, CONSUMER,
                                            STAGES, False, acc_layout, False)
                mbarrier.wait(xs_bar, (unit_index // 2) & 1)
                mbarrier.wait(rank_b_bar, mine & 1)
                acc = warpgroup_mma(xs_buf, rank_b_buf.permute((1, 0)), acc)
                if HAS_BIAS:
                    acc = acc + bias
                if STORE_PRE:
                    tma_store_tile(pre_desc, c_buf, acc, row_start, col_start)
                tma_store_tile(y_desc, c_buf, activation(acc, ACT), row_start, col_start)
                mine += 1
            local_index += 1
        unit_index += 1
    tma.store_wait(0)


@gluon.jit
def lora_fwd_onchip_kernel(
    x_desc, w_desc, rank_a_desc, rank_b_desc, b_ptr, xs_out_desc, y_desc, pre_desc,
    M, N, K, segments, SCALE_HI, SCALE_LO,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LORA_ONCHIP_CONFIG
):
    """The LoRA forward with x read once for W and A, as a ping-pong kernel: ``pre = x @ W.T +
    xs @ B.T + b``, ``y = act(pre)``, and ``xs = s * x @ A.T`` [M, r] written for the backward.

    Why: the rank-r product inside every tile's main loop (the Triton kernel's
    ``LORA_IN_LOOP``) costs each tile a second MMA over its x tiles, about a quarter of a tile
    at r = 16 (benchmarks/NOTES.md); computed first by cuBLAS it costs a read of x. Here a
    program owns units of whole column runs of a row block (``rank_unit``; ``segments`` runs
    per row block, from the host) instead of ``grouped_tile``'s scattered tiles, so the product
    is formed once per unit, by the unit's first tile, and handed to the unit's other tiles
    in shared memory. ``A [r, K]`` arrives as ``rank_a_desc`` tiles ``[R_PAD, BLOCK_K]``, ``B
    [N, r]`` as ``rank_b_desc`` tiles ``[BLOCK_N, R_PAD]``, xs leaves through ``xs_out_desc``
    (``[BLOCK_M, R_PAD]`` tiles); R_PAD is a power of two >= 16, rows and columns past r read
    as zeros and are not written. 16-bit data, r a multiple of 8 (TMA's 16-byte rows)."""
    # GROUP_M and COOPERATIVE come with the linear forward's config and are not used: the units
    # replace the grouped tile order, and the tiles alternate between the consumers
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, False)
    rank_bufs = gl.allocate_shared_memory(rank_a_desc.dtype, [STAGES] + rank_a_desc.block_type.shape,
                                          rank_a_desc.layout)
    xs_bufs = gl.allocate_shared_memory(xs_out_desc.dtype, [2] + xs_out_desc.block_type.shape, xs_out_desc.layout)
    rank_b_bufs = gl.allocate_shared_memory(rank_b_desc.dtype, [2] + rank_b_desc.block_type.shape,
                                            rank_b_desc.layout)
    xs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    rank_b_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(xs_ready.index(i), count=1)
        mbarrier.init(rank_b_ready.index(i), count=1)
    gl.warp_specialize([
        (onchip_consumer, (b_ptr, y_desc, pre_desc, xs_out_desc, rank_b_desc, a_bufs, b_bufs, rank_bufs, c_bufs,
                           xs_bufs, rank_b_bufs, ready, empty, turn, xs_ready, rank_b_ready, M, N, K, segments,
                           SCALE_HI, SCALE_LO, 0, ACT, HAS_BIAS, STORE_PRE, STAGES)),
        (onchip_consumer, (b_ptr, y_desc, pre_desc, xs_out_desc, rank_b_desc, a_bufs, b_bufs, rank_bufs, c_bufs,
                           xs_bufs, rank_b_bufs, ready, empty, turn, xs_ready, rank_b_ready, M, N, K, segments,
                           SCALE_HI, SCALE_LO, 1, ACT, HAS_BIAS, STORE_PRE, STAGES)),
        (onchip_loader, (x_desc, w_desc, rank_a_desc, a_bufs, b_bufs, rank_bufs, ready, empty, M, N, K, segments,
                         STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def handoff_work(M, N, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """This program's work in ``lora_fwd_handoff_kernel``: (xs items, first tile, tiles, spare).

    Tiles ``first_tile + i * P`` (P programs, first_tile = P - 1 - program id): with T tiles
    and T % P = rem, the programs with the highest ids hold one tile more than the other
    ``spare = P - rem`` (all P when rem = 0). The spare programs, the lowest ids, hold the xs
    items: program p forms xs for row blocks ``p, p + spare, p + 2 * spare, ...`` (``items`` of
    them), before its tiles."""
    num_programs = gl.num_programs(0)
    pid = gl.program_id(0)
    row_blocks = gl.cdiv(M, TILE_M)
    num_tiles = row_blocks * gl.cdiv(N, BLOCK_N)
    spare = num_programs - num_tiles % num_programs
    first_tile = num_programs - 1 - pid
    tiles = gl.cdiv(num_tiles - first_tile, num_programs)
    items = 0
    if pid < spare:
        items = gl.maximum(gl.cdiv(row_blocks - pid, spare), 0)
    return items, first_tile, tiles, spare


@gluon.jit
def _flag_per_thread(flags_ptr, index, WARPS: gl.constexpr):
    """``flags_ptr + index`` once per thread of the calling partition (WARPS warps)."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    return flags_ptr + index + gl.zeros([32 * WARPS], gl.int32, layout)


@gluon.jit
def publish_xs(flags_ptr, index):
    """Each thread of the consumer warpgroup adds 1 to flag ``index`` with release semantics
    (GPU scope) after its own stores of xs: whoever then reads the flag at 256 (both consumers'
    128 threads) with acquire semantics sees every element of the row block's xs."""
    gl.inline_asm_elementwise("red.release.gpu.global.add.s32 [$1], 1;\n\tmov.u32 $0, 0;", "=r,l",
                              [_flag_per_thread(flags_ptr, index, 4)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def wait_for_xs(flags_ptr, index):
    """The loader warp spins on flag ``index`` (acquire, GPU scope) until both consumers of the
    row block's xs item have published (256 threads), then fences the generic proxy's view of
    global memory against the async proxy's, whose TMA copies read xs next."""
    gl.inline_asm_elementwise(
        "{\n\t.reg .pred ready;\n\tspin:\n\tld.acquire.gpu.global.s32 $0, [$1];\n\t"
        "setp.ge.s32 ready, $0, 256;\n\t@!ready bra spin;\n\tfence.proxy.async.global;\n\t}",
        "=r,l", [_flag_per_thread(flags_ptr, index, 1)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def item_stage(a_bufs, b_bufs, stage, R_PAD: gl.constexpr):
    """A ring stage as an xs item uses it, two K steps at once: (x's tile of the first step,
    of the second, A's tile of the first, of the second). The first x tile fills the x
    buffer; the weight buffer (BLOCK_N >= TILE_M + 128 rows) holds A's tiles in its rows
    0 and 64 and the second x tile in its last TILE_M rows. With one K step a stage (18 KiB)
    the items waited on the copies' latency: 434.0 against 423.8 us for the kernel at 8192 x
    4096 -> 4096, r 16 (H100, benchmarks/NOTES.md "LoRA's forward with xs items on the spare
    programs")."""
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    gl.static_assert(BLOCK_N >= TILE_M + 128 and R_PAD <= 64, "an item's stage holds 2 x tiles and 2 A tiles")
    weights = b_bufs.index(stage)
    return a_bufs.index(stage), weights.slice(BLOCK_N - TILE_M, TILE_M), weights.slice(0, R_PAD), weights.slice(64, R_PAD)


@gluon.jit
def handoff_loader(x_desc, w_desc, rank_a_desc, xs_desc, lora_b_desc, a_bufs, b_bufs, ready, empty,
                   flags_ptr, M, N, K, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Loader partition of ``lora_fwd_handoff_kernel``. For each of the program's xs items,
    its K steps two to a ring stage (``item_stage``'s layout): x's ``[TILE_M, BLOCK_K]`` tiles
    of steps 2s and 2s + 1 (past K the copy engine reads zeros) and A's ``[R_PAD, BLOCK_K]``
    tiles of both (rows past r read zeros). Then for each tile its K steps of x and W and,
    once the row block's xs is published, one more step: xs's ``[TILE_M, BLOCK_K]`` tile and
    B's ``[BLOCK_N, BLOCK_K]`` (columns past r read zeros)."""
    TILE_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    R_PAD: gl.constexpr = rank_a_desc.block_type.shape[0]
    stage_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    item_bytes: gl.constexpr = 2 * (x_desc.block_type.nbytes + rank_a_desc.block_type.nbytes)
    k_tiles = gl.cdiv(K, BLOCK_K)
    items, first_tile, tiles, spare = handoff_work(M, N, TILE_M, BLOCK_N)
    count = 0
    for j in range(items):
        row_start = (gl.program_id(0) + j * spare) * TILE_M
        for kk in range(0, k_tiles, 2):
            stage, bar = free_stage(ready, empty, count, STAGES)
            mbarrier.expect(bar, item_bytes)
            x_first, x_second, a_first, a_second = item_stage(a_bufs, b_bufs, stage, R_PAD)
            _tma_load(x_desc, [row_start, kk * BLOCK_K], bar, x_first)
            _tma_load(rank_a_desc, [0, kk * BLOCK_K], bar, a_first)
            _tma_load(x_desc, [row_start, (kk + 1) * BLOCK_K], bar, x_second)
            _tma_load(rank_a_desc, [0, (kk + 1) * BLOCK_K], bar, a_second)
            count += 1
    row_blocks = gl.cdiv(M, TILE_M)
    cols = gl.cdiv(N, BLOCK_N)
    for i in range(tiles):
        tile_m, tile_n = grouped_tile(first_tile + i * gl.num_programs(0), row_blocks, cols, GROUP_M)
        row_start = tile_m * TILE_M
        col_start = tile_n * BLOCK_N
        for kk in range(k_tiles):
            stage, bar = free_stage(ready, empty, count, STAGES)
            mbarrier.expect(bar, stage_bytes)
            _tma_load(x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
            _tma_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage))
            count += 1
        stage, bar = free_stage(ready, empty, count, STAGES)
        wait_for_xs(flags_ptr, tile_m)
        mbarrier.expect(bar, stage_bytes)
        _tma_load(xs_desc, [row_start, 0], bar, a_bufs.index(stage))
        _tma_load(lora_b_desc, [col_start, 0], bar, b_bufs.index(stage))
        count += 1


@gluon.jit
def _xs_rows(xs_ptr, row_start, M, R, ROWS: gl.constexpr, rank_layout: gl.constexpr):
    """Pointers and mask of xs ``[M, R]`` rows ``row_start ...`` (ROWS of them, R_PAD columns)
    in ``rank_layout``."""
    R_PAD: gl.constexpr = rank_layout.instr_shape[1]
    rows = row_start + gl.arange(0, ROWS, layout=gl.SliceLayout(1, rank_layout))
    cols = gl.arange(0, R_PAD, layout=gl.SliceLayout(0, rank_layout))
    return xs_ptr + rows.to(gl.int64)[:, None] * R + cols[None, :], (rows < M)[:, None] & (cols < R)[None, :]


@gluon.jit
def handoff_consumer(
    b_ptr, xs_ptr, flags_ptr, y_desc, pre_desc, a_bufs, b_bufs, c_bufs, ready, empty,
    M, N, K, R, SCALE_HI, SCALE_LO,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, R_PAD: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of ``lora_fwd_handoff_kernel``, on rows ``CONSUMER *
    BLOCK_M ...`` of each piece of work (both consumers share it, as the cooperative
    ``pingpong_consumer``). An xs item: ``x_tile @ A_tile.T`` over its K steps, two MMAs a
    ring stage (``item_stage``), then its rows of ``xs = s * x @ A.T`` rounded, stored and
    published. A tile: its K steps and the
    loader's one step of xs and B, then bias, activation and stores as ``pingpong_consumer``'s
    epilogue."""
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    ROWS: gl.constexpr = y_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    rank_layout: gl.constexpr = accumulator_layout(R_PAD)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    items, first_tile, tiles, spare = handoff_work(M, N, TILE_M, BLOCK_N)
    item_steps = gl.cdiv(k_tiles, 2)
    for j in range(items):
        tile_m = gl.program_id(0) + j * spare
        acc_rank = gl.zeros((ROWS, R_PAD), dtype=gl.float32, layout=rank_layout)
        count = j * item_steps
        prev_stage = 0
        for kk in range(item_steps):
            stage = count % STAGES
            mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
            x_first, x_second, a_first, a_second = item_stage(a_bufs, b_bufs, stage, R_PAD)
            acc_rank = warpgroup_mma(x_first.slice(CONSUMER * ROWS, ROWS), a_first.permute((1, 0)), acc_rank,
                                     is_async=True)
            acc_rank = warpgroup_mma(x_second.slice(CONSUMER * ROWS, ROWS), a_second.permute((1, 0)), acc_rank,
                                     is_async=True)
            # the stage's pair in flight, the previous stage's done: release that stage
            acc_rank = warpgroup_mma_wait(num_outstanding=2, deps=(acc_rank,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
            prev_stage = stage
            count += 1
        acc_rank = warpgroup_mma_wait(num_outstanding=0, deps=(acc_rank,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
        xs = (acc_rank * SCALE_HI + acc_rank * SCALE_LO).to(xs_ptr.dtype.element_ty)
        xs_ptrs, xs_mask = _xs_rows(xs_ptr, tile_m * TILE_M + CONSUMER * ROWS, M, R, ROWS, rank_layout)
        gl.store(xs_ptrs, xs, mask=xs_mask)
        publish_xs(flags_ptr, tile_m)
    row_blocks = gl.cdiv(M, TILE_M)
    cols = gl.cdiv(N, BLOCK_N)
    first_step = items * item_steps
    for i in range(tiles):
        tile_m, tile_n = grouped_tile(first_tile + i * gl.num_programs(0), row_blocks, cols, GROUP_M)
        row_start = tile_m * TILE_M + CONSUMER * ROWS
        col_start = tile_n * BLOCK_N
        if HAS_BIAS:
            bias = tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
        acc = gl.zeros((ROWS, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        acc, acc_unused, last_stage = ring_mma_steps(a_bufs, b_bufs, ready, empty, acc, acc, first_step, k_tiles + 1,
                                                     CONSUMER, STAGES, False, True, False, b_bufs)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(last_stage), count=1)
        first_step += k_tiles + 1
        if HAS_BIAS:
            acc = acc + bias
        if STORE_PRE:
            tma_store_tile(pre_desc, c_buf, acc, row_start, col_start)
        tma_store_tile(y_desc, c_buf, activation(acc, ACT), row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def lora_fwd_handoff_kernel(
    x_desc, w_desc, rank_a_desc, xs_desc, lora_b_desc, b_ptr, xs_ptr, flags_ptr, y_desc, pre_desc,
    M, N, K, R, SCALE_HI, SCALE_LO,
    ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_PRE: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: LORA_HANDOFF_CONFIG
):
    """The LoRA forward with xs formed on chip once per row block and handed to the row
    block's tiles through memory, on wide cooperative tiles (2 x BLOCK_M rows by BLOCK_N
    columns): ``xs = s * x @ A.T`` [M, R] (written for the backward), ``pre = x @ W.T + xs @
    B.T + b``, ``y = act(pre)``.

    Why: for inputs wider than LORA_PINGPONG_MAX_K the forms before it took xs from cuBLAS
    first, one more launch and read of x (a 450 us forward at 8192 x 4096 -> 4096 against
    linear_act's 400 on an H100). Forming xs inside a tile (the row block's column-0 tile,
    benchmarks/NOTES.md "LoRA's forward with xs handed over through the ring") made the
    programs holding those tiles late by the narrow product's cost, since tiles are statically
    bound to programs. Here xs is separate work: an xs item of a row block is its K steps of
    the x tile against A's (narrow MMAs, no W), placed on the programs that hold a tile
    less than the others (``handoff_work``) and run before their tiles. The host picks the
    grid so that the items fill that slack (ops/lora.py ``_handoff_grid``).

    Hand-over: the item's consumer threads each store their part of xs and add 1 to the row
    block's flag (``flags_ptr``, int32, zero at launch) with release semantics. Every tile
    adds ``xs @ B.T`` as one more step of its main loop, which the loader issues only once the
    flag reads 256 (acquire, then a proxy fence before the TMA copy of xs): the consumers wait
    on the ring as for any step. No wait closes a cycle: items wait for nothing, and each
    program runs its items before its tiles. Items sit on the lowest program ids, which the
    GPU starts first, so a reader waits only on programs already running even when the grid
    does not fit on the GPU at once.

    ``A [r, K]`` arrives as ``rank_a_desc`` tiles ``[R_PAD, BLOCK_K]`` in a stage's weight
    buffer (rows past r read zeros; ``item_stage``), xs ``[M, R]`` as ``xs_desc``
    tiles ``[2 * BLOCK_M, BLOCK_K]`` and ``B [N, R]`` as ``lora_b_desc`` tiles ``[BLOCK_N,
    BLOCK_K]`` (columns past r read zeros), R <= BLOCK_K. 16-bit data, r a multiple of 8
    (TMA's 16-byte rows); ``COOPERATIVE`` comes with the config and must be true."""
    gl.static_assert(COOPERATIVE, "lora_fwd_handoff_kernel runs cooperative tiles")
    R_PAD: gl.constexpr = rank_a_desc.block_type.shape[0]
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, True)
    gl.warp_specialize([
        (handoff_consumer, (b_ptr, xs_ptr, flags_ptr, y_desc, pre_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                            M, N, K, R, SCALE_HI, SCALE_LO, 0, ACT, HAS_BIAS, STORE_PRE, GROUP_M, STAGES, R_PAD)),
        (handoff_consumer, (b_ptr, xs_ptr, flags_ptr, y_desc, pre_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                            M, N, K, R, SCALE_HI, SCALE_LO, 1, ACT, HAS_BIAS, STORE_PRE, GROUP_M, STAGES, R_PAD)),
        (handoff_loader, (x_desc, w_desc, rank_a_desc, xs_desc, lora_b_desc, a_bufs, b_bufs, ready, empty,
                          flags_ptr, M, N, K, GROUP_M, STAGES)),
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


@gluon.jit
def dgrad_db_loader(a_desc, w_kn_desc, tail_a_desc, tail_w_kn_desc, xs_rank_desc, a_bufs, b_bufs, xs_bufs, ready, empty,
                    xs_ready, xs_empty, M, N, K, R, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Loader partition of ``lora_dgrad_db_kernel``: per tile, first the row block's xs tile
    ``[TILE_M, R_PAD]`` into xs buffer ``i % 2`` (once both consumers released what it held
    two tiles before), then its ring steps as ``pingpong_loader``'s with ``W_KN`` and the tail
    (``load_tile_steps``)."""
    TILE_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = w_kn_desc.block_type.shape[1]
    count = 0
    for i in range(program_tiles(M, N, TILE_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        xs_index = i % 2
        mbarrier.wait(xs_empty.index(xs_index), ((i // 2) & 1) ^ 1)
        mbarrier.expect(xs_ready.index(xs_index), xs_rank_desc.block_type.nbytes)
        _tma_load(xs_rank_desc, [row_start, 0], xs_ready.index(xs_index), xs_bufs.index(xs_index))
        count = load_tile_steps(a_desc, w_kn_desc, w_kn_desc, a_bufs, b_bufs, ready, empty, count, row_start, col_start,
                                K, STAGES, False, True, tail_a_desc, tail_w_kn_desc, R)


@gluon.jit
def dgrad_db_consumer(db_part_ptr, dx_desc, a_bufs, b_bufs, c_bufs, xs_bufs, ready, empty, xs_ready, xs_empty,
                      M, N, K, R, CONSUMER: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Consumer warpgroup ``CONSUMER`` of ``lora_dgrad_db_kernel`` (cooperative: its ROWS of
    every tile). The main loop as ``ring_mma_steps`` with ``W_KN``; on the K steps that fall to
    it (``kk % column tiles == tile_n``, every other one to each consumer) it first multiplies
    the stage's whole dpre tile, transposed, by the row block's xs: ``dpre[rows, k-slice].T @
    xs[rows]`` ``[BLOCK_K, R_PAD]``, fp32, stored as row block ``tile_m``'s partial of dB's rows
    ``k-slice``. That MMA is issued before the step's own, so the wait that leaves one group in
    flight finds it done."""
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    ROWS: gl.constexpr = dx_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = dx_desc.block_type.shape[1]
    R_PAD: gl.constexpr = xs_bufs.type.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    db_layout: gl.constexpr = accumulator_layout(R_PAD)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    steps = k_tiles + gl.cdiv(R, BLOCK_K)
    cols = gl.cdiv(N, BLOCK_N)
    db_rows = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, db_layout))
    db_cols = gl.arange(0, R_PAD, layout=gl.SliceLayout(0, db_layout))
    count = 0
    for i in range(program_tiles(M, N, TILE_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        tile_m = row_start // TILE_M
        tile_n = col_start // BLOCK_N
        xs_buf = xs_bufs.index(i % 2)
        acc = gl.zeros((ROWS, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        prev_stage = 0
        for kk in range(steps):
            stage = count % STAGES
            mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
            a_tile = a_bufs.index(stage)
            if kk < k_tiles and kk % cols == tile_n and (kk // cols) % 2 == CONSUMER:
                mbarrier.wait(xs_ready.index(i % 2), (i // 2) & 1)
                db = warpgroup_mma(a_tile.permute((1, 0)), xs_buf,
                                   gl.zeros((BLOCK_K, R_PAD), dtype=gl.float32, layout=db_layout), is_async=True)
                acc = warpgroup_mma(a_tile.slice(CONSUMER * ROWS, ROWS), b_bufs.index(stage), acc, is_async=True)
                db, acc = warpgroup_mma_wait(num_outstanding=1, deps=(db, acc))
                k_rows = kk * BLOCK_K + db_rows
                gl.store(db_part_ptr + (tile_m.to(gl.int64) * K + k_rows[:, None]) * R + db_cols[None, :], db,
                         mask=(k_rows < K)[:, None] & (db_cols < R)[None, :])
            else:
                acc = warpgroup_mma(a_tile.slice(CONSUMER * ROWS, ROWS), b_bufs.index(stage), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
            prev_stage = stage
            count += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
        mbarrier.arrive(xs_empty.index(i % 2), count=1)
        tma_store_tile(dx_desc, c_buf, acc, row_start + CONSUMER * ROWS, col_start)
    tma.store_wait(0)


@gluon.jit
def lora_dgrad_db_kernel(
    a_desc, w_kn_desc, tail_a_desc, tail_w_kn_desc, xs_rank_desc, dx_desc, db_part_ptr,
    M, N, K, R,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, COOPERATIVE: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # configs.py: DGRAD_PINGPONG_CONFIG
):
    """LoRA's input gradient and dB in one kernel: ``dx [M, N] = dpre @ W + d_xa @ A`` as
    linear_act.py's ``dgrad_pingpong_kernel`` (dpre ``[M, K]`` as ``a_desc``, W ``[K, N]``, d_xa
    ``[M, R]``, A ``[R, N]``; here K is the layer's out, N its in), and beside it the row blocks'
    partials of ``dB = dpre.T @ xs`` ``[K, R]``: ``db_part [row blocks, K, R]`` fp32, which the
    host sums over the row blocks in order (no atomics: the same bits every run).

    Why: dB is a read of dpre, which this kernel's main loop reads anyway, tile by tile. With
    dB from cuBLAS beside the kernel (on the SMs its grid leaves) dA = d_xa.T @ x ran after it
    (30-35 us of a 916 us step at 8192 x 4096 -> 4096, r 8, H100; benchmarks/NOTES.md, "LoRA's
    rank products by rank"); dA now takes those SMs (graphed steps 16-22 us faster there at r 8
    and 16, 47-101 us at 32768 rows: NOTES.md, "LoRA's dB in the dgrad kernel"). Each dpre tile ``[TILE_M, BLOCK_K]`` of a
    row block is in shared memory once per column tile of dx, so K step kk's product falls to
    the column tile ``kk % column tiles`` (every tile of the row block does a share, none waits
    for another), alternately to each consumer, whose extra MMA ``[BLOCK_K, TILE_M] @ [TILE_M,
    R_PAD]`` reads the stage's tile transposed and the row block's xs tile, loaded once per tile
    into one of two buffers. 16-bit data, R a multiple of 8 (TMA's 16-byte rows) up to
    ``R_PAD`` (xs_rank_desc's block width); ``COOPERATIVE`` comes with the config and must be true."""
    gl.static_assert(COOPERATIVE, "lora_dgrad_db_kernel runs cooperative tiles")
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(a_desc, w_kn_desc, dx_desc, STAGES, False, 1, True)
    xs_bufs = gl.allocate_shared_memory(xs_rank_desc.dtype, [2] + xs_rank_desc.block_type.shape, xs_rank_desc.layout)
    xs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    xs_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for index in gl.static_range(2):
        mbarrier.init(xs_ready.index(index), count=1)
        mbarrier.init(xs_empty.index(index), count=2)
    gl.warp_specialize([
        (dgrad_db_consumer, (db_part_ptr, dx_desc, a_bufs, b_bufs, c_bufs, xs_bufs, ready, empty, xs_ready, xs_empty,
                             M, N, K, R, 0, GROUP_M, STAGES)),
        (dgrad_db_consumer, (db_part_ptr, dx_desc, a_bufs, b_bufs, c_bufs, xs_bufs, ready, empty, xs_ready, xs_empty,
                             M, N, K, R, 1, GROUP_M, STAGES)),
        (dgrad_db_loader, (a_desc, w_kn_desc, tail_a_desc, tail_w_kn_desc, xs_rank_desc, a_bufs, b_bufs, xs_bufs, ready,
                           empty, xs_ready, xs_empty, M, N, K, R, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
