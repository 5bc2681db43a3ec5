"""GEGLU's store-mode dx with dh formed on the tile, against the stream + cuBLAS, in CUDA graphs.

    python benchmarks/glu_dx_from_pair.py [CONFIG ...]     (writes $OUT/glu_dx_from_pair.json)

An experiment for issue 3's store mode at d <= 2048, where the backward's stream (read h and
gy, write dh: 20 d values a row) costs 18% or more of the three GEMMs. If the forward kept
the pair (a, b) = (act(x2), x1 * act'(x2)) instead of h = (x1, x2) (the same bytes), then

    dh1 = gy * a,   dh2 = gy * b,   dx = dh1 @ W1 + dh2 @ W2

and dh costs one multiply per element, cheap enough to form inside the dx GEMM. The kernel
below (Gluon, warp-specialised, persistent): a loader warp fills each ring stage with the a, b
and gy tiles [BLOCK_M, BLOCK_K] and W1's and W2's [BLOCK_K, BLOCK_N] tiles; the default
partition (WARPS // 4 warpgroups stacked over the tile's rows) reads a, b and gy from shared
memory into registers in the MMA's operand layout, multiplies, and issues two MMAs with those
registers as the left operand, keeping the two steps before in flight. dW = dh.T @ x still
needs dh in memory: with WRITE_DH, the K step kk of a row block is written by the column tile
``kk % column tiles`` (each dh element once, the writes spread over the column tiles), over
the stage's a and b tiles and out by TMA. The forward's change (storing the pair) is not
made here: a and b are random tensors, and no db is formed.

Timed (us, graph replays), per shape (d, N): cuBLAS dx alone (dh @ W: the floor), the
library's in-place stream followed by cuBLAS dx (what the store backward runs now), and the
kernel with each config, with and without the dh writes; the kernel's dx and dh are checked
first against float64 (dh exactly: one bf16 product). Result on an H100 (benchmarks/NOTES.md,
"GEGLU's store dx with dh formed on the tile: tried, not kept"): slower than the stream +
cuBLAS at every shape.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

import fusedmlp.ops.glu as glu_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep
from fusedmlp.kernels.launch import launch
from fusedmlp.kernels.pingpong import _tma_load, _tma_store, program_tiles, tile_start, tma_store_tile
from fusedmlp.ops._common import cdiv, num_sms


@gluon.jit
def _pair_loader(a_desc, b_desc, gy_desc, w_desc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, ready, empty,
                 M, N, OUT, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    TILE_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[1]
    stage_bytes: gl.constexpr = 3 * a_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes
    k_steps = 2 * gl.cdiv(OUT, 2 * BLOCK_K)  # as the consumer takes them: an even count
    count = 0
    for i in range(program_tiles(M, N, TILE_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, TILE_M, BLOCK_N, GROUP_M)
        for kk in range(k_steps):
            stage = count % STAGES
            mbarrier.wait(empty.index(stage), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(stage)
            mbarrier.expect(bar, stage_bytes)
            _tma_load(a_desc, [row_start, kk * BLOCK_K], bar, a_bufs.index(stage))
            _tma_load(b_desc, [row_start, kk * BLOCK_K], bar, b_bufs.index(stage))
            _tma_load(gy_desc, [row_start, kk * BLOCK_K], bar, gy_bufs.index(stage))
            # past OUT, W1's tile reads W2's first rows: they meet a and gy's zero columns
            _tma_load(w_desc, [kk * BLOCK_K, col_start], bar, w1_bufs.index(stage))
            _tma_load(w_desc, [OUT + kk * BLOCK_K, col_start], bar, w2_bufs.index(stage))
            count += 1


@gluon.jit
def _pair_step(acc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, ready, empty, count, kk, writes_dh, row_start,
               dh1_desc, dh2_desc, op_layout: gl.constexpr, STAGES: gl.constexpr, WRITE_DH: gl.constexpr):
    """One K step: the stage's a, b and gy tiles read into registers while the MMAs of the
    two steps before run; then the older of those retired (its stage released: two steps
    back, so STAGES >= 3), dh1 = gy * a and dh2 = gy * b formed and the two MMAs issued
    with them as the left operand. The caller alternates two copies of this step, so that
    each copy's registers are rewritten only after the wait that retires its previous MMAs
    (ptxas serialises every MMA where a register an MMA in flight reads may be rewritten).
    With ``writes_dh`` dh1 and dh2 are also written over the stage's a and b tiles and
    stored from there by TMA (the stage is released only once the stores have read it)."""
    stage = count % STAGES
    mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
    gy = gy_bufs.index(stage).load(op_layout)
    a = a_bufs.index(stage).load(op_layout)
    b = b_bufs.index(stage).load(op_layout)
    # (through the wait: the products may not be scheduled before it)
    acc, gy, a, b = warpgroup_mma_wait(num_outstanding=2, deps=(acc, gy, a, b))
    if WRITE_DH:
        tma.store_wait(0)  # dh stored from the stage two steps back has left it
    mbarrier.arrive(empty.index((count + 2 * STAGES - 2) % STAGES), count=1, pred=kk > 1)
    dh1 = a * gy
    dh2 = b * gy
    if WRITE_DH:
        if writes_dh:
            a_bufs.index(stage).store(dh1)
            b_bufs.index(stage).store(dh2)
            fence_async_shared()
            _tma_store(dh1_desc, [row_start, kk * a_bufs.type.shape[2]], a_bufs.index(stage))
            _tma_store(dh2_desc, [row_start, kk * a_bufs.type.shape[2]], b_bufs.index(stage))
    acc = warpgroup_mma(dh1, w1_bufs.index(stage), acc, is_async=True)
    acc = warpgroup_mma(dh2, w2_bufs.index(stage), acc, is_async=True)
    # retires nothing (this step's two groups stay in flight): the loop carries a tensor
    return warpgroup_mma_wait(num_outstanding=2, deps=(acc,))


@gluon.jit
def _pair_consumer(dx_desc, dh1_desc, dh2_desc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, c_buf, ready, empty,
                   M, N, OUT, GROUP_M: gl.constexpr, STAGES: gl.constexpr, WRITE_DH: gl.constexpr,
                   WARPS: gl.constexpr):
    """The MMA warps (the default partition, WARPS // 4 warpgroups stacked over the tile's
    rows): MMAs with a register operand issued from a worker partition were serialised by
    ptxas; from the default partition they are not."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = w1_bufs.type.shape[2]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    k_steps = 2 * gl.cdiv(OUT, 2 * BLOCK_K)  # even (two steps a pass); a last step past OUT reads zeros
    col_tiles = gl.cdiv(N, BLOCK_N)
    for i in range(program_tiles(M, N, BLOCK_M, BLOCK_N)):
        row_start, col_start = tile_start(i, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        writer = col_start // BLOCK_N
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
        count = i * k_steps
        for kk in range(0, k_steps, 2):
            acc = _pair_step(acc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, ready, empty, count, kk,
                             kk % col_tiles == writer, row_start, dh1_desc, dh2_desc, op_layout, STAGES, WRITE_DH)
            acc = _pair_step(acc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, ready, empty, count + 1, kk + 1,
                             (kk + 1) % col_tiles == writer, row_start, dh1_desc, dh2_desc, op_layout, STAGES,
                             WRITE_DH)
            count += 2
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if WRITE_DH:
            tma.store_wait(0)
        mbarrier.arrive(empty.index((count + STAGES - 2) % STAGES), count=1)
        mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES), count=1)
        tma_store_tile(dx_desc, c_buf, acc, row_start, col_start)
    tma.store_wait(0)


