"""Probe (throwaway): why the GLU stream is slower in place; variants of its loads/stores and
configs, in place and out of place. Writes $OUT/probe3.json."""
import itertools
import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from fusedmlp.kernels.gemm import stream_row_block
from fusedmlp.kernels.glu import _glu_dh

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16


@triton.jit
def stream_variant(g_ptr, h_ptr, dh_ptr, db_ptr, M, OUT, stride_gm, stride_hm, stride_dhm,
                   BLOCK_M: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   LOAD_EVICT: tl.constexpr, STORE_MODE: tl.constexpr, BARRIER: tl.constexpr,
                   ORDER: tl.constexpr):
    tile_m, cols, mask_cols = stream_row_block(OUT, BLOCK_N)
    db1_rows = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    db2_rows = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    for sub_start in tl.range(0, BLOCK_M, SUB_M):
        rows = tile_m.to(tl.int64) * BLOCK_M + sub_start + tl.arange(0, SUB_M)
        mask = (rows < M)[:, None] & mask_cols[None, :]
        h_ptrs = h_ptr + rows[:, None] * stride_hm + cols[None, :]
        if LOAD_EVICT == 1:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        elif LOAD_EVICT == 2:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        elif LOAD_EVICT == 3:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        else:
            x1 = tl.load(h_ptrs, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dh1, dh2, z = _glu_dh(g, x1, x2, "gelu_tanh")
        if BARRIER:
            tl.debug_barrier()
        dh_ptrs = dh_ptr + rows[:, None] * stride_dhm + cols[None, :]
        if STORE_MODE == 1:
            tl.store(dh_ptrs, dh1.to(tl.bfloat16), mask=mask, cache_modifier=".cs")
            tl.store(dh_ptrs + OUT, dh2.to(tl.bfloat16), mask=mask, cache_modifier=".cs")
        elif STORE_MODE == 2:
            tl.store(dh_ptrs, dh1.to(tl.bfloat16), mask=mask, eviction_policy="evict_first")
            tl.store(dh_ptrs + OUT, dh2.to(tl.bfloat16), mask=mask, eviction_policy="evict_first")
        elif STORE_MODE == 3:
            tl.store(dh_ptrs, dh1.to(tl.bfloat16), mask=mask, eviction_policy="evict_last")
            tl.store(dh_ptrs + OUT, dh2.to(tl.bfloat16), mask=mask, eviction_policy="evict_last")
        else:
            tl.store(dh_ptrs, dh1.to(tl.bfloat16), mask=mask)
            tl.store(dh_ptrs + OUT, dh2.to(tl.bfloat16), mask=mask)
        db1_rows += dh1
        db2_rows += dh2
    ptrs = db_ptr + tile_m.to(tl.int64) * (2 * OUT) + cols
    tl.store(ptrs, tl.sum(db1_rows, axis=0), mask=mask_cols)
    tl.store(ptrs + OUT, tl.sum(db2_rows, axis=0), mask=mask_cols)


res = {}
for d, n in ((1024, 32768), (4096, 16384)):
    out = 4 * d
    g = torch.randn(n, out, device=dev, dtype=dt)
    h = torch.randn(n, 2 * out, device=dev, dtype=dt)
    dh = torch.empty_like(h)
    db = torch.empty(triton.cdiv(n, 128), 2 * out, device=dev, dtype=torch.float32)
    rows = {}
    variants = [(1, 0, True, 0), (0, 0, True, 0), (2, 0, True, 0), (3, 0, True, 0), (1, 1, True, 0),
                (1, 2, True, 0), (1, 3, True, 0), (1, 0, False, 0), (0, 1, True, 0), (3, 1, True, 0)]
    for (evict, store, barrier, order), (sub, bn, warps) in itertools.product(
            variants, ((8, 128, 2), (16, 128, 4), (32, 128, 4), (16, 256, 4), (64, 128, 8))):
        if (evict, store, barrier) != (1, 0, True) and (sub, bn, warps) not in ((8, 128, 2), (16, 128, 4)):
            continue
        grid = (triton.cdiv(n, 128) * triton.cdiv(out, bn),)

        def run(dest):
            stream_variant[grid](g, h, dest, db, n, out, g.stride(0), h.stride(0), dest.stride(0),
                                 BLOCK_M=128, SUB_M=sub, BLOCK_N=bn, LOAD_EVICT=evict, STORE_MODE=store,
                                 BARRIER=barrier, ORDER=order, num_warps=warps, num_stages=1)
        name = f"evict{evict} store{store} barrier{int(barrier)} sub{sub} n{bn} w{warps}"
        t_out = do_bench(lambda: run(dh), warmup=20, rep=150)
        t_in = do_bench(lambda: run(h), warmup=20, rep=150)
        rows[name] = {"out_of_place": round(t_out, 4), "in_place": round(t_in, 4)}
        print(f"d{d} N{n} {name:42s} out {t_out:.4f}  in {t_in:.4f}", flush=True)
    res[f"d{d} N{n}"] = rows

with open(os.path.join(os.environ.get("OUT", "."), "probe3.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": res}, f, indent=1)
