"""The backward streams' configs written over their inputs (the store modes' in-place backward:
GEGLU's dh over h, SwiGLU's dh over h and z over g, linear_act's dpre over the saved
pre-activation) against the same kernels writing new tensors, every config of CONFIGS forced.

    python benchmarks/inplace_streams.py        (QUICK=1: six configs, fewer shapes)

Prints each config's times and the best of each column; writes $OUT/inplace_streams.json
(OUT defaults to the current folder). benchmarks/NOTES.md, "The backward streams written over
their inputs", has what it found."""
import json
import os

import torch
import triton
from triton.testing import do_bench

from fusedmlp.ops import glu as glu_ops
from fusedmlp.ops import linear_act as la_ops

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
QUICK = os.environ.get("QUICK", "0") == "1"
CONFIGS = [(8, 128, 2), (16, 128, 4), (32, 128, 4), (16, 256, 4), (32, 256, 8), (64, 128, 8), (32, 64, 2),
           (64, 64, 4), (8, 256, 2), (16, 128, 2), (32, 128, 2), (64, 128, 4), (16, 256, 8), (32, 256, 4)]
if QUICK:
    CONFIGS = [(8, 128, 2), (16, 128, 4), (16, 128, 2), (8, 256, 2), (32, 128, 2), (64, 128, 8)]
res = {}


def sweep(name, launchers, run_in, run_out):
    rows = {}
    for sub, bn, warps in CONFIGS:
        cfg = triton.Config({"SUB_M": sub, "BLOCK_N": bn}, num_warps=warps, num_stages=1)
        with launchers[0].forcing(cfg), launchers[1].forcing(cfg):
            run_in()
            run_out()
            torch.cuda.synchronize()
            t_in = do_bench(run_in, warmup=20, rep=120)
            t_out = do_bench(run_out, warmup=20, rep=120)
        rows[f"sub{sub} n{bn} w{warps}"] = {"in_place": round(t_in, 4), "out_of_place": round(t_out, 4)}
        print(f"{name:34s} sub{sub:<3d} n{bn:<3d} w{warps}  in {t_in:.4f}  out {t_out:.4f}", flush=True)
    res[name] = rows


# GEGLU's store stream (bias, gelu_tanh): dh over h
for d, n in ((1024, 32768), (4096, 16384)) if QUICK else ((1024, 32768), (4096, 16384), (2048, 16384), (1024, 8192)):
    out = 4 * d
    g = torch.randn(n, out, device=dev, dtype=dt)
    h = torch.randn(n, 2 * out, device=dev, dtype=dt)
    dh = torch.empty_like(h)
    x = torch.empty(n, 8, device=dev, dtype=dt)
    w1 = torch.empty(out, 8, device=dev, dtype=dt)
    b1 = torch.zeros(out, device=dev, dtype=dt)
    sweep(f"geglu d{d} N{n}", (glu_ops._stream_launchers[True, True], glu_ops._stream_launchers[True, False]),
          lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, b1, b1, h, "gelu_tanh", None, False, h),
          lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, b1, b1, h, "gelu_tanh", None, False, dh))

# SwiGLU's store stream at d = 4096 (no bias, silu, z): dh over h, z over g
for n, out in ((8192, 14336),) if QUICK else ((8192, 14336), (16384, 4096)):
    g = torch.randn(n, out, device=dev, dtype=dt)
    h = torch.randn(n, 2 * out, device=dev, dtype=dt)
    dh, z = torch.empty_like(h), torch.empty_like(g)
    x = torch.empty(n, 8, device=dev, dtype=dt)
    w1 = torch.empty(out, 8, device=dev, dtype=dt)
    sweep(f"swiglu {n}x{out}", (glu_ops._stream_launchers[False, True], glu_ops._stream_launchers[False, False]),
          lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, None, None, h, "silu", None, True, h, g),
          lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, None, None, h, "silu", None, True, dh, z))

# linear_act's dpre stream: dpre over the saved pre-activation
for m, n, act in (((16384, 14336, "gelu_tanh"), (65536, 4096, "relu")) if QUICK else
                  ((16384, 14336, "gelu_tanh"), (16384, 1792, "gelu_tanh"), (65536, 4096, "relu"))):
    g = torch.randn(m, n, device=dev, dtype=dt)
    a = torch.randn(m, n, device=dev, dtype=dt)
    wt = torch.randn(n, 64, device=dev, dtype=dt)
    # compute_dx off: the stream alone
    sweep(f"dpre {m}x{n} {act}", (la_ops._dpre_in_place_launcher, la_ops._dpre_launcher),
          lambda: la_ops._launch_backward(g, a, wt, act, False, True, True, False, a),
          lambda: la_ops._launch_backward(g, a, wt, act, False, True, True, False))

for name, rows in res.items():
    best_in = min(rows, key=lambda k: rows[k]["in_place"])
    best_out = min(rows, key=lambda k: rows[k]["out_of_place"])
    print(f"SUMMARY {name:30s} best in place {best_in} {rows[best_in]['in_place']:.4f}; "
          f"best out of place {best_out} {rows[best_out]['out_of_place']:.4f}", flush=True)

with open(os.path.join(os.environ.get("OUT", "."), "inplace_streams.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": res}, f, indent=1)
