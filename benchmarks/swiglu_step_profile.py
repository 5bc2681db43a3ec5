"""Kernel times of one SwiGLU training step (fusedmlp.SwiGLU, store mode, bf16) under torch.profiler.

    python benchmarks/swiglu_step_profile.py [TOKENS D HIDDEN]     (default 16384 512 1792)

Runs 10 untimed steps, then profiles 20 (forward, backward into .grad, as a training loop
does: the later steps add into the gradients), and prints the CUDA kernel table.
"""
import sys
import torch
from torch.profiler import ProfilerActivity, profile

import fusedmlp

tokens, d, hidden = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (16384, 512, 1792)
dt = torch.bfloat16
module = fusedmlp.SwiGLU(d, hidden).cuda().to(dt)
x = torch.randn(tokens, d, device="cuda", dtype=dt, requires_grad=True)
g = torch.randn(tokens, d, device="cuda", dtype=dt)


def step():
    module(x).backward(g)


for _ in range(10):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(20):
        step()
    torch.cuda.synchronize()
print(f"SwiGLU {tokens} x {d} -> {hidden}, bf16, {torch.cuda.get_device_name()}, torch {torch.__version__}")
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
