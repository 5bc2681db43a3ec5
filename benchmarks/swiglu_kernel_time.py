"""GPU time per step of each SwiGLU bench impl that runs plain (not replayed from a CUDA graph):
the sum of the step's CUDA kernel and memory-operation durations under torch.profiler, so the
host's time between launches is left out. For peers that cannot be captured in a graph (QuACK)
where plain calls are bound by host time (d = 512).

    python benchmarks/swiglu_kernel_time.py [TOKENS D HIDDEN] [--impls a,b,...]
        (default 16384 512 1792; impls: fused, fused_recompute, compile, and liger, quack,
         quack_recompute where installed)

Each impl and mode: 5 untimed steps, then 3 profiled runs of 20 steps; prints each run's us per
step and writes the middle one to $OUT/swiglu_kernel_time.json (. by default).
"""
import argparse
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

from fusedmlp.bench import harness
from fusedmlp.bench.suites import swiglu as suite

parser = argparse.ArgumentParser()
parser.add_argument("shape", nargs="*", type=int, default=[16384, 512, 1792])
parser.add_argument("--impls", default=None)
args = parser.parse_args()
shape = tuple(args.shape)
impls = args.impls.split(",") if args.impls else [
    i for i in suite.default_impls() if i not in ("gemm",) and not i.endswith(harness.GRAPHED)]
inputs, g = suite._make_inputs(shape, torch.bfloat16)


def gpu_us_per_step(step, steps=20):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / steps


results = {}
for impl in impls:
    forward = suite._forward_fn(impl)
    own = harness.own_inputs(forward, inputs)
    wrt = [t for t in own if t.requires_grad]
    for mode, step in (("fwd", lambda: forward(*own)),
                       ("fwd+bwd", lambda: torch.autograd.grad(forward(*own), wrt, g))):
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        runs = sorted(gpu_us_per_step(step) for _ in range(3))
        results[f"{impl} {mode}"] = runs[1]
        print(impl, mode, [round(us, 1) for us in runs], flush=True)
record = dict(shape=dict(zip(suite.SHAPE_FIELDS, shape)), device=torch.cuda.get_device_name(),
              torch=torch.__version__, peers=harness.installed_versions(harness.PEER_DISTRIBUTIONS),
              us_per_step=results)
with open(os.path.join(os.environ.get("OUT", "."), "swiglu_kernel_time.json"), "w") as f:
    json.dump(record, f, indent=1)
