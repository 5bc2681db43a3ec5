"""SwiGLU's store-mode dh with three consumers taking turns, against the two-consumer kernel.

    python benchmarks/glu_dh_rotating_probe.py     (writes $OUT/glu_dh_rotating_probe.json)

For each shape (tokens, d, hidden), in CUDA graphs (us): the two-consumer kernel the library
had until 2026-11-29 (copied here: two consumers alternating, three buffers each) and the
library's ``glu_bwd_dh_rotating_kernel`` (three consumers in turn, two buffers each, z written
over dh1's once it has left), each launched directly on 128 x 64 tiles with z stored and
without; the library's call (``lib``) and cuBLAS's g alone for scale. The rotating kernel's dh
and z are checked against the two-consumer kernel's first (max abs difference).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from fusedmlp.bench.harness import (
    graph_us, max_abs_difference, print_sweep_row, swiglu_dh_cases, swiglu_dh_library, write_sweep,
)
from fusedmlp.kernels.activations import activation_value_and_grad
from fusedmlp.kernels.configs import GLU_DH_ROTATING_CONFIG
from fusedmlp.kernels.glu import glu_bwd_dh_rotating_kernel
from fusedmlp.kernels.pingpong import (
    _tma_load, _tma_store, accumulator_layout, consumer_barriers, pingpong_loader, pingpong_mainloop, pingpong_setup,
    program_tiles, tile_start,
)
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.ops.glu import dh_halves_of, dh_kernel_descriptors

# The two-consumer kernel as the library had it until 2026-11-29 (its config, consumer and kernel).
TWO_CONSUMER_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "STAGES": 5, "GROUP_M": 1,
                       "CONSUMER_REGS": 232, "LOADER_REGS": 40, "num_warps": 4, "maxnreg": 168}


@gluon.jit
def two_consumer_dh_consumer(h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready, empty,
                             turn, h_ready, M, N, K, CONSUMER: gl.constexpr, ACT: gl.constexpr,
                             STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Every second tile: h copied into two of this consumer's three buffers before the main
    loop (g = gy @ Wd), then dh1, dh2 over them and z into the third, all out by TMA."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = dh1_desc.block_type.shape[1]
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_N)
    dh1_buf = c_bufs.index(3 * CONSUMER)
    dh2_buf = c_bufs.index(3 * CONSUMER + 1)
    z_buf = c_bufs.index(3 * CONSUMER + 2)
    bar = h_ready.index(CONSUMER)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(CONSUMER, program_tiles(M, N, BLOCK_M, BLOCK_N), 2):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        tma.store_wait(0)
        mbarrier.expect(bar, 2 * h1_desc.block_type.nbytes)
        _tma_load(h1_desc, [row_start, col_start], bar, dh1_buf)
        _tma_load(h2_desc, [row_start, col_start], bar, dh2_buf)
        g = pingpong_mainloop(a_bufs, b_bufs, ready, empty, turn, i, k_tiles, CONSUMER, STAGES, True, acc_layout,
                              False)
        mbarrier.wait(bar, (i // 2) & 1)
        x1 = dh1_buf.load(acc_layout).to(gl.float32)
        x2 = dh2_buf.load(acc_layout).to(gl.float32)
        act_x2, act_grad_x2 = activation_value_and_grad(x2, ACT)
        dh1 = g * act_x2
        dh2 = g * x1 * act_grad_x2
        dh1_buf.store(dh1.to(dh1_desc.dtype))
        dh2_buf.store(dh2.to(dh2_desc.dtype))
        if STORE_Z:
            z_buf.store((x1 * act_x2).to(z_desc.dtype))
        fence_async_shared()
        _tma_store(dh1_desc, [row_start, col_start], dh1_buf)
        _tma_store(dh2_desc, [row_start, col_start], dh2_buf)
        if STORE_Z:
            _tma_store(z_desc, [row_start, col_start], z_buf)
    tma.store_wait(0)


@gluon.jit
def two_consumer_dh_kernel(gy_desc, wd_desc, h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, M, OUT, KG,
                           ACT: gl.constexpr, STORE_Z: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                           CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    a_bufs, b_bufs, c_bufs, ready, empty, turn = pingpong_setup(gy_desc, wd_desc, dh1_desc, STAGES, False, 3, False)
    h_ready = consumer_barriers()
    gl.warp_specialize([
        (two_consumer_dh_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready,
                                    empty, turn, h_ready, M, OUT, KG, 0, ACT, STORE_Z, GROUP_M, STAGES)),
        (two_consumer_dh_consumer, (h1_desc, h2_desc, dh1_desc, dh2_desc, z_desc, a_bufs, b_bufs, c_bufs, ready,
                                    empty, turn, h_ready, M, OUT, KG, 1, ACT, STORE_Z, GROUP_M, STAGES)),
        (pingpong_loader, (gy_desc, wd_desc, wd_desc, a_bufs, b_bufs, ready, empty, M, OUT, KG, GROUP_M, STAGES,
                           False, True, gy_desc, wd_desc, 0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


KERNELS = {"two": (two_consumer_dh_kernel, TWO_CONSUMER_CONFIG),
           "three": (glu_bwd_dh_rotating_kernel, GLU_DH_ROTATING_CONFIG)}
SHAPES = [(16384, 512, 1792), (8192, 512, 1792), (65536, 512, 1792), (16384, 1024, 2816), (16384, 2048, 5632)]


def dh_call(name, gy, w_down, h, store_z):
    kernel, config = KERNELS[name]
    m, out = h.shape[0], h.shape[1] // 2
    dh = torch.empty_like(h)
    z = torch.empty((m, out) if store_z else (0,), dtype=h.dtype, device=h.device)
    launch_pingpong(kernel, config, m, out, num_sms(h), {"gy_desc": gy}, {},
                    dh_kernel_descriptors(h, dh_halves_of(dh, out), z if store_z else dh[:, :out]),
                    {"wd_desc": w_down},
                    M=m, OUT=out, KG=gy.shape[1], ACT="silu", STORE_Z=store_z)
    return dh, z


if __name__ == "__main__":
    rows = []
    for (tokens, d, hidden), inputs in swiglu_dh_cases(SHAPES):
        _, gy, _, _, w_down, h = inputs
        r = dict(shape=[tokens, d, hidden], cublas_g=graph_us(lambda: gy @ w_down),
                 lib=graph_us(lambda: swiglu_dh_library(inputs)))
        ref_dh, ref_z = dh_call("two", gy, w_down, h, True)
        dh, z = dh_call("three", gy, w_down, h, True)
        r["three_maxdiff"] = max_abs_difference([(dh, ref_dh), (z, ref_z)])
        for name in KERNELS:
            for store_z in (True, False):
                r[name + ("" if store_z else "_noz")] = graph_us(lambda: dh_call(name, gy, w_down, h, store_z))
        rows.append(r)
        print_sweep_row(r)
    write_sweep("glu_dh_rotating_probe", rows)