@gluon.jit
def glu_dx_from_pair_kernel(a_desc, b_desc, gy_desc, w_desc, dx_desc, dh1_desc, dh2_desc, M, N, OUT,
                            GROUP_M: gl.constexpr, STAGES: gl.constexpr, WRITE_DH: gl.constexpr,
                            WARPS: gl.constexpr, LOADER_REGS: gl.constexpr):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    gy_bufs = gl.allocate_shared_memory(gy_desc.dtype, [STAGES] + gy_desc.block_type.shape, gy_desc.layout)
    w1_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    w2_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_buf = gl.allocate_shared_memory(dx_desc.dtype, dx_desc.block_type.shape, dx_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=1)
    gl.warp_specialize([
        (_pair_consumer, (dx_desc, dh1_desc, dh2_desc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, c_buf, ready,
                          empty, M, N, OUT, GROUP_M, STAGES, WRITE_DH, WARPS)),
        (_pair_loader, (a_desc, b_desc, gy_desc, w_desc, a_bufs, b_bufs, gy_bufs, w1_bufs, w2_bufs, ready, empty,
                        M, N, OUT, GROUP_M, STAGES)),
    ], [1], [LOADER_REGS])


def dx_from_pair(pair, gy, weight, config, write_dh=True, dx=None, dh=None):
    """dx = (gy * a) @ W1 + (gy * b) @ W2 with pair = [a | b] ([M, 2 out]), weight [2 out, d];
    also dh = [gy * a | gy * b] if write_dh. Returns (dx, dh), dh None without write_dh."""
    m, two_out = pair.shape
    out, d = two_out // 2, weight.shape[1]
    block_m, block_n, block_k = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    dx = torch.empty((m, d), dtype=gy.dtype, device=gy.device) if dx is None else dx
    if write_dh and dh is None:
        dh = torch.empty((m, two_out), dtype=gy.dtype, device=gy.device)
    grid = (min(num_sms(gy), cdiv(m, block_m) * cdiv(d, block_n)),)
    # without write_dh the dh descriptors are never read: any tensor of a valid shape will do
    dh_halves = (dh[:, :out], dh[:, out:]) if write_dh else (pair[:, :out], pair[:, out:])
    launch(glu_dx_from_pair_kernel, grid, a_desc=pair[:, :out], b_desc=pair[:, out:], gy_desc=gy, w_desc=weight,
           dx_desc=dx, dh1_desc=dh_halves[0], dh2_desc=dh_halves[1], M=m, N=d, OUT=out, GROUP_M=config["GROUP_M"],
           STAGES=config["STAGES"], WRITE_DH=write_dh, WARPS=config["WARPS"], LOADER_REGS=40,
           num_warps=config["WARPS"], descriptor_blocks={"a_desc": (block_m, block_k), "b_desc": (block_m, block_k),
                                                         "gy_desc": (block_m, block_k), "w_desc": (block_k, block_n),
                                                         "dh1_desc": (block_m, block_k), "dh2_desc": (block_m, block_k),
                                                         "dx_desc": (block_m, block_n)})
    return dx, dh if write_dh else None


