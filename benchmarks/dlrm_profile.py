"""Where the GPU time of one fused DLRM training step goes: the kernels of the bench suite's
``fused`` train step (Kaggle-size model, SGD) under torch.profiler, summed by kernel.

    python benchmarks/dlrm_profile.py [--batch 65536] [--dtype bf16] [--impl fused]
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from fusedmlp.bench.suites.dlrm import _steps

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--impl", default="fused")
    parser.add_argument("--mode", default="train", choices=("train", "infer"))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    steps, _ = _steps(args.impl, DTYPES[args.dtype], args.batch)
    step = steps[args.mode]
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.name[:90]
            count, us = totals.get(name, (0, 0.0))
            totals[name] = (count + 1, us + event.device_time)
    total = sum(us for _, us in totals.values()) / args.steps
    print(f"{args.impl} {args.mode} batch {args.batch} {args.dtype}: {total:.0f} us of kernels per step")
    for name, (count, us) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{us / args.steps:9.1f} us  {count // args.steps:3d}x  {name}")


if __name__ == "__main__":
    main()
