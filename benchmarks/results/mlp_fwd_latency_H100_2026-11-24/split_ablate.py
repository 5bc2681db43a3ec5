"""Prototype: bottom MLP forward with layer 1's columns split over S programs per row block;
the last program of a row block (atomic counter) sums the layer-2 partials and finishes."""
import itertools, json, os, sys
import torch, triton, triton.language as tl
from triton.testing import do_bench_cudagraph
import torch.nn.functional as F


@triton.jit
def bottom_split(x_ptr, w0, b0, w1, b1, w2, b2, w3, b3, y_ptr, s0, s1, s2, s3, part_ptr, cnt_ptr, M,
                 K0: tl.constexpr, N0: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr, N3: tl.constexpr,
                 K0P: tl.constexpr, BM: tl.constexpr, S: tl.constexpr, BC: tl.constexpr,
                 MODE: tl.constexpr = 0):
    pid = tl.program_id(0)
    if MODE == 1:  # empty: y only
        rows = pid.to(tl.int64) * BM + tl.arange(0, BM)
        n3 = tl.arange(0, N3)
        tl.store(y_ptr + rows[:, None] * N3 + n3[None, :], tl.zeros((BM, N3), dtype=tl.bfloat16), mask=rows[:, None] < M)
        return
    rb = pid // S
    s = pid % S
    rows = rb.to(tl.int64) * BM + tl.arange(0, BM)
    mrow = rows < M
    k0 = tl.arange(0, K0P)
    xt = tl.load(x_ptr + rows[:, None] * K0 + k0[None, :], mask=mrow[:, None] & (k0[None, :] < K0), other=0.0)
    N1S: tl.constexpr = N1 // S
    cols1 = s * N1S + tl.arange(0, N1S)
    acc1 = tl.zeros((BM, N1S), dtype=tl.float32)
    for c in tl.range(0, N0, BC):
        cc = c + tl.arange(0, BC)
        if MODE == 4 or MODE == 6:
            w0t = tl.load(w0 + cc[None, :] * K0P + k0[:, None])
        else:
            w0t = tl.load(w0 + cc[None, :] * K0 + k0[:, None], mask=k0[:, None] < K0, other=0.0)
        if MODE == 5:
            z0 = tl.zeros((BM, BC), dtype=tl.float32) + tl.load(b0 + cc)[None, :].to(tl.float32)
        else:
            z0 = tl.dot(xt, w0t) + tl.load(b0 + cc)[None, :].to(tl.float32)
        a0 = tl.maximum(z0, 0.0).to(tl.bfloat16)
        if (c // BC) % S == s and MODE != 3:
            tl.store(s0 + rows[:, None] * N0 + cc[None, :], a0, mask=mrow[:, None])
        if MODE != 2 and MODE != 6:
            w1t = tl.load(w1 + cols1[None, :] * N0 + cc[:, None])
            acc1 = tl.dot(a0, w1t, acc1)
        else:
            acc1 += tl.sum(a0.to(tl.float32), axis=1)[:, None]
    a1 = tl.maximum(acc1 + tl.load(b1 + cols1)[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
    tl.store(s1 + rows[:, None] * N1 + cols1[None, :], a1, mask=mrow[:, None])
    n2 = tl.arange(0, N2)
    w2t = tl.load(w2 + n2[None, :] * N1 + cols1[:, None])
    p2 = tl.dot(a1, w2t)
    r = tl.arange(0, BM)
    part = part_ptr + (rb * S).to(tl.int64) * (BM * N2)
    tl.store(part + s * BM * N2 + r[:, None] * N2 + n2[None, :], p2)
    tl.debug_barrier()
    done = tl.atomic_add(cnt_ptr + rb, 1, sem="acq_rel")
    if done == S - 1:
        z2 = tl.zeros((BM, N2), dtype=tl.float32)
        for j in tl.static_range(S):
            z2 += tl.load(part + j * BM * N2 + r[:, None] * N2 + n2[None, :], cache_modifier=".cg")
        a2 = tl.maximum(z2 + tl.load(b2 + n2)[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
        tl.store(s2 + rows[:, None] * N2 + n2[None, :], a2, mask=mrow[:, None])
        n3 = tl.arange(0, N3)
        w3t = tl.load(w3 + n3[None, :] * N2 + n2[:, None])
        a3 = tl.maximum(tl.dot(a2, w3t) + tl.load(b3 + n3)[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
        tl.store(s3 + rows[:, None] * N3 + n3[None, :], a3, mask=mrow[:, None])
        tl.store(y_ptr + rows[:, None] * N3 + n3[None, :], a3, mask=mrow[:, None])
        tl.store(cnt_ptr + rb, 0)



torch.manual_seed(0)
dt = torch.bfloat16
widths = (13, 512, 256, 64, 16)
ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(4)]
bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(4)]
def tiny():
    k = torch.empty(1, device="cuda")
    return lambda: k.add_(1)
print("one tiny torch kernel per replay-rep:", do_bench_cudagraph(tiny(), rep=200) * 1e3)
w0p = F.pad(ws[0], (0, 3)).contiguous()
for m in (2048, 8192):
    x = torch.randn(m, 13, device="cuda", dtype=dt)
    saved = [torch.empty(m, widths[i + 1], device="cuda", dtype=dt) for i in range(4)]
    y = torch.empty(m, 16, device="cuda", dtype=dt)
    cnt = torch.zeros(m, device="cuda", dtype=torch.int32)
    for bm, S, bc, w, st in [(16, 1, 64, 4, 2), (32, 2, 64, 4, 2), (64, 4, 64, 4, 2), (64, 1, 64, 4, 2)]:
        nrb = triton.cdiv(m, bm)
        part = torch.empty(nrb * S * bm * 64, device="cuda", dtype=torch.float32)
        for mode in (0, 2, 3, 4, 5, 6):
            grid = (nrb * S,)
            def run():
                bottom_split[grid](x, w0p if mode in (4, 6) else ws[0], bs[0], ws[1], bs[1], ws[2], bs[2], ws[3], bs[3], y, *saved, part, cnt, m,
                                   13, 512, 256, 64, 16, 16, bm, S, bc, MODE=mode, num_warps=w, num_stages=st)
            run()
            us = do_bench_cudagraph(run, rep=100) * 1e3
            print(f"{m:6d} BM{bm:3d} S{S} mode {mode} ({['full','empty','no W1 dot','no saves','W0 padded','no layer0','W0 padded, no W1 dot'][mode]}) {us:7.2f} us", flush=True)
