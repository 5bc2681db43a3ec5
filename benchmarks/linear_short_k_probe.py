"""Other forms of the linear forward at a short K: x kept in shared memory, three consumers,
and cuBLASLt's fused epilogue.

    PYTHONPATH=src python3 benchmarks/linear_short_k_probe.py [--rounds 3] [--shapes MxKxN,...]
        [--acts gelu_tanh,identity] [--stages 3,4] [--hsplits H,...] [--rotating 128x4,64x7]

Results: benchmarks/results/linear_short_k_H200_2026-11-29/ (neither form alone beat the library's
kernel) and benchmarks/results/linear_resident_H200_2026-11-29/ (x resident with three consumers
and one shared output buffer, ``--stages 5s3``, did: it is the library's resident form now,
``linear_act_fwd_resident_kernel``).

Why: issue 4's linear forward at 16384 x 512 -> 1792 (gelu_tanh, bias) is 1.067x the bare cuBLAS
GEMM on an H200 (target 1.05x). The library's kernel there (``linear_act_fwd_pingpong_kernel``,
128 x 128 tiles, two consumers alternating) reads for every tile its 128 rows of x over all of K
(128 KB at K = 512) and a [128, K] slice of W (128 KB): half of the L2-to-SM bytes are x, read
again for each of the 14 column tiles of the same rows. ncu put a third of the tensor pipe's
time idle at K = 512 (NOTES.md, "The linear forward at K = 512 under the power cap").

1. Resident x (``linear_fwd_resident_kernel``). Each program owns one 128-row block at a time
(or a share of its column tiles, ``HSPLIT`` programs per row block where there are fewer row
blocks than SMs; persistent over such units where there are more): a loader warp copies the
block's x rows into shared memory once, as K / 64 chunks of [128, 64] with a barrier each (the
first MMA waits for the first chunk only), and streams W's [128, 64] tiles through a ring; two
consumers take turns on the unit's tiles as the library's do (main loop, then bias, activation
and the stores, which overlap the other consumer's main loop). Per output element only W's
bytes move (half of the library's). The x chunks of a unit are freed for the next unit's by
both consumers' last tiles: the last tile's consumer releases chunk k as its MMA on k
completes, the other after its last MMAs. Shared memory at K = 512: x 128 KB, 4 ring stages
of W 64 KB, and one [128, 64] output buffer per consumer (32 KB; the epilogue stores a tile in
two column halves) = 224 KB.

2. Three consumers taking turns (``linear_fwd_rotating_kernel``), as the SwiGLU dh kernel at
K <= 512 does (``glu_bwd_dh_rotating_kernel``): with gelu_tanh the forward takes 1.06x the
identity's time at K = 512 (the identity's is the GEMM's); if that is an epilogue outlasting
the other consumer's main loop, with three consumers two epilogues run under each main loop.
The library's loader and ring; one output buffer per consumer. ``--rotating BLOCK_NxSTAGES``:
128 x 128 tiles with 4 stages of 32 KB (224 KB with the three 32 KB buffers), or 128 x 64
tiles with 7 stages of 24 KB (216 KB). 16 warps: the consumers take 160 registers a thread.

3. For gelu_tanh and relu, cuBLASLt's fused bias + activation epilogue
(``torch._addmm_activation``), alone and with a copy into a fixed output for the bit check.

For each shape and activation, in CUDA graphs (us, interleaved rounds, medians): cuBLAS's
``x @ W.T`` (no bias), the library's alternating kernel, the resident kernel at each
``--stages`` (and ``--hsplits``), the rotating kernel at each ``--rotating``, cuBLASLt's
epilogue; each one's y against the library's (bits, max abs difference) and each one's and the library's relative error
against a float64 reference (``||y - ref|| / ||ref||``).
"""

import argparse
import re

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma_wait

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, max_abs_difference, write_record
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.pingpong import (
    accumulator_layout, consumer_barriers, pingpong_loader, pingpong_setup, program_tiles, resident_loader,
    resident_mainloop, resident_unit, ring_mma_steps, split_column_halves, tile_bias, tile_start, tma_store_tile,
)
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.ops.linear_act import LINEAR_FORWARD_PINGPONG_FORMS, linear_act_reference


