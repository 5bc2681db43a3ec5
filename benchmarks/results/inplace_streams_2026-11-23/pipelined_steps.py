"""Probe (throwaway): the GLU stream with its row steps software-pipelined (loads of the next
step issued before the stores of this one), in place and out of place. Writes $OUT/pipe.json."""
import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from fusedmlp.kernels.gemm import stream_row_block
from fusedmlp.kernels.glu import _glu_dh

dev, dt = "cuda", torch.bfloat16


@triton.jit
def stream_pipe(g_ptr, h_ptr, dh_ptr, db_ptr, M, OUT, stride_gm, stride_hm, stride_dhm,
                BLOCK_M: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    tile_m, cols, mask_cols = stream_row_block(OUT, BLOCK_N)
    db1_rows = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    db2_rows = tl.zeros([SUB_M, BLOCK_N], dtype=tl.float32)
    for sub_start in tl.range(0, BLOCK_M, SUB_M, num_stages=STAGES):
        rows = tile_m.to(tl.int64) * BLOCK_M + sub_start + tl.arange(0, SUB_M)
        mask = (rows < M)[:, None] & mask_cols[None, :]
        h_ptrs = h_ptr + rows[:, None] * stride_hm + cols[None, :]
        x1 = tl.load(h_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        x2 = tl.load(h_ptrs + OUT, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :], mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        dh1, dh2, z = _glu_dh(g, x1, x2, "gelu_tanh")
        tl.debug_barrier()
        dh_ptrs = dh_ptr + rows[:, None] * stride_dhm + cols[None, :]
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
    for stages in (1, 2, 3):
        for sub, bn, warps in ((8, 128, 2), (16, 128, 4), (16, 128, 2), (8, 256, 2), (32, 128, 4)):
            grid = (triton.cdiv(n, 128) * triton.cdiv(out, bn),)

            def run(dest):
                stream_pipe[grid](g, h, dest, db, n, out, g.stride(0), h.stride(0), dest.stride(0), BLOCK_M=128,
                                  SUB_M=sub, BLOCK_N=bn, STAGES=stages, num_warps=warps, num_stages=1)
            t_out = do_bench(lambda: run(dh), warmup=20, rep=120)
            t_in = do_bench(lambda: run(h), warmup=20, rep=120)
            key = f"d{d} N{n} stages{stages} sub{sub} n{bn} w{warps}"
            res[key] = {"in_place": round(t_in, 4), "out_of_place": round(t_out, 4)}
            print(f"{key:40s} in {t_in:.4f} out {t_out:.4f}", flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "pipe.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "results": res}, f, indent=1)
