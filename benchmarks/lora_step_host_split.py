"""Host time of a plain LoRA fwd+bwd step split into its forward and its backward.

    PYTHONPATH=src python3 benchmarks/lora_step_host_split.py [--shape 8192x1024x16]

The LoRA suite's inputs (fusedmlp/bench/suites/lora.py: identity, frozen W and bias, x, A
and B requiring gradients, bf16), the backward on the calling thread. For the fused op and
eager PEFT-style: wall microseconds per step of back-to-back steps (no sync; the GPU work of
a step is shorter than its host work), with the time to the end of the forward and of the
backward taken inside each step; then the same with Python's garbage collector off, and the
forward alone and the backward of a retained graph alone (benchmarks/lora_host_time.py's
figures, which do not add up to the step's)."""

import argparse
import gc
import statistics
import time

import torch

from fusedmlp.bench.suites import lora as lora_suite


def split_us(forward, inputs, wrt, g, steps=200, runs=5):
    """Median over runs of (forward, backward, step) host microseconds per step."""
    torch.autograd.grad(forward(*inputs), wrt, g)
    torch.cuda.synchronize()
    results = []
    for _ in range(runs):
        fwd = bwd = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            y = forward(*inputs)
            t1 = time.perf_counter()
            torch.autograd.grad(y, wrt, g)
            del y
            t2 = time.perf_counter()
            fwd += t1 - t0
            bwd += t2 - t1
        total = time.perf_counter() - start
        torch.cuda.synchronize()
        results.append((fwd / steps * 1e6, bwd / steps * 1e6, total / steps * 1e6))
    return tuple(statistics.median(r[i] for r in results) for i in range(3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8192x1024x16")
    args = parser.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    shape = tuple(int(v) for v in args.shape.split("x"))
    inputs, g = lora_suite._make_inputs(shape, torch.bfloat16)
    wrt = [t for t in inputs if t.requires_grad]
    print(f"{shape} {torch.cuda.get_device_name()} torch {torch.__version__}; host us per step (fwd / bwd / step)")
    for impl in ("fused", "eager"):
        forward = lora_suite._forward_fn(impl)
        for collector in (True, False):
            (gc.enable if collector else gc.disable)()
            fwd, bwd, step = split_us(forward, inputs, wrt, g)
            print(f"  {impl:6} gc {'on ' if collector else 'off'}: {fwd:7.1f} / {bwd:7.1f} / {step:7.1f}", flush=True)
        gc.enable()


if __name__ == "__main__":
    main()
