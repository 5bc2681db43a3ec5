"""Probe: DLRM's bottom MLP (13-512-256-64-16, relu) forward as a Gluon kernel whose row
blocks are split over SPLIT programs along layer 1's columns, every weight tile TMA-loaded at
the program's start, partials of layer 2 exchanged through memory (the last program of a
row block, by an atomic counter, finishes). Timed against the library's kernel."""
import os
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


@gluon.constexpr_function
def acc_layout(n):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def _relu(v):
    return gl.maximum(v, 0.0)


@gluon.jit
def _stage_x(x_ptr, row_start, M, stride_xm, K0: gl.constexpr, K0_PAD: gl.constexpr, BLOCK_M: gl.constexpr,
             dtype: gl.constexpr):
    """x [BLOCK_M, K0] (26-byte rows: plain loads) into shared memory as the first MMA's left operand."""
    xl: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [4, 1], [1, 0])
    xr = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, xl))
    xk = gl.arange(0, K0_PAD, layout=gl.SliceLayout(0, xl))
    x = gl.load(x_ptr + xr[:, None] * stride_xm + xk[None, :], mask=(xr[:, None] < M) & (xk[None, :] < K0), other=0.0)
    x_s = gl.allocate_shared_memory(dtype, [BLOCK_M, K0_PAD], gl.NVMMASharedLayout.get_default_for([BLOCK_M, K0_PAD], dtype))
    x_s.store(x)
    return x_s


