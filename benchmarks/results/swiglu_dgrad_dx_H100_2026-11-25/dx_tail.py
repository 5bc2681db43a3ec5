"""The GLU backwards' dx on the library's KN dgrad ping-pong kernel (kernels/lora.py
lora_dgrad_pingpong_kernel: dx = a @ W + t_a @ t_W, W and t_W [K, N] as stored) against cuBLAS.

SwiGLU: dx = d_up @ w_up + d_gate @ w_gate (the library: mm + addmm on cuBLAS); ours: one kernel,
the gate half as the tail. GEGLU: dx = dh @ W (cuBLAS mm); ours: the same kernel, no tail.
Rounds interleaved, do_bench (L2 flushed), medians; errors against float64.

    python dx_tail.py           the SwiGLU and GEGLU cases -> $OUT/dx_tail.json
    python dx_tail.py single    single products (linear_act's dx = dpre @ W, the GEGLU form with
                                other shapes) -> $OUT/dx_single.json"""
import json
import os
import statistics
import sys

import torch
from triton.testing import do_bench

from fusedmlp.kernels.configs import DGRAD_PINGPONG_CONFIG
from fusedmlp.kernels.linear_act import dgrad_pingpong_kernel
from fusedmlp.ops._common import launch_pingpong

dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
ROUNDS = 5
CASES = [("swiglu", 16384, 4096, 14336), ("swiglu", 16384, 512, 1792), ("swiglu", 65536, 512, 1792),
         ("swiglu", 8192, 4096, 14336), ("geglu", 32768, 1024, 4096), ("geglu", 8192, 1024, 4096),
         ("geglu", 16384, 2048, 8192), ("geglu", 8192, 4096, 16384)]
SINGLE = "single" in sys.argv[1:]
if SINGLE:
    CASES = [("geglu", 16384, 512, 896), ("geglu", 65536, 512, 896), ("geglu", 16384, 4096, 7168),
             ("geglu", 8192, 1024, 2048), ("geglu", 32768, 4096, 7168)]


def ours(a, w, t_a, t_w, dx, tail):
    m, n = dx.shape
    launch_pingpong(dgrad_pingpong_kernel, DGRAD_PINGPONG_CONFIG, m, n, SMS,
                    {"a_desc": a, "tail_a_desc": t_a}, {}, {"dx_desc": dx},
                    {"w_kn_desc": w, "tail_w_kn_desc": t_w}, M=m, N=n, K=w.shape[0], R=tail)


res = {"device": torch.cuda.get_device_name(), "rounds": ROUNDS, "config": DGRAD_PINGPONG_CONFIG, "cases": []}
for op, m, d, hidden in CASES:
    torch.manual_seed(0)
    dh = torch.randn(m, 2 * hidden, device=dev, dtype=torch.bfloat16)
    dx = torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    if op == "swiglu":
        w_up = (torch.randn(hidden, d, device=dev) / hidden ** 0.5).to(torch.bfloat16)
        w_gate = (torch.randn(hidden, d, device=dev) / hidden ** 0.5).to(torch.bfloat16)
        d_up, d_gate = dh[:, :hidden], dh[:, hidden:]
        ref = d_up.double() @ w_up.double() + d_gate.double() @ w_gate.double()

        def library():
            torch.mm(d_up, w_up, out=dx)
            dx.addmm_(d_gate, w_gate)

        def fused():
            ours(d_up, w_up, d_gate, w_gate, dx, hidden)
    else:
        w = (torch.randn(2 * hidden, d, device=dev) / (2 * hidden) ** 0.5).to(torch.bfloat16)
        ref = dh.double() @ w.double()

        def library():
            torch.mm(dh, w, out=dx)

        def fused():
            ours(dh, w, dh, w, dx, 0)
    errs = {}
    for name, fn in (("library", library), ("fused", fused)):
        dx.zero_()
        fn()
        torch.cuda.synchronize()
        errs[name] = ((dx.double() - ref).abs().max() / ref.abs().max()).item()
    times = {"library": [], "fused": []}
    for _ in range(ROUNDS):
        times["library"].append(do_bench(library, warmup=10, rep=60))
        times["fused"].append(do_bench(fused, warmup=10, rep=60))
    med = {k: statistics.median(v) for k, v in times.items()}
    res["cases"].append(dict(op=op, m=m, d=d, hidden=hidden, median_ms=med, rounds_ms=times, max_rel_err=errs))
    print(f"{op} {m} x {d}, hidden {hidden}: library {med['library']:.4f}  fused {med['fused']:.4f}  "
          f"ratio {med['fused'] / med['library']:.3f}  err {errs['library']:.2e} / {errs['fused']:.2e}  "
          f"rounds lib {[round(v, 4) for v in times['library']]} fused {[round(v, 4) for v in times['fused']]}",
          flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "dx_single.json" if SINGLE else "dx_tail.json"), "w") as f:
    json.dump(res, f, indent=1)
