"""The Hopper warp-specialised ``x @ W.T`` main loop ("ping-pong"), written in Gluon.

Why: a fused forward is a GEMM followed by an epilogue (bias, activation, stores). In the
persistent Triton kernels (gemm.py) the same warps run both, so the tensor cores idle while a
tile's epilogue runs: with a short K (d = 512, 1024) the epilogue is a large share of a tile,
and the linear forward measured 1.4-1.5x the bare cuBLAS GEMM at 16384 x 512 -> 1792 (H200).
Here each program (one per SM, persistent) splits into three groups of warps:

- a loader (1 warp): walks the program's tiles in order and, for each K step, waits until a
  stage of a ``STAGES``-deep ring in shared memory is free, then has the copy engine (TMA) fill
  it with the ``[BLOCK_M, BLOCK_K]`` tile of x and the ``[BLOCK_N, BLOCK_K]`` tile of W;
- two consumers (one warpgroup of 4 warps each, with most of the registers): consumer ``c``
  takes the program's tiles ``c, c + 2, c + 4, ...``. It runs the tile's main loop on the
  tensor cores (``warpgroup_mma`` from the ring stages, releasing each stage as the next MMA is
  issued), then its own epilogue, which overlaps the other consumer's main loop.

The consumers' main loops take turns (``turn`` barriers): consumer c starts a main loop once
the other has issued its last MMA. Besides keeping the tensor cores to one tile at a time, this
is what makes the ring's barriers exact: a wait on an mbarrier names the parity of the phase
it waits for, which only identifies the phase when the waiter is at most one phase ahead; a
consumer that ran ahead into its next tile while the other still had stages to read could be
two phases ahead of a stage and would pass its wait on the old phase.

Ring slot and phase of a K step follow from one running count per program (tile ``i`` of the
program owns counts ``i * k_tiles ... (i + 1) * k_tiles - 1``), which the loader and both
consumers compute alike. Edge tiles need no masks: TMA reads zeros out of bounds and clips
stores. Tile order is ``grouped_tile``'s (gemm.py), as in every other kernel here.

With ``PAIRED`` (a GLU's x1 and x2 from one x tile) a stage's weight buffer holds W's tile in
its first BLOCK_N rows and W2's in the rest, and one MMA of width 2 * BLOCK_N fills one
accumulator whose column halves are x1 and x2 (``split_column_halves``: no data moves). Two
MMAs of width BLOCK_N, one per weight, read the x tile from shared memory twice: at
BLOCK_N = 64 the GLU forward ran 3-6% slower that way (H200). With ``W_KN`` the weight is
``[K, N]`` (e.g. a down projection's weight read for ``gy @ Wd``) and its ``[BLOCK_K,
BLOCK_N]`` tiles are the MMA's right operand as loaded.

With ``COOPERATIVE`` (the GLU forward writing y alone, with a long K: configs.py) the two
consumers share each tile instead of alternating: a tile has 2 x BLOCK_M rows, a stage's x
tile all of them, and consumer c multiplies rows ``c * BLOCK_M ...`` of it by the stage's
weight tile, so each weight tile loaded feeds twice the rows (per 128 rows of output a tile
reads 192 rows of K from L2 instead of 256). A stage is free once both consumers released it
(its ``empty`` barrier counts two), and there are no turns: both run their main loops
together and their epilogues together, while the loader fills the ring for the next tile.

Consumers: ``pingpong_consumer`` serves the fused forwards, ``linear_act_fwd_pingpong_kernel``
(linear_act.py: y = act(x @ W.T + b)), ``lora_fwd_pingpong_kernel`` (lora.py: the same with
LoRA's ``xs @ B.T`` as the loader's tail K steps; lora.py's ``lora_fwd_onchip_kernel`` has
its own loader and consumer around ``pingpong_mainloop_with_rank``, which forms x @ A.T
beside x @ W.T, and ``lora_fwd_handoff_kernel`` its own around ``ring_mma_steps``, the main
loop's body), ``glu_fwd_pingpong_kernel`` (glu.py:
y = x1 * act(x2)) and ``dgrad_pingpong_kernel`` (linear_act.py: an input gradient
dx = a @ W + tail_a @ tail_W, the weights read as ``[K, N]`` tiles, the second product as tail
steps: LoRA's and SwiGLU's backward); ``pingpong_glu_dh_recompute_consumer``
the GLU backward's dh with h recomputed on the tile (``glu_bwd_dh_recompute_pingpong_kernel``,
only x saved); ``pingpong_glu_dh_wide_consumer`` the same with h kept and g = gy @ Wd formed
on tiles of g twice as wide as its buffers, the epilogue in column halves
(``glu_bwd_dh_wide_pingpong_kernel``, SwiGLU at a long K), and ``rotating_glu_dh_consumer``
the latter on narrow tiles with three consumers taking turns instead of two
(``glu_bwd_dh_rotating_kernel``, a short K); ``pingpong_dpre_consumer`` the linear layer's
backward dpre with the pre-activation recomputed on the tile
(``linear_act_dpre_recompute_pingpong_kernel``, only x saved).
``resident_loader`` and ``resident_consumer`` are a variant for a short K (the linear forward's
``linear_act_fwd_resident_kernel``): each program keeps its rows of x in shared memory for all
their column tiles and the ring carries only W, so per output element half the L2-to-SM bytes
move; three consumers take turns, and one output buffer, taken in tile order, leaves room
for the ring beside x.
Only for CUDA GPUs of compute capability 9.0 and 16-bit inputs (ops/_common.py
``pingpong_eligible``); the interpreter and other GPUs keep the Triton kernels.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .activations import activation, activation_grad, activation_value_and_grad
from .gemm import grouped_tile

# Triton 3.6 names the TMA copies async_copy_global_to_shared / async_copy_shared_to_global;
# later versions async_load / async_store (same arguments) and make the old names raise.
_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
_tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global


@gluon.jit
def program_tiles(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """How many output tiles this program owns (tiles ``program_id + i * num_programs``)."""
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    return gl.cdiv(num_tiles - gl.program_id(0), gl.num_programs(0))


@gluon.jit
def tile_start(local_index, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(first row, first column) of the program's ``local_index``-th tile."""
    tile_id = gl.program_id(0) + local_index * gl.num_programs(0)
    tile_m, tile_n = grouped_tile(tile_id, gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N), GROUP_M)
    return tile_m * BLOCK_M, tile_n * BLOCK_N


