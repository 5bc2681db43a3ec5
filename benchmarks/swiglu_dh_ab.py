"""SwiGLU's fwd+bwd step, the library's path against two earlier ones and torch.compile's step,
side by side in one process: ``fused`` (the library: dh formed on a ping-pong kernel's tile, dx
as one dgrad kernel), ``fused_stream_dh`` (dh from cuBLAS's g plus the stream kernel: the path
before the 128 x 128 dh kernel, forced by declining the ping-pong dh kernel) and
``fused_cublas_dx`` (dx as cuBLAS's two products: the path before the dgrad kernel, forced by
declining it).

    python benchmarks/swiglu_dh_ab.py [--graphed] [TOKENSxDxHIDDEN ...]   (default 16384x4096x14336 16384x2048x5632 16384x1024x2816)

Per shape: each variant warmed up (compile compiles), then ``harness.stepwise_ms`` rotated: 4
rounds in each of which the variants take turns step by step, 10 steps each (the order rotated
by one every time, so that all share the board's clock drift under the sustained load), each
step timed alone with CUDA events after an L2 flush (at these shapes the GPU is the bound, not
the host), the first of a round not counted; a variant's time is the median of its round
medians (each round's are recorded too). With ``--graphed`` instead: each variant's step
captured in a CUDA graph (``capture_cuda_graph``; the variant's path in force during warm-up and
capture), the replays timed by ``harness.interleaved_ms`` (5 rounds, alternating order, L2
flushed before each replay), and the host microseconds per plain step
(``harness.host_us_per_call``: 50 back-to-back steps, no sync, median of 5 runs; each variant in
its own block). Also names the dh and dx kernels the library's step launched (torch.profiler).
Prints one JSON line per shape and writes $OUT/swiglu_dh_ab.json.
"""
import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fusedmlp
import fusedmlp.ops.glu as glu_ops
import fusedmlp.ops.swiglu as swiglu_ops
from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.harness import host_us_per_call, interleaved_ms, stepwise_ms, write_sweep

graphed = "--graphed" in sys.argv[1:]
shapes = [tuple(int(v) for v in s.split("x"))
          for s in ([a for a in sys.argv[1:] if a != "--graphed"]
                    or ["16384x4096x14336", "16384x2048x5632", "16384x1024x2816"])]
real_eligible = glu_ops.pingpong_eligible  # the same function in both ops modules


def without_dh_kernel(*tensors):
    """pingpong_eligible, but False for the h-kept dh kernel's operands (g, Wd, h, dh1, dh2, z)."""
    g, wd, h = tensors[:3]
    if len(tensors) == 6 and wd.shape[0] == g.shape[1] and h.shape[1] == 2 * wd.shape[1]:
        return False
    return real_eligible(*tensors)


def with_eligible(step, eligible, module=glu_ops):
    """``step`` run with ``eligible`` as ``module``'s pingpong_eligible."""
    def run():
        module.pingpong_eligible = eligible
        try:
            return step()
        finally:
            module.pingpong_eligible = real_eligible
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
    compiled = torch.compile(lambda *a: torch.nn.functional.linear(
        torch.nn.functional.silu(torch.nn.functional.linear(a[0], a[1])) * torch.nn.functional.linear(a[0], a[2]),
        a[3]))

    def fused_step():
        return torch.autograd.grad(fusedmlp.swiglu(x, *weights), wrt, gy)

    variants = {
        "fused": (fused_step, real_eligible, glu_ops),
        "fused_stream_dh": (fused_step, without_dh_kernel, glu_ops),
        "fused_cublas_dx": (fused_step, lambda *tensors: False, swiglu_ops),  # swiglu's only check: dx's
        "compile": (lambda: torch.autograd.grad(compiled(x, *weights), wrt, gy), real_eligible, glu_ops),
    }
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fused_step()
        torch.cuda.synchronize()
    dh_kernels = sorted({e.name for e in prof.events() if "glu_bwd" in e.name or "dgrad" in e.name})

    steps = {name: with_eligible(step, eligible, module) for name, (step, eligible, module) in variants.items()}
    for run in steps.values():  # warm-up (compile compiles)
        for _ in range(3):
            run()
    host = {}
    if graphed:
        rounds = interleaved_ms({name: capture_cuda_graph(run)[0].replay for name, run in steps.items()}, 5)
        host = {f"{name}_host_us": host_us_per_call(run, calls=50) for name, run in steps.items()}
    else:
        rounds = stepwise_ms(steps, 4, 10, 1, True)
    row = dict(shape=[tokens, d, hidden], graphed=graphed, dh_kernels=dh_kernels,
               **{f"{name}_ms": statistics.median(ms) for name, ms in rounds.items()},
               **{f"{name}_rounds_ms": ms for name, ms in rounds.items()}, **host)
    row["fused/compile"] = row["fused_ms"] / row["compile_ms"]
    row["fused_stream_dh/compile"] = row["fused_stream_dh_ms"] / row["compile_ms"]
    row["fused_cublas_dx/compile"] = row["fused_cublas_dx_ms"] / row["compile_ms"]
    rows.append(row)
    print(json.dumps(row), flush=True)
write_sweep("swiglu_dh_ab", rows)
