"""Kernels whose epilogues ptxas spilled: GEGLU's recompute dh (with and without a bias) and the
linear forward and dpre stream with gelu (erf form) next to gelu_tanh, in CUDA graphs.

    TAG=_name python benchmarks/epilogue_spills.py [geglu_dh] [linear]   (writes $OUT/epilogue_spills_name.json)

bf16, one process. geglu_dh: ``glu_backward_dh_impl`` with h recomputed (the ping-pong kernel on
Hopper) at three GEGLU shapes (N, d), beside the bare cuBLAS GEMM d -> 8d. linear: the forward
``linear_act_forward_impl`` (no pre-activation kept) with gelu and gelu_tanh, with and without a
bias, and the backward's dpre stream with db (``_launch_backward`` without dx), beside the GEMM.
To compare two trees (say kernels/activations.py before and after a change), run it in each.
"""
import json
import os
import sys

import torch

import fusedmlp.ops.glu as glu_ops
import fusedmlp.ops.linear_act as la_ops
from fusedmlp.bench.harness import graph_us, print_sweep_row

rows = []
which = sys.argv[1:] or ["geglu_dh", "linear"]
tag = os.environ.get("TAG", "")
torch.manual_seed(0)
dt = torch.bfloat16
if "geglu_dh" in which:
    for n, d in [(8192, 1024), (32768, 1024), (16384, 2048)]:
        x = torch.randn(n, d, device="cuda", dtype=dt)
        w = torch.randn(8 * d, d, device="cuda", dtype=dt) / d**0.5
        b = torch.randn(8 * d, device="cuda", dtype=dt)
        g = torch.randn(n, 4 * d, device="cuda", dtype=dt)
        w1, w2, b1, b2 = w[:4 * d], w[4 * d:], b[:4 * d], b[4 * d:]
        r = dict(kind="geglu_recompute_dh", shape=[n, d], gemm=graph_us(lambda: x @ w.t()),
                 bias=graph_us(lambda: glu_ops.glu_backward_dh_impl(g, x, w1, w2, b1, b2, None, "gelu_tanh")),
                 nobias=graph_us(lambda: glu_ops.glu_backward_dh_impl(g, x, w1, w2, None, None, None, "gelu_tanh")))
        rows.append(r)
        print_sweep_row(r)
if "linear" in which:
    for m, k, n in [(16384, 512, 1792), (8192, 1024, 4096), (16384, 4096, 14336)]:
        x = torch.randn(m, k, device="cuda", dtype=dt)
        w = torch.randn(n, k, device="cuda", dtype=dt) / k**0.5
        b = torch.randn(n, device="cuda", dtype=dt)
        r = dict(kind="linear_act_fwd", shape=[m, k, n], gemm=graph_us(lambda: x @ w.t()))
        for act in ("gelu", "gelu_tanh"):
            for bias in (True, False):
                r[act + ("_bias" if bias else "")] = graph_us(
                    lambda: la_ops.linear_act_forward_impl(x, w, b if bias else None, act, False))
        pre = torch.randn(m, n, device="cuda", dtype=dt)
        gy = torch.randn(m, n, device="cuda", dtype=dt)
        for act in ("gelu", "gelu_tanh"):  # dpre = gy * act'(pre) and db's partials, no dx
            r[act + "_dpre_stream"] = graph_us(
                lambda: la_ops._launch_backward(gy, pre, w, act, False, True, True, False))
        rows.append(r)
        print_sweep_row(r)
with open(os.path.join(os.environ.get("OUT", "."), f"epilogue_spills{tag}.json"), "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=__import__("triton").__version__,
                   command=f"TAG={tag} python benchmarks/epilogue_spills.py " + " ".join(sys.argv[1:]), rows=rows), f,
              indent=1)
