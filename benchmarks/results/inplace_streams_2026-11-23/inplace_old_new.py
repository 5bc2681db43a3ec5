"""Probe (throwaway): the GEGLU in-place stream, old config against new, at the shapes the
H200 sweep left out; 3 interleaved rounds. Writes $OUT/h200_check.json."""
import json
import os

import torch
import triton
from triton.testing import do_bench

from fusedmlp.ops import glu as glu_ops

dev, dt = "cuda", torch.bfloat16
OLD = triton.Config({"SUB_M": 8, "BLOCK_N": 128}, num_warps=2, num_stages=1)
NEW = triton.Config({"SUB_M": 16, "BLOCK_N": 128}, num_warps=2, num_stages=1)
res = {}
for d, n in ((1024, 8192), (2048, 16384), (1024, 65536), (4096, 8192)):
    out = 4 * d
    g = torch.randn(n, out, device=dev, dtype=dt)
    h = torch.randn(n, 2 * out, device=dev, dtype=dt)
    x = torch.empty(n, 8, device=dev, dtype=dt)
    w1 = torch.empty(out, 8, device=dev, dtype=dt)
    b1 = torch.zeros(out, device=dev, dtype=dt)
    run = lambda: glu_ops._launch_bwd_dh(g, x, w1, w1, b1, b1, h, "gelu_tanh", None, False, h)  # noqa: E731
    times = {"old": [], "new": []}
    for rnd in range(3):
        for name in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            with glu_ops._stream_launchers[True, True].forcing(OLD if name == "old" else NEW):
                run()
                torch.cuda.synchronize()
                times[name].append(round(do_bench(run, warmup=20, rep=150), 4))
    res[f"geglu in place d{d} N{n}"] = times
    print(f"d{d} N{n}", times, flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "h200_check.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "results": res}, f, indent=1)
