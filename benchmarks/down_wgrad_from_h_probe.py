"""SwiGLU's down-projection weight gradient with z formed from h on the tile, against cuBLAS on z.

    python benchmarks/down_wgrad_from_h_probe.py      (writes $OUT/down_wgrad_from_h_probe.json)

``dW_down = gy.T @ z`` with ``z = silu(gate) * up`` ([tokens, hidden], rounded to bf16 as the dh
kernel stores it) and ``h = [up | gate]`` ([tokens, 2 * hidden], what store mode keeps). If a
kernel formed z from h's tiles as they arrive, at cuBLAS's speed on stored z, the dh kernel
would store no z (111.9 against 100.5 us at 16384 x 512 -> 1792 on an H200: NOTES.md, "The dh
kernel at d = 512: what bounds it").

Both kernels compute the transposed problem ``dW_down.T [hidden, d] = z.T @ gy`` (z.T is then
the MMA's left operand, the one wgmma can also take from registers) and split the tokens in
SPLIT ranges, since the output has few tiles (28 of 64 x 512 at d = 512); each range writes
an fp32 partial and ``sum_partials_kernel`` adds them in range order (no atomics).

- ``down_wgrad_kernel`` (Triton): one program per tile and range, z formed in the main loop's
  warps (``FROM_H``) or read as stored (the control: this kernel as a plain GEMM).
- ``down_wgrad_ws_kernel`` (Gluon, warp-specialised): a loader warp fills a ring with up's and
  gate's ``[BLOCK_K, 64]`` tiles and two ``[BLOCK_K, 256]`` tiles of gy; two MMA warpgroups,
  one per 256 columns of d, each on a ``[64, 256]`` accumulator. ``AHEAD`` picks how z reaches
  the MMAs: 0, stored z copied in by the loader (the control); 1 / 2, each warpgroup forms half
  of a step's z into a shared buffer one / two steps ahead of the MMA that reads it (both
  warpgroups read all of it); 3, each warpgroup forms the whole step's z.T in registers as the
  MMA's left operand (ptxas serialises its wgmmas, C7515).

Per shape, in CUDA graphs (us, the sum of partials included): cuBLAS's ``gy.t() @ z`` on stored
z and each variant, with its relative error against cuBLAS (``_relerr``).
"""

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, warpgroup_mma, warpgroup_mma_wait,
)
from triton.tools.tensor_descriptor import TensorDescriptor

from fusedmlp.bench.harness import graph_us, print_sweep_row, write_sweep
from fusedmlp.kernels.activations import activation
from fusedmlp.kernels.pingpong import _tma_load, accumulator_layout


@triton.jit
def down_wgrad_kernel(up_desc, gate_desc, z_desc, gy_desc, out_ptr, M, ROWS_PER_SPLIT, D, HIDDEN,
                      SPLIT: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr,
                      FROM_H: tl.constexpr, ACT: tl.constexpr):
    """out[split * D + d, hid] = sum over the split's rows r of gy[r, d] * z[r, hid] (fp32 partials;
    with SPLIT == 1, dW_down itself)."""
    pid = tl.program_id(0)
    tiles_d = tl.cdiv(D, BLOCK_D)
    tiles_h = tl.cdiv(HIDDEN, BLOCK_H)
    # d tiles fastest, then hidden tiles, then splits: programs that run together share h's tiles
    tile_d = pid % tiles_d
    tile_h = (pid // tiles_d) % tiles_h
    split = pid // (tiles_d * tiles_h)
    d_start = tile_d * BLOCK_D
    h_start = tile_h * BLOCK_H
    row_begin = split * ROWS_PER_SPLIT
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    for row in range(row_begin, row_begin + ROWS_PER_SPLIT, BLOCK_K):
        if FROM_H:
            up = up_desc.load([row, h_start]).to(tl.float32)
            gate = gate_desc.load([row, h_start]).to(tl.float32)
            z = (activation(gate, ACT) * up).to(gy_desc.dtype)
        else:
            z = z_desc.load([row, h_start])
        gy = gy_desc.load([row, d_start])
        acc = tl.dot(z.T, gy, acc)
    # stored once per program: plain pointers (a TMA store would need a [BLOCK_D, BLOCK_H] buffer)
    hid = h_start + tl.arange(0, BLOCK_H)
    dd = d_start + tl.arange(0, BLOCK_D)
    ptrs = out_ptr + (split * D + dd[None, :]).to(tl.int64) * HIDDEN + hid[:, None]
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=(hid[:, None] < HIDDEN) & (dd[None, :] < D))


