"""SwiGLU's store-mode dh with the two consumers splitting each tile by columns, against the library's kernels.

    python benchmarks/glu_dh_split_probe.py [D,D... [CONFIG ...]]     (writes $OUT/glu_dh_split_probe.json)

For each shape (tokens, d, hidden), in CUDA graphs (us): cuBLAS's ``g = gy @ Wd`` alone; the
library's dh call (``lib``: the alternating ping-pong kernel, 128 x 64 tiles up to d = 512,
128 x 128 beyond) with z and without (``lib_noz``: what z's store costs); a ``copy_`` of as
many bytes as the dh kernel moves (h read, dh and z written: the stream floor on this
device); ``glu_bwd_dh_split_kernel`` with each config (named stages, GROUP_M, BLOCK_K); and
the library's 128 x 64 kernel with 32-wide K steps (``alt_*``, at every d; two alternating
consumers until 2026-11-29, when the results in benchmarks/results/ were taken, three in turn
since). Each is
checked against the library's dh and z first (max abs difference). Arguments: only the shapes
of the named d's, and only the named configs.
"""
import sys

import torch

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma_wait

import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import (
    graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, swiglu_dh_library, write_sweep,
)
from fusedmlp.kernels.pingpong import (
    _tma_load, _tma_store, accumulator_layout, consumer_barriers, free_stage, glu_dh_from_buffers, pingpong_setup,
    program_tiles, ring_mma_steps, tile_start,
)
from fusedmlp.ops._common import launch_pingpong, num_sms

GLU_DH_SPLIT_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "EPILOGUE_N": 64, "STAGES": 4, "GROUP_M": 1,
                       "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4, "maxnreg": 168}


