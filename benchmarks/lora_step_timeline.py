"""The kernels of a captured LoRA training step on a timeline: when each starts and ends.

    PYTHONPATH=src python3 benchmarks/lora_step_timeline.py [--shapes 8192x4096x16,...]

The lora suite's inputs (identity, bias, W frozen, x, A and B trained, bf16); the fused fwd+bwd
step captured through ``capture_cuda_graph``, replayed 5 times under torch.profiler, each replay
after an L2 flush. For the last replay, each kernel's start and end in us from the first
kernel's start (its stream shows as overlap: the dgrad kernel runs on a side stream beside
the rank products), its duration, and its name; the replay's span last.
"""

import argparse

import torch

from fusedmlp._cuda_graph import capture_cuda_graph
from fusedmlp.bench.suites import lora as lora_suite


def timeline(tokens, d, r):
    inputs, g = lora_suite._make_inputs((tokens, d, r), torch.bfloat16)
    forward = lora_suite._forward_fn("fused")
    wrt = [t for t in inputs if t.requires_grad]
    replay = capture_cuda_graph(lambda: torch.autograd.grad(forward(*inputs), wrt, g))[0].replay
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    for _ in range(3):
        replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            flush.zero_()
            replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    # the last replay: the kernels after the last flush (a fill kernel)
    last_flush = max(i for i, e in enumerate(kernels) if "fill" in e.name.lower() or "zero" in e.name.lower())
    step = kernels[last_flush + 1:]
    origin = step[0].time_range.start
    print(f"{tokens}x{d}x{r}")
    for e in step:
        start, end = e.time_range.start - origin, e.time_range.end - origin
        print(f"  {start:8.1f} {end:8.1f} {end - start:8.1f}  {e.name[:90]}")
    print(f"  span {max(e.time_range.end for e in step) - origin:.1f} us", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="8192x4096x16")
    args = parser.parse_args()
    for text in args.shapes.split(","):
        timeline(*(int(v) for v in text.split("x")))


if __name__ == "__main__":
    main()
