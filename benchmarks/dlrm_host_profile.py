"""Where the host time of one plain (not graphed) DLRM training step goes: the bench suite's
train step (Kaggle-size model, SGD, backward on the calling thread as ``dlrm train`` runs it)
timed per step, its CUDA kernels and launches counted, and its Python under cProfile.

    python benchmarks/dlrm_host_profile.py [--batch 2048] [--dtype bf16] [--impls fused,eager] [--top 30]
"""

import argparse
import cProfile
import io
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

from fusedmlp.bench.suites.dlrm import _steps

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _host_ms_per_step(step, steps):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--impls", default="fused,eager")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)  # the backward on this thread, as `dlrm train`
    for impl in args.impls.split(","):
        steps, _ = _steps(impl, DTYPES[args.dtype], args.batch)
        step = steps["train"]
        for _ in range(10):
            step()
        runs = sorted(_host_ms_per_step(step, args.steps) for _ in range(5))
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        launches = [e for e in prof.events() if e.name in ("cuLaunchKernel", "cudaLaunchKernel", "cuLaunchKernelEx",
                                                          "cudaLaunchKernelExC", "cudaMemsetAsync", "cudaMemcpyAsync")]
        gpu_us = sum(e.device_time for e in kernels) / 10
        print(f"\n=== {impl} train, batch {args.batch} {args.dtype}: {runs[2]:.3f} ms per step "
              f"(runs {', '.join(f'{r:.3f}' for r in runs)}), {len(kernels) / 10:.0f} GPU ops and "
              f"{len(launches) / 10:.0f} launch calls per step, {gpu_us:.0f} us of GPU time per step")
        counts = {}
        for e in launches:
            counts[e.name] = counts.get(e.name, 0) + 1
        print("launch calls per step:", {k: v // 10 for k, v in counts.items()})
        names = {}
        for e in kernels:
            names[e.name[:80]] = names.get(e.name[:80], 0) + 1
        for name, count in sorted(names.items(), key=lambda kv: -kv[1]):
            print(f"  {count // 10:3d}x {name}")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        profiler.disable()
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(args.top)
            body = text.getvalue()
            print(f"--- cProfile of {args.steps} steps by {order}")
            print(body[body.find("ncalls"):])


if __name__ == "__main__":
    main()