@gluon.jit
def _vector_to_shared(ptr, N: gl.constexpr):
    """A bias vector into shared memory, read a chunk at a time off the chain."""
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    v = gl.load(ptr + gl.arange(0, N, layout=layout))
    v_s = gl.allocate_shared_memory(v.dtype, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    v_s.store(v)
    return v_s


@gluon.jit
def split_fwd_kernel(
    x_ptr, w0_desc, b0_ptr, w1_desc, b1_ptr, w2_desc, b2_ptr, w3_desc, b3_ptr,
    y_ptr, partial_ptr, counter_ptr, saved0_ptr, saved1_ptr, saved2_ptr,
    M, stride_xm,
    K0: gl.constexpr, K0_PAD: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr,
    N3: gl.constexpr, N3_PAD: gl.constexpr,
    SPLIT: gl.constexpr, SAVE: gl.constexpr, BLOCK_M: gl.constexpr, CHUNK: gl.constexpr, ASYNC: gl.constexpr = False, STOP: gl.constexpr = 0,
):
    N1S: gl.constexpr = N1 // SPLIT
    CHUNKS: gl.constexpr = N0 // CHUNK
    pid = gl.program_id(0)
    row_block = pid // SPLIT
    part = pid % SPLIT
    row_start = row_block * BLOCK_M
    dtype: gl.constexpr = w1_desc.dtype

    w0_bufs = gl.allocate_shared_memory(dtype, [CHUNKS, CHUNK, K0_PAD], w0_desc.layout)
    w1_bufs = gl.allocate_shared_memory(dtype, [CHUNKS, N1S, CHUNK], w1_desc.layout)
    w2_buf = gl.allocate_shared_memory(dtype, [N2, N1S], w2_desc.layout)
    w3_buf = gl.allocate_shared_memory(dtype, [N3_PAD, N2], w3_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [CHUNKS + 2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(CHUNKS + 2):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    for c in gl.static_range(CHUNKS):
        mbarrier.expect(bars.index(c), w0_desc.block_type.nbytes + w1_desc.block_type.nbytes)
        _tma_load(w0_desc, [c * CHUNK, 0], bars.index(c), w0_bufs.index(c))
        _tma_load(w1_desc, [part * N1S, c * CHUNK], bars.index(c), w1_bufs.index(c))
    mbarrier.expect(bars.index(CHUNKS), w2_desc.block_type.nbytes)
    _tma_load(w2_desc, [0, part * N1S], bars.index(CHUNKS), w2_buf)
    mbarrier.expect(bars.index(CHUNKS + 1), w3_desc.block_type.nbytes)
    _tma_load(w3_desc, [0, 0], bars.index(CHUNKS + 1), w3_buf)

    x_s = _stage_x(x_ptr, row_start, M, stride_xm, K0, K0_PAD, BLOCK_M, dtype)
    b0_s = _vector_to_shared(b0_ptr, N0)
    fence_async_shared()
    _barrier()

    if STOP == 1:
        for c in gl.static_range(CHUNKS + 2):
            mbarrier.wait(bars.index(c), 0)
        bl: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
        gl.store(y_ptr + row_start * N3 + gl.arange(0, N0, layout=bl), b0_s.load(bl), mask=gl.arange(0, N0, layout=bl) < 1)
        return
    l0: gl.constexpr = acc_layout(CHUNK)
    l1: gl.constexpr = acc_layout(N1S)
    l2: gl.constexpr = acc_layout(N2)
    l3: gl.constexpr = acc_layout(N3_PAD)
    a1_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l1, k_width=2)
    a2_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l2, k_width=2)
    a3_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l3, k_width=2)
    rows0 = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l0))
    b1 = gl.load(b1_ptr + part * N1S + gl.arange(0, N1S, layout=gl.SliceLayout(0, l1))).to(gl.float32)

    acc1 = gl.zeros([BLOCK_M, N1S], gl.float32, l1)
    if ASYNC:
        mbarrier.wait(bars.index(0), 0)
        acc0_next = warpgroup_mma(x_s, w0_bufs.index(0).permute((1, 0)), gl.zeros([BLOCK_M, CHUNK], gl.float32, l0),
                                  is_async=True)
        a_prev = gl.zeros([BLOCK_M, CHUNK], dtype, a1_layout)
        for c in gl.static_range(CHUNKS):
            acc0_cur = acc0_next
            if c + 1 < CHUNKS:
                mbarrier.wait(bars.index(c + 1), 0)
                acc0_next = warpgroup_mma(x_s, w0_bufs.index(c + 1).permute((1, 0)),
                                          gl.zeros([BLOCK_M, CHUNK], gl.float32, l0), is_async=True)
                # in flight, oldest first: L0(c), L1(c - 1), L0(c + 1): L0(c) done
                acc0_cur, acc1, a_prev, acc0_next = warpgroup_mma_wait(
                    num_outstanding=2 if c > 0 else 1, deps=(acc0_cur, acc1, a_prev, acc0_next))
            else:
                acc0_cur, acc1, a_prev = warpgroup_mma_wait(num_outstanding=1, deps=(acc0_cur, acc1, a_prev))
            b0c = b0_s.slice(c * CHUNK, CHUNK).load(gl.SliceLayout(0, l0)).to(gl.float32)
            h0 = _relu(acc0_cur + b0c[None, :]).to(dtype)
            if SAVE:
                if c % SPLIT == part:
                    cols0 = c * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, l0))
                    gl.store(saved0_ptr + rows0[:, None] * N0 + cols0[None, :], h0, mask=rows0[:, None] < M)
            a_prev = gl.convert_layout(h0, a1_layout)
            acc1 = warpgroup_mma(a_prev, w1_bufs.index(c).permute((1, 0)), acc1, is_async=True)
        acc1, a_prev = warpgroup_mma_wait(num_outstanding=0, deps=(acc1, a_prev))
    else:
        for c in gl.static_range(CHUNKS):
            mbarrier.wait(bars.index(c), 0)
            acc0 = warpgroup_mma(x_s, w0_bufs.index(c).permute((1, 0)), gl.zeros([BLOCK_M, CHUNK], gl.float32, l0))
            b0c = b0_s.slice(c * CHUNK, CHUNK).load(gl.SliceLayout(0, l0)).to(gl.float32)
            h0 = _relu(acc0 + b0c[None, :]).to(dtype)
            if SAVE:
                if c % SPLIT == part:
                    cols0 = c * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, l0))
                    gl.store(saved0_ptr + rows0[:, None] * N0 + cols0[None, :], h0, mask=rows0[:, None] < M)
            acc1 = warpgroup_mma(gl.convert_layout(h0, a1_layout), w1_bufs.index(c).permute((1, 0)), acc1)
    h1 = _relu(acc1 + b1[None, :]).to(dtype)
    if STOP == 2:
        rows1 = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l1))
        cols1 = part * N1S + gl.arange(0, N1S, layout=gl.SliceLayout(0, l1))
        gl.store(saved1_ptr + rows1[:, None] * N1 + cols1[None, :], h1, mask=rows1[:, None] < M)
        return
    if SAVE:
        rows1 = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l1))
        cols1 = part * N1S + gl.arange(0, N1S, layout=gl.SliceLayout(0, l1))
        gl.store(saved1_ptr + rows1[:, None] * N1 + cols1[None, :], h1, mask=rows1[:, None] < M)
    mbarrier.wait(bars.index(CHUNKS), 0)
    acc2 = warpgroup_mma(gl.convert_layout(h1, a2_layout), w2_buf.permute((1, 0)),
                         gl.zeros([BLOCK_M, N2], gl.float32, l2))

    # the exchange: partial [row_block, part] -> memory, the last program of the row block sums
    prow = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l2))
    pcol = gl.arange(0, N2, layout=gl.SliceLayout(0, l2))
    poff = prow[:, None] * N2 + pcol[None, :]
    block_partials = partial_ptr + row_block.to(gl.int64) * (SPLIT * BLOCK_M * N2)
    gl.store(block_partials + part * (BLOCK_M * N2) + poff, acc2)
    if STOP == 3:
        return
    _barrier()
    arrived = gl.atomic_add(counter_ptr + row_block, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT - 1:
        total = gl.zeros([BLOCK_M, N2], gl.float32, l2)
        for s in gl.static_range(SPLIT):
            total += gl.load(block_partials + s * (BLOCK_M * N2) + poff, cache_modifier=".cg")
        b2 = gl.load(b2_ptr + pcol).to(gl.float32)
        h2 = _relu(total + b2[None, :]).to(dtype)
        rows2 = row_start + prow
        if SAVE:
            gl.store(saved2_ptr + rows2[:, None] * N2 + pcol[None, :], h2, mask=rows2[:, None] < M)
        mbarrier.wait(bars.index(CHUNKS + 1), 0)
        acc3 = warpgroup_mma(gl.convert_layout(h2, a3_layout), w3_buf.permute((1, 0)),
                             gl.zeros([BLOCK_M, N3_PAD], gl.float32, l3))
        cols3 = gl.arange(0, N3_PAD, layout=gl.SliceLayout(0, l3))
        rows3 = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l3))
        b3 = gl.load(b3_ptr + cols3, mask=cols3 < N3, other=0.0).to(gl.float32)
        y = _relu(acc3 + b3[None, :]).to(dtype)
        gl.store(y_ptr + rows3[:, None] * N3 + cols3[None, :], y, mask=(rows3[:, None] < M) & (cols3[None, :] < N3))
        gl.store(counter_ptr + row_block, 0)
    for i in gl.static_range(CHUNKS + 2):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def rowblock_fwd_kernel(
    x_ptr, w0_desc, b0_ptr, w1_desc, b1_ptr, w2_desc, b2_ptr, w3_desc, b3_ptr,
    y_ptr, saved0_ptr, saved1_ptr, saved2_ptr, M, stride_xm,
    K0: gl.constexpr, K0_PAD: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr,
    N3: gl.constexpr, N3_PAD: gl.constexpr, SAVE: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
):
    """No split: one program per 64-row block runs the whole stack; W1 streams through a ring
    of STAGES chunks ([N1, 64] each, as N1 / 64 boxes of [64, 64]), layer 1 in N1 / 64
    accumulators of [64, 64]."""
    CHUNK: gl.constexpr = 64
    CHUNKS: gl.constexpr = N0 // CHUNK
    PARTS: gl.constexpr = N1 // 64
    dtype: gl.constexpr = w1_desc.dtype
    row_start = gl.program_id(0) * BLOCK_M
    w0_bufs = gl.allocate_shared_memory(dtype, [CHUNKS, CHUNK, K0_PAD], w0_desc.layout)
    w1_bufs = gl.allocate_shared_memory(dtype, [STAGES * PARTS, 64, CHUNK], w1_desc.layout)
    w2_bufs = gl.allocate_shared_memory(dtype, [PARTS, N2, 64], w2_desc.layout)
    w3_buf = gl.allocate_shared_memory(dtype, [N3_PAD, N2], w3_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES + 2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES + 2):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    W0_BAR: gl.constexpr = STAGES
    TAIL_BAR: gl.constexpr = STAGES + 1
    mbarrier.expect(bars.index(W0_BAR), CHUNKS * w0_desc.block_type.nbytes)
    for c in gl.static_range(CHUNKS):
        _tma_load(w0_desc, [c * CHUNK, 0], bars.index(W0_BAR), w0_bufs.index(c))
    for c in gl.static_range(STAGES):
        mbarrier.expect(bars.index(c), PARTS * w1_desc.block_type.nbytes)
        for j in gl.static_range(PARTS):
            _tma_load(w1_desc, [j * 64, c * CHUNK], bars.index(c), w1_bufs.index(c * PARTS + j))
    mbarrier.expect(bars.index(TAIL_BAR), PARTS * w2_desc.block_type.nbytes + w3_desc.block_type.nbytes)
    for j in gl.static_range(PARTS):
        _tma_load(w2_desc, [0, j * 64], bars.index(TAIL_BAR), w2_bufs.index(j))
    _tma_load(w3_desc, [0, 0], bars.index(TAIL_BAR), w3_buf)

    x_s = _stage_x(x_ptr, row_start, M, stride_xm, K0, K0_PAD, BLOCK_M, dtype)
    b0_s = _vector_to_shared(b0_ptr, N0)
    b1_s = _vector_to_shared(b1_ptr, N1)
    fence_async_shared()
    _barrier()

    l64: gl.constexpr = acc_layout(64)
    l3: gl.constexpr = acc_layout(N3_PAD)
    a64: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l64, k_width=2)
    a3: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l3, k_width=2)
    rows = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l64))
    cols = gl.arange(0, 64, layout=gl.SliceLayout(0, l64))
    row_ok = rows[:, None] < M
    acc1_0 = gl.zeros([BLOCK_M, 64], gl.float32, l64)
    acc1_1 = gl.zeros([BLOCK_M, 64], gl.float32, l64)
    acc1_2 = gl.zeros([BLOCK_M, 64], gl.float32, l64)
    acc1_3 = gl.zeros([BLOCK_M, 64], gl.float32, l64)
    mbarrier.wait(bars.index(W0_BAR), 0)
    for c in gl.static_range(CHUNKS):
        slot = c % STAGES
        acc0 = warpgroup_mma(x_s, w0_bufs.index(c).permute((1, 0)), gl.zeros([BLOCK_M, CHUNK], gl.float32, l64))
        b0c = b0_s.slice(c * CHUNK, CHUNK).load(gl.SliceLayout(0, l64)).to(gl.float32)
        h0 = _relu(acc0 + b0c[None, :]).to(dtype)
        if SAVE:
            gl.store(saved0_ptr + rows[:, None] * N0 + (c * CHUNK + cols)[None, :], h0, mask=row_ok)
        a = gl.convert_layout(h0, a64)
        mbarrier.wait(bars.index(slot), (c // STAGES) & 1)
        acc1_0 = warpgroup_mma(a, w1_bufs.index(slot * PARTS + 0).permute((1, 0)), acc1_0, is_async=True)
        acc1_1 = warpgroup_mma(a, w1_bufs.index(slot * PARTS + 1).permute((1, 0)), acc1_1, is_async=True)
        acc1_2 = warpgroup_mma(a, w1_bufs.index(slot * PARTS + 2).permute((1, 0)), acc1_2, is_async=True)
        acc1_3 = warpgroup_mma(a, w1_bufs.index(slot * PARTS + 3).permute((1, 0)), acc1_3, is_async=True)
        acc1_0, acc1_1, acc1_2, acc1_3, a = warpgroup_mma_wait(num_outstanding=0,
                                                               deps=(acc1_0, acc1_1, acc1_2, acc1_3, a))
        if c + STAGES < CHUNKS:  # this slot's MMAs are done: refill it
            mbarrier.expect(bars.index(slot), PARTS * w1_desc.block_type.nbytes)
            for j in gl.static_range(PARTS):
                _tma_load(w1_desc, [j * 64, (c + STAGES) * CHUNK], bars.index(slot), w1_bufs.index(slot * PARTS + j))
    mbarrier.wait(bars.index(TAIL_BAR), 0)
    acc2 = gl.zeros([BLOCK_M, N2], gl.float32, l64)
    h1 = _relu(acc1_0 + b1_s.slice(0, 64).load(gl.SliceLayout(0, l64)).to(gl.float32)[None, :]).to(dtype)
    if SAVE:
        gl.store(saved1_ptr + rows[:, None] * N1 + (0 + cols)[None, :], h1, mask=row_ok)
    acc2 = warpgroup_mma(gl.convert_layout(h1, a64), w2_bufs.index(0).permute((1, 0)), acc2)
    h1 = _relu(acc1_1 + b1_s.slice(64, 64).load(gl.SliceLayout(0, l64)).to(gl.float32)[None, :]).to(dtype)
    if SAVE:
        gl.store(saved1_ptr + rows[:, None] * N1 + (64 + cols)[None, :], h1, mask=row_ok)
    acc2 = warpgroup_mma(gl.convert_layout(h1, a64), w2_bufs.index(1).permute((1, 0)), acc2)
    h1 = _relu(acc1_2 + b1_s.slice(128, 64).load(gl.SliceLayout(0, l64)).to(gl.float32)[None, :]).to(dtype)
    if SAVE:
        gl.store(saved1_ptr + rows[:, None] * N1 + (128 + cols)[None, :], h1, mask=row_ok)
    acc2 = warpgroup_mma(gl.convert_layout(h1, a64), w2_bufs.index(2).permute((1, 0)), acc2)
    h1 = _relu(acc1_3 + b1_s.slice(192, 64).load(gl.SliceLayout(0, l64)).to(gl.float32)[None, :]).to(dtype)
    if SAVE:
        gl.store(saved1_ptr + rows[:, None] * N1 + (192 + cols)[None, :], h1, mask=row_ok)
    acc2 = warpgroup_mma(gl.convert_layout(h1, a64), w2_bufs.index(3).permute((1, 0)), acc2)
    b2 = gl.load(b2_ptr + cols).to(gl.float32)
    h2 = _relu(acc2 + b2[None, :]).to(dtype)
    if SAVE:
        gl.store(saved2_ptr + rows[:, None] * N2 + cols[None, :], h2, mask=row_ok)
    acc3 = warpgroup_mma(gl.convert_layout(h2, a3), w3_buf.permute((1, 0)), gl.zeros([BLOCK_M, N3_PAD], gl.float32, l3))
    cols3 = gl.arange(0, N3_PAD, layout=gl.SliceLayout(0, l3))
    rows3 = row_start + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, l3))
    b3 = gl.load(b3_ptr + cols3, mask=cols3 < N3, other=0.0).to(gl.float32)
    y = _relu(acc3 + b3[None, :]).to(dtype)
    gl.store(y_ptr + rows3[:, None] * N3 + cols3[None, :], y, mask=(rows3[:, None] < M) & (cols3[None, :] < N3))
    for i in gl.static_range(STAGES + 2):
        mbarrier.invalidate(bars.index(i))


