"""Where the microseconds of one GEGLU forward+backward go: device kernels vs host gaps.

    python benchmarks/profile_step.py [D N] [--recompute|--store]

Runs the step under torch.profiler on a CUDA GPU and prints (1) the wall time per step,
(2) the summed device time of the kernels of one step, (3) each kernel with its duration,
in launch order. Wall time well above the kernel sum means the GPU waits for the host.
"""

import sys
import time

import torch

import fusedmlp


def main(argv):
    recompute = "--store" not in argv
    numbers = [int(a) for a in argv if a.isdigit()]
    d, n = numbers if len(numbers) == 2 else (1024, 8192)
    dev, dtype = "cuda", torch.bfloat16
    x = torch.randn(n, d, device=dev, dtype=dtype, requires_grad=True)
    layer = fusedmlp.GEGLU(d, 4 * d, recompute=recompute).to(dev, dtype)
    g = torch.randn(n, 4 * d, device=dev, dtype=dtype)

    def step():
        y = layer(x)
        y.backward(g)

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    steps = 50
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall_us = (time.perf_counter() - start) / steps * 1e6

    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_step = len(kernels) // 5
    last = kernels[-per_step:] if per_step else []
    device_us = sum(e.device_time for e in last)
    print(f"GEGLU d={d} N={n} bf16 recompute={recompute}")
    print(f"wall per step         {wall_us:9.1f} us (mean of {steps} back-to-back steps)")
    print(f"device kernels / step {device_us:9.1f} us ({per_step} kernels)")
    for e in last:
        print(f"  {e.device_time:8.1f} us  {e.name[:90]}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main(sys.argv[1:])
