"""The backward streams at the bench shapes, on one GPU: `python benchmarks/bwd_streams.py old|new|bug`.

- old / new: the op-level store-mode GLU stream (ops/glu.py ``_launch_bwd_dh``, out of place)
  and linear_act's dpre stream, ms and GB/s, with a 1 GiB copy as the bandwidth roofline;
  ``new`` also times every forced config (``SWEEP=0`` skips the GLU sweep). ``old`` is for
  running against an older tree (``PYTHONPATH=<old tree>/src``); it touches no new names.
- bug: the first store-mode backward of GEGLU and SwiGLU in a fresh process, against float64
  (run it with ``FUSEDMLP_AUTOTUNE=1``: the case the test suite's default leaves out).
Writes ``stream_<mode>.json`` to ``$OUT`` (default: the current folder).
"""
import json
import os
import sys

import torch
import triton
from triton.testing import do_bench

mode = sys.argv[1]
torch.manual_seed(0)
dt = torch.bfloat16
dev = "cuda"


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


if mode == "bug":
    import fusedmlp
    from fusedmlp.ops.glu import geglu_reference
    n, d = 4096, 1024
    x = torch.randn(n, d, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(8 * d, d, device=dev) / d**0.5).to(dt).requires_grad_()
    b = torch.randn(8 * d, device=dev, dtype=dt).requires_grad_()
    gy = torch.randn(n, 4 * d, device=dev, dtype=dt)
    fusedmlp.geglu(x, w, b, recompute=False).backward(gy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    geglu_reference(x64, w64, b64).backward(gy.double())
    for name, t, r in (("dx", x, x64), ("dW", w, w64), ("db", b, b64)):
        err = ((t.grad.double() - r.grad).norm() / r.grad.norm()).item()
        print(f"geglu first store backward, autotune on: {name} rel err {err:.3e}")
    xs = torch.randn(2, 2048, 512, device=dev, dtype=dt, requires_grad=True)
    mods = fusedmlp.SwiGLU(512, 1792, recompute=False).to(dev, dt)
    ref = fusedmlp.SwiGLU(512, 1792).to(dev, torch.float64)
    ref.load_state_dict(mods.state_dict())
    gys = torch.randn(2, 2048, 512, device=dev, dtype=dt)
    mods(xs).backward(gys)
    xr = xs.detach().double().requires_grad_()
    from fusedmlp.ops.swiglu import swiglu_reference
    swiglu_reference(xr, ref.gate_proj.weight, ref.up_proj.weight, ref.down_proj.weight).backward(gys.double())
    for name, t, r in (("dx", xs.grad, xr.grad), ("dW_gate", mods.gate_proj.weight.grad, ref.gate_proj.weight.grad),
                       ("dW_up", mods.up_proj.weight.grad, ref.up_proj.weight.grad)):
        err = ((t.double() - r).norm() / r.norm()).item()
        print(f"swiglu first store backward, autotune on: {name} rel err {err:.3e}")
    sys.exit(0)

from fusedmlp.ops import glu as glu_ops
from fusedmlp.ops import linear_act as la_ops

results = {}
# (name, M, OUT, bias, act, store_z)
GLU_SHAPES = [("geglu d1024 N65536", 65536, 4096, True, "gelu_tanh", False),
              ("geglu d4096 N16384", 16384, 16384, True, "gelu_tanh", False),
              ("geglu d1024 N8192", 8192, 4096, True, "gelu_tanh", False),
              ("swiglu d4096 chunk 8192 rows", 8192, 14336, False, "silu", True),
              ("swiglu d512 16384", 16384, 1792, False, "silu", True)]
for name, m, out, bias, act, store_z in GLU_SHAPES:
    g = torch.randn(m, out, device=dev, dtype=dt)
    h = torch.randn(m, 2 * out, device=dev, dtype=dt)
    x = torch.empty(m, 8, device=dev, dtype=dt)  # only its shape/dtype is read on this path
    w1 = torch.empty(out, 8, device=dev, dtype=dt)
    b1 = torch.zeros(out, device=dev, dtype=dt) if bias else None
    nbytes = (3 * m * out + 2 * m * out + (m * out if store_z else 0)) * 2
    fn = lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, b1, b1, h, act, None, store_z)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=50, rep=300)
    row = {"op_ms": ms, "op_GBps": gbps(nbytes, ms), "bytes": nbytes}
    if mode == "new" and os.environ.get("SWEEP", "1") == "1":
        dh = torch.empty(m, 2 * out, device=dev, dtype=dt)
        z = torch.empty(m, out if store_z else 0, device=dev, dtype=dt)
        for sub, bn, warps in ((32, 128, 4), (16, 128, 4), (16, 256, 4), (32, 256, 8), (64, 128, 8),
                               (8, 256, 4), (32, 64, 2), (16, 64, 2), (128, 128, 8), (64, 64, 4)):
            cfg = triton.Config({"SUB_M": sub, "BLOCK_N": bn}, num_warps=warps, num_stages=1)
            f2 = lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, b1, b1, h, act, None, store_z, dh, z if store_z else None)  # noqa: E731,E501
            with glu_ops._stream_launchers[bias, False].forcing(cfg):
                f2()
                torch.cuda.synchronize()
                t = do_bench(f2, warmup=30, rep=200)
            row[f"sub{sub}_n{bn}_w{warps}"] = t
    results[name] = row
    print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

copy_src = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
copy_dst = torch.empty_like(copy_src)
ms = do_bench(lambda: copy_dst.copy_(copy_src), warmup=50, rep=300)
results["copy 1 GiB"] = {"ms": ms, "GBps": gbps(2 << 30, ms)}
print("copy 1 GiB read+write", round(ms, 4), "ms", round(gbps(2 << 30, ms)), "GB/s")

# linear_act's dpre stream: (M, N, act)
for m, n, act in ((16384, 1792, "gelu_tanh"), (16384, 14336, "gelu_tanh"), (65536, 4096, "relu")):
    g = torch.randn(m, n, device=dev, dtype=dt)
    a = torch.randn(m, n, device=dev, dtype=dt)
    wt = torch.randn(n, 64, device=dev, dtype=dt)
    fn = lambda: la_ops._launch_backward(g, a, wt, act, False, True, True, False)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=50, rep=300)
    row = {"op_ms": ms, "op_GBps": gbps(3 * m * n * 2, ms)}
    if mode == "new":
        for cfg in la_ops._dpre_launcher.configs:
            with la_ops._dpre_launcher.forcing(cfg):
                fn()
                torch.cuda.synchronize()
                row[f"sub{cfg.kwargs['SUB_M']}_n{cfg.kwargs['BLOCK_N']}_w{cfg.num_warps}"] = do_bench(fn, warmup=30, rep=200)
    results[f"dpre {m}x{n} {act}"] = row
    print(f"dpre {m}x{n} {act}", {k: round(v, 4) for k, v in row.items()}, flush=True)

out = os.environ.get("OUT", ".")
with open(os.path.join(out, f"stream_{mode}.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": results}, f, indent=1)
