"""Probe (throwaway): confirm the in-place stream configs in interleaved rounds, and the GEGLU
store step with the old and the new in-place config. Writes $OUT/probe5.json."""
import json
import os

import torch
import triton
from triton.testing import do_bench

import fusedmlp
from fusedmlp.ops import glu as glu_ops
from fusedmlp.ops import linear_act as la_ops

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
res = {}
OLD = triton.Config({"SUB_M": 8, "BLOCK_N": 128}, num_warps=2, num_stages=1)
NEW = triton.Config({"SUB_M": 16, "BLOCK_N": 128}, num_warps=2, num_stages=1)

# the GEGLU store step (fwd+bwd through autograd), in-place stream forced old / new, 3 rounds
for d, n in ((1024, 32768), (2048, 16384), (4096, 8192), (1024, 8192)):
    x = torch.randn(n, d, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(8 * d, d, device=dev) / d ** 0.5).to(dt).requires_grad_()
    b = torch.randn(8 * d, device=dev, dtype=dt).requires_grad_()
    gy = torch.randn(n, 4 * d, device=dev, dtype=dt)

    def step():
        x.grad = w.grad = b.grad = None
        fusedmlp.geglu(x, w, b, recompute=False).backward(gy)

    times = {"old": [], "new": []}
    for rnd in range(3):
        for name in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            with glu_ops._stream_launchers[True, True].forcing(OLD if name == "old" else NEW):
                step()
                torch.cuda.synchronize()
                times[name].append(do_bench(step, warmup=10, rep=150))
    res[f"geglu store step d{d} N{n}"] = times
    print(f"geglu store step d{d} N{n}: old {[round(t, 3) for t in times['old']]} new "
          f"{[round(t, 3) for t in times['new']]}", flush=True)

# linear_act's in-place dpre: 16 x 128 / 4 warps against 32 x 128 / 2 warps, 3 rounds
A = triton.Config({"SUB_M": 16, "BLOCK_N": 128}, num_warps=4, num_stages=1)
B = triton.Config({"SUB_M": 32, "BLOCK_N": 128}, num_warps=2, num_stages=1)
for m, n, act in ((16384, 14336, "gelu_tanh"), (16384, 1792, "gelu_tanh"), (65536, 4096, "relu"),
                  (16384, 4096, "silu")):
    g = torch.randn(m, n, device=dev, dtype=dt)
    a = torch.randn(m, n, device=dev, dtype=dt)
    wt = torch.randn(n, 64, device=dev, dtype=dt)
    run = lambda: la_ops._launch_backward(g, a, wt, act, False, True, True, False, a)  # noqa: E731
    times = {"16x128w4": [], "32x128w2": []}
    for rnd in range(3):
        for name in (("16x128w4", "32x128w2") if rnd % 2 == 0 else ("32x128w2", "16x128w4")):
            with la_ops._dpre_in_place_launcher.forcing(A if name == "16x128w4" else B):
                run()
                torch.cuda.synchronize()
                times[name].append(do_bench(run, warmup=20, rep=150))
    res[f"dpre in place {m}x{n} {act}"] = times
    print(f"dpre in place {m}x{n} {act}: " + "; ".join(f"{k} {[round(t, 4) for t in v]}" for k, v in times.items()),
          flush=True)

with open(os.path.join(os.environ.get("OUT", "."), "probe5.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": res}, f, indent=1)
