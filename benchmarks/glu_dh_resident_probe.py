"""SwiGLU's store-mode dh at a short K with each program's rows of gy kept in shared memory.

    python benchmarks/glu_dh_resident_probe.py     (writes $OUT/glu_dh_resident_probe.json)

The library's kernel at K <= 512 (``glu_bwd_dh_rotating_kernel``) reads, for every 128 x 64
tile of g = gy @ Wd, the tile's 128 rows of gy over all of K (128 KB at K = 512) and a
[K, 64] slice of Wd (64 KB), besides h's tile in (32 KB) and dh's and z's out (48 KB): 16 of
its 34 bytes per output element are gy, read again for each of the hidden / 64 tiles of the
same rows. The dh kernel and the dW_down probes of 2026-11-29 both ran at about 9 TB/s of such
traffic (NOTES.md, "SwiGLU's dW_down with z formed from h"), as if that were their bound.

Here each program owns one 128-row block (or a share of its tiles, ``HSPLIT`` programs per row
block where there are fewer row blocks than SMs): a loader warp copies the block's gy rows into
shared memory once ([K / 64] buffers of [128, 64]: 128 KB at K = 512), then streams Wd's
[64, 64] tiles through a ring for each tile; two consumers take turns on the block's tiles
(main loop from the resident gy, then the rotating kernel's epilogue: h in, dh1 and dh2 out
over it, z out over dh1's buffer once dh1 has left), so per output element only Wd and the
epilogue's bytes move (18 of 34).

For each shape, in CUDA graphs (us): the library's call and this kernel, with z stored and
without; cuBLAS's g alone for scale; this kernel's dh and z against the library's (max abs
difference).
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fusedmlp.bench.harness import (
    graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, swiglu_dh_library, write_sweep,
)
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.pingpong import _tma_load, accumulator_layout, free_stage, glu_dh_store_late_z
from fusedmlp.ops._common import num_sms
from fusedmlp.ops.glu import dh_halves_of, dh_kernel_descriptors


@gluon.jit
def unit_tiles(OUT, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HSPLIT: gl.constexpr):
    """(first row, first tile, tile count) of this program's work: its row block's tiles of g,
    or with HSPLIT its share of them."""
    pid = gl.program_id(0)
    tiles_n = gl.cdiv(OUT, BLOCK_N)
    per = gl.cdiv(tiles_n, HSPLIT)
    first = (pid % HSPLIT) * per
    return (pid // HSPLIT) * BLOCK_M, first, gl.minimum(tiles_n - first, per)


@gluon.jit
def resident_loader(gy_desc, wd_desc, gy_bufs, b_bufs, gy_ready, ready, empty, OUT,
                    K_TILES: gl.constexpr, HSPLIT: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = gy_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = gy_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = wd_desc.block_type.shape[1]
    row_start, first, count_tiles = unit_tiles(OUT, BLOCK_M, BLOCK_N, HSPLIT)
    mbarrier.expect(gy_ready, K_TILES * gy_desc.block_type.nbytes)
    for kt in gl.static_range(K_TILES):
        _tma_load(gy_desc, [row_start, kt * BLOCK_K], gy_ready, gy_bufs.index(kt))
    count = 0
    for i in range(count_tiles):
        col_start = (first + i) * BLOCK_N
        for k in range(K_TILES):
            stage, bar = free_stage(ready, empty, count, STAGES)
            mbarrier.expect(bar, wd_desc.block_type.nbytes)
            _tma_load(wd_desc, [k * BLOCK_K, col_start], bar, b_bufs.index(stage))
            count += 1


@gluon.jit
def resident_consumer(h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, gy_bufs, b_bufs, c_bufs, gy_ready, ready, empty,
                      turn, h_ready, OUT, CONSUMER: gl.constexpr, K_TILES: gl.constexpr, HSPLIT: gl.constexpr,
                      ACT: gl.constexpr, STORE_Z: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = gy_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = dh1_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    row_start, first, count_tiles = unit_tiles(OUT, BLOCK_M, BLOCK_N, HSPLIT)
    x1_buf = c_bufs.index(2 * CONSUMER)
    x2_buf = c_bufs.index(2 * CONSUMER + 1)
    bar = h_ready.index(CONSUMER)
    mbarrier.wait(gy_ready, 0)
    for i in range(CONSUMER, count_tiles, 2):
        col_start = (first + i) * BLOCK_N
        tma.store_wait(0)  # the previous tile's stores have read the buffers
        mbarrier.expect(bar, 2 * h1_desc.block_type.nbytes)
        _tma_load(h1_desc, [row_start, col_start], bar, x1_buf)
        _tma_load(h2_desc, [row_start, col_start], bar, x2_buf)
        # consumer 0's first wait passes on the fresh barrier; consumer 1's waits for consumer 0
        mbarrier.wait(turn.index(CONSUMER), ((i // 2) & 1) ^ (1 - CONSUMER))
        g = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        prev_stage = 0
        for k in range(K_TILES):
            count = i * K_TILES + k
            stage = count % STAGES
            mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
            g = warpgroup_mma(gy_bufs.index(k), b_bufs.index(stage), g, is_async=True)
            g = warpgroup_mma_wait(num_outstanding=1, deps=(g,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=k > 0)
            prev_stage = stage
        mbarrier.arrive(turn.index(1 - CONSUMER), count=1)
        g = warpgroup_mma_wait(num_outstanding=0, deps=(g,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
        mbarrier.wait(bar, (i // 2) & 1)
        glu_dh_store_late_z(g, x1_buf, x2_buf, dh1_desc, dh2_desc, z_desc, row_start, col_start, ACT, STORE_Z)
    tma.store_wait(0)


@gluon.jit
def glu_bwd_dh_resident_kernel(gy_desc, wd_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, OUT,
                               K_TILES: gl.constexpr, HSPLIT: gl.constexpr, ACT: gl.constexpr,
                               STORE_Z: gl.constexpr, STAGES: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    gy_bufs = gl.allocate_shared_memory(gy_desc.dtype, [K_TILES] + gy_desc.block_type.shape, gy_desc.layout)
    b_bufs = gl.allocate_shared_memory(wd_desc.dtype, [STAGES] + wd_desc.block_type.shape, wd_desc.layout)
    c_bufs = gl.allocate_shared_memory(dh1_desc.dtype, [4] + dh1_desc.block_type.shape, dh1_desc.layout)
    gy_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    h_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(gy_ready, count=1)
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
    for consumer in gl.static_range(2):
        mbarrier.init(turn.index(consumer), count=1)
        mbarrier.init(h_ready.index(consumer), count=1)
    gl.warp_specialize([
        (resident_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, gy_bufs, b_bufs, c_bufs, gy_ready, ready,
                             empty, turn, h_ready, OUT, 0, K_TILES, HSPLIT, ACT, STORE_Z, STAGES)),
        (resident_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, gy_bufs, b_bufs, c_bufs, gy_ready, ready,
                             empty, turn, h_ready, OUT, 1, K_TILES, HSPLIT, ACT, STORE_Z, STAGES)),
        (resident_loader, (gy_desc, wd_desc, gy_bufs, b_bufs, gy_ready, ready, empty, OUT, K_TILES, HSPLIT, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


BLOCK_M, BLOCK_N, BLOCK_K = 128, 64, 64
CONFIG = dict(STAGES=4, CONSUMER_REGS=232, LOADER_REGS=40, num_warps=4, maxnreg=168)


def resident_call(gy, w_down, h, store_z, hsplit=None, config=CONFIG):
    m, out = h.shape[0], h.shape[1] // 2
    kg = gy.shape[1]
    dh = torch.empty_like(h)
    z = torch.empty((m, out) if store_z else (0,), dtype=h.dtype, device=h.device)
    row_blocks = triton.cdiv(m, BLOCK_M)
    if hsplit is None:  # enough programs for the SMs, at most one share per tile
        hsplit = max(1, min(triton.cdiv(out, BLOCK_N), round(num_sms(h) / row_blocks)))
    tile = (BLOCK_M, BLOCK_N)
    launch(glu_bwd_dh_resident_kernel, (row_blocks * hsplit,), gy_desc=gy, wd_desc=w_down,
           **dh_kernel_descriptors(h, dh_halves_of(dh, out), z if store_z else dh[:, :out]),
           OUT=out, K_TILES=triton.cdiv(kg, BLOCK_K), HSPLIT=hsplit, ACT="silu", STORE_Z=store_z, **config,
           descriptor_blocks=dict(gy_desc=(BLOCK_M, BLOCK_K), wd_desc=(BLOCK_K, BLOCK_N), h1_desc=tile,
                                  h2_desc=tile, dh1_desc=tile, dh2_desc=tile, z_desc=tile))
    return dh, z


SHAPES = [(16384, 512, 1792), (8192, 512, 1792), (65536, 512, 1792), (16384, 256, 1024)]

if __name__ == "__main__":
    rows = []
    for (tokens, d, hidden), inputs in swiglu_dh_cases(SHAPES):
        _, gy, _, _, w_down, h = inputs
        r = dict(shape=[tokens, d, hidden], cublas_g=graph_us(lambda: gy @ w_down))
        ref_dh, _, ref_z = swiglu_dh_library(inputs)
        dh, z = resident_call(gy, w_down, h, True)
        r["resident_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
        for store_z in (True, False):
            suffix = "" if store_z else "_noz"
            r["lib" + suffix] = graph_us(lambda: swiglu_dh_library(inputs, store_z))
            r["resident" + suffix] = graph_us(lambda: resident_call(gy, w_down, h, store_z))
        for stages in (2, 3):
            config = dict(CONFIG, STAGES=stages)
            r[f"resident_s{stages}"] = graph_us(lambda: resident_call(gy, w_down, h, True, config=config))
        rows.append(r)
        print_sweep_row(r)
    write_sweep("glu_dh_resident_probe", rows)