@gluon.jit
def free_stage(ready, empty, count, STAGES: gl.constexpr):
    """(stage, its ready barrier) for the loader's ``count``-th ring step, once the consumers
    have released the stage's previous contents; the caller arms the barrier with the bytes it
    loads (``mbarrier.expect``) and issues the copies. A fresh barrier counts as having
    completed the phase before its first: the first pass over the ring does not wait."""
    stage = count % STAGES
    mbarrier.wait(empty.index(stage), ((count // STAGES) & 1) ^ 1)
    return stage, ready.index(stage)


@gluon.jit
def pingpong_loader(x_desc, w_desc, w2_desc, a_bufs, b_bufs, ready, empty, M, N, K,
                    GROUP_M: gl.constexpr, STAGES: gl.constexpr, PAIRED: gl.constexpr, W_KN: gl.constexpr,
                    tail_x_desc, tail_w_desc, tail_k):
    """Loader partition: fills ring stages with x and W tiles in the consumers' order; if
    PAIRED, W's tile fills the first BLOCK_N rows of the stage's weight buffer and W2's the
    rest. W is ``[N, K]`` (an nn.Linear weight: tiles ``[BLOCK_N, BLOCK_K]``), or ``[K, N]``
    with ``W_KN`` (tiles ``[BLOCK_K, BLOCK_N]``). Not PAIRED: each tile's K steps are
    followed by ``cdiv(tail_k, BLOCK_K)`` more from ``tail_x_desc`` ``[M, tail_k]`` and
    ``tail_w_desc``, ``[N, tail_k]`` or with W_KN ``[tail_k, N]`` (same block shapes as x and
    W; a second product summed into the accumulator, e.g. LoRA's ``xs @ B.T``; tail_k = 0:
    none)."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[1] if W_KN else w_desc.block_type.shape[0]
    count = 0
    for i in range(program_tiles(M, N, BLOCK_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        count = load_tile_steps(x_desc, w_desc, w2_desc, a_bufs, b_bufs, ready, empty, count, row_start, col_start,
                                K, STAGES, PAIRED, W_KN, tail_x_desc, tail_w_desc, tail_k)


@gluon.jit
def load_tile_steps(x_desc, w_desc, w2_desc, a_bufs, b_bufs, ready, empty, count, row_start, col_start, K,
                    STAGES: gl.constexpr, PAIRED: gl.constexpr, W_KN: gl.constexpr,
                    tail_x_desc, tail_w_desc, tail_k):
    """One tile's ring steps for ``pingpong_loader`` (its docstring), from the loader's running
    step ``count``; returns the count after them."""
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[1] if W_KN else w_desc.block_type.shape[0]
    stage_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes * (2 if PAIRED else 1)
    for kk in range(gl.cdiv(K, BLOCK_K)):
        stage, bar = free_stage(ready, empty, count, STAGES)
        mbarrier.expect(bar, stage_bytes)
        _tma_load(x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
        if PAIRED:
            _tma_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage).slice(0, BLOCK_N))
            _tma_load(w2_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage).slice(BLOCK_N, BLOCK_N))
        elif W_KN:
            _tma_load(w_desc, [kk * BLOCK_K, col_start], bar, b_bufs.index(stage))
        else:
            _tma_load(w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage))
        count += 1
    if not PAIRED:  # the tail's K past tail_k reads zeros
        for kk in range(gl.cdiv(tail_k, BLOCK_K)):
            stage, bar = free_stage(ready, empty, count, STAGES)
            mbarrier.expect(bar, stage_bytes)
            _tma_load(tail_x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
            if W_KN:
                _tma_load(tail_w_desc, [kk * BLOCK_K, col_start], bar, b_bufs.index(stage))
            else:
                _tma_load(tail_w_desc, [col_start, kk * BLOCK_K], bar, b_bufs.index(stage))
            count += 1
    return count


@gluon.jit
def pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, local_index, k_tiles,
                      CONSUMER: gl.constexpr, STAGES: gl.constexpr, W_KN: gl.constexpr, acc_layout: gl.constexpr,
                      COOPERATIVE: gl.constexpr):
    """acc = x_tile @ W_tile.T for the program's ``local_index``-th tile (consumer
    ``CONSUMER``), W_tile being the ring's weight rows (W's, or W's and W2's if PAIRED), or
    acc = x_tile @ W_tile with ``W_KN`` (the ring holds ``[BLOCK_K, BLOCK_N]`` tiles).

    Waits for this consumer's turn, issues the MMA of one ring stage at a time keeping one
    stage's in flight (the stage before is released as soon as its MMA is done), hands the
    turn to the other consumer after its last MMA and returns the finished fp32 accumulator.
    COOPERATIVE: no turns; both consumers read every stage, each its half of the x tile's rows
    (the stage is free once both have released it).
    """
    return pingpong_mainloop_with_rank(a_bufs, b_bufs, ready, empty, turn, local_index, k_tiles, CONSUMER, STAGES,
                                       W_KN, acc_layout, COOPERATIVE, False, b_bufs, acc_layout)[0]


@gluon.jit
def pingpong_mainloop_with_rank(a_bufs, b_bufs, ready, empty, turn, local_index, k_tiles,
                                CONSUMER: gl.constexpr, STAGES: gl.constexpr, W_KN: gl.constexpr,
                                acc_layout: gl.constexpr, COOPERATIVE: gl.constexpr, RANK: gl.constexpr,
                                rank_bufs, rank_layout: gl.constexpr):
    """``pingpong_mainloop`` returning (acc, acc_rank). With RANK, ``rank_bufs`` is a ring of
    ``[R, BLOCK_K]`` tiles beside the weight's (not W_KN) and each stage's x tile (this
    consumer's rows of it, COOPERATIVE) also multiplies its rank tile, a second, R-wide MMA into
    an accumulator of ``rank_layout``: acc_rank = x_tile @ rank_tile.T (LoRA's x @ A.T,
    lora.py). Without, ``rank_bufs`` is not read and acc_rank is acc."""
    ROWS: gl.constexpr = a_bufs.type.shape[1] // 2 if COOPERATIVE else a_bufs.type.shape[1]
    ACC_N: gl.constexpr = b_bufs.type.shape[2] if W_KN else b_bufs.type.shape[1]
    if not COOPERATIVE:
        # consumer 0's first wait passes on the fresh barrier; consumer 1's waits for consumer 0
        mbarrier.wait(turn.index(CONSUMER), ((local_index // 2) & 1) ^ (1 - CONSUMER))
    RANK_N: gl.constexpr = rank_bufs.type.shape[1]
    acc = gl.zeros((ROWS, ACC_N), dtype=gl.float32, layout=acc_layout)
    acc_rank = acc
    if RANK:
        acc_rank = gl.zeros((ROWS, RANK_N), dtype=gl.float32, layout=rank_layout)
    acc, acc_rank, last_stage = ring_mma_steps(a_bufs, b_bufs, ready, empty, acc, acc_rank, local_index * k_tiles,
                                               k_tiles, CONSUMER, STAGES, W_KN, COOPERATIVE, RANK, rank_bufs)
    if not COOPERATIVE:
        mbarrier.arrive(turn.index(1 - CONSUMER), count=1)
    if RANK:
        acc, acc_rank = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_rank))
    else:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        acc_rank = acc
    mbarrier.arrive(empty.index(last_stage), count=1)
    return acc, acc_rank


@gluon.jit
def ring_mma_steps(a_bufs, b_bufs, ready, empty, acc, acc_rank, first_count, steps,
                   CONSUMER: gl.constexpr, STAGES: gl.constexpr, W_KN: gl.constexpr, COOPERATIVE: gl.constexpr,
                   RANK: gl.constexpr, rank_bufs):
    """The main loop's body over ring steps ``first_count ... first_count + steps - 1`` (the
    program's running count; steps >= 1): waits for each stage, issues its MMA into acc (and
    with RANK the rank tile's into acc_rank) keeping one stage's in flight, and releases the
    stage before once its MMA is done. Returns (acc, acc_rank, last_stage): the last stage's
    MMA may still run, so the caller waits for it and then releases ``last_stage``."""
    ROWS: gl.constexpr = a_bufs.type.shape[1] // 2 if COOPERATIVE else a_bufs.type.shape[1]
    count = first_count
    prev_stage = 0
    for kk in range(steps):
        stage = count % STAGES
        mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
        if W_KN:
            b_tile = b_bufs.index(stage)
        else:
            b_tile = b_bufs.index(stage).permute((1, 0))
        if COOPERATIVE:
            a_tile = a_bufs.index(stage).slice(CONSUMER * ROWS, ROWS)
        else:
            a_tile = a_bufs.index(stage)
        acc = warpgroup_mma(a_tile, b_tile, acc, is_async=True)
        if RANK:  # the stage's pair in flight; the previous stage's pair done
            acc_rank = warpgroup_mma(a_tile, rank_bufs.index(stage).permute((1, 0)), acc_rank, is_async=True)
            acc, acc_rank = warpgroup_mma_wait(num_outstanding=2, deps=(acc, acc_rank))
        else:
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
        prev_stage = stage
        count += 1
    return acc, acc_rank, prev_stage


@gluon.jit
def split_column_halves(acc, half_layout: gl.constexpr):
    """acc[:, :n] and acc[:, n:] of a [BLOCK_M, 2n] accumulator, each in ``half_layout``.

    In the wgmma layout a thread holding column j also holds column j + n, in registers: the
    reshape, permute and split only rename them (convert_layout asserts that nothing moves).
    """
    BLOCK_M: gl.constexpr = acc.shape[0]
    HALF: gl.constexpr = acc.shape[1] // 2
    left, right = acc.reshape([BLOCK_M, 2, HALF]).permute((0, 2, 1)).split()
    return (gl.convert_layout(left, half_layout, assert_trivial=True),
            gl.convert_layout(right, half_layout, assert_trivial=True))


@gluon.jit
def split_row_halves(acc, half_layout: gl.constexpr):
    """acc[:m] and acc[m:] of a [2m, N] accumulator (m = 64: one row block of the four warps),
    each in ``half_layout``. In the wgmma layout the warpgroup covers 64 rows and a thread
    holding row r also holds row r + 64, in registers: nothing moves (as split_column_halves)."""
    HALF: gl.constexpr = acc.shape[0] // 2
    BLOCK_N: gl.constexpr = acc.shape[1]
    top, bottom = acc.reshape([2, HALF, BLOCK_N]).permute((1, 2, 0)).split()
    return (gl.convert_layout(top, half_layout, assert_trivial=True),
            gl.convert_layout(bottom, half_layout, assert_trivial=True))


@gluon.jit
def tile_bias(b_ptr, col_start, N, BLOCK_N: gl.constexpr, acc_layout: gl.constexpr):
    """The bias of a tile's columns as an fp32 row in the accumulator's layout (zeros past N).
    The forward's consumers load it before the tile's main loop, which hides its latency; the
    recompute dh consumer loads it after (held through the main loop, it made ptxas spill)."""
    cols = col_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    return gl.load(b_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)[None, :]


@gluon.jit
def tma_store_tile(desc, buf, value, row_start, col_start):
    """Store ``value`` to ``desc`` at (row_start, col_start) through the shared buffer ``buf``.

    Waits for this warpgroup's previous store out of ``buf`` first, so that store ran during
    the main loop in between.
    """
    tma.store_wait(0)
    buf.store(value.to(desc.dtype))
    fence_async_shared()
    _tma_store(desc, [row_start, col_start], buf)


@gluon.jit
def pingpong_consumer(
    b_ptr, b2_ptr, y_desc, acc_desc, acc2_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn,
    M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_ACC: gl.constexpr,
    PAIRED: gl.constexpr, W_KN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    COOPERATIVE: gl.constexpr, tail_k,
):
    """Consumer warpgroup ``CONSUMER``: for every second tile of the program (COOPERATIVE:
    for its half of the rows of every tile), the main loop, then the fused epilogue. With
    a = x @ W.T + b (and a2 = x @ W2.T + b2 if PAIRED):

        y = act(a)            or, PAIRED,    y = a * act(a2)

    STORE_ACC also stores a (and a2) through ``acc_desc`` (``acc2_desc``): the linear layer's
    pre-activation, a GLU's h halves. Biases are loaded before the tile's main loop, which
    hides their latency; every store goes through this consumer's one shared buffer. With
    ``tail_k`` > 0 the main loop runs the loader's tail steps too (not PAIRED): a = x @ W.T +
    t_x @ t_w.T + b. ``W_KN``: W is ``[K, N]`` and a = x @ W (+ t_x @ t_w), e.g. a dgrad.
    """
    TILE_M: gl.constexpr = a_bufs.type.shape[1]
    ROWS: gl.constexpr = y_desc.block_type.shape[0]  # this consumer's rows of a tile
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K) + (0 if PAIRED else gl.cdiv(tail_k, BLOCK_K))  # the loader's steps
    for i in range(0 if COOPERATIVE else CONSUMER, program_tiles(M, N, TILE_M, BLOCK_N), 1 if COOPERATIVE else 2):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        if COOPERATIVE:
            row_start += CONSUMER * ROWS
        if HAS_BIAS:
            bias = tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
            if PAIRED:
                bias2 = tile_bias(b2_ptr, col_start, N, BLOCK_N, acc_layout)
        if PAIRED:
            acc, acc2 = split_column_halves(
                pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, False,
                                  accumulator_layout(2 * BLOCK_N), COOPERATIVE),
                acc_layout)
        else:
            acc = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, W_KN,
                                    acc_layout, COOPERATIVE)
        if HAS_BIAS:
            acc = acc + bias
            if PAIRED:
                acc2 = acc2 + bias2
        if STORE_ACC:
            tma_store_tile(acc_desc, c_buf, acc, row_start, col_start)
            if PAIRED:
                tma_store_tile(acc2_desc, c_buf, acc2, row_start, col_start)
        if PAIRED:
            y = acc * activation(acc2, ACT)
        else:
            y = activation(acc, ACT)
        tma_store_tile(y_desc, c_buf, y, row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def pingpong_glu_dh_recompute_consumer(
    g_desc, b1_ptr, b2_ptr, dh1_desc, dh2_desc, db_partial_ptr,
    a_bufs, b_bufs, c_bufs, ready, empty, turn, g_ready,
    M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of a GLU's backward dh with only x saved: for every
    second tile the main loop recomputes x1 and x2 (PAIRED: x @ [W1 | W2].T, plus the biases)
    and, with g = dL/dy read (``g_desc``),

        dh1 = g * act(x2),   dh2 = g * x1 * act'(x2)

    and, if HAS_BIAS, the tile's column sums of dh1 and dh2 (from the unrounded fp32 values)
    into row ``row_start // BLOCK_M`` of ``db_partial`` ([row blocks, 2 * N] fp32).

    g is copied (TMA) into this consumer's first buffer (``c_bufs[2 * CONSUMER]``) before its
    main loop, which hides its latency; after it, each thread reads its elements, writes dh1
    over them (the same elements: no thread waits for another) and dh2 into the second
    buffer, and both go out by TMA. So dh1 may be written over g.
    """
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = dh1_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    dh1_buf = c_bufs.index(2 * CONSUMER)
    dh2_buf = c_bufs.index(2 * CONSUMER + 1)
    bar = g_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, BLOCK_N), 2):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        tma.store_wait(0)  # the previous tile's stores have read the buffers
        mbarrier.expect(bar, g_desc.block_type.nbytes)
        _tma_load(g_desc, [row_start, col_start], bar, dh1_buf)
        x1, x2 = split_column_halves(
            pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, False,
                              accumulator_layout(2 * BLOCK_N), False),
            acc_layout)
        # The orders with the fewest spills from ptxas (sm_90a; benchmarks/NOTES.md, "Spills
        # in the epilogues"): the biases loaded after the main loop (loaded before it, their
        # registers stay live through it), and x1 * act'(x2) formed before g arrives with a
        # bias, g * x1 first without one: 16 and 0 bytes of stack where the previous order
        # had 72 and 200; others tried had up to 240.
        if HAS_BIAS:
            x1 = x1 + tile_bias(b1_ptr, col_start, N, BLOCK_N, acc_layout)
            x2 = x2 + tile_bias(b2_ptr, col_start, N, BLOCK_N, acc_layout)
            act_x2, act_grad_x2 = activation_value_and_grad(x2, ACT)
            x1_act_grad = x1 * act_grad_x2
            mbarrier.wait(bar, (i // 2) & 1)
            g = dh1_buf.load(acc_layout).to(gl.float32)
            dh2 = g * x1_act_grad
        else:
            mbarrier.wait(bar, (i // 2) & 1)
            g = dh1_buf.load(acc_layout).to(gl.float32)
            g_x1 = g * x1
            act_x2, act_grad_x2 = activation_value_and_grad(x2, ACT)
            dh2 = g_x1 * act_grad_x2
        dh1 = g * act_x2
        dh1_buf.store(dh1.to(dh1_desc.dtype))
        dh2_buf.store(dh2.to(dh2_desc.dtype))
        fence_async_shared()
        _tma_store(dh1_desc, [row_start, col_start], dh1_buf)
        _tma_store(dh2_desc, [row_start, col_start], dh2_buf)
        if HAS_BIAS:  # rows past M read g = 0: they add nothing
            cols = col_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            partial_ptrs = db_partial_ptr + (row_start // BLOCK_M).to(gl.int64) * (2 * N) + cols
            gl.store(partial_ptrs, gl.sum(dh1, axis=0), mask=cols < N)
            gl.store(partial_ptrs + N, gl.sum(dh2, axis=0), mask=cols < N)
    tma.store_wait(0)


@gluon.jit
def glu_dh_rows(g_rows, x1_rows, x2_rows, row_layout: gl.constexpr, ACT: gl.constexpr):
    """The kept-h GLU epilogue of one row half of a tile (``[m, N]``, x1 and x2 in shared
    memory): writes dh1 = g * act(x2) over x1 and dh2 = g * x1 * act'(x2) over x2 (each thread
    the elements it read) and returns z = x1 * act(x2) in their 16-bit dtype."""
    x1 = x1_rows.load(row_layout).to(gl.float32)
    x2 = x2_rows.load(row_layout).to(gl.float32)
    act_x2, act_grad_x2 = activation_value_and_grad(x2, ACT)
    x1_rows.store((g_rows * act_x2).to(x1_rows.dtype))
    x2_rows.store((g_rows * x1 * act_grad_x2).to(x2_rows.dtype))
    return (x1 * act_x2).to(x1_rows.dtype)


@gluon.jit
def glu_dh_from_buffers(g, x1_buf, x2_buf, z_buf, ACT: gl.constexpr, STORE_Z: gl.constexpr):
    """The kept-h GLU epilogue of a [2m, N] tile of g (``glu_dh_rows``) with x1 and x2 in
    ``x1_buf`` and ``x2_buf``, and with STORE_Z z into ``z_buf``. In two row halves: a thread
    holds g (N / 2 values of each half), and the x1, x2 and outputs of one half at a time,
    where a whole tile's would not fit its registers."""
    ROWS: gl.constexpr = g.shape[0] // 2
    row_layout: gl.constexpr = accumulator_layout(g.shape[1])
    g_rows = split_row_halves(g, row_layout)
    for part in gl.static_range(2):
        z = glu_dh_rows(g_rows[part], x1_buf.slice(part * ROWS, ROWS), x2_buf.slice(part * ROWS, ROWS), row_layout,
                        ACT)
        if STORE_Z:
            z_buf.slice(part * ROWS, ROWS).store(z)


@gluon.jit
def glu_dh_store_late_z(g, x1_buf, x2_buf, dh1_desc, dh2_desc, z_desc, row_start, col_start, ACT: gl.constexpr,
                        STORE_Z: gl.constexpr):
    """``glu_dh_from_buffers`` without z's buffer, and the tile's stores: dh1 and dh2 out by TMA
    from the buffers they were written over, then (STORE_Z) z, held in registers in 16 bits
    meanwhile, written over dh1's buffer once dh1's store has read it and stored from there."""
    ROWS: gl.constexpr = g.shape[0] // 2
    row_layout: gl.constexpr = accumulator_layout(g.shape[1])
    g_rows = split_row_halves(g, row_layout)
    z_top = glu_dh_rows(g_rows[0], x1_buf.slice(0, ROWS), x2_buf.slice(0, ROWS), row_layout, ACT)
    z_bottom = glu_dh_rows(g_rows[1], x1_buf.slice(ROWS, ROWS), x2_buf.slice(ROWS, ROWS), row_layout, ACT)
    fence_async_shared()
    _tma_store(dh1_desc, [row_start, col_start], x1_buf)
    _tma_store(dh2_desc, [row_start, col_start], x2_buf)
    if STORE_Z:
        tma.store_wait(1)  # dh1 has left x1_buf
        x1_buf.slice(0, ROWS).store(z_top)
        x1_buf.slice(ROWS, ROWS).store(z_bottom)
        fence_async_shared()
        _tma_store(z_desc, [row_start, col_start], x1_buf)


@gluon.jit
def rotating_glu_dh_consumer(
    h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, h_ready,
    M, N, K,
    CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, ACT: gl.constexpr, STORE_Z: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):
    """Consumer ``CONSUMER`` of ``CONSUMERS`` taking turns over a program's tiles (tiles
    ``CONSUMER, CONSUMER + CONSUMERS, ...``; main loops in tile order, consumer c after
    consumer c - 1, 0 after the last), for the kept-h GLU dh with g = gy @ Wd on the tile
    (``glu_dh_from_buffers``'s formulas). With three, two consumers' epilogues (h in, dh and
    z out) run under the third's main loop. Two buffers per consumer (``c_bufs[2 * CONSUMER
    ...]``): h's halves in, dh1 and dh2 out over them, then z over dh1's once dh1 has left
    (``glu_dh_store_late_z``). The turn barriers' phases are exact for the same reason as
    ``pingpong_mainloop``'s: no consumer runs more than one turn ahead of its predecessor."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = dh1_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0
    x1_buf = c_bufs.index(2 * CONSUMER)
    x2_buf = c_bufs.index(2 * CONSUMER + 1)
    bar = h_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, BLOCK_N), CONSUMERS):
        turn_round = i // CONSUMERS
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        tma.store_wait(0)  # the previous tile's stores have read the buffers
        mbarrier.expect(bar, 2 * h1_desc.block_type.nbytes)
        _tma_load(h1_desc, [row_start, col_start], bar, x1_buf)
        _tma_load(h2_desc, [row_start, col_start], bar, x2_buf)
        # consumer 0's first wait passes on the fresh barrier; the others wait for their predecessor
        mbarrier.wait(turn.index(CONSUMER), (turn_round & 1) ^ FIRST)
        g = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        g, _, last_stage = ring_mma_steps(a_bufs, b_bufs, ready, empty, g, g, i * k_tiles, k_tiles, CONSUMER, STAGES,
                                          True, False, False, b_bufs)
        mbarrier.arrive(turn.index((CONSUMER + 1) % CONSUMERS), count=1)
        g = warpgroup_mma_wait(num_outstanding=0, deps=(g,))
        mbarrier.arrive(empty.index(last_stage), count=1)
        mbarrier.wait(bar, turn_round & 1)
        glu_dh_store_late_z(g, x1_buf, x2_buf, dh1_desc, dh2_desc, z_desc, row_start, col_start, ACT, STORE_Z)
    tma.store_wait(0)


@gluon.jit
def pingpong_glu_dh_wide_consumer(
    h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, h_ready,
    M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of a GLU's backward dh with h kept and g = gy @ Wd
    formed on a tile twice as wide as the epilogue's buffers (``glu_dh_from_buffers``'s
    formulas). Each consumer has three ``[BLOCK_M, HALF_N]`` buffers (x1 and x2 in, dh1, dh2
    and z out), what a 128 x 64 tile of g needs; a 128 x 128
    tile (``TILE_N`` = 2 * HALF_N, from the ring's ``[BLOCK_K, TILE_N]`` weight tiles) reads a
    third less from L2 per output in the main loop, at the same shared memory. So the epilogue runs
    in two column halves: h's tiles for columns ``0 .. HALF_N`` are copied in before the main
    loop (hidden by it), the first half's outputs go out, and once dh1 and dh2 have left the
    buffers (z may still be leaving) the second half's h is copied in and the same follows.
    That copy is a stall of this consumer only; the other consumer's main loop runs under it.
    The in-place rule holds: a tile reads each half of h before writing dh over it.
    """
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    TILE_N: gl.constexpr = b_bufs.type.shape[2]
    HALF_N: gl.constexpr = dh1_desc.block_type.shape[1]
    gl.static_assert(TILE_N == 2 * HALF_N, "the tile of g is two epilogue halves wide")
    x1_buf = c_bufs.index(3 * CONSUMER)
    x2_buf = c_bufs.index(3 * CONSUMER + 1)
    z_buf = c_bufs.index(3 * CONSUMER + 2)
    bar = h_ready.index(CONSUMER)
    h_bytes: gl.constexpr = 2 * h1_desc.block_type.nbytes
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, TILE_N), 2):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, TILE_N, GROUP_M)
        tma.store_wait(0)  # the previous tile's stores have read the buffers
        mbarrier.expect(bar, h_bytes)
        _tma_load(h1_desc, [row_start, col_start], bar, x1_buf)
        _tma_load(h2_desc, [row_start, col_start], bar, x2_buf)
        g = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True,
                              accumulator_layout(TILE_N), False)
        g_halves = split_column_halves(g, accumulator_layout(HALF_N))
        for half in gl.static_range(2):
            half_col = col_start + half * HALF_N
            if half == 1:
                tma.store_wait(1 if STORE_Z else 0)  # dh1 and dh2 have left x1_buf and x2_buf
                mbarrier.expect(bar, h_bytes)
                _tma_load(h1_desc, [row_start, half_col], bar, x1_buf)
                _tma_load(h2_desc, [row_start, half_col], bar, x2_buf)
            mbarrier.wait(bar, half)  # the barrier completes twice per tile: phases 0, 1
            if half == 1:
                tma.store_wait(0)  # the first half's z has left z_buf
            glu_dh_from_buffers(g_halves[half], x1_buf, x2_buf, z_buf, ACT, STORE_Z)
            fence_async_shared()
            _tma_store(dh1_desc, [row_start, half_col], x1_buf)
            _tma_store(dh2_desc, [row_start, half_col], x2_buf)
            if STORE_Z:
                _tma_store(z_desc, [row_start, half_col], z_buf)
    tma.store_wait(0)


@gluon.jit
def pingpong_dpre_consumer(
    w_desc, b_ptr, g_desc, dpre_desc, db_partial_ptr, a_bufs, b_bufs, c_bufs, ready, empty, turn, g_ready,
    M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, STORE_DB: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of a linear layer's backward dpre with only x saved:
    for every second tile, with g = dL/dy,

        pre = x @ W.T + b (the forward's main loop),   dpre = g * act'(pre)

    and, if STORE_DB, the tile's column sums of dpre (fp32, before rounding) into row
    ``row_start // BLOCK_M`` of ``db_partial`` ([row blocks, N]). The g tile is copied (TMA)
    into this consumer's buffer before its main loop, which hides its latency; after it each
    thread reads its elements of g and writes dpre over them (the same elements: no thread
    waits for another), and dpre goes out by TMA. pre never leaves the registers: the
    recompute costs the GEMM, not a round trip of pre through memory and a second kernel.
    """
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    buf = c_bufs.index(CONSUMER)
    bar = g_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, BLOCK_N), 2):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        tma.store_wait(0)  # the previous tile's dpre has left the buffer
        mbarrier.expect(bar, g_desc.block_type.nbytes)
        _tma_load(g_desc, [row_start, col_start], bar, buf)
        pre = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, False, acc_layout,
                                False)
        if HAS_BIAS:  # loaded after the main loop, as in the GLU's recompute dh (fewer spills)
            pre = pre + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
        mbarrier.wait(bar, (i // 2) & 1)
        dpre = buf.load(acc_layout).to(gl.float32) * activation_grad(pre, ACT, False)
        buf.store(dpre.to(dpre_desc.dtype))
        fence_async_shared()
        _tma_store(dpre_desc, [row_start, col_start], buf)
        if STORE_DB:  # rows past M read g = 0: they add nothing
            cols = col_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            gl.store(db_partial_ptr + (row_start // BLOCK_M).to(gl.int64) * N + cols, gl.sum(dpre, axis=0),
                     mask=cols < N)
    tma.store_wait(0)


@gluon.jit
def resident_unit(unit, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HSPLIT):
    """(first row, first column tile, tile count) of a resident-x unit: the column tiles of row
    block ``unit // HSPLIT``, or its ``unit % HSPLIT``-th share of them where HSPLIT > 1."""
    tiles_n = gl.cdiv(N, BLOCK_N)
    per = gl.cdiv(tiles_n, HSPLIT)
    first = (unit % HSPLIT) * per
    return (unit // HSPLIT) * BLOCK_M, first, gl.minimum(tiles_n - first, per)


@gluon.jit
def resident_loader(x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N, HSPLIT,
                    K_TILES: gl.constexpr, STAGES: gl.constexpr):
    """Loader of a resident-x kernel (``resident_consumer``): for each unit of the program (units
    ``program_id + j * num_programs``), its x rows into the ``K_TILES`` chunk buffers, each chunk
    once the previous unit's last tiles are done with it (``x_empty``, phase j - 1), interleaved
    with the unit's first tile's W steps; then W's ``[BLOCK_N, BLOCK_K]`` tiles through the ring,
    one per K step of every tile in order."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    tile = 0  # the program's running tile count, as the consumers keep it
    unit_index = 0
    for unit in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * HSPLIT, gl.num_programs(0)):
        row_start, first, count_tiles = resident_unit(unit, N, BLOCK_M, BLOCK_N, HSPLIT)
        for i in range(count_tiles):
            col_start = (first + i) * BLOCK_N
            for k in range(K_TILES):
                if i == 0:
                    mbarrier.wait(x_empty.index(k), (unit_index & 1) ^ 1)
                    mbarrier.expect(x_ready.index(k), x_desc.block_type.nbytes)
                    _tma_load(x_desc, [row_start, k * BLOCK_K], x_ready.index(k), x_bufs.index(k))
                stage, bar = free_stage(ready, empty, (tile + i) * K_TILES + k, STAGES)
                mbarrier.expect(bar, w_desc.block_type.nbytes)
                _tma_load(w_desc, [col_start, k * BLOCK_K], bar, w_bufs.index(stage))
        tile += count_tiles
        unit_index += 1


@gluon.jit
def resident_mainloop(acc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, turn, t, unit_index, i, count_tiles,
                      CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, K_TILES: gl.constexpr, STAGES: gl.constexpr):
    """acc + x_rows @ W_tile.T for the program's ``t``-th tile, the unit's ``i``-th of
    ``count_tiles`` (``resident_consumer``): waits for this consumer's turn, issues one MMA per
    K step from the resident x chunk and the ring's W stage (keeping one in flight, releasing
    the stage before), passes the turn on after the last, waits for it and frees the ring's
    last stage. The unit's last tile frees each x chunk once its MMA on it is done; the other
    consumers' last tiles of the unit free every chunk after their MMAs (``x_empty`` counts
    one arrival per consumer). Returns the finished accumulator."""
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0
    last = i == count_tiles - 1
    # consumer 0's first wait passes on the fresh barrier; the others wait for their predecessor
    mbarrier.wait(turn.index(CONSUMER), ((t // CONSUMERS) & 1) ^ FIRST)
    prev_stage = 0
    for k in range(K_TILES):
        count = t * K_TILES + k
        stage = count % STAGES
        mbarrier.wait(x_ready.index(k), unit_index & 1)
        mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
        acc = warpgroup_mma(x_bufs.index(k), w_bufs.index(stage).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1, pred=k > 0)
        mbarrier.arrive(x_empty.index(gl.maximum(k - 1, 0)), count=1, pred=(k > 0) & last)
        prev_stage = stage
    mbarrier.arrive(turn.index((CONSUMER + 1) % CONSUMERS), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(empty.index(prev_stage), count=1)
    mbarrier.arrive(x_empty.index(K_TILES - 1), count=1, pred=last)
    if (i >= count_tiles - CONSUMERS) & (i < count_tiles - 1):
        for k in range(K_TILES):
            mbarrier.arrive(x_empty.index(k), count=1)
    return acc


@gluon.jit
def resident_consumer(
    b_ptr, y_desc, x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, turn, buffer_turn, M, N, HSPLIT,
    CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
    BIAS_FIRST: gl.constexpr, K_TILES: gl.constexpr, STAGES: gl.constexpr,
):
    """Consumer ``CONSUMER`` of ``CONSUMERS`` of a resident-x forward, ``y = act(x @ W.T + b)``:
    takes the program's tiles ``CONSUMER, CONSUMER + CONSUMERS, ...`` (counted over its units),
    main loops in tile order (``turn``, as ``rotating_glu_dh_consumer``) with the A operand from
    the unit's resident x chunks, then bias and activation in registers and the tile out in two
    column halves through the one buffer ``c_buf`` that the consumers take in tile order
    (``buffer_turn``; each waits for its stores to have read the buffer before passing it on).
    With BIAS_FIRST the accumulator starts from the bias, loaded while the consumer waits for
    its turn, so the epilogue holds no bias tile (configs.py, ``LINEAR_RESIDENT_BIAS_FIRST``).
    The main loop (``resident_mainloop``) frees a unit's x chunks after its last tiles, so that
    the loader refills them for the next unit while the last main loop runs; every unit has at
    least ``CONSUMERS`` tiles (the host's HSPLIT)."""
    BLOCK_M: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = w_bufs.type.shape[1]
    HALF: gl.constexpr = BLOCK_N // 2
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    half_layout: gl.constexpr = accumulator_layout(HALF)
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0
    tile = 0
    unit_index = 0
    for unit in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * HSPLIT, gl.num_programs(0)):
        row_start, first, count_tiles = resident_unit(unit, N, BLOCK_M, BLOCK_N, HSPLIT)
        for i in range(count_tiles):
            t = tile + i
            if t % CONSUMERS == CONSUMER:
                turn_round = t // CONSUMERS
                col_start = (first + i) * BLOCK_N
                acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
                if HAS_BIAS and BIAS_FIRST:
                    acc = acc + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
                acc = resident_mainloop(acc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, turn, t, unit_index, i,
                                        count_tiles, CONSUMER, CONSUMERS, K_TILES, STAGES)
                if HAS_BIAS and not BIAS_FIRST:  # after the main loop: a bias tile held through it costs registers
                    acc = acc + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
                left, right = split_column_halves(activation(acc, ACT).to(y_desc.dtype), half_layout)
                mbarrier.wait(buffer_turn.index(CONSUMER), (turn_round & 1) ^ FIRST)
                tma_store_tile(y_desc, c_buf, left, row_start, col_start)
                tma_store_tile(y_desc, c_buf, right, row_start, col_start + HALF)
                tma.store_wait(0)
                mbarrier.arrive(buffer_turn.index((CONSUMER + 1) % CONSUMERS), count=1)
        tile += count_tiles
        unit_index += 1


@gluon.jit
def resident_setup(x_desc, w_desc, y_desc, K_TILES: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """Shared memory of a resident-x kernel: ``K_TILES`` x chunk buffers (x_desc's block shape)
    with a ready and an empty barrier each (the empty one counts every consumer), the W ring
    (``STAGES`` tiles of w_desc's block), one output buffer (y_desc's block) and two barriers
    per consumer: its main-loop turn and its turn at the output buffer."""
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [K_TILES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_buf = gl.allocate_shared_memory(y_desc.dtype, y_desc.block_type.shape, y_desc.layout)
    x_ready = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    x_empty = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(K_TILES):
        mbarrier.init(x_ready.index(k), count=1)
        mbarrier.init(x_empty.index(k), count=CONSUMERS)
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
    return (x_bufs, w_bufs, c_buf, x_ready, x_empty, ready, empty, consumer_barriers(CONSUMERS),
            consumer_barriers(CONSUMERS))


@gluon.jit
def pingpong_setup(x_desc, w_desc, out_desc, STAGES: gl.constexpr, PAIRED: gl.constexpr, OUT_BUFS: gl.constexpr,
                   COOPERATIVE: gl.constexpr, CONSUMERS: gl.constexpr = 2):
    """Shared memory of a ping-pong kernel: the ring (x tiles of ``x_desc``'s block shape,
    weight tiles of ``w_desc``'s, ``[2 * BLOCK_N, BLOCK_K]`` if PAIRED), ``OUT_BUFS`` output
    buffers per consumer (consumer c's are ``c * OUT_BUFS ...``; of ``out_desc``'s block shape,
    dtype and layout), barriers (with COOPERATIVE, a stage is freed by both consumers; one turn
    barrier per consumer, which its predecessor arrives on after its main loop)."""
    BLOCK_M: gl.constexpr = out_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = out_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    if PAIRED:
        b_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, 2 * BLOCK_N, w_desc.block_type.shape[1]],
                                           w_desc.layout)
    else:
        b_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_bufs = gl.allocate_shared_memory(out_desc.dtype, [CONSUMERS * OUT_BUFS, BLOCK_M, BLOCK_N], out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = consumer_barriers(CONSUMERS)
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=2 if COOPERATIVE else 1)
    return a_bufs, b_bufs, c_bufs, ready, empty, turn


@gluon.jit
def consumer_barriers(CONSUMERS: gl.constexpr = 2):
    """One mbarrier per consumer, each with one arrival: a turn (``pingpong_setup``), or what the
    consumer copies in besides the ring (e.g. a dh kernel's tile of h or g)."""
    bars = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    for consumer in gl.static_range(CONSUMERS):
        mbarrier.init(bars.index(consumer), count=1)
    return bars


@gluon.constexpr_function
def accumulator_layout(block_n):
    """The wgmma accumulator layout of one warpgroup's [BLOCK_M, BLOCK_N] fp32 tile."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, block_n, 16])
