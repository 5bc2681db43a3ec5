"""Other forms of the linear forward at a short K: x kept in shared memory, three consumers,
and cuBLASLt's fused epilogue.

    PYTHONPATH=src python3 benchmarks/linear_short_k_probe.py [--rounds 3] [--shapes MxKxN,...]
        [--acts gelu_tanh,identity] [--stages 3,4] [--hsplits H,...] [--rotating 128x4,64x7]

Results: benchmarks/results/linear_short_k_H200_2026-11-29/ (neither kernel beat the library's).

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
epilogue; each one's y against the library's (bits, max abs difference).
"""

import argparse

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import interleaved_us_row, max_abs_difference, write_record
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.pingpong import (
    _tma_load, accumulator_layout, free_stage, pingpong_loader, pingpong_setup, program_tiles, ring_mma_steps,
    split_column_halves, tile_bias, tile_start, tma_store_tile,
)
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.ops.linear_act import LINEAR_FORWARD_PINGPONG_FORMS


@gluon.jit
def unit_tiles(unit, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HSPLIT: gl.constexpr):
    """(first row, first column tile, tile count) of a unit: a row block's tiles, or with HSPLIT a
    share of them."""
    tiles_n = gl.cdiv(N, BLOCK_N)
    per = gl.cdiv(tiles_n, HSPLIT)
    first = (unit % HSPLIT) * per
    return (unit // HSPLIT) * BLOCK_M, first, gl.minimum(tiles_n - first, per)


@gluon.jit
def resident_loader(x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N,
                    K_TILES: gl.constexpr, HSPLIT: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    units = gl.cdiv(M, BLOCK_M) * HSPLIT
    tile = 0  # the program's running tile count: the consumers compute the same
    unit_index = 0
    for unit in range(gl.program_id(0), units, gl.num_programs(0)):
        row_start, first, count_tiles = unit_tiles(unit, N, BLOCK_M, BLOCK_N, HSPLIT)
        for i in range(count_tiles):
            col_start = (first + i) * BLOCK_N
            for k in range(K_TILES):
                if i == 0:  # the unit's x chunk, once the previous unit's last tiles are done with it
                    mbarrier.wait(x_empty.index(k), (unit_index & 1) ^ 1)
                    mbarrier.expect(x_ready.index(k), x_desc.block_type.nbytes)
                    _tma_load(x_desc, [row_start, k * BLOCK_K], x_ready.index(k), x_bufs.index(k))
                stage, bar = free_stage(ready, empty, (tile + i) * K_TILES + k, STAGES)
                mbarrier.expect(bar, w_desc.block_type.nbytes)
                _tma_load(w_desc, [col_start, k * BLOCK_K], bar, w_bufs.index(stage))
        tile += count_tiles
        unit_index += 1


@gluon.jit
def resident_consumer(b_ptr, y_desc, x_bufs, w_bufs, c_bufs, x_ready, x_empty, ready, empty, turn, M, N,
                      CONSUMER: gl.constexpr, K_TILES: gl.constexpr, HSPLIT: gl.constexpr, ACT: gl.constexpr,
                      HAS_BIAS: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = w_bufs.type.shape[1]
    HALF: gl.constexpr = y_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    half_layout: gl.constexpr = accumulator_layout(HALF)
    c_buf = c_bufs.index(CONSUMER)
    units = gl.cdiv(M, BLOCK_M) * HSPLIT
    tile = 0
    unit_index = 0
    for unit in range(gl.program_id(0), units, gl.num_programs(0)):
        row_start, first, count_tiles = unit_tiles(unit, N, BLOCK_M, BLOCK_N, HSPLIT)
        for i in range(count_tiles):
            t = tile + i
            if t % 2 == CONSUMER:
                col_start = (first + i) * BLOCK_N
                last = i == count_tiles - 1
                if HAS_BIAS:
                    bias_left = tile_bias(b_ptr, col_start, N, HALF, half_layout)
                    bias_right = tile_bias(b_ptr, col_start + HALF, N, HALF, half_layout)
                # consumer 0's first wait passes on the fresh barrier; consumer 1's waits for consumer 0
                mbarrier.wait(turn.index(CONSUMER), ((t // 2) & 1) ^ (1 - CONSUMER))
                acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
                prev_stage = 0
                for k in range(K_TILES):
                    count = t * K_TILES + k
                    stage = count % STAGES
                    mbarrier.wait(x_ready.index(k), unit_index & 1)
                    mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
                    acc = warpgroup_mma(x_bufs.index(k), w_bufs.index(stage).permute((1, 0)), acc, is_async=True)
                    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                    mbarrier.arrive(empty.index(prev_stage), count=1, pred=k > 0)
                    # the unit's last tile: chunk k - 1's last MMA is done
                    mbarrier.arrive(x_empty.index(gl.maximum(k - 1, 0)), count=1, pred=(k > 0) & last)
                    prev_stage = stage
                mbarrier.arrive(turn.index(1 - CONSUMER), count=1)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(empty.index(prev_stage), count=1)
                mbarrier.arrive(x_empty.index(K_TILES - 1), count=1, pred=last)
                if i == count_tiles - 2:  # the other consumer's last tile of the unit: every chunk
                    for k in range(K_TILES):
                        mbarrier.arrive(x_empty.index(k), count=1)
                left, right = split_column_halves(acc, half_layout)
                if HAS_BIAS:
                    left = left + bias_left
                    right = right + bias_right
                tma_store_tile(y_desc, c_buf, activation(left, ACT), row_start, col_start)
                tma_store_tile(y_desc, c_buf, activation(right, ACT), row_start, col_start + HALF)
        tile += count_tiles
        unit_index += 1
    tma.store_wait(0)


@gluon.jit
def linear_fwd_resident_kernel(x_desc, w_desc, b_ptr, y_desc, M, N,
                               K_TILES: gl.constexpr, HSPLIT: gl.constexpr, ACT: gl.constexpr,
                               HAS_BIAS: gl.constexpr, STAGES: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [K_TILES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_bufs = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
    x_ready = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    x_empty = gl.allocate_shared_memory(gl.int64, [K_TILES, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(K_TILES):
        mbarrier.init(x_ready.index(k), count=1)
        mbarrier.init(x_empty.index(k), count=2)  # both consumers' last tiles of a unit
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
    for consumer in gl.static_range(2):
        mbarrier.init(turn.index(consumer), count=1)
    gl.warp_specialize([
        (resident_consumer, (b_ptr, y_desc, x_bufs, w_bufs, c_bufs, x_ready, x_empty, ready, empty, turn, M, N, 0,
                             K_TILES, HSPLIT, ACT, HAS_BIAS, STAGES)),
        (resident_consumer, (b_ptr, y_desc, x_bufs, w_bufs, c_bufs, x_ready, x_empty, ready, empty, turn, M, N, 1,
                             K_TILES, HSPLIT, ACT, HAS_BIAS, STAGES)),
        (resident_loader, (x_desc, w_desc, x_bufs, w_bufs, x_ready, x_empty, ready, empty, M, N, K_TILES, HSPLIT,
                           STAGES)),
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
CONFIG = dict(CONSUMER_REGS=232, LOADER_REGS=40, num_warps=4, maxnreg=168)


def resident_hsplit(m, n, sms):
    """Programs per row block: enough units for the SMs where row blocks are fewer, each unit
    at least two tiles (one per consumer: the x chunks' release counts both)."""
    row_blocks = triton.cdiv(m, BLOCK_M)
    tiles_n = triton.cdiv(n, BLOCK_N)
    return max(1, min(tiles_n // 2, round(sms / row_blocks)))


def resident_call(x, w, b, y, act, stages, hsplit):
    m, k = x.shape
    n = w.shape[0]
    assert triton.cdiv(n, BLOCK_N) >= 2 * hsplit, "each unit needs a tile per consumer"
    units = triton.cdiv(m, BLOCK_M) * hsplit
    launch(linear_fwd_resident_kernel, (min(num_sms(x), units),), x_desc=x, w_desc=w, b_ptr=b, y_desc=y, M=m, N=n,
           K_TILES=triton.cdiv(k, BLOCK_K), HSPLIT=hsplit, ACT=act, HAS_BIAS=True, STAGES=stages, **CONFIG,
           descriptor_blocks=dict(x_desc=(BLOCK_M, BLOCK_K), w_desc=(BLOCK_N, BLOCK_K),
                                  y_desc=(BLOCK_M, BLOCK_N // 2)))


def shape_calls(m, k, n, act, stage_counts, hsplits, rotating):
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
    if act in ("gelu_tanh", "relu"):  # cuBLASLt's fused bias + activation epilogue (its GELU: the tanh form)
        y_lt = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        calls["cublaslt epilogue"] = lambda: y_lt.copy_(torch._addmm_activation(b, x, w.t(),
                                                                                 use_gelu=act == "gelu_tanh"))
        outputs["cublaslt epilogue"] = y_lt
        calls["cublaslt epilogue (no copy)"] = lambda: torch._addmm_activation(b, x, w.t(), use_gelu=act == "gelu_tanh")
    for stages in stage_counts:
        for hsplit in hsplits or [resident_hsplit(m, n, sms)]:
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            name = f"resident s{stages} h{hsplit}"
            calls[name] = lambda stages=stages, hsplit=hsplit, y=y: resident_call(x, w, b, y, act, stages, hsplit)
            outputs[name] = y
    for block_n, stages in rotating:
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        config = dict(ROTATING_CONFIG, BLOCK_N=block_n, STAGES=stages)
        name = f"rotating {block_n}x{stages}"
        calls[name] = lambda config=config, y=y: launch_pingpong(
            linear_fwd_rotating_kernel, config, m, n, sms, {"x_desc": x}, {"w_desc": w}, {"y_desc": y}, b_ptr=b,
            M=m, N=n, K=k, ACT=act, HAS_BIAS=True)
        outputs[name] = y
    return calls, y_lib, outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="16384x512x1792,8192x512x1792,65536x512x1792,16384x256x1024")
    parser.add_argument("--acts", default="gelu_tanh,identity")
    parser.add_argument("--stages", default="3,4")
    parser.add_argument("--hsplits", default="", help="programs per row block (default: fill the SMs)")
    parser.add_argument("--rotating", default="128x4,64x7", help="BLOCK_NxSTAGES of the three-consumer kernel")
    args = parser.parse_args()
    rotating = [tuple(int(v) for v in text.split("x")) for text in args.rotating.split(",") if text]
    stage_counts = [int(s) for s in args.stages.split(",") if s]
    hsplits = [int(s) for s in args.hsplits.split(",") if s]
    rows = []
    for text in args.shapes.split(","):
        m, k, n = (int(v) for v in text.split("x"))
        for act in args.acts.split(","):
            calls, y_lib, outputs = shape_calls(m, k, n, act, stage_counts, hsplits, rotating)
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            checks = {name: dict(same_bits=torch.equal(y, y_lib), maxdiff=max_abs_difference([(y, y_lib)]))
                      for name, y in outputs.items()}
            replays = {name: capture_cuda_graph(call)[0].replay for name, call in calls.items()}
            row = interleaved_us_row(replays, args.rounds, shape=text, act=act)
            row["checks"] = checks
            row["ratios to the GEMM"] = {name: row[name] / row["gemm"] for name in calls if name != "gemm"}
            print("   ", checks, {name: round(v, 3) for name, v in row["ratios to the GEMM"].items()}, flush=True)
            rows.append(row)
    write_record("linear_short_k_probe", rows=rows)


if __name__ == "__main__":
    main()