CONFIGS = {
    "m128n256k16s4": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=16, STAGES=4, GROUP_M=8, WARPS=8),
    "m128n256k16s5": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=16, STAGES=5, GROUP_M=8, WARPS=8),
    "m256n128k16s4": dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=16, STAGES=4, GROUP_M=8, WARPS=8),
}
SHAPES = [(1024, 8192), (1024, 32768), (2048, 16384), (4096, 8192)]  # (d, N); hidden out = 4 d


def check(config):
    torch.manual_seed(1)
    m, d, out = 1000, 384, 336  # partial row, column and K tiles; an odd count of K steps
    dt = torch.bfloat16
    pair = torch.randn(m, 2 * out, device="cuda", dtype=dt)
    gy = torch.randn(m, out, device="cuda", dtype=dt)
    w = torch.randn(2 * out, d, device="cuda", dtype=dt) / out**0.5
    dx, dh = dx_from_pair(pair, gy, w, config)
    dh_ref = (pair.double() * torch.cat([gy, gy], 1).double()).to(dt)
    dx_ref = dh_ref.double() @ w.double()
    return ((dh.double() - dh_ref.double()).abs().max().item(),
            ((dx.double() - dx_ref).abs().max() / dx_ref.abs().max()).item())


def main():
    names = [n for n in sys.argv[1:] if n in CONFIGS] or list(CONFIGS)
    rows = []
    for name in names:
        try:
            dh_err, dx_rel = check(CONFIGS[name])
            print(f"check {name}: dh max abs diff {dh_err:.3g}, dx max rel diff {dx_rel:.3g}", flush=True)
        except Exception as e:  # a config that does not fit (shared memory, registers) is reported, not fatal
            print(f"check {name}: {type(e).__name__}: {str(e)[-600:]}", flush=True)
            names = [n for n in names if n != name]
    torch.manual_seed(0)
    dt = torch.bfloat16
    for d, m in SHAPES:
        out = 4 * d
        x = torch.randn(m, d, device="cuda", dtype=dt)
        w = torch.randn(2 * out, d, device="cuda", dtype=dt) / d**0.5
        b = torch.randn(2 * out, device="cuda", dtype=dt)
        h = torch.randn(m, 2 * out, device="cuda", dtype=dt)
        gy = torch.randn(m, out, device="cuda", dtype=dt)
        dh = torch.randn(m, 2 * out, device="cuda", dtype=dt)
        dx = torch.empty(m, d, device="cuda", dtype=dt)
        r = dict(d=d, N=m, cublas_dx=graph_us(lambda: torch.mm(dh, w, out=dx)),
                 cublas_dw=graph_us(lambda: dh.t() @ x))

        def stream_then_dx():
            dh_, _, _ = glu_ops.glu_backward_dh_impl(gy, x, w[:out], w[out:], b[:out], b[out:], h, "gelu_tanh",
                                                     in_place=True)
            torch.mm(dh_, w, out=dx)

        r["stream_inplace"] = graph_us(lambda: glu_ops.glu_backward_dh_impl(
            gy, x, w[:out], w[out:], b[:out], b[out:], h, "gelu_tanh", in_place=True))
        r["stream_then_cublas_dx"] = graph_us(stream_then_dx)
        for name in names:
            cfg = CONFIGS[name]
            r[name] = graph_us(lambda: dx_from_pair(h, gy, w, cfg, True, dx, dh))
            r[name + "_nodh"] = graph_us(lambda: dx_from_pair(h, gy, w, cfg, False, dx))
        rows.append(r)
        print_sweep_row(r)
    write_sweep("glu_dx_from_pair", rows)


if __name__ == "__main__":
    main()