@gluon.jit
def probe_resident_consumer(b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty, ready, empty,
                            turn, buffer_turn, M, N, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
                            K_TILES: gl.constexpr, HSPLIT: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                            STAGES: gl.constexpr, EPILOGUE: gl.constexpr, BIAS_INIT: gl.constexpr):
    """The library's resident_consumer (kernels/pingpong.py) with the probe's variants: two or
    three consumers, the epilogue's stores (EPILOGUE), the bias first (BIAS_INIT)."""
    BLOCK_M: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = w_bufs.type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    half_layout: gl.constexpr = accumulator_layout(BLOCK_N // 2)
    quarter_layout: gl.constexpr = accumulator_layout(BLOCK_N // 4)
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0
    # BIAS_INIT: the accumulator starts from the bias (no bias registers in the epilogue; its sum in
    # another order than the library's); otherwise with three consumers the bias is loaded after the
    # main loop (held through it, it would cost registers), with two before it as the library does
    BIAS_AFTER: gl.constexpr = CONSUMERS > 2 and not BIAS_INIT
    c_buf = c_bufs.index(0 if EPILOGUE == "shared" else CONSUMER)
    units = gl.cdiv(M, BLOCK_M) * HSPLIT
    tile = 0
    unit_index = 0
    for unit in range(gl.program_id(0), units, gl.num_programs(0)):
        row_start, first, count_tiles = resident_unit(unit, N, BLOCK_M, BLOCK_N, HSPLIT)
        for i in range(count_tiles):
            t = tile + i
            if t % CONSUMERS == CONSUMER:
                turn_round = t // CONSUMERS
                col_start = (first + i) * BLOCK_N
                if HAS_BIAS and not BIAS_AFTER:
                    bias = tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
                acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
                if HAS_BIAS and BIAS_INIT:
                    acc = acc + bias
                acc = resident_mainloop(acc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, turn, t, unit_index, i,
                                        count_tiles, CONSUMER, CONSUMERS, K_TILES, STAGES)
                if HAS_BIAS and not BIAS_INIT:
                    if BIAS_AFTER:
                        acc = acc + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
                    else:
                        acc = acc + bias
                if EPILOGUE == "shared":  # one [BLOCK_M, BLOCK_N / 2] buffer for all consumers, in tile order
                    HALF: gl.constexpr = BLOCK_N // 2
                    left, right = split_column_halves(activation(acc, ACT).to(y_desc.dtype), half_layout)
                    mbarrier.wait(buffer_turn.index(CONSUMER), (turn_round & 1) ^ FIRST)
                    tma_store_tile(y_desc, c_buf, left, row_start, col_start)
                    tma_store_tile(y_desc, c_buf, right, row_start, col_start + HALF)
                    tma.store_wait(0)
                    mbarrier.arrive(buffer_turn.index((CONSUMER + 1) % CONSUMERS), count=1)
                elif EPILOGUE == "registers":  # no shared memory: stores from the accumulator's layout, by halves
                    HALF_N: gl.constexpr = BLOCK_N // 2
                    rows = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, half_layout))
                    cols = col_start + gl.arange(0, HALF_N, layout=gl.SliceLayout(0, half_layout))
                    offsets = rows[:, None] * stride_ym + cols[None, :]  # int32: the host checks M * N < 2^31
                    mask = (rows < M)[:, None] & (cols < N)[None, :]
                    left, right = split_column_halves(acc, half_layout)
                    gl.store(y_ptr + offsets, activation(left, ACT).to(y_desc.dtype), mask=mask)
                    gl.store(y_ptr + offsets + HALF_N, activation(right, ACT).to(y_desc.dtype),
                             mask=mask & (cols + HALF_N < N)[None, :])
                elif EPILOGUE == "quarters":  # one [BLOCK_M, BLOCK_N / 4] buffer per consumer, four stores
                    QUARTER: gl.constexpr = BLOCK_N // 4
                    left, right = split_column_halves(acc, half_layout)
                    q0, q1 = split_column_halves(left, quarter_layout)
                    q2, q3 = split_column_halves(right, quarter_layout)
                    tma_store_tile(y_desc, c_buf, activation(q0, ACT), row_start, col_start)
                    tma_store_tile(y_desc, c_buf, activation(q1, ACT), row_start, col_start + QUARTER)
                    tma_store_tile(y_desc, c_buf, activation(q2, ACT), row_start, col_start + 2 * QUARTER)
                    tma_store_tile(y_desc, c_buf, activation(q3, ACT), row_start, col_start + 3 * QUARTER)
                else:  # one [BLOCK_M, BLOCK_N / 2] buffer per consumer, two stores
                    HALF: gl.constexpr = BLOCK_N // 2
                    left, right = split_column_halves(acc, half_layout)
                    tma_store_tile(y_desc, c_buf, activation(left, ACT), row_start, col_start)
                    tma_store_tile(y_desc, c_buf, activation(right, ACT), row_start, col_start + HALF)
        tile += count_tiles
        unit_index += 1
    tma.store_wait(0)


