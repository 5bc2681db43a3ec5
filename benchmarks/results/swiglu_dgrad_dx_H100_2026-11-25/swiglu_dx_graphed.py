"""SwiGLU's fwd+bwd step with dx as the dgrad ping-pong kernel (the library's path) against dx
as cuBLAS's two products (forced by declining the kernel), with the host out of the way and
with it in.

    python benchmarks/swiglu_dx_graphed.py [TOKENSxDxHIDDEN ...]   (default 16384x4096x14336 16384x2048x5632 16384x512x1792 65536x512x1792)

Per shape and variant: the step captured in a CUDA graph (``capture_cuda_graph``, the variant's
path in force during warm-up and capture), its replay timed by ``harness.interleaved_ms`` (5
rounds, alternating order, L2 flushed before each replay); and the host microseconds per plain
step (``harness.host_us_per_call``: back-to-back steps, no sync, the median of 5 runs of 50).
Prints one JSON line per shape and writes $OUT/swiglu_dx_graphed.json.
"""
import json
import statistics
import sys

import torch

import fusedmlp
import fusedmlp.ops.swiglu as swiglu_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import host_us_per_call, interleaved_ms, write_sweep

shapes = [tuple(int(v) for v in s.split("x"))
          for s in (sys.argv[1:] or ["16384x4096x14336", "16384x2048x5632", "16384x512x1792", "65536x512x1792"])]
real_eligible = swiglu_ops.pingpong_eligible


def with_dx_kernel(step, allowed):
    """``step`` run with the dgrad kernel allowed or declined (swiglu's only pingpong_eligible check)."""
    def run():
        swiglu_ops.pingpong_eligible = real_eligible if allowed else (lambda *tensors: False)
        try:
            return step()
        finally:
            swiglu_ops.pingpong_eligible = real_eligible
    return run


rows = []
for tokens, d, hidden in shapes:
    torch.manual_seed(0)
    dt = torch.bfloat16
    x = torch.randn(tokens, d, device="cuda", dtype=dt, requires_grad=True)
    weights = [(torch.randn(*shape, device="cuda", dtype=dt) / shape[1] ** 0.5).requires_grad_()
               for shape in [(hidden, d), (hidden, d), (d, hidden)]]
    gy = torch.randn(tokens, d, device="cuda", dtype=dt)
    wrt = [x, *weights]

    def step():
        return torch.autograd.grad(fusedmlp.swiglu(x, *weights), wrt, gy)

    variants = {"dgrad_kernel": with_dx_kernel(step, True), "cublas_dx": with_dx_kernel(step, False)}
    grads = {name: [t.clone() for t in run()] for name, run in variants.items()}
    dx_rel_diff = ((grads["dgrad_kernel"][0].double() - grads["cublas_dx"][0].double()).abs().max()
                   / grads["cublas_dx"][0].double().abs().max()).item()
    replays = {}
    for name, run in variants.items():
        graph = capture_cuda_graph(run)[0]
        replays[name] = graph.replay
    graphed = interleaved_ms(replays, 5)
    host = {name: host_us_per_call(run, calls=50) for name, run in variants.items()}
    row = dict(shape=[tokens, d, hidden], dx_rel_diff=dx_rel_diff,
               **{f"{name}_graphed_ms": statistics.median(ms) for name, ms in graphed.items()},
               **{f"{name}_graphed_rounds_ms": ms for name, ms in graphed.items()},
               **{f"{name}_host_us": us for name, us in host.items()})
    row["graphed dgrad_kernel/cublas_dx"] = row["dgrad_kernel_graphed_ms"] / row["cublas_dx_graphed_ms"]
    rows.append(row)
    print(json.dumps(row), flush=True)
write_sweep("swiglu_dx_graphed", rows)