def padded(w, rows, cols):
    """w in the top-left corner of a zero [rows, cols] tensor (TMA needs 16-byte rows; the MMAs 16 rows)."""
    out = torch.zeros(rows, cols, device=w.device, dtype=w.dtype)
    out[:w.shape[0], :w.shape[1]] = w
    return out


def make_desc(t, block):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    return TensorDescriptor.from_tensor(t, block, layout)


class SplitMLP:
    def __init__(self, weights, biases, split=4, chunk=64, block_m=64, save=True, async_mma=False, stop=0):
        self.stop = stop
        self.split, self.chunk, self.block_m, self.save, self.async_mma = split, chunk, block_m, save, async_mma
        w0, w1, w2, w3 = weights
        self.k0 = w0.shape[1]
        self.k0_pad = 16
        self.w0p, self.w3p = padded(w0, w0.shape[0], self.k0_pad), padded(w3, 16, w3.shape[1])
        self.n = [w.shape[0] for w in weights]
        n1s = self.n[1] // split
        self.descs = [make_desc(self.w0p, [chunk, self.k0_pad]), make_desc(w1, [n1s, chunk]),
                      make_desc(w2, [self.n[2], n1s]), make_desc(self.w3p, [16, self.n[2]])]
        self.biases = biases
        self.partial = None

    def __call__(self, x):
        M = x.shape[0]
        row_blocks = triton.cdiv(M, self.block_m)
        if self.partial is None or self.partial.shape[0] < row_blocks:
            self.partial = torch.empty(row_blocks, self.split, self.block_m, self.n[2], device=x.device,
                                       dtype=torch.float32)
            self.counter = torch.zeros(row_blocks, device=x.device, dtype=torch.int32)
        y = torch.empty(M, self.n[3], device=x.device, dtype=x.dtype)
        if self.save or self.stop == 2:
            saved = [torch.empty(M, n, device=x.device, dtype=x.dtype) for n in self.n[:3]]
        else:
            saved = [y, y, y]
        b = self.biases
        split_fwd_kernel[(row_blocks * self.split,)](
            x, self.descs[0], b[0], self.descs[1], b[1], self.descs[2], b[2], self.descs[3], b[3],
            y, self.partial, self.counter, saved[0], saved[1], saved[2], M, x.stride(0),
            K0=self.k0, K0_PAD=self.k0_pad, N0=self.n[0], N1=self.n[1], N2=self.n[2], N3=self.n[3], N3_PAD=16,
            SPLIT=self.split, SAVE=self.save, BLOCK_M=self.block_m, CHUNK=self.chunk, ASYNC=self.async_mma,
            STOP=self.stop,
            num_warps=4)
        return y, saved