@triton.jit
def sum_partials_kernel(part_ptr, out_ptr, numel, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    total = tl.load(part_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        total += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, total.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def ws_loader(up_desc, gate_desc, z_desc, gy_desc, h_bufs, z_bufs, gy_bufs, ready, empty, row_begin, k_steps, h_start,
              d_start, STAGES: gl.constexpr, MMAS: gl.constexpr, FROM_Z: gl.constexpr):
    """Fills the ring: per K step up's and gate's [BLOCK_K, BLOCK_H] tiles (FROM_Z: stored z's,
    into the stage's z buffer) and MMAS gy tiles [BLOCK_K, 256]; a stage is free once every MMA
    warpgroup has released it."""
    BLOCK_K: gl.constexpr = up_desc.block_type.shape[0]
    GY_N: gl.constexpr = gy_desc.block_type.shape[1]
    stage_bytes: gl.constexpr = (1 if FROM_Z else 2) * up_desc.block_type.nbytes + MMAS * gy_desc.block_type.nbytes
    for kk in range(k_steps):
        stage = kk % STAGES
        mbarrier.wait(empty.index(stage), ((kk // STAGES) & 1) ^ 1)
        bar = ready.index(stage)
        mbarrier.expect(bar, stage_bytes)
        row = row_begin + kk * BLOCK_K
        if FROM_Z:  # the control: stored z, as cuBLAS reads it
            _tma_load(z_desc, [row, h_start], bar, z_bufs.index(stage))
        else:
            _tma_load(up_desc, [row, h_start], bar, h_bufs.index(2 * stage))
            _tma_load(gate_desc, [row, h_start], bar, h_bufs.index(2 * stage + 1))
        for j in gl.static_range(MMAS):
            _tma_load(gy_desc, [row, d_start + j * GY_N], bar, gy_bufs.index(MMAS * stage + j))


@gluon.jit
def ws_z_rows(h_bufs, z_bufs, ready, z_ready, kk, J: gl.constexpr, MMAS: gl.constexpr, STAGES: gl.constexpr,
              ACT: gl.constexpr):
    """This warpgroup's share of step kk's z (rows J * BLOCK_K / MMAS ...): act(gate) * up from the
    stage's h tiles, rounded to 16 bits, into the stage's z buffer; then arrives on z_ready."""
    BLOCK_K: gl.constexpr = h_bufs.type.shape[1]
    ROWS: gl.constexpr = BLOCK_K // MMAS
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    stage = kk % STAGES
    mbarrier.wait(ready.index(stage), (kk // STAGES) & 1)
    up = h_bufs.index(2 * stage).slice(J * ROWS, ROWS).load(layout).to(gl.float32)
    gate = h_bufs.index(2 * stage + 1).slice(J * ROWS, ROWS).load(layout).to(gl.float32)
    z_bufs.index(stage).slice(J * ROWS, ROWS).store((activation(gate, ACT) * up).to(z_bufs.dtype))
    fence_async_shared()
    mbarrier.arrive(z_ready.index(stage), count=1)


@gluon.jit
def ws_mma(h_bufs, z_bufs, gy_bufs, ready, empty, z_ready, part_ptr, k_steps, split, h_start, d_start, D, HIDDEN,
           J: gl.constexpr, MMAS: gl.constexpr, STAGES: gl.constexpr, ACT: gl.constexpr, AHEAD: gl.constexpr):
    """Warpgroup J of MMAS: acc[hid, d] += z.T @ gy over the split's rows for gy's J-th
    [*, 256] column block, forming its share of the next step's z while the MMA runs; then the
    fp32 partial to part[split, d, hid]."""
    BLOCK_H: gl.constexpr = z_bufs.type.shape[2]
    GY_N: gl.constexpr = gy_bufs.type.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(GY_N)
    acc = gl.zeros((BLOCK_H, GY_N), dtype=gl.float32, layout=acc_layout)
    if AHEAD == 0:  # the control: z loaded by the loader
        prev_stage = 0
        for kk in range(k_steps):
            stage = kk % STAGES
            mbarrier.wait(ready.index(stage), (kk // STAGES) & 1)
            acc = warpgroup_mma(z_bufs.index(stage).permute((1, 0)), gy_bufs.index(MMAS * stage + J), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
            prev_stage = stage
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
    elif AHEAD == 3:  # z.T as the MMA's register operand: each warpgroup forms the whole tile's z itself
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        prev_stage = 0
        for kk in range(k_steps):
            stage = kk % STAGES
            mbarrier.wait(ready.index(stage), (kk // STAGES) & 1)
            up = h_bufs.index(2 * stage).permute((1, 0)).load(a_layout).to(gl.float32)
            gate = h_bufs.index(2 * stage + 1).permute((1, 0)).load(a_layout).to(gl.float32)
            z = (activation(gate, ACT) * up).to(gy_bufs.dtype)
            acc = warpgroup_mma(z, gy_bufs.index(MMAS * stage + J), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
            prev_stage = stage
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
    elif AHEAD == 1:  # z of step kk + 1 formed while step kk's MMA runs
        ws_z_rows(h_bufs, z_bufs, ready, z_ready, 0, J, MMAS, STAGES, ACT)
        prev_stage = 0
        for kk in range(k_steps):
            stage = kk % STAGES
            mbarrier.wait(z_ready.index(stage), (kk // STAGES) & 1)
            acc = warpgroup_mma(z_bufs.index(stage).permute((1, 0)), gy_bufs.index(MMAS * stage + J), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index(prev_stage), count=1, pred=kk > 0)
            prev_stage = stage
            if kk + 1 < k_steps:
                ws_z_rows(h_bufs, z_bufs, ready, z_ready, kk + 1, J, MMAS, STAGES, ACT)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(prev_stage), count=1)
    else:  # z two steps ahead: step kk + 1's MMA queued behind step kk's while z of kk + 2 is formed
        ws_z_rows(h_bufs, z_bufs, ready, z_ready, 0, J, MMAS, STAGES, ACT)
        if k_steps > 1:
            ws_z_rows(h_bufs, z_bufs, ready, z_ready, 1, J, MMAS, STAGES, ACT)
        mbarrier.wait(z_ready.index(0), 0)
        acc = warpgroup_mma(z_bufs.index(0).permute((1, 0)), gy_bufs.index(J), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))  # returns at once: step 0 stays in flight
        for kk in range(k_steps - 1):
            nxt = (kk + 1) % STAGES
            mbarrier.wait(z_ready.index(nxt), ((kk + 1) // STAGES) & 1)
            acc = warpgroup_mma(z_bufs.index(nxt).permute((1, 0)), gy_bufs.index(MMAS * nxt + J), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))  # step kk done
            mbarrier.arrive(empty.index(kk % STAGES), count=1)
            if kk + 2 < k_steps:
                ws_z_rows(h_bufs, z_bufs, ready, z_ready, kk + 2, J, MMAS, STAGES, ACT)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((k_steps - 1) % STAGES), count=1)
    hid = h_start + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, acc_layout))
    dd = d_start + J * GY_N + gl.arange(0, GY_N, layout=gl.SliceLayout(0, acc_layout))
    ptrs = part_ptr + (split * D + dd[None, :]).to(gl.int64) * HIDDEN + hid[:, None]
    gl.store(ptrs, acc, mask=(hid[:, None] < HIDDEN) & (dd[None, :] < D))


@gluon.jit
def down_wgrad_ws_kernel(up_desc, gate_desc, z_desc, gy_desc, part_ptr, M, ROWS_PER_SPLIT, D, HIDDEN,
                         SPLIT: gl.constexpr, MMAS: gl.constexpr, STAGES: gl.constexpr, ACT: gl.constexpr,
                         MMA_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, AHEAD: gl.constexpr):
    """Warp-specialised form: a loader (1 warp) and MMAS MMA warpgroups, each on a 256-wide
    column block of gy and each forming its share of z; one [BLOCK_H, MMAS * 256] tile of
    dW_down.T per program, over one split of the rows."""
    BLOCK_K: gl.constexpr = up_desc.block_type.shape[0]
    BLOCK_H: gl.constexpr = up_desc.block_type.shape[1]
    GY_N: gl.constexpr = gy_desc.block_type.shape[1]
    pid = gl.program_id(0)
    tiles_d = gl.cdiv(D, MMAS * GY_N)
    tiles_h = gl.cdiv(HIDDEN, BLOCK_H)
    tile_d = pid % tiles_d
    tile_h = (pid // tiles_d) % tiles_h
    split = pid // (tiles_d * tiles_h)
    d_start = tile_d * MMAS * GY_N
    h_start = tile_h * BLOCK_H
    row_begin = split * ROWS_PER_SPLIT
    k_steps = gl.cdiv(ROWS_PER_SPLIT, BLOCK_K)
    h_bufs = gl.allocate_shared_memory(up_desc.dtype, [2 * STAGES, BLOCK_K, BLOCK_H], up_desc.layout)
    gy_bufs = gl.allocate_shared_memory(gy_desc.dtype, [MMAS * STAGES, BLOCK_K, GY_N], gy_desc.layout)
    z_bufs = gl.allocate_shared_memory(up_desc.dtype, [STAGES, BLOCK_K, BLOCK_H], up_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    z_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for stage in gl.static_range(STAGES):
        mbarrier.init(ready.index(stage), count=1)
        mbarrier.init(empty.index(stage), count=MMAS)
        mbarrier.init(z_ready.index(stage), count=MMAS)
    gl.static_assert(MMAS == 2, "the partitions below are two MMA warpgroups and the loader")
    gl.warp_specialize([
        (ws_mma, (h_bufs, z_bufs, gy_bufs, ready, empty, z_ready, part_ptr, k_steps, split, h_start, d_start, D,
                  HIDDEN, 0, MMAS, STAGES, ACT, AHEAD)),
        (ws_mma, (h_bufs, z_bufs, gy_bufs, ready, empty, z_ready, part_ptr, k_steps, split, h_start, d_start, D,
                  HIDDEN, 1, MMAS, STAGES, ACT, AHEAD)),
        (ws_loader, (up_desc, gate_desc, z_desc, gy_desc, h_bufs, z_bufs, gy_bufs, ready, empty, row_begin,
                     k_steps, h_start, d_start, STAGES, MMAS, AHEAD == 0)),
    ], [4, 1], [MMA_REGS, LOADER_REGS])


def down_wgrad_ws(gy, h, z, out, part, split, block_h, block_k, mmas, stages, regs, ahead):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    tokens, d = gy.shape
    hidden = h.shape[1] // 2
    rows_per_split = triton.cdiv(triton.cdiv(tokens, split), block_k) * block_k

    def desc(t, block):
        return GluonDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))
    descs = dict(up_desc=desc(h[:, :hidden], [block_k, block_h]), gate_desc=desc(h[:, hidden:], [block_k, block_h]),
                 z_desc=desc(z, [block_k, block_h]), gy_desc=desc(gy, [block_k, 256]))
    mma_regs, loader_regs, maxnreg = regs

    def run():
        grid = (triton.cdiv(d, 256 * mmas) * triton.cdiv(hidden, block_h) * split,)
        down_wgrad_ws_kernel[grid](**descs, part_ptr=part, M=tokens, ROWS_PER_SPLIT=rows_per_split, D=d,
                                   HIDDEN=hidden, SPLIT=split, MMAS=mmas, STAGES=stages, ACT="silu",
                                   MMA_REGS=mma_regs, LOADER_REGS=loader_regs, AHEAD=ahead, num_warps=4,
                                   maxnreg=maxnreg)
        numel = out.numel()
        sum_partials_kernel[(triton.cdiv(numel, 4096),)](part, out, numel, SPLIT=split, BLOCK=4096, num_warps=8)
    return run


def down_wgrad(gy, h, z, out, part, split, block_h, block_d, block_k, warps, stages, from_h):
    tokens, d = gy.shape
    hidden = h.shape[1] // 2
    rows_per_split = triton.cdiv(triton.cdiv(tokens, split), block_k) * block_k
    target = out if split == 1 else part
    descs = dict(up_desc=TensorDescriptor.from_tensor(h[:, :hidden], [block_k, block_h]),
                 gate_desc=TensorDescriptor.from_tensor(h[:, hidden:], [block_k, block_h]),
                 z_desc=TensorDescriptor.from_tensor(z, [block_k, block_h]),
                 gy_desc=TensorDescriptor.from_tensor(gy, [block_k, block_d]), out_ptr=target)

    def run():
        grid = (triton.cdiv(d, block_d) * triton.cdiv(hidden, block_h) * split,)
        down_wgrad_kernel[grid](**descs, M=tokens, ROWS_PER_SPLIT=rows_per_split, D=d, HIDDEN=hidden, SPLIT=split,
                                BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_K=block_k, FROM_H=from_h, ACT="silu",
                                num_warps=warps, num_stages=stages)
        if split > 1:
            numel = out.numel()
            sum_partials_kernel[(triton.cdiv(numel, 4096),)](part, out, numel, SPLIT=split, BLOCK=4096, num_warps=8)
    return run


SHAPES = [(16384, 512, 1792), (8192, 512, 1792), (65536, 512, 1792), (16384, 1024, 2816)]
# the Triton kernel's two best configs of the first sweep: (block_h, block_d, block_k, warps, stages, split, from_h)
TRITON_CONFIGS = [(128, 256, 64, 8, 3, 4, True), (128, 128, 64, 4, 4, 2, False)]
# the warp-specialised kernel: (block_k, stages, split, ahead); block_h 64, two MMA warpgroups (512 columns of d)
WS_CONFIGS = [(32, 4, 4, 0), (32, 4, 4, 1), (32, 4, 4, 2), (32, 4, 4, 3), (32, 5, 4, 3), (64, 2, 4, 3), (32, 5, 2, 0),
              (32, 5, 1, 0), (32, 5, 1, 3), (32, 5, 2, 3)]
WS_REGS = (232, 40, 168)  # MMA warpgroups, loader, launch limit (12 warps as launched: 384 threads)


def relative_error(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rows = []
    for tokens, d, hidden in SHAPES:
        gy = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
        h = torch.randn(tokens, 2 * hidden, device="cuda", dtype=torch.bfloat16)
        z = (torch.nn.functional.silu(h[:, hidden:].float()) * h[:, :hidden].float()).to(torch.bfloat16)
        ref = (gy.t() @ z).float()
        r = dict(shape=[tokens, d, hidden], cublas=graph_us(lambda: gy.t() @ z))
        variants = {}
        for bh, bd, bk, warps, stages, split, from_h in TRITON_CONFIGS:
            if bd <= d:
                name = f"triton_{'h' if from_h else 'z'}_{bh}x{bd}x{bk}_w{warps}_s{stages}_split{split}"
                variants[name] = (split, lambda out, part, c=(split, bh, bd, bk, warps, stages, from_h):
                                  down_wgrad(gy, h, z, out, part, *c))
        for bk, stages, split, ahead in WS_CONFIGS:
            if d == 512 and split == 1 or d > 512 and split > 2:
                continue
            variants[f"ws_64x512x{bk}_s{stages}_split{split}_ahead{ahead}"] = (
                split, lambda out, part, c=(split, 64, bk, 2, stages, WS_REGS, ahead):
                down_wgrad_ws(gy, h, z, out, part, *c))
        for name, (split, make) in variants.items():
            out = torch.empty(d, hidden, device="cuda", dtype=torch.bfloat16)
            part = torch.empty(split, d, hidden, device="cuda", dtype=torch.float32)
            try:
                run = make(out, part)
                run()
                torch.cuda.synchronize()
                r[name + "_relerr"] = f"{relative_error(out, ref):.1e}"
                r[name] = graph_us(run)
            except Exception as error:  # a config that does not fit (shared memory, registers)
                r[name] = f"failed: {type(error).__name__}: {str(error)[:160]}"
        rows.append(r)
        print_sweep_row(r)
    write_sweep("down_wgrad_from_h_probe", rows)
