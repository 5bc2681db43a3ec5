"""Kernel times of the packed and the separate-weight SwiGLU training steps under torch.profiler, bf16.

    python benchmarks/packed_swiglu_profile.py [TOKENS D HIDDEN]   (default 16384 3072 8192: Phi-3 mini)

``packed``: fusedmlp.swiglu_packed on one [2*hidden, d] weight; ``separate``: fusedmlp.swiglu on two
weight tensors of their own (the same values). For each, alternately over 3 rounds: 10 untimed steps,
then 20 profiled (forward, backward with a fixed output gradient, gradients into ``.grad`` set to None
before each step), and the CUDA kernels' times summed over the 20 steps, per kernel name.
"""
import sys
from collections import defaultdict

import torch

from fusedmlp.bench.harness import profile_steps
from packed_swiglu import packed_steps, training_step  # benchmarks/, the script's folder

tokens, d, hidden = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (16384, 3072, 8192)
all_steps, g = packed_steps(tokens, d, hidden)
steps = {name: all_steps[name] for name in ("packed", "separate")}
print(f"{tokens} x {d} -> 2 x {hidden}, bf16, {torch.cuda.get_device_name()}, torch {torch.__version__}")
totals = defaultdict(lambda: defaultdict(list))
for round_ in range(3):
    for name, (forward, leaves) in steps.items():
        prof = profile_steps(training_step(forward, leaves, g))
        kernels = defaultdict(float)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels[event.name[:70]] += event.device_time / 20 / 1e3  # ms per step
        for kernel, ms in kernels.items():
            totals[name][kernel].append(ms)
        print(f"round {round_} {name:9s} kernels {sum(kernels.values()):.3f} ms per step", flush=True)
for name, kernels in totals.items():
    print(f"\n{name}: ms per step (rounds), kernel")
    for kernel, ms in sorted(kernels.items(), key=lambda item: -sum(item[1])):
        print(f"  {' '.join(f'{m:7.3f}' for m in ms)}  {kernel}")
