"""linear_act ping-pong forward at K = 512: config variants against cuBLAS, timed as the bench
times graphed impls (do_bench: L2 flushed before each call) and warm (20 launches a graph)."""
import json, os, sys
import torch
import torch.nn.functional as F
import triton.testing
from fusedmlp.ops._common import launch_pingpong, num_sms
from fusedmlp.kernels.linear_act import linear_act_fwd_pingpong_kernel
from fusedmlp.kernels.configs import LINEAR_PINGPONG_CONFIG

dt = torch.bfloat16

def ours(x, w, b, y, act, cfg):
    m, k = x.shape
    n = w.shape[0]
    return lambda: launch_pingpong(linear_act_fwd_pingpong_kernel, cfg, m, n, num_sms(x), {"x_desc": x},
                                   {"w_desc": w}, {"y_desc": y, "pre_desc": y}, b_ptr=b, M=m, N=n, K=k, ACT=act,
                                   HAS_BIAS=True, STORE_PRE=False)

def graph(fn, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g

res = {}
shapes = [(16384, 512, 1792), (65536, 512, 1792), (16384, 1024, 4096)]
base = LINEAR_PINGPONG_CONFIG
variants = {
    "base": base,
    "S5": dict(base, STAGES=5),
    "G4": dict(base, GROUP_M=4),
    "G16": dict(base, GROUP_M=16),
    "S5G16": dict(base, STAGES=5, GROUP_M=16),
    "BK128S2": dict(base, BLOCK_K=128, STAGES=2),
}
for (m, k, n) in shapes:
    x = torch.randn(m, k, device="cuda", dtype=dt)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dt)
    b = torch.randn(n, device="cuda", dtype=dt)
    y = torch.empty((m, n), device="cuda", dtype=dt)
    fns = {"mm": lambda: torch.mm(x, w.t()), "linear": lambda: F.linear(x, w, b),
           "identity base": ours(x, w, b, y, "identity", base)}
    for name, cfg in variants.items():
        fns["gelu " + name] = ours(x, w, b, y, "gelu_tanh", cfg)
    cold = {nm: graph(fn, 1) for nm, fn in fns.items()}
    warm = {nm: graph(fn, 20) for nm, fn in fns.items()}
    t_cold = {nm: [] for nm in fns}
    t_warm = {nm: [] for nm in fns}
    for r in range(4):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for nm in order:
            t_cold[nm].append(triton.testing.do_bench(cold[nm].replay, warmup=50, rep=200, return_mode="median"))
            t_warm[nm].append(triton.testing.do_bench(warm[nm].replay, warmup=50, rep=200, return_mode="median") / 20)
    med = lambda v: sorted(v)[len(v) // 2]
    row = {nm: {"cold_us": med(t_cold[nm]) * 1e3, "warm_us": med(t_warm[nm]) * 1e3,
                "cold_rounds": t_cold[nm], "warm_rounds": t_warm[nm]} for nm in fns}
    res[f"{m}x{k}->{n}"] = row
    fl_c, fl_w = row["mm"]["cold_us"], row["mm"]["warm_us"]
    print(f"{m}x{k}->{n}  (cold / warm us, ratio to mm)")
    for nm, v in row.items():
        print(f"  {nm:16s} {v['cold_us']:7.1f} {v['cold_us']/fl_c:6.3f}x   {v['warm_us']:7.1f} {v['warm_us']/fl_w:6.3f}x")
    del cold, warm
with open(os.path.join(os.environ.get("OUT", "/tmp"), "k512_sweep.json"), "w") as f:
    json.dump(res, f, indent=1)