class RowBlockMLP:
    """The bottom MLP on one program per 64-row block (``rowblock_fwd_kernel``)."""

    def __init__(self, weights, biases, save=True, stages=4):
        self.save, self.stages = save, stages
        w0, w1, w2, w3 = weights
        self.k0 = w0.shape[1]
        self.w0p, self.w3p = padded(w0, w0.shape[0], 16), padded(w3, 16, w3.shape[1])
        self.n = [w.shape[0] for w in weights]
        self.descs = [make_desc(self.w0p, [64, 16]), make_desc(w1, [64, 64]), make_desc(w2, [self.n[2], 64]),
                      make_desc(self.w3p, [16, self.n[2]])]
        self.biases = biases

    def __call__(self, x):
        M = x.shape[0]
        y = torch.empty(M, self.n[3], device=x.device, dtype=x.dtype)
        saved = [torch.empty(M, n, device=x.device, dtype=x.dtype) for n in self.n[:3]] if self.save else [y, y, y]
        b = self.biases
        rowblock_fwd_kernel[(triton.cdiv(M, 64),)](
            x, self.descs[0], b[0], self.descs[1], b[1], self.descs[2], b[2], self.descs[3], b[3],
            y, saved[0], saved[1], saved[2], M, x.stride(0),
            K0=self.k0, K0_PAD=16, N0=self.n[0], N1=self.n[1], N2=self.n[2], N3=self.n[3], N3_PAD=16,
            SAVE=self.save, BLOCK_M=64, STAGES=self.stages, num_warps=4)
        return y, saved


