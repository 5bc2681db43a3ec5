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
    rb = pid // S
    s = pid % S
    rows = rb.to(tl.int64) * BM + tl.arange(0, BM)
    mrow = rows < M
    k0 = tl.arange(0, K0P)
    xt = tl.load(x_ptr + rows[:, None] * K0 + k0[None, :], mask=mrow[:, None] & (k0[None, :] < K0), other=0.0)
    N1S: tl.constexpr = N1 // S
    cols1 = s * N1S + tl.arange(0, N1S)
    acc1 = tl.zeros((BM, N1S), dtype=tl.float32)
    if MODE == 9:
        n2p = tl.arange(0, N2)
        n3p = tl.arange(0, N3)
        b1v = tl.load(b1 + cols1)
        b2v = tl.load(b2 + n2p)
        b3v = tl.load(b3 + n3p)
        w3v = tl.load(w3 + n3p[None, :] * N2 + n2p[:, None])
        cc = tl.arange(0, BC)
        w0_next = tl.load(w0 + cc[None, :] * K0 + k0[:, None], mask=k0[:, None] < K0, other=0.0)
        b0_next = tl.load(b0 + cc)
        for c in range(0, N0, BC):
            cc = c + tl.arange(0, BC)
            w0t = w0_next
            b0c = b0_next
            cn = cc + BC
            w0_next = tl.load(w0 + cn[None, :] * K0 + k0[:, None], mask=(k0[:, None] < K0) & (cn[None, :] < N0), other=0.0)
            b0_next = tl.load(b0 + cn, mask=cn < N0, other=0.0)
            z0 = tl.dot(xt, w0t) + b0c[None, :].to(tl.float32)
            a0 = tl.maximum(z0, 0.0).to(tl.bfloat16)
            if (c // BC) % S == s:
                tl.store(s0 + rows[:, None] * N0 + cc[None, :], a0, mask=mrow[:, None])
            w1t = tl.load(w1 + cols1[None, :] * N0 + cc[:, None])
            acc1 = tl.dot(a0, w1t, acc1)
    else:
        b1v = tl.load(b1 + cols1)
        for c in tl.range(0, N0, BC):
            cc = c + tl.arange(0, BC)
            w0t = tl.load(w0 + cc[None, :] * K0 + k0[:, None], mask=k0[:, None] < K0, other=0.0)
            z0 = tl.dot(xt, w0t) + tl.load(b0 + cc)[None, :].to(tl.float32)
            a0 = tl.maximum(z0, 0.0).to(tl.bfloat16)
            if (c // BC) % S == s:
                tl.store(s0 + rows[:, None] * N0 + cc[None, :], a0, mask=mrow[:, None])
            w1t = tl.load(w1 + cols1[None, :] * N0 + cc[:, None])
            acc1 = tl.dot(a0, w1t, acc1)
    a1 = tl.maximum(acc1 + b1v[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
    tl.store(s1 + rows[:, None] * N1 + cols1[None, :], a1, mask=mrow[:, None])
    n2 = tl.arange(0, N2)
    w2t = tl.load(w2 + n2[None, :] * N1 + cols1[:, None])
    p2 = tl.dot(a1, w2t)
    r = tl.arange(0, BM)
    part = part_ptr + (rb * S).to(tl.int64) * (BM * N2)
    if S > 1:
        tl.store(part + s * BM * N2 + r[:, None] * N2 + n2[None, :], p2)
        tl.debug_barrier()
        done = tl.atomic_add(cnt_ptr + rb, 1, sem="acq_rel")
    else:
        done = S - 1
    if done == S - 1:
        if S > 1:
            z2 = tl.zeros((BM, N2), dtype=tl.float32)
            for j in tl.static_range(S):
                z2 += tl.load(part + j * BM * N2 + r[:, None] * N2 + n2[None, :], cache_modifier=".cg")
        else:
            z2 = p2
        a2 = tl.maximum(z2 + (b2v if MODE == 9 else tl.load(b2 + n2))[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
        tl.store(s2 + rows[:, None] * N2 + n2[None, :], a2, mask=mrow[:, None])
        n3 = tl.arange(0, N3)
        w3t = w3v if MODE == 9 else tl.load(w3 + n3[None, :] * N2 + n2[:, None])
        a3 = tl.maximum(tl.dot(a2, w3t) + (b3v if MODE == 9 else tl.load(b3 + n3))[None, :].to(tl.float32), 0.0).to(tl.bfloat16)
        tl.store(s3 + rows[:, None] * N3 + n3[None, :], a3, mask=mrow[:, None])
        tl.store(y_ptr + rows[:, None] * N3 + n3[None, :], a3, mask=mrow[:, None])
        tl.store(cnt_ptr + rb, 0)



torch.manual_seed(0)
dt = torch.bfloat16
widths = (13, 512, 256, 64, 16)
ws = [torch.randn(widths[i + 1], widths[i], device="cuda", dtype=dt) / widths[i] ** 0.5 for i in range(4)]
bs = [torch.randn(widths[i + 1], device="cuda", dtype=dt) * 0.1 for i in range(4)]
for m in (16, 2048):
    x = torch.randn(m, 13, device="cuda", dtype=dt)
    ref = x.float()
    for w, b in zip(ws, bs):
        ref = torch.relu(F.linear(ref, w.float(), b.float()))
    saved = [torch.empty(m, widths[i + 1], device="cuda", dtype=dt) for i in range(4)]
    y = torch.empty(m, 16, device="cuda", dtype=dt)
    cnt = torch.zeros(m, device="cuda", dtype=torch.int32)
    for bm, S in [(16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (64, 4), (64, 8)]:
        if m == 16 and bm > 16: continue
        for bc, w, st in [(128, 4, 2), (256, 4, 1), (256, 4, 2), (512, 4, 1), (256, 8, 1), (512, 8, 1)]:
            if bc * (256 // S) * 2 * st > 160 * 1024: continue
            nrb = triton.cdiv(m, bm)
            part = torch.empty(nrb * S * bm * 64, device="cuda", dtype=torch.float32)
            out = []
            for mode in (0, 9):
                grid = (nrb * S,)
                def run():
                    bottom_split[grid](x, ws[0], bs[0], ws[1], bs[1], ws[2], bs[2], ws[3], bs[3], y, *saved, part, cnt, m,
                                       13, 512, 256, 64, 16, 16, bm, S, bc, MODE=mode, num_warps=w, num_stages=st)
                try:
                    y.zero_(); run(); torch.cuda.synchronize()
                    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                    us = do_bench_cudagraph(run, rep=100) * 1e3
                except Exception as e:
                    print(m, bm, S, bc, w, st, mode, "failed", type(e).__name__, str(e)[:80], flush=True); continue
                out.append(f"{us:6.2f} (err {err:.0e})")
            print(f"m {m:5d} BM{bm:3d} S{S} BC{bc:3d} w{w} st{st}  base / prefetch: {'  '.join(out)}", flush=True)