@gluon.jit
def split_n_loader(x_desc, w_kn_desc, a_bufs, b0_bufs, b1_bufs, ready, empty, M, N, K,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Loader of a kernel whose two consumers share each tile's x tiles and split its columns
    (``pingpong_glu_dh_split_consumer``): a tile is ``[BLOCK_M, 2 * HALF_N]``; each ring stage
    holds the x tile ``[BLOCK_M, BLOCK_K]`` and the ``[BLOCK_K, HALF_N]`` tiles of W (``[K, N]``)
    for the tile's two column halves, one per consumer (``b0_bufs``, ``b1_bufs``)."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    HALF_N: gl.constexpr = w_kn_desc.block_type.shape[1]
    stage_bytes: gl.constexpr = x_desc.block_type.nbytes + 2 * w_kn_desc.block_type.nbytes
    count = 0
    for i in range(program_tiles(M, N, BLOCK_M, 2 * HALF_N)):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        for kk in range(gl.cdiv(K, BLOCK_K)):
            stage, bar = free_stage(ready, empty, count, STAGES)
            mbarrier.expect(bar, stage_bytes)
            _tma_load(x_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
            _tma_load(w_kn_desc, [kk * BLOCK_K, col_start], bar, b0_bufs.index(stage))
            _tma_load(w_kn_desc, [kk * BLOCK_K, col_start + HALF_N], bar, b1_bufs.index(stage))
            count += 1


@gluon.jit
def pingpong_glu_dh_split_consumer(
    h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty, h_ready,
    M, N, K,
    CONSUMER: gl.constexpr, ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):
    """Consumer warpgroup ``CONSUMER`` of a GLU's backward dh with h kept and g = gy @ Wd on the
    tile (``glu_dh_from_buffers``'s formulas), the two consumers
    splitting each ``[BLOCK_M, 2 * HALF_N]`` tile by columns: both read every ring stage's gy
    tile (a stage is free once both released it) and each its own Wd half (``b_bufs``), so a
    stage of 32 KB serves 2 x 128 x 64 outputs where the alternating kernel's 24 KB serve one
    (a third less L2 traffic per output), and each consumer keeps the three ``[BLOCK_M,
    HALF_N]`` buffers of the alternating kernel (h's halves in; dh1, dh2 and z out over them).
    No turns: the consumers' main loops run together, then their epilogues, while the loader
    fills the ring for the next tile."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    HALF_N: gl.constexpr = b_bufs.type.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(HALF_N)
    x1_buf = c_bufs.index(3 * CONSUMER)
    x2_buf = c_bufs.index(3 * CONSUMER + 1)
    z_buf = c_bufs.index(3 * CONSUMER + 2)
    bar = h_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(program_tiles(M, N, BLOCK_M, 2 * HALF_N)):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        col_start += CONSUMER * HALF_N
        tma.store_wait(0)  # the previous tile's stores have read the buffers
        mbarrier.expect(bar, 2 * h1_desc.block_type.nbytes)
        _tma_load(h1_desc, [row_start, col_start], bar, x1_buf)
        _tma_load(h2_desc, [row_start, col_start], bar, x2_buf)
        g = gl.zeros((BLOCK_M, HALF_N), dtype=gl.float32, layout=acc_layout)
        g, _, last_stage = ring_mma_steps(a_bufs, b_bufs, ready, empty, g, g, i * k_tiles, k_tiles, CONSUMER, STAGES,
                                          True, False, False, b_bufs)
        g = warpgroup_mma_wait(num_outstanding=0, deps=(g,))
        mbarrier.arrive(empty.index(last_stage), count=1)
        mbarrier.wait(bar, i & 1)
        glu_dh_from_buffers(g, x1_buf, x2_buf, z_buf, ACT, STORE_Z)
        fence_async_shared()
        _tma_store(dh1_desc, [row_start, col_start], x1_buf)
        _tma_store(dh2_desc, [row_start, col_start], x2_buf)
        if STORE_Z:
            _tma_store(z_desc, [row_start, col_start], z_buf)
    tma.store_wait(0)


@gluon.jit
def glu_bwd_dh_split_kernel(
    gy_desc, wd_half_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc,
    M, OUT, KG,
    ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,  # GLU_DH_SPLIT_CONFIG above
):
    """The library's kept-h dh kernel's work with the two consumers splitting each tile of g
    (``[BLOCK_M, 2 * HALF_N]``) by columns instead of taking turns over whole tiles
    (``pingpong_glu_dh_split_consumer``): each stage's gy tile feeds both, so the main loop
    reads a third less from L2 per output; ``wd_half_desc`` has ``[BLOCK_K, HALF_N]`` blocks
    (the loader copies both halves' tiles per stage), h, dh and z ``[BLOCK_M, HALF_N]``."""
    a_bufs, b0_bufs, c_bufs, ready, empty, turn = pingpong_setup(gy_desc, wd_half_desc, dh1_desc, STAGES, False, 3,
                                                                  True)
    b1_bufs = gl.allocate_shared_memory(wd_half_desc.dtype, [STAGES] + wd_half_desc.block_type.shape,
                                        wd_half_desc.layout)
    h_ready = consumer_barriers()
    gl.warp_specialize([
        (pingpong_glu_dh_split_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b0_bufs, c_bufs,
                                          ready, empty, h_ready, M, OUT, KG, 0, ACT, STORE_Z, GROUP_M, STAGES)),
        (pingpong_glu_dh_split_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b1_bufs, c_bufs,
                                          ready, empty, h_ready, M, OUT, KG, 1, ACT, STORE_Z, GROUP_M, STAGES)),
        (split_n_loader, (gy_desc, wd_half_desc, a_bufs, b0_bufs, b1_bufs, ready, empty, M, OUT, KG, GROUP_M,
                          STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


cfgs = {f"split_s{s}g{g}k{k}": dict(STAGES=s, GROUP_M=g, BLOCK_K=k)
        for s, g, k in [(4, 1, 64), (4, 8, 64), (3, 1, 64), (8, 1, 32), (6, 8, 32)]}
alt_cfgs = {"alt_s10g1k32": dict(STAGES=10, BLOCK_K=32)}
max_k = glu_ops.GLU_DH_PINGPONG_MAX_K
SHAPES = [(16384, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632), (16384, 4096, 14336)]
if len(sys.argv) > 1:
    SHAPES = [s for s in SHAPES if str(s[1]) in sys.argv[1].split(",")]
    cfgs = {k: v for k, v in cfgs.items() if len(sys.argv) == 2 or k in sys.argv[2:]}
    alt_cfgs = {k: v for k, v in alt_cfgs.items() if len(sys.argv) == 2 or k in sys.argv[2:]}


def split_dh(gy, w_down, h, config):
    """dh [M, 2*hidden] and z [M, hidden] from the split kernel (new tensors)."""
    m, out = h.shape[0], h.shape[1] // 2
    dh = torch.empty_like(h)
    z = torch.empty((m, out), dtype=h.dtype, device=h.device)
    c = dict(GLU_DH_SPLIT_CONFIG, **config)
    launch_pingpong(glu_bwd_dh_split_kernel, c, m, out, num_sms(h), {"gy_desc": gy}, {},
                    glu_ops.dh_kernel_descriptors(h, glu_ops.dh_halves_of(dh, out), z),
                    other_descs={"wd_half_desc": (w_down, (c["BLOCK_K"], c["EPILOGUE_N"]))},
                    M=m, OUT=out, KG=gy.shape[1], ACT="silu", STORE_Z=True)
    return dh, z


if __name__ == "__main__":
    rows = []
    for (tokens, d, hidden), inputs in swiglu_dh_cases(SHAPES):
        _, gy, _, _, w_down, h = inputs
        lib = lambda store_z=True: swiglu_dh_library(inputs, store_z)  # noqa: E731
        moved = tokens * 5 * hidden * 2  # h read, dh and z written (gy is read once more; small)
        src = torch.empty(tokens * 5 * hidden // 2, device="cuda", dtype=h.dtype)
        dst = torch.empty_like(src)
        r = dict(shape=[tokens, d, hidden], cublas_g=graph_us(lambda: gy @ w_down), lib=graph_us(lib),
                 lib_noz=graph_us(lambda: lib(False)), copy_same_bytes=graph_us(lambda: dst.copy_(src)))
        del src, dst
        ref_dh, _, ref_z = lib()
        for name, c in cfgs.items():
            dh, z = split_dh(gy, w_down, h, c)
            r[name + "_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
            r[name] = graph_us(lambda: split_dh(gy, w_down, h, c))
        base = glu_ops.GLU_DH_ROTATING_CONFIG
        for name, c in alt_cfgs.items():  # the library's 128 x 64 kernel with finer ring stages
            glu_ops.GLU_DH_ROTATING_CONFIG, glu_ops.GLU_DH_PINGPONG_MAX_K = dict(base, **c), 1 << 30
            dh, _, z = lib()
            r[name + "_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
            r[name] = graph_us(lib)
            glu_ops.GLU_DH_ROTATING_CONFIG, glu_ops.GLU_DH_PINGPONG_MAX_K = base, max_k
        for name in ["lib", "copy_same_bytes"] + list(cfgs) + list(alt_cfgs):
            r[name + "_TBps"] = moved / r[name] / 1e6
        rows.append(r)
        print_sweep_row(r)
    write_sweep("glu_dh_split_probe", rows)