def rowblock(weights, biases, dev):
    """The one-program-per-row-block form against the library's kernel."""
    rows = []
    for M in (64, 2048, 8192, 65536):
        x = torch.randn(M, 13, device=dev).bfloat16()
        ref, hidden = reference(x, weights, biases)
        t_lib, t_lib_train, _ = library_times(x, weights, biases, ref)
        for stages in (2, 4):
            for save in (False, True):
                probe = RowBlockMLP(weights, biases, save=save, stages=stages)
                y, saved = probe(x)
                err = (y.double() - ref).abs().max().item()
                saved_err = max((s.double() - h).abs().max().item() for s, h in zip(saved, hidden)) if save else None
                rows.append(dict(M=M, stages=stages, training=save, probe_us=bench(lambda: probe(x)),
                                 library_us=t_lib_train if save else t_lib, err=err, saved_err=saved_err))
                print(rows[-1], flush=True)
    return rows


@triton.jit
def empty_kernel(y_ptr):
    pass


def bottom_mlp(dev):
    sizes = [13, 512, 256, 64, 16]
    weights = [(torch.randn(o, i, device=dev) / i**0.5).bfloat16() for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [(torch.randn(o, device=dev) * 0.1).bfloat16() for o in sizes[1:]]
    return weights, biases


def reference(x, weights, biases):
    out, hidden = x.double(), []
    for w, b in zip(weights, biases):
        out = torch.relu(out @ w.double().T + b.double())
        hidden.append(out)
    return out, hidden


def bench(fn):
    return round(triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3, 2)


def library_times(x, weights, biases, ref):
    """The library's kernel on x: (inference us, training-forward us, inference max abs error)."""
    import fusedmlp
    with torch.no_grad():
        lib = lambda: fusedmlp.mlp(x, weights, biases, "relu", "relu")  # noqa: E731
        err = (lib().double() - ref).abs().max().item()
        t_inference = bench(lib)
    xg = x.clone().requires_grad_()
    wg = [w.clone().requires_grad_() for w in weights]
    bg = [b.clone().requires_grad_() for b in biases]
    lib_train = lambda: fusedmlp.mlp(xg, wg, bg, "relu", "relu")  # noqa: E731
    lib_train()
    return t_inference, bench(lib_train), err


def against_library(weights, biases, dev):
    """The probe (split 4 and 8, synchronous MMAs) and the library's kernel, inference and
    training forwards (the latter writes every hidden layer's output)."""
    rows = []
    for M in (2048, 8192, 65536):
        x = torch.randn(M, 13, device=dev).bfloat16()
        ref, hidden = reference(x, weights, biases)
        t_lib, t_lib_train, lib_err = library_times(x, weights, biases, ref)
        for split in (4, 8):
            for save in (False, True):
                probe = SplitMLP(weights, biases, split=split, save=save)
                y, saved = probe(x)
                err = (y.double() - ref).abs().max().item()
                saved_err = max((s.double() - h).abs().max().item() for s, h in zip(saved, hidden)) if save else None
                same = torch.equal(y, probe(x)[0])
                rows.append(dict(M=M, split=split, training=save, probe_us=bench(lambda: probe(x)),
                                 library_us=t_lib_train if save else t_lib, err=err, library_err=lib_err,
                                 saved_err=saved_err, repeat_same_bits=same))
                print(rows[-1], flush=True)
    return rows


def stops(weights, biases, dev):
    """Split 4, inference: the kernel stopped after its loads (1), after layers 0-1 (2), after
    layer 2's partial store (3), whole (0); synchronous and pipelined (async) MMAs; one row
    block (4 programs) or 2048 / 8192 rows."""
    rows = [dict(what="empty kernel", us=bench(lambda: empty_kernel[(1,)](torch.empty(1, device=dev))))]
    print(rows[-1], flush=True)
    for M in (64, 2048, 8192):
        x = torch.randn(M, 13, device=dev).bfloat16()
        ref, _ = reference(x, weights, biases)
        for asy in (False, True):
            for stop in (1, 2, 3, 0):
                if stop == 1 and asy:
                    continue
                probe = SplitMLP(weights, biases, split=4, save=False, stop=stop, async_mma=asy)
                y, _ = probe(x)
                err = (y.double() - ref).abs().max().item() if stop == 0 else None
                rows.append(dict(M=M, programs=triton.cdiv(M, 64) * 4, asy=asy, stop=stop,
                                 us=bench(lambda: probe(x)), err=err))
                print(rows[-1], flush=True)
    return rows


def main():
    import json
    torch.manual_seed(0)
    dev = "cuda"
    weights, biases = bottom_mlp(dev)
    out = os.environ.get("OUT", ".")
    if len(sys.argv) > 1 and sys.argv[1] == "rowblock":
        with open(os.path.join(out, "rowblock_probe.json"), "w") as f:
            json.dump(rowblock(weights, biases, dev), f, indent=1)
        return
    with open(os.path.join(out, "split_probe_library.json"), "w") as f:
        json.dump(against_library(weights, biases, dev), f, indent=1)
    with open(os.path.join(out, "split_probe_stops.json"), "w") as f:
        json.dump(stops(weights, biases, dev), f, indent=1)


if __name__ == "__main__":
    main()
