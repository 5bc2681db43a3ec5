"""The GLU forward kernel (SwiGLU's gate and up products, with h stored or not) under each tile
config, forced past the tuner, against two cuBLAS GEMMs writing the products into h; at the
LLM shape (16384 tokens, 4096 -> 14336) and the seed's (16384, 512 -> 1792), bf16.

    python benchmarks/glu_fwd_tiles.py      # on a Hopper GPU; writes $OUT/glu_fwd_tiles.json
"""
import json
import os

import torch
import triton
import triton.testing

from fusedmlp.ops import glu as G

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M), warps, stages: the first five are kernels/configs.py's
# _GLU_TILES (2026-11-21), the rest candidates
tiles = [
    ((128, 128, 64, 8), 8, 3), ((128, 64, 64, 8), 4, 4), ((128, 64, 64, 8), 8, 4), ((64, 128, 64, 8), 4, 4),
    ((128, 128, 32, 8), 8, 4),
    ((128, 128, 64, 8), 8, 4), ((128, 128, 64, 8), 8, 2), ((128, 128, 64, 16), 8, 3), ((128, 128, 64, 4), 8, 3),
    ((128, 128, 128, 8), 8, 2), ((128, 64, 128, 8), 4, 3), ((128, 128, 32, 8), 8, 6),
]
res = []
for tokens, d, hidden in ((16384, 4096, 14336), (16384, 512, 1792)):
    x = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    wu, wg = [(torch.randn(hidden, d, device="cuda") / d**0.5).to(torch.bfloat16) for _ in range(2)]
    h = torch.empty(tokens, 2 * hidden, device="cuda", dtype=torch.bfloat16)
    def cublas():
        torch.mm(x, wu.t(), out=h[:, :hidden]); torch.mm(x, wg.t(), out=h[:, hidden:])
    t = triton.testing.do_bench(cublas, warmup=50, rep=300, return_mode="median")
    print(f"{tokens}x{d}x{hidden} cuBLAS two GEMMs into h: {t:.4f} ms", flush=True)
    res.append(dict(shape=[tokens, d, hidden], impl="cublas", ms=t))
    ref, _ = G.glu_forward_impl(x, wu, wg, None, None, "silu", False)
    for (bm, bn, bk, gm), w, st in tiles:
        cfg = triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, PROGRAMS_PER_SM=1, FLATTEN=False),
                            num_warps=w, num_stages=st)
        for store in (True, False):
            try:
                with G._fwd_tma_launcher.forcing(cfg):
                    y, _ = G.glu_forward_impl(x, wu, wg, None, None, "silu", store)
                    err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                    t = triton.testing.do_bench(lambda: G.glu_forward_impl(x, wu, wg, None, None, "silu", store),
                                                warmup=50, rep=300, return_mode="median")
            except Exception as e:
                print(f"  {bm}x{bn}x{bk} g{gm} w{w} s{st} store={store}: {type(e).__name__}", flush=True)
                continue
            print(f"  {bm}x{bn}x{bk} g{gm} w{w} s{st} store={store}: {t:.4f} ms  err {err:.1e}", flush=True)
            res.append(dict(shape=[tokens, d, hidden], tile=[bm, bn, bk, gm, w, st], store=store, ms=t, err=err))
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "glu_fwd_tiles.json"), "w"), indent=1)
