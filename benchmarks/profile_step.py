"""Where the microseconds of one forward+backward go: device kernels vs host gaps.

    python benchmarks/profile_step.py [geglu|linear_act|swiglu] [D N [HIDDEN]] [--store]

geglu: GEGLU(D, 4D) on N rows (``--store``: recompute=False); linear_act: FusedLinear(D,
HIDDEN, gelu_tanh) (``--store``: save_preact=True); swiglu: SwiGLU(D, HIDDEN) (``--store``:
recompute=False, its default; otherwise recompute=True).

Runs the step under torch.profiler on a CUDA GPU and prints (1) the wall time per step,
(2) the summed device time of the kernels of one step, (3) each kernel with its duration,
in launch order. Wall time well above the kernel sum means the GPU waits for the host.
"""

import sys
import time

import torch

import fusedmlp


def main(argv):
    store = "--store" in argv
    op = next((a for a in argv if a in ("geglu", "linear_act", "swiglu")), "geglu")
    numbers = [int(a) for a in argv if a.isdigit()]
    d, n = numbers[:2] if len(numbers) >= 2 else (1024, 8192)
    hidden = numbers[2] if len(numbers) > 2 else 4 * d
    dev, dtype = "cuda", torch.bfloat16
    x = torch.randn(n, d, device=dev, dtype=dtype, requires_grad=True)
    if op == "geglu":
        layer = fusedmlp.GEGLU(d, hidden, recompute=not store)
    elif op == "linear_act":
        layer = fusedmlp.FusedLinear(d, hidden, activation="gelu_tanh", save_preact=store)
    else:
        layer = fusedmlp.SwiGLU(d, hidden, recompute=not store)
    layer = layer.to(dev, dtype)
    g = torch.randn_like(layer(x))

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
    print(f"{op} d={d} hidden={hidden} N={n} bf16 store={store}")
    print(f"wall per step         {wall_us:9.1f} us (mean of {steps} back-to-back steps)")
    print(f"device kernels / step {device_us:9.1f} us ({per_step} kernels)")
    for e in last:
        print(f"  {e.device_time:8.1f} us  {e.name[:90]}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main(sys.argv[1:])
