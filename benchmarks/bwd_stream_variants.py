"""Where the GEGLU backward stream's time goes: variants of ``glu_bwd_stream_kernel`` written
out here with switches (db summed per step or once, with and without bias, fast division, the
barrier, eviction hints, silu and identity in place of gelu_tanh), each over 8 tile configs.
`python benchmarks/bwd_stream_variants.py` on a GPU; writes ``stream_variants.json`` to ``$OUT``.
The library kernel is the "db 2d" variant."""
import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from fusedmlp.kernels.gemm import stream_row_block

_C = tl.constexpr(0.7978845608028654)
_K = tl.constexpr(0.044715)


@triton.jit
def _sig(z, FAST_DIV: tl.constexpr):
    e = tl.exp(-tl.abs(z))
    if FAST_DIV:
        inv = tl.fdiv(tl.full(z.shape, 1.0, z.dtype), 1.0 + e, ieee_rounding=False)
    else:
        inv = 1.0 / (1.0 + e)
    return tl.where(z >= 0, inv, e * inv)


@triton.jit
def _vg(z, ACT: tl.constexpr, FAST_DIV: tl.constexpr):
    if ACT == "gelu_tanh":
        z2 = z * z
        u = _C * z * (1.0 + _K * z2)
        du = _C * (1.0 + 3.0 * _K * z2)
        s = _sig(2.0 * u, FAST_DIV)
        return z * s, s + 2.0 * z * s * (1.0 - s) * du
    elif ACT == "silu":
        s = _sig(z, FAST_DIV)
        return z * s, s * (1.0 + z * (1.0 - s))
    else:
        return z, tl.full(z.shape, 1.0, z.dtype)


@triton.jit
def var_kernel(g_ptr, h_ptr, dh_ptr, db_ptr, M, OUT, stride_gm, stride_hm, stride_dhm,
               ACT: tl.constexpr, HAS_BIAS: tl.constexpr, DB_2D: tl.constexpr, FAST_DIV: tl.constexpr,
               BARRIER: tl.constexpr, EVICT: tl.constexpr,
               BLOCK_M: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tile_m, cols, mask_cols = stream_row_block(OUT, BLOCK_N)
    db1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    db2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc1 = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    for sub_start in tl.range(0, BLOCK_M, SUB_M):
        rows = tile_m.to(tl.int64) * BLOCK_M + sub_start + tl.arange(0, SUB_M)
        mask = (rows < M)[:, None] & mask_cols[None, :]
        h_ptrs = h_ptr + rows[:, None] * stride_hm + cols[None, :]
        if EVICT:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        else:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        t, dt_ = _vg(x2, ACT, FAST_DIV)
        dh1 = g * t
        dh2 = g * x1 * dt_
        if BARRIER:
            tl.debug_barrier()
        dh_ptrs = dh_ptr + rows[:, None] * stride_dhm + cols[None, :]
        tl.store(dh_ptrs, dh1.to(dh_ptr.dtype.element_ty), mask=mask)
        tl.store(dh_ptrs + OUT, dh2.to(dh_ptr.dtype.element_ty), mask=mask)
        if HAS_BIAS:
            if DB_2D:
                acc1 += dh1
                acc2 += dh2
            else:
                db1 += tl.sum(dh1, axis=0)
                db2 += tl.sum(dh2, axis=0)
    if HAS_BIAS:
        if DB_2D:
            db1 = tl.sum(acc1, axis=0)
            db2 = tl.sum(acc2, axis=0)
        p = db_ptr + tile_m.to(tl.int64) * (2 * OUT) + cols
        tl.store(p, db1, mask=mask_cols)
        tl.store(p + OUT, db2, mask=mask_cols)


dev, dt = "cuda", torch.bfloat16
results = {}
for m, out in ((65536, 4096), (16384, 1792)):
    g = torch.randn(m, out, device=dev, dtype=dt)
    h = torch.randn(m, 2 * out, device=dev, dtype=dt)
    dh = torch.empty_like(h)
    db = torch.empty(triton.cdiv(m, 128), 2 * out, device=dev)
    nbytes = 5 * m * out * 2
    variants = {
        "base (tl.sum per step)": dict(ACT="gelu_tanh", HAS_BIAS=True, DB_2D=False, FAST_DIV=False, BARRIER=True, EVICT=True),
        "db 2d": dict(ACT="gelu_tanh", HAS_BIAS=True, DB_2D=True, FAST_DIV=False, BARRIER=True, EVICT=True),
        "no bias": dict(ACT="gelu_tanh", HAS_BIAS=False, DB_2D=True, FAST_DIV=False, BARRIER=True, EVICT=True),
        "db 2d fast div": dict(ACT="gelu_tanh", HAS_BIAS=True, DB_2D=True, FAST_DIV=True, BARRIER=True, EVICT=True),
        "db 2d fast div no barrier": dict(ACT="gelu_tanh", HAS_BIAS=True, DB_2D=True, FAST_DIV=True, BARRIER=False, EVICT=True),
        "db 2d fast div no evict": dict(ACT="gelu_tanh", HAS_BIAS=True, DB_2D=True, FAST_DIV=True, BARRIER=True, EVICT=False),
        "silu db 2d": dict(ACT="silu", HAS_BIAS=True, DB_2D=True, FAST_DIV=False, BARRIER=True, EVICT=True),
        "identity act db 2d": dict(ACT="identity", HAS_BIAS=True, DB_2D=True, FAST_DIV=False, BARRIER=True, EVICT=True),
    }
    for vname, meta in variants.items():
        for sub, bn, w in ((16, 64, 2), (8, 64, 2), (16, 32, 1), (32, 64, 2), (8, 128, 2), (32, 128, 4), (16, 128, 4), (64, 128, 8)):
            grid = (triton.cdiv(m, 128) * triton.cdiv(out, bn),)
            fn = lambda: var_kernel[grid](g, h, dh, db, m, out, g.stride(0), h.stride(0), dh.stride(0),  # noqa: E731
                                          **meta, BLOCK_M=128, SUB_M=sub, BLOCK_N=bn, num_warps=w, num_stages=1)
            fn()
            torch.cuda.synchronize()
            ms = do_bench(fn, warmup=20, rep=150)
            results[f"{m}x{out} {vname} sub{sub}_n{bn}_w{w}"] = ms
        best = min((v, k) for k, v in results.items() if k.startswith(f"{m}x{out} {vname} "))
        print(f"{m}x{out} {vname:28s} best {best[1].split()[-1]:16s} {best[0]:.4f} ms {nbytes / best[0] / 1e6:.0f} GB/s  | " +
              " ".join(f"{k.split()[-1]}={v:.3f}" for k, v in results.items() if k.startswith(f"{m}x{out} {vname} ")), flush=True)

with open(os.path.join(os.environ.get("OUT", "."), "stream_variants.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
