"""SwiGLU's store-mode dh kernel at a short K: what bounds it, h copied in one tile ahead, z's buffer freed.

    python benchmarks/glu_dh_prefetch_probe.py [D,D... [VARIANT ...]]     (writes $OUT/glu_dh_prefetch_probe.json)

A copy of the library's alternating ping-pong dh kernel as it was until 2026-11-29 (two
consumers: g = gy @ Wd on 128 x 64 tiles, h read, dh and z written) with a MODE:
- 0: the library's order (each consumer: wait until its previous tile's stores have read its
  three buffers, copy h in, main loop, epilogue, stores);
- 1: no copy of h (the epilogue reads whatever the buffers hold): what h's latency costs;
- 2: no stores of dh and z: what the stores cost;
- 3: h copied one tile ahead: each consumer has two pairs of h buffers and, once its main loop
  is done and its previous tile's stores have read their buffers, starts the copy of its next
  tile's h into the other pair, so the copy has a whole epilogue and main loop to arrive.
- 4: two buffers per consumer: z kept in registers (16-bit) while dh1 and dh2 go out, then
  written over dh1's buffer once dh1's store has read it, which frees z's buffer for a sixth
  ring stage.
Z_GLOBAL: z stored from registers (plain stores in the accumulator's layout) instead of
through a shared buffer, which frees the buffer for ring stages. Every variant runs at
16384 tokens with its shared memory within 227 KB; variants that write everything are checked
against the library's dh and z first (max abs difference). Times: CUDA graphs, us. Arguments:
only the shapes of the named d's, and only the named variants.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from fusedmlp.bench.harness import (
    graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, swiglu_dh_library, write_sweep,
)
from fusedmlp.kernels.pingpong import (
    _tma_load, _tma_store, accumulator_layout, glu_dh_store_late_z, glu_dh_rows, pingpong_loader, pingpong_mainloop,
    pingpong_setup, program_tiles, split_row_halves, tile_start,
)
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.ops.glu import dh_halves_of, dh_kernel_descriptors


@gluon.jit
def dh_epilogue(g, x1_buf, x2_buf, z_buf, z_ptr, stride_zm, row_start, col_start, M, N,
                ACT: gl.constexpr, Z_GLOBAL: gl.constexpr):
    """glu_dh_from_buffers (pingpong.py) with z stored from registers if Z_GLOBAL."""
    ROWS: gl.constexpr = g.shape[0] // 2
    BLOCK_N: gl.constexpr = g.shape[1]
    row_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    g_rows = split_row_halves(g, row_layout)
    for part in gl.static_range(2):
        z = glu_dh_rows(g_rows[part], x1_buf.slice(part * ROWS, ROWS), x2_buf.slice(part * ROWS, ROWS), row_layout,
                        ACT)
        if Z_GLOBAL:
            rows = row_start + part * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, row_layout))
            cols = col_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, row_layout))
            ptrs = z_ptr + rows.to(gl.int64)[:, None] * stride_zm + cols[None, :]
            gl.store(ptrs, z, mask=(rows < M)[:, None] & (cols < N)[None, :])
        else:
            z_buf.slice(part * ROWS, ROWS).store(z)


@gluon.jit
def probe_consumer(h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, z_ptr, stride_zm,
                   a_bufs, b_bufs, c_bufs, ready, empty, turn, h_ready, M, N, K,
                   CONSUMER: gl.constexpr, ACT: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                   MODE: gl.constexpr, Z_GLOBAL: gl.constexpr):
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = dh1_desc.block_type.shape[1]
    PER: gl.constexpr = c_bufs.type.shape[0] // 2  # buffers per consumer
    base: gl.constexpr = PER * CONSUMER
    h_bytes: gl.constexpr = 2 * h1_desc.block_type.nbytes
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    n_tiles = program_tiles(M, N, BLOCK_M, BLOCK_N)
    if MODE == 3:  # the first tile's h into pair 0
        if CONSUMER < n_tiles:
            row_start, col_start = tile_start(CONSUMER, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            mbarrier.expect(h_ready.index(2 * CONSUMER), h_bytes)
            _tma_load(h1_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), c_bufs.index(base))
            _tma_load(h2_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), c_bufs.index(base + 1))
    for i in range(CONSUMER, n_tiles, 2):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if MODE == 3:
            pair = (i // 2) % 2
            x1_buf = c_bufs.index(base + 2 * pair)
            x2_buf = c_bufs.index(base + 2 * pair + 1)
            z_buf = c_bufs.index(base + 4 if not Z_GLOBAL else base)
            g = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True,
                                  acc_layout, False)
            tma.store_wait(0)  # the previous tile's stores have read the other pair (and z's buffer)
            if i + 2 < n_tiles:
                next_row, next_col = tile_start(i + 2, M, N, BLOCK_M, BLOCK_N, GROUP_M)
                next_bar = h_ready.index(2 * CONSUMER + 1 - pair)
                mbarrier.expect(next_bar, h_bytes)
                _tma_load(h1_desc, [next_row, next_col], next_bar, c_bufs.index(base + 2 * (1 - pair)))
                _tma_load(h2_desc, [next_row, next_col], next_bar, c_bufs.index(base + 2 * (1 - pair) + 1))
            mbarrier.wait(h_ready.index(2 * CONSUMER + pair), (i // 4) & 1)
        elif MODE == 4:  # two buffers; z in registers until dh1's store has left its buffer
            x1_buf = c_bufs.index(base)
            x2_buf = c_bufs.index(base + 1)
            tma.store_wait(0)
            mbarrier.expect(h_ready.index(2 * CONSUMER), h_bytes)
            _tma_load(h1_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), x1_buf)
            _tma_load(h2_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), x2_buf)
            g = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True,
                                  acc_layout, False)
            mbarrier.wait(h_ready.index(2 * CONSUMER), (i // 2) & 1)
            glu_dh_store_late_z(g, x1_buf, x2_buf, dh1_desc, dh2_desc, z_desc, row_start, col_start, ACT, True)
        else:
            x1_buf = c_bufs.index(base)
            x2_buf = c_bufs.index(base + 1)
            z_buf = c_bufs.index(base + 2 if not Z_GLOBAL else base)
            tma.store_wait(0)
            if MODE != 1:
                mbarrier.expect(h_ready.index(2 * CONSUMER), h_bytes)
                _tma_load(h1_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), x1_buf)
                _tma_load(h2_desc, [row_start, col_start], h_ready.index(2 * CONSUMER), x2_buf)
            g = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True,
                                  acc_layout, False)
            if MODE != 1:
                mbarrier.wait(h_ready.index(2 * CONSUMER), (i // 2) & 1)
        if MODE != 4:
            dh_epilogue(g, x1_buf, x2_buf, z_buf, z_ptr, stride_zm, row_start, col_start, M, N, ACT, Z_GLOBAL)
            fence_async_shared()
        if MODE != 2 and MODE != 4:
            _tma_store(dh1_desc, [row_start, col_start], x1_buf)
            _tma_store(dh2_desc, [row_start, col_start], x2_buf)
            if not Z_GLOBAL:
                _tma_store(z_desc, [row_start, col_start], z_buf)
    tma.store_wait(0)


@gluon.jit
def probe_kernel(gy_desc, wd_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, z_ptr, stride_zm, M, OUT, KG,
                 ACT: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, MODE: gl.constexpr,
                 Z_GLOBAL: gl.constexpr, BUFS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                 LOADER_REGS: gl.constexpr):
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(gy_desc, wd_desc, dh1_desc, STAGES, False, BUFS,
                                                                False)
    h_ready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    for index in gl.static_range(4):
        mbarrier.init(h_ready.index(index), count=1)
    gl.warp_specialize([
        (probe_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, z_ptr, stride_zm, a_bufs, b_bufs, c_bufs,
                          ready, empty, turn, h_ready, M, OUT, KG, 0, ACT, GROUP_M, STAGES, MODE, Z_GLOBAL)),
        (probe_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, z_ptr, stride_zm, a_bufs, b_bufs, c_bufs,
                          ready, empty, turn, h_ready, M, OUT, KG, 1, ACT, GROUP_M, STAGES, MODE, Z_GLOBAL)),
        (pingpong_loader, (gy_desc, wd_desc, wd_desc, a_bufs, b_bufs, ready, empty, M, OUT, KG, GROUP_M, STAGES,
                           False, True, gy_desc, wd_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# the two-consumer kernel's config as the library had it until 2026-11-29
BASE_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "STAGES": 5, "GROUP_M": 1,
               "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4, "maxnreg": 168}
# name: (MODE, Z_GLOBAL, BUFS per consumer, STAGES, BLOCK_K); shared memory = 2 * BUFS * 16 KB + the ring
VARIANTS = {
    "m0_library_order": (0, False, 3, 5, 64),
    "m1_no_h_copy": (1, False, 3, 5, 64),
    "m2_no_stores": (2, False, 3, 5, 64),
    "m0_zglobal_s6": (0, True, 2, 6, 64),
    "m3_ahead_s2k64": (3, False, 5, 2, 64),
    "m3_ahead_s5k32": (3, False, 5, 5, 32),
    "m3_ahead_zglobal_s4": (3, True, 4, 4, 64),
    "m3_ahead_zglobal_s8k32": (3, True, 4, 8, 32),
    "m4_late_z_s5": (4, False, 2, 5, 64),
    "m4_late_z_s6": (4, False, 2, 6, 64),
}
SHAPES = [(16384, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632)]
if len(sys.argv) > 1:
    SHAPES = [s for s in SHAPES if str(s[1]) in sys.argv[1].split(",")]
if len(sys.argv) > 2:
    VARIANTS = {name: v for name, v in VARIANTS.items() if name in sys.argv[2:]}


def probe_dh(gy, w_down, h, variant):
    mode, z_global, bufs, stages, block_k = variant
    m, out = h.shape[0], h.shape[1] // 2
    dh = torch.empty_like(h)
    z = torch.empty((m, out), dtype=h.dtype, device=h.device)
    config = dict(BASE_CONFIG, STAGES=stages, BLOCK_K=block_k, MODE=mode, Z_GLOBAL=z_global, BUFS=bufs)
    launch_pingpong(probe_kernel, config, m, out, num_sms(h), {"gy_desc": gy}, {},
                    dh_kernel_descriptors(h, dh_halves_of(dh, out), z), {"wd_desc": w_down},
                    z_ptr=z, stride_zm=z.stride(0), M=m, OUT=out, KG=gy.shape[1], ACT="silu")
    return dh, z


if __name__ == "__main__":
    rows = []
    for (tokens, d, hidden), inputs in swiglu_dh_cases(SHAPES):
        _, gy, _, _, w_down, h = inputs
        r = dict(shape=[tokens, d, hidden], lib=graph_us(lambda: swiglu_dh_library(inputs)))
        ref_dh, _, ref_z = swiglu_dh_library(inputs)
        for name, variant in VARIANTS.items():
            dh, z = probe_dh(gy, w_down, h, variant)
            if variant[0] in (0, 3, 4):
                r[name + "_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
            r[name] = graph_us(lambda: probe_dh(gy, w_down, h, variant))
        rows.append(r)
        print_sweep_row(r)
    write_sweep("glu_dh_prefetch_probe", rows)