@gluon.jit
def linear_fwd_resident_kernel(x_desc, w_desc, b_ptr, y_desc, y_ptr, stride_ym, M, N,
                               K_TILES: gl.constexpr, HSPLIT: gl.constexpr, ACT: gl.constexpr,
                               HAS_BIAS: gl.constexpr, STAGES: gl.constexpr, EPILOGUE: gl.constexpr,
                               CONSUMERS: gl.constexpr, BIAS_INIT: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [K_TILES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    if EPILOGUE == "registers":  # no output buffers (the consumers do not touch these)
        c_bufs = w_bufs
    else:
        c_bufs = gl.allocate_shared_memory(y_desc.dtype, [1 if EPILOGUE == "shared" else CONSUMERS]
                                           + y_desc.block_type.shape, y_desc.layout)
    x_ready = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    x_empty = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(K_TILES):
        mbarrier.init(x_ready.index(k), count=1)
        mbarrier.init(x_empty.index(k), count=CONSUMERS)  # every consumer's last tile of a unit
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
    turn, buffer_turn = consumer_barriers(CONSUMERS), consumer_barriers(CONSUMERS)
    if CONSUMERS == 3:
        gl.warp_specialize([
            (probe_resident_consumer, (b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty,
                                       ready, empty, turn, buffer_turn, M, N, 0, 3, K_TILES, HSPLIT, ACT, HAS_BIAS,
                                       STAGES, EPILOGUE, BIAS_INIT)),
            (probe_resident_consumer, (b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty,
                                       ready, empty, turn, buffer_turn, M, N, 1, 3, K_TILES, HSPLIT, ACT, HAS_BIAS,
                                       STAGES, EPILOGUE, BIAS_INIT)),
            (probe_resident_consumer, (b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty,
                                       ready, empty, turn, buffer_turn, M, N, 2, 3, K_TILES, HSPLIT, ACT, HAS_BIAS,
                                       STAGES, EPILOGUE, BIAS_INIT)),
            (resident_loader, (x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N, HSPLIT,
                               K_TILES, STAGES)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([
            (probe_resident_consumer, (b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty,
                                       ready, empty, turn, buffer_turn, M, N, 0, 2, K_TILES, HSPLIT, ACT, HAS_BIAS,
                                       STAGES, EPILOGUE, BIAS_INIT)),
            (probe_resident_consumer, (b_ptr, y_desc, y_ptr, stride_ym, x_bufs, w_bufs, c_bufs, x_ready, x_empty,
                                       ready, empty, turn, buffer_turn, M, N, 1, 2, K_TILES, HSPLIT, ACT, HAS_BIAS,
                                       STAGES, EPILOGUE, BIAS_INIT)),
            (resident_loader, (x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N, HSPLIT,
                               K_TILES, STAGES)),
        ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@gluon.jit
def rotating_linear_consumer(b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K,
                             CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, ACT: gl.constexpr,
                             HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """pingpong_consumer (y alone, not paired) over tiles CONSUMER, CONSUMER + CONSUMERS, ...,
    main loops in tile order, as rotating_glu_dh_consumer takes its turns."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0
    c_buf = c_bufs.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, BLOCK_N), CONSUMERS):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        mbarrier.wait(turn.index(CONSUMER), ((i // CONSUMERS) & 1) ^ FIRST)
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        acc, _, last_stage = ring_mma_steps(a_bufs, b_bufs, ready, empty, acc, acc, i * k_tiles, k_tiles, CONSUMER,
                                            STAGES, False, False, False, b_bufs)
        mbarrier.arrive(turn.index((CONSUMER + 1) % CONSUMERS), count=1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(last_stage), count=1)
        if HAS_BIAS:  # loaded here: held through the main loop it would cost registers
            acc = acc + tile_bias(b_ptr, col_start, N, BLOCK_N, acc_layout)
        tma_store_tile(y_desc, c_buf, activation(acc, ACT), row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def linear_fwd_rotating_kernel(x_desc, w_desc, b_ptr, y_desc, M, N, K, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                               GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    CONSUMERS: gl.constexpr = 3
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(x_desc, w_desc, y_desc, STAGES, False, 1, False,
                                                                CONSUMERS)
    gl.warp_specialize([
        (rotating_linear_consumer, (b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K, 0, CONSUMERS,
                                    ACT, HAS_BIAS, GROUP_M, STAGES)),
        (rotating_linear_consumer, (b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K, 1, CONSUMERS,
                                    ACT, HAS_BIAS, GROUP_M, STAGES)),
        (rotating_linear_consumer, (b_ptr, y_desc, a_bufs, b_bufs, c_bufs, ready, empty, turn, M, N, K, 2, CONSUMERS,
                                    ACT, HAS_BIAS, GROUP_M, STAGES)),
        (pingpong_loader, (x_desc, w_desc, w_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES,
                           False, False, x_desc, w_desc, 0)),
    ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])


ROTATING_CONFIG = dict(BLOCK_M=128, BLOCK_K=64, GROUP_M=8, CONSUMER_REGS=160, LOADER_REGS=24, num_warps=4,
                       maxnreg=128)
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
# by consumer count: two as the library's kernel, three as the rotating kernel (16 warps at launch)
RESIDENT_CONFIGS = {2: dict(CONSUMER_REGS=232, LOADER_REGS=40, num_warps=4, maxnreg=168),
                    3: dict(CONSUMER_REGS=160, LOADER_REGS=24, num_warps=4, maxnreg=128)}


def resident_hsplit(m, n, sms, consumers):
    """Programs per row block: enough units for the SMs where row blocks are fewer, each unit
    at least a tile per consumer (the x chunks' release counts every consumer)."""
    row_blocks = triton.cdiv(m, BLOCK_M)
    tiles_n = triton.cdiv(n, BLOCK_N)
    return max(1, min(tiles_n // consumers, round(sms / row_blocks)))


EPILOGUE_WIDTHS = {"halves": BLOCK_N // 2, "quarters": BLOCK_N // 4, "registers": BLOCK_N // 2,
                   "shared": BLOCK_N // 2}


def resident_call(x, w, b, y, act, stages, hsplit, epilogue="halves", consumers=2, bias_init=False):
    m, k = x.shape
    n = w.shape[0]
    assert triton.cdiv(n, BLOCK_N) >= consumers * hsplit, "each unit needs a tile per consumer"
    assert m * y.stride(0) < 2**31, "the register stores' offsets are int32"
    units = triton.cdiv(m, BLOCK_M) * hsplit
    launch(linear_fwd_resident_kernel, (min(num_sms(x), units),), x_desc=x, w_desc=w, b_ptr=b, y_desc=y, y_ptr=y,
           stride_ym=y.stride(0), M=m, N=n, K_TILES=triton.cdiv(k, BLOCK_K), HSPLIT=hsplit, ACT=act, HAS_BIAS=True,
           STAGES=stages, EPILOGUE=epilogue, CONSUMERS=consumers, BIAS_INIT=bias_init, **RESIDENT_CONFIGS[consumers],
           descriptor_blocks=dict(x_desc=(BLOCK_M, BLOCK_K), w_desc=(BLOCK_N, BLOCK_K),
                                  y_desc=(BLOCK_M, EPILOGUE_WIDTHS[epilogue])))


def shape_calls(m, k, n, act, stage_counts, hsplits, rotating, cublaslt):
    gen = torch.Generator(device="cuda").manual_seed(m + k + n)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
    sms = num_sms(x)
    y_lib = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    calls = {"gemm": lambda: torch.mm(x, w.t()),
             "library": lambda: launch_pingpong(
                 linear_act_fwd_pingpong_kernel, LINEAR_FORWARD_PINGPONG_FORMS["alternating"], m, n, sms,
                 {"x_desc": x}, {"w_desc": w}, {"y_desc": y_lib, "pre_desc": y_lib}, b_ptr=b, M=m, N=n, K=k,
                 ACT=act, HAS_BIAS=True, STORE_PRE=False)}
    outputs = {}
    # cuBLASLt's fused bias + activation epilogue (its GELU: the tanh form)
    if act in ("gelu_tanh", "relu") and cublaslt:
        y_lt = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        calls["cublaslt epilogue"] = lambda: y_lt.copy_(torch._addmm_activation(b, x, w.t(),
                                                                                 use_gelu=act == "gelu_tanh"))
        outputs["cublaslt epilogue"] = y_lt
        calls["cublaslt epilogue (no copy)"] = lambda: torch._addmm_activation(b, x, w.t(), use_gelu=act == "gelu_tanh")
    for stages, epilogue, consumers, bias_init in stage_counts:
        for hsplit in hsplits or [resident_hsplit(m, n, sms, consumers)]:
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            name = (f"resident s{stages} h{hsplit}" + ("" if epilogue == "halves" else f" {epilogue}")
                    + ("" if consumers == 2 else f" c{consumers}") + (" bias first" if bias_init else ""))
            calls[name] = lambda stages=stages, hsplit=hsplit, y=y, epilogue=epilogue, consumers=consumers, \
                bias_init=bias_init: resident_call(x, w, b, y, act, stages, hsplit, epilogue, consumers, bias_init)
            outputs[name] = y
    for block_n, stages in rotating:
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        config = dict(ROTATING_CONFIG, BLOCK_N=block_n, STAGES=stages)
        name = f"rotating {block_n}x{stages}"
        calls[name] = lambda config=config, y=y: launch_pingpong(
            linear_fwd_rotating_kernel, config, m, n, sms, {"x_desc": x}, {"w_desc": w}, {"y_desc": y}, b_ptr=b,
            M=m, N=n, K=k, ACT=act, HAS_BIAS=True)
        outputs[name] = y
    return calls, y_lib, outputs, (x, w, b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="16384x512x1792,8192x512x1792,65536x512x1792,16384x256x1024")
    parser.add_argument("--acts", default="gelu_tanh,identity")
    parser.add_argument("--stages", default="4,5q,5s,5s3",
                        help="the resident kernel's ring stages, each with its epilogue and consumer count "
                             "(default 2): "
                             "two column halves through a [128, 64] buffer per consumer (no suffix), four quarters "
                             "through a [128, 32] one (q), stores from registers, no buffer (r), or halves through one "
                             "[128, 64] buffer that the consumers take in tile order (s); i: the accumulator starts "
                             "from the bias; e.g. 5s3i")
    parser.add_argument("--hsplits", default="", help="programs per row block (default: fill the SMs)")
    parser.add_argument("--rotating", default="128x4,64x7", help="BLOCK_NxSTAGES of the three-consumer kernel")
    parser.add_argument("--cublaslt", type=int, default=1, help="also time cuBLASLt's fused epilogue (0: not)")
    args = parser.parse_args()
    rotating = [tuple(int(v) for v in text.split("x")) for text in args.rotating.split(",") if text]
    epilogues = {"": "halves", "q": "quarters", "r": "registers", "s": "shared"}
    stage_counts = []
    for text in args.stages.split(","):
        if text:
            stages, letter, consumers, bias_init = re.fullmatch(r"(\d+)([qrs]?)(\d?)(i?)", text).groups()
            stage_counts.append((int(stages), epilogues[letter], int(consumers or 2), bias_init == "i"))
    hsplits = [int(s) for s in args.hsplits.split(",") if s]
    rows = []
    for text in args.shapes.split(","):
        m, k, n = (int(v) for v in text.split("x"))
        for act in args.acts.split(","):
            calls, y_lib, outputs, inputs = shape_calls(m, k, n, act, stage_counts, hsplits, rotating, args.cublaslt)
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            reference = linear_act_reference(*(t.double() for t in inputs), act)
            relerr = lambda y: ((y.double() - reference).norm() / reference.norm()).item()  # noqa: E731
            checks = {name: dict(same_bits=torch.equal(y, y_lib), maxdiff=max_abs_difference([(y, y_lib)]),
                                 relerr=relerr(y)) for name, y in outputs.items()}
            checks["library"] = dict(relerr=relerr(y_lib))
            replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
            row = interleaved_us_row(replays, args.rounds, shape=text, act=act)
            row["checks"] = checks
            row["ratios to the GEMM"] = {name: row[name] / row["gemm"] for name in calls if name != "gemm"}
            print("   ", checks, {name: round(v, 3) for name, v in row["ratios to the GEMM"].items()}, flush=True)
            rows.append(row)
    write_record("linear_short_k_probe", rows=rows)


if __name__ == "__main__":
    main()
