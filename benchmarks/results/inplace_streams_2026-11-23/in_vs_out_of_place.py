"""Probe (throwaway): the store-mode GLU stream in place vs out of place, cold vs right after
the forward, on this GPU. Writes $OUT/probe2.json."""
import json
import os

import torch
import triton
from triton.testing import do_bench

from fusedmlp.ops import glu as glu_ops

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
res = {}


def events_ms(before, fn, reps=10):
    times = []
    for _ in range(reps):
        before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


for d, n in ((1024, 32768), (4096, 16384)):
    out = 4 * d
    x = torch.randn(n, d, device=dev, dtype=dt)
    w = (torch.randn(2 * out, d, device=dev) / d ** 0.5).to(dt)
    b = torch.randn(2 * out, device=dev, dtype=dt)
    w1, w2, b1, b2 = w[:out], w[out:], b[:out], b[out:]
    g = torch.randn(n, out, device=dev, dtype=dt)
    y, h = glu_ops.glu_forward_impl(x, w1, w2, b1, b2, "gelu_tanh", True)
    h_keep = h.clone()
    dh = torch.empty_like(h)
    nbytes = 5 * n * out * 2
    row = {}

    def stream(dest):
        return glu_ops._launch_bwd_dh(g, x, w1, w2, b1, b2, h, "gelu_tanh", None, False, dest)

    row["out_of_place_dobench"] = do_bench(lambda: stream(dh), warmup=20, rep=200)
    row["in_place_dobench"] = do_bench(lambda: stream(h), warmup=20, rep=200)
    h.copy_(h_keep)
    fwd = lambda: glu_ops.glu_forward_impl(x, w1, w2, b1, b2, "gelu_tanh", True)  # noqa: E731
    # right after a forward that wrote a fresh h (as in a training step)
    state = {}

    def run_fwd():
        state["h"] = fwd()[1]

    row["in_place_after_fwd"] = events_ms(run_fwd, lambda: glu_ops._launch_bwd_dh(
        g, x, w1, w2, b1, b2, state["h"], "gelu_tanh", None, False, state["h"]))
    row["out_of_place_after_fwd"] = events_ms(run_fwd, lambda: glu_ops._launch_bwd_dh(
        g, x, w1, w2, b1, b2, state["h"], "gelu_tanh", None, False, dh))
    flush = torch.empty(512 * 2**20, dtype=torch.int8, device=dev)
    row["in_place_after_flush"] = events_ms(lambda: (h.copy_(h_keep), flush.zero_()), lambda: stream(h))
    row["out_of_place_after_flush"] = events_ms(lambda: (h.copy_(h_keep), flush.zero_()), lambda: stream(dh))
    # the same stream with a gemm-heavy kernel just before (clocks under load)
    big = torch.randn(8192, 8192, device=dev, dtype=dt)
    row["in_place_after_gemm"] = events_ms(lambda: (h.copy_(h_keep), big @ big), lambda: stream(h))
    row["out_of_place_after_gemm"] = events_ms(lambda: (h.copy_(h_keep), big @ big), lambda: stream(dh))
    row = {k: round(v, 4) for k, v in row.items()}
    row["GBps_out_of_place_dobench"] = round(nbytes / row["out_of_place_dobench"] / 1e6)
    res[f"geglu d{d} N{n}"] = row
    print(f"d{d} N{n}", row, flush=True)

with open(os.path.join(os.environ.get("OUT", "."), "probe2.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": res}, f, indent=1)
